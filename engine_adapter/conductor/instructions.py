"""SEND: how the run handler puts a step into the thread (an instruction for a bot, a gate's
question for a person) and arms the run to wait for it, idempotent per step key so that a replay
after a crash posts nothing twice. Parking on the step's done event is the caller's."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from engine_adapter.conductor.handler_base import HandlerBase
from engine_adapter.model import domain, names
from engine_adapter.model.vocab import AwaitKind, EntryKind, NotifyEvent, RunState
from engine_adapter.recipes.recipes import Step
from engine_adapter.recipes.render import RenderError, render, render_command
from engine_adapter.runs import notifications
from engine_adapter.store import db
from engine_adapter.store.workers import crash_point


class Sending(HandlerBase):
    # The last SEND's instruction waits behind another for its bot (migration 055): its done
    # event will not come within a hold.
    queued = False

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
            sent = db.fetch_row(
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
            )
            seq, self.queued = sent["seq"], bool(sent["queued"])
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

    def refuse(self, step: Step, path: str, try_no: int) -> dict[str, Any]:
        """A step of the snapshot that no longer validates fails with the reason, SENDing
        nothing."""
        key = names.step_key(self.run_id, path, try_no)
        error = f"Step {step.id} cannot run: {step.text}"
        with self.conn.transaction():
            self.note(error, key, f"render:{key}")
        return {"ok": False, "error": error}
