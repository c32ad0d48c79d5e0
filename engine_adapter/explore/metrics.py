"""Prometheus metrics, in the text exposition format (version 0.0.4), computed from the read
schema's views at each scrape: runs by workflow and state, step and gate-wait durations as
histograms, open and unclaimed steps, runs waiting for a conductor, live processes, retries,
limits hit, agent tokens and cost.

Everything is read from the views, so the numbers equal what connect()'s lists show. A scrape
reads every finished step's duration: its cost grows with the history kept (retention bounds it).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import psycopg

from engine_adapter.model.vocab import AwaitKind
from engine_adapter.store import db

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds: steps run from a second to hours; people answer gates in minutes to days.
STEP_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400)
GATE_BUCKETS = (1, 10, 60, 300, 900, 3600, 14400, 86400, 259200, 604800)

# Histograms: (metric, query, its label columns, its value column, buckets, help).
HISTOGRAMS: tuple[tuple[str, str, tuple[str, ...], str, tuple[float, ...], str], ...] = (
    (
        "threadline_step_duration_seconds",
        "metrics_step_durations",
        ("workflow", "kind", "outcome"),
        "duration_s",
        STEP_BUCKETS,
        "Finished step tries' durations (bot steps: sent to result; gates: asked to decided).",
    ),
    (
        "threadline_gate_wait_seconds",
        "metrics_gate_waits",
        ("workflow", "decision"),
        "wait_s",
        GATE_BUCKETS,
        "How long decided gates waited for a person.",
    ),
)

# Counters by workflow: (metric, query, its column, help).
PER_WORKFLOW = (
    (
        "threadline_step_retries_total",
        "metrics_retries",
        "step_retries",
        "Step tries after a step's first.",
    ),
    (
        "threadline_attempt_retries_total",
        "metrics_retries",
        "attempt_retries",
        "Bot attempts after a try's first.",
    ),
    (
        "threadline_agent_cost_usd_total",
        "metrics_tokens",
        "cost_usd",
        "Agent model cost in US dollars (priced models only).",
    ),
    ("threadline_agent_turns_total", "metrics_tokens", "turns", "Agent model turns."),
)


def _labels(**labels: Any) -> str:
    def esc(v: Any) -> str:
        return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    inner = ",".join(f'{k}="{esc(v)}"' for k, v in labels.items() if v is not None)
    return "{" + inner + "}" if inner else ""


def _num(v: float) -> str:
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


class Exposition:
    """Metric families, each with its HELP and TYPE lines once."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_: str) -> None:
        self.lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float, **labels: Any) -> None:
        self.lines.append(f"{name}{_labels(**labels)} {_num(value)}")

    def histogram(
        self, name: str, buckets: tuple[float, ...], values: list[float], **labels: Any
    ) -> None:
        ordered = sorted(values)
        for le in buckets:
            # values <= le: bisect_left of the first value above le
            below = bisect_left(ordered, le + 1e-12)
            self.sample(f"{name}_bucket", below, **labels, le=_num(le))
        self.sample(f"{name}_bucket", len(ordered), **labels, le="+Inf")
        self.sample(f"{name}_sum", sum(ordered), **labels)
        self.sample(f"{name}_count", len(ordered), **labels)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _grouped(rows: Iterable[dict[str, Any]], keys: tuple[str, ...], value: str) -> dict:
    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in keys)].append(float(r[value]))
    return groups


def render(conn: psycopg.Connection[Any]) -> str:
    """The metrics now, as the text a Prometheus scrape reads."""
    out = Exposition()
    out.family("threadline_runs", "gauge", "Runs by workflow and state.")
    for r in db.fetch_all(conn, "metrics_runs"):
        out.sample("threadline_runs", r["n"], workflow=r["workflow"], state=r["state"])

    for name, query, keys, column, buckets, help_ in HISTOGRAMS:
        out.family(name, "histogram", help_)
        rows = db.fetch_all(conn, query)
        for group, values in sorted(_grouped(rows, keys, column).items()):
            out.histogram(name, buckets, values, **dict(zip(keys, group, strict=True)))

    waiting = {r["kind"]: r for r in db.fetch_all(conn, "metrics_waiting")}
    out.family("threadline_steps_open", "gauge", "Step tries waited for now, by kind (bot, gate).")
    for kind in (AwaitKind.BOT, AwaitKind.GATE):
        out.sample("threadline_steps_open", waiting.get(kind, {}).get("open", 0), kind=kind)
    out.family(
        "threadline_instructions_unclaimed",
        "gauge",
        "Bot steps sent and runnable that no bot process has claimed yet.",
    )
    out.sample("threadline_instructions_unclaimed", waiting.get("bot", {}).get("unclaimed", 0))
    out.family(
        "threadline_runs_unclaimed",
        "gauge",
        "Runs ready for a conductor (new, woken, or done sleeping) that none has taken up yet.",
    )
    out.sample("threadline_runs_unclaimed", db.fetch_row(conn, "metrics_runs_unclaimed")["n"])

    alive = {r["kind"]: r["alive"] for r in db.fetch_all(conn, "metrics_workers")}
    out.family("threadline_processes_alive", "gauge", "Live conductor and bot processes.")
    for process in ("conductor", "bots"):
        out.sample("threadline_processes_alive", alive.get(process, 0), kind=process)

    per_query = {q: db.fetch_all(conn, q) for q in ("metrics_retries", "metrics_tokens")}
    out.family("threadline_agent_tokens_total", "counter", "Agent model tokens, in and out.")
    for r in per_query["metrics_tokens"]:
        for direction in ("in", "out"):
            out.sample(
                "threadline_agent_tokens_total",
                r[f"tokens_{direction}"],
                workflow=r["workflow"],
                direction=direction,
            )
    for name, query, column, help_ in PER_WORKFLOW:
        out.family(name, "counter", help_)
        for r in per_query[query]:
            out.sample(name, r[column], workflow=r["workflow"])

    out.family(
        "threadline_sandbox_limits_hit_total",
        "counter",
        "Bot attempts a limit ended (memory, pids, cpu, tmp, timeout) or whose output was cut "
        "(output).",
    )
    for r in db.fetch_all(conn, "metrics_limits"):
        out.sample(
            "threadline_sandbox_limits_hit_total",
            r["n"],
            workflow=r["workflow"],
            limit=r["limit_hit"],
        )
    return out.text()
