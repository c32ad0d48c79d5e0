"""The steps that wait holding no process: sleep and sleep_until (a wake time from the database
clock), human_gate (a question in the thread, then a person's decision or its timeout) and
wait_for_event (the first of its events, with its key)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from absurd_sdk import TimeoutError as AwaitTimeout
from psycopg.types.json import Jsonb

from engine_adapter.conductor.instructions import Sending
from engine_adapter.model import domain, names
from engine_adapter.model.domain import StepResult
from engine_adapter.model.recipe_values import parse_duration
from engine_adapter.model.settings import QUEUE
from engine_adapter.model.vocab import AwaitKind, RunState
from engine_adapter.recipes.recipes import Step, check_wake
from engine_adapter.recipes.render import RenderError, render
from engine_adapter.runs import gates
from engine_adapter.store import db


class Waits(Sending):
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
            decision = self.await_event(
                names.done_event(key), names.done_checkpoint(path, try_no), timeout=timeout
            )
        except AwaitTimeout:
            # Absurd writes no checkpoint on timeout: emit the same done event with a timeout
            # decision (first write wins against a late approval) and await it again.
            gates.time_out_gate(self.conn, self.run_id, key)
            decision = self.await_event(
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
            done = self.await_event(
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
            done = self.await_event(names.done_event(key), names.late_done_checkpoint(path, try_no))
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
