"""The console placeholder: a page of recent runs until the console issue builds the real one."""

from __future__ import annotations

from engine_adapter import db
from engine_adapter.read_model import health, list_runs


def build_page() -> object:
    import pandas as pd
    import panel as pn

    with db.connect() as conn:
        h = health(conn)
        runs = list_runs(conn, limit=50)
    frame = pd.DataFrame(runs, columns=["run_id", "workflow", "state", "current_step", "created_at"])
    return pn.Column(
        pn.pane.Markdown(f"# Threadline\nHealth: **{h['status']}**"),
        pn.widgets.Tabulator(frame, disabled=True, sizing_mode="stretch_width"),
    )


def serve(port: int = 5006) -> None:
    import panel as pn

    pn.serve({"/": build_page}, port=port, address="127.0.0.1", show=False, title="Threadline")
