"""The HTTP doors answer each kind of Threadline error with its status and a bug with a JSON 500
that says so, its traceback in the server's log and never in the answer. The API and the
webhook ingress run in this process (real Tornado, real HTTP server, real Postgres and a real
token) so that one call inside them can be made to raise."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import tornado.web
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from console import api, data
from engine_adapter.ingress import hooks
from engine_adapter.model.errors import Conflict, Invalid, NotFound, Refused
from engine_adapter.read import run_list
from engine_adapter.testing import harness

STATUS = {NotFound: 404, Refused: 403, Invalid: 400, Conflict: 409}
BUG = "internal error: a bug in Threadline; its traceback is in the server's log"


def call(url: str, method: str = "GET", token: str | None = None, body: bytes | None = None):
    request = urllib.request.Request(url, data=body, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def raising(err: BaseException) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise err

    return call


@pytest.fixture
def api_base(db_url: str) -> Iterator[tuple[str, str]]:
    """The API in a thread of this process, and a viewer's token minted by the CLI."""
    assert harness.run_cli(db_url, "user", "add", "dash").returncode == 0
    done = harness.run_cli(db_url, "token", "create", "dash", "--role=viewer")
    assert done.returncode == 0, done.stderr
    data.configure(db_url)
    port = harness.free_port()
    started = threading.Event()
    loop = asyncio.new_event_loop()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        tornado.web.Application(api.handlers()).listen(port, "127.0.0.1")
        started.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    started.wait(10)
    try:
        yield f"http://127.0.0.1:{port}/api/v1", done.stdout.strip()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        if data._pool is not None:
            data._pool.close()
            data._pool = None
        data.configure(None)


@pytest.mark.parametrize("kind", list(STATUS))
def test_the_api_answers_each_kind_with_its_status(api_base, monkeypatch, kind):
    base, token = api_base
    monkeypatch.setattr(run_list, "runs_page", raising(kind("runs: what to change")))
    status, content_type, body = call(base + "/runs", token=token)
    assert (status, content_type) == (STATUS[kind], "application/json")
    assert json.loads(body) == {"error": "runs: what to change"}


def test_a_bug_in_the_api_is_a_json_500_and_its_traceback_is_logged(api_base, monkeypatch, caplog):
    base, token = api_base
    monkeypatch.setattr(run_list, "runs_page", raising(KeyError("next_cursor")))
    with caplog.at_level(logging.ERROR, logger=api.log.name):
        status, content_type, body = call(base + "/runs", token=token)
    assert (status, content_type) == (500, "application/json")
    assert json.loads(body) == {"error": BUG}  # no traceback, no class name
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "GET /runs failed" in logged and "KeyError: 'next_cursor'" in logged
    assert "Traceback (most recent call last)" in logged


@pytest.fixture
def hooks_base(db_url: str) -> Iterator[str]:
    """The webhook ingress in a thread of this process."""
    pool = ConnectionPool(
        db_url,
        min_size=1,
        max_size=2,
        open=True,
        kwargs={"autocommit": True, "row_factory": dict_row},
    )
    server = hooks._Server(
        "127.0.0.1", 0, pool, limits=hooks.Limits(), tolerance=300, open_to_network=False
    )
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        pool.close()


@pytest.mark.parametrize("kind", list(STATUS))
def test_the_ingress_answers_each_kind_with_its_status(hooks_base, monkeypatch, kind):
    monkeypatch.setattr(hooks, "receive", raising(kind("greet: what to change")))
    status, content_type, body = call(hooks_base + "/hooks/greet", "POST", body=b"{}")
    assert (status, content_type.split(";")[0]) == (STATUS[kind], "application/json")
    assert json.loads(body) == {"error": "greet: what to change"}


def test_a_bug_in_the_ingress_is_a_json_500_and_its_traceback_is_logged(
    hooks_base, monkeypatch, caplog
):
    monkeypatch.setattr(hooks, "receive", raising(KeyError("workflow")))
    with caplog.at_level(logging.ERROR, logger=hooks.log.name):
        status, content_type, body = call(hooks_base + "/hooks/greet", "POST", body=b"{}")
    assert (status, content_type.split(";")[0]) == (500, "application/json")
    assert json.loads(body) == {"error": BUG}
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "request to /hooks/greet failed" in logged and "KeyError: 'workflow'" in logged
