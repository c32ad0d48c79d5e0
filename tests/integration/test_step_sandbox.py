"""A step is untrusted code: tried as an attacker would, it cannot read Threadline's credentials
or secrets, its parent's environment or other runs' directories, cannot log in to the database,
and cannot approve its own gate. And where steps do run unsandboxed, health says so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from engine_adapter.runs.spawn import spawn
from engine_adapter.sandbox import kept_sandbox, step_fit
from engine_adapter.sandbox.sandbox import SandboxError, detect
from engine_adapter.sandbox.step_guard import process_tree
from engine_adapter.testing import harness
from tests.accounts import ordinary_account, package_copy, run_python

MARK = "s3cret-marker-7f1c"  # planted wherever a step must not look
REQUIRE_ENV = "THREADLINE_REQUIRE_SANDBOX"  # set by CI: a missing bubblewrap fails, not skips


@pytest.fixture(name="needs_bwrap")
def _bwrap_or_skip() -> None:
    """Hiding paths and processes needs bubblewrap; as root alone, steps run as the step user,
    which protects Threadline's files but not one run's directory from another's."""
    if detect().bwrap is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"bubblewrap cannot make a sandbox here, and {REQUIRE_ENV}=1")
        pytest.skip("bubblewrap cannot make a sandbox here (apt-get install bubblewrap)")


# Every way in that the issue lists, in one script: the environment (a recipe env naming
# Threadline's own variables and a webhook's secret), the parent's /proc environ (and everyone
# else's), the credentials file by relative and absolute path, and the database itself.
ATTACK = r"""
MARKER="s3cret-marker"; MARKER="$MARKER-7f1c"  # never in the step's own environment
echo "env: $(env | grep -c -e THREADLINE_DATABASE_URL -e HOOK_SECRET -e PGPASSWORD)"
echo "url: ${THREADLINE_DATABASE_URL:-none} hook: ${HOOK_SECRET:-none}"
for f in /proc/$PPID/environ /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done |
  grep -c "$MARKER" | sed 's/^/environ hits: /'
for f in ../../credentials.json ../../.threadline/credentials.json \
    "$TARGET_HOME/credentials.json"; do
  cat "$f" 2>/dev/null | grep -c "$MARKER" | sed "s|^|read $f: |"
done
echo "home entries: $(ls -A "$TARGET_HOME" 2>/dev/null | grep -c .)"
for role in threadline postgres threadline_conductor threadline_bots threadline_console; do
  PGCONNECT_TIMEOUT=5 psql -w "host=127.0.0.1 port=$DB_PORT user=$role dbname=$DB_NAME" \
    -Atc 'select 1' \
    >/dev/null 2>&1 && echo "LOGGED IN as $role" || echo "no login as $role"
done
for url in "" "$(cat "$TARGET_HOME/credentials.json" 2>/dev/null)"; do
  THREADLINE_DATABASE_URL="$url" "$TL_CLI" approve "$OTHER_RUN" --as alice >/dev/null 2>&1 \
    && echo "APPROVED $OTHER_RUN" || echo "approve failed"
done
echo done
"""


def test_a_step_cannot_steal_credentials_or_secrets(needs_bwrap, conn, apply, procs, tmp_path):
    home = tmp_path / ".threadline"
    home.mkdir()
    creds = home / "credentials.json"
    creds.write_text(json.dumps({"url": f"postgresql://threadline:{MARK}@127.0.0.1/x"}))
    creds.chmod(0o600)
    info = psycopg.conninfo.conninfo_to_dict(procs.url)
    apply(
        """
slug: attack
env: [TARGET_HOME, DB_PORT, DB_NAME, TL_CLI, OTHER_RUN]
webhooks:
  - path: attack/in
    secret: env:HOOK_SECRET
steps:
  - id: steal
    run_command: |
"""
        + "\n".join("      " + line for line in ATTACK.strip().splitlines())
        + """
  - id: ask
    human_gate: "Ship it?"
"""
    )
    # Validation refuses such env names (tests/unit/test_recipe_env.py); a recipe stored before
    # that rule still cannot have them passed.
    conn.execute("""update threadline.workflows set recipe = jsonb_set(recipe, '{env}',
                    recipe -> 'env' || '["THREADLINE_DATABASE_URL", "HOOK_SECRET", "PGPASSWORD"]')
                    where slug = 'attack'""")
    procs.start("conductor")
    apply("slug: victim\nsteps:\n  - {id: ask, human_gate: 'Release?', approvers: [alice]}\n")
    victim = spawn(conn, "victim").run_id
    harness.wait_for_state(procs.url, victim, "waiting")
    cli = shutil.which("threadline") or str(Path(sys.executable).with_name("threadline"))
    procs.start(
        "bots",
        env={
            "HOOK_SECRET": MARK,
            "PGPASSWORD": MARK,
            "TL_CLI": cli,
            "OTHER_RUN": victim,
            "TARGET_HOME": str(home),
            "DB_PORT": str(info["port"]),
            "DB_NAME": info["dbname"],
        },
    )
    run_id = spawn(conn, "attack").run_id
    view = harness.wait_for_state(procs.url, run_id, "waiting", timeout=60)
    out = view["steps"][0]["output"]
    assert out.rstrip().endswith("done"), out
    assert MARK not in out
    assert "env: 0" in out and "url: none hook: none" in out
    assert "environ hits: 0" in out
    assert "read ../../credentials.json: 0" in out and f"read {home}/credentials.json: 0" in out
    assert "home entries: 0" in out
    assert "LOGGED IN" not in out and out.count("no login as") == 5
    assert "APPROVED" not in out and out.count("approve failed") == 2
    assert view["state"] == "waiting"  # the gates are still the humans'
    assert conn.execute("select count(*) as n from threadline.decisions").fetchone()["n"] == 0
    assert harness.wait_for_state(procs.url, victim, "waiting")


def test_a_step_cannot_read_another_runs_directory(needs_bwrap, conn, apply, procs):
    apply("""
slug: neighbours
steps:
  - id: work
    run_command: |
      echo "{{payload.secret}}" > secret.txt
      ls .. 2>&1 | grep -c . | sed 's/^/neighbours visible: /'
      cat ../{{payload.other}}/secret.txt 2>&1 || echo "not readable"
""")
    procs.start("conductor")
    procs.start("bots")
    first = spawn(conn, "neighbours", {"secret": "first-run-only", "other": "none"}).run_id
    harness.wait_for_state(procs.url, first, "completed")
    second = spawn(conn, "neighbours", {"secret": "second", "other": first}).run_id
    out = harness.wait_for_state(procs.url, second, "completed")["steps"][0]["output"]
    assert "first-run-only" not in out and "not readable" in out
    assert "neighbours visible: 1" in out  # only its own directory
    mine = procs.home / "runs" / second
    assert mine.stat().st_mode & 0o777 == 0o700  # and outside THREADLINE_HOME
    assert not mine.is_relative_to(procs.home / ".threadline")


def test_health_says_plainly_when_steps_run_unsandboxed(conn, procs):
    procs.start("conductor", wait=True)
    procs.start("bots", env={"THREADLINE_SANDBOX": "none"}, wait=True)
    out = harness.run_cli(procs.url, "health")
    assert (
        "UNSANDBOXED" in out.stdout
        and "WARNING: 1 bot process(es) run steps UNSANDBOXED" in out.stdout
    )
    health = json.loads(harness.run_cli(procs.url, "health", "--json").stdout)
    assert len(health["unsandboxed_bots"]) == 1


def test_health_names_the_sandbox_in_use(conn, procs):
    procs.start("conductor", wait=True)
    procs.start("bots", wait=True)
    health = json.loads(harness.run_cli(procs.url, "health", "--json").stdout)
    assert health["unsandboxed_bots"] == []
    allowed = (procs.home / "work").resolve()  # the procs fixture allows it
    said = f"{detect().describe()}; absolute workdirs: inside {allowed} (THREADLINE_WORKDIRS)"
    said += f"; {step_fit.describe(detect())}"  # each step's network and limits
    said += kept_sandbox.describe(detect())  # whether a run's commands share one
    assert health["bots"][0]["sandbox"] == said
    out = harness.run_cli(procs.url, "health").stdout
    assert f"steps run {said}" in out


def test_an_unprivileged_threadline_sandboxes_with_bubblewrap(needs_bwrap, tmp_path):
    """Threadline run by an ordinary account: steps run in bubblewrap, which hides its home
    (with the credentials) and its processes, though they share its uid."""
    pw = ordinary_account("threadline-owner-test")
    base = tmp_path / "owner"
    code = package_copy(base)
    home = base / "home"
    (home / ".threadline").mkdir(parents=True)
    (home / ".threadline" / "credentials.json").write_text(MARK)
    for path in [base, *base.rglob("*")]:
        os.chown(path, pw.pw_uid, pw.pw_gid)
    for parent in base.parents:
        if parent == Path("/"):
            break
        parent.chmod(parent.stat().st_mode | 0o111)
    script = """
import os, subprocess
from engine_adapter.sandbox.sandbox import detect
box = detect()
assert box.user is None and box.bwrap, box.describe()
work = box.workdir("run-1", None)
cmd = ("cat $HOME/.threadline/credentials.json ../../.threadline/credentials.json; "
       "tr '\\\\0' '\\\\n' < /proc/$PPID/environ; ls /proc | grep -c '^[0-9]'")
out = subprocess.run(box.argv(["bash", "-c", cmd], work),
                     cwd=work, env={"PATH": "/usr/bin:/bin", "HOME": os.environ["HOME"]},
                     capture_output=True, text=True, **box.popen_kwargs())
print(box.describe())
print(out.stderr)
print(out.stdout)
"""
    result = run_python(
        pw, code, script, env={"HOME": str(home), "THREADLINE_SECRET_FOR_TEST": MARK}
    )
    assert result.returncode == 0, result.stderr
    assert "sandboxed: bubblewrap" in result.stdout
    assert MARK not in result.stdout
    assert int(result.stdout.strip().splitlines()[-1]) < 10  # only its own few processes


def test_an_allowed_workdir_overlapping_threadline_files_is_refused_at_start_up(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("THREADLINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("THREADLINE_RUNS_DIR", str(tmp_path / "runs"))
    venv = Path(sys.prefix).resolve()
    for bad, named in (
        (tmp_path, "THREADLINE_HOME"),  # holds it
        (tmp_path / "home" / "sub", "THREADLINE_HOME"),
        (tmp_path / "runs", "the runs root"),
        (venv / "lib", "Threadline's installation"),
        (Path.home() / ".ssh", "the home directory of the account"),
    ):
        monkeypatch.setenv("THREADLINE_WORKDIRS", f"{tmp_path / 'fine'}:{bad}")
        with pytest.raises(SandboxError, match=f"THREADLINE_WORKDIRS: {bad} overlaps .*{named}"):
            detect()
    monkeypatch.setenv("THREADLINE_WORKDIRS", "srv/app")
    with pytest.raises(SandboxError, match="'srv/app' must be an absolute path"):
        detect()
    monkeypatch.setenv("THREADLINE_WORKDIRS", f"{tmp_path / 'fine'}:{tmp_path / 'also'}")
    assert detect().workdirs == (tmp_path / "fine", tmp_path / "also")


def test_no_workflow_may_pass_another_workflows_webhook_secret(conn, apply):
    from engine_adapter.recipes.recipes import RecipeError

    apply(
        "slug: hooked\nwebhooks:\n  - {path: in, secret: 'env:HOOK_KEY'}\n"
        "steps:\n  - {id: a, run_command: ls}\n"
    )
    with pytest.raises(RecipeError, match="HOOK_KEY is a webhook secret of workflow 'hooked'"):
        apply("slug: thief\nenv: [HOOK_KEY]\nsteps:\n  - {id: a, run_command: env}\n")
    apply("slug: passer\nenv: [API_TOKEN]\nsteps:\n  - {id: a, run_command: env}\n")
    with pytest.raises(RecipeError, match="API_TOKEN is passed to the steps of workflow 'passer'"):
        apply(
            "slug: hooked2\nwebhooks:\n  - {path: in2, secret: 'env:API_TOKEN'}\n"
            "steps:\n  - {id: a, run_command: ls}\n"
        )
    slugs = {r["slug"] for r in conn.execute("select slug from threadline.workflows")}
    assert slugs == {"hooked", "passer"}


def test_network_false_leaves_a_step_no_network(needs_bwrap, conn, apply, procs):
    port = psycopg.conninfo.conninfo_to_dict(procs.url)["port"]
    probe = f"(echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo reached || echo unreachable"
    for slug, network in (("online", ""), ("offline", "network: false\n")):
        apply(f"slug: {slug}\n{network}steps:\n  - id: probe\n    run_command: '{probe}'\n")
    procs.start("conductor")
    procs.start("bots")
    online = spawn(conn, "online").run_id
    offline = spawn(conn, "offline").run_id
    # Neither reaches the host's loopback: every step has a network namespace of its own, and
    # one with the network gets it through slirp4netns (tests/security/test_step_network.py).
    for run_id in (online, offline):
        out = harness.wait_for_state(procs.url, run_id, "completed")["steps"][0]["output"]
        assert out.strip() == "unreachable"


def test_network_false_without_bubblewrap_fails_the_step_rather_than_run_online(conn, apply, procs):
    apply("slug: offline\nnetwork: false\nsteps:\n  - {id: a, run_command: 'echo ran'}\n")
    procs.start("conductor")
    procs.start("bots", env={"THREADLINE_SANDBOX": "none"})
    run_id = spawn(conn, "offline").run_id
    view = harness.wait_for_state(procs.url, run_id, "failed")
    assert "network: false, which needs bubblewrap" in view["steps"][0]["output"]
    assert "ran" not in view["steps"][0]["output"].split()


KILLED_BOT = """
import dataclasses, subprocess, sys, time
from engine_adapter.sandbox.sandbox import detect
box = detect()
if sys.argv[1] == "python":  # the fallback where setpriv is missing
    box = dataclasses.replace(box, setpriv=None, bwrap=None)
step = subprocess.Popen(box.argv(["sleep", "300"], box.workdir("run-1", None)), cwd="/",
                        start_new_session=True, **box.popen_kwargs())
print(step.pid, flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("way", ["setpriv", "python"])
def test_a_step_dies_with_its_bot(tmp_path, monkeypatch, way):
    monkeypatch.setenv("THREADLINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("THREADLINE_RUNS_DIR", str(tmp_path / "runs"))
    tmp_path.chmod(0o711)
    bot = subprocess.Popen(
        [sys.executable, "-c", KILLED_BOT, way], stdout=subprocess.PIPE, text=True
    )
    try:
        step = int(bot.stdout.readline())
        # Kill the bot once the command runs: by then each wrapper has set its death signal, and
        # bubblewrap's init has asked to die with its outer process (a bot killed before that can
        # leave the init waiting: the next bots process's start ends it, step_guard.end_strays).
        harness.wait_for(
            lambda: any(_command_name(pid) == "sleep" for pid, _ in process_tree(step)),
            timeout=10,
            what="the step's command to run",
        )
    finally:
        harness.kill(bot)

    def gone() -> bool:
        try:
            return Path(f"/proc/{step}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    harness.wait_for(gone, timeout=10, what="the step to die with its bot")


def _command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def host_processes_with(marker: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                stat = (cmdline.parent / "stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("mode", ["bwrap", "user"])
def test_a_step_leaves_no_process_behind(conn, apply, procs, mode, request):
    """A command that exits leaving a background child: in bubblewrap the kernel ends the step's
    PID namespace with it; without, the bot kills what is left of its process group."""
    if mode == "bwrap":
        request.getfixturevalue("needs_bwrap")
    marker = f"leftover-{uuid.uuid4().hex[:12]}"  # this test's own, whatever else is running
    apply(f"""
slug: leaves-child
steps:
  - id: a
    run_command: (exec -a {marker} sleep 300) & echo started
""")
    procs.start("conductor")
    procs.start("bots", env={"THREADLINE_SANDBOX": mode})
    run_id = spawn(conn, "leaves-child").run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert "started" in view["steps"][0]["output"]
    harness.wait_for(
        lambda: not host_processes_with(marker), timeout=10, what="the leftover child to be gone"
    )
