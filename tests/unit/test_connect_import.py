"""`from engine_adapter import connect` is short to type and costs nothing until used: importing
engine_adapter loads neither pandas nor SQLAlchemy (every process imports it)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_importing_engine_adapter_stays_cheap_and_connect_is_there():
    probe = (
        "import sys, engine_adapter;"
        "print(sorted(m for m in ('pandas', 'sqlalchemy') if m in sys.modules));"
        "from engine_adapter import connect;"
        "print(connect.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:2] == ["[]", "engine_adapter.explore.client"]


def test_an_unknown_name_is_an_attribute_error():
    import engine_adapter

    with pytest.raises(AttributeError, match="no attribute 'conect'"):
        engine_adapter.conect  # noqa: B018
