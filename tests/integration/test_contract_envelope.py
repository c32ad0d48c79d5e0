"""The runtime contract where it meets the rest: docs/cli.md's `threadline run` example runs as
written; `threadline recipe hash` prints the hash `run` pins; `validate` takes a slug as `run`
does; a run of an unpinned slug says so in the envelope; every step that runs is said as
step.started before it ends, however quickly it ends."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_contract import TWO_STEPS, call

from engine_adapter.model.settings import DATABASE_URL_ENV
from engine_adapter.testing import harness

ROOT = Path(__file__).resolve().parents[2]
ENDS = ("step.completed", "step.failed", "step.cancelled")


def readme_example() -> str:
    """The first bash block of the runtime contract section of docs/cli.md."""
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text[text.index("### The runtime contract") :]
    found = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert found, "the runtime contract section has no bash example"
    return found.group(1)


def envelopes(stdout: str) -> list[dict]:
    """Each JSON envelope printed (one per `threadline run`), other lines skipped."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (start := stdout.find("{\n", at)) != -1:
        value, at = decoder.raw_decode(stdout, start)
        found.append(value)
    return found


@pytest.fixture
def running(procs):
    procs.start("conductor")
    procs.start("bots")
    return procs


def test_the_readme_example_runs_as_written(db_url, running):
    env = dict(os.environ, **{DATABASE_URL_ENV: db_url})
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", readme_example()],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    unpinned, pinned = envelopes(done.stdout)
    for envelope in (unpinned, pinned):
        assert envelope["status"] == "needs_approval", envelope
        assert envelope["requires_approval"]["step"] == "approve"
    assert "threadline recipe hash nightly-check" in unpinned["warnings"][0]
    assert "warnings" not in pinned
    hashed = harness.run_cli(db_url, "recipe", "hash", "nightly-check")
    assert hashed.stdout.strip() in unpinned["warnings"][0]


def test_recipe_hash_validate_of_a_slug_and_a_stale_pin(db_url, apply, running, tmp_path):
    apply(TWO_STEPS)
    printed = harness.run_cli(db_url, "recipe", "hash", "two")
    assert printed.returncode == 0 and re.fullmatch(r"sha256:[0-9a-f]{64}\n", printed.stdout)
    digest = printed.stdout.strip()
    recipe_file = tmp_path / "two.yaml"
    recipe_file.write_text(TWO_STEPS)
    assert harness.run_cli(db_url, "recipe", "hash", str(recipe_file)).stdout.strip() == digest
    # validate takes what run takes: the slug (its current version) as well as the recipe.
    by_slug, _, code = call(db_url, "validate", {"workflow": "two"})
    assert code == 0 and by_slug["status"] == "valid" and by_slug["workflow_hash"] == digest
    by_text, _, _ = call(db_url, "validate", {"workflow": TWO_STEPS})
    assert by_text["workflow_hash"] == digest
    unknown, _, code = call(db_url, "validate", {"workflow": "no-such-flow"})
    assert code == 10 and unknown["status"] == "invalid" and "no-such-flow" in unknown["errors"][0]
    missing = harness.run_cli(db_url, "recipe", "hash", "no-such-flow")
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    unread = harness.run_cli(db_url, "recipe", "hash", "gone.yaml")
    assert unread.returncode == 10 and "gone.yaml: cannot read" in unread.stderr
    # So does the CLI's validate: a slug that is no file here is the workflow's current version.
    checked = harness.run_cli(db_url, "recipe", "validate", "two")
    assert checked.returncode == 0 and checked.stdout == f"two: valid ({digest[7:19]})\n"
    unknown_cli = harness.run_cli(db_url, "recipe", "validate", "no-such-flow")
    assert unknown_cli.returncode == 2 and "no-such-flow" in unknown_cli.stderr
    # A stale pin says what the hash is now and where to get it.
    stale = "sha256:" + "0" * 64
    refused, _, code = call(db_url, "run", {"workflow": "two", "workflow_hash": stale})
    message = refused["error"]["message"]
    assert code == 20 and digest in message and "threadline recipe hash two" in message
    request = {"workflow": "two", "workflow_hash": digest, "payload": {"who": "p"}}
    pinned, _, code = call(db_url, "run", request)
    assert code == 0 and pinned["status"] == "ok" and "warnings" not in pinned
    unpinned, _, _ = call(db_url, "run", {"workflow": "two", "payload": {"who": "x"}})
    assert digest in unpinned["warnings"][0] and "two v1" in unpinned["warnings"][0]


def test_every_step_that_runs_is_said_to_start_before_it_ends(db_url, apply, running):
    apply(TWO_STEPS)
    for n in range(3):  # instant steps: each ends between two of the follower's looks
        envelope, events, code = call(
            db_url, "run", {"workflow": "two", "payload": {"who": str(n)}}
        )
        assert code == 0 and envelope["status"] == "ok"
        said = [(e["type"], e.get("step"), e.get("attempt")) for e in events]
        for step in ("one", "two"):
            started = said.index(("step.started", step, 1))
            ended = said.index(("step.completed", step, 1))
            assert started < ended, said
            assert sum(1 for s in said if s[:2] == ("step.started", step)) == 1, said
