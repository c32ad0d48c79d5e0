"""Every notebook in notebooks/ runs top to bottom in a fresh kernel and leaves nothing behind;
a failing assert cell fails the test. Notebooks use a throwaway database on the session's server."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import nbformat
import psycopg
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from engine_adapter.model.settings import DATABASE_URL_ENV
from engine_adapter.testing import harness

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
NOTEBOOK_TIMEOUT_S = 300  # the whole notebook, every cell included


def execute(
    nb: nbformat.NotebookNode,
    workdir: Path,
    timeout_s: float = NOTEBOOK_TIMEOUT_S,
    shutdown: str = "graceful",
) -> None:
    """Run every cell in order in a new kernel, within one budget for the whole notebook. The
    kernel is then shut down as nbclient does (graceful: asked, SIGTERM and SIGKILL seconds later;
    immediate: SIGKILL to its process group)."""
    client = NotebookClient(
        nb,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
        shutdown_kernel=shutdown,
    )
    deadline = time.monotonic() + timeout_s
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            client.timeout = max(
                1, int(deadline - time.monotonic())
            )  # nbclient's limit is per cell
            client.execute_cell(cell, index)


def notebook_databases(server_url: str) -> set[str]:
    with psycopg.connect(server_url, autocommit=True) as admin:
        rows = admin.execute(
            "select datname from pg_database where datname like 'tl_nb_%'"
        ).fetchall()
    return {r[0] for r in rows}


def test_the_notebooks_are_there_and_committed_without_outputs():
    assert {p.name for p in NOTEBOOKS} >= {
        "01_quickstart.ipynb",
        "02_kill_mid_run.ipynb",
        "03_human_gate.ipynb",
        "04_schedule.ipynb",
        "05_control_flow.ipynb",
        "06_agent.ipynb",
        "07_contract.ipynb",
        "08_explore.ipynb",
    }
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.outputs == [] and c.execution_count is None for c in code), (
            f"{path.name} has outputs"
        )
        assert any("assert " in c.source for c in code), f"{path.name} asserts nothing"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_and_its_claims_hold(
    path: Path, server_url: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv(DATABASE_URL_ENV, server_url)  # the kernel inherits it
    before = notebook_databases(server_url)
    nb = nbformat.read(path, as_version=4)
    execute(nb, path.parent)
    assert notebook_databases(server_url) == before, "the notebook left its database behind"


def test_a_failing_assert_cell_fails_the_notebook(tmp_path: Path):
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("claim = 1 + 1"),
            nbformat.v4.new_code_cell("assert claim == 3, 'the claim does not hold'"),
            nbformat.v4.new_code_cell("open('after-the-failure', 'w').close()"),
        ]
    )
    with pytest.raises(CellExecutionError, match="the claim does not hold"):
        execute(nb, tmp_path)
    assert not (tmp_path / "after-the-failure").exists()  # execution stopped at the failing cell


LEAVE_A_TRACE = """
import json
from engine_adapter.store.embedded import EmbeddedPostgres
from engine_adapter.testing.notebook_env import NotebookEnv

env = NotebookEnv().start()
conductor, bots = env.start_conductor(), env.start_bots()
trace = {"home": str(env.home), "pids": [conductor.pid, bots.pid, env._reaper.proc.pid]}
if env.server_home is not None:
    data_dir = EmbeddedPostgres(env.server_home).data_dir
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    trace.update(server_home=str(env.server_home), data_dir=str(data_dir),
                 pids=trace["pids"] + [postmaster])
json.dump(trace, open("trace.json", "w"))
"""


def running(pid: int) -> bool:
    """Whether the pid names a live process (a zombie only waits to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize(
    "database, shutdown",
    [("server", "graceful"), ("server", "immediate"), ("embedded", "immediate")],
)
def test_a_notebook_that_fails_leaves_nothing_behind(
    database: str,
    shutdown: str,
    server_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    request: pytest.FixtureRequest,
):
    """The kernel dies seconds after the failing cell, or at once: too soon for atexit. What the
    notebook made must still go: its processes, its database or embedded server, its folders."""
    if database == "server":
        monkeypatch.setenv(DATABASE_URL_ENV, server_url)
    else:
        monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    # The kernel's temporary folders land here; like /tmp, any user may pass through it (as root,
    # the embedded server's user reads a password file from it).
    temp = Path(tempfile.mkdtemp(prefix="threadline-test-tmp-"))
    temp.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(temp, ignore_errors=True))
    monkeypatch.setenv("TMPDIR", str(temp))
    before = notebook_databases(server_url)
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(LEAVE_A_TRACE),
            nbformat.v4.new_code_cell("assert False, 'the claim does not hold'"),
            nbformat.v4.new_code_cell("env.close()"),
        ]
    )
    with pytest.raises(CellExecutionError, match="the claim does not hold"):
        execute(nb, tmp_path, shutdown=shutdown)
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace["home"].startswith(str(temp)) and ("data_dir" in trace) == (database == "embedded")

    def left_behind() -> list[str]:
        left = [f"database {name}" for name in notebook_databases(server_url) - before]
        left += [f"folder {path}" for path in temp.glob("threadline-nb*")]
        if "data_dir" in trace and Path(trace["data_dir"]).exists():
            left.append(f"data dir {trace['data_dir']}")
        return left + [f"process {pid}" for pid in trace["pids"] if running(pid)]

    try:
        harness.wait_for(lambda: not left_behind(), timeout=120, interval=0.5, what="the clean-up")
    except TimeoutError:
        left = left_behind()
        if "server_home" in trace:  # do not leave it running for the next test either
            harness.remove_server(Path(trace["server_home"]), mode="immediate")
        with psycopg.connect(server_url, autocommit=True) as admin:
            for name in notebook_databases(server_url) - before:
                admin.execute(f"drop database if exists {name} with (force)")
        pytest.fail(f"the failing notebook left behind: {left}")
