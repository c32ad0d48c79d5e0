"""Where a run's step was sent and where it parked, read from the engine's own rows: the xid of
the SEND checkpoint and that of the run's wait on the step's done event, so a test can say
whether both committed in one transaction.

The wait row is read, not the event's "not emitted yet" row the park also writes: the engine's
event cleanup (the conductor's retention job, at its start and hourly) removes those rows
whatever their age, so a test that reads one fails whenever the job runs after the park."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from engine_adapter.model import names


def sent_and_parked(
    conn: psycopg.Connection, run_id: str, step: str = "a", timeout: float = 30
) -> dict[str, Any]:
    """Wait until the step's SEND is committed and the run waits on its done event; the xids of
    both (`send`, `park`) and the engine's state of the run's latest attempt (`state`)."""
    event = names.done_event(names.step_key(run_id, step, 1))
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute(
            "select (select xmin::text from absurd.c_threadline where task_id = %(run)s"
            "         and checkpoint_name = %(send)s) as send,"
            "       (select xmin::text from absurd.w_threadline where task_id = %(run)s"
            "         and event_name = %(event)s) as park,"
            "       (select state from absurd.r_threadline where task_id = %(run)s"
            "         order by attempt desc limit 1) as state",
            {"run": run_id, "send": names.checkpoint(names.SEND, step, 1), "event": event},
        ).fetchone()
        if row["send"] and row["park"]:
            return dict(row)
        assert time.monotonic() < deadline, f"the step was never sent and parked: {row}"
        time.sleep(0.05)
