"""Every command that takes a run id takes the 8 characters the console shows (the id's tail:
run ids are UUIDv7, whose head is the time) and any unique prefix or tail of 8 or more, answers
an ambiguous one by listing the runs it matches, and a malformed one in one line naming it; no
database error reaches the user as a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from psycopg.conninfo import make_conninfo

from engine_adapter.model.names import short_run_id
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

GATED = """
slug: prefixed
steps:
  - id: first
    run_command: echo first
  - id: ship
    human_gate: "Ship it?"
"""
# Each command that takes a run id, as argv with RUN where the id goes.
COMMANDS = [
    ["show", "RUN"],
    ["show", "RUN", "--json"],
    ["reply", "RUN", "hello"],
    ["approve", "RUN"],
    ["deny", "RUN"],
    ["retry", "RUN"],
    ["rerun", "RUN", "--from", "ship"],
    ["cancel", "RUN"],
]
MISSING_RUN = "no run has an id starting or ending with"
NOT_AN_ID = "is not a run id"


def cli(db_url: str, argv: list[str], run: str, stdin: str | None = None):
    return harness.run_cli(db_url, *[run if a == "RUN" else a for a in argv], stdin=stdin)


def one_line_error(done, *words: str) -> str:
    """A refusal: non-zero, one line on stderr naming the problem, never a traceback."""
    err = done.stderr.strip()
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in err and "psycopg" not in err, err
    assert len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, err
    return err


def twin(conn, run_id: str) -> str:
    """A second run whose id shares the first 10 and last 25 characters of run_id (so its short
    id too): a copy of its row."""
    other = run_id[:10] + ("0" if run_id[10] != "0" else "1") + run_id[11:]
    conn.execute(
        "insert into threadline.run_threads select * from jsonb_populate_record("
        "null::threadline.run_threads, (select to_jsonb(r) || jsonb_build_object("
        "'run_id', %s::text, 'idempotency_key', null) from threadline.run_threads r "
        "where run_id = %s))",
        (other, run_id),
    )
    return str(uuid.UUID(other))


@pytest.fixture
def runs(conn, apply):
    """One run to name by its short id, and two whose ids share their head and their tail."""
    apply(GATED)
    named = spawn(conn, "prefixed", {}).run_id
    lone = spawn(conn, "prefixed", {}).run_id
    return named, lone, twin(conn, lone)


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a))
def test_each_command_takes_a_prefix_and_refuses_bad_ones_in_one_line(db_url, runs, argv):
    named, lone, twin_id = runs
    done = cli(db_url, argv, short_run_id(named))
    # The short id named the run: whatever the command answers is about it, never about the id.
    assert "Traceback" not in done.stderr, done.stderr
    assert NOT_AN_ID not in done.stderr and "ambiguous" not in done.stderr, done.stderr
    assert MISSING_RUN not in done.stderr, done.stderr
    if done.returncode == 0 and argv[0] in ("show", "cancel"):
        assert named in done.stdout, done.stdout
    else:  # a refusal of the command itself (no open gate, not failed): one line
        one_line_error(done) if done.returncode else None

    for shared in (lone[:10], short_run_id(lone)):  # a head and a tail both runs have
        both = one_line_error(cli(db_url, argv, shared), "ambiguous", lone, twin_id)
        assert shared in both
    one_line_error(cli(db_url, argv, "8de23fba;drop"), NOT_AN_ID, "'8de23fba;drop'")


def test_a_short_id_or_prefix_resolves_to_its_run_and_refusals_say_why(db_url, conn, runs):
    named, lone, _ = runs

    def shown(run: str) -> str:
        return json.loads(cli(db_url, ["show", "RUN", "--json"], run).stdout)["run_id"]

    # The console's short id, a head long enough to pass the minute (upper case and dashes are
    # the same id), a tail longer than 8, and the full id all name it.
    for form in (short_run_id(named), named[:19].upper(), named[-12:], named):
        assert shown(form) == named, form
    # Runs of the same minute share their first 8 characters: too few to tell them apart.
    if named[:8] == lone[:8]:
        one_line_error(cli(db_url, ["show", "RUN"], named[:8]), "ambiguous", named, lone)
    cancelled = cli(db_url, ["cancel", "RUN"], short_run_id(named))
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"cancelled {named}"
    state = conn.execute(
        "select state from threadline.run_threads where run_id = %s", (named,)
    ).fetchone()["state"]
    assert state == "cancelled"
    one_line_error(cli(db_url, ["show", "RUN"], "8de2"), "'8de2' is too short")
    unknown = "0" * 12
    one_line_error(cli(db_url, ["show", "RUN"], unknown), MISSING_RUN, unknown)
    one_line_error(cli(db_url, ["show", "RUN"], "x" * 300), NOT_AN_ID)


def test_resume_takes_a_short_id_and_refuses_an_ambiguous_one(db_url, runs):
    named, lone, twin_id = runs
    token = "tl_rt_" + "a" * 40
    garbage = "-" * 12  # the schema's characters, but no digit of an id
    for run, words in ((short_run_id(lone), ("ambiguous", twin_id)), (garbage, (NOT_AN_ID,))):
        done = harness.run_cli(
            db_url, "resume", stdin=json.dumps(dict(run_id=run, resume_token=token))
        )
        envelope = json.loads(done.stdout)
        assert done.returncode == 20 and envelope["error"]["type"] == "resume_refused"
        assert all(w in envelope["error"]["message"] for w in words), envelope
    # A unique short id gets past the id: the token is what is refused now.
    request = {"run_id": short_run_id(named), "resume_token": token}
    envelope = json.loads(harness.run_cli(db_url, "resume", stdin=json.dumps(request)).stdout)
    message = envelope["error"]["message"]
    assert NOT_AN_ID not in message and "ambiguous" not in message, message


def test_the_viewer_login_resolves_a_short_id(logins, runs):
    named, _, _ = runs
    done = cli(logins["viewer"], ["show", "RUN", "--json"], short_run_id(named))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run_id"] == named


def test_a_database_error_is_one_line_not_a_traceback(db_url):
    # Nothing listens on port 1: the connection fails (psycopg.OperationalError).
    bad = make_conninfo(db_url, port="1", connect_timeout="5")
    done = harness.run_cli(bad, "show", "8de23fba")
    one_line_error(done, "database error (OperationalError")
    assert done.returncode == 3


def test_the_api_takes_a_short_id_in_its_paths(db_url, runs, procs):
    import test_api

    named, lone, twin_id = runs
    port = harness.free_port()
    procs.start("console", args=["--port", str(port)])
    base = f"http://127.0.0.1:{port}"
    harness.wait_for(
        lambda: harness.answers(base + "/api/v1/openapi.json"), timeout=90, what="the console"
    )
    viewer = test_api.token(db_url, "vic", "viewer")
    status, body, _ = test_api.call(base, "GET", f"/runs/{short_run_id(named)}", viewer)
    assert status == 200 and body["run_id"] == named, body
    status, body, _ = test_api.call(base, "GET", f"/runs/{short_run_id(lone)}/steps", viewer)
    assert status == 400 and "ambiguous" in body["error"] and twin_id in body["error"], body
    status, body, _ = test_api.call(base, "GET", "/runs/8de23fba;x", viewer)
    assert status == 400 and "is not a run id" in body["error"], body
    status, body, _ = test_api.call(base, "GET", "/runs/000000000000", viewer)
    assert status == 404 and MISSING_RUN in body["error"], body


RUN_PAGE = """
import json, sys
from console.run_view import RunView
view = RunView(sys.argv[1], database_url=sys.argv[2])
print(json.dumps([view.found, view.run_id, view.missing]))
view.close()
"""


def test_the_console_run_page_takes_a_short_id(logins, runs):
    named, lone, twin_id = runs

    def page(run: str) -> list:
        done = subprocess.run(
            [sys.executable, "-c", RUN_PAGE, run, logins["console"]],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    assert page(short_run_id(named)) == [True, named, ""]
    found, _, missing = page(short_run_id(lone))
    assert not found and "ambiguous" in missing and twin_id in missing
    # The page names the value itself: the reason follows it ("No run nope (not a run id: ...)").
    found, _, missing = page("nope")
    assert not found and missing.startswith("not a run id")
    assert page("0" * 12)[0] is False


def test_the_notebook_frames_take_a_short_id(conn, runs):
    from engine_adapter.runs.run_ids import RunIdError
    from engine_adapter.testing import frames

    named, lone, _ = runs
    assert list(frames.steps_frame(conn, short_run_id(named))["id"]) == ["first", "ship"]
    assert frames.thread_frame(conn, named[:19]).equals(frames.thread_frame(conn, named))
    with pytest.raises(RunIdError, match="ambiguous"):
        frames.tree_frame(conn, short_run_id(lone))
