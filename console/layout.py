"""The frame of every page: template, navigation and the live conductor heartbeat badge."""

from __future__ import annotations

import html
import time
from datetime import UTC, datetime
from typing import Any

import panel as pn

from . import access, data, state
from .live import Change, hub
from .live_panel import on_change
from .style import CSS, html_pane

PAGES = [
    ("/", "Runs"),
    ("/needs-you", "Needs you"),
    ("/recipes", "Recipes"),
    ("/proposals", "Proposals"),
    ("/conductors", "Conductors"),
]


def badge_html(beat: dict[str, Any] | None) -> str:
    if beat is None:
        return '<a class="tl-badge tl-badge-amber" href="/conductors">Checking conductor…</a>'
    b = state.badge(beat, beat.get("db_now") or datetime.now(UTC))
    return (
        f'<a class="tl-badge tl-badge-{b.color}" href="/conductors" id="tl-badge" '
        f'data-color="{b.color}">'
        f"● {b.label} <small>{b.detail}</small></a>"
    )


class HeartbeatBadge:
    """The header badge: re-drawn from the feed's liveness reads, twice a second."""

    def __init__(self) -> None:
        self.pane = html_pane(badge_html(hub(data.configured_url()).beat), margin=(5, 10))
        on_change(self._update)

    def _update(self, change: Change) -> None:
        if change.beat is not None:
            self.pane.object = badge_html(change.beat)


def nav_html(active: str) -> str:
    links = "".join(
        f'<a href="{href}" class="{"tl-active" if href == active else ""}">{label}</a>'
        for href, label in PAGES
    )
    # Panel templates read ?theme=dark; the toggle flips it and keeps the page's other parameters.
    toggle = (
        '<a href="#" title="light / dark" onclick="const u = new URL(location.href); '
        "u.searchParams.set('theme', u.searchParams.get('theme') === 'dark' ? 'default' : 'dark'); "
        'location.href = u; return false;">◐</a>'
    )
    return f'<div class="tl-nav">{links}{toggle} {who_html(access.current_session())}</div>'


def who_html(session: access.Session | None) -> str:
    if session is None:
        return ""
    if session.via == "no-auth":
        return (
            '<span class="tl-user tl-no-auth" id="tl-no-auth">'
            "⚠ sign-in is off (--no-auth): anyone on "
            f"this machine acts as {html.escape(session.user)}</span>"
        )
    roles = ", ".join(sorted(session.roles))
    return (
        f'<span class="tl-user">{html.escape(session.user)} '
        f"<small>({html.escape(roles)})</small> · "
        '<a href="/logout">sign out</a></span>'
    )


class SessionWatch:
    """Ends an open page whose session stopped being valid (signed out, the user removed, the
    users file gone): the page's connection outlives the checks made when it opened."""

    CHECK_EVERY_S = 2.0

    def __init__(self, main: pn.Column) -> None:
        self.main, self._checked = main, time.monotonic()
        on_change(self._check)

    def _check(self, change: Change) -> None:
        if change.beat is None or time.monotonic() - self._checked < self.CHECK_EVERY_S:
            return
        self._checked = time.monotonic()
        if access.current_session() is None and self.main.objects:
            self.main.objects = [
                html_pane(
                    '<div class="tl-error" id="tl-signed-out">Your session has ended: '
                    '<a href="/login">sign in again</a>.</div>'
                )
            ]


def page(title: str, active: str, *content: Any) -> pn.template.BootstrapTemplate:
    template = pn.template.BootstrapTemplate(
        title="Threadline",
        header_background="#24292f",
        raw_css=[CSS],
        site_url="/",
    )
    header, body = template.header, template.main
    assert header is not None and body is not None  # a template always has both areas
    header.append(html_pane(nav_html(active), margin=(12, 10)))
    header.append(HeartbeatBadge().pane)
    main = pn.Column(
        pn.pane.Markdown(f"## {title}", margin=(0, 10)), *content, sizing_mode="stretch_width"
    )
    SessionWatch(main)
    body.append(main)
    return template


def error_page(title: str, active: str, message: str) -> pn.template.BootstrapTemplate:
    """A page saying what is wrong; message is plain text."""
    return page(title, active, html_pane(f'<div class="tl-error">{html.escape(message)}</div>'))
