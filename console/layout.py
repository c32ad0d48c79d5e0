"""The frame of every page: template, navigation and the live conductor heartbeat badge."""

from __future__ import annotations

import html
from datetime import datetime, timezone
from typing import Any

import panel as pn

from . import data, state
from .live import Change, hub
from .live_panel import on_change
from .style import CSS, html_pane

PAGES = [("/", "Runs"), ("/needs-you", "Needs you"), ("/recipes", "Recipes"), ("/conductors", "Conductors")]


def badge_html(beat: dict[str, Any] | None) -> str:
    if beat is None:
        return '<a class="tl-badge tl-badge-amber" href="/conductors">Checking conductor…</a>'
    b = state.badge(beat, beat.get("db_now") or datetime.now(timezone.utc))
    return (f'<a class="tl-badge tl-badge-{b.color}" href="/conductors" id="tl-badge" data-color="{b.color}">'
            f'● {b.label} <small>{b.detail}</small></a>')


class HeartbeatBadge:
    """The header badge: re-drawn from the feed's liveness reads, twice a second."""

    def __init__(self) -> None:
        self.pane = html_pane(badge_html(hub(data.configured_url()).beat), margin=(5, 10))
        on_change(self._update)

    def _update(self, change: Change) -> None:
        if change.beat is not None:
            self.pane.object = badge_html(change.beat)


def nav_html(active: str) -> str:
    links = "".join(f'<a href="{href}" class="{"tl-active" if href == active else ""}">{label}</a>'
                    for href, label in PAGES)
    # Panel templates read ?theme=dark; the toggle flips it and keeps the page's other parameters.
    toggle = ("<a href=\"#\" title=\"light / dark\" onclick=\"const u = new URL(location.href); "
              "u.searchParams.set('theme', u.searchParams.get('theme') === 'dark' ? 'default' : 'dark'); "
              "location.href = u; return false;\">◐</a>")
    user = pn.state.user
    who = (f'<span class="tl-user">{html.escape(user)} · <a href="/logout">sign out</a></span>'
           if user and pn.state.cookies.get("user") else "")
    return f'<div class="tl-nav">{links}{toggle} {who}</div>'


def page(title: str, active: str, *content: Any) -> pn.template.BootstrapTemplate:
    template = pn.template.BootstrapTemplate(
        title="Threadline", header_background="#24292f", raw_css=[CSS], site_url="/",
    )
    template.header.append(html_pane(nav_html(active), margin=(12, 10)))
    template.header.append(HeartbeatBadge().pane)
    template.main.append(pn.Column(pn.pane.Markdown(f"## {title}", margin=(0, 10)), *content,
                                   sizing_mode="stretch_width"))
    return template


def error_page(title: str, active: str, message: str) -> pn.template.BootstrapTemplate:
    """A page saying what is wrong; message is plain text."""
    return page(title, active, html_pane(f'<div class="tl-error">{html.escape(message)}</div>'))
