"""The console editor's bounded validation: a worker process, stopped when it takes too long."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os

from console import recipe_check
from console.recipe_check import check_recipe, check_recipe_async

VALID = 'slug: x\nsteps:\n  - id: a\n    run_command: echo "{{payload.x}}"\n'


def children() -> set[int]:
    """This process's live recipe-check workers (zombies reaped by wait do not count; other
    tests' children, such as a session's console processes, are not ours to count)."""
    found = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            found |= {int(pid) for pid in f.read().split()}
    return {pid for pid in found if _is_worker(pid)}


def _is_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"console.recipe_check" in f.read()
    except OSError:
        return False


def test_a_valid_recipe_comes_back_and_an_invalid_one_names_its_paths():
    recipe, errors = check_recipe(VALID)
    assert errors == [] and recipe is not None and recipe.steps[0].id == "a"
    recipe, errors = check_recipe(
        "slug: x\nsteps:\n  - id: a\n    run_comand: ls\n", source="editor"
    )
    assert recipe is None
    assert "steps[0].run_comand: unknown field; did you mean run_command?" in errors
    recipe, errors = check_recipe('{"slug": "x", "d": "\\ud800", "e": "\\u0000", "steps": []}')
    assert errors == [
        "d: contains a lone surrogate, which is not valid Unicode",
        "e: contains a NUL character",
    ]


def test_a_check_that_takes_too_long_is_stopped_and_its_worker_killed():
    check_recipe(VALID)  # a warm worker
    before = children()
    slow = "slug: x\nsteps:\n" + "".join(
        f"  - id: s{i}\n    run_command: echo {i}\n" for i in range(3000)
    )
    recipe, errors = check_recipe(slow, timeout_s=0.001)
    assert recipe is None and errors == [
        "editor: validation took longer than 0.001 s and was stopped"
    ]
    assert not (children() - before)
    assert len(children()) <= recipe_check.MAX_IDLE
    assert check_recipe(VALID)[1] == []  # the next check gets a fresh worker


def test_the_async_check_leaves_the_event_loop_free():
    async def main() -> tuple[int, list[str]]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        ticker = asyncio.create_task(tick())
        slow = "slug: x\nsteps: [" + "{id: a, sleep: 1s}, " * 6000 + "]\n"
        _, errors = await check_recipe_async(slow)
        ticker.cancel()
        return ticks, errors

    # A loop of its own, on a thread of its own: an earlier test (Playwright's sync API) may have
    # left one running on this thread.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        ticks, errors = pool.submit(asyncio.run, main()).result()
    assert errors  # id used twice, and more than 20000 values
    assert ticks > 1  # the loop went on while the worker parsed
