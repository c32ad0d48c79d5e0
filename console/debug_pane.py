"""The debug pane's HTML: Absurd's internals for one run (the one place engine words appear)."""

from __future__ import annotations

import html
import json
from typing import Any


def _j(value: Any) -> str:
    return html.escape(json.dumps(value, indent=2, default=str, ensure_ascii=False))


def _t(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return "<p><i>none</i></p>"
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f'<table class="table table-sm tl-debug"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def debug_html(d: dict[str, Any]) -> str:
    if d["task"] is None:
        return (
            "<p><i>The engine's rows of this run are gone (cleaned up by Absurd's own cleanup); "
            "its steps, thread and attempts above are Threadline's own and stay.</i></p>"
        )
    parts = ["<h6>Current await</h6>"]
    if d["awaiting"]:
        parts.append(
            _table(
                ["event", "checkpoint", "timeout at", "since"],
                [
                    [
                        _t(w["event"]),
                        _t(w["checkpoint"]),
                        _t(w["timeout_at"] or "no timeout"),
                        _t(w["since"]),
                    ]
                    for w in d["awaiting"]
                ],
            )
        )
    elif d["sleep_until"]:
        parts.append(f"<p>sleeping until <b>{_t(d['sleep_until'])}</b> (no lease, no process)</p>")
    else:
        parts.append("<p><i>not awaiting anything</i></p>")
    parts.append("<h6>Attempts (engine runs of this task)</h6>")
    parts.append(
        _table(
            [
                "#",
                "state",
                "claimed by",
                "lease expires",
                "started",
                "failure",
                "executed",
                "replayed from checkpoints",
            ],
            [
                [
                    _t(a["attempt"]),
                    _t(a["state"]),
                    _t(a["claimed_by"]),
                    _t(a["lease_expires_at"]),
                    _t(a["started_at"]),
                    f"<pre>{_j(a['failure_reason'])}</pre>" if a["failure_reason"] else "",
                    _t(", ".join(a["executed"])),
                    _t(", ".join(a["replayed"])),
                ]
                for a in d["attempts"]
            ],
        )
    )
    if d.get("decisions"):
        parts.append("<h6>Decisions (checkpointed: a replay takes the same path)</h6>")
        parts.append(
            _table(
                ["decision", "step", "try", "value", "at"],
                [
                    [_t(x["what"]), _t(x["step"]), _t(x["try"] or ""), _t(x["value"]), _t(x["at"])]
                    for x in d["decisions"]
                ],
            )
        )
    parts.append("<h6>Checkpoints</h6>")
    parts.append(
        "".join(
            f"<details><summary><code>{_t(c['name'])}</code> · attempt {_t(c['attempt'])}"
            f" · {_t(c['updated_at'])}"
            f"</summary><pre>{_j(c['state'])}</pre></details>"
            for c in d["checkpoints"]
        )
        or "<p><i>none</i></p>"
    )
    parts.append("<h6>Events</h6>")
    parts.append(
        _table(
            ["name", "emitted at", "payload"],
            [
                [
                    f"<code>{_t(e['name'])}</code>",
                    _t(e["emitted_at"]) if e["emitted"] else "<i>awaited, not emitted yet</i>",
                    f"<pre>{_j(e['payload'])}</pre>" if e["emitted"] else "",
                ]
                for e in d["events"]
            ],
        )
    )
    parts.append("<h6>Bot attempts</h6>")
    parts.append(
        _table(
            [
                "step key",
                "attempt",
                "worker",
                "host",
                "started",
                "finished",
                "outcome",
                "lease until",
            ],
            [
                [
                    _t(c["step_key"]),
                    _t(c["attempt"]),
                    _t(c["worker"]),
                    _t(c["host"]),
                    _t(c["started_at"]),
                    _t(c["finished_at"]),
                    _t(c["outcome"]),
                    _t(c["lease_until"]),
                ]
                for c in d["bot_attempts"]
            ],
        )
    )
    parts.append(f"<h6>Task row</h6><pre>{_j(d['task'])}</pre>")
    return "\n".join(parts)
