"""Where a step's command runs, outside Threadline's trust boundary: bubblewrap, the step user,
working directories, limits, the network namespace, and a sandbox kept for a run's commands.
"""

__all__ = [
    "afterwards",
    "kept_sandbox",
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
