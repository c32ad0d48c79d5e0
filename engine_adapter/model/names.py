"""Keys, event names and checkpoint names shared by the conductor, the bots and the read model."""

from __future__ import annotations


def short_run_id(run_id: str) -> str:
    """A run id short enough to show, that still tells runs apart: run ids are UUIDv7, whose
    leading characters are the time (runs of the same minute share them), so the short form is
    the id's random tail. The runs page's search finds a run by it."""
    return str(run_id)[-8:]


def step_key(run_id: str, step_id: str, try_no: int) -> str:
    return f"{run_id}:{step_id}:{try_no}"


def split_step_key(key: str) -> tuple[str, str, int]:
    """(run id, path, try) of a step key; a round's key (below) gives its step's path."""
    run_id, step_id, try_no = key.rsplit(":", 2)
    return run_id, step_id.split(ROUND_MARK, 1)[0], int(try_no)


# An agent step pauses on ask_human or start_workflow and goes on in a new round: the question
# (a gate) and each later round are keyed like steps, their paths marked `~ask<n>` and `~r<n>`.
ROUND_MARK = "~"


def round_key(run_id: str, path: str, try_no: int, part: str) -> str:
    """The key of a part of an agent step's try: `r2`, `r3`... (rounds), `ask1`... (questions)."""
    return step_key(run_id, f"{path}{ROUND_MARK}{part}", try_no)


def journal_key(key: str) -> str:
    """The step key an agent's journal is kept under, whatever round a key is of."""
    run_id, path, try_no = split_step_key(key)
    return step_key(run_id, path, try_no)


# Every event name below starts so; only Threadline's own paths emit them. The database's checked
# emitters (migration 008) spell the done and retry names too: the run tests hold them equal.
OWN_EVENT_PREFIX = "threadline."


def is_own_event(name: str) -> bool:
    """Whether an event name is one of Threadline's (case and surrounding space ignored, as a
    hand-typed name might differ in them)."""
    return name.strip().lower().startswith(OWN_EVENT_PREFIX)


def done_event(key: str) -> str:
    return f"threadline.step.done:{key}"


def retry_event(key: str) -> str:
    return f"threadline.run.retry:{key}"


def run_done_event(run_id: str) -> str:
    """Emitted when a child run finishes (any way); its parent's step awaits it."""
    return f"threadline.run.done:{run_id}"


def first_done_event(run_id: str, path: str, try_no: int) -> str:
    """Emitted by every branch of a `completion: any` group as it finishes: the first one wins."""
    return f"threadline.group.first:{run_id}:{path}:{try_no}"


def child_key(run_id: str, path: str, try_no: int, branch: str) -> str:
    """The idempotency key of a child run: one child per branch, step and try of a parent."""
    return f"child:{run_id}:{path}:{try_no}:{branch}"


# -- step paths ----------------------------------------------------------------------------------
# A step's path names it within its run: its id at the top, `<loop>[<n>]/<id>` inside the nth
# iteration of a foreach or repeat (1-based). Step ids are unique across a recipe's whole tree.
def iteration_path(path: str, n: int) -> str:
    return f"{path}[{n}]"


def child_path(scope: str, step_id: str) -> str:
    return f"{scope}/{step_id}" if scope else step_id


def step_id_of(path: str) -> str:
    """The step id a path ends in (`each[2]/deploy` -> `deploy`)."""
    return path.rsplit("/", 1)[-1].split("[", 1)[0]


def top_step_of(path: str) -> str:
    """The top-level step a path lies under (`each[2]/deploy` -> `each`)."""
    return step_id_of(path.split("/", 1)[0])


# -- checkpoint names inside the one handler; the read model reads results back from them -------
SEND, DONE, DONE_LATE, SLEEP, RETRY, FAILED = (
    "send",
    "done",
    "done-late",
    "sleep",
    "retry",
    "failed",
)
DECIDE, ITEMS, UNTIL, SPAWN, WINNER = "decide", "items", "until", "spawn", "winner"
CARRIED = "carried"  # a rerun's step taken over from its original run
CHECKPOINT_KINDS = (
    SEND,
    DONE,
    DONE_LATE,
    SLEEP,
    RETRY,
    FAILED,
    DECIDE,
    ITEMS,
    UNTIL,
    SPAWN,
    WINNER,
    CARRIED,
)


def checkpoint(kind: str, path: str, try_no: int | None = None, branch: str | None = None) -> str:
    """`<kind>:<path>[:<try>[:<branch>]]`; paths hold no colon (ids match [a-z0-9_-]+)."""
    name = f"{kind}:{path}"
    if try_no is not None:
        name += f":{try_no}"
    if branch is not None:
        name += f":{branch}"
    return name


def parse_checkpoint(name: str) -> tuple[str, str, int | None, str | None] | None:
    """(kind, path, try, branch) of one of our checkpoint names; None for any other name."""
    kind, _, rest = name.partition(":")
    if kind not in CHECKPOINT_KINDS or not rest:
        return None
    parts = rest.split(":")
    path, try_no, branch = parts[0], None, None
    if len(parts) > 1:
        if not parts[1].isdigit():
            return None
        try_no = int(parts[1])
    if len(parts) > 2:
        branch = ":".join(parts[2:])
    return kind, path, try_no, branch


def send_checkpoint(path: str, try_no: int) -> str:
    return checkpoint(SEND, path, try_no)


def done_checkpoint(path: str, try_no: int) -> str:
    return checkpoint(DONE, path, try_no)


def late_done_checkpoint(path: str, try_no: int) -> str:
    return checkpoint(DONE_LATE, path, try_no)


def sleep_checkpoint(path: str, try_no: int) -> str:
    return checkpoint(SLEEP, path, try_no)


def retry_checkpoint(path: str, try_no: int) -> str:
    return checkpoint(RETRY, path, try_no)
