"""The conductor: runs the one generic workflow handler on Absurd. It never runs tools.

Per step and try it SENDs an instruction into the run thread and PARKs on the step's done
event, holding no process. Its loop LISTENs with a timeout of min(next wake-up, 1 s), then
claims work; timers heartbeat, reconcile, recover runs held by dead conductors and tick schedules.
"""

from __future__ import annotations

import logging
import math
import signal
import time
from datetime import datetime
from typing import Any

import psycopg
from absurd_sdk import Absurd, CancelledTask
from absurd_sdk import TimeoutError as AwaitTimeout
from psycopg.types.json import Jsonb

from . import db, names, schedules, threads
from .recipes import RecipeError, Step, check_wake, parse_duration
from .render import RenderError, render, render_command
from .settings import HANDLER_NAME, QUEUE
from .spawn import admit_event
from .workers import Worker, crash_point

log = logging.getLogger("threadline.conductor")

# The engine lease on a run matters only while the conductor SENDs (milliseconds): parked runs
# hold no lease. 30 s is generous for a SEND on a loaded machine yet short for a last-resort
# expiry; recovery normally comes sooner, from the liveness lock (see recover_dead_conductors).
CLAIM_TIMEOUT_S = 30
SWEEP_EVERY_S = 1.0
# Admission happens on spawn, on finish and when a limit is raised; this sweep is only a backstop.
READMIT_EVERY_S = 10.0
SCHEDULE_EVERY_S = 1.0  # cron slots are minutes: a slot fires within about a second of its time
BATCH = 10


class Conductor:
    def __init__(self, url: str | None = None) -> None:
        self.url = url
        self.worker = Worker("conductor", url)
        self.conn = db.connect(url, role="conductor")
        self.engine = Absurd(self.conn, queue_name=QUEUE)
        self.engine.register_task(HANDLER_NAME)(self.handle_run)
        self.listen_conn = db.connect(url, role="conductor")
        self.listen_conn.execute(f"listen {db.NOTIFY_CHANNEL}")
        self._stopping = False
        self._last_sweep = 0.0
        self._last_readmit = 0.0
        self._last_schedule_tick = 0.0

    # -- loop ---------------------------------------------------------------------------------
    def run_forever(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        signal.signal(signal.SIGINT, lambda *_: self.stop())
        log.info("conductor %s started", self.worker.id)
        self.recover_dead_conductors()
        self.prune_dead_workers()
        try:
            while not self._stopping:
                self.tick()
        finally:
            self.close()

    def tick(self) -> None:
        """One turn: timers, claim and run what is due, then wait for a notification."""
        now = time.monotonic()
        if now - self._last_sweep >= SWEEP_EVERY_S:
            self._last_sweep = now
            self.reconcile()
            self.recover_dead_conductors()
        if now - self._last_readmit >= READMIT_EVERY_S:
            self._last_readmit = now
            self.readmit()
        if now - self._last_schedule_tick >= SCHEDULE_EVERY_S:
            self._last_schedule_tick = now
            self.tick_schedules()
        while self.work_once():
            pass
        self.wait_for_wake()

    def work_once(self) -> bool:
        tasks = self.engine.claim_tasks(
            batch_size=BATCH, claim_timeout=CLAIM_TIMEOUT_S, worker_id=self.worker.id
        )
        for task in tasks:
            # The SDK's executor: replays checkpoints, completes, suspends or fails the run.
            self.engine._execute_task(task, CLAIM_TIMEOUT_S)
        return len(tasks) == BATCH

    def wait_for_wake(self) -> None:
        row = db.fetch_one(self.conn, "next_wake")
        seconds = row["seconds"] if row and row["seconds"] is not None else 1.0
        timeout = min(max(seconds, 0.0), 1.0)
        if timeout <= 0:
            return
        for _ in self.listen_conn.notifies(timeout=timeout, stop_after=1):
            pass

    def stop(self) -> None:
        self._stopping = True

    def close(self) -> None:
        for closer in (self.listen_conn.close, self.conn.close, self.worker.close):
            try:
                closer()
            except Exception:  # closing on the way out; nothing left to protect
                pass

    # -- timers -------------------------------------------------------------------------------
    def reconcile(self) -> int:
        """The finish backstop: emit done events for terminals already in a thread."""
        emitted = 0
        for row in db.fetch_all(self.conn, "unreconciled_terminals"):
            with self.conn.transaction():
                threads.emit_step_done(
                    self.conn, str(row["run_id"]), row["await_key"], row["payload"]
                )
            emitted += 1
        return emitted

    def readmit(self) -> int:
        """Admission backstop: queued runs of workflows with room (a place freed by a path that
        skipped the finish trigger) are admitted here. A failure is logged, never raised into
        the loop; one workflow's failure does not stop the others."""
        admitted = 0
        try:
            rows = db.fetch_all(self.conn, "workflows_with_queued_runs")
        except Exception:
            log.exception("admission sweep failed")
            return 0
        for workflow in (row["workflow"] for row in rows):
            try:
                admitted += db.fetch_one(
                    self.conn, "admit_queued", dict(queue=QUEUE, workflow=workflow)
                )["admitted"]
            except Exception:
                log.exception("admission sweep failed for workflow %s", workflow)
        return admitted

    def tick_schedules(self) -> None:
        """Fire due cron slots on the database clock; a failure is logged and retried next tick."""
        try:
            for fired in schedules.tick(self.conn, caller=self.worker.id):
                log.info(
                    "schedule %s slot %s: %s",
                    fired.workflow,
                    fired.slot.isoformat(),
                    f"run {fired.run_id}" if fired.run_id else "skipped",
                )
        except Exception:  # nothing may escape the conductor's loop
            log.exception("schedule tick failed")

    def prune_dead_workers(self) -> None:
        """Each restart registers a new process: forget those dead for a day (at start-up, so the
        list the console and `health` show stays short)."""
        self.conn.execute(db.q("prune_dead_workers"))

    def recover_dead_conductors(self) -> int:
        """Runs claimed by a conductor that died mid-SEND go back to the queue at once."""
        recovered = 0
        for row in db.fetch_all(self.conn, "runs_held_by_dead_conductors"):
            reason = {"name": "$ConductorDied", "message": f"conductor {row['claimed_by']} died"}
            try:
                db.fetch_one(
                    self.conn,
                    "fail_engine_run",
                    dict(queue=QUEUE, run_id=row["run_id"], reason=Jsonb(reason)),
                )
                recovered += 1
            except psycopg.Error as err:  # raced with another conductor's recovery
                log.info("recovery of %s skipped: %s", row["run_id"], err)
        return recovered

    # -- the one handler ----------------------------------------------------------------------
    def handle_run(self, params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return RunHandler(self.conn, ctx, params).run()


class RunHandler:
    """Deterministic replay of one run: every side effect sits behind a named checkpoint."""

    def __init__(self, conn: psycopg.Connection[Any], ctx: Any, params: dict[str, Any]) -> None:
        self.conn = conn
        self.ctx = ctx
        self.run_id = str(ctx.task_id)
        self.payload = params["payload"]
        self.steps = [snapshot_step(s) for s in params["recipe"]["steps"]]
        self.recipe = params["recipe"]
        self.outputs: dict[str, Any] = {}
        self.admit = bool(params.get("admit"))

    def run(self) -> dict[str, Any]:
        if self.admit:
            # Queued behind max_concurrent_runs: park until admitted (at once if spawn admitted it).
            self.ctx.await_event(admit_event(self.run_id), "admitted")
        for step in self.steps:
            try_no = 1
            while True:
                result = self.run_step(step, try_no)
                status = result["status"]
                if status == "completed" or (status == "failed" and step.on_failure == "continue"):
                    self.outputs[step.id] = result.get("output", "")
                    break
                if status == "cancelled":
                    self.end_cancelled(step, try_no, result)
                self.park_failed(step, try_no, result)
                try_no += 1
        self.ctx.step("finish", self.finish)
        return {"outputs": self.outputs}

    def run_step(self, step: Step, try_no: int) -> dict[str, Any]:
        if step.kind == INVALID:
            sent = self.ctx.step(
                names.send_checkpoint(step.id, try_no), lambda: self.refuse(step, try_no)
            )
            return {"status": "failed", "output": sent["error"]}
        if step.kind in ("run_command", "dispatch_task"):
            return self.bot_step(step, try_no)
        if step.kind in ("sleep", "sleep_until"):
            return self.sleep_step(step, try_no)
        return self.gate_step(step, try_no)

    # -- SEND and PARK ------------------------------------------------------------------------
    def bot_step(self, step: Step, try_no: int) -> dict[str, Any]:
        key = names.step_key(self.run_id, step.id, try_no)
        data = {
            "timeout_s": step.timeout_s,
            "retries": step.retries,
            "workdir": self.recipe.get("workdir"),
            "env": self.recipe.get("env", []),
            "network": self.recipe.get("network", True),
        }
        sent = self.ctx.step(
            names.send_checkpoint(step.id, try_no),
            lambda: self.send(
                step,
                try_no,
                key,
                entry_kind="instruction",
                state="running",
                await_kind="bot",
                data=data,
            ),
        )
        crash_point("after_send_checkpoint")
        if not sent["ok"]:
            return {"status": "failed", "output": sent["error"]}
        return self.ctx.await_event(names.done_event(key), names.done_checkpoint(step.id, try_no))

    def gate_step(self, step: Step, try_no: int) -> dict[str, Any]:
        key = names.step_key(self.run_id, step.id, try_no)

        def open_gate() -> dict[str, Any]:
            deadline = None
            if step.timeout_s:
                now = self.db_now()
                try:
                    deadline = datetime.fromtimestamp(
                        now.timestamp() + step.timeout_s, now.tzinfo
                    ).isoformat()
                except (OverflowError, ValueError, OSError) as err:  # bounded by validation
                    return {"ok": False, "error": f"gate {step.id}: timeout out of range ({err})"}
            data = {
                "accept": step.accept,
                "approvers": list(step.approvers),
                "from": step.from_,
                "deadline": deadline,
            }
            return self.send(
                step,
                try_no,
                key,
                entry_kind="question",
                state="waiting",
                await_kind="gate",
                data=data,
            )

        sent = self.ctx.step(names.send_checkpoint(step.id, try_no), open_gate)
        if not sent["ok"]:
            return {"status": "failed", "output": sent["error"]}
        timeout = None
        if sent["data"]["deadline"]:  # from the checkpoint: a replay keeps the original deadline
            remaining = (
                datetime.fromisoformat(sent["data"]["deadline"]) - self.db_now()
            ).total_seconds()
            timeout = max(0, math.ceil(remaining))
        try:
            decision = self.ctx.await_event(
                names.done_event(key), names.done_checkpoint(step.id, try_no), timeout=timeout
            )
        except AwaitTimeout:
            # Absurd writes no checkpoint on timeout: emit the same done event with a timeout
            # decision (first write wins against a late approval) and await it again.
            threads.time_out_gate(self.conn, self.run_id, key)
            decision = self.ctx.await_event(
                names.done_event(key), names.late_done_checkpoint(step.id, try_no)
            )
        return self.gate_result(step, decision)

    def send(
        self,
        step: Step,
        try_no: int,
        key: str,
        *,
        entry_kind: str,
        state: str,
        await_kind: str,
        data: dict[str, Any],
    ) -> dict[str, Any]:
        """SEND: render the step, post it into the thread as System and arm `awaiting`, in one
        transaction. Idempotent per step key, so a replay after a crash posts nothing twice."""
        with self.conn.transaction():
            try:
                if step.kind == "run_command":  # values travel as environment variables
                    command = render_command(step.text, self.payload, self.outputs)
                    text, data = command.text, {**data, "values": command.values}
                else:
                    text = render(step.text, self.payload, self.outputs)
            except RenderError as err:
                self.note(f"Step {step.id} failed before it started: {err}", key, f"render:{key}")
                return {"ok": False, "error": str(err)}
            data = {"step": step.id, "kind": step.kind, "try": try_no, **data}
            seq = threads.append(
                self.conn,
                self.run_id,
                "system",
                "threadline",
                entry_kind,
                text,
                step_key=key,
                dedupe_key=f"{entry_kind}:{key}",
                data=data,
            )
            if seq is not None:  # first SEND of this key; a replay must not re-arm awaiting
                self.set_state(state, step.id, try_no, await_key=key, await_kind=await_kind)
            db.notify(self.conn, self.run_id, entry_kind)
        crash_point("after_send_commit")
        return {"ok": True, "data": data}

    def refuse(self, step: Step, try_no: int) -> dict[str, Any]:
        """A step of the snapshot that no longer validates fails with the reason, SENDing
        nothing."""
        key = names.step_key(self.run_id, step.id, try_no)
        error = f"Step {step.id} cannot run: {step.text}"
        with self.conn.transaction():
            self.note(error, key, f"render:{key}")
        return {"ok": False, "error": error}

    def gate_result(self, step: Step, decision: dict[str, Any]) -> dict[str, Any]:
        text = decision.get("text") or ""
        if decision["decision"] == "timeout":
            outcome, why = step.on_timeout or "deny", "timed out"
        else:
            outcome, why = (
                decision["decision"],
                f"denied by {decision.get('actor')}" + (f": {text}" if text else ""),
            )
        if outcome in ("approve", "reply"):
            return {"status": "completed", "output": text, "decision": decision}
        return {"status": "cancelled", "output": text or why, "decision": decision, "reason": why}

    def sleep_step(self, step: Step, try_no: int) -> dict[str, Any]:
        key = names.step_key(self.run_id, step.id, try_no)
        planned = self.ctx.step(
            names.send_checkpoint(step.id, try_no), lambda: self.plan_sleep(step, try_no, key)
        )
        if not planned["ok"]:
            return {"status": "failed", "output": planned["error"]}
        self.ctx.sleep_until(
            names.sleep_checkpoint(step.id, try_no), datetime.fromisoformat(planned["wake_at"])
        )
        return {"status": "completed", "output": planned["wake_at"]}

    def plan_sleep(self, step: Step, try_no: int, key: str) -> dict[str, Any]:
        """The wake time comes from the database clock, computed once and checkpointed."""
        with self.conn.transaction():
            now = self.db_now()
            try:
                if step.kind == "sleep":
                    wake = datetime.fromtimestamp(
                        now.timestamp() + parse_duration(step.text), now.tzinfo
                    )
                else:
                    wake = datetime.fromisoformat(render(step.text, self.payload, self.outputs))
                    if wake.tzinfo is None:
                        raise ValueError(f"{wake.isoformat()} has no timezone (add Z or +hh:mm)")
                    if problem := check_wake(wake, now):
                        raise ValueError(problem)
            except (RenderError, ValueError, OverflowError, OSError) as err:
                self.note(f"Step {step.id} failed: {err}", key, f"render:{key}")
                return {"ok": False, "error": str(err)}
            self.set_state("sleeping", step.id, try_no, wake_at=wake)
            self.note(
                f"Sleeping until {wake.isoformat(timespec='seconds')} (step {step.id}).",
                key,
                f"sleep:{key}",
            )
            db.notify(self.conn, self.run_id, "sleep")
        return {"ok": True, "wake_at": wake.isoformat()}

    # -- failure, cancel, finish --------------------------------------------------------------
    def park_failed(self, step: Step, try_no: int, result: dict[str, Any]) -> None:
        """A failed run parks on a retry event; it never raises into Absurd."""
        key = names.step_key(self.run_id, step.id, try_no)

        def mark_failed() -> bool:
            with self.conn.transaction():
                self.set_state("failed", step.id, try_no)
                tail = str(result.get("output", ""))[-500:]
                self.note(
                    f"Step {step.id} failed (try {try_no}).\n{tail}\n"
                    f"Run `threadline retry {self.run_id}` to resume at this step.",
                    key,
                    f"failed:{key}",
                )
                db.notify(self.conn, self.run_id, "failed")
            return True

        self.ctx.step(f"failed:{step.id}:{try_no}", mark_failed)
        self.ctx.await_event(names.retry_event(key), names.retry_checkpoint(step.id, try_no))

    def end_cancelled(self, step: Step, try_no: int, result: dict[str, Any]) -> None:
        key = names.step_key(self.run_id, step.id, try_no)
        with self.conn.transaction():
            self.set_state("cancelled", step.id, try_no)
            self.note(
                f"Run cancelled: gate {step.id} {result.get('reason', 'denied')}.",
                key,
                f"cancelled:{key}",
            )
            db.fetch_one(self.conn, "cancel_engine_task", dict(queue=QUEUE, run_id=self.run_id))
            db.notify(self.conn, self.run_id, "cancelled")
        raise CancelledTask()

    def finish(self) -> bool:
        with self.conn.transaction():
            self.set_state("completed", None, None)
            self.note("Run completed.", None, "completed")
            db.notify(self.conn, self.run_id, "completed")
        return True

    # -- helpers ------------------------------------------------------------------------------
    def set_state(
        self,
        state: str,
        step: str | None,
        try_no: int | None,
        *,
        await_key: str | None = None,
        await_kind: str | None = None,
        wake_at: datetime | None = None,
    ) -> None:
        threads.set_run_state(
            self.conn,
            self.run_id,
            state,
            step,
            try_no,
            await_key=await_key,
            await_kind=await_kind,
            wake_at=wake_at,
        )

    def note(self, text: str, key: str | None, dedupe: str) -> None:
        threads.append(
            self.conn,
            self.run_id,
            "system",
            "threadline",
            "note",
            text,
            step_key=key,
            dedupe_key=dedupe,
        )

    def db_now(self) -> datetime:
        return db.fetch_one(self.conn, "db_now")["now"]


INVALID = "invalid"  # a snapshot's step that no longer validates: it fails when reached


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


def main(url: str | None = None) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s conductor %(levelname)s %(message)s"
    )
    Conductor(url).run_forever()
