"""Threadline's side of the figures: every step is a conductor SEND, a bot turn and a thread write.

Latencies come from the database clock (thread entry created_at, i.e. the start of the writing
transaction), so the benchmark's own polling intervals never enter them.
"""

from __future__ import annotations

import itertools
import random
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.model import names
from engine_adapter.model.identity import Actor
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs import gates
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

from .stats import seconds_between

Conn = psycopg.Connection[Any]
Process = subprocess.Popen[bytes]

THREE_TRUE = """
slug: bench-three
steps:
  - {id: a, run_command: "true"}
  - {id: b, run_command: "true"}
  - {id: c, run_command: "true"}
"""
GATE_THEN_TRUE = """
slug: bench-gate
steps:
  - {id: gate, human_gate: "Go on?"}
  - {id: after, run_command: "true"}
"""
# The first step keeps the run parked (awaiting its done event) long enough to kill the conductor.
SLEEP_THEN_TRUE = """
slug: bench-recover
steps:
  - {id: nap, run_command: "sleep 2"}
  - {id: next, run_command: "true"}
"""
STEPS_PER_RUN = 3
POLL_S = 0.01
# Gates and events are released after a random pause so the release lands at a random phase of
# any polling loop (bare Absurd's worker polls every 0.25 s); released right after the run parks,
# it would always arrive just after a poll and measure the full interval. Used on both sides.
RELEASE_JITTER_S = 0.25


def release_pause() -> None:
    time.sleep(random.uniform(0, RELEASE_JITTER_S))


def apply_recipes(conn: Conn) -> None:
    for text in (THREE_TRUE, GATE_THEN_TRUE, SLEEP_THEN_TRUE):
        apply_recipe(conn, load_recipe_text(text))


def db_clock(conn: Conn) -> datetime:
    return conn.execute("select clock_timestamp() as t").fetchone()["t"]


# -- waiting ----------------------------------------------------------------------------------
def wait_completed(conn: Conn, run_ids: list[str], timeout: float, interval: float = POLL_S) -> int:
    """Poll until every run completed; fail fast when one ends otherwise. Returns the polls made
    (each one transaction of conn's)."""
    polls = 0

    def all_done() -> bool:
        nonlocal polls
        polls += 1
        row = conn.execute(
            "select count(*) filter (where state = 'completed') as done,"
            "       count(*) filter (where state in ('failed', 'cancelled')) as bad"
            "  from threadline.run_threads where run_id = any(%s::uuid[])",
            (run_ids,),
        ).fetchone()
        if row["bad"]:
            raise RuntimeError(f"{row['bad']} benchmark run(s) failed or were cancelled")
        return row["done"] == len(run_ids)

    harness.wait_for(all_done, timeout, interval=interval, what=f"{len(run_ids)} runs to complete")
    return polls


def entry_time(conn: Conn, run_id: str, kind: str, step_key: str) -> datetime | None:
    """created_at of the first entry of a kind (a LIKE pattern) for a step key, if written yet."""
    row = conn.execute(
        "select created_at from threadline.thread_entries"
        " where run_id = %s and kind like %s and step_key = %s order by seq limit 1",
        (run_id, kind, step_key),
    ).fetchone()
    return row["created_at"] if row else None


def wait_entry(conn: Conn, run_id: str, kind: str, step_key: str, timeout: float) -> datetime:
    return harness.wait_for(
        lambda: entry_time(conn, run_id, kind, step_key),
        timeout,
        interval=POLL_S,
        what=f"{kind} entry of {step_key}",
    )


def instruction_of(conn: Conn, run_id: str, step_id: str, timeout: float) -> datetime:
    return wait_entry(conn, run_id, "instruction", names.step_key(run_id, step_id, 1), timeout)


# -- 1. throughput and 2. step latencies ------------------------------------------------------
@dataclass(frozen=True)
class Throughput:
    runs: int
    elapsed_s: float
    run_ids: list[str]

    @property
    def steps_per_s(self) -> float:
        return self.runs * STEPS_PER_RUN / self.elapsed_s


def throughput(conn: Conn, n: int, timeout: float) -> Throughput:
    """Spawn n runs at once and time them until the last one completed (spawns included)."""
    started = time.perf_counter()
    run_ids = [spawn(conn, "bench-three").run_id for _ in range(n)]
    wait_completed(conn, run_ids, timeout)
    return Throughput(n, time.perf_counter() - started, run_ids)


def one_at_a_time(conn: Conn, n: int, timeout: float) -> list[str]:
    """n runs, each spawned only after the previous one completed: latencies without queueing."""
    run_ids = []
    for _ in range(n):
        run_ids.append(spawn(conn, "bench-three").run_id)
        wait_completed(conn, run_ids[-1:], timeout)
    return run_ids


def step_latencies(conn: Conn, run_ids: list[str]) -> tuple[list[float], list[float]]:
    """(terminal -> next instruction, instruction -> terminal) in seconds, over all given runs."""
    rows = conn.execute(
        "select run_id, step_key, kind, created_at from threadline.thread_entries"
        " where run_id = any(%s::uuid[])"
        "   and (kind = 'instruction' or kind like 'signal.dispatch.%%')"
        " order by run_id, seq",
        (run_ids,),
    ).fetchall()
    by_run: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_run.setdefault(str(row["run_id"]), []).append(row)
    step_to_step: list[float] = []
    turn: list[float] = []
    for entries in by_run.values():
        sent = {e["step_key"]: e["created_at"] for e in entries if e["kind"] == "instruction"}
        ended = {e["step_key"]: e["created_at"] for e in entries if e["kind"] != "instruction"}
        keys = list(sent)  # thread order: the order the conductor sent them
        turn += [seconds_between(sent[k], ended[k]) for k in keys if k in ended]
        step_to_step += [seconds_between(ended[a], sent[b]) for a, b in itertools.pairwise(keys)]
    return step_to_step, turn


# -- 3. gate release --------------------------------------------------------------------------
def gate_release(url: str, conn: Conn, n: int, timeout: float) -> tuple[list[float], list[float]]:
    """(reply returned -> next instruction, reply entry -> next instruction) in seconds."""
    from_return: list[float] = []
    from_entry: list[float] = []
    for _ in range(n):
        run_id = spawn(conn, "bench-gate").run_id
        harness.wait_for_state(url, run_id, "waiting", timeout=timeout)
        release_pause()
        outcome = gates.reply(conn, run_id, "👍", Actor("bench", "console"))
        # The reply's transaction has committed when reply() returns (autocommit connection); the
        # clock read costs one round trip, so this anchor is a little late, never early.
        replied = db_clock(conn)
        if outcome.decision != "approve":
            raise RuntimeError(f"reply did not approve the gate of {run_id}: {outcome}")
        reply_entry = conn.execute(
            "select created_at from threadline.thread_entries where run_id = %s and seq = %s",
            (run_id, outcome.seq),
        ).fetchone()["created_at"]
        instruction = instruction_of(conn, run_id, "after", timeout)
        from_return.append(seconds_between(replied, instruction))
        from_entry.append(seconds_between(reply_entry, instruction))
        wait_completed(conn, [run_id], timeout)  # a quiet system before the next sample
    return from_return, from_entry


# -- 4. recovery ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Recovery:
    restart_to_instruction_s: float
    restart_to_ready_s: float  # until the new conductor holds its liveness lock
    terminal_to_instruction_s: float  # the conductor's share once the bot has reported


def engine_run_state(conn: Conn, run_id: str) -> str | None:
    row = conn.execute(
        "select state from absurd.r_threadline where task_id = %s order by attempt desc limit 1",
        (run_id,),
    ).fetchone()
    return row["state"] if row else None


def step_claimed(conn: Conn, step_key: str) -> bool:
    row = conn.execute("select 1 from threadline.step_claims where step_key = %s", (step_key,))
    return row.fetchone() is not None


def recovery(
    procs: harness.ProcessSet, conn: Conn, conductor: Process, timeout: float
) -> tuple[Recovery, Process]:
    """SIGKILL the conductor while a run is parked mid-step; returns the sample and the new
    conductor."""
    run_id = spawn(conn, "bench-recover").run_id
    nap = names.step_key(run_id, "nap", 1)
    harness.wait_for(
        lambda: step_claimed(conn, nap),
        timeout,
        interval=POLL_S,
        what="bot to claim the sleep step",
    )
    # Parked: the engine run is suspended on the done event, so no conductor holds it.
    harness.wait_for(
        lambda: engine_run_state(conn, run_id) == "sleeping",
        timeout,
        interval=POLL_S,
        what="run to park on its done event",
    )
    harness.kill(conductor)
    restart = db_clock(conn)
    conductor = procs.start("conductor")
    procs.wait_alive("conductor", timeout=timeout)
    ready = conn.execute(
        "select max(started_at) as t from threadline.workers where kind = 'conductor'"
    ).fetchone()["t"]
    instruction = instruction_of(conn, run_id, "next", timeout)
    terminal = wait_entry(conn, run_id, "signal.dispatch.%", nap, timeout)
    wait_completed(conn, [run_id], timeout)
    sample = Recovery(
        seconds_between(restart, instruction),
        seconds_between(restart, ready),
        seconds_between(max(terminal, restart), instruction),
    )
    return sample, conductor
