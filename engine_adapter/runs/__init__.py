"""Runs and everything that changes them: spawn, state, the thread, child runs, gates and resume
links, limits, pause, events, schedules, notifications, commands and retention.
"""

__all__ = [
    "child_runs",
    "commands",
    "events",
    "gates",
    "notifications",
    "pause",
    "resume_tokens",
    "retention",
    "run_ids",
    "run_limits",
    "run_state",
    "schedules",
    "spawn",
    "thread_entries",
]
