"""The specialised engine (store/specialise.py) behaves exactly as Absurd's own: the same random
walk of engine calls (spawns with retry, cancellation and idempotency options, claims, checkpoints,
awaits and emits, extensions, completions, failures, reschedules, retries and cancellations,
reads of results and checkpoints, the clock moved on) runs on a queue whose functions run the
static copy and on one that runs Absurd's text, in lockstep; every call's result or error, and at
the end every row of the two queues' tables, must be the same, ids and queue names aside."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import absurdctl
import psycopg
import pytest
from psycopg.types.json import Jsonb

from engine_adapter.model.settings import QUEUE
from engine_adapter.store import specialise

STATIC, PLAIN = "diff_static", "diff_plain"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TABLES = ("t", "r", "c", "e", "w")
EVENTS = ("ev-a", "ev-b", "ev-c")
STEPS = ("s1", "s2", "s3")
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


class Side:
    """One queue's walk: its connection, and the ids it has seen in the order it saw them."""

    def __init__(self, conn: psycopg.Connection, queue: str) -> None:
        self.conn, self.queue = conn, queue
        self.ids: dict[str, str] = {}
        self.tasks: list[str] = []
        self.runs: list[str] = []
        self.task_of: dict[str, str] = {}  # run -> its task

    def call(self, sql: str, args: tuple[Any, ...], now: datetime) -> str:
        """The call's rows (or its error), ids and this queue's name made comparable."""
        self.conn.execute("select set_config('absurd.fake_now', %s, false)", (now.isoformat(),))
        rows: list[dict[str, Any]] = []
        try:
            with self.conn.transaction():
                rows = self.conn.execute(sql, (self.queue, *args)).fetchall()
            said = json.dumps(rows, default=str, sort_keys=True)
        except psycopg.Error as err:
            said = f"error {err.sqlstate}: {err.diag.message_primary}"
        for row in rows:  # new tasks and runs, in the order the call named them
            for key, seen in (("task_id", self.tasks), ("run_id", self.runs)):
                value = str(row.get(key)) if row.get(key) is not None else None
                if value is not None and value not in seen:
                    seen.append(value)
            if row.get("run_id") and row.get("task_id"):
                self.task_of[str(row["run_id"])] = str(row["task_id"])
        return self.plain(said)

    def plain(self, text: str) -> str:
        def name(m: re.Match[str]) -> str:
            return self.ids.setdefault(m.group(0), f"id{len(self.ids)}")

        return UUID.sub(name, text.replace(self.queue, "Q"))

    def tables(self) -> list[str]:
        """Every row of the queue's tables, in an order that names no id (a task by its place in
        the walk, a run by its task and attempt), so ids first met here get the same names on
        both sides."""
        rows = {
            prefix: self.conn.execute(f"select * from absurd.{prefix}_{self.queue}").fetchall()
            for prefix in TABLES
        }
        task = {t: n for n, t in enumerate(self.tasks)}
        attempt = {str(r["run_id"]): r["attempt"] for r in rows["r"]}

        def place(row: dict[str, Any]) -> int:
            return task.get(str(row["task_id"]), len(task))

        keys = {
            "t": lambda r: (place(r),),
            "r": lambda r: (place(r), r["attempt"]),
            "c": lambda r: (place(r), r["checkpoint_name"]),
            "e": lambda r: (r["event_name"],),
            "w": lambda r: (place(r), attempt.get(str(r["run_id"]), 0), r["step_name"]),
        }
        out = []
        for prefix in TABLES:
            for row in sorted(rows[prefix], key=keys[prefix]):
                out.append(self.plain(json.dumps(row, default=str, sort_keys=True)))
        return out


def walk(rng: random.Random, sides: list[Side], steps: int) -> None:
    now = START
    for n in range(steps):
        now += timedelta(seconds=rng.choice((0, 0, 1, 5, 30, 120)))
        call = choose(rng, sides[0], n)
        if call is None:
            continue
        sql, pick = call
        said = [side.call(sql, pick(side), now) for side in sides]
        assert said[0] == said[1], f"call {n}: {sql}\n static: {said[0]}\n plain:  {said[1]}"


def choose(rng: random.Random, model: Side, n: int):
    """A call and, for each side, its arguments (the same task or run by its place in the walk)."""
    task = rng.randrange(len(model.tasks)) if model.tasks else None
    run = None
    if model.runs:  # mostly one of the latest: the runs most likely still running
        run = len(model.runs) - 1 - min(int(rng.expovariate(0.5)), len(model.runs) - 1)
    kind = rng.choice(
        ["spawn"] * 4
        + ["claim"] * 4
        + (
            ["checkpoint", "await", "complete", "fail", "extend", "schedule"]
            if run is not None
            else []
        )
        + (["read", "result", "retry", "cancel", "states"] if task is not None else [])
        + ["emit"] * 2
    )
    if kind == "spawn":
        options: dict[str, Any] = {}
        if rng.random() < 0.5:
            options["max_attempts"] = rng.randint(1, 3)
        if rng.random() < 0.4:
            options["retry_strategy"] = rng.choice(
                [{"kind": "fixed", "base_seconds": 5}, {"kind": "exponential", "base_seconds": 2}]
            )
        if rng.random() < 0.3:
            options["idempotency_key"] = f"key-{rng.randint(1, 4)}"
        if rng.random() < 0.2:
            options["cancellation"] = rng.choice([{"max_delay": 60}, {"max_duration": 200}])
        params, name = Jsonb({"n": n}), rng.choice(["a", "b"])
        return (
            "select * from absurd.spawn_task(%s, %s, %s, %s)",
            lambda s: (name, params, Jsonb(options)),
        )
    if kind == "claim":
        timeout, qty = rng.choice((0, 10, 60)), rng.randint(1, 2)
        return "select * from absurd.claim_task(%s, 'w', %s, %s)", lambda s: (timeout, qty)
    if kind == "emit":
        event, payload = rng.choice(EVENTS), Jsonb({"at": n})
        return "select absurd.emit_event(%s, %s, %s)", lambda s: (event, payload)
    if kind in ("read", "result", "retry", "cancel", "states"):
        return _task_call(rng, kind, task, run)
    return _run_call(rng, kind, task, run, n)


def _task_call(rng: random.Random, kind: str, task: int | None, run: int | None):
    if kind == "read":
        step, pending = rng.choice(STEPS), rng.random() < 0.5
        return (
            "select * from absurd.get_task_checkpoint_state(%s, %s, %s, %s)",
            lambda s: (s.tasks[task], step, pending),
        )
    if kind == "result":
        return "select * from absurd.get_task_result(%s, %s)", lambda s: (s.tasks[task],)
    if kind == "retry":
        options = Jsonb(rng.choice([{}, {"max_attempts": 5}, {"spawn_new": True}]))
        return "select * from absurd.retry_task(%s, %s, %s)", lambda s: (s.tasks[task], options)
    if kind == "cancel":
        return "select absurd.cancel_task(%s, %s)", lambda s: (s.tasks[task],)
    if run is None:
        return None
    return (
        "select * from absurd.get_task_checkpoint_states(%s, %s, %s)",
        lambda s: (s.task_of[s.runs[run]], s.runs[run]),
    )


def _run_call(rng: random.Random, kind: str, task: int | None, run: int, n: int):
    if kind == "checkpoint":
        step, extend = rng.choice(STEPS), rng.choice((None, 30))
        return (
            "select absurd.set_task_checkpoint_state(%s, %s, %s, %s, %s, %s)",
            lambda s: (s.task_of[s.runs[run]], step, Jsonb({"v": n}), s.runs[run], extend),
        )
    if kind == "await":
        step, event, timeout = rng.choice(STEPS), rng.choice(EVENTS), rng.choice((None, 10))
        return (
            "select * from absurd.await_event(%s, %s, %s, %s, %s, %s)",
            lambda s: (s.task_of[s.runs[run]], s.runs[run], step, event, timeout),
        )
    if kind == "complete":
        return "select absurd.complete_run(%s, %s, %s)", lambda s: (s.runs[run], Jsonb({"n": n}))
    if kind == "fail":
        later = rng.choice((None, START + timedelta(hours=1)))
        return (
            "select absurd.fail_run(%s, %s, %s, %s)",
            lambda s: (s.runs[run], Jsonb({"why": n}), later),
        )
    if kind == "extend":
        return "select absurd.extend_claim(%s, %s, %s)", lambda s: (s.runs[run], 30)
    wake = START + timedelta(minutes=rng.randint(0, 30))
    return "select absurd.schedule_run(%s, %s, %s)", lambda s: (s.runs[run], wake)


@pytest.fixture
def sides(db_url: str):
    with (
        psycopg.connect(db_url, autocommit=True, row_factory=psycopg.rows.dict_row) as a,
        psycopg.connect(db_url, autocommit=True, row_factory=psycopg.rows.dict_row) as b,
    ):
        for queue in (STATIC, PLAIN):
            a.execute("select absurd.create_queue(%s)", (queue,))
        specialise.apply(a, absurdctl.BUNDLED_SCHEMA_SQL, (QUEUE, STATIC))
        text = a.execute("select prosrc from pg_proc where proname = 'claim_task'").fetchone()
        assert f"absurd.r_{STATIC}" in text["prosrc"] and f"absurd.r_{PLAIN}" not in text["prosrc"]
        yield [Side(a, STATIC), Side(b, PLAIN)]


@pytest.mark.parametrize("seed", range(8))
def test_the_static_copy_does_what_absurds_text_does(sides, seed):
    walk(random.Random(seed), sides, 250)
    static, plain = (side.tables() for side in sides)
    assert static == plain
    assert any('"completed"' in row for row in static)  # the walk got somewhere
