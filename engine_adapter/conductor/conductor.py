"""The conductor: runs the one generic workflow handler (run_handler.py) on Absurd. It never
runs tools.

Per step and try it SENDs an instruction into the run thread and PARKs on the step's done
event, holding no process. Its main thread waits for notifications (the host's shared listener,
host_listener.py) with a timeout of min(next wake-up, 1 s) and
runs the timers (reconcile, recover runs held by dead conductors, admission, schedules); woken runs
are handled by executor threads, each on a connection of its own, so a step of one run never
waits behind the SEND of another (a run's own steps stay in order: the engine holds a claimed run
for one executor).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from functools import partial
from typing import Any

import psycopg
from absurd_sdk import Absurd, CancelledTask, TaskContext
from psycopg.types.json import Jsonb

from engine_adapter.conductor import known_checkpoints
from engine_adapter.conductor.notifier import Notifier
from engine_adapter.conductor.run_handler import RunHandler
from engine_adapter.model.domain import HandlerParams, decision_result
from engine_adapter.model.errors import Invalid
from engine_adapter.model.recipe_values import parse_duration
from engine_adapter.model.settings import HANDLER_NAME, QUEUE
from engine_adapter.runs import child_runs, retention, run_state, schedules
from engine_adapter.store import db, host_listener, traces
from engine_adapter.store.wakeups import Hold, Holds, Wake, look_at_wake, route_wake
from engine_adapter.store.workers import StopRequest, Worker

log = logging.getLogger("threadline.conductor")

# The engine lease on a run matters only while the conductor SENDs (milliseconds): parked runs
# hold no lease. 30 s is generous for a SEND on a loaded machine yet short for a last-resort
# expiry; recovery normally comes sooner, from the liveness lock (see recover_dead_conductors).
CLAIM_TIMEOUT_S = 30
SWEEP_EVERY_S = 1.0
# Admission happens on spawn, on finish and when a limit is raised; this sweep is only a backstop.
READMIT_EVERY_S = 10.0
SCHEDULE_EVERY_S = 1.0  # cron slots are minutes: a slot fires within about a second of its time
# Runs an executor claims at once: one more than it needs, so a short claim tells it that no
# run is left (the SDK's work_batch says nothing of what it found).
CLAIM_BATCH = 2
THREADS_ENV = "THREADLINE_CONDUCTOR_THREADS"
DEFAULT_THREADS = 4
# How long an executor holds a run after its SEND for the step's done event (wakeups.Holds):
# longer than a short command's whole turn through a bot, short beside a step's usual length.
# 0 turns holds off: every step parks its run.
HOLD_ENV = "THREADLINE_CONDUCTOR_HOLD_MS"
DEFAULT_HOLD_MS = 100


class CountingEngine(Absurd):
    """The engine client, noting how many runs its last claim took (work_batch handles them one
    after another and says nothing of how many it found). Its claim loads each run's checkpoints
    in the same statement (known_checkpoints.py)."""

    claimed = 0

    def claim_tasks(
        self, batch_size: int = 1, claim_timeout: int = 120, worker_id: str = "worker"
    ) -> Any:
        tasks = known_checkpoints.claim_with_checkpoints(
            self._conn, self._queue_name, worker_id, claim_timeout, batch_size
        )
        self.claimed = len(tasks)
        return tasks


class Executor:
    """One thread handling woken runs through the SDK's public work_batch, on a connection and an
    engine client of its own (a psycopg connection serialises its callers, and every run's
    transactions must be its own)."""

    def __init__(self, url: str | None, worker_id: str, wake: Wake, holds: Holds) -> None:
        self.worker_id = worker_id
        self.wake, self.holds = wake, holds
        self.conn = db.connect(url, role="conductor")
        self.engine = CountingEngine(self.conn, queue_name=QUEUE)
        self.engine.register_task(HANDLER_NAME)(self.handle_run)
        self.handled = 0
        self.in_batch = 0  # runs of the last claim handled so far, the one in hand included

    def handle_run(self, params: HandlerParams, ctx: TaskContext) -> dict[str, Any]:
        self.handled += 1
        self.in_batch += 1
        ctx = known_checkpoints.adopt(ctx)  # no look-up of a checkpoint the claim did not load
        try:
            return RunHandler(self.conn, ctx, params, holds=self, traced=traces.enabled()).run()
        except child_runs.ParentEnded:
            raise CancelledTask() from None  # cancelled as it started a child: stop, as SDK does

    def work_once(self) -> bool:
        """Claim up to CLAIM_BATCH runs and handle them; True when the claim was full, so more
        may be waiting. A claim that comes back short says there is nothing more to claim now:
        what becomes claimable later brings a wake-up of its own, so the executor need not run
        another claim only to find nothing."""
        before = self.handled
        self.engine.claimed = self.in_batch = 0
        self.engine.work_batch(
            worker_id=self.worker_id, claim_timeout=CLAIM_TIMEOUT_S, batch_size=CLAIM_BATCH
        )
        return self.handled - before >= CLAIM_BATCH

    def hold(self, run_id: str) -> Hold | None:
        """Hold the run in hand for its done event (wakeups.Holds) when nothing else wants this
        executor: no other claimed run waits behind it and another executor is idle, so new
        work is taken at once (and if it comes with none idle, every hold is cut)."""
        if self.engine.claimed > self.in_batch or self.wake.idle() < 1:
            return None
        return self.holds.hold(run_id)

    def release(self, run_id: str) -> None:
        self.holds.release(run_id)


def thread_count() -> int:
    raw = os.environ.get(THREADS_ENV, str(DEFAULT_THREADS))
    if not raw.isdigit() or int(raw) < 1:
        raise Invalid(f"{THREADS_ENV}={raw!r} must be a whole number of at least 1")
    return int(raw)


def hold_seconds() -> float:
    raw = os.environ.get(HOLD_ENV, str(DEFAULT_HOLD_MS))
    if not raw.isdigit() or int(raw) > 60_000:
        raise Invalid(f"{HOLD_ENV}={raw!r} must be a whole number of milliseconds, 0 to 60000")
    return int(raw) / 1000


class Conductor:
    def __init__(self, url: str | None = None, threads: int | None = None) -> None:
        self.url = url
        self.threads = threads or thread_count()
        self.holds = Holds(hold_seconds())  # settings first: a bad one opens nothing
        self.worker = Worker("conductor", url)
        self.conn = db.connect(url, role="conductor")  # the timers'
        self.wake = Wake(self.threads)
        self.executors: list[Executor] = []
        self._executor_threads: list[threading.Thread] = []
        self._failure: BaseException | None = None
        # Notifications come through the host's one listening connection (host_listener.py).
        self.listener = host_listener.join(
            url, "conductor", db.NOTIFY_CHANNEL, looker=partial(look_at_wake, holds=self.holds)
        )
        # The notification outbox goes out from a thread of its own: a slow receiver never
        # holds up a run.
        self.notifier = Notifier(db.connect(url, role="conductor"))
        self._stopping = False
        self._last_sweep = 0.0
        self._last_readmit = 0.0
        self._last_schedule_tick = 0.0
        # The first tick cleans up (and forgets processes dead for a day, keeping the list the
        # console and `health` show short): a restart never postpones it.
        self._last_cleanup = 0.0
        self._next_look = 0.0  # when wait_for_wake reads the clock of the next due run again

    # -- loop ---------------------------------------------------------------------------------
    def run_forever(self) -> None:
        log.info("conductor %s started with %d executor threads", self.worker.id, self.threads)
        self.recover_dead_conductors()
        self.notifier.start()
        self.start_executors()
        try:
            while not self._stopping:
                self.tick()
        finally:
            self.close()
        if self._failure is not None:
            raise self._failure

    def start_executors(self) -> None:
        for i in range(self.threads):
            executor = Executor(self.url, self.worker.id, self.wake, self.holds)
            thread = threading.Thread(
                target=self.execute_forever, args=(executor,), name=f"executor-{i}", daemon=True
            )
            self.executors.append(executor)
            self._executor_threads.append(thread)
            thread.start()

    def execute_forever(self, executor: Executor) -> None:
        """Handle runs while there are any, else wait for a wake-up. A failure outside a run
        (the database gone) stops the conductor, as it would a single-threaded one."""
        try:
            while not self._stopping:
                while not self._stopping and executor.work_once():
                    pass
                self.wake.wait(timeout=5.0)
        except BaseException as err:
            if not self._stopping:
                log.exception("executor failed; the conductor stops")
                self._failure = err
                self.stop()

    def tick(self) -> None:
        """One turn: timers, a wake-up for the executors, then wait for a notification."""
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
        if not self._last_cleanup or now - self._last_cleanup >= retention.EVERY_S:
            self._last_cleanup = now
            self.clean_up()
        self.wait_for_wake()

    def wait_for_wake(self) -> None:
        """Wait for a notification (each wakes one executor) or the next run due by the clock.
        The clock is read again only when the last look's deadline has passed (at least once a
        second), not after every notification: a run a notification made claimable is no
        reason to look, and a look that finds it due before its executor claims it would wake a
        second executor for nothing."""
        now = time.monotonic()
        if now >= self._next_look:
            row = db.fetch_one(self.conn, "next_wake")
            seconds = row["seconds"] if row and row["seconds"] is not None else 1.0
            if row and row["due"]:
                # Runs due by the clock (a sleep, a timeout, a missed notification): as many
                # executors as there are runs; each claims until nothing is left.
                self.wake.signal(row["due"])
            self._next_look = now + min(max(seconds, 0.05), 1.0)
        timeout = max(self._next_look - time.monotonic(), 0.0)
        for payload in self.listener.notes(timeout=timeout, stop_after=1):
            route_wake(payload, self.wake, self.holds)

    def stop(self) -> None:
        self._stopping = True
        self.holds.cut_all()
        self.wake.release_all()

    def close(self) -> None:
        self.stop()
        for thread in self._executor_threads:
            thread.join(timeout=CLAIM_TIMEOUT_S)  # a run in hand finishes its SEND
        self.notifier.stop.set()
        if self.notifier.thread.is_alive():
            self.notifier.thread.join(timeout=15)  # a send in flight finishes (its own timeout)
        for closer in (
            self.listener.close,
            self.conn.close,
            *(executor.conn.close for executor in self.executors),
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
                admitted += db.fetch_row(
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

    def clean_up(self) -> None:
        """Retention (retention.py): logged, never raised into the loop."""
        try:
            report = retention.cleanup(self.conn, self.worker.id)
            if report is not None and any(
                (report.runs, report.outputs, report.workers, report.ticks)
            ):
                log.info(report.line())
        except Exception:
            log.exception("cleanup failed")

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


def main(url: str | None = None, threads: int | None = None) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s conductor %(levelname)s %(message)s"
    )
    if threads is not None and threads < 1:
        raise Invalid(f"--threads {threads} must be at least 1")
    traces.start("threadline-conductor")
    try:
        stop = StopRequest()  # a stop while it starts is a clean stop too
        conductor = Conductor(url, threads)
        stop.then(conductor.stop)
        conductor.run_forever()
    finally:
        traces.shutdown()
