"""Threadline's engine adapter: everything that touches Postgres and Absurd. Never imports panel."""

from typing import Any

__all__ = ["connect"]


def __getattr__(name: str) -> Any:
    """`from engine_adapter import connect`, loaded on first use: importing engine_adapter stays
    cheap (no pandas, no SQLAlchemy) for the processes that never explore."""
    if name == "connect":
        import importlib

        return importlib.import_module("engine_adapter.explore.client").connect
    raise AttributeError(f"module 'engine_adapter' has no attribute {name!r}")
