"""What can run: workflows and their versions, proposals to change them, bots and their model
backends.
"""

__all__ = [
    "bot_backends",
    "bot_config",
    "proposals",
    "workflows",
]
