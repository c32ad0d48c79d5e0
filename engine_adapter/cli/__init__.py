"""The `threadline` command, the JSON envelope contract, the supervisor behind `up`, and `reset`."""

__all__ = [
    "contract",
    "contract_cli",
    "main",
    "reset",
    "supervisor",
]
