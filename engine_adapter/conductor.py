"""The conductor: runs the one generic workflow handler (run_handler.py) on Absurd. It never
runs tools.

Per step and try it SENDs an instruction into the run thread and PARKs on the step's done
event, holding no process. Its loop LISTENs with a timeout of min(next wake-up, 1 s), then
claims work; timers heartbeat, reconcile, recover runs held by dead conductors and tick schedules.
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

import psycopg
from absurd_sdk import Absurd
from psycopg.types.json import Jsonb

from . import child_runs, db, run_state, schedules
from .domain import decision_result
from .notifier import Notifier
from .recipe_values import parse_duration
from .run_handler import RunHandler
from .settings import HANDLER_NAME, QUEUE
from .workers import Worker

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
        # The notification outbox goes out from a thread of its own: a slow receiver never
        # holds up a run.
        self.notifier = Notifier(db.connect(url, role="conductor"))
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
        self.notifier.start()
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
            self.end_timed_out_runs()
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
        self.notifier.stop.set()
        if self.notifier.thread.is_alive():
            self.notifier.thread.join(timeout=15)  # a send in flight finishes (its own timeout)
        for closer in (
            self.listen_conn.close,
            self.conn.close,
            self.notifier.conn.close,
            self.worker.close,
        ):
            try:
                closer()
            except Exception:  # closing on the way out; nothing left to protect
                pass

    # -- timers -------------------------------------------------------------------------------
    def reconcile(self) -> int:
        """The finish backstop: emit done events for terminals already in a thread."""
        emitted = 0
        for row in db.fetch_all(self.conn, "unreconciled_terminals"):
            payload = row["payload"]
            if payload is None:  # a decided gate
                payload = decision_result(
                    row["decision"], row["actor"], row["reason"], row["decided_at"]
                )
            with self.conn.transaction():
                run_state.emit_step_done(self.conn, str(row["run_id"]), row["await_key"], payload)
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

    def end_timed_out_runs(self) -> int:
        """Runs older than their recipe's `timeout` are cancelled, with their child runs."""
        ended = 0
        try:
            for row in db.fetch_all(self.conn, "runs_with_timeout"):
                limit = parse_duration(row["timeout"])
                if row["age_s"] < limit:
                    continue
                with self.conn.transaction():
                    why = f"its policy: the run's timeout ({row['timeout']}) passed"
                    ended += child_runs.cancel_run_tree(self.conn, str(row["run_id"]), why)
        except Exception:  # nothing may escape the conductor's loop
            log.exception("run timeout sweep failed")
        return ended

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


def main(url: str | None = None) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s conductor %(levelname)s %(message)s"
    )
    Conductor(url).run_forever()
