"""Bot steps (run_command, dispatch_task): per round, SEND the instruction and PARK on its done
event. An agent's loop that paused on a tool (ask_human, start_workflow, propose_change) goes on
in a new round once the conductor has the answer: a gate, child runs, a recorded proposal."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from functools import partial
from typing import Any

from absurd_sdk import SuspendTask

from engine_adapter.catalog import proposals
from engine_adapter.conductor import known_checkpoints
from engine_adapter.conductor.handler_base import branch_output
from engine_adapter.conductor.instructions import Sending
from engine_adapter.model import domain, names
from engine_adapter.model.domain import Instruction, StepResult
from engine_adapter.model.vocab import AwaitKind, Door, EntryKind, RunState
from engine_adapter.recipes.recipes import RecipeError, Step, load_recipe_text
from engine_adapter.recipes.render import RenderError, render
from engine_adapter.runs import child_runs
from engine_adapter.sandbox import step_limits
from engine_adapter.store import db
from engine_adapter.store.wakeups import Hold
from engine_adapter.store.workers import crash_point


class BotSteps(Sending):
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
                    partial(self.propose_change, step, path, request),
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
        instruction = self.instruction_for(step, path, try_no, answers)
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

        done_event = names.done_event(key)
        done_name = names.checkpoint(names.DONE, path, try_no, part)

        def park_unless_held(sent: dict[str, Any]) -> bool:
            """A run no executor holds parks in its SEND's transaction; so does a held one whose
            instruction waits behind others (its done event will not come within the hold)."""
            nonlocal held
            if not sent["ok"]:
                return False
            if held is not None and self.queued and self.holds is not None:
                self.holds.release(self.run_id)
                held = None
            if held is not None:
                return False
            return known_checkpoints.park(self.ctx, done_event, done_name)

        try:
            sent, parked = self.atomic_step_then(
                names.checkpoint(names.SEND, path, try_no, part),
                send_instruction,
                park_unless_held,
            )
            crash_point("after_send_checkpoint")
            if parked:
                raise SuspendTask()
            if held is not None and sent["ok"]:
                # A done event that comes within the hold is awaited without parking the run.
                held.wait()
        finally:
            if held is not None and self.holds is not None:
                self.holds.release(self.run_id)
        if not sent["ok"]:
            return StepResult(domain.FAILED, sent["error"]).to_dict()
        return self.await_event(done_event, done_name)

    def instruction_for(
        self, step: Step, path: str, try_no: int, answers: dict[str, str]
    ) -> Instruction:
        """What the bot needs besides the text: the step's and the recipe's settings."""
        return Instruction(
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
        decision = self.await_event(
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
                partial(
                    child_runs.spawn_workflow,
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
            won = self.await_event(
                first, names.checkpoint(names.WINNER, path, try_no, f"s{round_no}")
            )
            self.ctx.step(
                names.checkpoint(names.WINNER, path, try_no, f"s{round_no}.losers"),
                lambda: child_runs.cancel_losers(self.conn, self.run_id, step.id, won, started),
            )
            for branch in started:
                results[branch]["status"] = domain.CANCELLED
            results[won["branch"]].update(status=won["status"], output=branch_output(won))
        else:
            for branch, child in started.items():
                done = self.await_event(
                    names.run_done_event(child),
                    names.checkpoint(names.DONE, path, try_no, branch),
                )
                declared = (done.get("outputs") or {}).get("declared") or {}
                results[branch].update(
                    status=done["status"], output=declared or branch_output(done)
                )
        return json.dumps(list(results.values()), ensure_ascii=False, default=str)
