"""Bot processes: claim System instructions, run them, write the reply and the terminal signal.

A claim is a committed row with a lease and an attempt number (the fencing token): the terminal
is written, and the done event emitted, only if that attempt is still the current one.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from enum import Enum
from typing import Any, Final

import psycopg
from psycopg.types.json import Jsonb

from engine_adapter.bots import agent_loop, agent_tools
from engine_adapter.bots.agent_journal import ThreadJournal
from engine_adapter.catalog.bot_backends import AGENT_ENV, agent_command, command_env_name
from engine_adapter.catalog.bot_config import BotConfig
from engine_adapter.model import names
from engine_adapter.model.domain import COMPLETED, LOST, PAUSED, Claim, Instruction, bot_result
from engine_adapter.model.settings import QUEUE
from engine_adapter.model.vocab import AttemptOutcome, AuthorKind, EntryKind, StepKind
from engine_adapter.read import step_report
from engine_adapter.recipes.recipes import is_reserved_env
from engine_adapter.runs import thread_entries
from engine_adapter.sandbox import (
    afterwards,
    kept_sandbox,
    plain_command,
    step_fit,
    step_guard,
    step_limits,
    workdirs,
)
from engine_adapter.sandbox.process_runner import (
    ProcessResult,
    group_exists,
    kill_group,
    run_process,
)
from engine_adapter.sandbox.sandbox import Sandbox, SandboxError, detect
from engine_adapter.sandbox.step_network import NetworkError
from engine_adapter.sandbox.workdirs import StepDir
from engine_adapter.store import db, traces
from engine_adapter.store.wakeups import Wake, start_listener
from engine_adapter.store.workers import StopRequest, Worker, crash_point

log = logging.getLogger("threadline.bots")

LEASE_S = 30
# An idle slot's longest wait: the process's listener already wakes one slot every POLL_S
# (wakeups.listen_forever), so a slot polling on its own as well only ran claims that found
# nothing (each slot one a second, each a commit).
IDLE_WAIT_S = 5.0
DEFAULT_TIMEOUT_S = 600.0
PASS_THROUGH = ("PATH", "LANG", "LC_ALL", "TZ")


class _Contended(Enum):
    """A claim lost to another bot: the next candidate is tried at once."""

    CONTENDED = "contended"


_CONTENDED: Final = _Contended.CONTENDED


class BotSlot:
    """One claim-run-report loop on connections of its own."""

    def __init__(
        self,
        worker: Worker,
        url: str | None,
        bots: list[str] | None,
        stop: threading.Event,
        sandbox: Sandbox,
        wake: Wake,
    ):
        self.worker = worker
        self.sandbox = sandbox
        self.bots = bots
        self.stop = stop
        self.wake = wake  # fed by the process's one listener (wakeups.py)
        self.conn = db.connect(url, role="bots")
        self.current_pgid: int | None = None
        self.abandoning = False
        self.claimed_ns = 0  # when the claim in hand was made: its attempt's span starts there

    def loop(self) -> None:
        while not self.stop.is_set():
            try:
                claim = self.claim()
                if claim is None:
                    kept_sandbox.end_idle()  # runs whose steps stopped coming
                    self.wake.wait(timeout=IDLE_WAIT_S)
                    continue
                if claim.more:
                    self.wake.signal()  # another idle slot takes the next one
                self.run_claim(claim)
                if not claim.more:
                    # Nothing else waited when this was claimed, and what came since brought a
                    # wake-up of its own: wait for one rather than run a claim that finds nothing.
                    self.wake.wait(timeout=IDLE_WAIT_S)
            except psycopg.errors.TransactionRollback:
                # Postgres undid one transaction (a deadlock it broke, retried already): the
                # slot goes on, and a claim left unreported is claimed again when its lease ends.
                log.exception("a transaction was rolled back; the bot slot goes on")
                if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    self.conn.rollback()
            except psycopg.OperationalError:
                if not self.stop.is_set():
                    log.exception("database connection lost; bot slot stops")
                    self.stop.set()
                return

    def run_claim(self, claim: Claim) -> None:
        try:
            self.execute(claim)
        except psycopg.OperationalError:
            raise
        except Exception as err:  # a bot bug must fail the attempt visibly, not strand the claim
            log.exception(
                "attempt %s of %s failed inside the bot",
                claim.attempt,
                claim.step_key,
                extra=logged(claim),
            )
            if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self.conn.rollback()
            self.report(
                claim, AttemptOutcome.FAILED, f"bot error: {type(err).__name__}: {err}", None
            )

    # -- claim --------------------------------------------------------------------------------
    def claim(self) -> Claim | None:
        for _ in range(
            3
        ):  # contended: try the next candidate at once rather than wait for a wake-up
            outcome = self._claim_once()
            if outcome is not _CONTENDED:
                return outcome
        return None

    def _claim_once(self) -> Claim | _Contended | None:
        row = db.fetch_row(
            self.conn,
            "claim_step",
            dict(
                bots=self.bots,
                worker_id=self.worker.id,
                host=self.worker.host,
                lease_s=LEASE_S,
            ),
        )["claim"]
        if not row:
            return None
        if row.get("contended"):
            return _CONTENDED  # another bot claimed it after our candidate query's snapshot
        for lost in row["lost"]:
            self.reap(lost)
        parsed = Instruction.from_data(row["data"])
        lost_attempt = max((lost["attempt"] for lost in row["lost"]), default=None)
        claim = Claim(
            row["run_id"],
            row["step_key"],
            row["attempt"],
            row["failures"],
            row["bot"],
            row["text"],
            parsed,
            lost_attempt,
            row["more"],
            row["secret"],
        )
        self.claimed_ns = time.time_ns()
        crash_point("bot_after_claim")
        if claim.attempt > 1 and (lost_attempt is None or parsed.retry.retries_lost):
            with self.conn.transaction():
                thread_entries.append(
                    self.conn,
                    claim.run_id,
                    AuthorKind.BOT,
                    claim.bot,
                    EntryKind.PROGRESS,
                    f"Attempt {claim.attempt} of step {names.step_id_of(parsed.step)} starting.",
                    step_key=claim.step_key,
                    data={"attempt": claim.attempt},
                )
        return claim

    def reap(self, lost: dict[str, Any]) -> None:
        """A dead attempt's process group must be gone before the next attempt starts."""
        if lost["pgid"] and lost["host"] == socket.gethostname() and group_exists(lost["pgid"]):
            log.info("killing process group %s left by %s", lost["pgid"], lost["worker_id"])
            kill_group(lost["pgid"], grace_s=0)

    # -- run ----------------------------------------------------------------------------------
    def execute(self, claim: Claim) -> None:
        if claim.lost_attempt is not None and not claim.instruction.retry.retries_lost:
            self.report(
                claim,
                AttemptOutcome.FAILED,
                f"Attempt {claim.lost_attempt} was lost (its bot stopped or lost its lease before "
                "it finished), and retry_on does not name lost: the step runs at most once, so "
                "it is not run again.",
                None,
                reason=LOST,
                retry=False,
            )
            return
        kind = claim.instruction.kind
        timeout_s = claim.instruction.timeout_s or DEFAULT_TIMEOUT_S
        try:
            workdir = self.prepare_workdir(claim)
            network = claim.instruction.network
            if not network and not self.sandbox.bwrap:
                raise SandboxError(
                    "the recipe says network: false, which needs bubblewrap "
                    f"(steps here run {self.sandbox.describe()})"
                )
            step_limits.for_step(claim.instruction.limits)  # within this host's ceilings
        except (SandboxError, OSError, step_limits.LimitError) as err:
            self.report(claim, AttemptOutcome.FAILED, f"the step cannot run: {err}", None)
            return
        if kind == StepKind.DISPATCH_TASK:
            agent = db.fetch_row(self.conn, "run_agent", dict(run_id=claim.run_id))["agent"]
            if agent is not None:
                self.run_agent(claim, BotConfig.from_dict(agent), workdir, timeout_s)
                return
            backend = agent_command(claim.bot)
            if backend is None:
                self.report(
                    claim,
                    AttemptOutcome.FAILED,
                    (
                        f"bot {claim.bot!r} has no model and no command: configure it as an "
                        "agent bot (`threadline bot apply bots.yaml`, docs: Agent bots), or "
                        f"set {command_env_name(claim.bot)} (or {AGENT_ENV}) to a command that "
                        "reads the instruction on stdin and writes its reply on stdout"
                    ),
                    None,
                )
                return
            command, stdin_text = backend, claim.text
        else:
            command, stdin_text = claim.text, None
        result = self.run_command(claim, workdir, command, stdin_text, timeout_s)
        if self.abandoning:
            # The bot is shutting down and killed the command itself: not the step's failure. The
            # claim is left open; once this process is gone the next bot closes it as lost and runs
            # a new attempt.
            log.info(
                "attempt %s of %s abandoned: the bot process is stopping",
                claim.attempt,
                claim.step_key,
                extra=logged(claim),
            )
            return
        if result.limit:  # one of its limits ended it: the step fails, naming it
            self.report(
                claim,
                AttemptOutcome.FAILED,
                self.summarise(result, timeout_s),
                result,
                reason=result.limit,
            )
            return
        if result.stopped:
            log.info(
                "attempt %s of %s stopped: run cancelled or attempt superseded",
                claim.attempt,
                claim.step_key,
                extra=logged(claim),
            )
            self.cancel_claim(claim)
            return
        ok = result.exit_code == 0 and not result.timed_out
        status = AttemptOutcome.COMPLETED if ok else AttemptOutcome.FAILED
        why = step_report.failure_why(result.exit_code, result.timed_out, timeout_s, None)
        self.report(
            claim,
            status,
            self.summarise(result, timeout_s),
            result,
            reason=why if status == AttemptOutcome.FAILED else None,
        )

    def run_command(
        self, claim: Claim, workdir: StepDir, command: str, stdin_text: str | None, timeout_s: float
    ) -> ProcessResult:
        """A command in the step's sandbox and working directory, with its clean environment."""
        env = self.step_env(claim, workdir)
        argv = ["bash", "-c", command]
        direct = plain_command.direct_argv(
            command, env, workdir.path, lambda path: self.sandbox.step_sees(path, workdir.mount)
        )
        if direct is not None:  # bash would only have started this one program
            argv, env = direct
        instruction = claim.instruction
        run_dir = self.sandbox.runs_root / claim.run_id  # its disk counts against `tmp`
        if stdin_text is None:  # in the run's kept sandbox, where one may be kept
            try:
                kept = kept_sandbox.run(
                    self.sandbox,
                    claim.run_id,
                    workdir,
                    instruction.limits,
                    instruction.network,
                    run_dir,
                    argv,
                    env,
                    timeout_s=timeout_s,
                    on_start=lambda pgid: self.started(claim, pgid),
                    on_output=lambda text: self.progress(claim, text),
                    should_continue=lambda: self.still_current(claim),
                )
            except NetworkError as err:
                kept = _cannot_run(err)
            if kept is not None:
                self.current_pgid = None
                return kept
        with (
            workdirs.opened(self.sandbox, workdir) as mount,
            step_fit.fitted(self.sandbox, instruction.limits, instruction.network, run_dir) as fit,
        ):

            def started(pgid: int) -> None:
                self.started(claim, pgid)
                fit.started(pgid)  # its network, before the command may start

            try:
                result = run_process(
                    self.sandbox.argv(argv, workdir.path, mount=mount, fit=fit.fit),
                    cwd=str(workdir.path),
                    env=env,
                    timeout_s=timeout_s,
                    stdin_text=stdin_text,
                    popen_kwargs={
                        **self.sandbox.popen_kwargs(),
                        "pass_fds": mount.pass_fds + fit.pass_fds,
                    },
                    contained=self.sandbox.contains_descendants,
                    output_cap=fit.output_cap,
                    on_start=started,
                    on_output=lambda text: self.progress(claim, text),
                    should_continue=lambda: fit.within() and self.still_current(claim),
                )
                result = fit.judged(result)
            except NetworkError as err:
                result = _cannot_run(err)
        self.current_pgid = None
        return result

    def run_agent(
        self, claim: Claim, config: BotConfig, workdir: StepDir, timeout_s: float
    ) -> None:
        """The agent loop of a dispatch_task step whose run has an agent bot snapshot."""

        def run_tool(call: agent_tools.Call) -> str:
            return agent_tools.run_tool(call, claim.instruction.tools, tool_command)

        def tool_command(command: str, stdin_text: str | None) -> tuple[int | None, str]:
            result = self.run_command(claim, workdir, command, stdin_text, timeout_s)
            if self.abandoning or result.stopped:
                raise agent_loop.Stopped
            return result.exit_code, self.summarise(result, timeout_s)

        step = agent_loop.Step(
            names.journal_key(claim.step_key),
            claim.instruction.task or claim.text,  # a later round's text only says it goes on
            claim.instruction.tools,
            timeout_s,
            claim.instruction.workflows,
            dict(claim.instruction.answers),
        )
        loop = agent_loop.AgentLoop(
            config,
            step,
            ThreadJournal(self.conn, claim.run_id, claim.step_key, claim.bot, claim.attempt),
            run_tool,
            lambda: self.still_current(claim),
            lambda: self.lease_held(claim),
            self.turn_traced(claim, config.model) if traces.enabled() else None,
        )
        started = time.monotonic()
        try:
            outcome = loop.run()
        except agent_loop.Stopped:
            if not self.abandoning:
                self.cancel_claim(claim)
            log.info(
                "agent loop of attempt %s of %s stopped",
                claim.attempt,
                claim.step_key,
                extra=logged(claim),
            )
            return
        if outcome.status == AttemptOutcome.FAILED and not outcome.retryable:
            if claim.failures < claim.instruction.retries:
                outcome = replace(
                    outcome,
                    reason=f"{outcome.reason} (not retried: the same conversation would end the "
                    "same way; `threadline retry` starts the step afresh)",
                )
        self.report(
            claim,
            outcome.status,
            agent_loop.finish_text(outcome.output),
            None,
            value=outcome.output,
            reason=outcome.reason,
            duration_s=time.monotonic() - started,
            tokens=outcome.tokens,
            retry=outcome.retryable,
        )

    @contextmanager
    def lease_held(self, claim: Claim) -> Iterator[None]:
        """Renew the claim's lease while the bot waits on something that is not a process of its
        own (a model call): an expired lease would let another bot start a second attempt."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(LEASE_S / 3):
                try:
                    self.still_current(claim)
                except psycopg.Error:
                    return

        keeper = threading.Thread(target=renew, name="lease-keeper", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join()

    def prepare_workdir(self, claim: Claim) -> StepDir:
        """The run's own directory or the recipe's workdir, checked (workdirs.py): nothing is made
        or given away outside the run's own directory."""
        return workdirs.step_dir(self.sandbox, claim.run_id, claim.instruction.workdir)

    def step_env(self, claim: Claim, workdir: StepDir) -> dict[str, str]:
        """A clean environment: no database credentials and no secret, so no step can reach the
        database or approve its own gate. A recipe's env names pass through, except Threadline's
        own variables and any variable a webhook names as its secret."""
        env = {k: os.environ[k] for k in PASS_THROUGH if k in os.environ}
        env["HOME"] = str(workdir.path)
        wanted = list(claim.instruction.env)
        secrets = (
            {row["name"] for row in db.fetch_all(self.conn, "secret_env_names")}
            if wanted
            else set()
        )
        for name in wanted:
            if name in os.environ and not is_reserved_env(name) and name not in secrets:
                env[name] = os.environ[name]
        env["THREADLINE_RUN_ID"] = claim.run_id
        env["THREADLINE_STEP_KEY"] = claim.step_key
        # The command's placeholder values (TL_*): the command references them, never holds them.
        env.update(claim.instruction.values)
        return env

    def started(self, claim: Claim, pgid: int) -> None:
        """Where the attempt's process group runs, so a successor can make sure it is gone. A
        contained command (bubblewrap's PID namespace ends with its bot) needs no successor's
        reaping if its bot dies; it is recorded at the lease's first renewal, for a bot that
        lives on but loses its lease, which saves a commit for every short command."""
        self.current_pgid = pgid
        if not self.sandbox.contains_descendants:
            self.conn.execute(
                db.q("set_claim_pgid"),
                dict(
                    pgid=pgid, step_key=claim.step_key, attempt=claim.attempt, secret=claim.secret
                ),
            )
        crash_point("bot_after_start")

    def progress(self, claim: Claim, text: str) -> None:
        with self.conn.transaction():
            thread_entries.append(
                self.conn,
                claim.run_id,
                AuthorKind.BOT,
                claim.bot,
                EntryKind.PROGRESS,
                text,
                step_key=claim.step_key,
                data={"attempt": claim.attempt},
            )
            db.notify(self.conn, claim.run_id, "progress")

    def still_current(self, claim: Claim) -> bool:
        row = db.fetch_one(
            self.conn,
            "extend_claim",
            dict(
                step_key=claim.step_key,
                attempt=claim.attempt,
                secret=claim.secret,
                lease_s=LEASE_S,
                pgid=self.current_pgid,
            ),
        )
        return bool(row and row["live"])

    @staticmethod
    def summarise(result: ProcessResult, timeout_s: float) -> str:
        text = result.output
        if result.dropped_bytes:
            text += f"\n[{result.dropped_bytes} more bytes of output dropped]"
        if result.timed_out:
            text += f"\n[timed out after {timeout_s:g}s; process group killed]"
        for note in (result.limit, *result.notes):
            text += f"\n[{note}]" if note else ""
        return text

    # -- report -------------------------------------------------------------------------------
    def report(
        self,
        claim: Claim,
        status: str,
        output: str,
        result: ProcessResult | None,
        *,
        value: Any = None,
        reason: str | None = None,
        duration_s: float = 0.0,
        tokens: dict[str, Any] | None = None,
        retry: bool = True,
    ) -> None:
        """Reply, terminal signal and done event in one transaction, fenced by the attempt.
        `value`: the step's output when it is not the reply's text (an agent's finish JSON)."""
        crash_point("bot_before_terminal")
        retries = claim.instruction.retries
        exit_code = result.exit_code if result else None
        policy = claim.instruction.retry
        retry = retry and policy.retries(exit_code, bool(result and result.timed_out))
        backoff = note = None
        why = step_report.said_why(reason, exit_code, output)
        if status == AttemptOutcome.FAILED and retry and claim.failures < retries:
            backoff = round(policy.wait_s(claim.failures, random.uniform(0.8, 1.2)), 3)
            took = step_report.duration_text(result.duration_s if result else duration_s)
            left = retries - claim.failures
            note = step_report.retry_note(claim.attempt, why, took, backoff, left, output)
        payload = bot_result(
            status,
            output if value is None else value,
            exit_code,
            claim.attempt,
            result.duration_s if result else duration_s,
            reason,
            tokens,
        )
        step_id = names.step_id_of(claim.instruction.step)
        # A paused round's attempt did its work: it ends completed, and the step goes on; its
        # call is in the thread already, so there is no reply to write.
        outcome = COMPLETED if status == PAUSED else status
        report = dict(
            queue=QUEUE,
            run_id=claim.run_id,
            step_key=claim.step_key,
            attempt=claim.attempt,
            secret=claim.secret,
            bot=claim.bot,
            outcome=outcome,
            backoff_s=backoff,
            note=note,
            message=None if status == PAUSED else (output or "(no output)"),
            terminal_kind=f"signal.dispatch.{outcome}",
            terminal_text=f"step {step_id} paused: {value['tool']}"
            if status == PAUSED
            else (
                f'step "{step_id}" failed: {why}'
                if status == AttemptOutcome.FAILED
                else f"step {step_id} {status}"
            ),
            payload=Jsonb(payload),
            exit_code=exit_code,
        )
        # One transaction: a deadlock abort undid all of it, so the report is simply sent again.
        outcome_of = db.retrying_deadlocks(
            self.conn, lambda: db.fetch_row(self.conn, "report_step", report)["result"]
        )
        if outcome_of == "dropped":
            log.info(
                "attempt %s of %s is no longer current; result dropped",
                claim.attempt,
                claim.step_key,
                extra=logged(claim),
            )
        if outcome_of != "dropped":
            self.trace_attempt(claim, outcome, exit_code, reason)
        if outcome_of != "dropped" and status == AttemptOutcome.FAILED:
            again = f"; retried in {backoff:g}s" if backoff is not None else ""
            log.info(
                "attempt %s of %s failed: %s%s",
                claim.attempt,
                claim.step_key,
                why,
                again,
                extra=logged(claim),
            )
        if outcome_of == "done":
            crash_point("bot_after_terminal")

    def cancel_claim(self, claim: Claim) -> None:
        self.conn.execute(
            db.q("cancel_claim"),
            dict(step_key=claim.step_key, attempt=claim.attempt, secret=claim.secret),
        )
        self.trace_attempt(claim, AttemptOutcome.CANCELLED, None, None)

    def trace_attempt(
        self, claim: Claim, outcome: str, exit_code: int | None, reason: str | None
    ) -> None:
        """The attempt's span, from its claim to its report, when traces are sent."""
        if traces.enabled():
            traces.attempt_ended(
                claim.step_key,
                claim.instruction.step,
                claim.instruction.try_no,
                claim.attempt,
                self.claimed_ns,
                outcome,
                bot=claim.bot,
                worker=self.worker.id,
                sandbox=self.sandbox.describe(),
                exit_code=exit_code,
                reason=reason,
            )

    def turn_traced(self, claim: Claim, model: str) -> Callable[[int, int, dict[str, Any]], None]:
        """What an agent's loop calls at each model turn: the turn's span."""

        def turned(turn: int, started_ns: int, usage: dict[str, Any]) -> None:
            step = claim.instruction.step
            traces.agent_turn(claim.step_key, step, claim.attempt, turn, started_ns, model, usage)

        return turned

    def close(self) -> None:
        self.abandoning = True
        if self.current_pgid:
            kill_group(self.current_pgid)
        try:
            self.conn.close()
        except Exception:  # closing on the way out
            pass


def _cannot_run(err: NetworkError) -> ProcessResult:
    return ProcessResult(None, f"the step cannot run: {err}", 0, False, False, 0.0)


def logged(claim: Claim) -> dict[str, Any]:
    """A claim's run, step and attempt: fields of their own in JSON logs (model.logs)."""
    return {
        "run_id": claim.run_id,
        "step": claim.instruction.step,
        "step_key": claim.step_key,
        "attempt": claim.attempt,
    }


def main(
    url: str | None = None, concurrency: int | None = None, bots: list[str] | None = None
) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s bots %(levelname)s %(message)s")
    concurrency = concurrency or int(os.environ.get("THREADLINE_BOT_CONCURRENCY", "4"))
    sandbox = detect()
    said = f"{sandbox.describe()}; {workdirs.describe(sandbox.workdirs)}"  # shown by health
    said += f"; {step_fit.describe(sandbox)}"
    said += kept_sandbox.describe(sandbox)
    step_guard.clear_leftovers(sandbox.runs_root)
    (log.info if sandbox.isolated else log.warning)("steps run %s", said)
    stop = StopRequest().event
    worker = Worker("bots", url, sandbox=said)
    wake = Wake(concurrency)
    slots = [BotSlot(worker, url, bots, stop, sandbox, wake) for _ in range(concurrency)]
    start_listener(url, "bots", db.BOTS_CHANNEL, wake, stop)
    log.info("bot process %s serving %s with %d slots", worker.id, bots or "all bots", concurrency)
    traces.start("threadline-bots")
    threads_ = [
        threading.Thread(target=s.loop, name=f"bot-slot-{i}", daemon=True)
        for i, s in enumerate(slots)
    ]
    for t in threads_:
        t.start()
    stop.wait()
    for s in slots:
        s.close()
    kept_sandbox.end_all()
    afterwards.settled()  # the steps' /tmp directories removed, their slirp4netns reaped
    traces.shutdown()  # the spans still queued are sent
    worker.close()
