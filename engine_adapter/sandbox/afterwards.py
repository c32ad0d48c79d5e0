"""What a step's end leaves for later, off the path of its result: removing its /tmp directory and
cgroup, reaping its slirp4netns. Each waits in the kernel for the step's namespaces to go (a tap
device, a mount point: some milliseconds each, no CPU), which the bot need not wait for. One thread
per bots process does them in turn; what a killed bots process left, the next one clears at its
start (step_guard.clear_leftovers)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from functools import cache

log = logging.getLogger("threadline.afterwards")

_work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()


def later(job: Callable[[], None]) -> None:
    _worker()
    _work.put(job)


def settled(timeout_s: float = 10.0) -> bool:
    """Whether everything handed over so far is done (for a bots process that is stopping)."""
    done = threading.Event()
    later(done.set)
    return done.wait(timeout_s)


@cache
def _worker() -> threading.Thread:
    thread = threading.Thread(target=_run, name="step-afterwards", daemon=True)
    thread.start()
    return thread


def _run() -> None:
    while True:
        job = _work.get()
        try:
            job()
        except Exception:  # one failed clean-up must not stop the others
            log.exception("clearing up after a step failed")
