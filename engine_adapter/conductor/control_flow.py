"""Control flow: a step's `if` (decided once per try), repeat and foreach in turn, and the
steps that run as child runs (parallel branches, foreach items in parallel, sub-workflows), the
parent parked on their run.done events (migration 009)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from engine_adapter.conductor.handler_base import HandlerBase, branch_output
from engine_adapter.model import domain, names
from engine_adapter.model.domain import StepResult
from engine_adapter.model.vocab import RunState
from engine_adapter.recipes import expressions
from engine_adapter.recipes.recipes import Step
from engine_adapter.recipes.render import RenderError
from engine_adapter.runs import child_runs
from engine_adapter.store import db

R = TypeVar("R")


class ControlFlow(HandlerBase):
    def decide(self, step: Step, path: str, try_no: int) -> dict[str, Any]:
        """Evaluate the step's `if` once per try and say in the thread what was decided."""

        def evaluate() -> dict[str, Any]:
            try:
                value = bool(expressions.evaluate(step.condition or "", self.scope()))
            except expressions.ExpressionError as err:
                error = f"Step {step.id}: its condition could not be evaluated: {err}"
                with self.conn.transaction():
                    self.note(error, None, f"decide:{path}:{try_no}")
                return {"error": error}
            why = f"`{step.condition}` is {'true' if value else 'false'}"
            if step.kind == domain.CONDITIONAL:
                taken = "then" if value else "else"
                text = f"{why}, so step {step.id} takes its {taken} branch"
                if not step.block(taken):
                    text += " (empty: nothing runs)"
            else:
                text = f"{why}, so step {step.id} {'runs' if value else 'is skipped'}"
            with self.conn.transaction():
                self.note(text[0].upper() + text[1:] + ".", None, f"decide:{path}:{try_no}")
                db.notify(self.conn, self.run_id, "thread")
            return {"value": value, "why": why}

        return self.ctx.step(names.checkpoint(names.DECIDE, path, try_no), evaluate)

    def repeat(self, step: Step, path: str, try_no: int) -> StepResult:
        body, outer = step.block("repeat"), dict(self.loop)
        limit = step.max_iterations or 1
        try:
            for n in range(1, limit + 1):
                self.loop = {"iteration": n, "index": n - 1, "item": n}
                self.run_list(body, names.iteration_path(path, n))
                until = self.until(step, path, n, try_no)
                if "error" in until:
                    return StepResult(domain.FAILED, until["error"], reason=until["error"])
                if until["value"]:
                    return StepResult(
                        domain.COMPLETED, self.outputs.get(body[-1].id, ""), extra={"iterations": n}
                    )
        finally:
            self.loop = outer
        reason = f"`{step.until}` still false after {limit} iterations (max_iterations)"
        return StepResult(domain.FAILED, reason, reason=reason, extra={"iterations": limit})

    def until(self, step: Step, path: str, n: int, try_no: int) -> dict[str, Any]:
        where = names.iteration_path(path, n)

        def evaluate() -> dict[str, Any]:
            try:
                value = bool(expressions.evaluate(step.until or "", self.scope()))
            except expressions.ExpressionError as err:
                return {"error": f"Step {step.id}: `until` could not be evaluated: {err}"}
            if value:
                with self.conn.transaction():
                    self.note(
                        f"`{step.until}` is true after iteration {n}: step {step.id} is done.",
                        None,
                        f"until:{where}:{try_no}",
                    )
            return {"value": value}

        return self.ctx.step(names.checkpoint(names.UNTIL, where, try_no), evaluate)

    def foreach(self, step: Step, path: str, try_no: int) -> StepResult:
        listed = self.ctx.step(
            names.checkpoint(names.ITEMS, path, try_no), lambda: self.list_items(step, path, try_no)
        )
        if "error" in listed:
            return StepResult(domain.FAILED, listed["error"], reason=listed["error"])
        items, body = listed["items"], step.block("steps")
        if (step.max_parallel or 1) > 1:
            branches = [
                child_runs.Branch(
                    str(i + 1),
                    [s.to_dict() for s in body],
                    "item",
                    loop={"item": item, "index": i, "iteration": i + 1},
                )
                for i, item in enumerate(items)
            ]
            return self.fan_out(step, path, try_no, branches)
        outer, collected = dict(self.loop), []
        try:
            for i, item in enumerate(items):
                self.loop = {"item": item, "index": i, "iteration": i + 1}
                self.run_list(body, names.iteration_path(path, i + 1))
                collected.append(domain.step_value(self.outputs.get(body[-1].id, "")))
        finally:
            self.loop = outer
        return StepResult(domain.COMPLETED, collected, extra={"items": len(items)})

    def list_items(self, step: Step, path: str, try_no: int) -> dict[str, Any]:
        error: str | None
        try:
            items = expressions.evaluate(step.text, self.scope())
        except expressions.ExpressionError as err:
            items, error = None, f"Step {step.id}: its list could not be evaluated: {err}"
        else:
            error = None
            if isinstance(items, dict) or not isinstance(items, (list, tuple)):
                error = f"Step {step.id}: `{step.text}` is {type(items).__name__}, not a list"
            elif len(items) > (step.max_items or 0):
                error = (
                    f"Step {step.id}: `{step.text}` has {len(items)} items; max_items is "
                    f"{step.max_items}"
                )
        with self.conn.transaction():
            if error:
                self.note(error, None, f"items:{path}:{try_no}")
                return {"error": error}
            self.note(
                f"Step {step.id} runs once for each of {len(items)} items"
                + (
                    f", {step.max_parallel} at a time."
                    if (step.max_parallel or 1) > 1
                    else ", one after another."
                ),
                None,
                f"items:{path}:{try_no}",
            )
            db.notify(self.conn, self.run_id, "thread")
        return {"items": list(items)}

    def fan_out(
        self, step: Step, path: str, try_no: int, branches: list[child_runs.Branch]
    ) -> StepResult:
        """Start each branch as a child run and wait for them (`all`, in declared order, at most
        max_parallel at once) or for the first to finish (`any`, the others are cancelled)."""
        settled = self.settled.setdefault(path, {})
        todo = [b for b in branches if settled.get(b.name, {}).get("status") != domain.COMPLETED]
        inherited = {"steps": self.views, "outputs": self.named, "loop": self.loop}
        first = names.first_done_event(self.run_id, path, try_no)
        any_mode = step.completion == "any"
        wave = len(todo) if any_mode else (step.max_parallel or len(todo))
        for start in range(0, len(todo), max(wave, 1)):
            started: dict[str, str] = {}
            for b in todo[start : start + wave]:
                started[b.name] = self.ctx.step(
                    names.checkpoint(names.SPAWN, path, try_no, b.name),
                    self.at_step(
                        path,
                        try_no,
                        partial(
                            child_runs.spawn_branch,
                            self.conn,
                            self.run_id,
                            self.recipe,
                            self.payload,
                            path,
                            try_no,
                            b,
                            {**inherited, "loop": b.loop or self.loop},
                            notify=(first,) if any_mode else (),
                        ),
                    ),
                )["run_id"]
            if any_mode:
                return self.first_wins(step, path, try_no, started, settled)
            for name, child in started.items():
                settled[name] = self.await_event(
                    names.run_done_event(child), names.checkpoint(names.DONE, path, try_no, name)
                )
        results = [settled[b.name] for b in branches]
        for r in results:
            self.merge(r)
        failed = [r["branch"] for r in results if r["status"] != domain.COMPLETED]
        runs = {r["branch"]: {"run_id": r["run_id"], "status": r["status"]} for r in results}
        output = (
            [branch_output(r) for r in results]
            if step.kind == domain.FOREACH
            else {r["branch"]: branch_output(r) for r in results}
        )
        if failed:
            noun = "item" if step.kind == domain.FOREACH else "branch"
            plural = "" if len(failed) == 1 else ("s" if noun == "item" else "es")
            reason = f"{noun}{plural} {', '.join(failed)} did not complete"
            return StepResult(domain.FAILED, output, reason=reason, extra={"branches": runs})
        return StepResult(domain.COMPLETED, output, extra={"branches": runs})

    def first_wins(
        self,
        step: Step,
        path: str,
        try_no: int,
        started: dict[str, str],
        settled: dict[str, dict[str, Any]],
    ) -> StepResult:
        """`completion: any`: the first branch to finish decides the step; the others are
        cancelled."""
        first = names.first_done_event(self.run_id, path, try_no)
        won = self.await_event(first, names.checkpoint(names.WINNER, path, try_no))
        self.ctx.step(
            names.checkpoint(names.WINNER, path, try_no, "losers"),
            lambda: child_runs.cancel_losers(self.conn, self.run_id, step.id, won, started),
        )
        settled[won["branch"]] = won
        self.merge(won)
        status = won["status"] if won["status"] == domain.COMPLETED else domain.FAILED
        return StepResult(
            status,
            branch_output(won),
            reason=None
            if status == domain.COMPLETED
            else f"branch {won['branch']} {won['status']}",
            extra={
                "winner": won["branch"],
                "branches": {n: {"run_id": r} for n, r in started.items()},
            },
        )

    def at_step(self, path: str, try_no: int, start: Callable[[], R]) -> Callable[[], R]:
        """`start` (a child run's spawn), the run first shown running at this step: while its
        children run it parks on their ends, and every surface lists it at this step, not at
        the one before (or, first, at none)."""

        def started() -> R:
            self.set_state(RunState.RUNNING, path, try_no)
            return start()

        return started

    def merge(self, finished: dict[str, Any]) -> None:
        """A branch's results become the parent's: its steps' views and named outputs."""
        outputs = finished.get("outputs") or {}
        for sid, view in (outputs.get("steps") or {}).items():
            self.views[sid] = view
            self.outputs[sid] = view.get("output")
        self.named.update(outputs.get("outputs") or {})

    def sub_workflow(self, step: Step, path: str, try_no: int) -> StepResult:
        try:
            payload = {k: self.value_of(v) for k, v in (step.payload or {}).items()}
        except RenderError as err:
            return StepResult(domain.FAILED, str(err), reason=str(err))
        started = self.ctx.step(
            names.checkpoint(names.SPAWN, path, try_no, "run"),
            self.at_step(
                path,
                try_no,
                lambda: child_runs.spawn_workflow(
                    self.conn, self.run_id, step.text, payload, path, try_no
                ),
            ),
        )
        if "error" in started:
            return StepResult(domain.FAILED, started["error"], reason=started["error"])
        done = self.await_event(
            names.run_done_event(started["run_id"]),
            names.checkpoint(names.DONE, path, try_no, "run"),
        )
        declared = (done.get("outputs") or {}).get("declared") or {}
        status = domain.COMPLETED if done["status"] == domain.COMPLETED else domain.FAILED
        return StepResult(
            status,
            declared or branch_output(done),
            reason=None
            if status == domain.COMPLETED
            else f"run {started['run_id']} of {step.text} {done['status']}",
            extra={"run_id": started["run_id"], "outputs": declared},
        )
