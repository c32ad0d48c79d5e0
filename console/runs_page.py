"""The runs list: filters kept in the URL, keyset pages of 50, counts by state, charts; live."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd
import panel as pn
import param
from panel.viewable import Viewer

from engine_adapter.catalog.workflows import list_workflows
from engine_adapter.model.domain import RUN_STATES
from engine_adapter.model.names import short_run_id
from engine_adapter.read import run_list
from engine_adapter.read.run_list import Cursor, FilterError, RunFilters, RunRow

from . import charts, data, state
from .live import Change
from .live_panel import Throttle, on_change, patch_table
from .style import html_pane, read_only_table

ANY = ""
CHART_EVERY_S = (
    5.0  # charts are the costly part: redrawn at most this often, and only after a change
)


class RunsPage(Viewer):
    workflow = param.String(default=ANY)
    state = param.String(default=ANY)
    trigger = param.String(default=ANY)
    since = param.String(default=ANY)
    until = param.String(default=ANY)
    search = param.String(default=ANY)
    after = param.String(default=ANY)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if pn.state.location is not None:
            pn.state.location.sync(
                self,
                {
                    k: k
                    for k in ("workflow", "state", "trigger", "since", "until", "search", "after")
                },
            )
        with data.connection() as conn:
            slugs = [w["slug"] for w in list_workflows(conn)]
        self.w_workflow = pn.widgets.Select(
            name="Workflow",
            options=[ANY, *slugs],
            value=self.workflow if self.workflow in slugs else ANY,
            width=170,
        )
        self.w_state = pn.widgets.Select(
            name="State",
            options=[ANY, *RUN_STATES],
            width=130,
            value=self.state if self.state in RUN_STATES else ANY,
        )
        self.w_trigger = pn.widgets.Select(
            name="Trigger",
            options=[ANY, *run_list.TRIGGER_KINDS],
            width=120,
            value=self.trigger if self.trigger in run_list.TRIGGER_KINDS else ANY,
        )
        self.w_since = pn.widgets.TextInput(
            name="Since", placeholder="2026-11-01", value=self.since, width=150
        )
        self.w_until = pn.widgets.TextInput(
            name="Until", placeholder="2026-11-30T18:00", value=self.until, width=150
        )
        self.w_search = pn.widgets.TextInput(
            name="Search run id or payload", value=self.search, width=240
        )
        for name in ("workflow", "state", "trigger", "since", "until", "search"):
            getattr(self, f"w_{name}").param.watch(self._filter_changed, "value")
        self.problem = html_pane("")
        self.counts = html_pane("", css_classes=["tl-counts"])
        self.table = read_only_table(
            formatters={"run": {"type": "html"}},
            layout="fit_data_stretch",
            name="runs",
        )
        self.prev_button = pn.widgets.Button(name="← Newer", disabled=True)
        self.next_button = pn.widgets.Button(name="Older →", disabled=True)
        self.prev_button.on_click(lambda _e: self._turn(back=True))
        self.next_button.on_click(lambda _e: self._turn(back=False))
        self.empty = pn.pane.Markdown(state.EMPTY_STATE, visible=False)
        self.charts = charts.RunCharts()
        self.chart_card = self.charts.panel()
        self._history: list[str] = []  # cursors of the pages before this one
        self._next: Cursor | None = None
        self._dirty_charts = True
        self._reload = Throttle(self.load)
        self.load()
        self._redraw_charts()
        pn.state.add_periodic_callback(self._redraw_charts, period=int(CHART_EVERY_S * 1000))
        on_change(self._on_change, catch_up=self.load)

    def __panel__(self) -> pn.viewable.Viewable:
        filters = pn.Row(
            self.w_workflow,
            self.w_state,
            self.w_trigger,
            self.w_since,
            self.w_until,
            self.w_search,
            sizing_mode="stretch_width",
        )
        return pn.Column(
            filters,
            self.problem,
            self.counts,
            self.empty,
            self.table,
            pn.Row(self.prev_button, self.next_button),
            self.chart_card,
            sizing_mode="stretch_width",
        )

    # -- reading ---------------------------------------------------------------------------------
    def _filters(self) -> RunFilters:
        return RunFilters.from_params(
            {
                k: getattr(self, k)
                for k in ("workflow", "state", "trigger", "since", "until", "search")
            }
        )

    def load(self) -> None:
        try:
            filters = self._filters()
            cursor = Cursor.decode(self.after) if self.after else None
        except FilterError as err:
            self.problem.object = f'<div class="tl-error">{html.escape(str(err))}</div>'
            return
        self.problem.object = ""
        with data.connection() as conn:
            page = run_list.runs_page(conn, filters, cursor)
            counts = run_list.state_counts(conn, filters)
        self._next = page.next_cursor
        self.next_button.disabled = page.next_cursor is None
        self.prev_button.disabled = not self.after
        patch_table(self.table, runs_frame(page.rows))
        self.counts.object = counts_html(counts, filters)
        self.empty.visible = not any(counts.values()) and not filters.to_params()
        for part in (self.chart_card, self.table, self.prev_button, self.next_button):
            part.visible = not self.empty.visible

    def _filter_changed(self, _event: Any) -> None:
        for name in ("workflow", "state", "trigger", "since", "until", "search"):
            setattr(self, name, getattr(self, f"w_{name}").value or ANY)
        self.after, self._history = ANY, []
        self._dirty_charts = True
        self.load()

    def _turn(self, back: bool) -> None:
        if back:
            self.after = self._history.pop() if self._history else ANY
        elif self._next is not None:
            self._history.append(self.after)
            self.after = self._next.encode()
        self.load()

    def _on_change(self, change: Change) -> None:
        if "run_threads" in change.tables:
            self._dirty_charts = True
            self._reload.poke()
        elif change.beat is not None:
            self._reload.beat()

    def _redraw_charts(self) -> None:
        if self._dirty_charts:
            self._dirty_charts = False
            try:
                self.charts.redraw(self._filters())
            except FilterError:
                pass


def runs_frame(rows: list[RunRow]) -> pd.DataFrame:
    columns = ["run", "workflow", "state", "step", "trigger", "started", "finished"]
    return pd.DataFrame(
        [
            {
                "run": f'<a href="{state.run_url(r.run_id)}">{short_run_id(r.run_id)}</a>',
                "workflow": f"{r.workflow} v{r.workflow_version}",
                "state": r.state,
                "step": r.current_step or "",
                "trigger": r.trigger_kind,
                "started": r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                "finished": r.finished_at.strftime("%H:%M:%S") if r.finished_at else "",
            }
            for r in rows
        ],
        columns=columns,
    )


def counts_html(counts: dict[str, int], filters: RunFilters) -> str:
    total = sum(counts.values())
    base = filters.without_state().to_params()
    links = [f'<a href="{state.runs_url(base)}"><b>all {total}</b></a>']
    for name, n in counts.items():
        if n:
            links.append(
                f'<a href="{state.runs_url(base | {"state": name})}">'
                f'<span class="tl-state tl-state-{name}">{name} {n}</span></a>'
            )
    return " ".join(links)
