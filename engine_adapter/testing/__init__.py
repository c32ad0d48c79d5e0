"""Proof helpers for tests and notebooks: throwaway servers, process harness, notebook environments
and DataFrames of a run.
"""

__all__ = [
    "frames",
    "harness",
    "notebook_env",
]
