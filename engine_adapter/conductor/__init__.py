"""The conductor: the one generic workflow handler on Absurd (the only importer of absurd_sdk), its
notifier and reruns.
"""

__all__ = [
    "bot_steps",
    "conductor",
    "control_flow",
    "handler_base",
    "instructions",
    "known_checkpoints",
    "lifecycle",
    "notifier",
    "reruns",
    "run_handler",
    "waits",
]
