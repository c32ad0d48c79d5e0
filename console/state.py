"""The console's view state, with no Panel imports: what each widget shows, computed from the
read model's dicts. Tested without a browser."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from engine_adapter.model import domain
from engine_adapter.model.names import short_run_id
from engine_adapter.model.vocab import AuthorKind, EntryKind, StepStatus, TriggerKind
from engine_adapter.read import step_report, step_tree
from engine_adapter.read.read_model import RunView
from engine_adapter.recipes import recipe_text
from engine_adapter.recipes.render import as_text

# -- links -----------------------------------------------------------------------------------------


def run_url(run_id: str, step: str | None = None) -> str:
    return f"/run?{urlencode({'id': run_id} | ({'step': step} if step else {}))}"


def recipe_url(slug: str, version: int | None = None) -> str:
    return f"/recipe?{urlencode({'slug': slug} | ({'version': version} if version else {}))}"


def runs_url(params: dict[str, str]) -> str:
    return "/" + (f"?{urlencode(params)}" if params else "")


# -- time ------------------------------------------------------------------------------------------


def parse_time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def seconds_since(value: Any, now: datetime) -> float | None:
    """Seconds from a recorded time (a datetime or its ISO text) to now; None without one."""
    at = parse_time(value)
    return None if at is None else (now - at).total_seconds()


def age_text(seconds: float | None) -> str:
    """'3 s', '4 min', '2 h 5 min', '3 d 4 h' — what a person reads at a glance."""
    if seconds is None:
        return "never"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s < 600 else f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def duration_text(started: Any, finished: Any, now: datetime) -> str:
    start, end = parse_time(started), parse_time(finished)
    if start is None:
        return ""
    seconds = ((end or now) - start).total_seconds()
    if seconds < 10:
        return f"{seconds:.1f} s"
    return age_text(seconds)


# -- the heartbeat badge ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Badge:
    color: str  # green | amber | red
    label: str
    detail: str


def badge(beat: dict[str, Any], now: datetime) -> Badge:
    """Red from the liveness lock (no live conductor), amber when work sits unserved, else green."""
    last = parse_time(beat.get("last_beat_at"))
    age = (
        f"last beat {age_text((now - last).total_seconds())} ago"
        if last
        else "no conductor has ever run"
    )
    if beat["status"] == "down":
        return Badge("red", "Conductor down", age)
    if beat.get("paused"):  # `threadline pause`: said on every page, until unpause
        return Badge("amber", "Paused", f"new runs are refused; runs in flight go on · {age}")
    if beat["status"] == "degraded":
        why = []
        if beat.get("runnable_unclaimed"):
            why.append(f"{beat['runnable_unclaimed']} runnable run(s) unclaimed")
        if beat.get("instructions_waiting") and not any(b["alive"] for b in beat.get("bots", [])):
            why.append(f"{beat['instructions_waiting']} step(s) waiting with no live bot")
        return Badge("amber", "Work waiting", "; ".join(why) + f" · {age}")
    return Badge("green", "Conductor live", age)


# -- the stepper -----------------------------------------------------------------------------------

STATUS_ICONS: dict[StepStatus, str] = {
    StepStatus.PENDING: "○",
    StepStatus.ACTIVE: "◉",
    StepStatus.SLEEPING: "☾",
    StepStatus.WAITING: "⧗",
    StepStatus.GATE: "✋",
    StepStatus.COMPLETED: "✓",
    StepStatus.FAILED: "✗",
    StepStatus.SKIPPED: "–",  # noqa: RUF001 - an en dash on purpose: the glyph of a skipped step
}


def related_runs_html(run: RunView) -> str:
    """Links between runs: the parent a branch or sub-workflow belongs to, the run a rerun came
    from, and the child runs this run's steps started."""
    parts = []
    parent = run.parent
    if parent:
        parts.append(
            f'part of run <a href="{run_url(parent["run_id"], parent.get("step"))}">'
            f"{short_run_id(parent['run_id'])}</a> (step {html.escape(str(parent.get('step')))}, "
            f"{html.escape(str(parent.get('branch')))})"
        )
    trigger = run.trigger or {}
    if trigger.get("kind") == TriggerKind.RERUN:
        parts.append(
            f'rerun of <a href="{run_url(trigger["run_id"])}">{short_run_id(trigger["run_id"])}'
            f"</a> from step {html.escape(str(trigger.get('from')))}"
        )
    children = [
        (n, b)
        for _, n in step_tree.flatten(run.steps)
        for b in n.get("branches") or []
        if b.get("run_id")
    ]
    if children:
        links = ", ".join(
            f'<a href="{run_url(b["run_id"])}">{html.escape(n["id"])}/{html.escape(b["name"])}'
            f"</a> ({html.escape(b['status'])})"
            for n, b in children
        )
        parts.append(f"runs started by its steps: {links}")
    return '<div class="tl-muted" id="tl-related">' + " · ".join(parts) + "</div>" if parts else ""


def tokens_text(tokens: dict[str, Any]) -> str:
    """An agent step's tokens (and cost, where its model has a price) in a few words."""
    text = f"{tokens.get('in', 0):,} tokens in, {tokens.get('out', 0):,} out"
    if tokens.get("cost_usd") is not None:
        text += f" · ${tokens['cost_usd']:.4f}"
    return text


def stepper_rows(run: RunView, now: datetime, highlight: str | None = None) -> list[dict[str, Any]]:
    """One row per step: status (with a countdown while sleeping), attempts, duration, output
    preview; the step a link pointed at is marked ▶."""
    rows = []
    for depth, step in step_tree.flatten(run.steps):
        status = step["status"]
        detail = step.get("reason") or ""
        if status == StepStatus.SLEEPING and run.wake_at:
            left = (run.wake_at - now).total_seconds()
            detail = f"wakes in {age_text(left)}" if left > 0 else "waking"
        elif status == StepStatus.GATE:
            detail = "waiting for a human"
        elif status == StepStatus.WAITING:
            detail = "waiting for an event"
        elif step["kind"] == "branch" and step.get("run_id"):
            detail = f"run {short_run_id(step['run_id'])}"
        elif step.get("winner"):
            detail = "finished first"
        if step.get("tokens"):  # an agent step's model use
            detail = " · ".join(d for d in (detail, tokens_text(step["tokens"])) if d)
        output = step.get("output")
        preview = "" if output is None else as_text(output).strip().splitlines()[-1:] or [""]
        if (
            status == StepStatus.FAILED
            and step["kind"] in domain.BOT_KINDS
            and not step.get("tail")
        ):
            preview = "(no output)"
        indent = "\u2003" * depth  # em spaces: nesting reads as indentation in any font
        rows.append(
            {
                "step": indent + ("▶ " if step["id"] == highlight else "") + step["id"],
                "kind": step["kind"].replace("_", " "),
                "status": f"{STATUS_ICONS.get(status, '')} {status}",
                "detail": detail,
                "attempts": 0
                if status == StepStatus.SKIPPED
                else step.get("attempts")
                or (step.get("tries", 0) if step["kind"] in domain.BOT_KINDS else 0),
                "duration": _duration(step, now),
                "output": (preview[0][:120] if isinstance(preview, list) else preview),
            }
        )
    return rows


def _duration(step: dict[str, Any], now: datetime) -> str:
    """A bot step: each attempt's own time (a retry's wait, or a failed run parked until
    `retry`, is no attempt's); any other step: from its start to its end."""
    attempts = step.get("attempt_list") or []
    if attempts and attempts[-1]["finished_at"] is None:
        return duration_text(attempts[-1]["started_at"], None, now)
    if len(attempts) == 1:
        return step_report.duration_text(attempts[0]["duration_s"])
    if attempts:
        return step_report.attempts_brief(attempts)
    return duration_text(step.get("started_at"), step.get("finished_at"), now)


def step_details_html(run: RunView) -> str:
    """Under the step table: why each failed step failed (its exit, timeout or limit, the last
    lines of its output, each attempt's time) and each agent step's tool calls, with their
    arguments and results (folded: a click opens one)."""
    parts = []
    for _, step in step_tree.flatten(run.steps):
        name = html.escape(step["id"])
        if step.get("status") == StepStatus.FAILED and step["kind"] in domain.BOT_KINDS:
            tail = step.get("tail") or "(the step wrote no output)"
            took = step_report.attempts_text(step.get("attempt_list") or [])
            parts.append(
                f'<div class="tl-why" data-step="{name}" style="{_WHY_STYLE}">'
                f"<b>Step {name} failed: "
                f"{html.escape(step.get('why') or 'no reason given')}</b>"
                + (f' <span class="tl-muted">· took {html.escape(took)}</span>' if took else "")
                + f'<div class="tl-muted">last lines of output</div><pre class="tl-tail">'
                f"{html.escape(tail)}</pre></div>"
            )
        calls = step.get("tool_calls") or []
        if calls:
            items = "".join(_call_html(call) for call in calls)
            parts.append(
                f'<div class="tl-calls" data-step="{name}" style="{_CALLS_STYLE}"><b>Step {name}: '
                f"{len(calls)} tool call{'s' if len(calls) != 1 else ''}</b>{items}</div>"
            )
    return f'<div id="tl-step-details">{"".join(parts)}</div>' if parts else ""


# Marked as the thread marks a failure and a bot's entries, whatever the page's theme.
_WHY_STYLE = "border-left: 3px solid #c0392b; padding: 2px 10px; margin: 6px 0"
_CALLS_STYLE = "border-left: 3px solid #2471a3; padding: 2px 10px; margin: 6px 0"


def _call_html(call: dict[str, Any]) -> str:
    arguments = call["arguments"]
    shown = (
        arguments
        if isinstance(arguments, str)
        else json.dumps(arguments, indent=2, ensure_ascii=False)
    )
    result = call.get("result")
    more = call.get("result_chars", 0) - len(result or "")
    return (
        f'<details class="tl-call"><summary><code>{html.escape(step_report.call_text(call))}'
        f'</code></summary><div class="tl-muted">arguments</div>'
        f'<pre class="tl-call-args">{html.escape(shown)}</pre>'
        f'<div class="tl-muted">result</div><pre class="tl-call-result">'
        f"{html.escape('(no result yet)' if result is None else result)}"
        + (f"\n… {more} more characters" if more > 0 else "")
        + "</pre></details>"
    )


# -- the thread ------------------------------------------------------------------------------------

COLLAPSE_LINES = 12
# An agent's turns and tool results: compact in the thread (a few lines), the rest one click away.
AGENT_COLLAPSE_LINES = 3
AGENT_LABELS = {EntryKind.AGENT_ASSISTANT: "model turn", EntryKind.AGENT_TOOL: "tool result"}


@dataclass(frozen=True)
class EntryView:
    seq: int
    css: str  # author and kind classes
    who: str
    when: str
    text: str
    truncated: bool  # the text arrived cut: the rest loads on demand
    collapsed: bool  # long: shown folded until opened
    fold_at: int = COLLAPSE_LINES  # the lines shown while folded


def entry_view(entry: dict[str, Any]) -> EntryView:
    kind = entry["kind"]
    author_kind = entry["author_kind"]
    who = {
        AuthorKind.SYSTEM: "System",
        AuthorKind.HUMAN: entry["author"],
        AuthorKind.BOT: f"{entry['author']} (bot)",
    }[author_kind]
    if kind.startswith("signal."):
        who += " · " + kind.removeprefix("signal.dispatch.")
    elif kind in (
        EntryKind.INSTRUCTION,
        EntryKind.QUESTION,
        EntryKind.PROGRESS,
        EntryKind.DECISION,
    ):
        who += f" · {kind}"
    elif kind in AGENT_LABELS:
        who += f" · {AGENT_LABELS[kind]}"
    text = entry["text"]
    truncated = entry.get("length", len(text)) > len(text)
    lines = text.count("\n") + 1
    fold_at = AGENT_COLLAPSE_LINES if kind in AGENT_LABELS else COLLAPSE_LINES
    created = parse_time(entry["created_at"])
    return EntryView(
        seq=entry["seq"],
        css=f"tl-entry tl-{author_kind} tl-kind-{kind.replace('.', '-')}",
        who=who,
        when=created.strftime("%H:%M:%S") if created else "",
        text=text,
        truncated=truncated,
        collapsed=truncated or lines > fold_at,
        fold_at=fold_at,
    )


def entry_html(view: EntryView, expanded: bool = False) -> str:
    body = html.escape(view.text)
    if view.collapsed and not expanded:
        first = "\n".join(view.text.splitlines()[: view.fold_at])
        body = html.escape(first) + "\n…"
    return (
        f'<div class="{view.css}" data-seq="{view.seq}">'
        f'<div class="tl-meta"><b>{html.escape(view.who)}</b>'
        f' <span class="tl-when">#{view.seq} · {view.when}</span></div>'
        f'<pre class="tl-text">{body}</pre></div>'
    )


# -- gates -----------------------------------------------------------------------------------------


def gate_deadline_text(deadline: Any, now: datetime) -> str:
    at = parse_time(deadline)
    if at is None:
        return "no timeout"
    left = (at - now).total_seconds()
    return f"times out in {age_text(left)}" if left > 0 else "timing out"


def needs_you_rows(gates: list[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    return [
        {
            "run_id": g["run_id"],
            "workflow": g["workflow"],
            "step": g["step"],
            "gate_key": g["gate_key"],
            "question": (g.get("question") or "").strip(),
            "waiting": age_text(seconds_since(g["waiting_since"], now)),
            "timeout": gate_deadline_text(g.get("deadline"), now),
        }
        for g in gates
    ]


# -- recipes ---------------------------------------------------------------------------------------


def recipe_yaml(recipe: dict[str, Any]) -> str:
    return recipe_text.recipe_yaml(recipe)


def version_diff(
    old: dict[str, Any] | str, new: dict[str, Any] | str, old_label: str, new_label: str
) -> str:
    """Two versions as texts (as written) or documents (rendered); "(no difference)" if alike."""
    return recipe_text.recipe_diff(old, new, old_label, new_label) or "(no difference)"


EMPTY_STATE = """### No runs yet

1. Open **Recipes** and pick a workflow (the examples `hello`, `wait-for-reply` and \
`nightly-check` are installed), or write a new one in the editor.
2. Press **Spawn**: the run opens here as a thread, and the stepper shows each step as it runs.
3. A run that waits at a human gate shows up under **Needs you**; answer it there or in its thread.

From a terminal: `threadline spawn hello --payload '{"name": "you"}'`."""


def gate_takes_decisions(gate: Mapping[str, Any] | None) -> bool:
    """Whether Approve / Deny decide this gate: an `any_reply` gate is released by a reply, and
    buttons there would decide nothing."""
    return gate is not None and gate.get("accept") != "any_reply"
