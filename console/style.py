"""The console's style sheet, and HTML panes that carry it (Panel renders each pane in its own
shadow root, where a page-wide style sheet does not reach)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import panel as pn

CSS = (Path(__file__).parent / "static" / "console.css").read_text()


def html_pane(obj: str = "", **params: Any) -> pn.pane.HTML:
    return pn.pane.HTML(obj, stylesheets=[CSS], **params)


def read_only_table(value: Any = None, **params: Any) -> pn.widgets.Tabulator:
    """A table the console shows and nobody edits or selects in, as wide as its card."""
    shown = {"disabled": True, "show_index": False, "selectable": False}
    return pn.widgets.Tabulator(
        pd.DataFrame() if value is None else value,
        **shown,
        sizing_mode="stretch_width",
        **params,
    )
