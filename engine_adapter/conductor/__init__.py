"""The conductor: the one generic workflow handler on Absurd (the only importer of absurd_sdk), its
notifier and reruns.
"""

__all__ = [
    "conductor",
    "notifier",
    "reruns",
    "run_handler",
]
