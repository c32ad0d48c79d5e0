"""The closed vocabularies, one home each: every word a run, a step, a thread or a notification
may be in, as a `StrEnum`, so a member equals its string (what the database stores and the JSON
carries) and a misspelt member fails at import instead of matching nothing.

Where a table's CHECK constraint lists the same words, a test holds the two equal.
`domain.py` derives its groups (`FINISHED`, `BOT_KINDS`, ...) from these.
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    """A run's state (`run_threads.state`)."""

    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    SLEEPING = "sleeping"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class StepStatus(StrEnum):
    """A step's status as the stepper, `show` and the notebooks tell it."""

    PENDING = "pending"
    ACTIVE = "active"
    SLEEPING = "sleeping"
    GATE = "gate"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    CARRIED_OVER = "carried_over"


class StepKind(StrEnum):
    """What a step does: the key that names it in a recipe (a conditional is a step with `then`)."""

    RUN_COMMAND = "run_command"
    DISPATCH_TASK = "dispatch_task"
    SLEEP = "sleep"
    SLEEP_UNTIL = "sleep_until"
    HUMAN_GATE = "human_gate"
    WAIT_FOR_EVENT = "wait_for_event"
    WORKFLOW = "workflow"  # a sub-workflow: a child run of another workflow
    CONDITIONAL = "conditional"  # `if` with `then` / `else` step lists
    PARALLEL = "parallel"  # branches run at once, each as a child run
    FOREACH = "foreach"  # the same steps once per item of a list
    REPEAT = "repeat"  # the same steps again until a condition holds


class AttemptOutcome(StrEnum):
    """How a bot's attempt at a step ended (`step_claims.outcome`). Never stored: `RUNNING`, an
    attempt not ended yet (no outcome), and `PAUSED`, a round of an agent step that ended on a
    pausing tool (its bot result's status)."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    LOST = "lost"  # the bot died or lost its lease mid-attempt
    CANCELLED = "cancelled"
    PAUSED = "paused"


class TriggerKind(StrEnum):
    """What started a run (`trigger.kind`)."""

    MANUAL = "manual"
    SCHEDULE = "schedule"
    WEBHOOK = "webhook"
    EVENT = "event"
    PARENT = "parent"
    RERUN = "rerun"


class GateDecision(StrEnum):
    """What closed a gate (`gate_decisions.decision`)."""

    APPROVE = "approve"
    DENY = "deny"
    TIMEOUT = "timeout"
    REPLY = "reply"


class AwaitKind(StrEnum):
    """What a run's current step waits on (`run_threads.await_kind`)."""

    BOT = "bot"
    GATE = "gate"
    EVENT = "event"


class AuthorKind(StrEnum):
    """Who wrote a thread entry (`thread_entries.author_kind`)."""

    SYSTEM = "system"
    BOT = "bot"
    HUMAN = "human"


class EntryKind(StrEnum):
    """What a thread entry is (`thread_entries.kind`)."""

    MESSAGE = "message"
    INSTRUCTION = "instruction"
    QUESTION = "question"
    PROGRESS = "progress"
    DISPATCH_COMPLETED = "signal.dispatch.completed"
    DISPATCH_FAILED = "signal.dispatch.failed"
    DECISION = "decision"
    NOTE = "note"
    AGENT_ASSISTANT = "agent.assistant"
    AGENT_TOOL = "agent.tool"


class NotifyEvent(StrEnum):
    """What a notification rule's `when` names (`notifications.event`)."""

    GATE = "gate"  # a gate opens
    FAILED = "failed"  # the run fails
    WAITING = "waiting"  # a gate waits past `after`


class NotificationStatus(StrEnum):
    """Where a notification is in its delivery (`notifications.status`)."""

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class EnvelopeStatus(StrEnum):
    """How a run ended, as the contract's envelope tells an agent (`envelope.schema.json`)."""

    OK = "ok"
    NEEDS_APPROVAL = "needs_approval"
    CANCELLED = "cancelled"
    FAILED = "failed"


class TaskState(StrEnum):
    """The engine's state of a run's task or of one of its attempts (Absurd's words, read in
    its tables: they are not a run's states, and `waiting`/`queued` are not among them)."""

    PENDING = "pending"
    RUNNING = "running"
    SLEEPING = "sleeping"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Door(StrEnum):
    """The door an actor came through (`decisions.via`, `Actor.via`)."""

    CLI = "cli"
    CONSOLE = "console"
    LINK = "link"  # a resume link
    API = "api"
    WEBHOOK = "webhook"
    SYSTEM = "system"


class Channel(StrEnum):
    """Where a notification goes (`account_channels.channel`, `notifications.channel`)."""

    EMAIL = "email"
    WEBHOOK = "webhook"


class ProposalStatus(StrEnum):
    """Where a proposed change to a workflow stands (`proposals.status`)."""

    OPEN = "open"
    APPROVED = "approved"
    REJECTED = "rejected"
    APPLIED = "applied"
    STALE = "stale"  # its workflow changed since it was proposed
    EXPIRED = "expired"
