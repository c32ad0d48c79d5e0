"""One console server (with a conductor and bots) and one headless Chromium per test session.
Every test's page is signed in with a one-time link, minted by `threadline console link` as the
console's own account.

Every request to anything but 127.0.0.1 is blocked and recorded, and a test that caused one
fails: the console must work with no internet. Without Chromium the UI tests skip loudly, unless
THREADLINE_REQUIRE_UI_TESTS=1 (set by CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine_adapter.testing import harness

CHROMIUM = os.environ.get("THREADLINE_CHROMIUM", "/usr/bin/chromium")
REQUIRE_ENV = "THREADLINE_REQUIRE_UI_TESTS"
LOCAL = ("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:", "about:")


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if shutil.which(CHROMIUM) is None:
        message = (
            f"UI TESTS NOT RUN: no Chromium at {CHROMIUM} (install Debian's chromium, "
            f"as .ci/run does)"
        )
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(message + f"; {REQUIRE_ENV}=1 requires them")
        pytest.skip(message)
    return CHROMIUM


@pytest.fixture(scope="session")
def ui_db(clone_database: Any) -> Iterator[str]:
    with clone_database("tl_ui_") as url:
        yield url


class Stack:
    """The processes behind the console under test; the conductor can be killed and restarted."""

    def __init__(self, url: str, home: Path) -> None:
        self.url = url
        self.procs = harness.ProcessSet(url, home)
        self.port = harness.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.conductor = self.procs.start("conductor")
        self.procs.start("bots")
        self.procs.start(
            "console", env={"THREADLINE_PLAYGROUND": "1"}, args=["--port", str(self.port)]
        )
        harness.wait_for(
            lambda: harness.answers(self.base + "/recipes"),
            timeout=90,
            interval=0.3,
            what="the console to serve",
        )
        self.procs.wait_alive("conductor")

    def link(self, base: str | None = None) -> str:
        """A fresh one-time sign-in link (for base's console: the stack's by default)."""
        base = base or self.base
        done = harness.run_cli(
            self.url,
            "console",
            "link",
            "--port",
            base.rsplit(":", 1)[1],
            home=self.procs.threadline_home,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def restart_conductor(self) -> None:
        self.conductor = self.procs.start("conductor")
        self.procs.wait_alive("conductor")


@pytest.fixture(scope="session")
def stack(
    chromium_path: str, ui_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    s = Stack(ui_db, tmp_path_factory.mktemp("ui-stack"))
    yield s
    s.procs.kill_all()


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[Any]:
    """One browser per module: while Playwright's sync API is open, its event loop is the
    thread's running loop, and a later test in this worker would meet it (asyncio.run refuses to
    start inside a running loop; a live widget once handed its redraws to it, see
    explore/widgets.py)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=chromium_path,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
            ],
        )
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, stack: Stack, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    blocked: list[str] = []

    def route(r: Any) -> None:
        if r.request.url.startswith(LOCAL):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    pg = context.new_page()
    pg.set_default_timeout(20_000)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(stack.link())  # signs in, then lands on the runs page without the token
    pg.wait_for_selector(".tl-user")
    yield pg
    context.close()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(stack.procs.log_tails())
    assert blocked == [], f"the console asked for resources off this machine: {blocked}"
    assert errors == [], f"script errors in the page: {errors}"
