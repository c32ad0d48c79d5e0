"""The one generic workflow handler: deterministic replay of one run over its recipe snapshot.

Every side effect sits behind a named checkpoint (`names.py`), so a replay after a crash takes the
same path: a condition is evaluated once and its value checkpointed; a foreach's list once; a
child run is spawned once per branch, step and try. Per leaf step and try the handler SENDs an
instruction (or a gate question) into the thread and PARKs on the step's done event, holding no
process. Parallel branches, parallel foreach items and sub-workflows run as child runs; the
parent parks on their run.done events (migration 009).

`RunHandler` walks the steps and hands each try to its kind's part: bot_steps (run_command,
dispatch_task), waits (sleep, human_gate, wait_for_event), control_flow (if, repeat, foreach,
parallel, workflow), lifecycle (failure, cancel, finish); instructions is the SEND they share and
handler_base the run's state. The checkpoint names and their order are the durable contract: a run
parked by an earlier handler resumes on this one only if they stay as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from absurd_sdk import SuspendTask

from engine_adapter.conductor import known_checkpoints
from engine_adapter.conductor.bot_steps import BotSteps
from engine_adapter.conductor.control_flow import ControlFlow
from engine_adapter.conductor.handler_base import INVALID, EndRun
from engine_adapter.conductor.lifecycle import Lifecycle
from engine_adapter.conductor.waits import Waits
from engine_adapter.model import domain, names
from engine_adapter.model.domain import StepResult
from engine_adapter.recipes.recipes import Step
from engine_adapter.runs import child_runs
from engine_adapter.runs.spawn import admit_event

_BLOCKS = (*domain.BLOCK_KINDS, domain.WORKFLOW)


class RunHandler(ControlFlow, BotSteps, Waits, Lifecycle):
    """One run's handler: `RunHandler(conn, ctx, params, holds).run()`."""

    # -- the walk ------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        if self.admit:
            # Queued behind max_concurrent_runs: park until admitted (at once if spawn admitted it).
            self.await_event(admit_event(self.run_id), "admitted")
        ended: EndRun | None = None
        try:
            self.run_list(self.steps, "")
        except EndRun as end:
            ended = end
        # The closing writes commit with their checkpoint and Absurd's completion of the run: one
        # commit instead of three. Completed so, the handler stops as a parked one does (the SDK
        # would complete the run again); a run whose finish committed before without its
        # completion is completed by the SDK from the returned result.
        result = {"outputs": self.outputs}
        _, completed = self.atomic_step_then(
            "finish",
            lambda: self.finish(ended),
            lambda _: known_checkpoints.complete(self.ctx, result),
        )
        if completed:
            raise SuspendTask()
        return result

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
            began = self.trace_began(path, try_no)
            self.trace_within.append((path, try_no))
            try:
                result = self.try_once(step, path, scope, try_no)
            finally:
                self.trace_within.pop()
            self.trace_tried(step, path, try_no, began, result)
            if step.kind in _BLOCKS and result.status != domain.SKIPPED:
                # A block's result lives in memory only: write it down for the read model.
                done = result.to_dict()
                self.ctx.step(names.done_checkpoint(path, try_no), partial(dict, done))
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
