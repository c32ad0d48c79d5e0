"""Random and mutated raw requests against a real `threadline hooks` process (Hypothesis).

Whatever arrives, the ingress answers within its deadline, never with a 5xx but 503, keeps
serving, logs no traceback, and starts a run only for a request that deserves one: each run is
answered 202, and a run of the signed webhook carries a body that was really signed.
"""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import test_webhooks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ingress import port_of
from test_webhooks import GREET, SECRET, request

from engine_adapter.ingress.webhook_auth import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign,
)

hooks = test_webhooks.hooks  # the fixture that starts `threadline hooks` on a free port

UNSIGNED = "slug: open\nwebhooks:\n  - path: open\nsteps:\n  - id: s\n    run_command: echo\n"
REQUEST_TIMEOUT_S = 3.0
EXCHANGE_LIMIT_S = REQUEST_TIMEOUT_S + 15.0  # generous: a hang, not a slow machine, must fail
FUZZ = settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

LATIN1 = st.characters(codec="latin-1")
METHODS = st.sampled_from(["POST", "GET", "HEAD", "PUT", "OPTIONS", "BREW", "post"]) | st.text(
    LATIN1, max_size=8
)
TARGETS = st.sampled_from(
    [
        "/hooks/greet",
        "/hooks/open",
        "/healthz",
        "/hooks/",
        "/",
        "*",
        "http://x/hooks/open",
        "//hooks/open",
    ]
) | st.builds(
    lambda stem, tail: stem + tail,
    st.sampled_from(["/hooks/greet", "/hooks/open", "/hooks/", "/"]),
    st.text(LATIN1, max_size=40),
)
VERSIONS = st.sampled_from(
    ["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/0.9", "HTTP/1.1 x", "", "HTTP/1", "http/1.1"]
) | st.text(LATIN1, max_size=10)
NAMES = st.sampled_from(
    [
        "Content-Length",
        "content-length",
        "Transfer-Encoding",
        "Content-Type",
        TIMESTAMP_HEADER,
        SIGNATURE_HEADER,
        DELIVERY_HEADER,
        "Expect",
        "Connection",
        "Host",
    ]
) | st.text(LATIN1, max_size=16)
VALUES = st.sampled_from(
    [
        "0",
        "2",
        "13",
        "-1",
        "99999999999999999",
        " 13",
        "1e3",
        "chunked",
        "gzip, chunked",
        "application/json",
        "text/plain",
        "100-continue",
        "close",
        "keep-alive",
        "sha256=" + "0" * 64,
    ]
) | st.text(LATIN1, max_size=60)
EOLS = st.sampled_from([b"\r\n", b"\n", b"\r", b"\r\r\n"])
BODIES = st.binary(max_size=200) | st.sampled_from(
    [
        b'{"name": "x"}',
        b"",
        b"{}",
        b"[]",
        b'{"a": "\\ud800"}',
        b'{"a": "\\u0000"}',
        b'{"a": ' + b"1" * 5000 + b"}",
        b"[" * 5000,
        b'{"a": 1e999}',
        b'{"a": NaN}',
    ]
)
INSERTS = st.binary(min_size=1, max_size=10) | st.sampled_from(
    [
        b"\r\n",
        b"\x00",
        b" ",
        b":",
        b"\r\nContent-Length: 5",
        b"\r\nTransfer-Encoding: chunked",
        b"\r\n Content-Length: 2",
        b"%00",
        b"/..",
        b"\r\n\r\n",
        b"\r\nContent-Type: text/plain",
    ]
)


@st.composite
def random_requests(draw: Any) -> bytes:
    eol = draw(EOLS)
    lines = [f"{draw(METHODS)} {draw(TARGETS)} {draw(VERSIONS)}"]
    lines += [
        f"{name}: {value}" for name, value in draw(st.lists(st.tuples(NAMES, VALUES), max_size=8))
    ]
    return eol.join(line.encode("latin-1") for line in lines) + eol + eol + draw(BODIES)


@st.composite
def mutated_requests(draw: Any, signed_bodies: list[Any]) -> bytes:
    """A valid request (to the signed webhook, or to the unsigned one), then damaged."""
    payload = {"name": draw(st.text(max_size=20)), "n": draw(st.integers())}
    body = json.dumps(payload).encode()
    headers = [
        ("Host", "x"),
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
    ]
    path = draw(st.sampled_from(["greet", "open"]))
    if path == "greet":
        timestamp = str(int(time.time()))
        headers += [
            (TIMESTAMP_HEADER, timestamp),
            (SIGNATURE_HEADER, sign(SECRET, timestamp, body)),
        ]
        signed_bodies.append(payload)
    if draw(st.booleans()):
        headers.append((DELIVERY_HEADER, draw(st.text(LATIN1, min_size=1, max_size=20))))
    data = bytearray(
        f"POST /hooks/{path} HTTP/1.1\r\n".encode()
        + b"".join(f"{n}: {v}\r\n".encode("latin-1") for n, v in headers)
        + b"\r\n"
        + body
    )
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        match draw(st.sampled_from(["flip", "delete", "insert", "repeat line", "truncate"])):
            case "flip" if at < len(data):
                data[at] ^= draw(st.integers(1, 255))
            case "delete":
                del data[at : at + draw(st.integers(1, 12))]
            case "insert":
                data[at:at] = draw(INSERTS)
            case "repeat line":
                lines = bytes(data).split(b"\r\n")
                k = draw(st.integers(0, len(lines) - 1))
                data = bytearray(b"\r\n".join(lines[: k + 1] + lines[k:]))
            case "truncate":
                del data[at:]
    return bytes(data)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(st.characters(codec=None, exclude_categories=()), max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def json_requests(draw: Any) -> bytes:
    """Well-framed deliveries to the unsigned webhook with any JSON-ish body: what reaches the
    parser and the database (surrogates, NaN, huge numbers, NUL, deep nesting)."""
    body = json.dumps(draw(JSON)).encode("utf-8", "surrogatepass")
    return (
        f"POST /hooks/open HTTP/1.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


# -- the exchange and what it may leave behind -----------------------------------------------------
def exchange(port: int, data: bytes) -> bytes:
    """Sends data, says it is done sending, reads until the server closes; a hang fails."""
    with socket.create_connection(("127.0.0.1", port), timeout=EXCHANGE_LIMIT_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before it all went out: the answer, if any, is still to be read
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:
                pytest.fail(f"no end to the exchange within {EXCHANGE_LIMIT_S}s: {data[:200]!r}")
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    return b"".join(chunks)


def statuses(raw: bytes) -> list[int]:
    """The status of each response in raw, in order."""
    found, at = [], 0
    head = re.compile(rb"HTTP/1\.[01] (\d{3}) [^\r\n]*\r\n(.*?)\r\n\r\n", re.DOTALL)
    while match := head.match(raw, at):
        found.append(int(match.group(1)))
        length = re.search(rb"(?im)^content-length: *(\d+)", match.group(2))
        at = match.end() + (int(length.group(1)) if length else 0)
    return found


class Ledger:
    """What the database holds, checked after every exchange."""

    def __init__(self, conn: Any, signed_bodies: list[Any]) -> None:
        self.conn, self.signed_bodies, self.accepted = conn, signed_bodies, 0

    def check(self, data: bytes, answers: list[int]) -> None:
        assert not [s for s in answers if s >= 500 and s != 503], (answers, data[:300])
        self.accepted += answers.count(202)
        runs = self.conn.execute("select workflow, payload from threadline.run_threads").fetchall()
        deliveries = self.conn.execute(
            "select count(*) as n from threadline.webhook_deliveries"
        ).fetchone()["n"]
        assert len(runs) == deliveries == self.accepted, (answers, data[:300])
        forged = [
            r["payload"]
            for r in runs
            if r["workflow"] == "greet" and r["payload"] not in self.signed_bodies
        ]
        assert not forged, f"a run of the signed webhook with a body nobody signed: {forged}"


@pytest.fixture
def ingress(conn, apply, hooks, tmp_path: Path):
    apply(GREET)
    apply(UNSIGNED)
    base = hooks("--request-timeout", str(REQUEST_TIMEOUT_S), "--idle-timeout", "2")
    yield port_of(base)
    assert request(base, "GET", "/healthz")[:2] == (200, {"ok": True})  # still serving
    log = (tmp_path / "hooks.log").read_text(errors="replace")
    assert "Traceback" not in log
    assert not re.search(r"' 5(?!03)\d\d ", log)


def test_random_requests_never_break_the_ingress(conn, ingress):
    ledger = Ledger(conn, [])

    @FUZZ
    @given(random_requests())
    def one(data: bytes) -> None:
        ledger.check(data, statuses(exchange(ingress, data)))

    one()


def test_damaged_valid_requests_start_nothing_unearned(conn, ingress):
    signed_bodies: list[Any] = []
    ledger = Ledger(conn, signed_bodies)

    @FUZZ
    @given(st.data())
    def one(data: st.DataObject) -> None:
        raw = data.draw(mutated_requests(signed_bodies))
        ledger.check(raw, statuses(exchange(ingress, raw)))

    one()
    assert ledger.accepted > 0  # some damage is harmless (a repeated Host line): runs do start


def test_any_json_body_is_stored_or_refused_cleanly(conn, ingress):
    ledger = Ledger(conn, [])

    @FUZZ
    @given(json_requests())
    def one(data: bytes) -> None:
        answers = statuses(exchange(ingress, data))
        assert len(answers) == 1 and answers[0] in (200, 202, 400), (answers, data[:300])
        ledger.check(data, answers)

    one()
    assert ledger.accepted > 0
