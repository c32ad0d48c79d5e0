"""A bot's claim checks the waiting steps one by one in run order and stops at the second free
one (migration 053): with many runs in flight it does not check every waiting step's key."""

from __future__ import annotations

import time

from engine_adapter.runs.spawn import spawn

RECIPE = """
slug: one-step
steps:
  - {id: a, run_command: "true"}
"""
RUNS = 30
SLOTS = 4  # a bots process's default slots


def test_a_claim_checks_few_of_many_waiting_steps(conn, apply, procs):
    apply(RECIPE)
    procs.start("conductor", wait=True)  # no bots: every run's step waits for one
    runs = [str(spawn(conn, "one-step").run_id) for _ in range(RUNS)]
    deadline = time.monotonic() + 60
    while True:
        waiting = conn.execute(
            "select count(*) as n from threadline.run_threads"
            " where awaiting and await_kind = 'bot' and state = 'running'"
        ).fetchone()["n"]
        if waiting == RUNS:
            break
        assert time.monotonic() < deadline, f"only {waiting} of {RUNS} steps were sent"
        time.sleep(0.1)
    with conn.transaction(force_rollback=True):
        conn.execute("set local track_functions = 'all'")
        conn.execute("select threadline.claim_step(null, 'no-such-process', 'here', 30)")
        calls = conn.execute(
            "select coalesce(sum(calls), 0) as n from pg_stat_xact_user_functions"
            " where schemaname = 'threadline' and funcname = 'step_key_free'"
        ).fetchone()["n"]
    # The first free step, the second (for `more`), and the first's check under its lock.
    assert calls <= 3, f"{calls} keys checked for one claim among {RUNS} waiting steps"
    # The oldest run's step comes first: a bot process takes them in run order. Its slots claim
    # at once (a claim that sees a second free step wakes another slot), so it is among the
    # first claims of as many as there are slots, not always the very first to begin.
    procs.start("bots", wait=True)
    deadline = time.monotonic() + 30
    while True:
        first = [
            str(r["run_id"])
            for r in conn.execute(
                "select run_id from threadline.step_claims order by started_at limit %s", (SLOTS,)
            )
        ]
        if len(first) == SLOTS:
            break
        assert time.monotonic() < deadline, f"only {len(first)} steps were claimed"
        time.sleep(0.1)
    assert min(runs) in first, (min(runs), first)
    assert set(first) <= set(sorted(runs)[: 2 * SLOTS]), "claims skipped older waiting steps"
