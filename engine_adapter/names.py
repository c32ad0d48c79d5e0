"""Keys, event names and checkpoint names shared by the conductor, the bots and the read model."""

from __future__ import annotations


def step_key(run_id: str, step_id: str, try_no: int) -> str:
    return f"{run_id}:{step_id}:{try_no}"


def split_step_key(key: str) -> tuple[str, str, int]:
    run_id, step_id, try_no = key.rsplit(":", 2)
    return run_id, step_id, int(try_no)


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
