"""Each process's own database login, used as an attacker holding it would (issue 22, findings 2,
3, 7 and 13): every attempt is refused by the database and changes nothing (rows counted, the
run's state read back); and the doors that hold these logins still do their work.

- #2: the webhook ingress's login starts only a workflow whose webhook (or on_event) it serves,
  with the recipe the workflow's row holds; it writes no table itself.
- #3: the ingress's login decides a gate only by presenting that gate's resume token, as its
  subject, in the transaction that used it, and never without the decision's audit row.
- #7: the viewer's login changes no run's state: it executes nothing that writes.
- #13: the console's login inserts no API token; it mints, through a checked function, only a
  token an account mints for itself, and only for a person who presented a credential.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from engine_adapter.model import names
from engine_adapter.model.identity import Actor, os_user
from engine_adapter.model.settings import DATABASE_URL_ENV, HOME_ENV, QUEUE, write_credentials
from engine_adapter.runs import gates, resume_tokens, run_state, thread_entries
from engine_adapter.runs.spawn import ChildOf, Snapshot, spawn
from engine_adapter.store import db, grants
from engine_adapter.testing import harness

HOOKED = """
slug: hooked
webhooks:
  - path: in
steps:
  - id: work
    run_command: echo hooked
"""
PLAIN = """
slug: plain
steps:
  - id: work
    run_command: echo plain
"""
LISTENS = """
slug: listens
on_event: deploy.done
steps:
  - id: work
    run_command: echo deployed
"""
ASK = """
slug: ask
steps:
  - id: ask
    human_gate: "Ship it?"
"""
FORGED = {"slug": "hooked", "steps": [{"id": "work", "run_command": "id > /tmp/owned"}]}
WEBHOOK = {"kind": "webhook", "path": "in", "delivery": "d1", "caller": "127.0.0.1"}


def refused(conn: psycopg.Connection, statement: str, params: Any = None) -> str:
    """The statement is refused for lack of privilege (its transaction rolled back)."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as info, conn.transaction():
        conn.execute(statement, params)
    return str(info.value)


def counts(conn: psycopg.Connection) -> dict[str, Any]:
    """What an attack could have changed: rows of every table a run, a delivery, a decision or a
    token lives in, and each run's state."""
    tables = (
        "threadline.run_threads",
        "threadline.thread_entries",
        "threadline.webhook_deliveries",
        "threadline.outside_events",
        "threadline.decisions",
        "threadline.decision_audit",
        "threadline.api_tokens",
        "absurd.t_threadline",
        "absurd.r_threadline",
    )
    found: dict[str, Any] = {
        t: conn.execute(f"select count(*) as n from {t}").fetchone()["n"] for t in tables
    }
    found["states"] = {
        str(r["run_id"]): (r["state"], r["awaiting"], r["queue_seq"])
        for r in conn.execute(
            "select run_id, state, awaiting, queue_seq from threadline.run_threads"
        )
    }
    # Threadline's own events (a step released, a run admitted); a conductor emits others. Only
    # those the conductor's cleanup may not remove meanwhile (younger than the run retention):
    # what an attack would emit is new.
    found["events"] = conn.execute(
        "select count(*) as n from absurd.e_threadline where event_name like 'threadline.%%'"
        " and emitted_at >= absurd.current_time()"
        " - make_interval(secs => (select runs_s from threadline.retention_defaults))"
    ).fetchone()["n"]
    found["tokens used"] = conn.execute(
        "select count(*) as n from threadline.resume_tokens where used_at is not null"
    ).fetchone()["n"]
    return found


def only_reads(conn: psycopg.Connection, role: str) -> set[str]:
    """Asserts that the role holds no table, column or sequence privilege but SELECT; returns the
    security-definer routines it executes (what may write with another role's rights)."""
    held = grants.held(conn, [role])
    writes = {
        g for g in held if g.kind in ("table", "column", "sequence") and g.privilege != "SELECT"
    }
    assert not writes, grants.render(writes)
    definers = {
        r["fn"]
        for r in conn.execute(
            "select format('%%s.%%s(%%s)', n.nspname, p.proname, oidvectortypes(p.proargtypes))"
            " as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace"
            " where n.nspname in ('threadline', 'absurd')"
            "   and p.prosecdef and has_function_privilege(%s, p.oid, 'EXECUTE')",
            (role,),
        )
    }
    return definers


# -- #2: the ingress starts only its webhooks' workflows ---------------------------------------
def test_finding_2_the_ingress_login_starts_no_run_but_a_webhooks_own(conn, apply, logins):
    for recipe in (HOOKED, PLAIN, LISTENS):
        apply(recipe)
    plain_run = spawn(conn, "plain").run_id
    before = counts(conn)
    event = {"kind": "event", "event": "deploy.done", "event_id": "webhook:in:sig"}
    with db.connect(logins["hooks"]) as h:
        # Tables: no write at all, Absurd's included.
        refused(
            h,
            "insert into threadline.run_threads (run_id, workflow, workflow_version, recipe_hash,"
            " recipe, payload, bot, trigger) values (gen_random_uuid(), 'plain', 1, 'x', %s, '{}',"
            " 'default', '{}')",
            (Jsonb(FORGED),),
        )
        refused(h, "insert into absurd.t_threadline default values")
        refused(h, "insert into absurd.r_threadline default values")
        refused(h, "update threadline.run_threads set state = 'queued'")
        refused(
            h,
            "insert into threadline.webhook_deliveries (path, delivery, run_id)"
            " values ('in', 'x', %s)",
            (plain_run,),
        )
        refused(
            h,
            "insert into threadline.outside_events (name, event_id, payload)"
            " values ('deploy.done', 'x', '{}')",
        )
        refused(h, "select * from absurd.spawn_task(%s, 'threadline.run', %s)", (QUEUE, Jsonb({})))
        refused(h, "select absurd.emit_event(%s, 'threadline.run.admit:x', '{}')", (QUEUE,))
        refused(h, "select threadline.queue_run(%s, 'plain')", (plain_run,))
        # The spawn door: only a workflow whose webhook is at the trigger's path, with the
        # recipe of its row, by the key that path and delivery make.
        attempts: dict[str, dict[str, Any]] = {
            "a workflow without that webhook": dict(
                workflow="plain", trigger=WEBHOOK, idempotency_key="webhook:in:d1"
            ),
            "another path": dict(
                trigger={**WEBHOOK, "path": "elsewhere"}, idempotency_key="webhook:elsewhere:d1"
            ),
            "a key of its own": dict(trigger=WEBHOOK, idempotency_key="manual:hooked:x"),
            "a manual trigger": dict(trigger={"kind": "manual", "caller": "alice"}),
            "a forged recipe": dict(
                trigger=WEBHOOK,
                idempotency_key="webhook:in:d1",
                snapshot=Snapshot(FORGED, 1, "forged"),
            ),
            "a child run": dict(
                trigger=WEBHOOK,
                idempotency_key="webhook:in:d1",
                child=ChildOf(run_id=plain_run, step="work", try_no=1, branch="0"),
            ),
            "carried results": dict(
                trigger=WEBHOOK,
                idempotency_key="webhook:in:d1",
                carried={"run_id": plain_run, "steps": [], "views": {}, "named": {}},
            ),
            "an event no webhook delivers": dict(
                workflow="listens",
                trigger=event,
                idempotency_key="event:deploy.done:webhook:in:sig:listens",
            ),
        }
        for what, attempt in attempts.items():
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="starting a run"):
                spawn(h, attempt.pop("workflow", "hooked"), {"x": 1}, **attempt)
            assert h.info.transaction_status == psycopg.pq.TransactionStatus.IDLE, what
        # The checked recording functions refuse what is not theirs.
        refused(
            h,
            "select threadline.record_webhook_delivery('in', 'd2', null, %s, '127.0.0.1')",
            (plain_run,),
        )
        refused(
            h,
            "select threadline.deliver_event(%s, 'deploy.done', null, 'webhook:in:sig', '{}',"
            " '{}')",
            (QUEUE,),
        )
        assert counts(conn) == before
        # Its own webhook's run it starts, with the stored recipe, and records its delivery.
        with h.transaction():
            run_id = spawn(h, "hooked", {"x": 1}, trigger=WEBHOOK, idempotency_key="webhook:in:d1")
            recorded = db.fetch_one(
                h,
                "insert_webhook_delivery",
                dict(path="in", delivery="d1", signature=None, run_id=run_id.run_id, caller="x"),
            )
    assert recorded is not None and str(recorded["run_id"]) == run_id.run_id
    run = db.fetch_one(conn, "get_run", dict(run_id=run_id.run_id))
    stored = db.fetch_one(conn, "get_workflow", dict(slug="hooked"))
    assert (run["recipe"], run["recipe_hash"]) == (stored["recipe"], stored["hash"])
    assert run["trigger"] == WEBHOOK and run["payload"] == {"x": 1}


def test_finding_2_the_ingress_login_holds_no_write(conn):
    assert only_reads(conn, "threadline_hooks") == {
        # Each checks its caller and its arguments (migration 032).
        "threadline.append_entry(uuid, text, text, text, text, text, text, jsonb)",
        "threadline.audit_decision(jsonb)",
        "threadline.deliver_event(text, text, text, text, jsonb, jsonb)",
        "threadline.emit_step_done(text, uuid, text, jsonb)",
        "threadline.lock_run(uuid)",
        "threadline.record_decision(jsonb)",
        "threadline.record_webhook_delivery(text, text, text, uuid, text)",
        "threadline.spawn_run(text, text, integer, jsonb, text, integer, text, jsonb, jsonb, "
        "text, text, text, jsonb, jsonb, jsonb)",
        "threadline.use_resume_token(text, uuid)",
    }


# -- #3: the ingress decides a gate only with its token, as its subject, audited ----------------
@pytest.fixture
def waiting_gate(conn, apply, procs) -> tuple[str, str]:
    """A run waiting at its gate (a conductor runs it); (run id, the gate's step key)."""
    apply(ASK)
    procs.start("conductor")
    run_id = spawn(conn, "ask").run_id
    harness.wait_for_state(procs.url, run_id, "waiting")
    return run_id, names.step_key(run_id, "ask", 1)


def use_token(h: psycopg.Connection, token: str) -> dict[str, Any]:
    row = db.fetch_one(h, "use_resume_token", dict(token=token, run_id=None))
    assert row is not None and row["refusal"] is None, row
    return row


DONE = {"decision": "approve", "actor": "alice", "text": "", "at": "2026-01-01T00:00:00Z"}


def decide_by_hand(
    h: psycopg.Connection, run_id: str, key: str, audited: bool = True, **more: Any
) -> None:
    """A decision by link as alice written by hand (with `more` changed): the decision, its
    audit row (unless not audited) and the gate's release, as gates.decide writes them."""
    row = (
        dict(
            step_key=key,
            run_id=run_id,
            decision="approve",
            actor="alice",
            via="link",
            on_behalf_of=None,
            reason=None,
            account_id=None,
            minted_by=None,
        )
        | more
    )
    db.fetch_one(h, "insert_decision", row)
    if audited:
        audit = dict(row, gate_key=row["step_key"], outcome="decided", why=None)
        h.execute(db.q("insert_decision_audit"), audit)
    run_state.emit_step_done(h, run_id, row["step_key"], DONE)


def test_finding_3_the_ingress_login_decides_no_gate_without_its_token(
    conn, logins, procs, waiting_gate
):
    run_id, key = waiting_gate
    alice = resume_tokens.issue(conn, run_id, key, "alice", "cli").token
    bob = conn.execute(
        "insert into threadline.accounts (name, created_by) values ('bob', 'test') returning id"
    ).fetchone()["id"]
    spent = resume_tokens.issue(conn, run_id, key, "alice", "cli").token
    before = counts(conn)
    with db.connect(logins["hooks"]) as h:
        # What the finding did: mark a token used, insert a decision as alice, release the gate.
        refused(h, "update threadline.resume_tokens set used_at = now()")
        refused(
            h,
            "insert into threadline.decisions (step_key, run_id, decision, actor, via)"
            " values (%s, %s, 'approve', 'alice', 'link')",
            (key, run_id),
        )
        refused(
            h,
            "insert into threadline.decision_audit (via, decision, outcome)"
            " values ('link', 'approve', 'decided')",
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="releasing step"):
            run_state.emit_step_done(h, run_id, key, DONE)
        # The checked doors, without a token used by this transaction.
        for attempt in (
            lambda: decide_by_hand(h, run_id, key),
            lambda: gates.decide(h, run_id, "approve", Actor("alice", "link"), gate_key=key),
            lambda: run_state.lock_run(h, run_id),
            lambda: thread_entries.append(
                h, run_id, "human", "alice", "decision", "👍 approved", step_key=key
            ),
            lambda: thread_entries.system_note(h, run_id, "Approve: https://evil.example/"),
            lambda: gates.audit(h, run_id, key, Actor("alice", "link"), "approve", None),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), h.transaction():
                attempt()
        # A token used by another transaction (committed) decides nothing here.
        with h.transaction():
            use_token(h, spent)
        before["tokens used"] += 1
        with pytest.raises(psycopg.errors.InsufficientPrivilege), h.transaction():
            decide_by_hand(h, run_id, key)
        # With the token used here: only its gate, only as its subject, only by link.
        for wrong in (
            dict(actor="bob"),
            dict(step_key=key + "x"),
            dict(via="console"),
            dict(on_behalf_of="bob"),
            dict(minted_by="root"),
            dict(account_id=bob),
            dict(decision="timeout"),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), h.transaction():
                use_token(h, alice)
                decide_by_hand(h, run_id, key, **wrong)
        with pytest.raises(psycopg.errors.InsufficientPrivilege), h.transaction():
            use_token(h, alice)
            thread_entries.append(h, run_id, "human", "bob", "decision", "👍", step_key=key)
        # Everything right but the audit row: the decision does not commit.
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="no audit row"):
            with h.transaction():
                use_token(h, alice)
                run_state.lock_run(h, run_id)
                decide_by_hand(h, run_id, key, audited=False)
        assert counts(conn) == before
        assert harness.wait_for_state(procs.url, run_id, "waiting")["state"] == "waiting"
        # The link's own path decides, as alice, and audits.
        redeemed = resume_tokens.redeem(h, alice, "approve", "link", "fine")
    assert (redeemed.run_id, redeemed.gate_key, redeemed.actor.name) == (run_id, key, "alice")
    harness.wait_for_state(procs.url, run_id, "completed")
    decision = db.fetch_one(conn, "get_decision", dict(step_key=key))
    assert (decision["actor"], decision["via"]) == ("alice", "link")
    audit = conn.execute("select actor, via, outcome from threadline.decision_audit").fetchall()
    assert audit == [{"actor": "alice", "via": "link", "outcome": "decided"}]


# -- #7: the viewer changes no run's state ------------------------------------------------------
def test_finding_7_the_viewer_login_changes_no_run(conn, apply, logins):
    apply(ASK)
    run_id = spawn(conn, "ask").run_id
    conn.execute(
        "update threadline.run_threads set state = 'completed', finished_at = now()"
        " where run_id = %s",
        (run_id,),
    )
    before = counts(conn)
    with db.connect(logins["viewer"]) as v:
        for statement, params in (
            ("select threadline.queue_run(%s, 'ask')", (run_id,)),
            ("select threadline.admit_queued(%s, 'ask')", (QUEUE,)),
            ("select threadline.admit_all(%s)", (QUEUE,)),
            ("select threadline.admit_run(%s, %s, 'in')", (QUEUE, run_id)),
            ("select threadline.lock_admission('ask')", None),
            ("select * from threadline.lock_run(%s)", (run_id,)),
            (
                "select threadline.append_entry(%s, 'system', 'x', 'note', null, null, 'hi', null)",
                (run_id,),
            ),
            ("select threadline.record_decision(%s)", (Jsonb({"step_key": "k"}),)),
            ("select threadline.deliver_event(%s, 'e', null, 'i', '{}', '{}')", (QUEUE,)),
            ("select threadline.send_wakes(array['threadline'], array['spawn:'])", None),
            ("select absurd.emit_event(%s, 'e', '{}')", (QUEUE,)),
            ("select absurd.cancel_task(%s, %s)", (QUEUE, run_id)),
            ("update threadline.run_threads set state = 'pending'", None),
        ):
            refused(v, statement, params)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            spawn(v, "ask")
    assert counts(conn) == before
    assert only_reads(conn, "threadline_viewer") == set()


def test_finding_7_queueing_refuses_whoever_calls_it_but_for_a_new_run(conn, apply, logins):
    """The functions check for themselves too, should an EXECUTE ever be granted: queue_run
    queues only a new run of the caller's own transaction, and the viewer is refused inside."""
    apply(ASK)
    run_id = spawn(conn, "ask").run_id
    conn.execute(
        "update threadline.run_threads set state = 'completed' where run_id = %s", (run_id,)
    )
    functions = ("threadline.queue_run (uuid, text)", "threadline.admit_all (text)")
    try:
        for fn in functions:
            conn.execute(f"grant execute on function {fn} to threadline_viewer, threadline_console")
        with db.connect(logins["viewer"]) as v:
            assert "queueing a run is not allowed" in refused(
                v, "select threadline.queue_run(%s, 'ask')", (run_id,)
            )
            assert "admitting runs is not allowed" in refused(
                v, "select threadline.admit_all(%s)", (QUEUE,)
            )
        with db.connect(logins["console"]) as c:
            with pytest.raises(psycopg.errors.RaiseException, match="not a new run"):
                c.execute("select threadline.queue_run(%s, 'ask')", (run_id,))
    finally:
        for fn in functions:
            conn.execute(
                f"revoke execute on function {fn} from threadline_viewer, threadline_console"
            )
    assert db.fetch_one(conn, "get_run", dict(run_id=run_id))["state"] == "completed"


# -- #13: the console's login mints no token for another account --------------------------------
def cli(home: Path, *args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    """`threadline ARGS` with this home's credentials (the owner's URL and each role's login);
    with url, THREADLINE_DATABASE_URL as well."""
    env = {k: v for k, v in os.environ.items() if k != DATABASE_URL_ENV} | {HOME_ENV: str(home)}
    if url:
        env[DATABASE_URL_ENV] = url
    return subprocess.run(
        [sys.executable, "-m", "engine_adapter.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_finding_13_the_console_login_mints_no_token_for_another_account(
    conn, db_url, logins, tmp_path
):
    home = tmp_path / "home"
    write_credentials({"url": db_url, "roles": logins}, home)
    assert harness.run_cli(db_url, "user", "add", "alice").returncode == 0
    before = counts(conn)
    with db.connect(logins["console"]) as c:
        refused(
            c,
            "insert into threadline.api_tokens (token_hash, name, roles, created_by)"
            " values ('x', 'alice', '{approver}', 'root')",
        )
        refused(
            c,
            "select threadline.mint_api_token(%s)",
            (
                Jsonb(
                    {
                        "token_hash": "x",
                        "name": "alice",
                        "roles": ["approver"],
                        "created_by": "root",
                        "account_id": 1,
                        "minted_by": 2,
                    }
                ),
            ),
        )
    # Through the CLI on the console's login alone, even root mints no token for alice.
    as_console = cli(home, "token", "create", "alice", "--role", "approver", url=logins["console"])
    assert as_console.returncode == 2, as_console.stderr
    assert "needs the database owner's login" in as_console.stderr
    assert counts(conn) == before
    # `threadline token create` mints with the owner's login from the credentials.
    minted = cli(home, "token", "create", "alice", "--role", "approver")
    assert minted.returncode == 0, minted.stderr
    assert minted.stdout.startswith("tl_api_")
    # The console's login alone mints no token at all, not even one's own: it acts only for a
    # person who presents a credential (migration 045); the CLI connects as the owner.
    mine = ("token", "create", os_user(), "--role", "viewer", "--name", "mine")
    assert cli(home, *mine, url=logins["console"]).returncode == 2
    own = cli(home, *mine)
    assert own.returncode == 0, own.stderr
    listed = cli(home, "token", "list", "--json")
    assert listed.returncode == 0 and {t["name"] for t in json.loads(listed.stdout)} == {
        "alice",
        "mine",
    }


# -- the doors that hold these logins still work ------------------------------------------------
def start_hooks(procs: harness.ProcessSet, tmp_path: Path) -> int:
    """`threadline hooks` on a free port, as its own login; returns the port."""
    procs.start("hooks", args=["--port", "0"])
    log = tmp_path / "hooks.log"
    match = harness.wait_for(
        lambda: log.exists() and re.search(r"listening on http://\S+?:(\d+)/", log.read_text()),
        timeout=60,
        what="threadline hooks to listen",
    )
    return int(match.group(1))


def post(port: int, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def test_a_webhook_delivery_starts_its_run_and_a_resume_link_decides_its_gate(
    conn, apply, procs, tmp_path
):
    apply(HOOKED)
    apply(ASK)
    procs.start("conductor")
    port = start_hooks(procs, tmp_path)
    status, answer = post(port, "/hooks/in", {"who": "world"})
    assert status == 202, answer
    run = db.fetch_one(conn, "get_run", dict(run_id=answer["run_id"]))
    assert run["workflow"] == "hooked" and run["trigger"]["kind"] == "webhook"
    assert post(port, "/hooks/in", {"who": "world"}) == (200, answer)  # the same delivery
    gated = spawn(conn, "ask").run_id
    harness.wait_for_state(procs.url, gated, "waiting")
    key = names.step_key(gated, "ask", 1)
    token = resume_tokens.issue(conn, gated, key, "alice", "cli").token
    status, decided = post(port, f"/resume/{token}", {"decision": "approve"})
    assert status == 200 and decided["by"] == "alice", decided
    harness.wait_for_state(procs.url, gated, "completed")
    audit = conn.execute(
        "select gate_key, actor, via, outcome from threadline.decision_audit"
    ).fetchall()
    assert audit == [{"gate_key": key, "actor": "alice", "via": "link", "outcome": "decided"}]
    assert post(port, f"/resume/{token}", {"decision": "deny"})[0] == 403
