"""Live notebook widgets (ipywidgets): one run, a filtered list of runs, the live processes.

Each redraws itself when the client's feed says something changed, without its cell being run
again. The feed's thread reads the views; the widgets' values are then set on the kernel's
event loop (call_soon_threadsafe), because widget state is not safe to change from another
thread while the kernel serves its own messages. Outside a kernel there is no loop, and the
values are set from the feed's thread under a lock. Only the kernel's own loop counts: another
loop running in the caller's thread (Playwright's sync API keeps one, running only inside its own
calls) would hold the redraws until something ran it.
"""

from __future__ import annotations

import asyncio
import html
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from engine_adapter.model.vocab import AwaitKind, GateDecision, RunState

if TYPE_CHECKING:
    import pandas as pd

    from engine_adapter.explore.client import Client

ICONS = {
    RunState.COMPLETED: "✅",
    GateDecision.APPROVE: "✅",
    GateDecision.REPLY: "💬",
    RunState.FAILED: "❌",
    GateDecision.DENY: "⛔",
    GateDecision.TIMEOUT: "⌛",
    "open": "⏳",  # a step try of the read schema's steps view not ended yet
    "ended": "⏹",  # one ended without a result of its own (its run was cancelled)
    RunState.RUNNING: "▶",
    RunState.WAITING: "⏳",
    RunState.PENDING: "…",
    RunState.CANCELLED: "⏹",
}
RUN_ROWS = 50
LISTED_STATES = (
    RunState.PENDING,
    RunState.RUNNING,
    RunState.WAITING,
    RunState.COMPLETED,
    RunState.FAILED,
    RunState.CANCELLED,
)
THREAD_ROWS = 20


def _icon(value: str | None) -> str:
    return ICONS.get(str(value), "•")


def _table(df: pd.DataFrame, columns: list[str], icon: str | None = None) -> str:
    """An HTML table of df's columns (the icon column's values get their mark)."""
    head = "".join(f"<th style='text-align:left;padding:2px 8px'>{c}</th>" for c in columns)
    rows = []
    for rec in df[columns].to_dict("records"):
        cells = []
        for c in columns:
            v = rec[c]
            text = "" if v is None or v != v else html.escape(_fmt(v))
            cells.append(
                f"<td style='padding:2px 8px'>{_icon(v) + ' ' if c == icon else ''}{text}</td>"
            )
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.1f}"
    if hasattr(v, "strftime"):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return str(v)


def kernel_loop() -> asyncio.AbstractEventLoop | None:
    """The running Jupyter kernel's event loop, or None outside a kernel (a kernel has imported
    ipykernel; a plain script that merely could has not started one)."""
    kernelbase = sys.modules.get("ipykernel.kernelbase")
    if kernelbase is None or not kernelbase.Kernel.initialized():
        return None
    io_loop = getattr(kernelbase.Kernel.instance(), "io_loop", None)
    loop = getattr(io_loop, "asyncio_loop", None)  # tornado's IOLoop over asyncio
    return loop if isinstance(loop, asyncio.AbstractEventLoop) else None


class _Live:
    """Redraws on the client's feed: reads off the kernel's thread, sets values on its loop."""

    def _follow(self, client: Client, wants: Callable[[frozenset[str]], bool]) -> None:
        self.client = client
        self._redraw_lock = threading.RLock()
        self._loop = kernel_loop()  # None in a plain script: no loop to hand values to
        self.redraws = 0
        self._set(self._read())  # drawn before the cell returns; then kept live

        def changed(run_ids: frozenset[str]) -> None:
            if wants(run_ids):
                self.redraw()

        self.unfollow = client.feed().subscribe(changed)

    def redraw(self) -> None:
        data = self._read()
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._set, data)
        else:
            self._set(data)

    def _set(self, data: Any) -> None:
        with self._redraw_lock:
            self._show(data)
            self.redraws += 1

    def _read(self) -> Any:
        raise NotImplementedError

    def _show(self, data: Any) -> None:
        raise NotImplementedError


class RunWidget(w.VBox, _Live):
    """One run: its state, its steps with their outcome, its thread, and the gate's buttons
    (acting only for a client connected with write=True)."""

    def __init__(self, client: Client, run_id: str) -> None:
        self.run_id = str(run_id)
        self.header = w.HTML()
        self.steps_html = w.HTML()
        self.thread_html = w.HTML()
        self.reply_text = w.Text(placeholder="reply into the thread")
        self.reason_text = w.Text(placeholder="reason (optional)")
        self.reply_button = w.Button(description="Reply", icon="comment")
        self.approve_button = w.Button(description="Approve", button_style="success")
        self.deny_button = w.Button(description="Deny", button_style="danger")
        self.message = w.HTML()
        self.state: str | None = None
        self.awaiting_gate = False
        self.reply_button.on_click(lambda _: self._act("reply"))
        self.approve_button.on_click(lambda _: self._act("approve"))
        self.deny_button.on_click(lambda _: self._act("deny"))
        actions = w.HBox(
            [
                self.reply_text,
                self.reply_button,
                self.reason_text,
                self.approve_button,
                self.deny_button,
            ]
        )
        super().__init__([self.header, self.steps_html, actions, self.message, self.thread_html])
        self._follow(client, lambda run_ids: not run_ids or self.run_id in run_ids)

    def _read(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        c = self.client
        return c.run(self.run_id), c.steps(run=self.run_id), c.thread(self.run_id)

    def _show(self, data: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> None:
        run, steps, thread = data
        if run.empty:
            self.header.value = f"<b>no run {html.escape(self.run_id)}</b>"
            return
        r = run.iloc[0]
        self.state = str(r.state)
        self.awaiting_gate = bool(r.awaiting) and r.await_kind == AwaitKind.GATE
        where = f" at <b>{html.escape(str(r.current_step))}</b>" if r.current_step else ""
        self.header.value = (
            f"<b>{html.escape(str(r.workflow))}</b> run <code>{self.run_id}</code>: "
            f"{_icon(self.state)} <span class='tl-state'>{self.state}</span>{where}"
        )
        ordered = steps.sort_values(["started_at", "step_key"])
        self.steps_html.value = _table(
            ordered, ["step", "try", "kind", "outcome", "duration_s", "error"], icon="outcome"
        )
        recent = thread.tail(THREAD_ROWS)
        self.thread_html.value = _table(recent, ["seq", "author", "kind", "text"])
        acts = self.client.write
        why = "" if acts else "read-only client: connect(write=True) to act"
        for button in (self.approve_button, self.deny_button):
            button.disabled = not (acts and self.awaiting_gate)
            button.tooltip = why or ("" if self.awaiting_gate else "no gate waits")
        self.reply_button.disabled = not acts
        self.reply_button.tooltip = why

    def _act(self, what: str) -> None:
        c = self.client
        try:
            if what == "reply":
                c.reply(self.run_id, self.reply_text.value)
                self.reply_text.value = ""
            elif what == "approve":
                c.approve(self.run_id, reason=self.reason_text.value or None)
            else:
                c.deny(self.run_id, reason=self.reason_text.value or None)
        except Exception as err:  # said in the widget, as the CLI would say it
            self.message.value = f"<span style='color:#b00'>{html.escape(str(err))}</span>"
            return
        self.message.value = f"{what}: done"


class RunsWidget(w.VBox, _Live):
    """Runs, newest first, filtered by workflow and state."""

    def __init__(self, client: Client, workflow: str | None = None, state: str | None = None):
        self.workflow_filter = w.Dropdown(
            description="workflow", options=[("any", None)], value=None
        )
        self.state_filter = w.Dropdown(
            description="state",
            options=[("any", None)] + [(str(s), str(s)) for s in LISTED_STATES],
            value=state,
        )
        self._wanted_workflow = workflow
        self.table = w.HTML()
        self.count = 0
        self._showing = False
        super().__init__([w.HBox([self.workflow_filter, self.state_filter]), self.table])
        self.workflow_filter.observe(lambda _: self._refilter(), "value")
        self.state_filter.observe(lambda _: self.redraw(), "value")
        self._follow(client, lambda _: True)

    def _refilter(self) -> None:
        if self._showing:
            return  # the options being replaced, not a person's choice
        self._wanted_workflow = self.workflow_filter.value
        self.redraw()

    def _read(self) -> tuple[list[str], pd.DataFrame]:
        c = self.client
        workflows = sorted(set(c.runs(limit=10_000).workflow))
        runs = c.runs(workflow=self._wanted_workflow, state=self.state_filter.value, limit=RUN_ROWS)
        return workflows, runs

    def _show(self, data: tuple[list[str], pd.DataFrame]) -> None:
        workflows, runs = data
        options = [("any", None)] + [(name, name) for name in workflows]
        if list(self.workflow_filter.options) != options:
            self._showing = True
            try:
                self.workflow_filter.options = options
                self.workflow_filter.value = (
                    self._wanted_workflow if self._wanted_workflow in workflows else None
                )
            finally:
                self._showing = False
        self.count = len(runs)
        self.table.value = _table(
            runs,
            ["run_id", "workflow", "state", "current_step", "created_at", "duration_s"],
            "state",
        )


class Badge(w.HTML, _Live):
    """The live conductor and bot processes, as a line."""

    def __init__(self, client: Client) -> None:
        super().__init__()
        self.alive: dict[str, int] = {}
        self._follow(client, lambda _: True)

    def _read(self) -> pd.DataFrame:
        return self.client.workers(alive=True)

    def _show(self, workers: pd.DataFrame) -> None:
        self.alive = {k: int(n) for k, n in workers.groupby("kind").size().items()}
        conductors = self.alive.get("conductor", 0)
        colour = "#1a7f37" if conductors else "#b00"
        self.value = (
            f"<span style='color:{colour}'>●</span> {conductors} conductor(s), "
            f"{self.alive.get('bots', 0)} bot process(es) alive "
            f"<small>{time.strftime('%H:%M:%S')}</small>"
        )
