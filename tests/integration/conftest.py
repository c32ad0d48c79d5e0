"""Fixtures of the integration tests beyond the suite's own (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir(mode=0o777)
    path.chmod(0o777)  # steps may run as an unprivileged user
    return path
