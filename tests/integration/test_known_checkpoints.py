"""The conductor's claim loads each claimed run's checkpoints in the same statement
(conductor/known_checkpoints.py): the task context built from them is the one the SDK builds by
loading them itself, attribute for attribute, and an SDK claim still gets the SDK's own."""

from __future__ import annotations

import absurd_sdk

from engine_adapter.conductor import known_checkpoints
from engine_adapter.conductor.conductor import CountingEngine
from engine_adapter.model.settings import QUEUE
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db

RECIPE = """
slug: two-true
steps:
  - {id: a, run_command: "true"}
  - {id: b, run_command: "true"}
"""


def comparable(ctx: absurd_sdk.TaskContext) -> dict:
    return {k: v for k, v in vars(ctx).items() if k != "_conn"}


def test_a_claim_with_its_checkpoints_builds_the_sdks_context(db_url, conn, apply):
    apply(RECIPE)
    run_id = spawn(conn, "two-true").run_id
    with db.connect(db_url, role="conductor") as engine_conn:
        engine = CountingEngine(engine_conn, queue_name=QUEUE)
        (task,) = engine.claim_tasks(batch_size=2, claim_timeout=30, worker_id="t")
        assert task[known_checkpoints.LOADED] == []  # a new run has none
        first = absurd_sdk._create_task_context(task["task_id"], engine_conn, QUEUE, task, 30)
        first.step("one", lambda: {"n": 1})
        first.step("two", lambda: [2, "two"])
        engine_conn.execute(
            "select absurd.schedule_run(%s, %s, absurd.current_time())", (QUEUE, task["run_id"])
        )

        (again,) = engine.claim_tasks(batch_size=2, claim_timeout=30, worker_id="t")
        loaded = again[known_checkpoints.LOADED]
        assert [name for name, _ in loaded] == ["one", "two"]
        closed = db.connect(db_url, role="conductor")
        closed.close()  # the context is built from the claim's rows: no query reaches it
        ours = absurd_sdk._create_task_context(again["task_id"], closed, QUEUE, again, 30)
        assert known_checkpoints.LOADED not in again  # taken: a second build would load
        sdks = known_checkpoints._sdk_create_task_context(
            again["task_id"], engine_conn, QUEUE, again, 30
        )
        assert ours._conn is closed
        assert comparable(ours) == comparable(sdks)
        assert ours._checkpoint_cache == {"one": {"n": 1}, "two": [2, "two"]}
        assert str(run_id) == str(ours.task_id)
