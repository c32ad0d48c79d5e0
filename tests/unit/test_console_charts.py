"""The runs page's charts with one bar or one day of data: room for several bars, whole-number
ticks each once, a day's bar over its own day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from console import charts

NOW = datetime(2026, 11, 27, 2, 0, tzinfo=UTC)
TODAY = NOW.replace(hour=0)


def test_one_failed_step_is_one_bar_of_several_slots_not_the_whole_panel():
    fig = charts.failures_figure([{"workflow": "w", "step": "s", "runs": 1}])
    low, high = sorted(fig.layout.yaxis.range)
    assert high - low >= charts.MIN_SLOTS  # the one bar takes at most a slot
    assert fig.layout.yaxis.range[0] > fig.layout.yaxis.range[1]  # the first on top
    assert (fig.layout.xaxis.dtick, fig.layout.xaxis.tick0) == (1, 0)  # 0, 1: not 0 0 0 1 1 1


def test_many_failed_steps_keep_their_own_ticks_and_most_failures_first():
    rows = [{"workflow": "w", "step": f"s{i}", "runs": i * 10} for i in range(1, 9)]
    fig = charts.failures_figure(rows)
    assert fig.layout.xaxis.dtick is None
    assert next(iter(fig.data[0].y)) == "w · s8"


def test_one_agent_workflow_and_one_box_leave_room():
    fig = charts.agent_use_figure(
        [{"workflow": "w", "tokens_in": 10, "tokens_out": 2, "cost_usd": None}]
    )
    low, high = sorted(fig.layout.yaxis.range)
    assert high - low >= charts.MIN_SLOTS
    box = charts.durations_figure([{"workflow": "w", "step": "s", "outcome": "ok", "seconds": 1.0}])
    low, high = box.layout.xaxis.range
    assert high - low >= charts.MIN_SLOTS and (low + high) / 2 == 0  # the one box centred
    assert box.data[0].boxpoints == "all"  # one value shows as a point


def test_a_days_bar_lies_over_its_own_day():
    window = {"since": TODAY - timedelta(days=7), "until": NOW, "bucket_s": 86400}
    fig = charts.over_time_figure([{"bucket": TODAY, "state": "completed", "runs": 3}], window)
    bar = fig.data[0]
    day_ms = 86400 * 1000
    assert 0 <= bar.offset and bar.offset + bar.width <= day_ms  # not centred on midnight
    assert datetime.fromisoformat(str(fig.layout.xaxis.range[1])) >= TODAY + timedelta(days=1)
    assert fig.layout.yaxis.dtick == 1
