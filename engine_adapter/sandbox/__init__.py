"""Where a step's command runs, outside Threadline's trust boundary: bubblewrap, the step user,
working directories, limits and the network namespace.
"""

__all__ = [
    "afterwards",
    "plain_command",
    "process_runner",
    "readable",
    "sandbox",
    "step_fit",
    "step_guard",
    "step_limits",
    "step_network",
    "workdirs",
]
