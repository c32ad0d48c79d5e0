"""The live run widget in a real JupyterLab (issue 25): a notebook shows a run waiting at a gate,
the gate is approved from the CLI, and the widget in the page says so, with no cell run again.

JupyterLab runs headless on a free loopback port with a token, its config and runtime in a
temporary folder; Chromium drives it; a real conductor and bot process run the run.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from engine_adapter import connect
from engine_adapter.testing import harness

RECIPE = Path(__file__).parents[2] / "assets" / "recipes" / "wait-for-reply.yaml"


@pytest.fixture
def jupyterlab(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A JupyterLab on 127.0.0.1 serving tmp_path/work; yields its base URL (with the token)."""
    work = tmp_path / "work"
    work.mkdir()
    port, token = harness.free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
    )
    log = (tmp_path / "jupyterlab.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={work}",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        harness.wait_for(
            lambda: harness.answers(f"{base}/api/status?token={token}"),
            timeout=90,
            interval=0.3,
            what="JupyterLab to serve",
        )
        yield f"{base}/lab/tree/widget.ipynb?token={token}", work
    finally:
        harness.kill(proc, 15)
        log.close()


def show_widget(page: Any, state: Any, tries: int = 3) -> None:
    """Run the notebook's cell until its widget shows: a kernel still starting, or a dialog
    asking which kernel, may swallow the first keystroke. (Before the decision, so it proves
    nothing either way; after it, no cell runs.)"""
    for _ in range(tries):
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
        for accept in page.locator(".jp-Dialog .jp-mod-accept").all():
            accept.click()
        page.click(".jp-Notebook .jp-Cell .cm-content")
        page.keyboard.press("Shift+Enter")
        try:
            state.wait_for(timeout=20_000)
            return
        except Exception:  # playwright's TimeoutError: press again
            continue
    raise AssertionError("the run widget never showed in JupyterLab")


def test_the_run_widget_in_jupyterlab_follows_a_cli_approval(
    apply, procs, db_url, logins, browser: Any, jupyterlab: tuple[str, Path]
):
    apply(RECIPE.read_text())
    procs.start("conductor")
    procs.start("bots")
    run = connect(url=db_url, write=True).spawn("wait-for-reply")
    harness.wait_for_state(db_url, run, "waiting")
    url, work = jupyterlab
    source = (
        "from engine_adapter import connect\n"
        f"w = connect(url={logins['viewer']!r}).run_widget({run!r})\n"
        "w"
    )
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source)], metadata={"kernelspec": kernel}
    )
    nbformat.write(nb, work / "widget.ipynb")

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        started = time.monotonic()
        page.goto(url)
        page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content")
        state = page.locator(".jp-OutputArea .tl-state")
        show_widget(page, state)
        assert state.inner_text() == "waiting"
        shown = time.monotonic()

        asked = time.monotonic()
        decided = harness.run_cli(db_url, "approve", run)
        assert decided.returncode == 0, decided.stderr
        approved = time.monotonic()
        page.wait_for_function(
            "() => document.querySelector('.jp-OutputArea .tl-state')?.innerText === 'completed'",
            timeout=30_000,
        )
        followed = time.monotonic()
        steps = page.locator(".jp-OutputArea").first.inner_text()
        assert "approve" in steps and "echo" in steps
        print(
            f"JupyterLab timings: page and widget shown {shown - started:.1f}s, "
            f"`threadline approve` took {approved - asked:.1f}s, the widget showed the run "
            f"completed {followed - asked:.1f}s after the command began"
        )
    finally:
        context.close()
