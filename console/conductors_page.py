"""Conductors: every conductor and bot process, what each holds, and runnable runs nobody took.
In playground mode (under `threadline up`) a button SIGKILLs the conductor, to watch recovery."""

from __future__ import annotations

import html
import os
import signal
import socket
import time
from typing import Any

import pandas as pd
import panel as pn
from panel.viewable import Viewer

from engine_adapter.access.authorization import Action
from engine_adapter.catalog.bot_backends import bots_without_backend
from engine_adapter.catalog.bot_config import list_bots
from engine_adapter.model.names import short_run_id
from engine_adapter.read import read_model
from engine_adapter.runs import retention

from . import access, data, state
from .live import Change
from .live_panel import on_change, patch_table
from .style import html_pane, read_only_table

PLAYGROUND_ENV = "THREADLINE_PLAYGROUND"
RELOAD_EVERY_S = 5.0  # with no change at all, ages are refreshed this often


def playground() -> bool:
    return os.environ.get(PLAYGROUND_ENV) == "1"


def unsandboxed_warning(workers: list[dict[str, Any]]) -> str:
    """Said plainly: live bot processes that run steps without a sandbox."""
    bare = [
        w
        for w in workers
        if w["kind"] == "bots" and w["alive"] and (w.get("sandbox") or "").startswith("UNSANDBOXED")
    ]
    if not bare:
        return ""
    hosts = ", ".join(sorted({html.escape(w["host"]) for w in bare}))
    return (
        f'<div class="tl-error" id="tl-unsandboxed">{len(bare)} bot process(es) on {hosts} run '
        "steps UNSANDBOXED: a step can read Threadline's credentials and secrets. Install "
        "bubblewrap (Debian: apt-get install bubblewrap) or run Threadline as root.</div>"
    )


def no_backend_html(missing: list[str]) -> str:
    """Bots that agent steps go to with neither a model nor a command (as this process's
    environment sees commands; a bots process elsewhere may have its own)."""
    if not missing:
        return ""
    names = ", ".join(f"<code>{html.escape(b)}</code>" for b in missing)
    return (
        f'<div class="tl-error" id="tl-no-backend">No model or command for {names}: their '
        "dispatch_task steps fail until one is set. <code>threadline bot apply bots.yaml</code> "
        "(docs: Agent bots), or THREADLINE_AGENT_CMD_&lt;BOT&gt; for the bots process.</div>"
    )


def agents_frame(agents: list[dict[str, Any]]) -> pd.DataFrame:
    """The agent bots as configured now (a run keeps the settings it was spawned with)."""
    return pd.DataFrame(
        [
            {
                "bot": a["name"],
                "model": a["model"],
                "endpoint": a["base_url"],
                "key from": a["api_key_env"] or "(none)",
                "max turns": str(a["max_turns"]),
                "token budget": str(a["max_tokens_per_run"] or "none"),
            }
            for a in agents
        ],
        columns=["bot", "model", "endpoint", "key from", "max turns", "token budget"],
    )


class ConductorsPage(Viewer):
    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.workers = read_only_table(name="workers")
        self.unclaimed = read_only_table(formatters={"run": {"type": "html"}})
        self.kill = pn.widgets.Button(
            name="Kill the conductor (SIGKILL)",
            button_type="danger",
            visible=playground(),
            disabled=access.refusal(access.current_session(), Action.STOP_CONDUCTOR) is not None,
        )
        self.kill.on_click(lambda _e: self._kill())
        self.agents = read_only_table(name="agents")
        self.no_backend = html_pane("")
        self.feedback = html_pane("")
        self.sandbox = html_pane("")
        self.cleanup = html_pane("", name="cleanup")
        self._dirty, self._loaded_at = False, 0.0
        self.load()
        on_change(self._on_change, catch_up=self.load)

    def __panel__(self) -> pn.viewable.Viewable:
        note = (
            "Playground: kill the conductor and watch the badge turn red, "
            "the supervisor restart it and "
            "runs resume where they were."
            if playground()
            else ""
        )
        return pn.Column(
            pn.Row(self.kill, html_pane(f"<i>{note}</i>")),
            self.feedback,
            self.sandbox,
            pn.pane.Markdown("### Processes"),
            self.workers,
            self.cleanup,
            pn.pane.Markdown("### Runnable runs no conductor has taken"),
            self.unclaimed,
            pn.pane.Markdown("### Agent bots"),
            self.no_backend,
            self.agents,
            sizing_mode="stretch_width",
        )

    def load(self) -> None:
        self._dirty, self._loaded_at = False, time.monotonic()
        with data.connection() as conn:
            workers = read_model.workers_overview(conn)
            unclaimed = read_model.runnable_unclaimed(conn)
            agents = list_bots(conn)
            missing = bots_without_backend(conn)
            cleaned = retention.describe_last(retention.last(conn))
        self.cleanup.object = f"<p class='tl-cleanup'>{html.escape(cleaned)}</p>"
        self.no_backend.object = no_backend_html(missing)
        patch_table(self.agents, agents_frame(agents))
        patch_table(
            self.workers,
            pd.DataFrame(
                [
                    {
                        "id": w["id"],
                        "kind": w["kind"],
                        "host": w["host"],
                        "pid": str(w["pid"]),
                        "alive": "● live"
                        if w["alive"]
                        else "■ stopped"
                        if w.get("stopped_at")
                        else "✗ gone",
                        "started": w["started_at"].strftime("%Y-%m-%d %H:%M:%S"),
                        "last beat": state.age_text(w["last_beat_age_s"]) + " ago",
                        "in hand": f"{w['in_hand']} "
                        f"{'run' if w['kind'] == 'conductor' else 'attempt'}"
                        f"{'' if w['in_hand'] == 1 else 's'}",
                        "steps run": w.get("sandbox") or "",
                    }
                    for w in workers
                ],
                columns=[
                    "id",
                    "kind",
                    "host",
                    "pid",
                    "alive",
                    "started",
                    "last beat",
                    "in hand",
                    "steps run",
                ],
            ),
        )
        self.sandbox.object = unsandboxed_warning(workers)
        patch_table(
            self.unclaimed,
            pd.DataFrame(
                [
                    {
                        "run": f'<a href="{state.run_url(u["run_id"])}">'
                        f"{short_run_id(u['run_id'])}</a>",
                        "workflow": u["workflow"] or "",
                        "due for": state.age_text(u["waiting_s"]),
                    }
                    for u in unclaimed
                ],
                columns=["run", "workflow", "due for"],
            ),
        )

    def _on_change(self, change: Change) -> None:
        """Reload after changes, at most once a second: liveness and ages move with the feed's
        beat."""
        self._dirty = self._dirty or bool(change.tables)
        if change.beat is not None and (
            self._dirty or time.monotonic() - self._loaded_at > RELOAD_EVERY_S
        ):
            self.load()

    def _kill(self) -> None:
        try:
            access.actor_for(Action.STOP_CONDUCTOR)
        except access.NotAllowed as err:
            self.feedback.object = f'<div class="tl-error">{html.escape(str(err))}</div>'
            return
        with data.connection() as conn:
            here = [
                w
                for w in read_model.workers_overview(conn)
                if w["kind"] == "conductor" and w["alive"] and w["host"] == socket.gethostname()
            ]
        if not here:
            self.feedback.object = '<div class="tl-error">No live conductor on this host.</div>'
            return
        for w in here:
            os.kill(w["pid"], signal.SIGKILL)
        pids = ", ".join(str(w["pid"]) for w in here)
        self.feedback.object = (
            f'<div class="tl-ok">Sent SIGKILL to conductor pid {html.escape(pids)}.</div>'
        )
