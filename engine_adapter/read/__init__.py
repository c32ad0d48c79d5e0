"""Read models: run lists, step trees, why a step failed, and the engine's own view for the debug
pane.
"""

__all__ = [
    "engine_debug",
    "read_model",
    "run_list",
    "step_report",
    "step_tree",
    "timeline",
]
