"""The notebooks' frames: steps, thread, step tries, attempts, done events, engine rows and the
timeline, read from real runs driven by real conductor and bot processes."""

from __future__ import annotations

import pandas as pd

from engine_adapter.model.identity import Actor
from engine_adapter.runs import gates
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import frames, harness

EVERY_KIND = """
slug: framed
steps:
  - id: build
    run_command: echo built
  - id: nap
    sleep: 1s
  - id: ask
    human_gate: Go?
  - id: after
    run_command: echo after {{steps.ask.output}}
"""


def test_frames_of_a_run_through_every_step_kind(conn, apply, procs):
    apply(EVERY_KIND)
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "framed").run_id
    harness.wait_for_state(procs.url, run_id, "waiting")
    gates.reply(conn, run_id, "👍 go", Actor("alice", "console"))
    harness.wait_for_state(procs.url, run_id, "completed")

    steps = frames.steps_frame(conn, run_id)
    assert list(steps.columns[:6]) == frames.STEP_COLUMNS
    assert list(steps["id"]) == ["build", "nap", "ask", "after"]
    assert list(steps["status"]) == ["completed"] * 4 and list(steps["attempts"]) == [1, 0, 0, 1]

    thread = frames.thread_frame(conn, run_id)
    assert list(thread.columns) == frames.THREAD_COLUMNS
    assert list(thread["seq"]) == list(range(1, len(thread) + 1))
    assert thread["created_at"].is_monotonic_increasing
    assert str(thread["created_at"].dtype).startswith("datetime64")
    assert list(thread.loc[thread["kind"] == "instruction", "step"]) == ["build", "after"]
    assert thread.loc[thread["author_kind"] == "human", "text"].tolist() == ["👍 go"]

    tries = frames.step_tries_frame(conn, run_id).set_index("step")
    assert list(tries.index) == ["build", "nap", "ask", "after"]
    assert list(tries["outcome"]) == ["completed", "slept", "approve", "completed"]
    assert (tries["ended_at"] >= tries["sent_at"]).all()
    assert (tries.loc["nap", "ended_at"] - tries.loc["nap", "sent_at"]).total_seconds() >= 0.99

    events = frames.events_frame(conn, run_id)
    assert list(events["step"]) == ["build", "ask", "after"] and list(events["try"]) == [1, 1, 1]
    assert events["step_key"].is_unique

    engine = frames.engine_frame(conn, run_id)
    assert engine["state"].iloc[-1] == "completed"

    timeline = frames.timeline_frame(conn, run_id)
    assert list(timeline.columns) == frames.TIMELINE_COLUMNS
    assert list(timeline["lane"]) == [
        f"conductor 1 (pid {procs.procs[0].pid})",
        f"bots 1 (pid {procs.procs[1].pid})",
        "step build",
        "step build · attempt 1",
        "step nap",
        "step ask",
        "step after",
        "step after · attempt 1",
    ]
    assert (timeline["finish"] >= timeline["start"]).all()
    assert timeline["start"].dt.tz is not None

    kill_mark = pd.Timestamp(tries.loc["ask", "sent_at"])
    fig = frames.timeline_figure(conn, run_id, marks={"asked": kill_mark})
    diamonds = [t for t in fig.data if t.name == "done event"]
    assert len(diamonds) == 1 and list(diamonds[0].y) == ["step build", "step ask", "step after"]
    assert [a.text for a in fig.layout.annotations] == ["asked"]
    assert pd.Timestamp(fig.layout.shapes[0].x0) == kill_mark.tz_convert("UTC").tz_localize(None)


def test_timeline_of_a_run_whose_conductor_died_mid_step(conn, apply, procs, tmp_path):
    apply("""
slug: long-step
steps:
  - id: work
    run_command: touch {{payload.dir}}/started && sleep 60
""")
    conductor = procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "long-step", {"dir": str(tmp_path)}).run_id
    harness.wait_for(lambda: (tmp_path / "started").exists(), what="the step's command to start")
    # While the run awaits the bot, the engine stores its wake-up as infinity: read as empty.
    awaiting = harness.wait_for(
        lambda: frames.engine_frame(conn, run_id).query("state == 'sleeping'").to_dict("records"),
        what="the engine run to await the step",
    )[0]
    assert pd.isna(awaiting["available_at"]) and pd.isna(awaiting["claimed_by"])
    harness.kill(conductor)
    harness.wait_for(
        lambda: harness.alive_count(conn, "conductor") == 0, what="the conductor to show as dead"
    )

    workers = frames.workers_frame(conn, run_id).set_index("kind")
    assert not workers.loc["conductor", "alive"] and workers.loc["bots", "alive"]
    timeline = frames.timeline_frame(conn, run_id).set_index("lane")
    dead = timeline.loc[f"conductor 1 (pid {conductor.pid})"]
    assert dead["outcome"] == "dead"
    assert dead["finish"] == pd.Timestamp(
        workers.loc["conductor", "last_beat_at"]
    )  # its last heartbeat
    assert timeline.loc["step work", "outcome"] == "open"
    assert timeline.loc["step work · attempt 1", "outcome"] == "running"
    assert frames.events_frame(conn, run_id).empty


def test_engine_frame_of_a_sleeping_run_shows_no_lease(conn, apply, procs):
    apply("""
slug: sleeper
steps:
  - id: nap
    sleep: 1h
""")
    procs.start("conductor")
    run_id = spawn(conn, "sleeper").run_id
    harness.wait_for_state(procs.url, run_id, "sleeping")
    row = harness.wait_for(
        lambda: frames.engine_frame(conn, run_id).query("state == 'sleeping'").to_dict("records"),
        what="the engine run to sleep",
    )[0]
    assert pd.isna(row["claimed_by"]) and pd.isna(row["claim_expires_at"])
    wake = frames.step_tries_frame(conn, run_id)
    assert wake["outcome"].isna().all() and wake["ended_at"].isna().all()  # not woken yet
    assert (row["available_at"] - wake["sent_at"].iloc[0]).total_seconds() > 3500


def test_schedule_slots_frame_lists_each_slot_with_its_run(conn, apply):
    from datetime import timedelta

    from engine_adapter.catalog import workflows
    from engine_adapter.recipes.cron import Schedule
    from engine_adapter.runs import schedules

    slug = apply("""
slug: minutely
schedule: "* * * * *"
steps:
  - id: stamp
    run_command: echo stamp
""")
    assert frames.schedule_slots_frame(conn, slug).empty
    first = Schedule("* * * * *").next_after(
        workflows.get_workflow(conn, slug)["schedule_enabled_at"]
    )
    fired = [
        f
        for at in (first, first + timedelta(minutes=1), first + timedelta(minutes=1, seconds=5))
        for f in schedules.tick(conn, at + timedelta(seconds=1))
    ]
    slots = frames.schedule_slots_frame(conn, slug)
    assert list(slots.columns) == ["slot", "run_id", "skipped"]
    assert list(slots["slot"]) == [first, first + timedelta(minutes=1)]
    assert [str(r) for r in slots["run_id"]] == [f.run_id for f in fired]
    assert list(slots["skipped"]) == [0, 0]


NESTED = """
slug: framed-tree
steps:
  - id: pick
    if: payload.n > 1
    then:
      - id: big
        run_command: echo big
    else:
      - id: small
        run_command: echo small
  - id: race
    parallel:
      fast:
        - id: fast
          run_command: echo fast
      slow:
        - id: slow
          run_command: sleep 30
    completion: any
"""


def test_tree_frame_draws_branches_and_child_runs_indented(conn, apply, procs):
    apply(NESTED)
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "framed-tree", {"n": 2}).run_id
    harness.wait_for_state(procs.url, run_id, "completed")

    tree = frames.tree_frame(conn, run_id)
    assert list(tree.columns) == frames.TREE_COLUMNS
    rows = {r["step"] + "/" + r["kind"]: r for r in tree.to_dict("records")}
    drawn = [(r["depth"], r["step"], r["status"]) for r in tree.to_dict("records")]
    assert drawn[:-1] == [
        (0, "pick", "completed"),
        (1, "then", "completed"),
        (2, "big", "completed"),
        (1, "else", "skipped"),
        (2, "small", "skipped"),
        (0, "race", "completed"),
        (1, "fast", "completed"),
        (2, "fast", "completed"),
        (1, "slow", "cancelled"),
    ]
    assert drawn[-1][:2] == (2, "slow")  # a stopped step; how it shows is not the claim here
    assert rows["pick/conditional"]["output"] == "then"
    assert pd.isna(rows["pick/conditional"]["attempts"])  # a block: no bot attempts
    assert rows["then/branch"]["detail"] == "taken" and rows["else/branch"]["detail"] == "not taken"
    assert rows["small/run_command"]["detail"] == "the then branch was taken"
    assert rows["big/run_command"]["attempts"] == 1 and rows["big/run_command"]["output"] == "big"
    assert rows["fast/branch"]["detail"].endswith("· finished first")
    assert "finished first" not in rows["slow/branch"]["detail"]

    lines = frames.tree_text(tree).splitlines()
    assert lines[0].startswith("pick ") and lines[2].startswith("    big ")
    assert "1 attempt · big" in lines[2] and "attempt" not in lines[0]
