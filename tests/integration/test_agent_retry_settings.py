"""`threadline retry` takes the bot's settings in force now: a failure that says "configure the
bot, then retry" is fixed by `threadline bot apply` and a retry, with the real bot process, the
real CLI (as the owner's login, as the CLI connects) and a scripted model server over HTTP."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness
from tests.agent_server import ScriptedModel, answer


def dead_url() -> str:
    """A local URL no server listens on: connecting to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def bots_file(tmp_path: Path, base_url: str) -> str:
    path = tmp_path / f"bots-{abs(hash(base_url))}.yaml"
    path.write_text(f"helper:\n  base_url: {base_url}\n  model: m\n")
    return str(path)


def retry_entry(conn, run_id: str) -> dict:
    return conn.execute(
        "select text, data from threadline.thread_entries where run_id = %s"
        " and data ->> 'decision' = 'retry' order by seq desc limit 1",
        (run_id,),
    ).fetchone()


@pytest.mark.parametrize("before", ["unreachable", "missing"])
def test_retry_after_bot_apply_uses_the_new_settings(
    conn, apply, procs, workdir, db_url, tmp_path, before
):
    console = db_url  # the CLI connects as the owner
    bad = dead_url()
    if before == "unreachable":
        done = harness.run_cli(console, "bot", "apply", bots_file(tmp_path, bad))
        assert done.returncode == 0, done.stderr
    apply(f"""
slug: agent
bot: helper
workdir: {workdir}
steps:
  - id: think
    dispatch_task: say done
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "agent").run_id
    view = harness.wait_for_state(procs.url, run_id, "failed", timeout=120)
    reason = view["steps"][0]["reason"] or view["steps"][0]["output"]
    if before == "unreachable":  # the failure names the bot and the URL it could not reach
        assert f"bot 'helper' could not reach its model at {bad}" in reason, reason
    else:
        assert "bot 'helper' has no model and no command" in reason, reason

    with ScriptedModel([answer("done")]) as model:
        done = harness.run_cli(console, "bot", "apply", bots_file(tmp_path, model.base_url))
        assert done.returncode == 0, done.stderr
        done = harness.run_cli(console, "retry", run_id)
        assert done.returncode == 0, done.stderr
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert len(model.requests) == 1  # the retried try reached the new server
    assert view["steps"][0]["output"] == "done"
    entry = retry_entry(conn, run_id)
    if before == "unreachable":  # the thread says which setting changed
        assert f'base_url "{bad}" → "{model.base_url}"' in entry["text"], entry["text"]
    else:
        assert f"bot 'helper' is now an agent bot (model m at {model.base_url})" in entry["text"]
    assert entry["data"]["bot_settings_changed"]
