"""The console signs people in, also on loopback: real console processes, raw HTTP, another local
OS account."""

from __future__ import annotations

import http.client
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

import pytest

from console import sessions
from engine_adapter.model.identity import os_user
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness
from tests.unit.test_console_access import old_hash

PAGES = [
    "/",
    "/run?id=01a20640-0000-7000-8000-000000000000",
    "/needs-you",
    "/recipes",
    "/recipe?slug=x",
    "/conductors",
]
INTRUDER = "tl-intruder"
GATE = 'slug: acc-gate\nbot: local\nsteps:\n  - id: ask\n    human_gate: "Go?"\n    timeout: 1h\n'


class Console:
    """One console process and an HTTP client for it that never follows redirects."""

    def __init__(
        self,
        procs: harness.ProcessSet,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
    ) -> None:
        self.procs, self.port = procs, harness.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        procs.start("console", args=["--port", str(self.port), *(args or [])], env=env)
        ready = "/recipes" if "--no-auth" in (args or []) else "/login"
        harness.wait_for(
            lambda: harness.answers(self.base + ready),
            timeout=90,
            interval=0.3,
            what="the console to serve",
        )

    def request(
        self,
        method: str,
        path: str,
        cookie: str | None = None,
        body: dict[str, str] | None = None,
        source: str = "127.0.0.1",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=30, source_address=(source, 0)
        )
        hdrs = dict(headers or {})
        if cookie:
            hdrs["Cookie"] = cookie
        data = None
        if body is not None:
            data = "&".join(f"{quote(k)}={quote(v)}" for k, v in body.items())
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        text = resp.read().decode(errors="replace")
        out = (resp.status, {k.lower(): v for k, v in resp.getheaders()}, text)
        conn.close()
        return out

    def link(self) -> str:
        """A fresh sign-in link, minted by the CLI as the account running the tests."""
        done = harness.run_cli(
            self.procs.url,
            "console",
            "link",
            "--port",
            str(self.port),
            home=self.procs.threadline_home,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def sign_in_with_link(self, link: str | None = None) -> str:
        token_path = (link or self.link()).split(str(self.port), 1)[1]
        status, headers, _ = self.request("GET", token_path)
        assert status == 302 and headers["location"].startswith("./login?next="), (status, headers)
        status, headers, _ = self.request("GET", headers["location"][1:])
        assert status == 302 and headers["location"] == "/", (status, headers)
        return cookie_of(headers)

    def sign_in(
        self, name: str, password: str, source: str = "127.0.0.1"
    ) -> tuple[int, dict[str, str], str]:
        return self.request(
            "POST",
            "/login",
            body={"username": name, "password": password, "next": "/"},
            source=source,
        )

    def websocket(self, page: str, cookie: str | None, bokeh_token: str) -> int:
        status, _, _ = self.request(
            "GET",
            page.split("?")[0].rstrip("/") + "/ws",
            cookie=cookie,
            headers={
                "Upgrade": "websocket",
                "Connection": "Upgrade",
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                "Origin": self.base,
                "Sec-WebSocket-Protocol": f"bokeh, {bokeh_token}",
            },
        )
        return status


def cookie_of(headers: dict[str, str]) -> str:
    match = re.search(r"(threadline_session=[^;]+)", headers.get("set-cookie", ""))
    assert match, headers
    return match.group(1)


def bokeh_token(page_html: str) -> str:
    match = re.search(r'"token":\s*"([^"]+)"', page_html) or re.search(
        r"token=([\w.-]+)", page_html
    )
    assert match, page_html[:500]
    return match.group(1)


def write_users(url: str, users: dict[str, tuple[str, list[str]]]) -> None:
    """Console passwords, set as the install's admin sets them (the owner's login)."""
    for name, (password, roles) in users.items():
        done = harness.run_cli(
            url,
            "console",
            "user",
            "add",
            name,
            "--password-stdin",
            *[a for r in roles for a in ("--role", r)],
            stdin=password + "\n",
        )
        assert done.returncode == 0, done.stderr


def test_every_page_and_the_websocket_need_a_session_also_on_loopback(procs):
    console = Console(procs)
    for page in PAGES:
        status, headers, body = console.request("GET", page)
        assert status == 302, (page, status, body[:200])
        assert headers["location"].startswith("./login?next="), headers
    for embed in (
        "/autoload.js",
        "/recipes/autoload.js",
    ):  # a page embedded elsewhere: no session either
        status, _, body = console.request(
            "GET", embed + "?bokeh-autoload-element=x&bokeh-absolute-url=/"
        )
        assert status == 404 and "bokeh" not in body.lower(), (embed, status, body[:200])
    cookie = console.sign_in_with_link()
    status, _, body = console.request("GET", "/recipes", cookie=cookie)
    assert status == 200 and "bokeh" in body.lower()
    token = bokeh_token(body)
    assert (
        console.websocket("/recipes", cookie, token) == 101
    )  # the same upgrade, signed in, is accepted
    assert console.websocket("/recipes", None, token) != 101
    assert console.websocket("/recipes", "threadline_session=forged", token) != 101


def test_a_sign_in_link_works_once(procs):
    console = Console(procs)
    path = console.link().split(str(console.port), 1)[1]
    assert path.startswith("/?token=")
    status, headers, _ = console.request("GET", path.replace("/?", "/run?id=abc&"))
    assert status == 302 and headers["location"].startswith(
        "./login?next="
    )  # trade the token first
    status, headers, _ = console.request("GET", headers["location"][1:])
    assert (
        status == 302 and headers["location"] == "/run?id=abc"
    )  # the same page, without the token
    cookie = cookie_of(headers)
    assert console.request("GET", "/run?id=abc", cookie=cookie)[0] == 200
    status, headers, _ = console.request("GET", path)  # the same link again
    assert status == 302
    status, _, body = console.request("GET", headers["location"][1:])
    assert status == 401 and "used up or expired" in body
    assert "threadline_session" not in console.request("GET", "/login" + path[1:])[1].get(
        "set-cookie", ""
    )


@pytest.fixture(scope="module")
def intruder() -> str:
    """Another local OS account (made here if missing)."""
    if subprocess.run(["id", INTRUDER], capture_output=True, check=False).returncode != 0:
        subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", INTRUDER], check=True
        )
    return INTRUDER


INTRUDER_SCRIPT = """
import http.client, json, sys
port, run_id = int(sys.argv[1]), sys.argv[2]
seen = {}
for path in ["/run?id=" + run_id, "/recipe?slug=acc-gate", "/?token=guessed"]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    seen[path] = [r.status, r.getheader("location"), run_id in r.read().decode()]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
c.request("GET", "/recipe/ws", headers={"Upgrade": "websocket", "Connection": "Upgrade",
          "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
          "Origin": "http://127.0.0.1:%d" % port, "Sec-WebSocket-Protocol": "bokeh, x"})
seen["ws"] = [c.getresponse().status]
print(json.dumps(seen))
"""


MINT_SCRIPT = """
import sys
import tempfile
from pathlib import Path
home = Path(sys.argv[1])
for name, mode in [("console-cookie-secret", "r"), ("console-cookie-secret", "a")]:
    try:
        open(home / name, mode).close()
        print("opened", name, mode)
    except PermissionError:
        pass
"""


def test_another_local_account_cannot_see_a_run_spawn_one_or_mint_a_link(
    db_url, conn, apply, intruder
):
    apply(GATE)
    run_id = spawn(conn, "acc-gate", {}).run_id
    runs_before = conn.execute("select count(*) as n from threadline.run_threads").fetchone()["n"]
    # A home others may enter (as one made before homes were 0700): the secrets in it must still
    # hold.
    home = Path(tempfile.mkdtemp(prefix="tl-home-"))
    home.chmod(0o755)
    procs = harness.ProcessSet(db_url, home)
    procs.threadline_home.mkdir()
    procs.threadline_home.chmod(0o755)
    try:
        console = Console(procs)
        console.link()
        done = subprocess.run(
            ["/usr/bin/python3", "-c", INTRUDER_SCRIPT, str(console.port), run_id],
            check=False,
            user=intruder,
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        for path in ["/run?id=" + run_id, "/recipe?slug=acc-gate", "/?token=guessed"]:
            status, location, saw_run = seen[path]
            assert status == 302 and location.startswith("./login") and not saw_run, (
                path,
                seen[path],
            )
        assert seen["ws"][0] != 101
        done = subprocess.run(
            ["/usr/bin/python3", "-c", MINT_SCRIPT, str(procs.threadline_home)],
            user=intruder,
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
        assert done.returncode == 0 and done.stdout == "", (done.stdout, done.stderr)
        assert (
            conn.execute("select count(*) as n from threadline.run_threads").fetchone()["n"]
            == runs_before
        )
    finally:
        procs.kill_all()
        shutil.rmtree(home, ignore_errors=True)


def test_failed_sign_ins_are_limited_per_user_name_and_per_address(procs):
    write_users(
        procs.url,
        {"ann": ("ann's long password", ["viewer"]), "bob": ("bob's long password", ["viewer"])},
    )
    console = Console(procs)
    for _ in range(5):
        status, _, body = console.sign_in("ann", "wrong", source="127.0.0.2")
        assert status == 401 and "Invalid user name or password" in body
    status, _, body = console.sign_in(
        "ann", "ann's long password", source="127.0.0.3"
    )  # the name is locked
    assert status == 429 and "Too many failed sign-ins" in body
    status, _, body = console.sign_in(
        "bob", "bob's long password", source="127.0.0.2"
    )  # so is the address
    assert status == 429
    status, headers, _ = console.sign_in("bob", "bob's long password", source="127.0.0.4")
    assert status == 302 and cookie_of(headers)


def test_a_removed_password_ends_its_sessions_at_once(procs):
    write_users(procs.url, {"ann": ("ann's long password", ["operator"])})
    console = Console(procs)
    status, headers, _ = console.sign_in("ann", "ann's long password")
    ann = cookie_of(headers)
    owner = console.sign_in_with_link()
    for cookie in (ann, owner):
        assert console.request("GET", "/recipes", cookie=cookie)[0] == 200
    done = harness.run_cli(procs.url, "console", "user", "remove", "ann")
    assert done.returncode == 0, done.stderr
    assert console.request("GET", "/recipes", cookie=ann)[0] == 302
    assert console.request("GET", "/recipes", cookie=owner)[0] == 200  # a link's session stays
    status, _, body = console.sign_in("ann", "ann's long password")
    assert status == 401 and "Invalid user name or password" in body


def test_no_auth_is_refused_off_loopback_and_warns_on_it(procs, db_url, logins, conn):
    done = harness.run_cli(
        db_url,
        "console",
        "--address",
        "0.0.0.0",
        "--no-auth",
        "--port",
        str(harness.free_port()),
        home=procs.threadline_home,
    )
    assert done.returncode == 2 and "--no-auth: refused on 0.0.0.0" in done.stderr
    # Started with the console's own login, it may not turn sign-in off itself...
    done = harness.run_cli(
        logins["console"],
        "console",
        "--no-auth",
        "--port",
        str(harness.free_port()),
        home=procs.threadline_home,
        timeout=90,
    )
    assert done.returncode == 2 and "only the install's owner turns sign-in off" in done.stderr
    sessions.allow_no_auth(conn, os_user(), "test")  # ... the owner does (`up --no-auth`)
    console = Console(procs, args=["--no-auth"])
    assert console.request("GET", "/recipes")[0] == 200  # the header's warning: tests/ui
    assert "sign-in OFF: --no-auth" in (procs.home / "console.log").read_text()


def test_an_old_users_file_tells_its_users_what_the_admin_runs(procs, tmp_path):
    """Passwords of an earlier version's users file (scrypt, which the database cannot check)
    sign in no more; the console's log and the person with the right password are told what
    the admin runs."""
    users = tmp_path / "users.json"
    users.write_text(
        json.dumps({"ann": {"password": old_hash("ann's password"), "roles": ["viewer"]}})
    )
    console = Console(procs, env={"THREADLINE_CONSOLE_USERS": str(users)})
    advice = "threadline console user add ann --role viewer"
    assert advice in (procs.home / "console.log").read_text()
    status, _, body = console.sign_in("ann", "ann's password")
    assert status == 401 and f"ask the admin to run `{advice}`" in body
    status, _, body = console.sign_in("ann", "a guess")
    assert status == 401 and "Invalid user name or password" in body and advice not in body
