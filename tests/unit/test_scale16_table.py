"""The scaling table's arithmetic: each system's ratio to the fewest processes, Threadline's to
the subprocess baseline, and the two targets, from given throughputs (the issue's 16-core run)."""

from __future__ import annotations

from bench.fair_figures import Turn
from bench.scale16 import order, rates, scaling_table, targets

MEASURED = {  # processes -> bare Absurd, Absurd subprocess, Threadline (wf/s)
    1: (143.4, 136.8, 101.3),
    2: (289.0, 285.6, 169.8),
    8: (955.2, 905.0, 186.3),
}


def wf(measured: dict[int, tuple[float, float, float]]) -> dict[int, dict[str, float]]:
    return {
        count: {"bare": bare, "subprocess": sub, "threadline": ours}
        for count, (bare, sub, ours) in measured.items()
    }


def test_each_row_has_its_ratio_to_one_process_and_to_the_baseline():
    lines = scaling_table(wf(MEASURED))
    assert lines[2] == "| 1 | 143.4 | 136.8 | 101.3 | 0.74x |"
    assert lines[3] == "| 2 | 289.0 (2.02x) | 285.6 (2.09x) | 169.8 (1.68x) | 0.59x |"
    assert lines[4] == "| 8 | 955.2 (6.66x) | 905.0 (6.62x) | 186.3 (1.84x) | 0.21x |"


def test_the_targets_say_what_was_measured_and_whether_met():
    said = targets(wf(MEASURED))
    assert "Threadline 1.84x (bare Absurd 6.66x, subprocess 6.62x) - not met" in said[0]
    assert "Threadline 0.21x - not met" in said[1]
    met = targets(wf({1: (100.0, 100.0, 100.0), 8: (800.0, 700.0, 500.0)}))
    assert met[0].endswith("Threadline 5.00x (bare Absurd 8.00x, subprocess 7.00x) - met")
    assert met[1].endswith("Threadline 0.71x - met")


def test_without_one_and_eight_processes_no_target_is_judged():
    assert targets(wf({1: MEASURED[1], 2: MEASURED[2]})) == [
        "targets: not measured (they need turns at 1 and 8 processes)"
    ]


def test_ratios_are_to_the_fewest_processes_measured():
    lines = scaling_table(wf({2: MEASURED[2], 8: MEASURED[8]}))
    assert lines[0].startswith("| processes (ratio to 2) |")
    assert lines[3].startswith("| 8 | 955.2 (3.31x) |")


def test_medians_per_count_and_system_only_where_every_system_ran():
    def turn(rate: float) -> Turn:
        return Turn(rate, None, 0.0, 0.0, 0.0, 0.0)

    turns = {
        1: {"bare": [turn(10), turn(30)], "subprocess": [turn(5)], "threadline": [turn(4)]},
        2: {"bare": [turn(20)], "subprocess": [turn(9)], "threadline": []},
    }
    assert rates(turns) == {1: {"bare": 20.0, "subprocess": 5.0, "threadline": 4.0}}


def test_every_other_repeat_runs_the_counts_in_reverse():
    assert order([1, 2, 4, 8], 0) == [1, 2, 4, 8]
    assert order([1, 2, 4, 8], 1) == [8, 4, 2, 1]
