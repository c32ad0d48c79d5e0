"""Every notebook in notebooks/ runs top to bottom in a fresh kernel and leaves nothing behind;
a failing assert cell fails the test. Notebooks use a throwaway database on the session's server."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import psycopg
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from engine_adapter.settings import DATABASE_URL_ENV

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
NOTEBOOK_TIMEOUT_S = 300  # the whole notebook, every cell included


def execute(nb: nbformat.NotebookNode, workdir: Path, timeout_s: float = NOTEBOOK_TIMEOUT_S) -> None:
    """Run every cell in order in a new kernel, within one budget for the whole notebook."""
    client = NotebookClient(nb, kernel_name="python3", resources={"metadata": {"path": str(workdir)}})
    deadline = time.monotonic() + timeout_s
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            client.timeout = max(1, int(deadline - time.monotonic()))  # nbclient's limit is per cell
            client.execute_cell(cell, index)


def notebook_databases(server_url: str) -> set[str]:
    with psycopg.connect(server_url, autocommit=True) as admin:
        rows = admin.execute("select datname from pg_database where datname like 'tl_nb_%'").fetchall()
    return {r[0] for r in rows}


def test_the_notebooks_are_there_and_committed_without_outputs():
    assert {p.name for p in NOTEBOOKS} >= {"01_quickstart.ipynb", "02_kill_mid_run.ipynb",
                                           "03_human_gate.ipynb"}
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.outputs == [] and c.execution_count is None for c in code), f"{path.name} has outputs"
        assert any("assert " in c.source for c in code), f"{path.name} asserts nothing"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_and_its_claims_hold(path: Path, server_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(DATABASE_URL_ENV, server_url)  # the kernel inherits it
    before = notebook_databases(server_url)
    nb = nbformat.read(path, as_version=4)
    execute(nb, path.parent)
    assert notebook_databases(server_url) == before, "the notebook left its database behind"


def test_a_failing_assert_cell_fails_the_notebook(tmp_path: Path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("claim = 1 + 1"),
        nbformat.v4.new_code_cell("assert claim == 3, 'the claim does not hold'"),
        nbformat.v4.new_code_cell("open('after-the-failure', 'w').close()"),
    ])
    with pytest.raises(CellExecutionError, match="the claim does not hold"):
        execute(nb, tmp_path)
    assert not (tmp_path / "after-the-failure").exists()  # execution stopped at the failing cell
