"""What every part of the run handler shares: the run's state in memory (its snapshot, the views
and outputs later steps read, the innermost loop), the checkpointed step that commits with its
writes, and the thread and state writes every step kind makes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from functools import lru_cache
from typing import Any, TypeVar, cast

import psycopg
from absurd_sdk import TaskContext

from engine_adapter.model import domain, names
from engine_adapter.model.domain import HandlerParams, StepResult
from engine_adapter.model.vocab import AwaitKind, RunState
from engine_adapter.recipes.recipes import PLACEHOLDER, RecipeError, Step
from engine_adapter.recipes.render import render, resolve
from engine_adapter.runs import run_state, thread_entries
from engine_adapter.store import db, traces
from engine_adapter.store.wakeups import HoldPolicy

INVALID = "invalid"  # a snapshot's step that no longer validates: it fails when reached
# The dedupe key of the run's closing note, however it ends: stored, so kept as first written.
END_NOTE = "completed"

T = TypeVar("T")


def nothing_more(value: object) -> bool:
    return False


class EndRun(Exception):
    """A child run ends at its first failure: its parent's step decides what that means."""

    def __init__(self, path: str, result: StepResult) -> None:
        super().__init__(path)
        self.path, self.result = path, result


class HandlerBase:
    """The run's state and the writes every step kind shares."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        ctx: TaskContext,
        params: HandlerParams,
        holds: HoldPolicy | None = None,
        traced: bool = False,
    ) -> None:
        self.conn = conn
        # Spans of its step tries go out (traces.py), each once: behind checkpoints of their own.
        self.traced = traced
        self.trace_within: list[tuple[str, int]] = []  # the loop or block tries a step runs in
        self.holds = holds
        self.ctx = ctx
        self.run_id = str(ctx.task_id)
        self.payload = params["payload"]
        self.recipe = params["recipe"]
        self.steps = snapshot_steps(self.recipe["steps"])
        self.admit = bool(params.get("admit"))
        self.last_output: Any = ""  # the last top-level step's: what a branch run hands back
        self.carried: dict[str, Any] | None = params.get("carried")  # a rerun's taken-over results
        self.is_child = "inherited" in params
        inherited = params.get("inherited") or {}
        # What later steps read: each step's view (`steps.<id>.status`), its output for
        # `{{steps.<id>.output}}`, named outputs, and the innermost loop's item.
        self.views: dict[str, dict[str, Any]] = dict(inherited.get("steps") or {})
        self.outputs: dict[str, Any] = {k: v.get("output") for k, v in self.views.items()}
        self.named: dict[str, Any] = dict(inherited.get("outputs") or {})
        self.loop: dict[str, Any] = dict(inherited.get("loop") or {})
        # Branch results of earlier tries of a group: a retry re-runs only what did not complete.
        self.settled: dict[str, dict[str, dict[str, Any]]] = {}
        self.tries_started = 0  # leaf step tries so far (a replay counts them again, the same)

    def run_list(self, steps: Iterable[Step], scope: str) -> None:
        """The walk over a step list (RunHandler's): loops and branches run their bodies by it."""
        raise NotImplementedError

    def atomic_step(self, name: str, fn: Callable[[], T]) -> T:
        """A checkpointed step whose writes and checkpoint commit together: one commit instead
        of two, and no crash can leave the writes without their checkpoint (a replay would find
        them, as SEND's dedupe keys make sure, but would still pay for the lookups)."""
        return self.atomic_step_then(name, fn)[0]

    def atomic_step_then(
        self, name: str, fn: Callable[[], T], then: Callable[[T], bool] = nothing_more
    ) -> tuple[T, bool]:
        """An atomic_step whose transaction also holds what `then` does with its value after
        the checkpoint (Absurd's park on an event, the run's completion): one commit fewer than
        doing it after. True when `then` says the handler must stop (SuspendTask) once its
        caller has done what follows the commit; a step done before runs no `then`."""
        handle = self.ctx.begin_step(name)
        if handle.done:
            return cast(T, handle.state), False
        with self.conn.transaction():
            value = self.ctx.complete_step(handle, fn())
            stop = then(value)
        return value, stop

    def await_event(self, event: str, name: str, timeout: int | None = None) -> dict[str, Any]:
        """PARK until the event (a step's done, a child run's, a retry); its payload, which ours
        always make a mapping."""
        return cast(dict[str, Any], self.ctx.await_event(event, name, timeout=timeout))

    def value_of(self, template: Any) -> Any:
        """A sub-workflow payload value: a lone placeholder keeps its value's type (a number, a
        list); other text has its placeholders rendered."""
        if not isinstance(template, str):
            return template
        lone = PLACEHOLDER.fullmatch(template.strip())
        if lone:
            return resolve(lone.group(1).strip(), self.payload, self.outputs, self.scope())
        return render(template, self.payload, self.outputs, self.scope())

    def record(self, step: Step, result: StepResult) -> None:
        self.views[step.id] = result.view()
        self.outputs[step.id] = result.output
        if step.output_name:  # read as steps.<id>.output is: without final newlines
            self.named[step.output_name] = domain.step_value(result.output)

    def scope(self) -> dict[str, Any]:
        return {"payload": self.payload, "steps": self.views, "outputs": self.named, **self.loop}

    def headline(self, what: str) -> str:
        """A notification's words: which workflow and run, then what happened."""
        name = self.recipe.get("name") or self.recipe.get("slug")
        return f"{name} (run {names.short_run_id(self.run_id)}): {what}"

    def set_state(
        self,
        state: RunState,
        step: str | None,
        try_no: int | None,
        *,
        await_key: str | None = None,
        await_kind: AwaitKind | None = None,
        wake_at: datetime | None = None,
    ) -> None:
        run_state.set_run_state(
            self.conn,
            self.run_id,
            state,
            step,
            try_no,
            await_key=await_key,
            await_kind=await_kind,
            wake_at=wake_at,
        )

    def note(self, text: str, key: str | None, dedupe: str, data: Any = None) -> int | None:
        """A System note in the thread, once per dedupe key; its seq, or None if written before."""
        return thread_entries.system_note(
            self.conn,
            self.run_id,
            text,
            step_key=key,
            dedupe_key=dedupe,
            data=data,
        )

    def trace_began(self, path: str, try_no: int) -> int | None:
        """When this step try was taken up (first taken up: a replay reads it back), if traced."""
        if not self.traced:
            return None
        return int(self.ctx.step(f"trace.began:{path}:{try_no}", traces.now_ns))

    def trace_tried(
        self, step: Step, path: str, try_no: int, began: int | None, result: StepResult
    ) -> None:
        """The step try's span, sent once (a replay finds its checkpoint), if traced."""
        if began is None:
            return
        extra = result.extra
        children = [b["run_id"] for b in (extra.get("branches") or {}).values()]
        if extra.get("run_id"):
            children.append(extra["run_id"])

        def send() -> bool:
            traces.step_tried(
                self.run_id,
                str(self.recipe.get("slug") or self.recipe.get("name") or ""),
                path,
                try_no,
                step.kind,
                began,
                result.status,
                self.trace_within[-1] if self.trace_within else None,
                reason=result.reason,
                exit_code=result.exit_code,
                attempts=extra.get("attempt"),
                children=children,
            )
            return True

        self.ctx.step(f"trace.sent:{path}:{try_no}", send)

    def db_now(self) -> datetime:
        return cast(datetime, db.fetch_row(self.conn, "db_now")["now"])


def branch_output(finished: dict[str, Any]) -> Any:
    """A finished child's output: its declared outputs, else its last step's output (recorded as
    such: a JSON object's keys keep no order in the database)."""
    outputs = finished.get("outputs") or {}
    if outputs.get("declared"):
        return outputs["declared"]
    return outputs.get("last", "")


def snapshot_steps(steps: list[dict[str, Any]]) -> tuple[Step, ...]:
    """A run's snapshot's steps, parsed once per process for each distinct snapshot: a run is
    replayed at every claim (each step, under load), and parsing its steps (their commands'
    placeholders included) was a sixth of the conductor's CPU. Steps are immutable, so runs of
    one recipe version share them; the key is the steps' own text, not a name or version."""
    return _parsed_steps(json.dumps(steps, separators=(",", ":")))


@lru_cache(maxsize=256)
def _parsed_steps(text: str) -> tuple[Step, ...]:
    return tuple(snapshot_step(s) for s in json.loads(text))


def snapshot_step(d: dict[str, Any]) -> Step:
    """A step of a run's snapshot. One stored before a bound existed (a timeout of 10^20 days)
    fails with the reason when the run reaches it, rather than crash every replay of the run."""
    try:
        return Step.from_dict(d)
    except RecipeError as err:
        return Step(
            id=str(d.get("id") if isinstance(d, dict) else "?"),
            kind=INVALID,
            text="; ".join(err.errors),
        )
