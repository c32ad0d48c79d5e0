"""How a run ends or stops: a failed step parks the run on a retry (a child run ends instead), a
denied gate or the recipe's limits cancel it, and the finish records its outputs and final state."""

from __future__ import annotations

import logging
from typing import Any

from absurd_sdk import CancelledTask
from psycopg.types.json import Jsonb

from engine_adapter.conductor.handler_base import END_NOTE, EndRun, HandlerBase
from engine_adapter.model import names
from engine_adapter.model.domain import StepResult
from engine_adapter.model.settings import QUEUE
from engine_adapter.model.vocab import NotifyEvent, RunState
from engine_adapter.read import step_report
from engine_adapter.recipes import expressions
from engine_adapter.recipes.recipes import Step
from engine_adapter.recipes.render import as_text
from engine_adapter.runs import child_runs, notifications
from engine_adapter.store import db, traces

log = logging.getLogger("threadline.conductor")


class Lifecycle(HandlerBase):
    def park_failed(self, path: str, try_no: int, result: StepResult) -> None:
        """A failed run parks on a retry event; it never raises into Absurd. A child run ends
        instead: its parent's step says what the failure means."""
        if self.is_child:
            raise EndRun(path, result)
        key = names.step_key(self.run_id, path, try_no)
        step_id = names.step_id_of(path)

        def mark_failed() -> bool:
            with self.conn.transaction():
                self.set_state(RunState.FAILED, path, try_no)
                tail = step_report.tail(as_text(result.output)) or "(no output)"
                why = f": {result.reason}" if result.reason else ""
                self.note(  # the id quoted: a step named "maybe" must not read as a guess
                    f'Step "{step_id}" failed (try {try_no}){why}.\n{tail}\n'
                    f"Run `threadline retry {self.run_id}` to resume at this step.",
                    key,
                    f"failed:{key}",
                )
                notifications.enqueue(
                    self.conn,
                    self.run_id,
                    self.recipe,
                    NotifyEvent.FAILED,
                    key,
                    self.headline(f"step {step_id} failed{why}"),
                )
                db.notify(self.conn, self.run_id, RunState.FAILED)
            self.say_ended(RunState.FAILED, f"at step {step_id}{why}; waits for a retry", path)
            return True

        self.ctx.step(names.checkpoint(names.FAILED, path, try_no), mark_failed)
        self.await_event(names.retry_event(key), names.retry_checkpoint(path, try_no))

    def end_cancelled(self, step: Step, path: str, try_no: int, result: StepResult) -> None:
        key = names.step_key(self.run_id, path, try_no)
        with self.conn.transaction():
            self.set_state(RunState.CANCELLED, path, try_no)
            self.note(
                f"Run cancelled: gate {step.id} {result.reason or 'denied'}.",
                key,
                f"cancelled:{key}",
            )
            db.fetch_one(self.conn, "cancel_engine_task", dict(queue=QUEUE, run_id=self.run_id))
            child_runs.cancel_open_children(self.conn, self.run_id, "its parent run was cancelled")
            db.notify(self.conn, self.run_id, RunState.CANCELLED)
        self.trace_ended(RunState.CANCELLED)
        raise CancelledTask()

    def end_by_policy(self, path: str, try_no: int, why: str) -> None:
        """The recipe's limits end the run cancelled, saying which (a retry would meet them
        again, so it does not park as failed)."""

        def end() -> bool:
            with self.conn.transaction():
                self.set_state(RunState.CANCELLED, path, try_no)
                self.note(f"Run cancelled by its policy: {why}.", None, f"policy:{path}:{try_no}")
                db.fetch_one(self.conn, "cancel_engine_task", dict(queue=QUEUE, run_id=self.run_id))
                child_runs.cancel_open_children(self.conn, self.run_id, "its parent was cancelled")
                db.notify(self.conn, self.run_id, RunState.CANCELLED)
            self.trace_ended(RunState.CANCELLED)
            return True

        self.ctx.step(names.checkpoint(names.FAILED, path, try_no, "policy"), end)
        raise CancelledTask()

    def finish(self, ended: EndRun | None = None) -> bool:
        declared = self.declared_outputs() if ended is None else {}
        record = {
            "steps": self.views,
            "outputs": self.named,
            "declared": declared,
            "last": self.last_output,
        }
        with self.conn.transaction():
            self.conn.execute(
                db.q("set_run_outputs"), dict(run_id=self.run_id, outputs=Jsonb(record))
            )
            if ended is None:
                self.set_state(RunState.COMPLETED, None, None)
                self.note("Run completed.", None, END_NOTE)
                db.notify(self.conn, self.run_id, RunState.COMPLETED)
            else:
                step_id = names.step_id_of(ended.path)
                self.set_state(RunState.FAILED, ended.path, None)
                why = ended.result.reason or as_text(ended.result.output)[-500:]
                self.note(f"Run failed at step {step_id}: {why}", None, END_NOTE)
                db.notify(self.conn, self.run_id, RunState.FAILED)
        self.trace_ended(RunState.COMPLETED if ended is None else RunState.FAILED)
        return True

    def say_ended(self, state: RunState, why: str = "", path: str | None = None) -> None:
        """One log line as the run ends or parks failed, naming it (fields of their own in JSON
        logs); said inside the checkpoint that ends it, so a replay does not say it again."""
        extra = {"run_id": self.run_id, "workflow": self.recipe.get("slug"), "step": path}
        log.info("run %s %s%s", self.run_id, state, f" {why}" if why else "", extra=extra)

    def trace_ended(self, state: RunState) -> None:
        """The run's root span, as it ends (inside the checkpoint that ends it), if traced; and
        its log line."""
        self.say_ended(state)
        if self.traced:
            traces.run_ended(self.conn, self.run_id, state)

    def declared_outputs(self) -> dict[str, Any]:
        """The recipe's `outputs`, evaluated over the finished run (once: inside a checkpoint)."""
        out: dict[str, Any] = {}
        for name, expr in (self.recipe.get("outputs") or {}).items():
            try:
                out[name] = expressions.evaluate(expr, self.scope())
            except expressions.ExpressionError as err:
                out[name] = {"error": str(err)}
        return out
