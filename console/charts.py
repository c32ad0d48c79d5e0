"""The runs page's charts: runs over time by outcome, step duration by workflow, failures, and
agent tokens (and cost) by workflow."""

from __future__ import annotations

import pandas as pd
import panel as pn
import plotly.graph_objects as go

from engine_adapter.model.vocab import RunState
from engine_adapter.read import run_list
from engine_adapter.read.run_list import RunFilters

from . import data

STATE_COLORS: dict[RunState, str] = {
    RunState.COMPLETED: "#1a7f37",
    RunState.FAILED: "#cf222e",
    RunState.CANCELLED: "#6e7781",
    RunState.RUNNING: "#0969da",
    RunState.SLEEPING: "#54aeff",
    RunState.WAITING: "#b26a00",
    RunState.PENDING: "#8c959f",
    RunState.QUEUED: "#d4a72c",
}


def _layout(fig: go.Figure, title: str) -> go.Figure:
    fig.update_layout(
        title=title,
        height=300,
        margin={"l": 40, "r": 10, "t": 40, "b": 40},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        legend_orientation="h",
    )
    return fig


# A bar chart shows at least this many bars' room: one bar is a bar, not the whole panel.
MIN_SLOTS = 6
FEW_VALUES = 30  # a box of fewer values shows its points too (one value makes no box)


def count_ticks(most: float) -> dict[str, object]:
    """A count axis: whole numbers, each once ("0 0 1 1" is what `d` does to 0.5 steps)."""
    ticks: dict[str, object] = {"rangemode": "tozero", "tickformat": "d"}
    if most <= MIN_SLOTS:
        ticks.update(tick0=0, dtick=1, range=[0, max(most, 1) * 1.05])
    return ticks


def category_slots(count: int) -> dict[str, object]:
    """A category axis with room for at least MIN_SLOTS, the first category on top."""
    return {"range": [max(count, MIN_SLOTS) - 0.5, -0.5], "type": "category"}


def centred_slots(count: int) -> dict[str, object]:
    """A category axis of side-by-side boxes with room for at least MIN_SLOTS, the few centred."""
    pad = max(0, MIN_SLOTS - count) / 2
    return {"range": [-0.5 - pad, count - 0.5 + pad], "type": "category"}


def _empty(fig: go.Figure, title: str, says: str) -> go.Figure:
    """Words instead of empty axes."""
    fig.add_annotation(
        text=says,
        showarrow=False,
        font={"size": 15, "color": "#6e7781"},
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.5,
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title)


def over_time_figure(rows: list[dict], window: run_list.ChartWindow | None = None) -> go.Figure:
    """Stacked bars, one per bucket of the window, each over its own bucket (not centred on its
    start, which put half of today's bar before midnight and cut the other half at now); drawn
    over the whole window in whole buckets, so a single bucket gets the window's ticks (not
    sub-millisecond ones) and a bar as wide as its bucket."""
    title = "Runs over time by outcome"
    if not rows:
        return _empty(go.Figure(), title, "No runs in this window yet")
    frame = pd.DataFrame(rows, columns=["bucket", "state", "runs"])
    width = window["bucket_s"] * 1000 * 0.9 if window else None  # ms on a date axis
    offset = window["bucket_s"] * 1000 * 0.05 if window else None
    fig = go.Figure(
        [
            go.Bar(
                x=part["bucket"],
                y=part["runs"],
                name=name,
                width=width,
                offset=offset,
                marker_color=STATE_COLORS.get(name),
            )
            for name, part in frame.groupby("state")
        ]
    )
    fig.update_layout(barmode="stack")
    if window:
        last = pd.Timestamp(frame["bucket"].max()) + pd.Timedelta(seconds=window["bucket_s"])
        fig.update_xaxes(range=[window["since"], max(pd.Timestamp(window["until"]), last)])
    most = frame.groupby("bucket")["runs"].sum().max()
    fig.update_yaxes(title="runs", **count_ticks(most))
    return _layout(fig, title)


def durations_figure(rows: list[dict]) -> go.Figure:
    title = "Step duration by workflow"
    if not rows:
        return _empty(go.Figure(), title, "No step attempts in this window yet")
    frame = pd.DataFrame(rows, columns=["workflow", "step", "outcome", "seconds"])
    fig = go.Figure(
        [
            go.Box(
                y=part["seconds"],
                name=name,
                boxpoints="all" if len(part) < FEW_VALUES else False,
                pointpos=0,
            )
            for name, part in frame.groupby("workflow")
        ]
    )
    fig.update_yaxes(title="seconds per attempt", rangemode="tozero")
    fig.update_xaxes(**centred_slots(frame["workflow"].nunique()))
    return _layout(fig, title)


def failures_figure(rows: list[dict]) -> go.Figure:
    title = "Failed runs by step"
    if not rows:
        return _empty(go.Figure(), title, "No failures yet")
    frame = pd.DataFrame(rows, columns=["workflow", "step", "runs"])
    frame = frame.sort_values("runs", ascending=False, kind="stable")
    fig = go.Figure(
        go.Bar(
            x=frame["runs"],
            y=frame["workflow"] + " · " + frame["step"],
            orientation="h",
            marker_color=STATE_COLORS[RunState.FAILED],
        )
    )
    fig.update_xaxes(title="runs", **count_ticks(frame["runs"].max()))
    fig.update_yaxes(**category_slots(len(frame)))
    return _layout(fig, title)


def agent_use_figure(rows: list[dict]) -> go.Figure:
    """Agent model tokens by workflow, in and out; the title says the cost where priced."""
    title = "Agent tokens by workflow"
    if not rows:
        return _empty(go.Figure(), title, "No agent turns in this window yet")
    frame = pd.DataFrame(rows, columns=["workflow", "tokens_in", "tokens_out", "cost_usd"])
    fig = go.Figure(
        [
            go.Bar(y=frame["workflow"], x=frame[column], name=name, orientation="h")
            for column, name in (("tokens_in", "in"), ("tokens_out", "out"))
        ]
    )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title="tokens", rangemode="tozero", tickformat="d")
    fig.update_yaxes(**category_slots(len(frame)))
    costs = frame["cost_usd"].dropna()
    if len(costs):
        title += f" · ${costs.sum():.4f} priced"
    return _layout(fig, title)


class RunCharts:
    def __init__(self) -> None:
        self.over_time = pn.pane.Plotly(go.Figure(), sizing_mode="stretch_width")
        self.durations = pn.pane.Plotly(go.Figure(), sizing_mode="stretch_width")
        self.failures = pn.pane.Plotly(go.Figure(), sizing_mode="stretch_width")
        self.agent_use = pn.pane.Plotly(go.Figure(), sizing_mode="stretch_width")

    def panel(self) -> pn.viewable.Viewable:
        return pn.Card(
            pn.Row(self.over_time, self.durations, sizing_mode="stretch_width"),
            pn.Row(self.failures, self.agent_use, sizing_mode="stretch_width"),
            title="Charts",
            collapsed=False,
            sizing_mode="stretch_width",
        )

    def redraw(self, filters: RunFilters) -> None:
        with data.connection() as conn:
            found = run_list.chart_data(conn, filters)
        self.over_time.object = over_time_figure(found["over_time"], found["window"])
        self.durations.object = durations_figure(found["durations"])
        self.failures.object = failures_figure(found["failures"])
        self.agent_use.object = agent_use_figure(found["agent_use"])
