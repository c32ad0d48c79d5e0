"""The engine's task context, built from checkpoints loaded with the claim, minus the checkpoint
look-ups that always miss.

Loaded with the claim: the SDK's `_execute_task` builds each claimed run's context by loading its
committed checkpoints (absurd.get_task_checkpoint_states) in a transaction of its own, after the
claim's. `claim_with_checkpoints` runs Absurd's claim and that same load in one statement, and
`_create_task_context` below hands the SDK's own context builder the rows so loaded instead of a
connection to query: one read and one commit fewer per claimed run.

No look-ups that miss: when the SDK hands a claimed run to the handler it has every committed
checkpoint of the run. Its `begin_step` and `await_event` then look up each checkpoint name the
cache lacks once more, in a transaction of its own (absurd.get_task_checkpoint_state): for a run
making progress that is every new step, a read and a commit each (seven per three-step run). Such
a look-up could only find a checkpoint written since the claim by another attempt of the same
run, which exists only once this run has lost its claim: then absurd.set_task_checkpoint_state
refuses this run's writes (the run has failed) and a step's writes roll back with its checkpoint
(HandlerBase.atomic_step). Nor would the look-up close that race: the other attempt may write
just after it. So a name missing from the cache is taken as not written.

Done in the transaction before: the SDK parks a run on an event (absurd.await_event) and
completes it (absurd.complete_run) each in a transaction of its own. `park` and `complete` run
the same calls in the transaction the handler already has open, the SEND's and the finish's
(HandlerBase.atomic_step_then), and the handler then stops as the SDK's own park stops it
(SuspendTask): two commits fewer per step under load, and one per run.

absurd-sdk is pinned (pyproject.toml); this leans on its module's `_create_task_context` (replaced
here by a wrapper that falls back to it for a claim it did not make) and its TaskContext's
`_conn`, `_checkpoint_cache` and `_lookup_checkpoint` (tests/unit/test_known_checkpoints.py holds
the two contexts equal). To drop it: in conductor.CountingEngine remove the `claim_tasks`
override (the SDK's claim and its per-run load come back), and remove the
`known_checkpoints.adopt(ctx)` call in conductor.Executor.handle_run (its look-ups come back), and
have atomic_step_then's callers in bot_steps.py and run_handler.py pass no `then` (the SDK parks
and completes in transactions of their own again).
"""

from __future__ import annotations

from typing import Any, cast

import absurd_sdk
import psycopg
from absurd_sdk import TaskContext

from engine_adapter.store import db

LOADED = "threadline_checkpoints"  # the key a claimed run's loaded checkpoints travel under


class KnownCheckpoints(TaskContext):
    """A TaskContext whose checkpoint look-ups end at the checkpoints loaded with the claim."""

    def _lookup_checkpoint(self, checkpoint_name: str) -> Any:
        if checkpoint_name in self._checkpoint_cache:
            return self._checkpoint_cache[checkpoint_name]
        return absurd_sdk._CHECKPOINT_NOT_FOUND


def adopt(ctx: TaskContext) -> TaskContext:
    """The SDK's context, its class swapped (the SDK builds it with object.__new__)."""
    ctx.__class__ = KnownCheckpoints
    return ctx


def park(ctx: TaskContext, event_name: str, step_name: str) -> bool:
    """Absurd's await_event for `event_name` under the checkpoint `step_name`, in the
    transaction the caller has open (the SDK's await_event runs it in a transaction of its own).
    True: the run is parked and the handler must stop once that transaction commits (raise
    SuspendTask). False: nothing to stop for: the event came already (its payload cached, so
    the SDK's await_event returns it with no look-up), or the name was used before in this
    handling (its SDK name would differ: the SDK's await_event must decide)."""
    if ctx._step_name_counter.get(step_name) or ctx._task["wake_event"] == event_name:
        return False  # the SDK's await_event decides (a used name, a timed-out wait)
    with absurd_sdk._task_state_exception_handling():  # a cancelled or failed run, as the SDK
        row = db.fetch_row(
            ctx._conn,
            "park_on_event",
            dict(
                queue=ctx._queue_name,
                task_id=ctx._task["task_id"],
                run_id=ctx._task["run_id"],
                checkpoint=step_name,
                event=event_name,
            ),
        )
    if row["should_suspend"]:
        return True
    ctx._checkpoint_cache[step_name] = row["payload"]
    ctx._task["event_payload"] = None
    return False


def complete(ctx: TaskContext, result: Any) -> bool:
    """Absurd's completion of the run with `result`, in the transaction the caller has open (the
    SDK completes it in a transaction of its own once the handler returns). True: completed, and
    the handler must stop without returning (raise SuspendTask), or the SDK completes it again."""
    absurd_sdk._complete_task_run(ctx._conn, ctx._queue_name, ctx._task["run_id"], result)
    return True


def claim_with_checkpoints(
    conn: psycopg.Connection[Any], queue: str, worker_id: str, claim_timeout: int, batch_size: int
) -> list[dict[str, Any]]:
    """Absurd's claim, each run with its committed checkpoints (oldest first, as the SDK loads
    them) under LOADED, in one statement."""
    return db.fetch_all(
        conn,
        "claim_runs_with_checkpoints",
        dict(
            queue=queue,
            worker_id=worker_id,
            claim_timeout=claim_timeout,
            batch_size=batch_size,
        ),
    )


class _LoadedRows:
    """Stands in for the connection while the SDK builds a context: its checkpoint query is
    answered with the rows the claim loaded."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def cursor(self, *args: Any, **kwargs: Any) -> _LoadedRows:
        return self

    def execute(self, *args: Any, **kwargs: Any) -> None:
        pass

    def fetchall(self) -> list[dict[str, Any]]:
        return self.rows


_sdk_create_task_context = absurd_sdk._create_task_context


def _create_task_context(
    task_id: str, conn: Any, queue_name: str, task: Any, claim_timeout: int
) -> TaskContext:
    loaded = task.pop(LOADED, None) if isinstance(task, dict) else None
    if loaded is None:  # a claim made by the SDK itself
        return _sdk_create_task_context(task_id, conn, queue_name, task, claim_timeout)
    rows = [{"checkpoint_name": name, "state": state} for name, state in loaded]
    stand_in = cast(psycopg.Connection[Any], _LoadedRows(rows))
    ctx = _sdk_create_task_context(task_id, stand_in, queue_name, task, claim_timeout)
    ctx._conn = conn
    return ctx


absurd_sdk._create_task_context = _create_task_context
