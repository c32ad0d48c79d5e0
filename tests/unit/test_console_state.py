"""The console's view state, without a browser or a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from console import state
from engine_adapter.read.read_model import RunView
from engine_adapter.read.run_list import Cursor, FilterError, RunFilters

NOW = datetime(2026, 11, 23, 7, 0, tzinfo=UTC)


def beat(status: str, **extra) -> dict:
    return {"status": status, "last_beat_at": NOW - timedelta(seconds=3), "bots": [], **extra}


def test_badge_colours_follow_health_and_show_the_beat_age():
    assert state.badge(beat("ok"), NOW) == state.Badge(
        "green", "Conductor live", "last beat 3 s ago"
    )
    red = state.badge(beat("down"), NOW)
    assert (red.color, red.label) == ("red", "Conductor down")
    amber = state.badge(beat("degraded", runnable_unclaimed=2, instructions_waiting=1), NOW)
    assert amber.color == "amber"
    assert (
        "2 runnable run(s) unclaimed" in amber.detail
        and "1 step(s) waiting with no live bot" in amber.detail
    )
    assert (
        state.badge({"status": "down", "last_beat_at": None}, NOW).detail
        == "no conductor has ever run"
    )
    paused = state.badge(beat("ok", paused="Threadline is paused (by root …)"), NOW)
    assert (paused.color, paused.label) == ("amber", "Paused")
    assert state.badge(beat("down", paused="…"), NOW).label == "Conductor down"  # worse first


@pytest.mark.parametrize(
    "seconds,text",
    [
        (0, "0 s"),
        (59.9, "59 s"),
        (61, "1 min 1 s"),
        (700, "11 min"),
        (3725, "1 h 2 min"),
        (90000, "1 d 1 h"),
        (None, "never"),
        (-5, "0 s"),
    ],
)
def test_age_text(seconds, text):
    assert state.age_text(seconds) == text


def run_with(steps: list[dict], **run) -> RunView:
    fields = dict(
        run_id="01a20a4c-0000-7000-8000-000000000001",
        workflow="w",
        workflow_version=1,
        state="running",
        trigger={"kind": "manual"},
        payload={},
        created_at=NOW,
        finished_at=None,
        wake_at=None,
        await_key=None,
        gate=None,
        event_wait=None,
        steps=steps,
        outputs={},
        parent=None,
    )
    return RunView(**(fields | run))


def step(id_: str, kind: str, status: str, **extra) -> dict:
    return {
        "id": id_,
        "kind": kind,
        "status": status,
        "attempts": 0,
        "tries": 0,
        "output": None,
        "started_at": None,
        "finished_at": None,
        **extra,
    }


def test_stepper_counts_down_to_a_wake_time_and_previews_the_last_output_line():
    run = run_with(
        [
            step(
                "check",
                "run_command",
                "completed",
                attempts=1,
                tries=1,
                output="line 1\nall good\n",
                started_at=(NOW - timedelta(seconds=5)).isoformat(),
                finished_at=(NOW - timedelta(seconds=3)).isoformat(),
            ),
            step("nap", "sleep", "sleeping", started_at=(NOW - timedelta(seconds=1)).isoformat()),
            step("ask", "human_gate", "pending"),
        ],
        wake_at=NOW + timedelta(seconds=90),
    )
    rows = state.stepper_rows(run, NOW, highlight="nap")
    assert [r["status"] for r in rows] == ["✓ completed", "☾ sleeping", "○ pending"]
    assert [r["step"] for r in rows] == ["check", "▶ nap", "ask"]  # /run?id=…&step=nap points at it
    assert (
        rows[0]["output"] == "all good"
        and rows[0]["duration"] == "2.0 s"
        and rows[0]["attempts"] == 1
    )
    assert rows[1]["detail"] == "wakes in 1 min 30 s"
    assert rows[1]["duration"] == "1.0 s"  # still running: measured to now
    assert rows[2]["kind"] == "human gate"


def test_thread_entries_are_styled_by_author_and_long_ones_fold():
    short = state.entry_view(
        {
            "seq": 3,
            "author_kind": "bot",
            "author": "local",
            "kind": "signal.dispatch.completed",
            "text": "done",
            "length": 4,
            "created_at": NOW,
        }
    )
    assert short.who == "local (bot) · completed" and "tl-bot" in short.css and not short.collapsed
    cut = state.entry_view(
        {
            "seq": 4,
            "author_kind": "system",
            "author": "threadline",
            "kind": "instruction",
            "text": "x" * 10,
            "length": 5000,
            "created_at": NOW,
        }
    )
    assert cut.truncated and cut.collapsed
    many = state.entry_view(
        {
            "seq": 5,
            "author_kind": "human",
            "author": "ann",
            "kind": "message",
            "text": "\n".join(f"l{i}" for i in range(40)),
            "created_at": NOW,
        }
    )
    assert many.collapsed and not many.truncated and many.who == "ann"
    folded = state.entry_html(many)
    assert "l11" in folded and "l12" not in folded and "…" in folded
    assert "l39" in state.entry_html(many, expanded=True)
    turn = state.entry_view(
        {
            "seq": 7,
            "author_kind": "bot",
            "author": "helper",
            "kind": "agent.tool",
            "text": "run_command: exit code 0\n1\n2\n3\n4",
            "created_at": NOW,
        }
    )
    assert turn.who == "helper (bot) · tool result" and turn.collapsed  # agents' entries: compact
    assert "tl-kind-agent-tool" in turn.css
    assert "\n2\n…" in state.entry_html(turn) and "4" in state.entry_html(turn, expanded=True)
    hostile = state.entry_view(
        {
            "seq": 6,
            "author_kind": "human",
            "author": "<b>x</b>",
            "kind": "message",
            "text": "<script>alert(1)</script>",
            "created_at": NOW,
        }
    )
    assert "<script>" not in state.entry_html(hostile) and "<b>x</b>" not in state.entry_html(
        hostile
    )


def test_needs_you_rows_show_waiting_time_and_timeout_countdown():
    rows = state.needs_you_rows(
        [
            {
                "run_id": "r1",
                "workflow": "deploy",
                "step": "ok",
                "gate_key": "r1:ok:1",
                "question": " Ship it? ",
                "waiting_since": NOW - timedelta(minutes=5),
                "deadline": (NOW + timedelta(hours=2)).isoformat(),
            },
            {
                "run_id": "r2",
                "workflow": "deploy",
                "step": "ok",
                "gate_key": "r2:ok:1",
                "question": None,
                "waiting_since": NOW,
                "deadline": None,
            },
        ],
        NOW,
    )
    assert rows[0]["waiting"] == "5 min 0 s" and rows[0]["timeout"] == "times out in 2 h 0 min"
    assert rows[0]["question"] == "Ship it?"
    assert rows[1]["timeout"] == "no timeout" and rows[1]["question"] == ""


def test_version_diff_shows_what_changed():
    old = {"slug": "a", "steps": [{"id": "s", "run_command": "echo 1"}]}
    new = {"slug": "a", "steps": [{"id": "s", "run_command": "echo 2"}]}
    diff = state.version_diff(old, new, "v1", "v2")
    assert "-  run_command: echo 1" in diff and "+  run_command: echo 2" in diff
    assert state.version_diff(old, old, "v1", "v1") == "(no difference)"


def test_filters_round_trip_through_the_url_and_bad_ones_name_the_field():
    f = RunFilters.from_params(
        {"workflow": "hello", "state": "failed", "since": "2026-11-01", "junk": "x", "search": " "}
    )
    assert f.to_params() == {
        "workflow": "hello",
        "state": "failed",
        "since": "2026-11-01T00:00:00+00:00",
    }
    assert RunFilters.from_params(f.to_params()) == f
    for params, field in [
        ({"state": "exploded"}, "state:"),
        ({"since": "last tuesday"}, "since:"),
        ({"trigger": "cron"}, "trigger:"),
        ({"since": "2026-11-02", "until": "2026-11-01"}, r"since \("),
    ]:
        with pytest.raises(FilterError, match=field):
            RunFilters.from_params(params)
    assert RunFilters(search="50%_x").sql_params()["search_any"] == "%50\\%\\_x%"


def test_page_cursor_round_trips_and_rejects_garbage():
    c = Cursor(NOW, "01a20640-1410-7401-9e9b-4424575c2681")
    assert Cursor.decode(c.encode()) == c
    for bad in ("nonsense", "yesterday~abc"):
        with pytest.raises(FilterError, match="after:"):
            Cursor.decode(bad)


def test_throttle_coalesces_a_burst_and_loses_no_change():
    from console.live_panel import Throttle

    calls = []
    t = Throttle(lambda: calls.append(1), min_interval=60)
    t.poke()  # the first change reloads at once
    t.poke()
    t.poke()  # a burst inside the interval: kept, not run
    assert len(calls) == 1
    t.beat()  # the next beat runs what was kept, once
    t.beat()
    assert len(calls) == 2


def test_stored_recipes_read_back_in_writing_order_and_load_unchanged():
    from engine_adapter.recipes.recipes import load_recipe_text

    text = (
        "slug: t\nname: T\nbot: b\nsteps:\n  - id: ask\n"
        "    human_gate: |\n      line one\n      line two\n"
        "    timeout: 1h\n"
    )
    stored = load_recipe_text(text).to_dict()
    shown = state.recipe_yaml(dict(sorted(stored.items())))  # as JSONB hands it back: keys sorted
    assert shown.index("slug:") < shown.index("name:") < shown.index("bot:") < shown.index("steps:")
    assert "human_gate: |" in shown and shown.index("- id: ask") < shown.index("human_gate:")
    assert load_recipe_text(shown).canonical_hash == load_recipe_text(text).canonical_hash


def test_the_conductors_page_says_plainly_when_steps_run_unsandboxed():
    from console.conductors_page import unsandboxed_warning

    bots = {"kind": "bots", "alive": True, "host": "h1", "sandbox": "sandboxed: bubblewrap"}
    assert unsandboxed_warning([bots, {"kind": "conductor", "alive": True, "host": "h1"}]) == ""
    bare = dict(bots, sandbox="UNSANDBOXED: steps run as Threadline's own user")
    assert "1 bot process(es) on h1 run steps UNSANDBOXED" in unsandboxed_warning([bots, bare])
    assert unsandboxed_warning([dict(bare, alive=False)]) == ""


def test_approve_and_deny_are_offered_only_where_they_decide():
    from console.state import gate_takes_decisions

    assert gate_takes_decisions({"accept": "decision"}) and gate_takes_decisions({"accept": None})
    assert not gate_takes_decisions({"accept": "any_reply"}) and not gate_takes_decisions(None)


def test_short_run_ids_tell_runs_of_the_same_moment_apart():
    import uuid

    from engine_adapter.model.names import short_run_id

    # UUIDv7: 48 bits of milliseconds first, so ids made together share their head.
    ms = 0x01A209B9ABF8
    ids = [
        str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | (0x2 << 62) | uuid.uuid4().int % (1 << 62)))
        for _ in range(200)
    ]
    assert len({i[:8] for i in ids}) == 1
    assert len({short_run_id(i) for i in ids}) == 200 and all(
        i.endswith(short_run_id(i)) for i in ids
    )


def test_charts_say_so_when_empty_and_keep_their_window_with_one_bucket():
    from datetime import datetime, timedelta

    from console.charts import durations_figure, failures_figure, over_time_figure

    assert failures_figure([]).layout.annotations[0].text == "No failures yet"
    assert durations_figure([]).layout.annotations[0].text.startswith("No step attempts")
    assert over_time_figure([]).layout.annotations[0].text.startswith("No runs")
    until = datetime(2026, 11, 23, 12, tzinfo=UTC)
    window = {"since": until - timedelta(days=7), "until": until, "bucket_s": 86400}
    one = over_time_figure(
        [{"bucket": until - timedelta(days=1), "state": "completed", "runs": 1}], window
    )
    assert tuple(one.layout.xaxis.range) == (window["since"], until)  # days, not 23:59:59.9996
    assert one.data[0].width == 86400 * 1000 * 0.9 and one.layout.yaxis.tickformat == "d"
    assert not failures_figure([{"workflow": "w", "step": "s", "runs": 2}]).layout.annotations


PRICED = {"in": 1, "out": 2, "cost_usd": 0.5}


def test_an_agent_steps_tokens_and_cost_show_in_its_stepper_row():
    run = run_with(
        [
            step("think", "dispatch_task", "completed", tokens={"in": 12345, "out": 678}),
            step("priced", "dispatch_task", "completed", tokens=PRICED),
        ]
    )
    rows = state.stepper_rows(run, NOW)
    assert rows[0]["detail"] == "12,345 tokens in, 678 out"
    assert rows[1]["detail"] == "1 tokens in, 2 out · $0.5000"


def test_the_conductors_page_names_bots_with_no_backend():
    from console.conductors_page import agents_frame, no_backend_html

    assert no_backend_html([]) == ""
    said = no_backend_html(["shell", "<x>"])
    assert "<code>shell</code>" in said and "&lt;x&gt;" in said and "bot apply" in said
    frame = agents_frame(
        [
            {
                "name": "helper",
                "model": "m",
                "base_url": "http://h/v1",
                "api_key_env": "OPENAI_API_KEY",
                "max_turns": 20,
                "max_tokens_per_run": None,
            }
        ]
    )
    assert frame.to_dict("records") == [
        {
            "bot": "helper",
            "model": "m",
            "endpoint": "http://h/v1",
            "key from": "OPENAI_API_KEY",
            "max turns": "20",
            "token budget": "none",
        }
    ]
