"""The console's pages and server. Every page shares one frame (navigation and the live
heartbeat badge) and has its own URL: /, /run?id=…&step=…, /needs-you, /recipes, /recipe?slug=…,
/conductors."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from engine_adapter.store import traces

from . import data
from .access import AccessError, configure, no_auth_session
from .live import hub

log = logging.getLogger("threadline.console")
# The largest request body the server reads at all (the API's own limit is lower, and it judges
# the token first): a page takes no uploads, so a 90 MB body is refused, not held in memory.
MAX_REQUEST_BODY = 1024 * 1024


def _arg(name: str) -> str | None:
    import panel as pn

    values = pn.state.session_args.get(name)
    return values[0].decode() if values else None


def runs_page() -> Any:
    from .layout import page
    from .runs_page import RunsPage

    return page("Runs", "/", RunsPage())


def run_page() -> Any:
    from .layout import error_page, page
    from .run_view import RunView

    run_id = _arg("id")
    if not run_id:
        return error_page(
            "Run", "/", "No run given: open a run from the runs list (/run?id=RUN_ID)."
        )
    view = RunView(run_id, step=_arg("step"))
    return page("Run", "/", view)


def needs_you_page() -> Any:
    from .layout import page
    from .needs_you import NeedsYouPage

    return page("Needs you", "/needs-you", NeedsYouPage())


def recipes_page() -> Any:
    from .layout import page
    from .recipes_page import RecipesPage

    return page("Recipes", "/recipes", RecipesPage())


def recipe_page() -> Any:
    from engine_adapter.catalog.workflows import WorkflowNotFound

    from .layout import error_page, page
    from .recipes_page import RecipeEditor

    slug = _arg("slug")
    try:
        editor = RecipeEditor(slug)
    except WorkflowNotFound as err:
        return error_page("Recipe", "/recipes", str(err))
    return page(f"Recipe {slug}" if slug else "New recipe", "/recipes", editor)


def proposals_page() -> Any:
    from .layout import page
    from .proposals_page import ProposalsPage

    return page("Proposals", "/proposals", ProposalsPage())


def conductors_page() -> Any:
    from .conductors_page import ConductorsPage
    from .layout import page

    return page("Conductors", "/conductors", ConductorsPage())


ROUTES: dict[str, Callable[[], Any]] = {
    "/": runs_page,
    "/run": run_page,
    "/needs-you": needs_you_page,
    "/recipes": recipes_page,
    "/recipe": recipe_page,
    "/conductors": conductors_page,
    "/proposals": proposals_page,
}


def serve(
    port: int = 5006,
    address: str = "127.0.0.1",
    url: str | None = None,
    *,
    no_auth: bool = False,
    link: bool = True,
) -> None:
    import panel as pn

    from engine_adapter.model.identity import os_user

    from . import api, metrics
    from .auth import NOT_SERVED, ConsoleAuth, NotServed

    access = configure(address, no_auth=no_auth)  # refuses a bad setup before anything starts
    data.configure(url)
    if no_auth and no_auth_session() is None:
        raise AccessError(
            "--no-auth: the database opens no session without sign-in here: only the install's "
            "owner turns sign-in off (`threadline up --no-auth`, or `threadline console "
            "--no-auth` with the owner's credentials)"
        )
    hub(url)
    traces.start("threadline-console")  # a run cancelled here sends its root span from here
    pn.extension("plotly", "tabulator", "codeeditor", notifications=False)
    origin = [f"{address}:{port}", f"localhost:{port}", f"127.0.0.1:{port}"]
    options = (
        {}
        if access.no_auth
        else {"auth_provider": ConsoleAuth(access), "cookie_secret": access.secret}
    )
    server = pn.serve(
        {path: fn for path, fn in ROUTES.items()},
        port=port,
        address=address,
        show=False,
        title="Threadline",
        websocket_origin=origin,
        start=False,
        http_server_kwargs={"max_body_size": MAX_REQUEST_BODY},
        **options,
    )
    # Ahead of Bokeh's own routes: a host-specific rule is tried before the wildcard ones.
    server._tornado.add_handlers(
        r".*", [(NOT_SERVED, NotServed), *api.handlers(), *metrics.handlers()]
    )
    host = "127.0.0.1" if address in ("0.0.0.0", "::") else address
    if access.no_auth:
        log.warning(
            "sign-in is OFF (--no-auth): every account on this machine can use the console as %s",
            os_user(),
        )
        print(f"console: http://{host}:{port}/ (sign-in OFF: --no-auth)", flush=True)
    elif link:
        print(f"console: {start_link(port, host)}", flush=True)
    server.start()
    stop_on_signals(server)
    quiet_closed_sockets(server.io_loop.asyncio_loop)
    server.io_loop.start()


def start_link(port: int, host: str) -> str:
    """A one-time sign-in link for the account running the console, minted with the owner's
    login where this process has it (only the owner keeps links); else where to get one."""
    import psycopg

    from engine_adapter.model.identity import os_user
    from engine_adapter.model.settings import NotConfigured, database_url
    from engine_adapter.store import db

    from . import tokens

    try:
        with db.connect(database_url()) as conn:
            token = tokens.mint(conn, os_user())
    except (psycopg.Error, NotConfigured):
        return (
            f"http://{host}:{port}/ (no sign-in link: this database login mints none; "
            "`threadline console link` prints one)"
        )
    return (
        f"{tokens.link(token, port, host)} (one-time sign-in link for {os_user()}; "
        "`threadline console link` prints another)"
    )


def quiet_closed_sockets(loop: Any) -> None:
    """A browser that leaves (a tab closed, a page changed) while the console writes to it is
    normal: Tornado reports the write it could not finish as a never-retrieved task exception
    with a traceback. Say it in one debug line instead; every other error is reported as ever."""
    from tornado.iostream import StreamClosedError
    from tornado.websocket import WebSocketClosedError

    def handler(loop: Any, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), (WebSocketClosedError, StreamClosedError)):
            log.debug("a browser left while the console wrote to it")
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def stop_on_signals(server: Any) -> None:
    """Ctrl-C (on `up`, it reaches the whole process group) or SIGTERM: close the browser
    sessions and stop the loop in order, rather than die inside Tornado writing to sockets that
    just closed (a WebSocketClosedError traceback on every stop)."""
    import signal

    def stop() -> None:
        server.stop()  # no new connections; the open ones close below
        for connection in list(server._tornado._clients):  # Bokeh's open websockets
            connection.detach_session()
            connection._socket.close()
        server.io_loop.add_callback(server.io_loop.stop)

    def on_signal(*_: object) -> None:
        server.io_loop.add_callback_from_signal(stop)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
