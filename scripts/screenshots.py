"""Regenerate the README's console screenshots into assets/ (not part of the tests, which must
leave the work tree clean).

    .venv/bin/python scripts/screenshots.py

Starts a private embedded Postgres, a conductor, bots and the console, makes a few runs, and
photographs the runs page and a run page in Debian's Chromium.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine_adapter.catalog.workflows import apply_recipe  # noqa: E402
from engine_adapter.recipes.recipes import load_recipe_text  # noqa: E402
from engine_adapter.runs.spawn import spawn  # noqa: E402
from engine_adapter.store import db, schema  # noqa: E402
from engine_adapter.testing import harness  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def require_emoji_font() -> None:
    """Without a colour emoji font the buttons' 👍/👎 photograph as empty boxes."""
    import subprocess

    fonts = subprocess.run(["fc-list"], capture_output=True, text=True).stdout
    if "Noto Color Emoji" not in fonts:
        sys.exit("install Debian's fonts-noto-color-emoji first: emoji would show as empty boxes")


DEMO = """slug: release-check
name: Release check
bot: local
steps:
  - id: checks
    parallel:
      tests:
        - id: tests
          run_command: printf 'collected 214 items\\n214 passed in 3.1s\\n'
      lint:
        - id: lint
          run_command: echo "lint clean"
  - id: investigate
    if: steps.tests.status == "failed"
    dispatch_task: "Why did the tests fail? {{ steps.tests.output }}"
  - id: cool-off
    sleep: 2s
  - id: approve
    human_gate: "Tests and lint are green for {{ payload.version }}. Ship it? Reply 👍 or 👎."
    timeout: 24h
  - id: tag
    run_command: echo "tagged {{ payload.version }}"
"""
FAILING = """slug: flaky-probe
name: Flaky probe
bot: local
steps:
  - id: probe
    run_command: echo "connection refused" >&2; exit 3
"""


def main() -> int:
    from playwright.sync_api import sync_playwright

    require_emoji_font()

    out = ROOT / "assets"
    home = Path(tempfile.mkdtemp(prefix="threadline-shots-"))
    with harness.throwaway_server(prefix="threadline-shots-pg-") as url:
        with db.connect(url) as conn:
            schema.migrate(conn)
            for text in (DEMO, FAILING):
                apply_recipe(conn, load_recipe_text(text))
            procs = harness.ProcessSet(url, home)
            port = harness.free_port()
            try:
                procs.start("conductor")
                procs.start("bots")
                procs.start("console", args=["--port", str(port)])
                for v in ("1.4.0", "1.4.1"):
                    spawn(conn, "release-check", {"version": v})
                for _ in range(2):
                    spawn(conn, "flaky-probe", {})
                waiting = spawn(conn, "release-check", {"version": "1.5.0"}).run_id
                harness.wait_for_state(url, waiting, "waiting", timeout=60)
                base = f"http://127.0.0.1:{port}"
                harness.wait_for(
                    lambda: harness.answers(base + "/recipes"), timeout=90, what="the console"
                )
                with sync_playwright() as p:
                    browser = p.chromium.launch(
                        executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
                    )
                    page = browser.new_page(viewport={"width": 1280, "height": 1000})
                    link = harness.run_cli(
                        url, "console", "link", "--port", str(port), home=procs.threadline_home
                    ).stdout.strip()
                    page.goto(link)  # signs in, then shows the runs page
                    page.wait_for_selector(".tl-counts")
                    time.sleep(2)
                    page.screenshot(path=str(out / "console-runs.png"))
                    page.goto(f"{base}/run?id={waiting}")
                    page.wait_for_selector("#tl-run-state:text-is('waiting')")
                    time.sleep(1)
                    page.screenshot(path=str(out / "console-run.png"), full_page=True)
                    browser.close()
            finally:
                procs.kill_all()
    shutil.rmtree(home, ignore_errors=True)
    print(f"wrote {out / 'console-runs.png'} and {out / 'console-run.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
