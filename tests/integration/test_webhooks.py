"""Webhooks end to end: a real `threadline hooks` process on 127.0.0.1, real HTTP, the real
database.

Every refused request is checked to have created nothing: no run, no thread entry, no engine task,
no delivery row.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.ingress.webhook_auth import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign,
)
from engine_adapter.recipes.recipes import RecipeError, load_recipe_file
from engine_adapter.testing import harness

SECRET = "a-long-random-secret"
SECRET_VAR = "TL_TEST_WEBHOOK_SECRET"
MAX_BYTES = 1 << 20

GREET = f"""
slug: greet
webhooks:
  - path: greet
    secret: env:{SECRET_VAR}
steps:
  - id: hello
    run_command: echo hello {{{{payload.name}}}}
"""


# -- helpers ---------------------------------------------------------------------------------------
@pytest.fixture
def hooks(procs: harness.ProcessSet, tmp_path: Path):
    """Start `threadline hooks` on a free port (--port 0); returns its base URL once it serves."""

    def start(*args: str, env: dict[str, str] | None = None) -> str:
        log = tmp_path / "hooks.log"
        seen = len(log.read_text()) if log.exists() else 0
        procs.start(
            "hooks", env={SECRET_VAR: SECRET} if env is None else env, args=["--port", "0", *args]
        )
        match = harness.wait_for(
            lambda: (
                log.exists()
                and re.search(r"listening on http://\S+?:(\d+)/hooks/", log.read_text()[seen:])
            ),
            timeout=60,
            what="threadline hooks to listen",
        )
        base = f"http://127.0.0.1:{match.group(1)}"
        assert request(base, "GET", "/healthz")[:2] == (200, {"ok": True})
        return base

    return start


def request(
    base: str,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    length: int | bool | None = True,
) -> tuple[int, dict[str, Any], Any]:
    """One HTTP request; length=True sends Content-Length for body, None omits it, an int lies.
    A POST says its body is JSON unless headers name another Content-Type."""
    url = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    headers = dict(headers or {})
    if method == "POST" and not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = "application/json"
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        if length is True:
            conn.putheader("Content-Length", str(len(body)))
        elif length is not None:
            conn.putheader("Content-Length", str(length))
        conn.endheaders()
        if body and length is True:
            conn.send(body)
        response = conn.getresponse()
        return response.status, json.loads(response.read()), response.headers
    finally:
        conn.close()


def signed(
    body: bytes, secret: str = SECRET, at: float | None = None, delivery: str | None = None
) -> dict[str, str]:
    timestamp = str(int(time.time() if at is None else at))
    headers = {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: sign(secret, timestamp, body)}
    if delivery is not None:
        headers[DELIVERY_HEADER] = delivery
    return headers


def post(
    base: str, path: str, payload: Any, *, delivery: str | None = None, secret: str | None = SECRET
) -> tuple[int, dict[str, Any], Any]:
    body = json.dumps(payload).encode()
    headers = (
        signed(body, secret, delivery=delivery)
        if secret
        else ({DELIVERY_HEADER: delivery} if delivery else {})
    )
    return request(base, "POST", f"/hooks/{path}", body, headers)


def created(conn) -> dict[str, int]:
    """What a delivery may create; a refused one must leave every count as it was."""
    tables = {
        "runs": "threadline.run_threads",
        "entries": "threadline.thread_entries",
        "tasks": "absurd.t_threadline",
        "deliveries": "threadline.webhook_deliveries",
    }
    return {
        k: conn.execute(f"select count(*) as n from {t}").fetchone()["n"] for k, t in tables.items()
    }


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, THREADLINE_DATABASE_URL=url)
    return subprocess.run(
        [sys.executable, "-m", "engine_adapter.cli", *args],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


# -- tests -----------------------------------------------------------------------------------------
def test_a_signed_delivery_starts_a_run_that_completes_and_retries_find_it(
    db_url, conn, apply, procs, hooks
):
    apply(GREET)
    procs.start("conductor")
    procs.start("bots")
    base = hooks()
    body = json.dumps({"name": "webhook"}).encode()
    captured = signed(body, delivery="delivery-1")
    status, answer, _ = request(base, "POST", "/hooks/greet", body, captured)
    assert status == 202, answer
    run_id = answer["run_id"]
    assert answer == {"run_id": run_id, "delivery": "delivery-1"}

    view = harness.wait_for_state(db_url, run_id, "completed", timeout=60)
    assert view["steps"][0]["output"].strip() == "hello webhook"
    assert view["trigger"] == {
        "kind": "webhook",
        "path": "greet",
        "delivery": "delivery-1",
        "caller": "127.0.0.1",
    }
    assert view["payload"] == {"name": "webhook"}
    opening = view["thread"][0]["text"]  # the run's thread says how it started
    assert all(word in opening for word in ("webhook", "greet", "delivery-1", "127.0.0.1")), opening

    # The sender retries (signing again, later): the same run, answered 200.
    assert post(base, "greet", {"name": "webhook"}, delivery="delivery-1")[:2] == (
        200,
        {"run_id": run_id, "delivery": "delivery-1"},
    )
    # Someone resends the captured request under a new delivery id: its signature gives it away.
    replay = dict(captured, **{DELIVERY_HEADER: "delivery-2"})
    assert request(base, "POST", "/hooks/greet", body, replay)[:2] == (
        200,
        {"run_id": run_id, "delivery": "delivery-1"},
    )
    assert created(conn)["runs"] == 1 and created(conn)["deliveries"] == 1


def test_bad_requests_are_refused_and_create_nothing(conn, apply, hooks):
    apply(GREET)
    apply(GREET.replace("greet", "paused"))
    conn.execute("update threadline.workflows set enabled = false where slug = 'paused'")
    base = hooks()
    # The largest body accepted is exactly the limit; it makes the one run of this test.
    pad = b'{"name": "' + b"x" * (MAX_BYTES - 12) + b'"}'
    assert len(pad) == MAX_BYTES
    status, answer, _ = request(base, "POST", "/hooks/greet", pad, signed(pad))
    assert status == 202, answer
    before = created(conn)
    assert before["runs"] == 1

    good = b'{"name": "x"}'
    now = time.time()
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        ("wrong secret", {"headers": signed(good, "not-the-secret")}, 401, "does not match"),
        (
            "tampered body",
            {"body": b'{"name": "y"}', "headers": signed(good)},
            401,
            "does not match",
        ),
        (
            "no signature",
            {"headers": {TIMESTAMP_HEADER: str(int(now))}},
            401,
            f"missing {SIGNATURE_HEADER}",
        ),
        (
            "no timestamp",
            {"headers": {SIGNATURE_HEADER: sign(SECRET, int(now), good)}},
            401,
            f"missing {TIMESTAMP_HEADER}",
        ),
        (
            "stale timestamp",
            {"headers": signed(good, at=now - 400)},
            401,
            "s old; accepted within 300s",
        ),
        ("future timestamp", {"headers": signed(good, at=now + 400)}, 401, "in the future"),
        (
            "malformed JSON",
            {"body": b'{"name": ', "headers": signed(b'{"name": ')},
            400,
            "not valid JSON",
        ),
        (
            "NaN",
            {"body": b'{"n": NaN}', "headers": signed(b'{"n": NaN}')},
            400,
            "NaN is not a JSON value",
        ),
        ("empty body", {"body": b"", "headers": signed(b"")}, 400, "not valid JSON"),
        (
            "not an object",
            {"body": b"[1, 2]", "headers": signed(b"[1, 2]")},
            400,
            "must be a JSON object, got list",
        ),
        (
            "NUL in a string",
            {"body": b'{"a": "\\u0000"}', "headers": signed(b'{"a": "\\u0000"}')},
            400,
            "cannot be stored",
        ),
        (
            "bad delivery id",
            {"headers": signed(good, delivery="has spaces")},
            400,
            f"{DELIVERY_HEADER} must be",
        ),
        (
            "unknown path",
            {"path": "/hooks/nope", "headers": signed(good)},
            404,
            "no webhook at /hooks/nope",
        ),
        (
            "outside /hooks/",
            {"path": "/greet", "headers": signed(good)},
            404,
            "webhooks are at POST",
        ),
        (
            "GET",
            {"method": "GET", "body": b"", "headers": {}},
            405,
            "GET is not allowed here; use POST",
        ),
        ("PUT", {"method": "PUT", "headers": signed(good)}, 405, "use POST"),
        (
            "no Content-Length",
            {"headers": signed(good), "length": None},
            411,
            "Content-Length header required",
        ),
        (
            "chunked",
            {"headers": dict(signed(good), **{"Transfer-Encoding": "chunked"}), "length": None},
            411,
            "chunked bodies are not accepted",
        ),
        (
            "oversized",
            {"body": b"", "headers": signed(good), "length": MAX_BYTES + 1},
            413,
            f"the limit is {MAX_BYTES}",
        ),
        (
            "disabled workflow",
            {"path": "/hooks/paused", "headers": signed(good)},
            409,
            "workflow 'paused' is disabled",
        ),
    ]
    for name, case, want_status, want_error in cases:
        kwargs = {"method": "POST", "path": "/hooks/greet", "body": good, "length": True} | case
        status, answer, headers = request(
            base,
            kwargs["method"],
            kwargs["path"],
            kwargs["body"],
            kwargs["headers"],
            kwargs["length"],
        )
        assert (status, want_error in answer.get("error", "")) == (want_status, True), (
            name,
            answer,
        )
        if status == 405:
            assert headers["Allow"] == "POST", name
        assert created(conn) == before, f"{name} created something"
    status, answer, headers = request(base, "POST", "/healthz", b"{}")
    assert (status, headers["Allow"]) == (405, "GET")
    assert request(base, "GET", "/healthz")[:2] == (200, {"ok": True})  # still serving


def test_payload_mapping(conn, apply, hooks):
    apply(f"""
slug: review
webhooks:
  - path: github/pull-request
    secret: env:{SECRET_VAR}
    map:
      pr: $.pull_request.number
      title: $.pull_request.title
      first_commit: $.commits[0].id
steps:
  - id: review
    run_command: echo reviewing {{{{payload.pr}}}}
""")
    base = hooks()
    event = {
        "action": "opened",
        "pull_request": {"number": 42, "title": "Fix the build"},
        "commits": [{"id": "abc123"}, {"id": "def456"}],
    }
    status, answer, _ = post(base, "github/pull-request", event, delivery="gh-1")
    assert status == 202, answer
    row = conn.execute(
        "select payload, trigger from threadline.run_threads where run_id = %s", (answer["run_id"],)
    ).fetchone()
    assert row["payload"] == {"pr": 42, "title": "Fix the build", "first_commit": "abc123"}
    assert row["trigger"]["path"] == "github/pull-request"

    before = created(conn)
    status, answer, _ = post(base, "github/pull-request", {"action": "ping"}, delivery="gh-2")
    assert status == 400
    assert (
        answer["error"]
        == 'map.pr: $.pull_request.number finds nothing ($ has no key "pull_request")'
    )
    assert created(conn) == before


def test_a_payload_the_schema_refuses_is_unprocessable_and_starts_nothing(conn, apply, hooks):
    apply("""
slug: checks
payload_schema:
  type: object
  properties: {target: {type: string, pattern: "^[^-]"}}
  required: [target]
webhooks:
  - path: checks
steps:
  - id: checks
    run_command: echo {{payload.target}}
""")
    base = hooks()
    before = created(conn)
    status, answer, _ = post(base, "checks", {"target": "--basetemp=/x"}, secret=None)
    assert status == 422, answer
    assert 'payload.target: "--basetemp=/x" does not match "^[^-]"' in answer["error"]
    assert created(conn) == before
    assert post(base, "checks", {"target": "tests/"}, secret=None)[0] == 202


def test_unsigned_loopback_webhooks_new_recipes_and_body_hash_deliveries(conn, apply, hooks):
    base = hooks()
    assert post(base, "late", {"n": 1}, secret=None)[0] == 404
    recipe = "slug: late\nwebhooks:\n  - path: late\nsteps:\n  - id: s\n    run_command: echo\n"
    apply(recipe)  # no restart: the ingress reads triggers per request
    status, first, _ = post(base, "late", {"n": 1}, secret=None)
    assert status == 202
    assert first["delivery"].startswith("sha256:")  # no delivery id: the body's hash stands in
    assert post(base, "late", {"n": 1}, secret=None)[:2] == (200, first)
    status, second, _ = post(base, "late", {"n": 2}, secret=None)
    assert status == 202 and second["run_id"] != first["run_id"]

    apply(recipe.replace("path: late", "path: moved"))
    assert post(base, "late", {"n": 3}, secret=None)[0] == 404
    assert post(base, "moved", {"n": 3}, secret=None)[0] == 202
    # A delivery accepted before its workflow was disabled is still found; a new one is refused.
    conn.execute("update threadline.workflows set enabled = false where slug = 'late'")
    assert post(base, "moved", {"n": 3}, secret=None)[0] == 200
    assert post(base, "moved", {"n": 4}, secret=None)[0] == 409
    assert created(conn)["runs"] == 3


def test_concurrent_duplicates_make_one_run(conn, apply, hooks):
    apply(GREET)
    base = hooks()
    body = b'{"name": "race"}'
    same_delivery = [signed(body, delivery="same") for _ in range(6)]
    with ThreadPoolExecutor(6) as pool:
        answers = list(
            pool.map(lambda h: request(base, "POST", "/hooks/greet", body, h)[:2], same_delivery)
        )
    assert sorted(s for s, _ in answers) == [200] * 5 + [202]
    assert len({a["run_id"] for _, a in answers}) == 1
    # One captured request sent under many delivery ids at once.
    captured = signed(b'{"name": "replayed"}')
    with ThreadPoolExecutor(6) as pool:
        answers = list(
            pool.map(
                lambda i: request(
                    base,
                    "POST",
                    "/hooks/greet",
                    b'{"name": "replayed"}',
                    dict(captured, **{DELIVERY_HEADER: f"id-{i}"}),
                )[:2],
                range(6),
            )
        )
    assert sorted(s for s, _ in answers) == [200] * 5 + [202]
    assert len({a["run_id"] for _, a in answers}) == 1
    assert created(conn)["runs"] == 2 and created(conn)["tasks"] == 2


def test_a_signed_request_replayed_to_another_path_is_refused(conn, apply, hooks):
    """Two paths share a secret: a request captured at one and resent to the other within the
    window carries a valid signature, but that signature was spent; it starts nothing there."""
    apply(GREET)
    apply(GREET.replace("greet", "wave"))
    base = hooks()
    body = json.dumps({"name": "captured"}).encode()
    captured = signed(body, delivery="d-1")
    status, first, _ = request(base, "POST", "/hooks/greet", body, captured)
    assert status == 202
    before = created(conn)
    for headers in (captured, dict(captured, **{DELIVERY_HEADER: "d-2"})):
        status, answer, _ = request(base, "POST", "/hooks/wave", body, headers)
        assert (status, answer) == (
            409,
            {
                "error": (
                    "this signed request was already delivered to /hooks/greet; "
                    "a delivery to /hooks/wave "
                    f"needs a signature of its own (sign it again with a new {TIMESTAMP_HEADER})"
                )
            },
        )
    assert created(conn) == before
    # At its own path it is still a repeat of the first delivery; signed anew it is welcome.
    assert request(base, "POST", "/hooks/greet", body, captured)[:2] == (200, first)
    status, _, _ = request(
        base, "POST", "/hooks/wave", body, signed(body, at=time.time() + 1, delivery="d-1")
    )
    assert status == 202 and created(conn)["runs"] == 2


def test_a_path_belongs_to_one_workflow(db_url, conn, tmp_path):
    first = tmp_path / "first.yaml"
    first.write_text(
        "slug: first\nwebhooks:\n  - path: shared\nsteps:\n  - id: s\n    run_command: echo\n"
    )
    second = tmp_path / "second.yaml"
    second.write_text(
        "slug: second\nwebhooks:\n  - path: own\n  - path: shared\n"
        "steps:\n  - id: s\n    run_command: echo\n"
    )
    assert cli(db_url, "recipe", "apply", str(first)).returncode == 0
    result = cli(db_url, "recipe", "apply", str(second))
    assert result.returncode == 10
    assert result.stderr.strip() == 'webhooks[1].path: "shared" is already used by workflow "first"'
    # apply_recipe itself says so (the console shows the same), and writes nothing.
    with pytest.raises(RecipeError) as taken:
        apply_recipe(conn, load_recipe_file(second))
    assert taken.value.errors == ['webhooks[1].path: "shared" is already used by workflow "first"']
    assert [r["slug"] for r in conn.execute("select slug from threadline.workflows")] == ["first"]
    assert [r["path"] for r in conn.execute("select path from threadline.webhook_triggers")] == [
        "shared"
    ]
    # The owner may keep it across versions; once it lets go, another may take it.
    first.write_text(first.read_text().replace("run_command: echo", "run_command: echo v2"))
    assert cli(db_url, "recipe", "apply", str(first)).stdout.strip() == "first v2"
    first.write_text(first.read_text().replace("path: shared", "path: elsewhere"))
    assert cli(db_url, "recipe", "apply", str(first)).returncode == 0
    assert cli(db_url, "recipe", "apply", str(second)).returncode == 0
    owners = conn.execute(
        "select path, workflow from threadline.webhook_triggers order by path"
    ).fetchall()
    assert [(r["path"], r["workflow"]) for r in owners] == [
        ("elsewhere", "first"),
        ("own", "second"),
        ("shared", "second"),
    ]


def test_listening_beyond_loopback_needs_every_webhook_signed(db_url, conn, apply, hooks):
    apply(
        "slug: open-one\nwebhooks:\n  - path: unsigned\nsteps:\n  - id: s\n    run_command: echo\n"
    )
    apply(GREET)
    refused = cli(db_url, "hooks", "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 2
    assert "refusing to listen on 0.0.0.0, which is not loopback" in refused.stderr
    assert "/hooks/unsigned (workflow open-one)" in refused.stderr
    assert "/hooks/greet" not in refused.stderr

    apply(
        f"slug: open-one\nwebhooks:\n  - path: unsigned\n    secret: env:{SECRET_VAR}\n"
        "steps:\n  - id: s\n    run_command: echo\n"
    )
    base = hooks("--host", "0.0.0.0")
    assert post(base, "greet", {"name": "far"})[0] == 202
    # A recipe applied afterwards cannot open an unsigned door on this address.
    apply("slug: later\nwebhooks:\n  - path: later\nsteps:\n  - id: s\n    run_command: echo\n")
    before = created(conn)
    status, answer, _ = post(base, "later", {}, secret=None)
    assert status == 403 and "has no secret" in answer["error"]
    assert created(conn) == before


def test_up_supervises_the_ingress_and_prints_its_url(db_url, apply, tmp_path):
    apply(GREET)
    port = harness.free_port()
    log = tmp_path / "up.log"
    env = dict(
        os.environ,
        THREADLINE_DATABASE_URL=db_url,
        THREADLINE_HOME=str(tmp_path),
        **{SECRET_VAR: SECRET},
    )
    with open(log, "ab") as out:
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "engine_adapter.cli",
                "up",
                "--no-console",
                "--hooks-port",
                str(port),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        harness.wait_for(lambda: "Threadline is up" in log.read_text(), timeout=90, what="up")
        assert f"webhooks: http://127.0.0.1:{port}/hooks/<path>" in log.read_text()
        base = f"http://127.0.0.1:{port}"
        harness.wait_for(lambda: _healthy(base), timeout=60, what="the ingress")
        status, answer, _ = post(base, "greet", {"name": "up"})
        assert status == 202, answer
        view = harness.wait_for_state(db_url, answer["run_id"], "completed", timeout=60)
        assert view["steps"][0]["output"].strip() == "hello up"
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=60) == 0


def _healthy(base: str) -> bool:
    try:
        return request(base, "GET", "/healthz")[0] == 200
    except OSError:
        return False


DEPLOY_WAIT = f"""
slug: waits-for-deploy
webhooks:
  - path: deployed
    secret: env:{SECRET_VAR}
    event: deploy.done
    key: $.sha
steps:
  - id: deployed
    wait_for_event: deploy.done
    key: "{{{{payload.sha}}}}"
  - id: after
    run_command: echo "deployed {{{{steps.deployed.output}}}}"
"""


def test_a_webhook_with_event_delivers_it_to_the_waiting_run_once(
    db_url, conn, apply, procs, hooks
):
    from engine_adapter.runs.spawn import spawn

    apply(DEPLOY_WAIT)
    procs.start("conductor")
    procs.start("bots")
    base = hooks()
    run_id = spawn(conn, "waits-for-deploy", {"sha": "c0ffee"}).run_id
    harness.wait_for_state(db_url, run_id, "waiting", timeout=30)
    body = json.dumps({"sha": "c0ffee", "url": "https://example.test"}).encode()
    captured = signed(body, delivery="d-1")
    status, answer, _ = request(base, "POST", "/hooks/deployed", body, captured)
    assert status == 202, answer
    assert (answer["event"], answer["key"], answer["released"]) == ("deploy.done", "c0ffee", 1)
    again = request(base, "POST", "/hooks/deployed", body, captured)  # a replay: nothing more
    assert again[0] == 202 and again[1]["released"] == 0
    view = harness.wait_for_state(db_url, run_id, "completed", timeout=30)
    assert view["steps"][1]["output"].strip() == (
        'deployed {"sha": "c0ffee", "url": "https://example.test"}'
    )
    delivered = conn.execute(
        "select count(*) as n from threadline.outside_events where name = 'deploy.done'"
    ).fetchone()["n"]
    assert delivered == 1
    no_key = json.dumps({"url": "x"}).encode()
    status, answer, _ = request(base, "POST", "/hooks/deployed", no_key, signed(no_key))
    assert status == 400 and "$.sha" in answer["error"], answer
