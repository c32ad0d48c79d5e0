"""Paths a recipe may name: tried as a recipe's author would, through a real bot running real
steps, no `workdir:` makes the bots process create, chown or bind a path outside the run's own
directory and the directories THREADLINE_WORKDIRS allows, and never one in the install, another
run's directory or the account's home. Each attempt fails its step with a message naming the path,
and nothing outside is made or changed."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from engine_adapter.recipes.recipes import RecipeError
from engine_adapter.runs.spawn import spawn
from engine_adapter.sandbox import workdirs
from engine_adapter.sandbox.sandbox import RUNS_DIR_ENV, SandboxError, detect
from engine_adapter.sandbox.workdirs import WORKDIRS_ENV
from engine_adapter.testing import harness

MARK = "workdir-secret-5d2e"  # planted wherever a step must not look


def snapshot(path: Path) -> dict[str, Any]:
    """What is under path (names, sizes, modes), to show that nothing there changed."""
    if not path.exists() and not path.is_symlink():
        return {}
    found = {".": (path.lstat().st_mode, path.lstat().st_mtime_ns)}
    for item in sorted(path.rglob("*")):
        st = item.lstat()
        found[str(item.relative_to(path))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return found


def step_recipe(slug: str, workdir: str, command: str = "echo owned > planted.py; pwd") -> str:
    step = {"id": "a", "run_command": command}
    return json.dumps({"slug": slug, "workdir": workdir, "steps": [step]})


def forge(conn: psycopg.Connection, slug: str, workdir: str) -> None:
    """A recipe stored before validation refused such a workdir (or written around it): the bot
    checks again before the step runs."""
    conn.execute(
        "update threadline.workflows"
        " set recipe = jsonb_set(recipe, '{workdir}', to_jsonb(%s::text)) where slug = %s",
        (workdir, slug),
    )


def refused(conn: psycopg.Connection, procs: harness.ProcessSet, slug: str) -> str:
    """Run the workflow; its step must fail without running. Returns the step's output."""
    run_id = spawn(conn, slug).run_id
    view = harness.wait_for_state(procs.url, run_id, "failed", timeout=60)
    out = view["steps"][0]["output"]
    assert out.startswith("the step cannot run: workdir "), out
    assert "owned" not in out and MARK not in out
    return out


def start_refused(
    procs: harness.ProcessSet, allowed: Path, env: dict[str, str] | None = None
) -> str:
    """`threadline bots` whose THREADLINE_WORKDIRS names `allowed` must refuse to start, saying
    why. Returns what it said."""
    layout = {RUNS_DIR_ENV: str(procs.home / "runs"), WORKDIRS_ENV: str(allowed)}
    out = harness.run_cli(
        procs.url, "bots", home=procs.threadline_home, env={**layout, **(env or {})}, timeout=30
    )
    assert out.returncode != 0, out.stdout
    return out.stderr


def test_the_install_is_never_a_workdir(conn, apply, procs, workdir):
    """The reproduced escalation: a workdir in site-packages, made and handed to the step user,
    held code that root ran next. Now nothing is made there, not through a link in an allowed
    directory either, and no administrator can allow it."""
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    target = site / f"tl-attack-{uuid.uuid4().hex[:8]}"
    link = workdir / "lib"
    link.symlink_to(site)
    before = sorted(os.listdir(site))
    try:
        apply(step_recipe("into-site", str(target)))
        apply(step_recipe("through-link", str(link / target.name)))
        apply(step_recipe("site-itself", str(link)))
        procs.start("conductor")
        procs.start("bots")
        out = refused(conn, procs, "into-site")
        assert f"workdir {target} overlaps {site} (Threadline's installation)" in out
        out = refused(conn, procs, "through-link")
        assert f"workdir {link / target.name} (which is {target}) overlaps" in out
        assert "Threadline's installation" in out and "THREADLINE_WORKDIRS" in out
        out = refused(conn, procs, "site-itself")
        assert f"workdir {link} (which is {site}) overlaps" in out
        assert not target.exists()
        assert sorted(os.listdir(site)) == before
        said = start_refused(procs, site)
        assert f"THREADLINE_WORKDIRS: {site} overlaps" in said
        assert "Threadline's installation" in said
        # Nor may it be a directory every step writes.
        said = start_refused(procs, workdir, env={"THREADLINE_STEP_DIRS": str(site)})
        assert f"THREADLINE_STEP_DIRS: {site} overlaps {site} (Threadline's installation)" in said
    finally:
        if target.exists():  # only when the guard failed: never leave it in the install
            import shutil

            shutil.rmtree(target)


def test_another_runs_directory_is_never_a_workdir(conn, apply, procs):
    apply(
        "slug: victim\nsteps:\n  - id: keep\n"
        f"    run_command: 'echo {MARK} > secret.txt; chmod 600 secret.txt'\n"
    )
    procs.start("conductor")
    procs.start("bots")
    victim = spawn(conn, "victim").run_id
    harness.wait_for_state(procs.url, victim, "completed")
    theirs = procs.home / "runs" / victim
    before = snapshot(theirs)
    assert (theirs / "secret.txt").exists()

    apply(step_recipe("by-path", str(theirs), "cat secret.txt"))
    out = refused(conn, procs, "by-path")
    assert f"workdir {theirs} overlaps {procs.home / 'runs'} (the runs root" in out
    # Climbing out of its own directory is refused when the recipe is applied, and again when a
    # stored recipe says so anyway.
    with pytest.raises(RecipeError, match=f'workdir: "../{victim}" must not hold a ".."'):
        apply(step_recipe("climb", f"../{victim}", "cat secret.txt"))
    apply(step_recipe("climb", "mine", "cat secret.txt"))
    forge(conn, "climb", f"../{victim}")
    out = refused(conn, procs, "climb")
    assert f"workdir '../{victim}' must not hold a \"..\" component" in out
    assert snapshot(theirs) == before


def test_the_accounts_home_is_never_a_workdir(conn, apply, procs, tmp_path):
    """Bound read-write on an install run by an ordinary account, ~/.ssh showed its key."""
    home = tmp_path / "account"
    ssh = home / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_ed25519").write_text(MARK)
    (ssh / "id_ed25519").chmod(0o600)
    before = snapshot(home)
    apply(step_recipe("keys", str(ssh), "cat id_ed25519"))
    apply(step_recipe("new-in-home", str(home / "projects" / "new")))
    procs.start("conductor")
    procs.start("bots", env={"HOME": str(home)})
    out = refused(conn, procs, "keys")
    assert f"workdir {ssh} overlaps {home} (the home directory of the account" in out
    out = refused(conn, procs, "new-in-home")
    assert f"workdir {home / 'projects' / 'new'} overlaps {home}" in out
    assert snapshot(home) == before
    said = start_refused(procs, ssh, env={"HOME": str(home)})
    assert f"THREADLINE_WORKDIRS: {ssh} overlaps {home}" in said
    said = start_refused(procs, tmp_path, env={"HOME": str(home)})  # holds the home
    assert f"THREADLINE_WORKDIRS: {tmp_path} overlaps" in said


@pytest.mark.parametrize("swap", ["deeper", "out"])
def test_a_link_an_earlier_step_planted_leads_nowhere(conn, apply, procs, tmp_path, swap):
    """The first step, working in out/deeper, swaps a directory of the workdir's path for a link
    to a directory outside (one it could write, to show what would follow): the next step of the
    same run is refused before anything is made or run there."""
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o777)
    outside.chmod(0o777)
    plant = {
        "deeper": f"cd .. && rmdir deeper && ln -s {outside} deeper",
        "out": f"cd ../.. && mv out out.old && ln -s {outside} out",
    }[swap]
    apply(f"""
slug: planter
workdir: out/deeper
steps:
  - id: plant
    run_command: '{plant} && echo planted'
  - id: use
    run_command: 'echo owned > planted.py; pwd'
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "planter").run_id
    view = harness.wait_for_state(procs.url, run_id, "failed", timeout=60)
    plant_step, use = view["steps"]
    assert plant_step["status"] == "completed" and "planted" in plant_step["output"]
    assert use["output"].startswith(
        f"the step cannot run: workdir out/deeper: '{swap}' in the run's own directory is a "
        "symbolic link"
    ), use["output"]
    assert list(outside.iterdir()) == []  # nothing made, nothing written


def test_dotdot_and_unlisted_absolute_workdirs_are_refused(conn, apply, procs, workdir, tmp_path):
    workflows = "select count(*) as n from threadline.workflows"
    stored = conn.execute(workflows).fetchone()["n"]
    for bad in ("../escaped", "a/../../escaped", f"{workdir}/../escaped"):
        with pytest.raises(RecipeError, match=r'must not hold a "\.\." component'):
            apply(step_recipe("climber", bad))
    assert conn.execute(workflows).fetchone()["n"] == stored
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    elsewhere.chmod(0o777)
    apply(step_recipe("elsewhere", str(elsewhere)))
    apply(step_recipe("missing", str(workdir / "missing")))
    apply(step_recipe("fine", str(workdir)))
    apply(step_recipe("relative", "build/out"))
    procs.start("conductor")
    procs.start("bots")
    for slug, forged in (("up-one", "../escaped"), ("up-two", "../../escaped")):
        apply(step_recipe(slug, "mine"))
        forge(conn, slug, forged)
        out = refused(conn, procs, slug)
        assert f'workdir {forged!r} must not hold a ".." component' in out
    assert not (procs.home / "runs" / "escaped").exists() and not (procs.home / "escaped").exists()

    out = refused(conn, procs, "elsewhere")
    assert f"workdir {elsewhere} is not inside a directory this bot process allows" in out
    assert f"(THREADLINE_WORKDIRS={workdir.resolve()})" in out
    out = refused(conn, procs, "missing")
    assert f"workdir {workdir / 'missing'} does not exist" in out
    assert list(elsewhere.iterdir()) == [] and not (workdir / "missing").exists()

    # What is allowed still works: an absolute workdir inside THREADLINE_WORKDIRS, and a relative
    # one, made inside the run's own directory.
    done = spawn(conn, "fine").run_id
    view = harness.wait_for_state(procs.url, done, "completed")
    assert view["steps"][0]["output"].strip() == str(workdir.resolve())
    assert (workdir / "planted.py").read_text() == "owned\n"
    done = spawn(conn, "relative").run_id
    view = harness.wait_for_state(procs.url, done, "completed")
    made = procs.home / "runs" / done / "build" / "out"
    assert view["steps"][0]["output"].strip() == str(made)
    assert (made / "planted.py").read_text() == "owned\n"
    if os.geteuid() == 0:  # made for the step user, as the run's own directory is
        assert made.stat().st_uid == (procs.home / "runs" / done).stat().st_uid != 0
    assert made.stat().st_mode & 0o777 == 0o700


def test_the_directory_bound_is_the_one_checked(tmp_path, monkeypatch):
    """Between the bot's check and bubblewrap's bind, a step with write access to an allowed
    directory swaps the workdir for a link to another place: bubblewrap binds the directory the
    bot checked, through the descriptor it held, and a later check through a new descriptor
    refuses the link."""
    monkeypatch.setenv("THREADLINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("THREADLINE_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv(WORKDIRS_ENV, str(tmp_path / "work"))
    box = detect()
    if not box.bwrap:
        pytest.skip("bubblewrap cannot make a sandbox here")
    app = tmp_path / "work" / "app"
    app.mkdir(parents=True)
    (app / "mine.txt").write_text("checked\n")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text(MARK)
    for path in (app.parent, app, secret, *app.iterdir(), *secret.iterdir()):
        path.chmod(0o777 if path.is_dir() else 0o644)
    step = workdirs.step_dir(box, "run-1", str(app))
    with workdirs.opened(box, step) as mount:
        app.rename(app.with_name("app.old"))
        app.symlink_to(Path("..") / "secret")  # relative: it would resolve in the sandbox too
        out = subprocess.run(
            box.argv(["sh", "-c", "cat mine.txt key; true"], step.path, mount=mount),
            cwd="/",
            capture_output=True,
            text=True,
            timeout=60,
            **{**box.popen_kwargs(), "pass_fds": mount.pass_fds},
        )
    assert "checked" in out.stdout and MARK not in out.stdout + out.stderr, out
    with pytest.raises(SandboxError, match=f"workdir {app} \\(which is {secret}\\)"):
        with workdirs.opened(box, step):
            pass


def test_bots_help_names_the_allowlist():
    out = harness.run_cli("", "bots", "--help")
    assert "THREADLINE_WORKDIRS" in " ".join(out.stdout.split())
