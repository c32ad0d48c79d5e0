"""The console's style sheet, and HTML panes that carry it (Panel renders each pane in its own
shadow root, where a page-wide style sheet does not reach)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import panel as pn

CSS = (Path(__file__).parent / "static" / "console.css").read_text()


def html_pane(obj: str = "", **params: Any) -> pn.pane.HTML:
    return pn.pane.HTML(obj, stylesheets=[CSS], **params)
