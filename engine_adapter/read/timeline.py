"""A run as a waterfall: one row per step try and bot attempt, sleep, gate wait and event wait,
each with its start and end on the database clock, nested under the blocks, loop iterations and
child runs (parallel branches, foreach items, sub-workflows) that hold them.

Read from the step tree (step_tree.py), so the run page, `show --json` and the notebooks agree on
what happened; the console draws these rows (console/waterfall.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

from engine_adapter.model import domain
from engine_adapter.model.vocab import AttemptOutcome, StepStatus
from engine_adapter.read.step_tree import StepNode

# Rows whose bar is still growing: what a run is doing now.
LIVE = frozenset(
    {
        StepStatus.ACTIVE,
        StepStatus.SLEEPING,
        StepStatus.GATE,
        StepStatus.WAITING,
        AttemptOutcome.RUNNING,
    }
)
MAX_ROWS = 400  # a foreach over thousands of items: the first rows, and a count of the rest
# Statuses that never started: no row.
NOT_STARTED = frozenset({StepStatus.PENDING, StepStatus.SKIPPED, StepStatus.CARRIED_OVER})
KIND_WORDS: dict[str, str] = {
    domain.CONDITIONAL: "if",
    domain.PARALLEL: "parallel",
    domain.FOREACH: "foreach",
    domain.REPEAT: "repeat",
    domain.WORKFLOW: "workflow",
    domain.SLEEP: "sleep",
    domain.SLEEP_UNTIL: "sleep",
    domain.HUMAN_GATE: "human gate",
    domain.WAIT_FOR_EVENT: "event",
    domain.RUN_COMMAND: "command",
    domain.DISPATCH_TASK: "agent",
}


@dataclass(frozen=True)
class Row:
    """One line of the waterfall. `kind`: the step's kind, or "attempt", "iteration", "branch".
    `finished_at` None with `open`: still going (the bar grows to now); None without: unknown."""

    key: str
    label: str
    depth: int
    kind: str
    status: str
    started_at: datetime | None
    finished_at: datetime | None
    open: bool
    note: str = ""
    run_id: str | None = None  # a child run's row: where its own page is


def rows(steps: Sequence[StepNode], max_rows: int = MAX_ROWS) -> tuple[list[Row], int]:
    """The waterfall's rows of a step tree in drawing order, and how many more were left out."""
    out: list[Row] = []
    _rows(cast(list[dict[str, Any]], steps), 0, "", out)
    return out[:max_rows], max(0, len(out) - max_rows)


def _time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def _rows(steps: list[dict[str, Any]], depth: int, scope: str, out: list[Row]) -> None:
    for node in steps:
        if node["status"] in NOT_STARTED:
            continue
        key = f"{scope}{node.get('path') or node['id']}"
        if node["kind"] in domain.BOT_KINDS and node.get("attempt_list"):
            _attempt_rows(node, depth, key, out)
            continue
        head = len(out)
        out.append(_node_row(node, depth, key))
        for block in node.get("blocks") or []:
            if block["taken"]:
                _rows(block["steps"], depth + 1, f"{key}/{block['name']}:", out)
        for it in node.get("iterations") or []:
            _group(
                f"iteration {it['n']}", "iteration", it["steps"], depth + 1, f"{key}#{it['n']}", out
            )
        for branch in node.get("branches") or []:
            label = _branch_label(node, branch)
            _group(
                label,
                "branch",
                branch.get("steps") or [],
                depth + 1,
                f"{key}@{branch['name']}",
                out,
                status=branch["status"],
                run_id=branch.get("run_id"),
            )
        _close_from_inside(out, head)


def _node_row(node: dict[str, Any], depth: int, key: str) -> Row:
    status = node["status"]
    word = KIND_WORDS.get(node["kind"], node["kind"])
    tries = node.get("tries") or 0
    note = f"{word} · {status}" + (f" · {tries} tries" if tries > 1 else "")
    if node.get("reason") and status == StepStatus.FAILED:
        note += f" · {node['reason']}"
    return Row(
        key=key,
        label=node["id"],
        depth=depth,
        kind=node["kind"],
        status=status,
        started_at=_time(node.get("started_at")),
        finished_at=_time(node.get("finished_at")),
        open=status in LIVE and node.get("finished_at") is None,
        note=note,
        run_id=node.get("child_run"),
    )


def _attempt_rows(node: dict[str, Any], depth: int, key: str, out: list[Row]) -> None:
    """A bot step: a row per attempt, each its own bar (a retry's wait is no attempt's)."""
    attempts = node["attempt_list"]
    tries = {a["try"] for a in attempts}
    for a in attempts:
        if len(attempts) == 1:
            label = node["id"]
        elif len(tries) > 1:
            label = f"{node['id']} · try {a['try']} · attempt {a['attempt']}"
        else:
            label = f"{node['id']} · attempt {a['attempt']}"
        status = a["status"]
        note = f"{KIND_WORDS.get(node['kind'], node['kind'])} · {status}"
        if a.get("why"):
            note += f" · {a['why']}"
        out.append(
            Row(
                key=f"{key}:{a['try']}.{a['attempt']}",
                label=label,
                depth=depth,
                kind=node["kind"] if len(attempts) == 1 else "attempt",
                status=status,
                started_at=_time(a["started_at"]),
                finished_at=_time(a["finished_at"]),
                open=status == AttemptOutcome.RUNNING and a["finished_at"] is None,
                note=note,
            )
        )


def _branch_label(node: dict[str, Any], branch: dict[str, Any]) -> str:
    if node["kind"] == domain.WORKFLOW:
        return "child run"
    if node["kind"] == domain.FOREACH:
        return f"item {branch['name']}"
    return f"branch {branch['name']}" + (" (finished first)" if branch.get("winner") else "")


def _group(
    label: str,
    kind: str,
    steps: list[dict[str, Any]],
    depth: int,
    key: str,
    out: list[Row],
    status: str | None = None,
    run_id: str | None = None,
) -> None:
    """A header row (an iteration, a child run) spanning what its steps did, then the steps."""
    head = len(out)
    out.append(
        Row(
            key=key,
            label=label,
            depth=depth,
            kind=kind,
            status=status or StepStatus.PENDING,
            started_at=None,
            finished_at=None,
            open=False,
            note=f"{label} · {status}" if status else label,
            run_id=run_id,
        )
    )
    _rows(steps, depth + 1, f"{key}/", out)
    _close_from_inside(out, head, status)


def _close_from_inside(out: list[Row], head: int, status: str | None = None) -> None:
    """A header's start, end and status where it has none of its own: from the rows under it."""
    row, inner = out[head], out[head + 1 :]
    inner = [r for r in inner if r.depth == row.depth + 1]
    starts = [r.started_at for r in inner if r.started_at]
    ends = [r.finished_at for r in inner if r.finished_at]
    still = any(r.open for r in inner)
    started = row.started_at or min(starts, default=None)
    finished = row.finished_at
    if finished is None and not still and not row.open and inner and len(ends) == len(inner):
        finished = max(ends)
    own = status or row.status
    if row.kind == "iteration":
        own = next((r.status for r in inner if r.open), None) or (
            next((r.status for r in inner if r.status == StepStatus.FAILED), None)
            or (StepStatus.COMPLETED if finished else StepStatus.ACTIVE)
        )
    out[head] = replace(
        row,
        status=own,
        started_at=started,
        finished_at=finished,
        open=(row.open or still) and finished is None,
        note=row.note if status or row.kind != "iteration" else f"{row.label} · {own}",
    )
