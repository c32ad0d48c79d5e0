"""The console's doors, attacked through a real console process over raw HTTP: sign-in links
guessed by another local account, a cookie kept after sign-out, an approver steering a run, and
the API fed bodies, ids and cursors it must refuse without reading or failing."""

from __future__ import annotations

import json
import socket
import time
import uuid
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness
from tests.integration.test_api import api, call, count, token  # noqa: F401 (api: a fixture)
from tests.integration.test_console_sign_in import Console, bokeh_token

STEER = "slug: steer\nsteps:\n  - id: wait\n    wait_for_event: go.now\n"
GATE = 'slug: asks\nsteps:\n  - id: ship\n    human_gate: "Ship?"\n'


def raw_request(port: int, head: str, body: bytes = b"", wait_s: float = 10.0) -> tuple[int, Any]:
    """Send head (and body), then read what the server answers within wait_s: (status, JSON)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        sock.sendall(head.encode() + body)
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head_text, _, rest = answer.partition(b"\r\n\r\n")
    return int(head_text.split()[1]), json.loads(rest)


def _length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


# -- #11: failed links from the shared address never lock out the right one ----------------------
def test_guessed_links_never_lock_out_the_owner_and_each_further_guess_waits(procs):
    console = Console(procs)
    answers = []
    for i in range(6):  # another local account guesses from 127.0.0.1, as the owner signs in
        started = time.monotonic()
        status, _, body = console.request("GET", f"/login?token=guess-{i}")
        answers.append((status, time.monotonic() - started))
    assert [s for s, _ in answers] == [401] * 4 + [429] * 2, answers
    assert all(took >= 1.5 for _, took in answers[4:]), answers  # a throttled guess waits
    assert "too many failed links came from this address" in body
    link = console.link()  # the owner's fresh link (minting it, a command, is not timed)
    started = time.monotonic()
    cookie = console.sign_in_with_link(link)  # from the same address
    assert time.monotonic() - started < 1.5  # not throttled: the right link never waits
    assert console.request("GET", "/recipes", cookie=cookie)[0] == 200


# -- #12: sign-out ends the session on the server ------------------------------------------------
def test_an_old_cookie_after_sign_out_loads_no_page_and_opens_no_websocket(procs):
    console = Console(procs)
    cookie, other = console.sign_in_with_link(), console.sign_in_with_link()
    status, _, page = console.request("GET", "/recipes", cookie=cookie)
    assert status == 200
    live = bokeh_token(page)
    assert console.websocket("/recipes", cookie, live) == 101
    status, headers, _ = console.request("GET", "/logout", cookie=cookie)
    assert status == 302 and headers["location"] == "/login?signed_out=1"
    # The browser forgets the cookie; whoever kept a copy finds it opens nothing any more.
    status, headers, _ = console.request("GET", "/recipes", cookie=cookie)
    assert status == 302 and headers["location"].startswith("./login"), (status, headers)
    assert console.websocket("/recipes", cookie, live) != 101
    status, _, _ = console.request("GET", "/run?id=" + str(uuid.uuid4()), cookie=cookie)
    assert status == 302
    assert console.request("GET", "/recipes", cookie=other)[0] == 200  # only that session ended
    # Sessions are the server's, not the process's: a restarted console keeps them.
    procs.procs[-1].kill()
    procs.procs[-1].wait()
    again = Console(procs)
    assert again.request("GET", "/recipes", cookie=other)[0] == 200
    assert again.request("GET", "/recipes", cookie=cookie)[0] == 302


# -- #14: an approver-only token replies only at a gate ------------------------------------------
@pytest.fixture
def console_only(request: pytest.FixtureRequest) -> str:
    """The API's base URL: a console with a conductor and bots (test_api's `api`)."""
    return request.getfixturevalue("api")


def human_entries(conn, run_id: str) -> list[str]:
    rows = conn.execute(
        "select text from threadline.thread_entries where run_id = %s and author_kind = 'human'",
        (run_id,),
    ).fetchall()
    return [r["text"] for r in rows]


def test_an_approver_replies_only_to_a_run_at_a_gate(db_url, conn, apply, procs, console_only):
    apply(STEER)
    apply(GATE)
    approver = token(db_url, "lead", "approver")
    operator = token(db_url, "ci", "operator")
    steered, gated = spawn(conn, "steer", {}).run_id, spawn(conn, "asks", {}).run_id
    harness.wait_for_state(procs.url, steered, "waiting")
    harness.wait_for_state(procs.url, gated, "waiting")

    status, refused, _ = call(
        console_only, "POST", f"/runs/{steered}/reply", approver, {"text": "rm -rf the lot"}
    )
    assert status == 409, refused
    assert "may reply only while the run waits at a gate" in refused["error"]
    assert human_entries(conn, steered) == []  # nothing reached the run
    status, _, _ = call(console_only, "POST", f"/runs/{steered}/reply", operator, {"text": "hi"})
    assert status == 200 and human_entries(conn, steered) == ["hi"]  # an operator steers

    status, _said, _ = call(console_only, "POST", f"/runs/{gated}/reply", approver, {"text": "ok?"})
    assert status == 200 and human_entries(conn, gated) == ["ok?"]  # at a gate it may


# -- #16: the API judges the token before the body; bad input is a 4xx in JSON -------------------
def test_the_token_is_judged_before_a_byte_of_the_body_is_read(db_url, procs, console_only):
    port = int(console_only.rsplit(":", 1)[1])
    viewer = token(db_url, "dash", "viewer")
    operator = token(db_url, "ci", "operator")

    def head(bearer: str | None, length: str = "Content-Length: 90000000") -> str:
        auth = f"Authorization: Bearer {bearer}\r\n" if bearer else ""
        return (
            f"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"{auth}{length}\r\n\r\n"
        )

    # Headers promising 90 MB, and no body at all: answered at once, not after waiting for it.
    for bearer, want in ((None, 401), ("tl_api_forged", 401), (viewer, 403), (operator, 413)):
        started = time.monotonic()
        status, answer = raw_request(port, head(bearer), wait_s=5)
        assert status == want and answer["error"], (bearer, status, answer)
        assert time.monotonic() - started < 2
    status, answer = raw_request(port, head(operator, "Transfer-Encoding: chunked"), wait_s=5)
    assert status == 411 and "Content-Length" in answer["error"]

    # The pages take no body at all: one promised to a page is refused before it comes.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head(None).replace("/api/v1/runs", "/recipes").encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 400"), "a page waited for a 90 MB body"

    # Three unauthenticated 90 MB bodies: refused, and the console holds none of them.
    pid = procs.procs[-1].pid
    before = rss_kib(pid)
    body = b"[" * 90_000_000
    for _ in range(3):
        try:
            status, answer = raw_request(port, head(None), body)
        except (BrokenPipeError, ConnectionResetError):
            continue  # refused before it was all sent
        assert status == 401, answer
    assert rss_kib(pid) - before < 50_000, (before, rss_kib(pid))


def test_malformed_ids_cursors_and_bodies_are_a_4xx_in_json(db_url, conn, apply, console_only):
    apply(GATE)
    lead = token(db_url, "lead", "operator", "approver")
    before = (count(conn, "threadline.run_threads"), count(conn, "threadline.thread_entries"))
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    run = f"/runs/{uuid.uuid4()}"
    cases = [
        ("GET", "/runs/not-a-run", None, lead, 400, "run_id: 'not-a-run' is not a run id"),
        ("GET", "/runs/not-a-run/thread", None, lead, 400, "run_id"),
        ("POST", "/runs/1%27/approve", {}, lead, 400, "run_id"),
        ("GET", "/runs?after=garbage", None, lead, 400, "after: 'garbage' is not a page cursor"),
        ("GET", "/runs?after=2026-01-01T00:00:00~x", None, lead, 400, "after:"),
        ("GET", "/runs?after=9999-99-99~" + str(uuid.uuid4()), None, lead, 400, "after:"),
        ("GET", run + "/thread?after=99999999999999999999", None, lead, 400, "after: '9999"),
        ("GET", "/workflows/a%00b", None, lead, 400, "slug: at most"),
        ("GET", "/runs?search=%ff", None, lead, 400, "the query"),
        ("GET", "/proposals/99999999999999999999999", None, lead, 400, "proposal_id"),
        ("POST", "/runs", deep, None, 401, "bearer token"),  # no token: refused unread
        ("POST", "/runs", deep, lead, 400, "nested too deeply"),
        ("POST", "/runs", {"workflow": ["asks"]}, lead, 400, "workflow: must be a string"),
        ("POST", "/runs", {"workflow": "asks\u0000"}, lead, 400, "NUL"),
        ("POST", "/runs", {"workflow": "asks", "idempotency_key": 7}, lead, 400,
         "idempotency_key: must be a string"),
        ("POST", run + "/approve", {"reason": {"a": 1}}, lead, 400, "reason: must be a string"),
        ("POST", run + "/reply", {"text": 5}, lead, 400, "text: must be a string"),
        ("POST", "/runs", b'{"workflow": NaN}', lead, 400, "NaN"),
        ("POST", "/runs", b'{"workflow": "\xc3("}', lead, 400, "not UTF-8"),
        ("HEAD", "/runs", None, lead, 405, None),
    ]  # fmt: skip
    for method, path, body, bearer, want, says in cases:
        if method == "HEAD":
            status = raw_head(console_only, path, bearer)
            assert status == want, (path, status)
            continue
        status, answer, _ = call(console_only, method, path, bearer, body)
        assert status == want, (method, path, status, answer)
        assert says is None or says in answer["error"], (path, answer)
    # The payload nested deeper than a recipe may be: named, refused.
    status, answer, _ = call(
        console_only, "POST", "/runs", lead, {"workflow": "asks", "payload": nested(70)}
    )
    assert status == 400 and "nested deeper than 64 levels" in answer["error"], answer
    after = (count(conn, "threadline.run_threads"), count(conn, "threadline.thread_entries"))
    assert after == before


def raw_head(base: str, path: str, bearer: str) -> int:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=10)
    conn.request("HEAD", "/api/v1" + path, headers={"Authorization": f"Bearer {bearer}"})
    status = conn.getresponse().status
    conn.close()
    return status


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


SEGMENT = st.text(st.characters(codec="utf-8"), max_size=30)
VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


def test_any_input_to_any_route_is_answered_in_json_below_500(db_url, conn, apply, console_only):
    from console.api import ROUTES

    apply(GATE)
    lead = token(db_url, "fuzz", "operator", "approver")
    before = (count(conn, "threadline.run_threads"), count(conn, "threadline.thread_entries"))

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        route=st.sampled_from(ROUTES),
        params=st.fixed_dictionaries({}, optional={"a": SEGMENT, "b": SEGMENT}),
        segment=SEGMENT,
        body=st.one_of(
            st.none(),
            st.binary(max_size=200),
            st.dictionaries(st.sampled_from(["workflow", "payload", "text", "reason", "gate",
                                             "recipe", "to", "note", "x"]), VALUE),
        ),
    )  # fmt: skip
    def probe(route: Any, params: dict[str, str], segment: str, body: Any) -> None:
        path = route.path
        for name in ("run_id", "slug", "proposal_id"):
            path = path.replace("{" + name + "}", quote(segment, safe="") or "x")
        query = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())
        path += f"?{query}" if query else ""
        status, answer, headers = call(console_only, route.method, path, lead, body)
        assert 200 <= status < 500, (route.method, path, body, status, answer)
        assert headers["Content-Type"] == "application/json"

    probe()
    assert (count(conn, "threadline.run_threads"), count(conn, "threadline.thread_entries")) == (
        before
    )
