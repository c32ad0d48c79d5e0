"""Proposals: changes proposed to workflows that take them, newest first, each with its risk,
reasons and diff; an approver approves or rejects (never their own), an operator applies."""

from __future__ import annotations

import html
from typing import Any

import panel as pn
from panel.viewable import Viewer

from engine_adapter.access.authorization import Action
from engine_adapter.catalog import proposals
from engine_adapter.model.errors import ThreadlineError

from . import access, data
from .style import html_pane

RISK_CLASS = {"high": "tl-error", "medium": "tl-warn", "low": "tl-ok"}


def proposal_html(p: dict[str, Any]) -> str:
    reasons = "".join(f"<li>{html.escape(r)}</li>" for r in p["risk_reasons"])
    review = (
        f" · reviewed by {html.escape(p['reviewed_by'])}"
        + (f": {html.escape(p['review_note'])}" if p.get("review_note") else "")
        if p.get("reviewed_by")
        else ""
    )
    return (
        f'<div class="tl-proposal" data-id="{p["id"]}"><h4>#{p["id"]} · '
        f'{html.escape(p["workflow"])} · <span class="tl-state">{p["status"]}</span></h4>'
        f"<p>{html.escape(p['summary'])}<br><small>by {html.escape(p['proposed_by'])}"
        f" · expires {p['expires_at']:%Y-%m-%d}{review}</small></p>"
        f'<p class="{RISK_CLASS[p["risk"]]}">risk {p["risk"]}</p><ul>{reasons}</ul>'
        f'<pre class="tl-text tl-diff">{html.escape(p["diff"])}</pre></div>'
    )


class ProposalsPage(Viewer):
    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.session = access.current_session()
        self.list = pn.Column(sizing_mode="stretch_width")
        self.feedback = html_pane("")
        self.load()

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(self.feedback, self.list, sizing_mode="stretch_width")

    def load(self) -> None:
        with data.connection() as conn:
            rows = [proposals.get(conn, p["id"]) for p in proposals.list_proposals(conn)]
        self.list.clear()
        if not rows:
            self.list.append(
                html_pane(
                    "<p>No proposals. A workflow with <code>allow_proposals: true</code> takes "
                    "them from <code>threadline propose</code>, the API, or an agent's "
                    "<code>propose_change</code> tool.</p>"
                )
            )
        for row in rows:
            self.list.append(self.card(row))

    def card(self, row: dict[str, Any]) -> pn.viewable.Viewable:
        note = pn.widgets.TextInput(placeholder="Note (a rejection needs one)", width=320)
        buttons = []
        for label, kind, kind_type, action, when in (
            ("Approve", "approve", "success", Action.REVIEW_PROPOSAL, "open"),
            ("Reject", "reject", "danger", Action.REVIEW_PROPOSAL, "open"),
            ("Apply", "apply", "primary", Action.APPLY_PROPOSAL, "approved"),
        ):
            button = pn.widgets.Button(name=label, button_type=kind_type)
            button.visible = row["status"] == when
            button.disabled = access.refusal(self.session, action) is not None

            def clicked(_e: Any, kind: str = kind, action: Action = action) -> None:
                self.act(row["id"], kind, action, note)

            button.on_click(clicked)
            buttons.append(button)
        return pn.Column(
            html_pane(proposal_html(row), sizing_mode="stretch_width"),
            pn.Row(note, *buttons),
            css_classes=["tl-gate-card"],
            sizing_mode="stretch_width",
        )

    def act(self, pid: int, kind: str, action: Action, note: Any) -> None:
        try:
            actor = access.actor_for(action, f"{kind} proposals")
            with data.connection() as conn:
                if kind == "apply":
                    version = proposals.apply(conn, pid, actor)
                    said = f"Applied proposal #{pid}: version {version}."
                else:
                    proposals.review(conn, pid, kind == "approve", actor, note.value or None)
                    said = f"{'Approved' if kind == 'approve' else 'Rejected'} proposal #{pid}."
        except ThreadlineError as err:  # not allowed, no such proposal, stale, refused
            self.feedback.object = f'<div class="tl-error">{html.escape(str(err))}</div>'
            self.load()
            return
        self.load()
        self.feedback.object = f'<div class="tl-ok">{html.escape(said)}</div>'
