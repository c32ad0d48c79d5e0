"""Bare Absurd counterparts on the same database: the same shapes of work with in-process no-op
steps, no bot process, no thread writes and no LISTEN/NOTIFY."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from absurd_sdk import Absurd

from engine_adapter.store import db
from engine_adapter.testing import harness

from .stats import seconds_between
from .threadline_figures import release_pause

QUEUE = "benchbare"
THREE = "bench.three"
GATE = "bench.gate"
WORKER_BATCH = 10
POLL_S = 0.01


def three_steps(params: dict[str, Any], ctx: Any) -> bool:
    for name in ("a", "b", "c"):
        ctx.step(name, lambda: True)
    return True


def gate_task(params: dict[str, Any], ctx: Any) -> bool:
    ctx.step("before", lambda: True)
    ctx.await_event(params["event"])
    # This checkpoint's updated_at (the DB's clock_timestamp) is when the handler ran on.
    ctx.step("woken", lambda: True)
    return True


def worker(url: str) -> Absurd:
    engine = Absurd(url, queue_name=QUEUE)
    engine.register_task(THREE)(three_steps)
    engine.register_task(GATE)(gate_task)
    return engine


def ensure_queue(url: str, queue: str = QUEUE) -> None:
    engine = Absurd(url, queue_name=queue)
    try:
        if queue not in engine.list_queues():
            engine.create_queue(queue)
    finally:
        engine.close()


def task_counts(conn: psycopg.Connection[Any], task_name: str) -> tuple[int, int]:
    """(completed, failed or cancelled) tasks of one name on the bare queue."""
    row = conn.execute(
        f"select count(*) filter (where state = 'completed') as done,"
        f"       count(*) filter (where state in ('failed', 'cancelled')) as bad"
        f"  from absurd.t_{QUEUE} where task_name = %s",
        (task_name,),
    ).fetchone()
    return row["done"], row["bad"]


def task_state(conn: psycopg.Connection[Any], task_id: str) -> str | None:
    row = conn.execute(f"select state from absurd.t_{QUEUE} where task_id = %s", (task_id,))
    state = row.fetchone()
    return state["state"] if state else None


# -- 1. throughput ----------------------------------------------------------------------------
def _drain(url: str, expected: int, stop: threading.Event, timeout: float) -> None:
    """A work_batch loop until `expected` bench.three tasks have completed."""
    engine = worker(url)
    deadline = time.monotonic() + timeout
    try:
        with db.connect(url) as conn:
            last_done = -1
            while not stop.is_set():
                engine.work_batch(worker_id="bench-bare", batch_size=WORKER_BATCH)
                done, bad = task_counts(conn, THREE)
                if bad:
                    raise RuntimeError(f"{bad} bare task(s) failed")
                if done >= expected:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"bare worker: {done}/{expected} tasks after {timeout}s")
                if done == last_done:
                    time.sleep(0.001)  # nothing finished: don't spin the database flat out
                last_done = done
    finally:
        engine.close()


def throughput(url: str, n: int, timeout: float) -> float:
    """Seconds from the first spawn until n three-step tasks completed, one worker thread."""
    client = Absurd(url, queue_name=QUEUE)
    with db.connect(url) as conn:
        already = task_counts(conn, THREE)[0]  # e.g. a warm-up round
    stop = threading.Event()
    try:
        with ThreadPoolExecutor(1) as pool:
            started = time.perf_counter()
            drained = pool.submit(_drain, url, already + n, stop, timeout)
            try:
                for _ in range(n):
                    client.spawn(THREE, {}, queue=QUEUE)
                drained.result()
            finally:
                stop.set()
            return time.perf_counter() - started
    finally:
        client.close()


# -- 3. event wake-up -------------------------------------------------------------------------
def _run_state(conn: psycopg.Connection[Any], task_id: str) -> str | None:
    row = conn.execute(
        f"select state from absurd.r_{QUEUE} where task_id = %s order by attempt desc limit 1",
        (task_id,),
    ).fetchone()
    return row["state"] if row else None


def _event_sample(
    client: Absurd, conn: psycopg.Connection[Any], timeout: float
) -> tuple[float, float]:
    """One gate task, released by emit_event: (emit returned -> next step, emitted_at -> next
    step) in seconds."""
    event = f"bench.go:{uuid.uuid4().hex}"
    task_id = str(client.spawn(GATE, {"event": event}, queue=QUEUE)["task_id"])
    harness.wait_for(
        lambda: _run_state(conn, task_id) == "sleeping",
        timeout,
        interval=POLL_S,
        what="bare task to await its event",
    )
    release_pause()
    client.emit_event(event, {"go": True})
    emitted = conn.execute("select clock_timestamp() as t").fetchone()["t"]
    harness.wait_for(
        lambda: task_state(conn, task_id) == "completed",
        timeout,
        interval=POLL_S,
        what="bare gate task to complete",
    )
    woken = conn.execute(
        f"select updated_at from absurd.c_{QUEUE} where task_id = %s and checkpoint_name = 'woken'",
        (task_id,),
    ).fetchone()["updated_at"]
    emitted_at = conn.execute(
        f"select emitted_at from absurd.e_{QUEUE} where event_name = %s", (event,)
    ).fetchone()["emitted_at"]
    return seconds_between(emitted, woken), seconds_between(emitted_at, woken)


def event_release(url: str, n: int, timeout: float) -> tuple[list[float], list[float]]:
    """n event wake-ups, as _event_sample; the worker is the SDK's start_worker loop in a thread,
    polling at its default interval (0.25 s)."""
    engine = worker(url)
    client = Absurd(url, queue_name=QUEUE)
    runner = threading.Thread(
        target=engine.start_worker,
        kwargs={"worker_id": "bench-bare-gate"},
        name="bare-worker",
        daemon=True,
    )
    runner.start()
    try:
        with db.connect(url) as conn:
            samples = [_event_sample(client, conn, timeout) for _ in range(n)]
    finally:
        engine.stop_worker()
        runner.join(timeout=5)
        engine.close()
        client.close()
    return [s[0] for s in samples], [s[1] for s in samples]
