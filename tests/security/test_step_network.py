"""A step's network, tried as a recipe's author would, through real bots running real steps: every
step runs in a network namespace of its own, so it never reaches the host's loopback (a listener
the test opens, the database, the webhook ingress) nor sees the host's sockets in /proc/net/tcp;
`network: true` goes out through slirp4netns, which reaches what any machine on the network could
reach (the host's own non-loopback address included) and ends with the step; `network: false`
gets nothing; and without slirp4netns a step that wanted the network gets none, and says so."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from engine_adapter.runs.spawn import spawn
from engine_adapter.sandbox import kept_sandbox
from engine_adapter.sandbox.sandbox import detect
from engine_adapter.testing import harness
from tests.accounts import ordinary_account, package_copy, run_python

REQUIRE_ENV = "THREADLINE_REQUIRE_SANDBOX"  # set by CI: what is missing fails, not skips


@pytest.fixture(name="needs_slirp")
def _bwrap_and_slirp_or_skip() -> None:
    missing = [
        what
        for what, there in (
            ("bubblewrap (apt-get install bubblewrap)", detect().bwrap),
            ("slirp4netns (apt-get install slirp4netns)", shutil.which("slirp4netns")),
        )
        if not there
    ]
    if missing:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{', '.join(missing)} missing here, and {REQUIRE_ENV}=1")
        pytest.skip(f"needs {', '.join(missing)}")


def listener(host: str) -> Iterator[int]:
    """A TCP listener on host; yields its port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind((host, 0))
        server.listen(16)
        yield server.getsockname()[1]


@pytest.fixture
def loopback_port() -> Iterator[int]:
    yield from listener("127.0.0.1")


def host_address() -> str | None:
    """One of this host's own non-loopback IPv4 addresses, if it has one."""
    try:
        out = subprocess.run(
            ["ip", "-4", "-o", "addr", "show", "scope", "global"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    except OSError:
        return None
    found = re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
    return found[0] if found else None


def probe(host: str, port: int, label: str) -> str:
    """A bash line saying whether a TCP connection to host:port opens."""
    return (
        f"(exec 3<>/dev/tcp/{host}/{port}) 2>/dev/null && echo '{label}: reached' "
        f"|| echo '{label}: refused'"
    )


def sees(port: int, label: str) -> str:
    """A bash line counting the step's /proc/net/tcp lines on port (the host's listener)."""
    return f"echo \"{label}: $(cat /proc/net/tcp /proc/net/tcp6 | grep -ci ':{port:04X} ')\""


def recipe(slug: str, network: bool, lines: list[str]) -> str:
    step = {"id": "probe", "run_command": "\n".join(lines), "timeout": "60s"}
    return json.dumps({"slug": slug, "network": network, "steps": [step]})


def output(procs: harness.ProcessSet, run_id: str, state: str = "completed") -> str:
    return harness.wait_for_state(procs.url, run_id, state, timeout=60)["steps"][0]["output"]


def online_and_offline(conn, apply, procs, lines: list[str]) -> Iterator[tuple[str, str]]:
    """The same probe lines run once with the network and once without: (slug, output)."""
    for slug, network in (("online", True), ("offline", False)):
        apply(recipe(slug, network, lines))
    procs.start("conductor")
    procs.start("bots")
    for slug in ("online", "offline"):
        yield slug, output(procs, spawn(conn, slug).run_id)


def test_no_step_reaches_or_sees_the_hosts_loopback(needs_slirp, conn, apply, procs, loopback_port):
    db_port = psycopg.conninfo.conninfo_to_dict(procs.url)["port"]
    lines = [
        probe("127.0.0.1", loopback_port, "listener"),
        probe("127.0.0.1", int(db_port), "database"),
        probe("10.0.2.2", loopback_port, "host loopback via slirp4netns"),
        sees(loopback_port, "listener sockets seen"),
        sees(int(db_port), "database sockets seen"),
    ]
    for slug, out in online_and_offline(conn, apply, procs, lines):
        assert "reached" not in out, (slug, out)
        assert out.count("refused") == 3, (slug, out)
        assert "listener sockets seen: 0" in out and "database sockets seen: 0" in out, out


@pytest.fixture
def host_socket() -> Iterator[Path]:
    """A unix socket under /run that anyone may connect to, as a local database's is
    (/run/postgresql, which may trust its local users)."""
    where = Path("/run") / f"threadline-test-{os.getpid()}-{os.urandom(4).hex()}"
    where.mkdir(mode=0o755)
    path = where / ".s.PGSQL.5432"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(str(path))
            path.chmod(0o777)
            server.listen(4)
            yield path
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_no_step_reaches_a_hosts_unix_socket_under_run(
    needs_slirp, conn, apply, procs, host_socket
):
    check = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    s.connect({str(host_socket)!r}); print('socket: reached')\n"
        "except OSError as err:\n"
        "    print('socket: refused', err.errno)\n"
    )
    lines = [f"python3 -c {shlex.quote(check)}", f"ls {host_socket.parent} || true"]
    for slug, out in online_and_offline(conn, apply, procs, lines):
        assert "socket: refused" in out and "reached" not in out, (slug, out)
        assert ".s.PGSQL" not in out, (slug, out)


def test_a_step_cannot_post_to_the_webhook_ingress_on_loopback(
    needs_slirp, conn, apply, procs, tmp_path
):
    """An ingress on loopback takes webhooks without a secret (only local processes reach it):
    a step is not local."""
    apply("slug: open\nwebhooks:\n  - path: open\nsteps:\n  - {id: s, run_command: echo hooked}\n")
    procs.start("hooks", args=["--port", "0"])
    log = tmp_path / "hooks.log"
    port = harness.wait_for(
        lambda: (
            log.exists() and re.search(r"listening on http://\S+?:(\d+)/hooks/", log.read_text())
        ),
        timeout=60,
        what="threadline hooks to listen",
    ).group(1)
    post = (
        f"(printf 'POST /hooks/open HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\n"
        f"Content-Length: 2\\r\\nConnection: close\\r\\n\\r\\n{{}}' > /dev/tcp/127.0.0.1/{port}) "
        "2>/dev/null && echo posted || echo 'not posted'"
    )
    apply(recipe("poster", True, [post]))
    procs.start("conductor")
    procs.start("bots")
    out = output(procs, spawn(conn, "poster").run_id)
    assert out.strip() == "not posted"
    runs = conn.execute("select count(*) as n from threadline.run_threads where workflow = 'open'")
    assert runs.fetchone()["n"] == 0


def test_network_true_goes_out_through_its_own_interface_and_false_gets_none(
    needs_slirp, conn, apply, procs
):
    """What slirp4netns allows: outbound connections from the host's network stack, so the host's
    own non-loopback address is reachable like any other machine's (it is not loopback)."""
    address = host_address()
    lines = [
        'echo "tap: $(grep -c tap0 /proc/net/dev)"',
        'echo "default route: $(awk \'$2 == "00000000"\' /proc/net/route | grep -c tap0)"',
        'echo "resolver: $(grep nameserver /etc/resolv.conf)"',
    ]
    outside = None
    if address:
        outside = listener(address)
        lines.append(probe(address, next(outside), "host address"))
    apply(recipe("online", True, lines))
    apply(recipe("offline", False, lines))
    procs.start("conductor")
    procs.start("bots")
    online = output(procs, spawn(conn, "online").run_id)
    offline = output(procs, spawn(conn, "offline").run_id)
    assert "tap: 1" in online and "default route: 1" in online, online
    assert "resolver: nameserver 10.0.2.3" in online, online
    assert "tap: 0" in offline and "default route: 0" in offline, offline
    if outside is not None:
        assert "host address: reached" in online, online
        assert "host address: refused" in offline, offline
        outside.close()


def slirps_of(pid: int) -> list[int]:
    """The slirp4netns processes a bots process started (through setpriv, which execs)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :]
        fields = rest.split()
        if name == "slirp4netns" and int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


@pytest.mark.parametrize("keep", ["off", "on"])
def test_slirp4netns_ends_with_the_step_and_with_its_bot(
    needs_slirp, conn, apply, procs, tmp_path, keep
):
    """A step's slirp4netns ends with it; a kept sandbox's (the default) lives as long as the
    sandbox, and either ends with a bots process killed."""
    flag = tmp_path / "started"
    apply(recipe("waits", True, [f": > {flag}", "sleep 300"]))
    apply(recipe("quick", True, ["sleep 2; echo done"]))
    procs.start("conductor")
    bots = procs.start("bots", wait=True, env={kept_sandbox.KEEP_ENV: keep})
    quick = spawn(conn, "quick").run_id
    harness.wait_for(lambda: slirps_of(bots.pid), timeout=30, what="slirp4netns for the step")
    assert output(procs, quick).strip() == "done"
    if keep == "off":
        harness.wait_for(lambda: not slirps_of(bots.pid), timeout=10, what="slirp4netns to end")
    spawn(conn, "waits")
    harness.wait_for(flag.exists, timeout=30, what="the step to start")
    running = slirps_of(bots.pid)
    assert running
    bots.send_signal(signal.SIGKILL)
    bots.wait()

    def gone() -> bool:
        return not any(Path(f"/proc/{pid}").exists() and not zombie(pid) for pid in running)

    harness.wait_for(gone, timeout=10, what="slirp4netns to end with its bot")


def test_a_networked_step_leaves_no_descriptor_behind_in_its_bot(needs_slirp, conn, apply, procs):
    """Each networked step once left a pipe open in the bots process: after some thousand steps
    it ran out, or past 1024 where select could no longer wait on one. (Each step in a sandbox
    of its own: kept sandboxes hold theirs until they end, test_kept_sandbox.py.)"""
    apply(recipe("net", True, ["echo ok"]))
    procs.start("conductor")
    bots = procs.start("bots", wait=True, env={kept_sandbox.KEEP_ENV: "off"})

    def open_fds() -> int:
        return len(os.listdir(f"/proc/{bots.pid}/fd"))

    def batch(n: int) -> None:
        for run_id in [spawn(conn, "net").run_id for _ in range(n)]:
            assert output(procs, run_id).strip() == "ok"

    batch(3)  # the bot's own connections and files are open by now
    before = open_fds()
    batch(12)
    assert open_fds() <= before + 2, f"{before} descriptors before twelve steps, {open_fds()} after"


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_without_slirp4netns_a_step_gets_no_network_and_says_so(
    needs_slirp, conn, apply, procs, request, loopback_port
):
    """Never the host's network instead: the step runs offline, and health and the failed step
    say why."""
    # The system's programs, slirp4netns left out, outside /tmp (each sandbox has its own).
    farm = Path(tempfile.mkdtemp(prefix="threadline-test-path-", dir="/var/tmp"))
    farm.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(farm))
    for folder in ("/usr/local/bin", "/usr/bin", "/usr/sbin", "/sbin", "/bin"):
        for program in Path(folder).iterdir() if Path(folder).is_dir() else ():
            if program.name != "slirp4netns" and not (farm / program.name).exists():
                (farm / program.name).symlink_to(program)
    lines = [probe("127.0.0.1", loopback_port, "listener"), "grep -q tap0 /proc/net/dev || exit 7"]
    apply(recipe("online", True, [*lines, "echo online"]))
    procs.start("conductor")
    procs.start("bots", env={"PATH": str(farm)}, wait=True)
    out = output(procs, spawn(conn, "online").run_id, "failed")
    assert "online" not in out.split() and "listener: refused" in out, out
    assert "ran without the network: slirp4netns is not installed" in out, out
    health = json.loads(harness.run_cli(procs.url, "health", "--json").stdout)
    assert "network: NONE for every step" in health["bots"][0]["sandbox"]


AS_ACCOUNT = r"""
import sys
from engine_adapter.sandbox import step_fit, step_limits, workdirs
from engine_adapter.sandbox.process_runner import run_process
from engine_adapter.sandbox.sandbox import detect

box = detect()
assert box.user is None and box.bwrap, box.describe()
print(step_fit.describe(box))


def run(command, limits):
    step = workdirs.step_dir(box, "run-1", None)
    with (
        workdirs.opened(box, step) as mount,
        step_fit.fitted(box, step_limits.merged(limits), True, step.mount) as fit,
    ):
        result = run_process(
            box.argv(["bash", "-c", command], step.path, mount=mount, fit=fit.fit),
            cwd=str(step.path),
            env={"PATH": "/usr/bin:/bin"},
            timeout_s=60,
            popen_kwargs={**box.popen_kwargs(), "pass_fds": mount.pass_fds + fit.pass_fds},
            contained=True,
            on_start=fit.started,
            should_continue=fit.within,
        )
        return fit.judged(result)


print(run(sys.argv[1], None).output)
bomb = "for i in $(seq 100); do sleep 30 & done 2>/dev/null; wait"
print("limit:", run(bomb, {"pids": 12}).limit)
"""


def test_an_unprivileged_threadline_gives_steps_their_network_and_limits(
    needs_slirp, tmp_path, loopback_port
):
    """Threadline run by an ordinary account: bubblewrap makes the user namespace that owns the
    step's network, and slirp4netns joins it; RLIMIT_NPROC counts in it."""
    account = ordinary_account("threadline-net-test")
    base = tmp_path / "owner"
    code = package_copy(base)
    (base / "home").mkdir()
    for path in [base, *base.rglob("*")]:
        os.chown(path, account.pw_uid, account.pw_gid)
    command = "; ".join(
        ['echo "tap: $(grep -c tap0 /proc/net/dev)"', probe("127.0.0.1", loopback_port, "listener")]
    )
    result = run_python(
        account,
        code,
        AS_ACCOUNT,
        command,
        env={
            "HOME": str(base / "home"),
            "THREADLINE_HOME": str(base / "home" / ".threadline"),
            "THREADLINE_RUNS_DIR": str(base / "runs"),
        },
    )
    assert result.returncode == 0, result.stderr
    assert "outbound through slirp4netns" in result.stdout, result.stdout
    assert "tap: 1" in result.stdout and "listener: refused" in result.stdout, result.stdout
    assert "limit: pids limit 12 processes reached" in result.stdout, result.stdout
