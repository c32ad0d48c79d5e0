"""`threadline hooks`: the webhook ingress.

POST /hooks/<path> starts a run of the workflow whose recipe declares that path, through the one
spawn door; GET /healthz says whether the database is reachable. Every refusal answers
{"error": ...} and creates nothing. Each request reads its trigger afresh (one indexed query), so a
newly applied recipe takes effect without a restart. Loopback by default: on any other address
every trigger must have a secret.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
import re
import signal
import socket
import socketserver
import threading
from dataclasses import dataclass, field
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from . import db
from .settings import database_url
from .spawn import SpawnError, spawn
from .webhook_auth import (DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, TOLERANCE_S,
                           SignatureError, verify)
from .webhook_spec import map_payload, secret_env
from .workflows import WorkflowNotFound

log = logging.getLogger("threadline.hooks")
DEFAULT_PORT = 5007
MAX_BYTES = 1 << 20
PREFIX = "/hooks/"
HEALTH = "/healthz"
_DELIVERY = re.compile(r"[\x21-\x7e]{1,200}")  # visible ASCII: it becomes part of a key
_LENGTH = re.compile(r"[0-9]{1,15}")


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def _error(status: int, message: str, **headers: str) -> Reply:
    return Reply(status, {"error": message}, headers)


@dataclass(frozen=True)
class Delivery:
    path: str  # after /hooks/
    body: bytes
    headers: Message  # case-insensitive get()
    caller: str  # the remote address


class _LostRace(Exception):
    """A concurrent request with the same delivery id or signature recorded its run first."""


def receive(conn: psycopg.Connection[Any], d: Delivery, *, open_to_network: bool = False,
            tolerance: float = TOLERANCE_S) -> Reply:
    """One POST /hooks/<path>: 202 with a new run, 200 with the run a repeat already started,
    or a refusal that creates nothing."""
    trigger = db.fetch_one(conn, "webhook_trigger", dict(path=d.path))
    if trigger is None:
        return _error(404, f"no webhook at {PREFIX}{d.path}")
    signature = None
    if trigger["secret"] is None:
        if open_to_network:  # a recipe applied after start-up may not weaken the bind rule
            return _error(403, f"webhook {d.path!r} has no secret and this ingress listens beyond "
                               "loopback: give it secret: env:NAME")
    else:
        name = secret_env(trigger["secret"])
        secret = os.environ.get(name)
        if not secret:  # fail closed, and keep the variable's name out of the answer
            log.error("webhook %s: its secret variable %s is not set for `threadline hooks`",
                      d.path, name)
            return _error(500, "this webhook's secret is not configured on the server")
        try:
            signature = verify(secret, d.headers.get(TIMESTAMP_HEADER),
                               d.headers.get(SIGNATURE_HEADER), d.body, tolerance=tolerance)
        except SignatureError as err:
            return _error(401, str(err))

    delivery = d.headers.get(DELIVERY_HEADER)
    if delivery is None:
        delivery = "sha256:" + hashlib.sha256(d.body).hexdigest()
    elif not _DELIVERY.fullmatch(delivery):
        return _error(400, f"{DELIVERY_HEADER} must be 1 to 200 visible ASCII characters")
    key = dict(path=d.path, delivery=delivery, signature=signature)
    seen = db.fetch_one(conn, "webhook_delivery_seen", key)
    if seen is not None:
        return _repeat(d.path, seen)
    if not trigger["enabled"]:
        return _error(409, f"workflow {trigger['workflow']!r} is disabled")
    try:
        payload = map_payload(parse_body(d.body), trigger["map"])
    except ValueError as err:
        return _error(400, str(err))

    run_trigger = {"kind": "webhook", "path": d.path, "delivery": delivery, "caller": d.caller}
    try:
        with conn.transaction():
            spawned = spawn(conn, trigger["workflow"], payload, trigger=run_trigger,
                            idempotency_key=f"webhook:{d.path}:{delivery}")
            recorded = db.fetch_one(conn, "insert_webhook_delivery",
                                    dict(key, run_id=spawned.run_id, caller=d.caller))
            if recorded is None:
                raise _LostRace  # roll our run back: the first one stands
    except _LostRace:
        return _repeat(d.path, db.fetch_one(conn, "webhook_delivery_seen", key))
    except SpawnError as err:  # e.g. disabled between the check above and the spawn
        return _error(409, str(err))
    except WorkflowNotFound as err:
        return _error(404, str(err))
    except psycopg.DataError as err:  # e.g. "\u0000", which PostgreSQL's jsonb refuses
        return _error(400, f"the body cannot be stored: {err.diag.message_primary}")
    status = 202 if spawned.created else 200
    return _accepted(status, {"run_id": spawned.run_id, "delivery": delivery})


def _repeat(path: str, seen: dict[str, Any]) -> Reply:
    """A repeat at its own path finds its run (200); a signed request captured at one path and
    resent to another (paths may share a secret) is refused: it starts nothing there, and the
    answer does not hand out another workflow's run."""
    if seen["path"] != path:
        return _error(409, f"this signed request was already delivered to {PREFIX}{seen['path']}; "
                           f"a delivery to {PREFIX}{path} needs a signature of its own "
                           f"(sign it again with a new {TIMESTAMP_HEADER})")
    return _accepted(200, seen)


def _accepted(status: int, row: dict[str, Any]) -> Reply:
    return Reply(status, {"run_id": str(row["run_id"]), "delivery": row["delivery"]})


def parse_body(body: bytes) -> Any:
    """The body as JSON; ValueError saying why not (NaN and Infinity are not JSON)."""
    def refuse(name: str) -> None:
        raise ValueError(f"the body is not valid JSON: {name} is not a JSON value")

    try:
        return json.loads(body, parse_constant=refuse)
    except RecursionError:
        raise ValueError("the body is not accepted: JSON nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("the body is not valid JSON: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"the body is not valid JSON: {err}") from None


# -- HTTP ------------------------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, pool: ConnectionPool, *, max_bytes: int,
                 tolerance: float, open_to_network: bool) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.pool, self.max_bytes, self.tolerance = pool, max_bytes, tolerance
        self.open_to_network = open_to_network
        super().__init__((host, port), _Handler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # HTTPServer's would look the host name up in DNS
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive for senders that batch, and Expect: 100-continue
    server_version = "threadline-hooks"
    timeout = 30  # a client that stalls mid-request is dropped
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        route = self._route()
        if route != PREFIX:
            return self._refuse_method(route)
        problem = self._length_problem()
        if problem is not None:
            return self._send(problem)
        length = int(self.headers["Content-Length"])
        body = self.rfile.read(length)
        if len(body) < length:  # the client hung up mid-body
            self.close_connection = True
            return None
        delivery = Delivery(self.path.split("?", 1)[0][len(PREFIX):], body, self.headers,
                            self.client_address[0])
        try:
            with self.server.pool.connection() as conn:
                reply = receive(conn, delivery, open_to_network=self.server.open_to_network,
                                tolerance=self.server.tolerance)
        except (PoolTimeout, psycopg.OperationalError) as err:
            log.error("database unavailable: %s", err)
            reply = _error(503, "the database is unavailable; retry later")
        except Exception:  # answer rather than drop the connection; the log has the details
            log.exception("delivery to %s failed", delivery.path)
            reply = _error(500, "internal error")
        self._send(reply, consumed=True)
        return None

    def do_GET(self) -> None:  # noqa: N802
        if self._route() != HEALTH:
            return self._refuse_method(self._route())
        try:
            with self.server.pool.connection(timeout=5) as conn:
                conn.execute("select 1")
            return self._send(Reply(200, {"ok": True}))
        except (PoolTimeout, psycopg.Error):
            return self._send(_error(503, "the database is unavailable"))

    def _refuse_method(self, route: str | None) -> None:
        if route is None:
            return self._send(_error(404, f"nothing here: webhooks are at POST {PREFIX}<path>"))
        allow = "POST" if route == PREFIX else "GET"
        return self._send(_error(405, f"{self.command} is not allowed here; use {allow}",
                                 Allow=allow))

    def _any_other_method(self) -> None:
        self._refuse_method(self._route())

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _any_other_method  # noqa: N815

    def _route(self) -> str | None:
        path = self.path.split("?", 1)[0]
        if path.startswith(PREFIX) and len(path) > len(PREFIX):
            return PREFIX
        return HEALTH if path == HEALTH else None

    def _length_problem(self) -> Reply | None:
        """Checked before reading a byte of the body."""
        if self.headers.get("Transfer-Encoding"):
            return _error(411, "send the body with a Content-Length "
                               "(chunked bodies are not accepted)")
        raw = self.headers.get("Content-Length")
        if raw is None:
            return _error(411, "Content-Length header required")
        if not _LENGTH.fullmatch(raw.strip()):
            return _error(400, f"Content-Length must be a number of bytes, got {raw[:40]!r}")
        if int(raw) > self.server.max_bytes:
            return _error(413, f"the body is {int(raw)} bytes; "
                               f"the limit is {self.server.max_bytes}")
        return None

    def handle_expect_100(self) -> bool:
        # Refuse an oversized body before the client sends it.
        problem = self._length_problem() if self.command == "POST" else None
        if problem is not None:
            self._send(problem)
            return False
        return super().handle_expect_100()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's own refusals (bad request line, unknown method, ...) answer JSON too.
        self.close_connection = True
        self._send(_error(code, message or HTTPStatus(code).phrase))

    def _send(self, reply: Reply, consumed: bool = False) -> None:
        data = json.dumps(reply.body, ensure_ascii=False).encode() + b"\n"
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if not consumed and self._body_pending():  # an unread body would poison the next request
            self.close_connection = True
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        log.info("%s %s %s %d %s", self.client_address[0], self.command,
                 getattr(self, "path", "-")[:200], reply.status,
                 reply.body.get("run_id") or reply.body.get("error", ""))

    def _body_pending(self) -> bool:
        headers = getattr(self, "headers", None)
        if headers is None:
            return True
        length = headers.get("Content-Length", "0").strip()
        return bool(headers.get("Transfer-Encoding")) or length != "0"

    def version_string(self) -> str:
        return self.server_version  # no Python version for the world to see

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # _send logs one line per request

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        log.warning("%s " + format, self.client_address[0], *args)


# -- the process -----------------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    """Whether every address host names is a loopback address ("" means every interface)."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror as err:
        raise ValueError(f"--host {host!r}: cannot resolve it ({err.strerror})") from None
    return all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def check_bind(host: str, triggers: list[dict[str, Any]]) -> None:
    """Refuse a non-loopback address while any webhook could be called without a secret."""
    unsigned = [t for t in triggers if not t["signed"]]
    if unsigned and not is_loopback(host):
        names = ", ".join(f"{PREFIX}{t['path']} (workflow {t['workflow']})" for t in unsigned)
        where = host or "every interface"
        raise ValueError(f"refusing to listen on {where}, which is not loopback: "
                         f"these webhooks have no secret, so anyone who reaches the port could "
                         f"start their runs: {names}. Give each `secret: env:NAME`, or listen on "
                         f"127.0.0.1")


def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, *, max_bytes: int = MAX_BYTES,
          tolerance: float = TOLERANCE_S, url: str | None = None) -> int:
    """Run the ingress until SIGTERM or Ctrl-C."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s hooks %(levelname)s %(message)s")
    if max_bytes < 1 or tolerance <= 0:
        raise ValueError("--max-bytes and --tolerance must be positive")
    pool = ConnectionPool(url or database_url(), min_size=1, max_size=8, open=False,
                          kwargs=dict(autocommit=True, row_factory=dict_row),
                          check=ConnectionPool.check_connection, name="hooks")
    pool.open(wait=True, timeout=30)
    try:
        with pool.connection() as conn:
            triggers = db.fetch_all(conn, "list_webhook_triggers")
        check_bind(host, triggers)
        try:
            server = _Server(host, port, pool, max_bytes=max_bytes, tolerance=tolerance,
                             open_to_network=not is_loopback(host))
        except OSError as err:
            raise ValueError(f"cannot listen on {host}:{port}: {err.strerror}") from None
        shown = f"[{host}]" if ":" in host else host
        print(f"hooks: listening on http://{shown}:{server.server_port}{PREFIX}<path>", flush=True)
        for t in triggers:
            log.info("%s%s -> workflow %s (%s%s)", PREFIX, t["path"], t["workflow"],
                     "signed" if t["signed"] else "unsigned", "" if t["enabled"] else ", disabled")
        # shutdown() waits for serve_forever() to return, so it must run on another thread.
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
        try:
            server.serve_forever(poll_interval=0.5)
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    finally:
        pool.close()
    return 0
