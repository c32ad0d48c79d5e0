"""The editor's recipe validation, bounded: a check runs in a worker process of its own, which is
killed when it takes longer than CHECK_TIMEOUT_S, so no text typed into the editor can hold up
the console's event loop, its threads or its memory. Idle workers are kept for the next check.

The worker (`python -m console.recipe_check`) reads one JSON request per line and answers with
the canonical recipe or the errors; it has no database credentials and a memory limit.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import threading
from dataclasses import replace
from typing import Any

from engine_adapter.recipes.recipes import Recipe, RecipeError, load_recipe_text
from engine_adapter.sandbox.readable import readable

CHECK_TIMEOUT_S = 10.0
MEMORY_LIMIT = 1 << 30  # address space of a worker; a recipe needs a small part of it
MAX_IDLE = 2
_PASS = ("PATH", "LANG", "LC_ALL", "PYTHONPATH")

Checked = tuple[Recipe | None, list[str]]
_idle: list[subprocess.Popen[str]] = []
_idle_lock = threading.Lock()


def check_recipe(text: str, source: str = "editor", timeout_s: float = CHECK_TIMEOUT_S) -> Checked:
    """(recipe, []) when valid, else (None, errors). Blocks up to timeout_s: call it off the
    event loop (check_recipe_async does)."""
    worker = _take_worker()
    try:
        assert worker.stdin is not None and worker.stdout is not None
        worker.stdin.write(json.dumps({"text": text, "source": source}) + "\n")
        worker.stdin.flush()
        if not readable(worker.stdout, timeout_s):
            _stop(worker)
            return None, [f"{source}: validation took longer than {timeout_s:g} s and was stopped"]
        answer = worker.stdout.readline()
    except OSError:
        answer = ""
    if not answer:  # the worker died: out of memory, or killed
        _stop(worker)
        return None, [
            f"{source}: validation stopped without an answer (the recipe may be too large)"
        ]
    _give_back(worker)
    reply = json.loads(answer)
    if reply["errors"]:
        return None, reply["errors"]
    try:  # the canonical form of a recipe that passed (quick to check again), with its text
        return replace(Recipe.from_dict(reply["recipe"], source), text=text), []
    except RecipeError as err:
        return None, err.errors


async def check_recipe_async(
    text: str, source: str = "editor", timeout_s: float = CHECK_TIMEOUT_S
) -> Checked:
    return await asyncio.to_thread(check_recipe, text, source, timeout_s)


def _take_worker() -> subprocess.Popen[str]:
    with _idle_lock:
        while _idle:
            worker = _idle.pop()
            if worker.poll() is None:
                return worker
    env = {k: os.environ[k] for k in _PASS if k in os.environ}
    return subprocess.Popen(
        [sys.executable, "-m", "console.recipe_check"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
        env=env,
    )


def _give_back(worker: subprocess.Popen[str]) -> None:
    with _idle_lock:
        if len(_idle) < MAX_IDLE:
            _idle.append(worker)
            return
    _stop(worker)


def _stop(worker: subprocess.Popen[str]) -> None:
    worker.kill()
    worker.wait()
    for pipe in (worker.stdin, worker.stdout):
        if pipe is not None:
            pipe.close()


def serve() -> None:
    """The worker: one request per line on stdin, one answer per line on stdout."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    for line in sys.stdin:
        request = json.loads(line)
        reply: dict[str, Any]
        try:
            recipe = load_recipe_text(request["text"], source=request["source"])
            reply = {"recipe": recipe.to_dict(), "errors": []}
        except RecipeError as err:
            reply = {"recipe": None, "errors": err.errors}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
