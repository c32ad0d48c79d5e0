"""Every module imports: the console loads its pages lazily, so a broken import would otherwise
surface only when a browser asks for that page."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import console
import engine_adapter

MODULES = sorted(
    info.name
    for package in (engine_adapter, console)
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
    if not info.name.endswith(".__main__")  # runs the command when imported
)


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name):
    importlib.import_module(name)


PARTS = [m for m in MODULES if m.startswith("engine_adapter.") and m.count(".") == 1]


@pytest.mark.parametrize("name", PARTS)
def test_each_part_says_what_it_exports(name):
    """A part's __init__ names its modules in __all__, and each one it names exists."""
    package = importlib.import_module(name)
    if not hasattr(package, "__path__"):
        return
    named = set(package.__all__)
    present = {info.name for info in pkgutil.iter_modules(package.__path__)} - {"__main__"}
    assert named == present, f"{name}.__all__ differs from its modules: {sorted(named ^ present)}"
