"""The run page's waterfall: a bar per step try and attempt, sleep and wait, from its start to its
end on the database clock, coloured by outcome; a bar still going grows to `now` (the database's,
from the live feed's beat) and is striped.

Plain HTML and CSS, drawn here on the server: no script, nothing fetched.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from datetime import datetime

from engine_adapter.model.vocab import AttemptOutcome, RunState, StepStatus
from engine_adapter.read.timeline import Row

from .charts import STATE_COLORS
from .state import run_url

COLORS: dict[str, str] = {
    **{str(state): color for state, color in STATE_COLORS.items()},
    StepStatus.ACTIVE: STATE_COLORS[RunState.RUNNING],
    StepStatus.GATE: STATE_COLORS[RunState.WAITING],
    AttemptOutcome.LOST: "#bc4c00",
    StepStatus.SKIPPED: "#d0d7de",
}
GROUP_KINDS = ("iteration", "branch")
LABEL_PX, INDENT_PX = 260, 14
MIN_BAR_PCT = 0.4  # a step of a few milliseconds in a run of minutes still shows
NICE_STEPS_S: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60)
NICE_STEPS_S += (120, 300, 600, 900, 1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400)
NICE_STEPS_S += (2 * 86400, 7 * 86400)
TICKS = 6

STYLE = f"""<style>
.tl-wf {{ font-size: 12px; width: 100%; }}
.tl-wf-row {{ display: flex; align-items: center; height: 20px; }}
.tl-wf-row:hover {{ background: rgba(9, 105, 218, 0.06); }}
.tl-wf-label {{ flex: 0 0 {LABEL_PX}px; overflow: hidden; white-space: nowrap;
  text-overflow: ellipsis; box-sizing: border-box; }}
.tl-wf-track {{ position: relative; flex: 1 1 auto; height: 14px; }}
.tl-wf-bar {{ position: absolute; top: 2px; height: 10px; border-radius: 2px; min-width: 2px; }}
.tl-wf-group .tl-wf-bar {{ top: 5px; height: 4px; opacity: 0.55; }}
.tl-wf-group .tl-wf-label {{ color: #57606a; }}
.tl-wf-open {{ background-image: repeating-linear-gradient(45deg, rgba(255,255,255,0.35) 0 4px,
  transparent 4px 8px); }}
.tl-wf-axis {{ position: relative; height: 16px; color: #6e7781; border-bottom: 1px solid #d0d7de;
  margin-left: {LABEL_PX}px; }}
.tl-wf-tick {{ position: absolute; transform: translateX(-50%); white-space: nowrap; }}
.tl-wf-more, .tl-wf-empty {{ color: #6e7781; padding: 4px 0; }}
</style>"""


def span_text(seconds: float) -> str:
    """An offset on the axis: '+250 ms', '+4 s', '+2 min', '+1 h 30 min'."""
    if seconds < 1:
        return f"+{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"+{seconds:.3g} s"
    if seconds < 3600:
        return f"+{seconds / 60:.3g} min"
    hours, rest = divmod(int(seconds), 3600)
    return f"+{hours} h" + (f" {rest // 60} min" if rest >= 60 else "")


def tick_step(span_s: float) -> float:
    """The smallest nice step that puts at most TICKS ticks on the axis."""
    return next((s for s in NICE_STEPS_S if span_s / s <= TICKS), NICE_STEPS_S[-1])


def bounds(
    rows: list[Row], started: datetime, finished: datetime | None, now: datetime
) -> tuple[datetime, datetime]:
    """The axis: from the run's start to its end, or to now while anything still goes on."""
    ends = [r.finished_at for r in rows if r.finished_at]
    ends += [r.started_at for r in rows if r.started_at]
    end = finished or now
    if any(r.open for r in rows):
        end = max(end, now)
    end = max([end, *ends])
    return started, end if end > started else started


def waterfall_html(
    rows: list[Row],
    started: datetime,
    finished: datetime | None,
    now: datetime,
    more: int = 0,
) -> str:
    """The waterfall of a run's rows; `now` ends the open bars."""
    if not rows:
        return (
            STYLE + '<div class="tl-wf" id="tl-waterfall"><div class="tl-wf-empty">'
            "No step has started yet.</div></div>"
        )
    t0, t1 = bounds(rows, started, finished, now)
    span = max((t1 - t0).total_seconds(), 0.001)

    def pct(at: datetime) -> float:
        return min(100.0, max(0.0, (at - t0).total_seconds() / span * 100))

    step = tick_step(span)
    ticks = "".join(
        f'<span class="tl-wf-tick" style="left:{i * step / span * 100:.3f}%">'
        f"{span_text(i * step) if i else '0'}</span>"
        for i in range(int(span / step) + 1)
    )
    lines = [STYLE, f'<div class="tl-wf" id="tl-waterfall" data-span-s="{span:.3f}">']
    lines.append(f'<div class="tl-wf-axis">{ticks}</div>')
    for row in rows:
        lines.append(_row_html(row, now, pct))
    if more:
        lines.append(f'<div class="tl-wf-more">… {more} more rows not drawn</div>')
    lines.append("</div>")
    return "".join(lines)


def _row_html(row: Row, now: datetime, pct: Callable[[datetime], float]) -> str:
    label = html.escape(row.label)
    if row.run_id:
        label = f'<a href="{run_url(row.run_id)}">{label}</a>'
    group = " tl-wf-group" if row.kind in GROUP_KINDS else ""
    bar = ""
    if row.started_at is not None:
        end = row.finished_at or (now if row.open else row.started_at)
        end = max(end, row.started_at)
        left = pct(row.started_at)
        width = max(pct(end) - left, MIN_BAR_PCT)
        seconds = (end - row.started_at).total_seconds()
        color = COLORS.get(row.status, "#8c959f")
        title = html.escape(f"{row.label}: {row.note} · {span_text(seconds)[1:]}", quote=True)
        bar = (
            f'<div class="tl-wf-bar{" tl-wf-open" if row.open else ""}" '
            f'data-seconds="{seconds:.3f}" title="{title}" '
            f'style="left:{left:.3f}%;width:{min(width, 100 - left):.3f}%;'
            f'background-color:{color}">'
            "</div>"
        )
    return (
        f'<div class="tl-wf-row{group}" data-key="{html.escape(row.key, quote=True)}" '
        f'data-status="{row.status}" data-open="{int(row.open)}">'
        f'<div class="tl-wf-label" style="padding-left:{row.depth * INDENT_PX}px" '
        f'title="{html.escape(row.note, quote=True)}">{label}</div>'
        f'<div class="tl-wf-track">{bar}</div></div>'
    )
