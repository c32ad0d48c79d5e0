"""The domain's vocabulary: groups of step kinds and run states (the words themselves are the
enums of `vocab.py`; the short names here are their members), the gate outcome, a step's result
(the payload of its done event), the instruction a conductor hands a bot and the bot's claim of it,
and the params a run's handler reads.

Names of keys, events and checkpoints live in `names.py`; everything else that more than one
module must agree on lives here and is imported from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NotRequired, TypedDict

from engine_adapter.model.vocab import (
    AttemptOutcome,
    GateDecision,
    RunState,
    StepKind,
    StepStatus,
    TriggerKind,
)

# -- step kinds (short names for StepKind's members) ---------------------------------------------
RUN_COMMAND, DISPATCH_TASK = StepKind.RUN_COMMAND, StepKind.DISPATCH_TASK
SLEEP, SLEEP_UNTIL = StepKind.SLEEP, StepKind.SLEEP_UNTIL
HUMAN_GATE, WAIT_FOR_EVENT = StepKind.HUMAN_GATE, StepKind.WAIT_FOR_EVENT
WORKFLOW, CONDITIONAL = StepKind.WORKFLOW, StepKind.CONDITIONAL
PARALLEL, FOREACH, REPEAT = StepKind.PARALLEL, StepKind.FOREACH, StepKind.REPEAT

BOT_KINDS = (RUN_COMMAND, DISPATCH_TASK)  # done by a bot
# What a dispatch_task step may let an agent bot call (`tools:`); `finish` is always available.
AGENT_TOOLS = (
    "run_command",
    "read_file",
    "write_file",
    "ask_human",
    "start_workflow",
    "propose_change",
)
# Tools that pause the agent's loop: the bot hands the request to the conductor, which opens a
# gate or starts runs and waits holding no process, then gives the loop its answer (a new round).
ASK_HUMAN, START_WORKFLOW, PROPOSE_CHANGE = "ask_human", "start_workflow", "propose_change"
PAUSING_TOOLS = (ASK_HUMAN, START_WORKFLOW, PROPOSE_CHANGE)
# A round of an agent step that ended on a pausing tool: its bot result's status, never a step's.
PAUSED = AttemptOutcome.PAUSED
SLEEP_KINDS = (SLEEP, SLEEP_UNTIL)
# Steps that do one thing, in the order a recipe names them (a step has exactly one of these keys).
LEAF_KINDS = (RUN_COMMAND, DISPATCH_TASK, SLEEP, SLEEP_UNTIL, HUMAN_GATE, WAIT_FOR_EVENT, WORKFLOW)
# Steps that hold step lists. A conditional has no key of its own: it is a step with `then`.
BLOCK_KINDS = (CONDITIONAL, PARALLEL, FOREACH, REPEAT)
KINDS = (*LEAF_KINDS, *BLOCK_KINDS)
KEYED_KINDS = (*LEAF_KINDS, PARALLEL, FOREACH, REPEAT)  # kinds named by a key of the same name

# -- run states (short names for RunState's members) ---------------------------------------------
PENDING, QUEUED, RUNNING = RunState.PENDING, RunState.QUEUED, RunState.RUNNING
SLEEPING, WAITING = RunState.SLEEPING, RunState.WAITING
COMPLETED, FAILED, CANCELLED = RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED
RUN_STATES = tuple(RunState)
# No work happens without a person: a failed run waits for a retry.
FINISHED = (COMPLETED, FAILED, CANCELLED)
# Nothing can resume them: a failed top-level run parks on a retry, so it is not ended.
ENDED = (COMPLETED, CANCELLED)

# -- step statuses (the stepper, `show`, the notebooks) ------------------------------------------
ACTIVE, GATE = StepStatus.ACTIVE, StepStatus.GATE
SKIPPED, CARRIED_OVER = StepStatus.SKIPPED, StepStatus.CARRIED_OVER
STEP_STATUSES = tuple(StepStatus)
# A step's status while the run is in a state and the step is the run's current one.
CURRENT_STEP_STATUS: dict[str, StepStatus] = {  # a run state, as a row holds it
    RUNNING: ACTIVE,
    SLEEPING: StepStatus.SLEEPING,
    WAITING: GATE,
    FAILED: StepStatus.FAILED,
    PENDING: StepStatus.PENDING,
    QUEUED: StepStatus.PENDING,
}

# -- triggers ------------------------------------------------------------------------------------
TRIGGER_KINDS = tuple(TriggerKind)

# -- gates ---------------------------------------------------------------------------------------
APPROVE, DENY = GateDecision.APPROVE, GateDecision.DENY
TIMEOUT, REPLY = GateDecision.TIMEOUT, GateDecision.REPLY
# A human_gate without a `timeout` takes its on_timeout path after a day (an agent's ask_human
# question waits until someone answers).
DEFAULT_GATE_TIMEOUT_S = 24 * 3600
DECISIONS = tuple(GateDecision)
# What a person decides at a gate by name (a reply answers an agent; a timeout is no one's).
PERSON_DECISIONS = (APPROVE, DENY)


@dataclass(frozen=True)
class GateOutcome:
    passed: bool
    why: str  # in words, for the thread: "approved by alice", "timed out", ...


def gate_outcome(decision: Mapping[str, Any], on_timeout: str | None) -> GateOutcome:
    """What a gate's decision means for the run: on a timeout, the gate's `on_timeout` decides."""
    text = decision.get("text") or ""
    said = decision.get("decision")
    if said == TIMEOUT:
        return GateOutcome((on_timeout or DENY) == APPROVE, "timed out")
    who = decision.get("actor")
    if said in (APPROVE, REPLY):
        return GateOutcome(True, f"{'approved' if said == APPROVE else 'answered'} by {who}")
    return GateOutcome(False, f"denied by {who}" + (f": {text}" if text else ""))


def decision_result(decision: str, actor: str, text: str | None, at: datetime) -> dict[str, Any]:
    """The done payload of a decided gate (a person's decision, or a timeout's), from the
    decision as recorded; the reconcile sweep rebuilds it from the same row."""
    return {"decision": decision, "actor": actor, "text": text or "", "at": at.isoformat()}


# -- a step's result -----------------------------------------------------------------------------
@dataclass(frozen=True)
class StepResult:
    """What a finished step hands the run: the checkpointed value of its done (or skip) point.

    Stored as a plain mapping in checkpoints and done events; `to_dict` / `from_dict` are the one
    translation. `output` is text (a command's output, a gate's reply, a sleep's wake time)."""

    status: str  # completed | failed | cancelled | skipped
    output: Any = ""
    exit_code: int | None = None
    reason: str | None = None  # why it was skipped, denied or failed, in words
    extra: Mapping[str, Any] = field(default_factory=dict)  # decision, attempt, event, run, ...

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {**self.extra, "status": self.status, "output": self.output}
        if self.exit_code is not None:
            d["exit_code"] = self.exit_code
        if self.reason is not None:
            d["reason"] = self.reason
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepResult:
        known = {"status", "output", "exit_code", "reason"}
        return cls(
            status=d.get("status", COMPLETED),
            output=d.get("output", ""),
            exit_code=d.get("exit_code"),
            reason=d.get("reason"),
            extra={k: v for k, v in d.items() if k not in known},
        )

    @property
    def ok(self) -> bool:
        return self.status in (COMPLETED, SKIPPED)

    def view(self) -> dict[str, Any]:
        """The step as expressions and placeholders see it (`steps.<id>.status`, ...)."""
        return step_view(self.to_dict())


# The fields of a result that later steps may read besides status, output, exit code and reason.
_VIEWED = ("decision", "event", "outputs", "tokens")


def step_value(output: Any) -> Any:
    """A step's output as a value, wherever one is read (a condition, a placeholder, a named or
    declared output): as the shell's $(...) does, without its final newlines."""
    return output.rstrip("\n") if isinstance(output, str) else output


def step_view(result: Mapping[str, Any]) -> dict[str, Any]:
    """The one view of a step's result (a StepResult's dict) that conditions, placeholders and
    outputs read as `steps.<id>.<field>`. A rerun hands its carried steps on with the views its
    original computed here, so both runs read the same values."""
    status = result.get("status", COMPLETED)
    return {
        "status": status,
        "output": step_value(result.get("output", "")),
        "exit_code": result.get("exit_code"),
        "skipped": status == SKIPPED,
        "reason": result.get("reason"),
        **{k: v for k, v in result.items() if k in _VIEWED},
    }


def bot_result(
    status: str,
    output: Any,
    exit_code: int | None,
    attempt: int,
    duration_s: float,
    reason: str | None = None,
    tokens: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The done payload a bot's terminal signal carries (the reconcile sweep re-emits it).
    `output` is a command's output, or an agent's final answer (text, or finish's JSON);
    `tokens` an agent step's model tokens over all its turns ({"in", "out"})."""
    extra: dict[str, Any] = {"attempt": attempt, "duration_s": round(duration_s, 3)}
    if tokens is not None:
        extra["tokens"] = tokens
    return StepResult(status, output, exit_code, reason, extra=extra).to_dict()


# -- retries ---------------------------------------------------------------------------------------
# A bot step's `retry_on`: which failures its `retries` retry. An exit code, "failure" (any
# non-zero exit), "timeout" (the command ran out of time), "lost" (the bot died or lost its lease
# mid-attempt). Without it, every failure is retried. A lost attempt never spends one of `retries`
# (a crashed machine is not the command's failure); a `retry_on` without "lost" makes the step run
# at most once across bot crashes: a lost attempt fails it instead of running it again.
LOST = AttemptOutcome.LOST
RETRY_CLASSES = ("failure", "timeout", LOST)
DEFAULT_BACKOFF_S, DEFAULT_MAX_BACKOFF_S = 1.0, 60.0


@dataclass(frozen=True)
class RetryPolicy:
    retry_on: tuple[str | int, ...] = ()  # empty: every failure
    backoff_s: float = DEFAULT_BACKOFF_S  # the first wait; it doubles, up to max_backoff_s
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S

    def retries(self, exit_code: int | None, timed_out: bool) -> bool:
        """Whether this failure is one to retry."""
        if not self.retry_on:
            return True
        if timed_out:
            return "timeout" in self.retry_on
        return "failure" in self.retry_on or exit_code in self.retry_on

    @property
    def retries_lost(self) -> bool:
        """Whether an attempt whose bot was lost is run again (by the next bot)."""
        return not self.retry_on or LOST in self.retry_on

    def wait_s(self, failures: int, jitter: float = 1.0) -> float:
        """Before the next attempt, after `failures` failed ones; `jitter` spreads retries."""
        return min(self.backoff_s * 2.0**failures, self.max_backoff_s) * jitter

    def to_data(self) -> dict[str, Any]:
        return {
            "retry_on": list(self.retry_on),
            "backoff_s": self.backoff_s,
            "max_backoff_s": self.max_backoff_s,
        }

    @classmethod
    def from_data(cls, d: Mapping[str, Any] | None) -> RetryPolicy:
        d = d or {}
        return cls(
            tuple(d.get("retry_on") or ()),
            float(d.get("backoff_s", DEFAULT_BACKOFF_S)),
            float(d.get("max_backoff_s", DEFAULT_MAX_BACKOFF_S)),
        )


# -- the conductor -> bot wire format --------------------------------------------------------------
@dataclass(frozen=True)
class Instruction:
    """What an instruction entry's `data` holds: everything a bot needs besides the text."""

    step: str  # the step's path in the run (`check`, `each[2]/deploy`)
    kind: str
    try_no: int
    timeout_s: float | None = None
    retries: int = 0
    workdir: str | None = None
    env: tuple[str, ...] = ()
    network: bool = True
    limits: Mapping[str, float] = field(default_factory=dict)  # asked by the recipe (step_limits)
    values: Mapping[str, str] = field(default_factory=dict)  # placeholder values, as env vars
    tools: tuple[str, ...] = ()  # dispatch_task: the tools an agent bot may call
    workflows: tuple[str, ...] = ()  # dispatch_task: what its agent's start_workflow may start
    # A later round of an agent step: the task as first rendered, and the answers to its paused
    # calls (call id -> what the model reads as the tool's result).
    task: str | None = None
    answers: Mapping[str, str] = field(default_factory=dict)
    retry: RetryPolicy = RetryPolicy()

    def to_data(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "kind": self.kind,
            "try": self.try_no,
            "timeout_s": self.timeout_s,
            "retries": self.retries,
            "workdir": self.workdir,
            "env": list(self.env),
            "network": self.network,
            "limits": dict(self.limits),
            "values": dict(self.values),
            "tools": list(self.tools),
            "workflows": list(self.workflows),
            "task": self.task,
            "answers": dict(self.answers),
            "retry": self.retry.to_data(),
        }

    @classmethod
    def from_data(cls, d: Mapping[str, Any]) -> Instruction:
        return cls(
            step=str(d["step"]),
            kind=str(d["kind"]),
            try_no=int(d.get("try") or 1),
            timeout_s=d.get("timeout_s"),
            retries=int(d.get("retries") or 0),
            workdir=d.get("workdir"),
            env=tuple(d.get("env") or ()),
            network=bool(d.get("network", True)),
            limits=dict(d.get("limits") or {}),
            values=dict(d.get("values") or {}),
            tools=tuple(d.get("tools") or ()),
            workflows=tuple(d.get("workflows") or ()),
            task=d.get("task"),
            answers=dict(d.get("answers") or {}),
            retry=RetryPolicy.from_data(d.get("retry")),
        )


# -- the run handler's params ----------------------------------------------------------------------
class Inherited(TypedDict, total=False):
    """What a child run (a branch, a parallel item) reads of its parent: step views, named
    outputs and its loop's item."""

    steps: dict[str, dict[str, Any]]
    outputs: dict[str, Any]
    loop: dict[str, Any]


class HandlerParams(TypedDict):
    """The params a run is spawned with on the engine, which its handler reads (spawn.py and
    child_runs.py hand their parts to the spawn query, which assembles them; a rerun's replay
    builds its own)."""

    payload: Any
    recipe: dict[str, Any]  # the run's snapshot of its recipe
    admit: NotRequired[bool]  # queued behind max_concurrent_runs: park until admitted
    carried: NotRequired[dict[str, Any]]  # a rerun's steps taken over from its original run
    inherited: NotRequired[Inherited]  # only a child run's


# -- a bot's claim ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Claim:
    """An instruction a bot claimed: a committed row with a lease and an attempt number (the
    fencing token its terminal signal must carry)."""

    run_id: str
    step_key: str
    attempt: int
    failures: int
    bot: str
    text: str
    instruction: Instruction
    lost_attempt: int | None = None  # the attempt before this one, when its bot was lost
    more: bool = False  # another instruction was waiting when this one was claimed
    secret: str = field(default="", repr=False)  # proves this attempt's acts (migration 043)
