"""The `threadline` command (one module per command group, each adding its own parsers), the JSON
envelope contract, the supervisor behind `up`, and `reset`."""

__all__ = [
    "commands_govern",
    "commands_operate",
    "commands_recipes",
    "commands_runs",
    "commands_serve",
    "common",
    "contract",
    "contract_cli",
    "contract_follow",
    "main",
    "requests",
    "reset",
    "supervisor",
]
