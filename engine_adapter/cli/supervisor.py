"""`threadline up`: Postgres, migrations, one conductor, one bot process, the console and the
webhook ingress, supervised.

A child that dies is restarted within two seconds and the restart is logged; Ctrl-C stops
everything, the embedded server last.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from engine_adapter.access import authorization
from engine_adapter.catalog.bot_backends import bots_without_backend, missing_line
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.model.errors import Conflict
from engine_adapter.model.settings import DATABASE_URL_ENV, port_from_env, threadline_home
from engine_adapter.recipes.recipes import load_recipe_file
from engine_adapter.sandbox.sandbox import detect
from engine_adapter.store import db, schema
from engine_adapter.store.roles import ensure_logins

log = logging.getLogger("threadline.up")
CONSOLE_PORT_ENV = "THREADLINE_CONSOLE_PORT"  # `up --port`'s default
HOOKS_PORT_ENV = "THREADLINE_HOOKS_PORT"  # `up --hooks-port`'s default
DEFAULT_CONSOLE_PORT = 5006
RECIPES_DIR = Path(__file__).resolve().parents[2] / "assets" / "recipes"


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = field(default=0.0)
    env: dict[str, str] = field(default_factory=dict)  # its own login, over the shared env

    def start(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(self.argv, env=env | self.env)
        self.started_at = time.monotonic()
        log.info("%s started (pid %s)", self.name, self.proc.pid)


def install_examples(url: str, home: Path) -> list[str]:
    """On first start only: apply the example recipes so a new user has something to run."""
    marker = home / "examples-installed"
    if marker.exists() or not RECIPES_DIR.is_dir():
        return []
    installed = []
    with db.connect(url) as conn:
        for path in sorted(RECIPES_DIR.glob("*.y*ml")):
            applied = apply_recipe(conn, load_recipe_file(path), source="create")
            installed.append(applied.slug)
    marker.write_text("\n".join(installed) + "\n")
    return installed


def ensure_port_free(port: int, what: str = "console", flag: str = "--port") -> None:
    """Fail before starting anything, rather than restart a child that cannot bind, forever."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise Conflict(
                f"{what} port {port} on 127.0.0.1 is in use: pass {flag} N (or --no-{what})"
            ) from None


def pick_hooks_port(requested: int | None) -> int:
    """The requested port (refused if taken), else the default one, else any free one."""
    from engine_adapter.ingress.hooks import DEFAULT_PORT

    if requested:  # 0 or None: chosen here, so the URL printed is the one served
        ensure_port_free(requested, "hooks", "--hooks-port")
        return requested
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", DEFAULT_PORT))
        except OSError:
            probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers_http(port: int) -> bool:
    """Whether something answers HTTP on 127.0.0.1:port now (any status: it is serving)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def announce_console(url: str, port: int, no_auth: bool) -> None:
    """The console's address: with a one-time sign-in link (minted with the owner's login, url),
    or a warning when sign-in is off."""
    from console import tokens
    from engine_adapter.model.identity import os_user

    if no_auth:
        log.warning(
            "console: http://127.0.0.1:%d (sign-in OFF, --no-auth: every account on this machine "
            "can use it as %s)",
            port,
            os_user(),
        )
        return
    with db.connect(url) as conn:
        link = tokens.link(tokens.mint(conn, os_user()), port)
    log.info(
        "console: %s (one-time sign-in link for %s, valid %d minutes; `threadline console link` "
        "prints another)",
        link,
        os_user(),
        tokens.TTL_S // 60,
    )


def up(
    *,
    console: bool = True,
    port: int | None = None,
    hooks: bool = True,
    hooks_port: int | None = None,
    no_auth: bool = False,
) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s up %(levelname)s %(message)s")
    port = port or port_from_env(CONSOLE_PORT_ENV) or DEFAULT_CONSOLE_PORT
    if console:
        ensure_port_free(port)
    if hooks:
        hooks_port = pick_hooks_port(hooks_port or port_from_env(HOOKS_PORT_ENV))
    home = threadline_home()
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    if home.stat().st_mode & 0o077 and home.stat().st_uid == os.geteuid():
        home.chmod(0o700)  # it holds the credentials: for its owner only
        log.info("made %s private to its owner (0700)", home)
    # What the bot process will find: refused here, before anything starts, if it cannot be had.
    steps = detect()  # SandboxError (Invalid): says what to change
    from console.sessions import allow_no_auth
    from engine_adapter.model.identity import os_user
    from engine_adapter.store.embedded import EmbeddedPostgres, home_lock

    embedded = None
    url = os.environ.get(DATABASE_URL_ENV)
    # Made, started and set up under the home's lock: a command started meanwhile waits for it.
    with nullcontext() if url else home_lock(home):
        if url:
            log.info("using the database named by %s", DATABASE_URL_ENV)
        else:
            embedded = EmbeddedPostgres(home)
            url = embedded.start()
            log.info("embedded PostgreSQL running (data in %s)", embedded.data_dir)
        with db.connect(url) as conn:
            applied = schema.migrate(conn)
            authorization.sync_rules(conn)
            logins = ensure_logins(conn)  # each child connects as its own kind's role
            # Sign-in without a proof only while this `up` says so, for its own account.
            allow_no_auth(conn, os_user() if no_auth and console else None, os_user())
        if applied:
            log.info("migrations applied: %s", ", ".join(applied))
        examples = install_examples(url, home)
        if examples:
            log.info("example workflows installed: %s", ", ".join(examples))
    # Playground: the console offers to SIGKILL the conductor, since `up` restarts it.
    env = dict(os.environ, THREADLINE_PLAYGROUND="1")
    with db.connect(url) as conn:  # the bots process gets env: its backends are these
        missing = missing_line(bots_without_backend(conn, env))
    if missing:
        log.warning("%s", missing)
    me = [sys.executable, "-m", "engine_adapter.cli"]
    children = [Child("conductor", [*me, "conductor"]), Child("bots", [*me, "bots"])]
    if console:
        # `up` prints the sign-in link itself (below), so a restarted console does not print
        # another.
        children.append(
            Child(
                "console",
                me
                + ["console", "--port", str(port), "--no-link"]
                + (["--no-auth"] if no_auth else []),
            )
        )
    if hooks:
        children.append(Child("hooks", [*me, "hooks", "--port", str(hooks_port)]))
    for child in children:
        child.env = {DATABASE_URL_ENV: logins[child.name]}
    stopping = False

    def request_stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    for child in children:
        child.start(env)
    if hooks:
        log.info("webhooks: http://127.0.0.1:%d/hooks/<path>", hooks_port)
    (log.info if steps.isolated else log.warning)("steps run %s", steps.describe())
    # The sign-in link is printed once the console answers, so it works when it is clicked.
    link_due = console
    if not console:
        log.info("Threadline is up. Ctrl-C stops everything.")
    try:
        while not stopping:
            time.sleep(0.5)
            if link_due and answers_http(port):
                link_due = False
                announce_console(url, port, no_auth)
                log.info("Threadline is up. Ctrl-C stops everything.")
            for child in children:
                code = child.proc.poll() if child.proc else None
                if code is not None and not stopping:
                    child.restarts += 1
                    log.warning(
                        "%s exited with %s; restarting (restart #%d)",
                        child.name,
                        code,
                        child.restarts,
                    )
                    child.start(env)
    finally:
        for child in children:
            if child.proc and child.proc.poll() is None:
                child.proc.terminate()
        for child in children:
            if child.proc:
                try:
                    child.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.proc.kill()
        if embedded is not None:
            embedded.stop()
            log.info("embedded PostgreSQL stopped")
    return 0
