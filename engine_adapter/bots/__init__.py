"""Bots: claim an instruction, run it in the sandbox, write the reply and the terminal signal; the
durable agent loop and its tools.
"""

__all__ = [
    "agent_journal",
    "agent_loop",
    "agent_tools",
    "bots",
]
