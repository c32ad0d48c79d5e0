"""The webhook ingress against a hostile client: raw bytes over a real socket to a real
`threadline hooks` process. Ambiguous framing, bad paths and non-JSON bodies are refused and create
nothing; a trickling client is cut off at the request deadline; connections beyond the cap are
turned away without starving the ones that come later.
"""

from __future__ import annotations

import json
import re
import select
import socket
import time
import urllib.parse
from typing import Any

import pytest
import test_webhooks
from test_webhooks import GREET, cli, created, request, signed

from engine_adapter.testing import harness

hooks = test_webhooks.hooks  # the fixture that starts `threadline hooks` on a free port

UNSIGNED = "slug: open\nwebhooks:\n  - path: open\nsteps:\n  - id: s\n    run_command: echo\n"
GOOD = b'{"name": "x"}'
SLACK_S = 10.0  # generous: the machine is shared; what matters is that the cut comes at all


# -- raw HTTP --------------------------------------------------------------------------------------
def port_of(base: str) -> int:
    return urllib.parse.urlsplit(base).port or 0


def raw_request(
    target: str = "/hooks/greet",
    headers: list[tuple[str, str]] | None = None,
    body: bytes = GOOD,
    method: str = "POST",
    length: bool = True,
) -> bytes:
    """A request as bytes, headers in order and verbatim (duplicates and all)."""
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers or []]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body


def signed_request(
    body: bytes = GOOD,
    extra: list[tuple[str, str]] | None = None,
    content_type: str = "application/json",
    **kwargs: Any,
) -> bytes:
    headers = [("Content-Type", content_type), *signed(body).items(), *(extra or [])]
    return raw_request(headers=headers, body=body, **kwargs)


def exchange(base: str, data: bytes, timeout: float = 30.0) -> bytes:
    """Sends data, says it is done sending, and reads until the server closes."""
    with socket.create_connection(("127.0.0.1", port_of(base)), timeout=timeout) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        return read_all(sock)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def read_one(sock: socket.socket) -> bytes:
    """One whole response from a connection that stays open (head and body may come apart)."""
    raw = b""
    while True:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        if sep and length and len(rest) >= int(length.group(1)):
            return raw
        chunk = sock.recv(65536)
        assert chunk, f"closed mid-response: {raw!r}"
        raw += chunk


def first_answer(raw: bytes) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of the first response in raw."""
    match = re.match(rb"HTTP/1\.[01] (\d{3}) [^\r\n]*\r\n(.*?)\r\n\r\n", raw, re.DOTALL)
    assert match, raw[:300]
    length = int(re.search(rb"(?im)^content-length: *(\d+)", match.group(2)).group(1))
    start = match.end()
    return int(match.group(1)), json.loads(raw[start : start + length])


def is_closed(sock: socket.socket, wait: float) -> bool:
    """Whether the server has closed sock (EOF or reset) within wait seconds."""
    readable, _, _ = select.select([sock], [], [], wait)
    if not readable:
        return False
    try:
        return sock.recv(65536) == b"" or is_closed(sock, 0)
    except ConnectionResetError:
        return True


# -- framing, paths, content types -----------------------------------------------------------------
FRAMING = {
    "identical duplicate Content-Length": signed_request(
        extra=[("Content-Length", str(len(GOOD)))]
    ),
    "conflicting Content-Length": signed_request(extra=[("Content-Length", "50")]),
    "Content-Length and Transfer-Encoding": signed_request(
        extra=[("Transfer-Encoding", "chunked")]
    ),
    "a folded header (obs-fold)": signed_request(extra=[("X-Note", "a\r\n b")]),
    "a bare CR in a header": signed_request(extra=[("X-Note", "a\rb")]),
    "a header line without a colon": signed_request(extra=[("X-Note", "a\r\nnocolon")]),
    "a space before the colon": signed_request(extra=[("X-Note ", "b")]),
}


@pytest.mark.parametrize("case", list(FRAMING))
def test_ambiguous_framing_is_refused_and_creates_nothing(conn, apply, hooks, case):
    """Two parsers (a proxy in front, this ingress) must never disagree about where a request
    ends: anything they could read differently is refused, and the connection is closed."""
    apply(GREET)
    base = hooks()
    before = created(conn)
    status, answer = first_answer(exchange(base, FRAMING[case]))
    assert status == 400, (case, answer)
    assert answer["error"], case
    assert created(conn) == before, f"{case} created something"
    # The very same request without the flaw is accepted: the refusal was for the flaw.
    status, answer = first_answer(exchange(base, signed_request()))
    assert status == 202, answer


BAD_TARGETS = {
    "a raw NUL": ("/hooks/gr\x00eet", "'\\x00'"),
    "a percent-encoded NUL": ("/hooks/gr%00eet", "control character '\\x00'"),
    "a raw control character": ("/hooks/gr\x01eet", "'\\x01'"),
    "a percent-encoded control character": ("/hooks/greet%0a", "control character '\\n'"),
    "a dot-dot segment": ("/hooks/../hooks/greet", "'..' segment"),
    "an encoded dot-dot segment": ("/hooks/%2e%2e/greet", "'..' segment"),
    "an invalid percent-escape": ("/hooks/gr%zzeet", "not followed by two hex digits"),
    "a truncated percent-escape": ("/hooks/greet%2", "not followed by two hex digits"),
    "percent-encoded bytes that are not UTF-8": ("/hooks/%ff", "not UTF-8"),
    "a non-ASCII byte": ("/hooks/gr\xe9et", "only visible ASCII"),
    "an over-long target": ("/hooks/" + "a" * 3000, "the limit is 2048"),
}


@pytest.mark.parametrize("case", list(BAD_TARGETS))
def test_a_bad_path_is_a_400_with_a_json_error(conn, apply, hooks, case):
    apply(GREET)
    base = hooks()
    target, says = BAD_TARGETS[case]
    before = created(conn)
    for method in ("POST", "GET"):
        status, answer = first_answer(exchange(base, signed_request(target=target, method=method)))
        assert (status, says in answer["error"]) == (400, True), (case, method, answer)
    assert created(conn) == before
    assert request(base, "GET", "/healthz")[:2] == (200, {"ok": True})


def test_a_percent_encoded_path_reaches_its_webhook(conn, apply, hooks):
    apply(GREET)
    base = hooks()
    status, answer = first_answer(exchange(base, signed_request(target="/hooks/gr%65et?x=1")))
    assert status == 202, answer


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=latin-1",
        "application/jsonx",
        None,
        "application/json, text/plain",
    ],
)
def test_only_json_bodies_are_accepted(conn, apply, hooks, content_type):
    """A browser may send a cross-site "simple" POST (text/plain, a form, a typeless body) without
    asking first; on an unsigned loopback webhook that would start a run for any web page."""
    apply(UNSIGNED)
    base = hooks()
    headers = [] if content_type is None else [("Content-Type", content_type)]
    before = created(conn)
    status, answer = first_answer(exchange(base, raw_request("/hooks/open", headers)))
    assert status == 415, answer
    assert "application/json" in answer["error"]
    assert created(conn) == before
    for accepted in (
        "application/json",
        "Application/JSON; charset=UTF-8",
        'application/json;charset="utf-8"',
    ):
        body = json.dumps({"type": accepted}).encode()
        status, answer = first_answer(
            exchange(base, raw_request("/hooks/open", [("Content-Type", accepted)], body))
        )
        assert status == 202, (accepted, answer)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"a": "\\ud800"}', "cannot be stored"),  # a lone surrogate: jsonb refuses it
        (b'{"a": 1e999}', "cannot be stored"),  # infinity is no JSON number
        (b'{"a": ' + b"1" * 5000 + b"}", "a number of 5000 digits (at most 4300)"),
        (b"[" * 100_000, "nested too deeply"),
        (b'{"a": "\xff"}', "not UTF-8"),
    ],
)
def test_bodies_that_cannot_be_stored_are_a_400(conn, apply, hooks, body, says):
    apply(UNSIGNED)
    base = hooks()
    before = created(conn)
    status, answer = first_answer(
        exchange(base, raw_request("/hooks/open", [("Content-Type", "application/json")], body))
    )
    assert (status, says in answer["error"]) == (400, True), answer
    assert created(conn) == before


def test_two_content_types_are_refused(conn, apply, hooks):
    apply(UNSIGNED)
    base = hooks()
    before = created(conn)
    data = raw_request(
        "/hooks/open", [("Content-Type", "application/json"), ("Content-Type", "text/plain")]
    )
    status, answer = first_answer(exchange(base, data))
    assert (status, answer) == (
        415,
        {"error": "send the body with one Content-Type: application/json header (got 2)"},
    )
    assert created(conn) == before


def test_http_servers_own_refusals_are_not_5xx(apply, hooks):
    """An unknown method and an HTTP/2.0 request line are the client's doing."""
    apply(GREET)
    base = hooks()
    status, answer = first_answer(exchange(base, signed_request(method="BREW")))
    assert status == 405 and "use POST" in answer["error"]
    status, answer = first_answer(exchange(base, b"GET /healthz HTTP/2.0\r\n\r\n"))
    assert status == 400 and "HTTP/1.1" in answer["error"]


# -- time and connections --------------------------------------------------------------------------
@pytest.mark.parametrize("phase", ["headers", "body"])
def test_a_trickling_request_is_cut_off_at_its_deadline(apply, hooks, phase):
    """A byte every 0.2 s never trips a per-read timeout; the whole request's deadline does."""
    apply(GREET)
    deadline = 2.0
    base = hooks("--request-timeout", str(deadline), "--idle-timeout", "60")
    data = signed_request(body=b'{"name": "' + b"x" * 500 + b'"}')
    head, _, body = data.partition(b"\r\n\r\n")
    prefix, trickle = (b"", head) if phase == "headers" else (head + b"\r\n\r\n", body)
    with socket.create_connection(("127.0.0.1", port_of(base)), timeout=30) as sock:
        sock.sendall(prefix)
        started, closed = time.monotonic(), False
        for byte in trickle:
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if is_closed(sock, 0.2):
                closed = True
                break
            if time.monotonic() - started > deadline + SLACK_S:
                break
        assert closed, f"still open {time.monotonic() - started:.1f}s into the {phase}"
    assert request(base, "GET", "/healthz")[0] == 200


def test_an_idle_keep_alive_connection_is_closed(apply, hooks):
    apply(GREET)
    base = hooks("--idle-timeout", "1")
    with socket.create_connection(("127.0.0.1", port_of(base)), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        status, answer = first_answer(read_one(sock))
        assert (status, answer) == (200, {"ok": True})  # kept alive: HTTP/1.1 with no close
        assert is_closed(sock, 1 + SLACK_S)


def test_connections_beyond_the_cap_are_turned_away(conn, apply, hooks):
    apply(GREET)
    cap = 4
    base = hooks("--max-connections", str(cap), "--idle-timeout", "60", "--request-timeout", "60")
    address = ("127.0.0.1", port_of(base))
    holders = [socket.create_connection(address, timeout=30) for _ in range(cap)]
    try:
        for _ in range(3):
            with socket.create_connection(address, timeout=30) as extra:
                status, answer = first_answer(read_all(extra))  # answered at once, then closed
                assert status == 503, answer
                assert f"the limit is {cap}" in answer["error"]
        assert not any(is_closed(sock, 0) for sock in holders), "a held connection was dropped"
        # A held connection is served as usual.
        holders[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert first_answer(read_one(holders[0])) == (200, {"ok": True})
    finally:
        for sock in holders:
            sock.close()
    # Once they are gone, newcomers are welcome again.
    harness.wait_for(lambda: _answers(base), timeout=30, what="a free connection slot")
    status, answer = first_answer(exchange(base, signed_request()))
    assert status == 202, answer
    assert created(conn)["runs"] == 1


def _answers(base: str) -> bool:
    return first_answer(exchange(base, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))[0] == 200


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        (
            "--request-timeout",
            "nan",
            "--request-timeout must be more than 0 and at most 3600 seconds",
        ),
        ("--request-timeout", "0", "--request-timeout must be more than 0"),
        ("--idle-timeout", "inf", "--idle-timeout must be more than 0 and at most 3600 seconds"),
        ("--max-connections", "0", "--max-connections must be positive"),
    ],
)
def test_limits_that_would_not_hold_are_refused_at_start(db_url, flag, value, says):
    result = cli(db_url, "hooks", "--port", "0", flag, value)
    assert result.returncode == 2
    assert says in result.stderr
