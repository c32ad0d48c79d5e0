"""One run: the live stepper, the run thread with a reply box and gate buttons, the debug pane
and actions. The same class serves the console's /run page and renders inline in a notebook:

    from console.run_view import RunView
    RunView(run_id)
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import panel as pn
from panel.viewable import Viewer

from engine_adapter.access.authorization import Action
from engine_adapter.conductor import reruns
from engine_adapter.model.errors import ThreadlineError
from engine_adapter.model.vocab import Door, GateDecision, RunState
from engine_adapter.read import read_model, timeline
from engine_adapter.read.engine_debug import run_debug
from engine_adapter.runs import commands, events, gates
from engine_adapter.runs.run_ids import RunIdError, resolve_run_id
from engine_adapter.runs.spawn import SpawnError, describe_trigger
from engine_adapter.runs.thread_entries import RunNotFound

from . import access, data, state
from .debug_pane import debug_html
from .live import Change
from .live_panel import Throttle, on_change, patch_table
from .style import html_pane, read_only_table
from .waterfall import waterfall_html

THREAD_TAIL = 200


class RunView(Viewer):
    def __init__(
        self,
        run_id: str,
        *,
        step: str | None = None,
        database_url: str | None = None,
        **params: Any,
    ) -> None:
        super().__init__(**params)
        if database_url:
            data.configure(database_url)
        self.run_id = run_id
        self.highlight = step
        self.run: read_model.RunView | None = None
        # For showing what the user may do; every write checks the session again, server-side.
        self.session = access.current_session()
        self.permissions = html_pane("", sizing_mode="stretch_width")
        self._first_seq = 0
        self._last_seq = 0
        self.header = html_pane(sizing_mode="stretch_width")
        self.stepper = read_only_table(
            layout="fit_data_stretch",
            # Fitted to the first data, the status column cut a later, longer "✓ completed".
            widths={"status": 130},
            name="stepper",
        )
        # A bar per step try and attempt, on the database clock (waterfall.py); `_db_now` is that
        # clock as last read, moved on by the live feed's beat so running bars grow.
        self.timeline = html_pane("", sizing_mode="stretch_width")
        self._db_now: datetime | None = None
        # Why each failed step failed, and each agent step's tool calls (state.step_details_html).
        self.details = html_pane("", sizing_mode="stretch_width")
        self.thread = pn.Column(sizing_mode="stretch_width", css_classes=["tl-thread"])
        self.earlier = pn.widgets.Button(
            name="Load earlier entries", visible=False, button_type="light"
        )
        self.earlier.on_click(lambda _e: self._load_earlier())
        self.reply_box = pn.widgets.TextAreaInput(
            placeholder="Reply in the thread… (👍 approves, 👎 denies a gate)",
            rows=2,
            sizing_mode="stretch_width",
            name="reply",
        )
        self.send = pn.widgets.Button(name="Send", button_type="primary")
        self.send.on_click(lambda _e: self._reply())
        self.approve = pn.widgets.Button(name="Approve 👍", button_type="success", visible=False)
        self.deny = pn.widgets.Button(name="Deny 👎", button_type="danger", visible=False)
        self.reason = pn.widgets.TextInput(
            placeholder="Why (optional, kept with the decision)", visible=False
        )
        self.approve.on_click(lambda _e: self._decide(GateDecision.APPROVE))
        self.deny.on_click(lambda _e: self._decide(GateDecision.DENY))
        self.feedback = html_pane("", sizing_mode="stretch_width")
        self.debug_body = html_pane("", sizing_mode="stretch_width")
        self.debug = pn.Card(
            self.debug_body,
            title="Debug: engine internals (Absurd)",
            collapsed=True,
            sizing_mode="stretch_width",
        )
        self.debug.param.watch(lambda _e: self._refresh_debug(), "collapsed")
        self.cancel = pn.widgets.Button(name="Cancel run", button_type="warning")
        self.retry = pn.widgets.Button(name="Retry failed step", button_type="primary")
        self.cancel.on_click(lambda _e: self._command("cancel"))
        self.retry.on_click(lambda _e: self._command("retry"))
        self.related = html_pane("")
        self._rerun_link = ""  # set once a rerun is started from this page
        self.rerun_from = pn.widgets.Select(name="Rerun from step", options=[], width=200)
        self.rerun_payload = pn.widgets.TextInput(
            name="with payload (JSON; empty: the same)", placeholder="{}"
        )
        self.rerun = pn.widgets.Button(name="Rerun from step", button_type="primary")
        self.rerun.on_click(lambda _e: self._rerun())
        self.outside_name = pn.widgets.TextInput(
            name="Deliver an event (ends waits for it)", placeholder="event name, e.g. deploy.done"
        )
        self.outside_key = pn.widgets.TextInput(name="key", placeholder="correlation key")
        self.outside_payload = pn.widgets.TextInput(name="payload", placeholder="{}")
        self.deliver = pn.widgets.Button(name="Deliver")
        self.deliver.on_click(lambda _e: self._deliver())
        self.event_name = pn.widgets.TextInput(
            placeholder="event name", name="Emit an event (debug)"
        )
        self.event_payload = pn.widgets.TextInput(
            placeholder='payload JSON, e.g. {"decision": "approve"}'
        )
        self.emit = pn.widgets.Button(name="Emit")
        self.emit.on_click(lambda _e: self._emit())
        # Short: it only folds a burst (a bot streaming progress); a longer one held back a change
        # that came right after another (measured: +110 ms to the next thread entry).
        self._reload = Throttle(self._catch_up, min_interval=0.03)
        self.missing = ""  # why the id names no run, when it does not
        self.found = self._resolve() and self.refresh()
        self._unsubscribe = lambda: None
        if self.found:
            self._append_entries(self._fetch_tail())
            self._unsubscribe = on_change(self._on_change, catch_up=self._catch_up)

    def _resolve(self) -> bool:
        """The id given (the full id, or a unique head or tail of it: run_ids.py) made full."""
        try:
            with data.connection() as conn:
                self.run_id = resolve_run_id(conn, self.run_id)
        except RunIdError as err:
            self.missing = err.reason
            return False
        except RunNotFound:
            return False
        return True

    def close(self) -> None:
        """Stop following the run (a page closing does this by itself; a notebook may call it)."""
        self._unsubscribe()

    # -- layout ----------------------------------------------------------------------------------
    def __panel__(self) -> pn.viewable.Viewable:
        if not self.found:
            why = self.missing or "not a run of this database"
            return html_pane(
                f'<div class="tl-error">No run {html.escape(self.run_id)} '
                f"({html.escape(why)}).</div>"
            )
        gate_row = pn.Row(self.approve, self.deny, self.reason, sizing_mode="stretch_width")
        thread = pn.Column(
            pn.pane.Markdown("### Thread"),
            self.earlier,
            self.thread,
            gate_row,
            pn.Row(self.reply_box, self.send, sizing_mode="stretch_width"),
            self.permissions,
            self.feedback,
            sizing_mode="stretch_width",
        )
        actions = pn.Card(
            pn.Row(self.cancel, self.retry),
            pn.Row(self.rerun_from, self.rerun_payload, self.rerun),
            pn.Row(self.outside_name, self.outside_key, self.outside_payload, self.deliver),
            pn.Row(self.event_name, self.event_payload, self.emit),
            title="Actions",
            collapsed=True,
            sizing_mode="stretch_width",
        )
        return pn.Column(
            self.header,
            self.related,
            pn.pane.Markdown("### Steps"),
            self.stepper,
            self.details,
            pn.pane.Markdown("### Timeline"),
            self.timeline,
            thread,
            actions,
            self.debug,
            sizing_mode="stretch_width",
        )

    # -- reading ---------------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Re-read the run's summary and patch the header, stepper and gate buttons."""
        try:
            with data.connection() as conn:
                self.run = read_model.run_view(conn, self.run_id, thread_limit=0)
                self._db_now = read_model.db_now(conn)
        except RunNotFound:
            return False
        self._render_summary()
        if not self.debug.collapsed:
            self._refresh_debug()
        return True

    def _fetch_tail(self) -> list[dict[str, Any]]:
        with data.connection() as conn:
            return read_model.thread_entries(conn, self.run_id, after=-1, limit=THREAD_TAIL)

    def _render_summary(self, now: datetime | None = None) -> None:
        run = self.run
        assert run is not None
        now = now or datetime.now(UTC)
        trigger = html.escape(describe_trigger(run.trigger or {}))
        self.header.object = (
            f'<div class="tl-run-header"><h4>{run.workflow} <small>v{run.workflow_version}</small> '
            f'<span class="tl-state tl-state-{run.state}" id="tl-run-state">'
            f"{run.state}</span></h4>"
            f"<div><code>{run.run_id}</code> · {run.created_at.astimezone(UTC):%Y-%m-%d %H:%M:%S}"
            f" UTC · started {trigger}</div></div>"
        )
        patch_table(
            self.stepper, pd.DataFrame(state.stepper_rows(run, now, highlight=self.highlight))
        )
        self._render_timeline()
        details = state.step_details_html(run)
        if self.details.object != details:  # a countdown's tick changes nothing here
            self.details.object = details
        # A live refresh (the rerun's own spawn triggers one) keeps the link to a rerun just made.
        self.related.object = state.related_runs_html(run) + self._rerun_link
        waiting = run.event_wait
        if waiting and not self.outside_name.value:  # offer what the run waits for
            self.outside_name.value = waiting["events"][0]
            self.outside_key.value = waiting.get("key") or ""
        self.deliver.disabled = not self._may(Action.EMIT_EVENT)
        top = [step["id"] for step in run.steps]
        if list(self.rerun_from.options) != top:
            self.rerun_from.options = top
            if self.rerun_from.value not in top:
                self.rerun_from.value = top[0] if top else None
        self.rerun.disabled = bool(run.parent) or not self._may(Action.RERUN)
        at_gate = run.gate is not None
        for widget in (self.approve, self.deny, self.reason):
            widget.visible = state.gate_takes_decisions(run.gate)
        self.retry.disabled = run.state != RunState.FAILED or not self._may(Action.RETRY)
        self.cancel.disabled = run.state in (
            RunState.COMPLETED,
            RunState.CANCELLED,
        ) or not self._may(Action.CANCEL)
        self.approve.disabled = self.deny.disabled = not self._may(Action.DECIDE)
        self.send.disabled = not self._may(self._reply_action())
        self.emit.disabled = not self._may(Action.DEBUG_EVENT)
        notes = [
            why
            for why in (
                access.refusal(self.session, Action.CANCEL, "reply, cancel, retry or emit"),
                access.refusal(self.session, Action.DECIDE, "approve or deny") if at_gate else None,
            )
            if why
        ]
        self.permissions.object = (
            f'<div class="tl-muted" id="tl-permissions">{html.escape(" ".join(notes))}</div>'
        )

    def _render_timeline(self) -> None:
        run = self.run
        assert run is not None
        rows, more = timeline.rows(run.steps)
        now = self._db_now or datetime.now(UTC)
        drawn = waterfall_html(rows, run.created_at, run.finished_at, now, more)
        if self.timeline.object != drawn:  # nothing still going: nothing sent
            self.timeline.object = drawn

    def _append_entries(self, entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            if entry["seq"] <= self._last_seq:
                continue
            if not self._first_seq:
                self._first_seq = entry["seq"]
            self._last_seq = entry["seq"]
            self.thread.append(self._entry_pane(entry))
        self.earlier.visible = self._first_seq > 1

    def _entry_pane(self, entry: dict[str, Any]) -> pn.viewable.Viewable:
        view = state.entry_view(entry)
        pane = html_pane(state.entry_html(view), sizing_mode="stretch_width", margin=0)
        if not view.collapsed:
            return pane
        more = pn.widgets.Button(
            name=f"Show all ({entry.get('length', len(view.text))} chars)",
            button_type="light",
            margin=(0, 10),
        )

        def expand(_e: Any) -> None:
            text = view.text
            if view.truncated:
                with data.connection() as conn:
                    text = read_model.entry_text(conn, self.run_id, view.seq)
            full = state.EntryView(**{**view.__dict__, "text": text})
            pane.object = state.entry_html(full, expanded=True)
            more.visible = False

        more.on_click(expand)
        return pn.Column(pane, more, sizing_mode="stretch_width", margin=0)

    def _load_earlier(self) -> None:
        with data.connection() as conn:
            older = read_model.thread_entries(
                conn,
                self.run_id,
                after=max(0, self._first_seq - 1 - THREAD_TAIL),
                limit=THREAD_TAIL,
            )
        older = [e for e in older if e["seq"] < self._first_seq]
        if older:
            self._first_seq = older[0]["seq"]
            self.thread.objects = [self._entry_pane(e) for e in older] + list(self.thread.objects)
        self.earlier.visible = self._first_seq > 1

    def _refresh_debug(self) -> None:
        if self.debug.collapsed:
            return
        with data.connection() as conn:
            self.debug_body.object = debug_html(run_debug(conn, self.run_id))

    # -- live ------------------------------------------------------------------------------------
    def _catch_up(self) -> None:
        self.refresh()
        with data.connection() as conn:
            self._append_entries(
                read_model.thread_entries(
                    conn, self.run_id, after=self._last_seq, limit=THREAD_TAIL
                )
            )

    def _on_change(self, change: Change) -> None:
        if self.run_id in change.run_ids:
            self._reload.poke()
        elif change.beat is not None:
            self._db_now = change.beat.get("db_now") or self._db_now
            self._reload.beat()
            if self.run and self.run.state in (
                RunState.SLEEPING,
                RunState.RUNNING,
                RunState.WAITING,
            ):
                self._render_summary()  # countdowns and running durations tick without a query

    # -- acting ----------------------------------------------------------------------------------
    def _may(self, action: Action) -> bool:
        return access.refusal(self.session, action) is None

    def _reply_action(self) -> Action:
        """An operator replies; at a gate an approver may too (the reply may decide it)."""
        return Action.REPLY if self.run and self.run.gate else Action.STEER

    def _say(self, text: str, ok: bool = True) -> None:
        self.feedback.object = (
            f'<div class="{"tl-ok" if ok else "tl-error"}">{html.escape(text)}</div>'
        )

    def _reply(self) -> None:
        text = self.reply_box.value_input or self.reply_box.value or ""
        if not text.strip():
            self._say("Write something first.", ok=False)
            return
        try:
            actor = access.actor_for(self._reply_action(), "reply")
            with data.connection() as conn:
                outcome = gates.reply(conn, self.run_id, text, actor)
        except ThreadlineError as err:
            self._say(str(err), ok=False)
            return
        self.reply_box.value = ""
        self._say(
            f"Released the gate ({outcome.decision})."
            if outcome.decision
            else (outcome.hint or "Reply added to the thread.")
        )

    def _decide(self, decision: str) -> None:
        gate = self.run.gate if self.run else None
        try:
            actor = access.actor_for(Action.DECIDE, f"{decision} a gate")
            with data.connection() as conn:
                gates.decide(
                    conn,
                    self.run_id,
                    decision,
                    actor,
                    self.reason.value or None,
                    gate_key=gate["key"] if gate else None,
                )
        except ThreadlineError as err:
            self._say(str(err), ok=False)
            return
        self.reason.value = ""
        self._say("Approved." if decision == GateDecision.APPROVE else "Denied.")

    def _command(self, which: str) -> None:
        try:
            action = Action.CANCEL if which == "cancel" else Action.RETRY
            actor = access.actor_for(action, f"{which} a run")
            with data.connection() as conn:
                if which == "cancel":
                    commands.cancel_run(conn, self.run_id, actor, "from the console")
                else:
                    commands.retry_run(conn, self.run_id, actor)
        except (access.NotAllowed, commands.CommandRefused) as err:
            self._say(str(err), ok=False)
            return
        self._say("Cancelled." if which == "cancel" else "Retrying the failed step.")

    def _rerun(self) -> None:
        text = (self.rerun_payload.value or "").strip()
        try:
            payload = json.loads(text) if text else None
        except json.JSONDecodeError as err:
            self._say(f"payload: not valid JSON: {err}", ok=False)
            return
        if not self.rerun_from.value:
            self._say("Choose the step to rerun from.", ok=False)
            return
        try:
            actor = access.actor_for(Action.RERUN)
            with data.connection() as conn:
                spawned = reruns.rerun(conn, self.run_id, self.rerun_from.value, actor, payload)
        except (access.NotAllowed, commands.CommandRefused, SpawnError) as err:
            self._say(str(err), ok=False)
            return
        self._say(f"Rerun started: run {spawned.run_id}.")
        self._rerun_link = (
            f'<div id="tl-rerun-link"><a href="{state.run_url(spawned.run_id)}">open the rerun '
            f"{spawned.run_id}</a></div>"
        )
        related = state.related_runs_html(self.run) if self.run else ""
        self.related.object = related + self._rerun_link

    def _deliver(self) -> None:
        text = (self.outside_payload.value or "").strip()
        try:
            payload = json.loads(text) if text else {}
        except json.JSONDecodeError as err:
            self._say(f"payload: not valid JSON: {err}", ok=False)
            return
        try:
            actor = access.actor_for(Action.EMIT_EVENT)
            with data.connection() as conn:
                emitted = events.emit(
                    conn,
                    (self.outside_name.value or "").strip(),
                    payload,
                    caller=actor.label,
                    key=(self.outside_key.value or "").strip() or None,
                    via=Door.CONSOLE,
                    actor=actor,
                )
        except (access.NotAllowed, SpawnError) as err:
            self._say(str(err), ok=False)
            return
        n = len(emitted.released)
        self._say(f"Delivered {emitted.name}: {n} waiting step{'s' if n != 1 else ''} released.")

    def _emit(self) -> None:
        raw = self.event_payload.value or ""
        try:
            payload = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as err:
            self._say(f"payload: not valid JSON: {err}", ok=False)
            return
        try:
            actor = access.actor_for(Action.DEBUG_EVENT)
            with data.connection() as conn:
                name = self.event_name.value or ""
                commands.emit_debug_event(conn, self.run_id, name, payload, actor)
        except (access.NotAllowed, commands.CommandRefused) as err:
            self._say(str(err), ok=False)
            return
        self._say(f"Emitted {self.event_name.value}.")
