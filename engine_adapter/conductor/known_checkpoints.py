"""The engine's task context, minus the checkpoint look-ups that always miss.

When the SDK hands a claimed run to the handler it has already loaded every committed checkpoint
of the run (absurd.get_task_checkpoint_states, in the claim's wake). Its `begin_step` and
`await_event` then look up each checkpoint name the cache lacks once more, in a transaction of
its own (absurd.get_task_checkpoint_state): for a run making progress that is every new step, a
read and a commit each (seven per three-step run). Such a look-up could only find a checkpoint
written since the claim by another attempt of the same run, which exists only once this run has
lost its claim: then absurd.set_task_checkpoint_state refuses this run's writes (the run has
failed) and a step's writes roll back with its checkpoint (HandlerBase.atomic_step). Nor would
the look-up close that race: the other attempt may write just after it. So a name missing from
the cache is taken as not written.

absurd-sdk is pinned (pyproject.toml); this leans on its TaskContext's `_checkpoint_cache` and
`_lookup_checkpoint`. To drop it, remove the `known_checkpoints.adopt(ctx)` call in
conductor.Executor.handle_run: the SDK's own look-ups come back.
"""

from __future__ import annotations

from typing import Any

import absurd_sdk
from absurd_sdk import TaskContext


class KnownCheckpoints(TaskContext):
    """A TaskContext whose checkpoint look-ups end at the checkpoints loaded with the claim."""

    def _lookup_checkpoint(self, checkpoint_name: str) -> Any:
        if checkpoint_name in self._checkpoint_cache:
            return self._checkpoint_cache[checkpoint_name]
        return absurd_sdk._CHECKPOINT_NOT_FOUND


def adopt(ctx: TaskContext) -> TaskContext:
    """The SDK's context, its class swapped (the SDK builds it with object.__new__)."""
    ctx.__class__ = KnownCheckpoints
    return ctx
