"""Every module imports: the console loads its pages lazily, so a broken import would otherwise
surface only when a browser asks for that page."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import console
import engine_adapter

MODULES = sorted(
    f"{package.__name__}.{info.name}"
    for package in (engine_adapter, console)
    for info in pkgutil.iter_modules(package.__path__)
)


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name):
    importlib.import_module(name)
