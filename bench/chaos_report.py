"""What the chaos benchmark found: runs lost, duplicate instructions, and side effects compared
with the attempts each step's thread shows (a repeat the thread shows is visible; one it does not
is invisible, and must never happen)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

_BLOCK = re.compile(r"^-- (\w+) --\n", re.MULTILINE)


def named_queries(path: Path) -> dict[str, str]:
    """Named SQL blocks as in a part's queries.sql: `-- name --`, a comment line, then the
    query."""
    parts = _BLOCK.split(path.read_text())
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


QUERIES = named_queries(Path(__file__).with_name("chaos.sql"))


@dataclass(frozen=True)
class StepTally:
    step_key: str
    attempts_shown: int  # the highest attempt the step's thread shows
    effects: int  # lines the step's command appended
    completed: bool


@dataclass(frozen=True)
class Duplicates:
    visible: int  # repeats the thread shows as a second (or later) attempt
    invisible: int  # repeats beyond the attempts the thread shows
    missing: int  # completed steps whose side effect is absent


def classify(tallies: Iterable[StepTally]) -> Duplicates:
    visible = invisible = missing = 0
    for t in tallies:
        visible += max(0, min(t.effects, t.attempts_shown) - 1)
        invisible += max(0, t.effects - max(t.attempts_shown, 1))
        missing += t.completed and t.effects == 0
    return Duplicates(visible, invisible, missing)


def count_effects(path: Path) -> Counter[str]:
    """Lines per step key in the side-effect file (each line is the step key of one attempt)."""
    if not path.exists():
        return Counter()
    return Counter(line.strip() for line in path.read_text().splitlines() if line.strip())


@dataclass(frozen=True)
class ChaosReport:
    runs: int
    completed: int
    failed: int
    missing: int  # spawned, yet no run row
    steps: int
    duplicate_instructions: int
    duplicate_terminals: int
    attempts: int
    attempts_lost: int  # attempts whose bot was killed
    effects: int
    duplicates: Duplicates
    stray_effects: int  # lines naming no step key of these runs
    run_span_s: float | None

    @property
    def lost(self) -> int:
        return self.runs - self.completed

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicate_instructions
            or self.duplicate_terminals
            or self.duplicates.invisible
            or self.duplicates.missing
            or self.stray_effects
        )

    def lines(self) -> list[str]:
        d = self.duplicates
        rate = f"{self.runs / self.run_span_s:.2f} runs/s" if self.run_span_s else "-"
        return figure_lines(
            [
                ("runs completed", f"{self.completed}/{self.runs}"),
                (
                    "runs lost",
                    (
                        f"{self.lost}  (failed {self.failed}, missing {self.missing},"
                        " the rest unfinished at the deadline)"
                    ),
                ),
                (
                    "duplicate instructions",
                    (
                        f"{self.duplicate_instructions}"
                        f"  (duplicate final results {self.duplicate_terminals})"
                    ),
                ),
                (
                    "bot attempts",
                    (
                        f"{self.attempts} for {self.steps} steps"
                        f"  ({self.attempts_lost} lost with a killed bot)"
                    ),
                ),
                ("side effects", f"{self.effects} for {self.steps} steps"),
                (
                    "duplicate side effects",
                    (
                        f"{d.visible + d.invisible} = {d.visible} visible"
                        f" (a later attempt in the thread) + {d.invisible} invisible"
                    ),
                ),
                (
                    "side effects missing",
                    (
                        f"{d.missing}  (completed steps without their line;"
                        f" stray lines {self.stray_effects})"
                    ),
                ),
                (
                    "throughput",
                    f"{rate}  (first spawn to last run's end; spawns are spread over the kills)",
                ),
            ]
        )


def figure_lines(figures: list[tuple[str, str]]) -> list[str]:
    return [f"{label:<24}{value}" for label, value in figures]


def collect(conn: psycopg.Connection[Any], run_ids: list[str], effects_path: Path) -> ChaosReport:
    params = {"run_ids": run_ids}
    states = {r["state"]: r["runs"] for r in conn.execute(QUERIES["chaos_run_states"], params)}
    steps = conn.execute(QUERIES["chaos_steps"], params).fetchall()
    claims = conn.execute(QUERIES["chaos_claims"], params).fetchone()
    span = conn.execute(QUERIES["chaos_run_span"], params).fetchone()["seconds"]
    effects = count_effects(effects_path)
    tallies = [
        StepTally(s["step_key"], s["attempts_shown"], effects[s["step_key"]], s["completed"])
        for s in steps
    ]
    known = {s["step_key"] for s in steps}
    return ChaosReport(
        runs=len(run_ids),
        completed=states.get("completed", 0),
        failed=states.get("failed", 0),
        missing=len(run_ids) - sum(states.values()),
        steps=len(steps),
        duplicate_instructions=sum(s["instructions"] - 1 for s in steps),
        duplicate_terminals=sum(max(0, s["terminals"] - 1) for s in steps),
        attempts=claims["attempts"],
        attempts_lost=claims["lost"],
        effects=sum(effects.values()),
        duplicates=classify(tallies),
        stray_effects=sum(n for key, n in effects.items() if key not in known),
        run_span_s=span if states.get("completed") == len(run_ids) else None,
    )
