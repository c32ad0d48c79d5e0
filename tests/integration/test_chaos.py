"""The chaos benchmark's instruments, on real processes: its verdict catches a side effect that
no attempt in the thread explains, and a tiny chaos run loses nothing and leaves nothing running."""

from __future__ import annotations

from pathlib import Path

from bench.chaos import EFFECTS_FILE, SLUG, ChaosSizes, recipe_text, run_chaos
from bench.chaos_report import collect
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness


def test_a_side_effect_beyond_the_attempts_shown_is_caught(conn, apply, procs, tmp_path: Path):
    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o777)
    workdir.chmod(0o777)  # steps may run as an unprivileged user
    apply(recipe_text(workdir))
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, SLUG).run_id
    harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    effects = workdir / EFFECTS_FILE

    clean = collect(conn, [run_id], effects)
    assert clean.ok and clean.steps == 3 and clean.effects == 3, clean.lines()
    assert (clean.duplicates.visible, clean.duplicates.invisible) == (0, 0)

    # The same step's line once more, with no second attempt in its thread.
    first = effects.read_text().splitlines()[0]
    with effects.open("a") as out:
        out.write(first + "\n")
    caught = collect(conn, [run_id], effects)
    assert caught.duplicates.invisible == 1 and caught.duplicates.visible == 0
    assert not caught.ok


def test_a_tiny_chaos_run_loses_nothing_and_leaves_no_process(db_url: str, conn, tmp_path: Path):
    sizes = ChaosSizes(runs=4, kills=3, conductors=2, bots=2, kill_every_s=0.5, timeout_s=60)
    outcome = run_chaos(db_url, tmp_path, sizes, seed=7, progress=lambda _: None)
    report = outcome.report
    assert outcome.ok, "\n".join(outcome.lines())
    assert sum(outcome.kills.values()) == 3
    assert (report.completed, report.steps, report.lost) == (4, 12, 0)
    assert report.effects == 12 + report.duplicates.visible
    # The server drops a killed process's liveness lock as soon as it sees the connection close.
    harness.wait_for(
        lambda: harness.alive_count(conn, "conductor") + harness.alive_count(conn, "bots") == 0,
        timeout=5,
        what="every conductor and bot process to be gone",
    )
