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
    run_id, step_id, try_no = key.rsplit(":", 2)
    return run_id, step_id, int(try_no)


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


# Checkpoint names inside the one handler; the read model reads results back from them.
def send_checkpoint(step_id: str, try_no: int) -> str:
    return f"send:{step_id}:{try_no}"


def done_checkpoint(step_id: str, try_no: int) -> str:
    return f"done:{step_id}:{try_no}"


def late_done_checkpoint(step_id: str, try_no: int) -> str:
    return f"done-late:{step_id}:{try_no}"


def sleep_checkpoint(step_id: str, try_no: int) -> str:
    return f"sleep:{step_id}:{try_no}"


def retry_checkpoint(step_id: str, try_no: int) -> str:
    return f"retry:{step_id}:{try_no}"
