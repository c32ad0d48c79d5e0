"""`threadline hooks`: the webhook ingress.

POST /hooks/<path> starts a run of the workflow whose recipe declares that path, through the one
spawn door; GET /healthz says whether the database is reachable. Every refusal answers
{"error": ...} and creates nothing. Each request reads its trigger afresh (one indexed query), so a
newly applied recipe takes effect without a restart. Loopback by default: on any other address
every trigger must have a secret.

The HTTP layer is http.server, held strictly (hook_requests.py): a request whose framing two
parsers could read differently, a bad path or a body that is not JSON is refused before its body
is read; each request has one deadline from its first byte to its body's last; idle connections
are closed; and the connections open at once are capped, one thread each.
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import logging
import os
import re
import signal
import socket
import socketserver
import sys
import threading
import time
from dataclasses import dataclass, field
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from engine_adapter.catalog.workflows import WorkflowNotFound
from engine_adapter.ingress.hook_requests import (
    content_type_problem,
    framing_problem,
    header_problem,
    ip_literal,
    request_path,
)
from engine_adapter.ingress.webhook_auth import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    TOLERANCE_S,
    SignatureError,
    verify,
)
from engine_adapter.model.domain import PERSON_DECISIONS
from engine_adapter.model.errors import Invalid, ThreadlineError, report_bug
from engine_adapter.model.settings import database_url
from engine_adapter.model.vocab import Door, TriggerKind
from engine_adapter.recipes.render import as_text
from engine_adapter.recipes.webhook_spec import map_payload, resolve, secret_env
from engine_adapter.runs import resume_tokens
from engine_adapter.runs.events import emit
from engine_adapter.runs.gates import DecisionRefused
from engine_adapter.runs.spawn import BadPayload, Paused, PayloadRejected, SpawnError, spawn
from engine_adapter.store import db
from engine_adapter.store.roles import warn_if_superuser

log = logging.getLogger("threadline.hooks")
DEFAULT_PORT = 5007
MAX_BYTES = 1 << 20
REQUEST_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64
MAX_TIMEOUT_S = 3600.0
PAUSED_RETRY_S = 60  # Retry-After while the global pause switch refuses new runs
PREFIX = "/hooks/"
RESUME = "/resume/"  # POST /resume/<token>: a resume link decides its gate
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


def receive(
    conn: psycopg.Connection[Any],
    d: Delivery,
    *,
    open_to_network: bool = False,
    tolerance: float = TOLERANCE_S,
) -> Reply:
    """One POST /hooks/<path>: 202 with a new run, 200 with the run a repeat already started,
    or a refusal that creates nothing."""
    trigger = db.fetch_one(conn, "webhook_trigger", {"path": d.path})
    if trigger is None:
        return _error(404, f"no webhook at {PREFIX}{d.path}")
    signature = None
    if trigger["secret"] is None:
        if open_to_network:  # a recipe applied after start-up may not weaken the bind rule
            return _error(
                403,
                f"webhook {d.path!r} has no secret and this ingress listens beyond "
                "loopback: give it secret: env:NAME",
            )
    else:
        name = secret_env(trigger["secret"])
        secret = os.environ.get(name)
        if not secret:  # fail closed, and keep the variable's name out of the answer
            log.error(
                "webhook %s: its secret variable %s is not set for `threadline hooks`", d.path, name
            )
            return _error(500, "this webhook's secret is not configured on the server")
        try:
            signature = verify(
                secret,
                d.headers.get(TIMESTAMP_HEADER),
                d.headers.get(SIGNATURE_HEADER),
                d.body,
                tolerance=tolerance,
            )
        except SignatureError as err:
            return _error(401, str(err))

    delivery = d.headers.get(DELIVERY_HEADER)
    if delivery is None:
        delivery = "sha256:" + hashlib.sha256(d.body).hexdigest()
    elif not _DELIVERY.fullmatch(delivery):
        return _error(400, f"{DELIVERY_HEADER} must be 1 to 200 visible ASCII characters")
    key = {"path": d.path, "delivery": delivery, "signature": signature}
    seen = db.fetch_one(conn, "webhook_delivery_seen", key)
    if seen is not None:
        return _repeat(d.path, seen)
    if not trigger["enabled"]:
        return _error(409, f"workflow {trigger['workflow']!r} is disabled")
    try:
        payload = map_payload(parse_body(d.body), trigger["map"])
    except Invalid as err:  # not JSON, or a mapped field finds nothing
        return _error(400, str(err))

    if trigger["event"]:
        return _deliver(conn, trigger, d, delivery, signature, payload)
    run_trigger = {
        "kind": TriggerKind.WEBHOOK,
        "path": d.path,
        "delivery": delivery,
        "caller": d.caller,
    }
    try:
        with conn.transaction():
            spawned = spawn(
                conn,
                trigger["workflow"],
                payload,
                trigger=run_trigger,
                idempotency_key=f"webhook:{d.path}:{delivery}",
            )
            recorded = db.fetch_one(
                conn, "insert_webhook_delivery", dict(key, run_id=spawned.run_id, caller=d.caller)
            )
            if recorded is None:
                raise _LostRace  # roll our run back: the first one stands
    except _LostRace:
        return _repeat(d.path, db.fetch_row(conn, "webhook_delivery_seen", key))
    except PayloadRejected as err:  # the body is fine JSON, but the workflow's schema refuses it
        return _error(422, str(err))
    except BadPayload as err:  # e.g. "\u0000", which PostgreSQL cannot store
        return _error(400, f"the body cannot be stored: {err}")
    except Paused as err:  # no run now; the sender's retry later is not lost
        return _error(503, str(err), **{"Retry-After": str(PAUSED_RETRY_S)})
    except SpawnError as err:  # e.g. disabled between the check above and the spawn
        return _error(409, str(err))
    except WorkflowNotFound as err:
        return _error(404, str(err))
    except psycopg.DataError as err:  # e.g. "\u0000", which PostgreSQL's jsonb refuses
        return _error(400, f"the body cannot be stored: {err.diag.message_primary}")
    status = 202 if spawned.created else 200
    return _accepted(status, {"run_id": spawned.run_id, "delivery": delivery})


def _deliver(
    conn: psycopg.Connection[Any],
    trigger: dict[str, Any],
    d: Delivery,
    delivery: str,
    signature: str | None,
    payload: dict[str, Any],
) -> Reply:
    """A webhook with `event:` delivers that outside event: the runs waiting for it (by key) go
    on, and workflows with `on_event` start. Once per delivery: a signed request's signature, or
    else its delivery id, is the event's id, so a repeat (or a replay) delivers nothing again."""
    key = None
    if trigger["event_key"]:
        try:
            key = as_text(resolve(parse_body(d.body), trigger["event_key"]))
        except Invalid as err:  # not JSON (parse_body), or the key finds nothing (MappingError)
            return _error(400, f"the event key {trigger['event_key']}: {err}")
    event_id = f"webhook:{d.path}:{signature or delivery}"
    try:
        emitted = emit(
            conn,
            trigger["event"],
            payload,
            event_id=event_id,
            caller=d.caller,
            key=key,
            via=Door.WEBHOOK,
        )
    except BadPayload as err:
        return _error(400, f"the body cannot be stored: {err}")
    except SpawnError as err:
        return _error(409, str(err))
    body = {
        "event": emitted.name,
        "event_id": emitted.event_id,
        "key": key,
        "released": len(emitted.released),
        "runs": [r.run_id for r in emitted.runs],
        "delivery": delivery,
    }
    return Reply(202, body)


def _repeat(path: str, seen: dict[str, Any]) -> Reply:
    """A repeat at its own path finds its run (200); a signed request captured at one path and
    resent to another (paths may share a secret) is refused: it starts nothing there, and the
    answer does not hand out another workflow's run."""
    if seen["path"] != path:
        return _error(
            409,
            f"this signed request was already delivered to {PREFIX}{seen['path']}; "
            f"a delivery to {PREFIX}{path} needs a signature of its own "
            f"(sign it again with a new {TIMESTAMP_HEADER})",
        )
    return _accepted(200, seen)


def _accepted(status: int, row: dict[str, Any]) -> Reply:
    return Reply(status, {"run_id": str(row["run_id"]), "delivery": row["delivery"]})


def resume_link(conn: psycopg.Connection[Any], token: str, body: bytes) -> Reply:
    """A resume link: {"decision": "approve" | "deny", "reason"?} decides the gate its token is
    bound to, as the person it was issued to; a refusal writes only its audit row."""
    try:
        request = parse_body(body)
    except Invalid as err:
        return _error(400, f"the body is not JSON: {err}")
    if not isinstance(request, dict) or set(request) - {"decision", "reason"}:
        return _error(400, 'the body must be {"decision": "approve" | "deny", "reason": "..."}')
    decision, reason = request.get("decision"), request.get("reason")
    if decision not in PERSON_DECISIONS:
        return _error(400, f"decision must be approve or deny, not {as_text(decision)[:40]!r}")
    if reason is not None and (not isinstance(reason, str) or len(reason) > 2000):
        return _error(400, "reason must be a string of at most 2000 characters")
    try:
        done = resume_tokens.redeem(conn, token, decision, "link", reason)
    except (resume_tokens.TokenRefused, DecisionRefused) as err:
        return _error(403, str(err))
    return Reply(
        200,
        {"ok": True, "run_id": done.run_id, "decision": decision, "by": done.actor.name},
    )


def resume_page() -> str:
    """What opening a resume link shows: opening decides nothing (a chat preview may open it);
    the buttons POST the decision to the same address."""
    return """<!doctype html><html><head><meta charset="utf-8"><title>Threadline</title>
<meta name="viewport" content="width=device-width"><style>
body{font-family:system-ui,sans-serif;max-width:34em;margin:3em auto;padding:0 1em}
button{font-size:1.1em;padding:.5em 1.4em;margin-right:.6em}textarea{width:100%}
</style></head><body><h2>Decide this gate</h2>
<p><textarea id="reason" rows="3" placeholder="reason (optional)"></textarea></p>
<p><button id="approve">Approve</button><button id="deny">Deny</button></p><p id="said"></p>
<script>
const ask = new URLSearchParams(location.search).get("decision");
if (ask) document.getElementById(ask === "deny" ? "deny" : "approve").autofocus = true;
for (const decision of ["approve", "deny"]) {
  document.getElementById(decision).onclick = async () => {
    const reason = document.getElementById("reason").value || undefined;
    const r = await fetch(location.pathname, {method: "POST",
      headers: {"Content-Type": "application/json"}, body: JSON.stringify({decision, reason})});
    const answer = await r.json();
    document.getElementById("said").textContent =
      r.ok ? `Done: ${{approve: "approved", deny: "denied"}[answer.decision]} as ${answer.by}.`
           : `Refused: ${answer.error}`;
  };
}
</script></body></html>
"""


def _without_token(path: str) -> str:
    """A request path as the log may keep it: a resume link's token is a credential."""
    return RESUME + "…" if path.startswith(RESUME) else path


def parse_body(body: bytes) -> Any:
    """The body as JSON; Invalid saying why not (NaN and Infinity are not JSON)."""

    def refuse(name: str) -> None:
        raise Invalid(f"the body is not valid JSON: {name} is not a JSON value")

    def integer(text: str) -> int:  # Python's own refusal would name a Python setting
        digits = len(text.lstrip("-"))
        if digits > sys.get_int_max_str_digits():
            raise Invalid(
                f"the body is not accepted: a number of {digits} digits (at most "
                f"{sys.get_int_max_str_digits()})"
            )
        return int(text)

    try:
        return json.loads(body, parse_constant=refuse, parse_int=integer)
    except RecursionError:
        raise Invalid("the body is not accepted: JSON nested too deeply") from None
    except UnicodeDecodeError:
        raise Invalid("the body is not valid JSON: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise Invalid(f"the body is not valid JSON: {err}") from None


# -- HTTP ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    """What one client may take of the ingress."""

    max_bytes: int = MAX_BYTES  # the largest body
    request_s: float = REQUEST_TIMEOUT_S  # from a request's first byte to the end of its body
    idle_s: float = IDLE_TIMEOUT_S  # a connection waiting for its next (or first) request
    connections: int = MAX_CONNECTIONS  # open at once; one thread each

    def check(self) -> None:
        if self.max_bytes < 1 or self.connections < 1:
            raise Invalid("--max-bytes and --max-connections must be positive")
        for flag, seconds in (
            ("--request-timeout", self.request_s),
            ("--idle-timeout", self.idle_s),
        ):
            if not 0 < seconds <= MAX_TIMEOUT_S:  # NaN fails this too
                raise Invalid(
                    f"{flag} must be more than 0 and at most {MAX_TIMEOUT_S:g} "
                    f"seconds, got {seconds:g}"
                )


class _Clock(io.RawIOBase):
    """A connection's reads, each bounded by what is left of the request's deadline (between
    requests, by the idle timeout): a client trickling a byte at a time still runs out of it."""

    def __init__(self, sock: socket.socket, idle_s: float) -> None:
        super().__init__()
        self.sock, self.idle_s = sock, idle_s
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.idle_s if self.deadline is None else self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request was not complete within its deadline")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _Reader(io.BufferedReader):
    """Keeps the lines it reads while `lines` is a list: http.server parses the headers, and the
    raw lines show what that parser would forgive (a folded line, a bare CR, a NUL)."""

    lines: list[bytes] | None = None

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(size)
        if self.lines is not None:
            self.lines.append(line)
        return line


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a burst of connections waits in the backlog rather than failing

    def __init__(
        self,
        host: str,
        port: int,
        pool: ConnectionPool,
        *,
        limits: Limits,
        tolerance: float,
        open_to_network: bool,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.pool, self.limits, self.tolerance = pool, limits, tolerance
        self.open_to_network = open_to_network
        self.slots = threading.BoundedSemaphore(limits.connections)
        self._warned_at = 0.0
        super().__init__((host, port), _Handler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # HTTPServer's would look the host name up in DNS
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            return self._turn_away(request, client_address)
        try:
            super().process_request(request, client_address)  # its own thread, which releases
        except BaseException:
            self.slots.release()
            raise
        return None

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def _turn_away(self, request: socket.socket, client_address: Any) -> None:
        """Over the cap: a 503 sent without blocking the accept loop, then closed; no thread."""
        body = (
            json.dumps(
                {
                    "error": f"too many connections (the limit is "
                    f"{self.limits.connections}); retry later"
                }
            ).encode()
            + b"\n"
        )
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        )
        try:
            request.setblocking(False)
            request.send(head.encode() + body)
        except OSError:
            pass
        self.shutdown_request(request)
        if time.monotonic() - self._warned_at > 10:  # one line per burst, not one per connection
            self._warned_at = time.monotonic()
            log.warning(
                "%s: turned away: %d connections are open (--max-connections)",
                client_address[0],
                self.limits.connections,
            )

    def handle_error(self, request: Any, client_address: Any) -> None:
        err = sys.exc_info()[1]
        if isinstance(err, OSError):  # the client reset or vanished: nothing to answer
            log.info("%s: connection ended: %s", client_address[0], err)
        else:
            log.exception("connection from %s failed", client_address[0])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive for senders that batch, and Expect: 100-continue
    server_version = "threadline-hooks"
    default_request_version = "HTTP/1.0"  # so that a refusal of a garbled line has a status line
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    server: _Server
    rfile: _Reader
    hook_path: str = ""  # the request's percent-decoded path, once it is known to be sound
    header_lines: list[bytes]

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own reader: it would keep the socket open after close()
        self.clock = _Clock(self.connection, self.server.limits.idle_s)
        self.rfile = _Reader(self.clock)

    def handle_one_request(self) -> None:
        """Waits up to the idle timeout for a request to begin; from its first byte, the request
        line, headers and body share one deadline, however steadily they trickle in."""
        self.clock.deadline = None
        try:
            started = self.rfile.peek(1)
        except OSError:  # idle too long (TimeoutError), or reset
            started = b""
        if not started:
            self.close_connection = True
            return
        self.clock.deadline = time.monotonic() + self.server.limits.request_s
        super().handle_one_request()  # a TimeoutError in it closes the connection

    def parse_request(self) -> bool:
        self.hook_path = ""
        self.header_lines = self.rfile.lines = []
        try:
            if not super().parse_request():
                return False
        finally:
            self.rfile.lines = None
        problem = self._request_problem()
        if problem is not None:
            self.close_connection = True  # where this request ends is not certain: no next one
            self._send(problem)
            return False
        return True

    def _request_problem(self) -> Reply | None:
        """A target or headers this ingress will not interpret, whatever the method."""
        try:
            self.hook_path = request_path(self.path)
        except Invalid as err:
            return _error(400, str(err))
        problem = header_problem(self.header_lines) or framing_problem(self.headers)
        return None if problem is None else _error(400, problem)

    def do_POST(self) -> None:
        problem = self._before_body()
        if problem is not None:
            return self._send(problem)
        length = int(self.headers["Content-Length"])
        body = self.rfile.read(length)
        if len(body) < length:  # the client hung up mid-body
            self.close_connection = True
            return None
        delivery = Delivery(
            self.hook_path[len(PREFIX) :], body, self.headers, self.client_address[0]
        )
        try:
            with self.server.pool.connection() as conn:
                if self._route() == RESUME:
                    reply = resume_link(conn, self.hook_path[len(RESUME) :], body)
                else:
                    reply = receive(
                        conn,
                        delivery,
                        open_to_network=self.server.open_to_network,
                        tolerance=self.server.tolerance,
                    )
        except (PoolTimeout, psycopg.OperationalError) as err:
            log.error("database unavailable: %s", err)
            reply = _error(503, "the database is unavailable; retry later")
        except ThreadlineError as err:  # one the calls above did not answer themselves
            reply = _error(err.http_status, str(err))
        except Exception as err:  # a bug: answered rather than dropped; the log has its traceback
            where = f"request to {_without_token(self.hook_path)}"
            reply = _error(500, report_bug(log, err, where))
        self._send(reply, consumed=True)
        return None

    def do_GET(self) -> None:
        if self._route() == RESUME:  # a link opened in a browser: a page to decide on, only
            return self._send_page(resume_page())
        if self._route() != HEALTH:
            return self._refuse_method(self._route())
        try:
            with self.server.pool.connection(timeout=5) as conn:
                conn.execute("select 1")
            return self._send(Reply(200, {"ok": True}))
        except (PoolTimeout, psycopg.Error):
            return self._send(_error(503, "the database is unavailable"))

    def _refuse_method(self, route: str | None) -> None:
        self._send(self._method_refusal(route))

    def _method_refusal(self, route: str | None) -> Reply:
        if route is None:
            return _error(404, f"nothing here: webhooks are at POST {PREFIX}<path>")
        allow = "POST" if route in (PREFIX, RESUME) else "GET"
        return _error(405, f"{self.command[:20]} is not allowed here; use {allow}", Allow=allow)

    def _any_other_method(self) -> None:
        self._refuse_method(self._route())

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _any_other_method

    def _route(self) -> str | None:
        path = self.hook_path
        for prefix in (PREFIX, RESUME):
            if path.startswith(prefix) and len(path) > len(prefix):
                return prefix
        return HEALTH if path == HEALTH else None

    def _before_body(self) -> Reply | None:
        """Every refusal of a POST that needs no body, so none is read (nor 100-continue sent)
        for it: where it goes, how long it is, and that it is JSON."""
        problem = self._request_problem()
        if problem is not None:
            return problem
        route = self._route()
        if route not in (PREFIX, RESUME):
            return self._method_refusal(route)
        if "Transfer-Encoding" in self.headers:  # even empty: its body's end is unknown
            return _error(
                411, "send the body with a Content-Length (chunked bodies are not accepted)"
            )
        raw = self.headers.get("Content-Length")
        if raw is None:
            return _error(411, "Content-Length header required")
        if not _LENGTH.fullmatch(raw.strip()):
            return _error(400, f"Content-Length must be a number of bytes, got {raw[:40]!r}")
        limit = self.server.limits.max_bytes
        if int(raw) > limit:
            return _error(413, f"the body is {int(raw)} bytes; the limit is {limit}")
        media = content_type_problem(self.headers)
        return None if media is None else _error(415, media)

    def handle_expect_100(self) -> bool:
        # Refuse a body before the client sends it.
        problem = self._before_body() if self.command == "POST" else None
        if problem is not None:
            self.close_connection = True
            self._send(problem)
            return False
        return super().handle_expect_100()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's own refusals (bad request line, unknown method, ...) answer JSON too,
        # and none is a 5xx: each is the client's doing.
        self.close_connection = True
        if code == HTTPStatus.NOT_IMPLEMENTED and self.hook_path:  # a method with no do_X
            return self._refuse_method(self._route())
        if code >= 500:  # e.g. 505 for an HTTP/2.0 request line
            code, message = 400, "only HTTP/1.0 and HTTP/1.1 requests are served"
        return self._send(_error(code, message or HTTPStatus(code).phrase))

    def _send(self, reply: Reply, consumed: bool = False) -> None:
        data = json.dumps(reply.body, ensure_ascii=False).encode() + b"\n"
        self.connection.settimeout(self.server.limits.request_s)  # a reader that never reads
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
        log.info(
            "%s %.20r %.200r %d %s",
            self.client_address[0],
            getattr(self, "command", "-"),
            _without_token(getattr(self, "path", "-")),
            reply.status,
            reply.body.get("run_id") or reply.body.get("error", ""),
            extra={"run_id": reply.body.get("run_id")},  # a field of its own in JSON logs
        )

    def _send_page(self, html: str) -> None:
        """A page for a person; it loads nothing from anywhere, and leaks no link onward."""
        data = html.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "connect-src 'self'",
        )
        self.end_headers()
        self.wfile.write(data)
        log.info("%s GET %s 200 page", self.client_address[0], RESUME + "…")

    def _body_pending(self) -> bool:
        headers = getattr(self, "headers", None)
        if headers is None:
            return True
        length = headers.get("Content-Length", "0").strip()
        return "Transfer-Encoding" in headers or length != "0"

    def version_string(self) -> str:
        return self.server_version  # no Python version for the world to see

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # _send logs one line per request

    def log_message(self, format: str, *args: Any) -> None:
        log.warning("%s " + format, self.client_address[0], *args)


# -- the process -----------------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    """Whether every address host names is a loopback address ("" means every interface)."""
    if not host:
        return False
    literal = ip_literal(host)
    if literal is not None:
        return literal.is_loopback
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror as err:
        raise Invalid(f"--host {host!r}: cannot resolve it ({err.strerror})") from None
    return all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def check_bind(host: str, triggers: list[dict[str, Any]]) -> None:
    """Refuse a non-loopback address while any webhook could be called without a secret."""
    unsigned = [t for t in triggers if not t["signed"]]
    if unsigned and not is_loopback(host):
        names = ", ".join(f"{PREFIX}{t['path']} (workflow {t['workflow']})" for t in unsigned)
        where = host or "every interface"
        raise Invalid(
            f"refusing to listen on {where}, which is not loopback: "
            f"these webhooks have no secret, so anyone who reaches the port could "
            f"start their runs: {names}. Give each `secret: env:NAME`, or listen on "
            f"127.0.0.1"
        )


def serve(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    limits: Limits = Limits(),
    tolerance: float = TOLERANCE_S,
    url: str | None = None,
) -> int:
    """Run the ingress until SIGTERM or Ctrl-C."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s hooks %(levelname)s %(message)s")
    limits.check()
    if tolerance <= 0:
        raise Invalid("--tolerance must be positive")
    pool = ConnectionPool(
        url or database_url("hooks"),
        min_size=1,
        max_size=8,
        open=False,
        kwargs={"autocommit": True, "row_factory": dict_row},
        check=ConnectionPool.check_connection,
        name="hooks",
    )
    pool.open(wait=True, timeout=30)
    try:
        with pool.connection() as conn:
            triggers = db.fetch_all(conn, "list_webhook_triggers")
            warn_if_superuser(conn, "hooks")
        check_bind(host, triggers)
        try:
            server = _Server(
                host,
                port,
                pool,
                limits=limits,
                tolerance=tolerance,
                open_to_network=not is_loopback(host),
            )
        except OSError as err:
            raise Invalid(f"cannot listen on {host}:{port}: {err.strerror}") from None
        shown = f"[{host}]" if ":" in host else host
        print(f"hooks: listening on http://{shown}:{server.server_port}{PREFIX}<path>", flush=True)
        log.info(
            "limits: bodies up to %d bytes, %gs per request, %gs idle, %d connections",
            limits.max_bytes,
            limits.request_s,
            limits.idle_s,
            limits.connections,
        )
        for t in triggers:
            log.info(
                "%s%s -> workflow %s (%s%s)",
                PREFIX,
                t["path"],
                t["workflow"],
                "signed" if t["signed"] else "unsigned",
                "" if t["enabled"] else ", disabled",
            )
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
