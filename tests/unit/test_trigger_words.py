"""How a run started, in the words its thread opens with (pure: no database)."""

from __future__ import annotations

from engine_adapter.runs.spawn import describe_trigger, manual_key


def test_catch_up_counts_skipped_slots_in_words():
    slot = {"kind": "schedule", "slot_local": "2026-11-23 07:00 UTC"}
    assert describe_trigger(slot) == "by schedule, slot 2026-11-23 07:00 UTC"
    assert describe_trigger(dict(slot, skipped=1)).endswith("(catching up; 1 earlier slot skipped)")
    assert describe_trigger(dict(slot, skipped=2)).endswith(
        "(catching up; 2 earlier slots skipped)"
    )


def test_manual_keys_are_per_workflow():
    assert manual_key("wf-a", "1") == "manual:wf-a:1" != manual_key("wf-b", "1")
