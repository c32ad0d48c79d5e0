"""Needs you: every open human gate across all runs, oldest first, answered in place."""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any

import panel as pn
from panel.viewable import Viewer

from engine_adapter.access.authorization import Action
from engine_adapter.model.errors import ThreadlineError
from engine_adapter.model.names import short_run_id
from engine_adapter.model.vocab import GateDecision
from engine_adapter.read import read_model
from engine_adapter.runs import gates

from . import access, data, state
from .live import Change
from .live_panel import Throttle, on_change
from .style import html_pane


class NeedsYouPage(Viewer):
    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.list = pn.Column(sizing_mode="stretch_width")
        self.feedback = html_pane("")
        # For the buttons and the note only: act() checks the session again, server-side.
        self.session = access.current_session()
        why = access.refusal(self.session, Action.DECIDE, "approve or deny")
        self.permissions = html_pane(
            f'<div class="tl-muted" id="tl-permissions">{html.escape(why or "")}</div>'
        )
        self._cards: dict[str, tuple[pn.viewable.Viewable, pn.pane.HTML, dict[str, Any]]] = {}
        self._reload = Throttle(self.load)
        self.load()
        on_change(self._on_change, catch_up=self.load)

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(self.permissions, self.feedback, self.list, sizing_mode="stretch_width")

    def load(self) -> None:
        with data.connection() as conn:
            open_gates = read_model.open_gates(conn)
        now = datetime.now(UTC)
        found = {g["gate_key"]: g for g in open_gates}
        for key in list(self._cards):
            if key not in found:  # decided elsewhere: drop it in place
                self.list.remove(self._cards.pop(key)[0])
        for key, gate in found.items():
            if key in self._cards:
                self._cards[key][2].update(gate)
            else:
                card = self._card(state.needs_you_rows([gate], now)[0], gate)
                self._cards[key] = card
                self.list.append(card[0])
        self._tick(now)
        if not found:
            self.feedback.object = "<p>Nothing needs you: no run is waiting at a human gate.</p>"
        elif "Nothing needs you" in self.feedback.object:
            self.feedback.object = ""

    def _tick(self, now: datetime) -> None:
        """Waiting times and countdowns move on from the rows already read: no query."""
        for _box, meta, gate in self._cards.values():
            meta.object = _meta_html(state.needs_you_rows([gate], now)[0])

    def _card(
        self, row: dict[str, Any], gate: dict[str, Any]
    ) -> tuple[pn.viewable.Viewable, pn.pane.HTML, dict[str, Any]]:
        meta = html_pane(_meta_html(row), sizing_mode="stretch_width")
        question = html_pane(
            f'<pre class="tl-text">{html.escape(row["question"])}</pre>',
            sizing_mode="stretch_width",
        )
        reason = pn.widgets.TextInput(placeholder="Why / reply text", width=320)
        approve = pn.widgets.Button(name="Approve 👍", button_type="success")
        deny = pn.widgets.Button(name="Deny 👎", button_type="danger")
        send = pn.widgets.Button(name="Reply", button_type="primary")
        approve.disabled = deny.disabled = access.refusal(self.session, Action.DECIDE) is not None
        approve.visible = deny.visible = state.gate_takes_decisions(
            gate
        )  # a reply releases any_reply
        send.disabled = access.refusal(self.session, Action.REPLY) is not None
        run_id, key = row["run_id"], row["gate_key"]

        def act(kind: GateDecision) -> None:
            try:
                # Every gate here waits: a reply may decide it, so an approver may reply too.
                actor = access.actor_for(
                    Action.REPLY if kind == GateDecision.REPLY else Action.DECIDE,
                    kind if kind == GateDecision.REPLY else f"{kind} a gate",
                )
                with data.connection() as conn:
                    if kind == GateDecision.REPLY:
                        outcome = gates.reply(conn, run_id, reason.value or "", actor)
                        text = (
                            outcome.hint or f"Replied ({outcome.decision or 'kept in the thread'})."
                        )
                    else:
                        gates.decide(conn, run_id, kind, actor, reason.value or None, gate_key=key)
                        text = f"{kind.capitalize()}d {short_run_id(run_id)} · {row['step']}."
            except ThreadlineError as err:  # refused, not found, already decided, empty
                self.feedback.object = f'<div class="tl-error">{html.escape(str(err))}</div>'
                return
            self.feedback.object = f'<div class="tl-ok">{html.escape(text)}</div>'

        approve.on_click(lambda _e: act(GateDecision.APPROVE))
        deny.on_click(lambda _e: act(GateDecision.DENY))
        send.on_click(lambda _e: act(GateDecision.REPLY))
        box = pn.Column(
            meta,
            question,
            pn.Row(reason, approve, deny, send),
            css_classes=["tl-gate-card"],
            sizing_mode="stretch_width",
        )
        return box, meta, dict(gate)

    def _on_change(self, change: Change) -> None:
        if "run_threads" in change.tables:
            self._reload.poke()
        elif change.beat is not None:
            self._reload.beat()
            self._tick(datetime.now(UTC))


def _meta_html(row: dict[str, Any]) -> str:
    return (
        f'<div class="tl-gate-meta"><b><a href="{state.run_url(row["run_id"], row["step"])}">'
        f"{html.escape(row['workflow'])} · "
        f"{html.escape(row['step'])}</a></b> <code>{short_run_id(row['run_id'])}</code>"
        f" · waiting {row['waiting']}"
        f" · {row['timeout']}</div>"
    )
