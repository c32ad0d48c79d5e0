"""The checkpoint names a run of every step kind writes, in order, are the ones recorded in
tests/fixtures/checkpoint_names.json. A run parked by an earlier handler resumes on a later one
only if both name and order its checkpoints alike (Absurd replays by name), so any change to the
handler that renames, adds, drops or reorders one fails here. Regenerate the fixture only for a
change that means to break resuming older runs: THREADLINE_RECORD_CHECKPOINTS=1."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from engine_adapter.model.identity import Actor
from engine_adapter.runs import events, gates
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

FIXTURE = Path(__file__).parent.parent / "fixtures" / "checkpoint_names.json"

CHILD = """
slug: names-child
outputs:
  said: steps.say.output
steps:
  - id: say
    run_command: echo "child {{payload.n}}"
"""

RECIPE = """
slug: names-every-kind
outputs:
  last: steps.last.output
steps:
  - id: build
    run_command: echo built
  - id: agent
    dispatch_task: "summarise: {{steps.build.output}}"
  - id: nap
    sleep: 1s
  - id: until
    sleep_until: "{{payload.wake}}"
  - id: deployed
    wait_for_event: names.deployed
    key: "{{payload.sha}}"
    timeout: 60s
  - id: ok
    human_gate: "Ship?"
  - id: skipped
    if: steps.build.status == "failed"
    run_command: echo never
  - id: branch
    if: steps.ok.status == "completed"
    then:
      - id: took-then
        run_command: echo yes
        output: picked
    else:
      - id: took-else
        run_command: echo no
  - id: loop
    repeat:
      - id: probe
        run_command: echo "{{iteration}}"
    until: int(steps.probe.output) >= 2
    max_iterations: 3
  - id: each
    foreach: range(2)
    steps:
      - id: one
        run_command: echo "one {{item}}"
  - id: fanned
    foreach: range(2)
    max_parallel: 2
    steps:
      - id: two
        run_command: echo "two {{item}}"
  - id: group
    parallel:
      left:
        - id: l1
          run_command: echo left
      right:
        - id: r1
          run_command: echo right
  - id: race
    parallel:
      a:
        - id: a1
          run_command: echo a
      b:
        - id: b1
          run_command: sleep 30
    completion: any
  - id: sub
    workflow: names-child
    payload:
      n: 7
  - id: last
    run_command: echo "{{outputs.picked}} {{steps.sub.output}}"
"""


def _names(conn: Any, run_id: str) -> list[str]:
    return [
        r["checkpoint_name"] for r in db.fetch_all(conn, "run_checkpoints", dict(run_id=run_id))
    ]


def _asked(url: str, run_id: str) -> bool:
    view = harness.wait_for_state(url, run_id, ("running", "waiting", "sleeping"))
    return any(e["kind"] == "question" for e in view["thread"])


def test_every_step_kind_writes_the_recorded_checkpoint_names(conn, apply, procs):
    apply(CHILD)
    apply(RECIPE)
    agent = "python3 -c \"import sys; print('AGENT: ' + sys.stdin.read())\""
    procs.start("conductor")
    procs.start("bots", env={"THREADLINE_AGENT_CMD": agent})
    wake = db.fetch_row(conn, "db_now")["now"].isoformat()
    run_id = spawn(conn, "names-every-kind", {"sha": "abc", "wake": wake}).run_id

    harness.wait_for_state(procs.url, run_id, "waiting", timeout=60)  # the event wait
    events.emit(conn, "names.deployed", {"ok": True}, key="abc")
    harness.wait_for(lambda: _asked(procs.url, run_id), 60, what="the gate")
    gates.reply(conn, run_id, "👍 ship it", Actor("alice", "console"))
    harness.wait_for_state(procs.url, run_id, "completed", timeout=120)

    recorded = {"run": _names(conn, run_id)}
    for row in db.fetch_all(conn, "run_checkpoints", dict(run_id=run_id)):
        child = (
            (row["state"] or {}).get("run_id")
            if row["checkpoint_name"].startswith("spawn:")
            else None
        )
        if child and db.fetch_row(conn, "get_run", dict(run_id=child))["state"] == "completed":
            recorded[row["checkpoint_name"]] = _names(conn, child)
    if os.environ.get("THREADLINE_RECORD_CHECKPOINTS"):
        FIXTURE.write_text(json.dumps(recorded, indent=1) + "\n")
    assert recorded == json.loads(FIXTURE.read_text())
