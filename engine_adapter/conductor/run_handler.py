"""The one generic workflow handler: deterministic replay of one run over its recipe snapshot.

Every side effect sits behind a named checkpoint (`names.py`), so a replay after a crash takes the
same path: a condition is evaluated once and its value checkpointed; a foreach's list once; a
child run is spawned once per branch, step and try. Per leaf step and try the handler SENDs an
instruction (or a gate question) into the thread and PARKs on the step's done event, holding no
process. Parallel branches, parallel foreach items and sub-workflows run as child runs; the
parent parks on their run.done events (migration 009).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar, cast

import psycopg
from absurd_sdk import CancelledTask
from absurd_sdk import TimeoutError as AwaitTimeout
from psycopg.types.json import Jsonb

from engine_adapter.catalog import proposals
from engine_adapter.model import domain, names
from engine_adapter.model.domain import StepResult
from engine_adapter.model.recipe_values import parse_duration
from engine_adapter.model.settings import QUEUE
from engine_adapter.model.vocab import AwaitKind, Door, EntryKind, NotifyEvent, RunState
from engine_adapter.read import step_report
from engine_adapter.recipes import expressions
from engine_adapter.recipes.recipes import (
    PLACEHOLDER,
    RecipeError,
    Step,
    check_wake,
    load_recipe_text,
)
from engine_adapter.recipes.render import RenderError, as_text, render, render_command, resolve
from engine_adapter.runs import child_runs, gates, notifications, run_state, thread_entries
from engine_adapter.runs.spawn import admit_event
from engine_adapter.sandbox import step_limits
from engine_adapter.store import db
from engine_adapter.store.wakeups import Hold, HoldPolicy
from engine_adapter.store.workers import crash_point

INVALID = "invalid"  # a snapshot's step that no longer validates: it fails when reached
_BLOCKS = (*domain.BLOCK_KINDS, domain.WORKFLOW)
# The dedupe key of the run's closing note, however it ends: stored, so kept as first written.
END_NOTE = "completed"


class EndRun(Exception):
    """A child run ends at its first failure: its parent's step decides what that means."""

    def __init__(self, path: str, result: StepResult) -> None:
        super().__init__(path)
        self.path, self.result = path, result


T = TypeVar("T")


class RunHandler:
    def __init__(
        self,
        conn: psycopg.Connection[Any],
        ctx: Any,
        params: dict[str, Any],
        holds: HoldPolicy | None = None,
    ) -> None:
        self.conn = conn
        self.holds = holds
        self.ctx = ctx
        self.run_id = str(ctx.task_id)
        self.payload = params["payload"]
        self.recipe = params["recipe"]
        self.steps = [snapshot_step(s) for s in self.recipe["steps"]]
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

    def atomic_step(self, name: str, fn: Callable[[], T]) -> T:
        """A checkpointed step whose writes and checkpoint commit together: one commit instead
        of two, and no crash can leave the writes without their checkpoint (a replay would find
        them, as SEND's dedupe keys make sure, but would still pay for the lookups)."""
        handle = self.ctx.begin_step(name)
        if handle.done:
            return cast(T, handle.state)
        with self.conn.transaction():
            return cast(T, self.ctx.complete_step(handle, fn()))

    # -- the walk ------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        if self.admit:
            # Queued behind max_concurrent_runs: park until admitted (at once if spawn admitted it).
            self.ctx.await_event(admit_event(self.run_id), "admitted")
        ended: EndRun | None = None
        try:
            self.run_list(self.steps, "")
        except EndRun as end:
            ended = end
        self.ctx.step("finish", lambda: self.finish(ended))
        return {"outputs": self.outputs}

    def run_list(self, steps: Iterable[Step], scope: str) -> None:
        for step in steps:
            path = names.child_path(scope, step.id)
            if not scope and step.id in (self.carried or {}).get("steps", ()):
                self.carry(step, path)
                continue
            result = self.run_with_tries(step, path, scope)
            self.record(step, result)
            if not scope:
                self.last_output = domain.step_value(result.output)

    def carry(self, step: Step, path: str) -> None:
        """A rerun takes this step's results over from its original run, running nothing: the
        views and named outputs the original handed on (reruns.py), kept in the checkpoint so
        that a rerun of this run finds them in its journal."""
        carried = self.carried or {}
        views = carried.get("views") or {}

        def note() -> dict[str, Any]:
            with self.conn.transaction():
                self.note(
                    f"Step {step.id} carried over from run {carried.get('run_id')}: not run again.",
                    None,
                    f"carried:{path}",
                )
            inner = {s.id: views[s.id] for s in step.walk() if s.id in views}
            named = {
                s.output_name: carried["named"][s.output_name]
                for s in step.walk()
                if s.output_name in (carried.get("named") or {})
            }
            return {
                "from": carried.get("run_id"),
                **(views.get(step.id) or {}),
                "carried": {"steps": inner, "outputs": named},
            }

        # A checkpoint from before it held "carried": the rerun's params still do.
        state = self.ctx.step(names.checkpoint(names.CARRIED, path), note)
        taken = state.get("carried") or {"steps": views, "outputs": carried.get("named") or {}}
        for inner in step.walk():
            if inner.id in taken["steps"]:
                self.views[inner.id] = taken["steps"][inner.id]
                self.outputs[inner.id] = taken["steps"][inner.id].get("output")
        for name, value in taken["outputs"].items():
            self.named.setdefault(name, value)

    def run_with_tries(self, step: Step, path: str, scope: str) -> StepResult:
        """Try the step until it completes, is skipped or fails with `on_failure: continue`; a
        failure parks the run on a retry (a child run ends instead)."""
        try_no = 1
        while True:
            result = self.try_once(step, path, scope, try_no)
            if step.kind in _BLOCKS and result.status != domain.SKIPPED:
                # A block's result lives in memory only: write it down for the read model.
                done = result.to_dict()
                self.ctx.step(names.done_checkpoint(path, try_no), lambda done=done: done)
            if result.ok or (result.status == domain.FAILED and step.on_failure == "continue"):
                return result
            if result.extra.get("timed_out") and step.on_timeout == "continue":
                return result
            if result.status == domain.CANCELLED:
                self.end_cancelled(step, path, try_no, result)
            self.park_failed(path, try_no, result)
            try_no += 1

    def try_once(self, step: Step, path: str, scope: str, try_no: int) -> StepResult:
        if step.kind == INVALID:
            sent = self.ctx.step(
                names.send_checkpoint(path, try_no), lambda: self.refuse(step, path, try_no)
            )
            return StepResult(domain.FAILED, sent["error"])
        if step.condition is not None:
            decided = self.decide(step, path, try_no)
            if "error" in decided:
                return StepResult(domain.FAILED, decided["error"], reason=decided["error"])
            if step.kind == domain.CONDITIONAL:
                branch = "then" if decided["value"] else "else"
                self.run_list(step.block(branch), scope)
                return StepResult(domain.COMPLETED, branch, extra={"branch": branch})
            if not decided["value"]:
                return StepResult(domain.SKIPPED, "", reason=decided["why"])
        if step.kind not in _BLOCKS:  # a leaf's try: the recipe's max_steps counts them
            self.tries_started += 1
            limit = self.recipe.get("max_steps")
            if limit is not None and self.tries_started > limit:
                self.end_by_policy(
                    path, try_no, f"it would start more than {limit} step tries (max_steps)"
                )
        if step.kind in domain.BOT_KINDS:
            return self.bot_step(step, path, try_no)
        if step.kind in domain.SLEEP_KINDS:
            return self.sleep_step(step, path, try_no)
        if step.kind == domain.HUMAN_GATE:
            return self.gate_step(step, path, try_no)
        if step.kind == domain.REPEAT:
            return self.repeat(step, path, try_no)
        if step.kind == domain.FOREACH:
            return self.foreach(step, path, try_no)
        if step.kind == domain.PARALLEL:
            branches = [
                child_runs.Branch(name, [s.to_dict() for s in steps], "branch")
                for name, steps in step.blocks
            ]
            return self.fan_out(step, path, try_no, branches)
        if step.kind == domain.WORKFLOW:
            return self.sub_workflow(step, path, try_no)
        if step.kind == domain.WAIT_FOR_EVENT:
            return self.wait_step(step, path, try_no)
        return StepResult(domain.FAILED, f"step {step.id}: {step.kind} steps are not supported")

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

    # -- decisions -----------------------------------------------------------------------------
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

    # -- loops ---------------------------------------------------------------------------------
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

    # -- child runs: parallel branches, parallel items, sub-workflows ---------------------------
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
                    lambda b=b: child_runs.spawn_branch(
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
                )["run_id"]
            if any_mode:
                won = self.ctx.await_event(first, names.checkpoint(names.WINNER, path, try_no))
                self.ctx.step(
                    names.checkpoint(names.WINNER, path, try_no, "losers"),
                    lambda won=won, started=started: child_runs.cancel_losers(
                        self.conn, self.run_id, step.id, won, started
                    ),
                )
                settled[won["branch"]] = won
                self.merge(won)
                status = won["status"] if won["status"] == domain.COMPLETED else domain.FAILED
                return StepResult(
                    status,
                    _branch_output(won),
                    reason=None
                    if status == domain.COMPLETED
                    else f"branch {won['branch']} {won['status']}",
                    extra={
                        "winner": won["branch"],
                        "branches": {n: {"run_id": r} for n, r in started.items()},
                    },
                )
            for name, child in started.items():
                settled[name] = self.ctx.await_event(
                    names.run_done_event(child), names.checkpoint(names.DONE, path, try_no, name)
                )
        results = [settled[b.name] for b in branches]
        for r in results:
            self.merge(r)
        failed = [r["branch"] for r in results if r["status"] != domain.COMPLETED]
        runs = {r["branch"]: {"run_id": r["run_id"], "status": r["status"]} for r in results}
        output = (
            [_branch_output(r) for r in results]
            if step.kind == domain.FOREACH
            else {r["branch"]: _branch_output(r) for r in results}
        )
        if failed:
            noun = "item" if step.kind == domain.FOREACH else "branch"
            plural = "" if len(failed) == 1 else ("s" if noun == "item" else "es")
            reason = f"{noun}{plural} {', '.join(failed)} did not complete"
            return StepResult(domain.FAILED, output, reason=reason, extra={"branches": runs})
        return StepResult(domain.COMPLETED, output, extra={"branches": runs})

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
            lambda: child_runs.spawn_workflow(
                self.conn, self.run_id, step.text, payload, path, try_no
            ),
        )
        if "error" in started:
            return StepResult(domain.FAILED, started["error"], reason=started["error"])
        done = self.ctx.await_event(
            names.run_done_event(started["run_id"]),
            names.checkpoint(names.DONE, path, try_no, "run"),
        )
        declared = (done.get("outputs") or {}).get("declared") or {}
        status = domain.COMPLETED if done["status"] == domain.COMPLETED else domain.FAILED
        return StepResult(
            status,
            declared or _branch_output(done),
            reason=None
            if status == domain.COMPLETED
            else f"run {started['run_id']} of {step.text} {done['status']}",
            extra={"run_id": started["run_id"], "outputs": declared},
        )

    # -- SEND and PARK ------------------------------------------------------------------------
    def bot_step(self, step: Step, path: str, try_no: int) -> StepResult:
        """SEND the step to its bot and PARK on its done event. An agent step whose loop paused
        (ask_human, start_workflow) goes on in rounds: the conductor asks or starts runs, waits
        holding no process, and SENDs the next round with the answer."""
        answers: dict[str, str] = {}
        for round_no in itertools.count(1):
            done = self.dispatch(step, path, try_no, round_no, answers)
            if done.get("status") != domain.PAUSED:
                return StepResult.from_dict(done)
            request = done["output"]
            if request["tool"] == domain.ASK_HUMAN:
                answers[request["call"]] = self.ask_human(step, path, try_no, round_no, request)
            elif request["tool"] == domain.PROPOSE_CHANGE:
                answers[request["call"]] = self.ctx.step(
                    names.checkpoint(names.SPAWN, path, try_no, f"p{round_no}"),
                    lambda request=request: self.propose_change(step, path, request),
                )
            else:
                answers[request["call"]] = self.start_runs(step, path, try_no, round_no, request)
        raise AssertionError("unreachable")

    def dispatch(
        self, step: Step, path: str, try_no: int, round_no: int, answers: dict[str, str]
    ) -> dict[str, Any]:
        """One round of a bot step: its instruction SENT, its done payload awaited."""
        later = round_no > 1
        part = f"r{round_no}" if later else None
        key = (
            names.round_key(self.run_id, path, try_no, part)
            if part
            else names.step_key(self.run_id, path, try_no)
        )
        instruction = domain.Instruction(
            step=path,
            kind=step.kind,
            try_no=try_no,
            timeout_s=step.timeout_s,
            retries=step.retries,
            workdir=self.recipe.get("workdir"),
            env=tuple(self.recipe.get("env", [])),
            network=self.recipe.get("network", True),
            limits=step_limits.merged(self.recipe.get("limits"), step.limits),
            tools=step.tools,
            workflows=step.workflows,
            answers=dict(answers),
            retry=domain.RetryPolicy(step.retry_on, *(step.backoff or ())),
        )
        text = None
        if later:  # the task as first sent; the thread says only that the step goes on
            try:
                task = render(step.text, self.payload, self.outputs, self.scope())
            except RenderError as err:  # it rendered in round 1 from the same values
                return StepResult(domain.FAILED, str(err), reason=str(err)).to_dict()
            instruction = replace(instruction, task=task)
            text = f"Step {step.id} goes on with the answer (round {round_no})."
        held: Hold | None = None

        def send_instruction() -> dict[str, Any]:
            nonlocal held
            if self.holds is not None:  # before the SEND commits: the bot may answer at once
                held = self.holds.hold(self.run_id)
            return self.send(
                step,
                path,
                try_no,
                key,
                entry_kind=EntryKind.INSTRUCTION,
                state=RunState.RUNNING,
                await_kind=AwaitKind.BOT,
                data=instruction.to_data(),
                text=text,
            )

        try:
            sent = self.atomic_step(
                names.checkpoint(names.SEND, path, try_no, part), send_instruction
            )
            crash_point("after_send_checkpoint")
            if held is not None and sent["ok"]:
                # A done event that comes within the hold is awaited without parking the run.
                held.wait()
        finally:
            if held is not None and self.holds is not None:
                self.holds.release(self.run_id)
        if not sent["ok"]:
            return StepResult(domain.FAILED, sent["error"]).to_dict()
        return self.ctx.await_event(
            names.done_event(key), names.checkpoint(names.DONE, path, try_no, part)
        )

    def ask_human(
        self, step: Step, path: str, try_no: int, round_no: int, request: dict[str, Any]
    ) -> str:
        """The agent's question as a gate in the thread (any reply answers it); the answer is
        what the model reads as the tool's result."""
        part = f"ask{round_no}"
        key = names.round_key(self.run_id, path, try_no, part)
        data = {"step": path, "kind": domain.ASK_HUMAN, "try": try_no, "accept": "any_reply"}
        question = f"Step {step.id} asks: {request['question']}"
        self.ctx.step(
            names.checkpoint(names.SEND, path, try_no, part),
            lambda: self.ask(step, path, try_no, key, data, question),
        )
        decision = self.ctx.await_event(
            names.done_event(key), names.checkpoint(names.DONE, path, try_no, part)
        )
        said = decision.get("text") or ""
        if decision.get("decision") in (domain.APPROVE, domain.DENY):
            verb = "approved" if decision["decision"] == domain.APPROVE else "denied"
            said = f"({verb})" + (f" {said}" if said else "")
        return f"{decision.get('actor', 'a person')} answered: {said}"

    def propose_change(self, step: Step, path: str, request: dict[str, Any]) -> str:
        """The agent's proposed change to this run's workflow, recorded for review (never
        applied here); what the model reads back."""
        from engine_adapter.model.identity import Actor

        run = db.fetch_row(self.conn, "get_run", dict(run_id=self.run_id))
        slug = run["workflow"]
        try:
            recipe = load_recipe_text(request["recipe"], "recipe")
            row = proposals.propose(
                self.conn,
                slug,
                run["recipe_hash"],
                recipe,
                request["summary"],
                Actor(f"{run['bot']} (agent)", Door.SYSTEM),
                run_id=self.run_id,
            )
        except RecipeError as err:
            return "error: the proposed recipe is invalid: " + "; ".join(err.errors)
        except proposals.ProposalError as err:
            return f"error: {err}"
        with self.conn.transaction():
            self.note(
                f"Step {step.id} proposed a change to workflow {slug}: proposal #{row['id']} "
                f"(risk {row['risk']}): {row['summary']}",
                None,
                f"proposal:{row['id']}",
                data={"proposal": row["id"], "risk": row["risk"]},
            )
        return (
            f"proposal #{row['id']} recorded (risk {row['risk']}: "
            f"{'; '.join(row['risk_reasons'])}); a person reviews it, and nothing changes "
            "until they apply it"
        )

    def start_runs(
        self, step: Step, path: str, try_no: int, round_no: int, request: dict[str, Any]
    ) -> str:
        """Start the runs the agent asked for, as children of this run, and wait for all of them
        or the first to finish (the others cancelled); what each did, as JSON for the model."""
        any_mode = request.get("wait") == "any"
        first = names.first_done_event(self.run_id, f"{path}~s{round_no}", try_no)
        started: dict[str, str] = {}
        results: dict[str, dict[str, Any]] = {}
        for i, run in enumerate(request["runs"], start=1):
            branch = f"s{round_no}.{i}"
            if run["workflow"] not in step.workflows:  # the bot checked; the recipe decides
                results[branch] = {"workflow": run["workflow"], "error": "not allowed here"}
                continue
            spawned = self.ctx.step(
                names.checkpoint(names.SPAWN, path, try_no, branch),
                lambda run=run, branch=branch: child_runs.spawn_workflow(
                    self.conn,
                    self.run_id,
                    run["workflow"],
                    run["payload"],
                    path,
                    try_no,
                    branch=branch,
                    notify=(first,) if any_mode else (),
                ),
            )
            if "error" in spawned:
                results[branch] = {"workflow": run["workflow"], "error": spawned["error"]}
            else:
                started[branch] = spawned["run_id"]
                results[branch] = {"workflow": run["workflow"], "run_id": spawned["run_id"]}
        if any_mode and started:
            won = self.ctx.await_event(
                first, names.checkpoint(names.WINNER, path, try_no, f"s{round_no}")
            )
            self.ctx.step(
                names.checkpoint(names.WINNER, path, try_no, f"s{round_no}.losers"),
                lambda: child_runs.cancel_losers(self.conn, self.run_id, step.id, won, started),
            )
            for branch in started:
                results[branch]["status"] = domain.CANCELLED
            results[won["branch"]].update(status=won["status"], output=_branch_output(won))
        else:
            for branch, child in started.items():
                done = self.ctx.await_event(
                    names.run_done_event(child),
                    names.checkpoint(names.DONE, path, try_no, branch),
                )
                declared = (done.get("outputs") or {}).get("declared") or {}
                results[branch].update(
                    status=done["status"], output=declared or _branch_output(done)
                )
        return json.dumps(list(results.values()), ensure_ascii=False, default=str)

    def gate_step(self, step: Step, path: str, try_no: int) -> StepResult:
        key = names.step_key(self.run_id, path, try_no)

        def open_gate() -> dict[str, Any]:
            # No gate waits for ever unless asked to wait long: its on_timeout path then decides.
            timeout_s = step.timeout_s or domain.DEFAULT_GATE_TIMEOUT_S
            now = self.db_now()
            try:
                deadline = datetime.fromtimestamp(now.timestamp() + timeout_s, now.tzinfo)
            except (OverflowError, ValueError, OSError) as err:  # bounded by validation
                return {"ok": False, "error": f"gate {step.id}: timeout out of range ({err})"}
            data = {
                "step": path,
                "kind": step.kind,
                "try": try_no,
                "accept": step.accept,
                "approvers": list(step.approvers),
                "from": step.from_,
                "deadline": deadline.isoformat(),
            }
            return self.ask(step, path, try_no, key, data)

        sent = self.atomic_step(names.send_checkpoint(path, try_no), open_gate)
        if not sent["ok"]:
            return StepResult(domain.FAILED, sent["error"])
        timeout = None
        if sent["data"]["deadline"]:  # from the checkpoint: a replay keeps the original deadline
            remaining = (
                datetime.fromisoformat(sent["data"]["deadline"]) - self.db_now()
            ).total_seconds()
            timeout = max(0, math.ceil(remaining))
        try:
            decision = self.ctx.await_event(
                names.done_event(key), names.done_checkpoint(path, try_no), timeout=timeout
            )
        except AwaitTimeout:
            # Absurd writes no checkpoint on timeout: emit the same done event with a timeout
            # decision (first write wins against a late approval) and await it again.
            gates.time_out_gate(self.conn, self.run_id, key)
            decision = self.ctx.await_event(
                names.done_event(key), names.late_done_checkpoint(path, try_no)
            )
        outcome = domain.gate_outcome(decision, step.on_timeout)
        text = decision.get("text") or ""
        if outcome.passed:
            return StepResult(domain.COMPLETED, text, extra={"decision": decision})
        return StepResult(
            domain.CANCELLED, text or outcome.why, reason=outcome.why, extra={"decision": decision}
        )

    def wait_step(self, step: Step, path: str, try_no: int) -> StepResult:
        """Wait for the first of the step's events (with its key), holding no process; an event
        delivered before the run got here counts (migration 010)."""
        key = names.step_key(self.run_id, path, try_no)
        sent = self.ctx.step(
            names.send_checkpoint(path, try_no), lambda: self.start_wait(step, path, try_no, key)
        )
        if not sent["ok"]:
            return StepResult(domain.FAILED, sent["error"], reason=sent["error"])
        timeout = None
        if sent["deadline"]:
            remaining = (datetime.fromisoformat(sent["deadline"]) - self.db_now()).total_seconds()
            timeout = max(0, math.ceil(remaining))
        try:
            done = self.ctx.await_event(
                names.done_event(key), names.done_checkpoint(path, try_no), timeout=timeout
            )
        except AwaitTimeout:
            with self.conn.transaction():  # first write wins against an event arriving now
                released = db.fetch_row(
                    self.conn,
                    "release_wait",
                    dict(queue=QUEUE, step_key=key, payload=Jsonb({"status": "timeout"})),
                )["released"]
                if released:
                    self.note(
                        f"No {' or '.join(step.events)} event came in time (step {step.id}); "
                        f"taking its on_timeout path: {step.on_timeout}.",
                        key,
                        f"timeout:{key}",
                    )
            done = self.ctx.await_event(
                names.done_event(key), names.late_done_checkpoint(path, try_no)
            )
        if done.get("status") == "timeout":
            why = f"no {' or '.join(step.events)} event in time"
            return StepResult(domain.FAILED, "", reason=why, extra={"timed_out": True})
        extra = {k: done.get(k) for k in ("event", "event_id", "key", "received_at")}
        return StepResult(domain.COMPLETED, done.get("output"), extra=extra)

    def start_wait(self, step: Step, path: str, try_no: int, key: str) -> dict[str, Any]:
        """Say what the run waits for, arm `awaiting` and register the wait, in one transaction
        (an event already delivered ends it at once)."""
        with self.conn.transaction():
            deadline = None
            if step.timeout_s:
                now = self.db_now()
                deadline = datetime.fromtimestamp(
                    now.timestamp() + step.timeout_s, now.tzinfo
                ).isoformat()
            try:
                corr = None
                if step.key is not None:
                    corr = render(step.key, self.payload, self.outputs, self.scope())
            except RenderError as err:
                self.note(f"Step {step.id} failed before it started: {err}", key, f"render:{key}")
                return {"ok": False, "error": str(err)}
            text = f"Waiting for event {' or '.join(step.events)}"
            text += f" with key {corr}" if corr is not None else ""
            text += f", until {deadline}." if deadline else "."
            data = {
                "step": path,
                "kind": step.kind,
                "try": try_no,
                "events": list(step.events),
                "key": corr,
                "deadline": deadline,
            }
            seq = self.note(text, key, f"wait:{key}", data=data)
            if seq is not None:
                self.set_state(
                    RunState.WAITING, path, try_no, await_key=key, await_kind=AwaitKind.EVENT
                )
            db.fetch_one(
                self.conn,
                "register_wait",
                dict(
                    queue=QUEUE, run_id=self.run_id, step_key=key, names=list(step.events), key=corr
                ),
            )
            db.notify(self.conn, self.run_id, "wait")
        return {"ok": True, "deadline": deadline, "key": corr}

    def send(
        self,
        step: Step,
        path: str,
        try_no: int,
        key: str,
        *,
        entry_kind: EntryKind,
        state: RunState,
        await_kind: AwaitKind,
        data: dict[str, Any],
        text: str | None = None,
    ) -> dict[str, Any]:
        """SEND: render the step, post it into the thread as System and arm `awaiting`, in one
        transaction. Idempotent per step key, so a replay after a crash posts nothing twice."""
        with db.transaction(self.conn):  # the caller's, when it is an atomic_step
            try:
                if text is not None:  # said by the conductor, not rendered from the step
                    pass
                elif step.kind == domain.RUN_COMMAND:  # values travel as environment variables
                    command = render_command(step.text, self.payload, self.outputs, self.scope())
                    text, data = command.text, {**data, "values": command.values}
                else:
                    text = render(step.text, self.payload, self.outputs, self.scope())
            except RenderError as err:
                self.note(f"Step {step.id} failed before it started: {err}", key, f"render:{key}")
                return {"ok": False, "error": str(err)}
            channel, wake = db.wake_target(self.run_id, entry_kind)
            # One call: the entry, the run armed (first SEND of this key only: a replay must not
            # re-arm awaiting) and the wake-up (migration 025).
            seq = db.fetch_row(
                self.conn,
                "send_entry",
                {
                    "run_id": self.run_id,
                    "kind": entry_kind,
                    "text": text,
                    "step_key": key,
                    "data": Jsonb(data),
                    "state": state,
                    "step": path,
                    "try": try_no,
                    "await_kind": await_kind,
                    "channel": channel,
                    "wake": wake,
                },
            )["seq"]
            if seq is not None and entry_kind == EntryKind.QUESTION:
                # The recipe's `notify` rules hear of the gate.
                notifications.enqueue(
                    self.conn, self.run_id, self.recipe, NotifyEvent.GATE, key, self.headline(text)
                )
        crash_point("after_send")
        return {"ok": True, "data": data}

    def ask(
        self,
        step: Step,
        path: str,
        try_no: int,
        key: str,
        data: dict[str, Any],
        text: str | None = None,
    ) -> dict[str, Any]:
        """SEND a gate's question (a human_gate's own, or an agent's) and wait on a person."""
        return self.send(
            step,
            path,
            try_no,
            key,
            entry_kind=EntryKind.QUESTION,
            state=RunState.WAITING,
            await_kind=AwaitKind.GATE,
            data=data,
            text=text,
        )

    def headline(self, what: str) -> str:
        """A notification's words: which workflow and run, then what happened."""
        name = self.recipe.get("name") or self.recipe.get("slug")
        return f"{name} (run {names.short_run_id(self.run_id)}): {what}"

    def refuse(self, step: Step, path: str, try_no: int) -> dict[str, Any]:
        """A step of the snapshot that no longer validates fails with the reason, SENDing
        nothing."""
        key = names.step_key(self.run_id, path, try_no)
        error = f"Step {step.id} cannot run: {step.text}"
        with self.conn.transaction():
            self.note(error, key, f"render:{key}")
        return {"ok": False, "error": error}

    def sleep_step(self, step: Step, path: str, try_no: int) -> StepResult:
        key = names.step_key(self.run_id, path, try_no)
        planned = self.ctx.step(
            names.send_checkpoint(path, try_no), lambda: self.plan_sleep(step, path, try_no, key)
        )
        if not planned["ok"]:
            return StepResult(domain.FAILED, planned["error"])
        self.ctx.sleep_until(
            names.sleep_checkpoint(path, try_no), datetime.fromisoformat(planned["wake_at"])
        )
        return StepResult(domain.COMPLETED, planned["wake_at"])

    def plan_sleep(self, step: Step, path: str, try_no: int, key: str) -> dict[str, Any]:
        """The wake time comes from the database clock, computed once and checkpointed."""
        with self.conn.transaction():
            now = self.db_now()
            try:
                if step.kind == domain.SLEEP:
                    wake = datetime.fromtimestamp(
                        now.timestamp() + parse_duration(step.text), now.tzinfo
                    )
                else:
                    wake = datetime.fromisoformat(
                        render(step.text, self.payload, self.outputs, self.scope())
                    )
                    if wake.tzinfo is None:
                        raise ValueError(f"{wake.isoformat()} has no timezone (add Z or +hh:mm)")
                    if problem := check_wake(wake, now):
                        raise ValueError(problem)
            except (RenderError, ValueError, OverflowError, OSError) as err:
                self.note(f"Step {step.id} failed: {err}", key, f"render:{key}")
                return {"ok": False, "error": str(err)}
            self.set_state(RunState.SLEEPING, path, try_no, wake_at=wake)
            self.note(
                f"Sleeping until {wake.isoformat(timespec='seconds')} (step {step.id}).",
                key,
                f"sleep:{key}",
            )
            db.notify(self.conn, self.run_id, "sleep")
        return {"ok": True, "wake_at": wake.isoformat()}

    # -- failure, cancel, finish --------------------------------------------------------------
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
            return True

        self.ctx.step(names.checkpoint(names.FAILED, path, try_no), mark_failed)
        self.ctx.await_event(names.retry_event(key), names.retry_checkpoint(path, try_no))

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
        return True

    def declared_outputs(self) -> dict[str, Any]:
        """The recipe's `outputs`, evaluated over the finished run (once: inside a checkpoint)."""
        out: dict[str, Any] = {}
        for name, expr in (self.recipe.get("outputs") or {}).items():
            try:
                out[name] = expressions.evaluate(expr, self.scope())
            except expressions.ExpressionError as err:
                out[name] = {"error": str(err)}
        return out

    # -- helpers ------------------------------------------------------------------------------
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

    def db_now(self) -> datetime:
        return db.fetch_row(self.conn, "db_now")["now"]


def _branch_output(finished: dict[str, Any]) -> Any:
    """A finished child's output: its declared outputs, else its last step's output (recorded as
    such: a JSON object's keys keep no order in the database)."""
    outputs = finished.get("outputs") or {}
    if outputs.get("declared"):
        return outputs["declared"]
    return outputs.get("last", "")


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
