"""The embedded PostgreSQL server, for real: initdb, pg_ctl, psycopg. No mocks."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from engine_adapter.store.embedded import SERVICE_USER, VAR_LIB, EmbeddedPostgres, ensure_started

IS_ROOT = os.geteuid() == 0


def _discard(pg: EmbeddedPostgres) -> None:
    """Stop the server and remove its data, including a relocated data dir under /var/lib."""
    try:
        pg.stop(mode="immediate")
    finally:
        if pg.location_file.exists():
            shutil.rmtree(pg.data_dir.parent, ignore_errors=True)
        shutil.rmtree(pg.home, ignore_errors=True)


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(tmp_path_factory.mktemp("home"))
    try:
        server.start()
        yield server
    finally:
        _discard(server)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_credentials_and_connect(pg: EmbeddedPostgres) -> None:
    creds = pg.credentials()
    assert set(creds) == {"user", "password", "port", "database", "url"}
    assert creds["url"] == (
        f"postgresql://{creds['user']}:{creds['password']}@127.0.0.1:{creds['port']}/threadline"
    )
    assert _mode(pg.credentials_file) == 0o600
    assert pg.credentials_file.stat().st_uid == os.geteuid()
    assert _mode(pg.data_dir) == 0o700
    with psycopg.connect(creds["url"]) as conn:
        assert conn.execute("select current_user, current_database()").fetchone() == (
            "threadline",
            "threadline",
        )
        # The server listens on the port chosen at init, which is recorded, not a default.
        assert int(conn.execute("show port").fetchone()[0]) == creds["port"]
    with pytest.raises(psycopg.OperationalError):  # password auth is really enforced
        psycopg.connect(
            host="127.0.0.1",
            port=creds["port"],
            user="threadline",
            password="wrong",
            dbname="threadline",
        ).close()


def test_start_twice_returns_same_url_and_server(pg: EmbeddedPostgres) -> None:
    pid = (pg.data_dir / "postmaster.pid").read_text().split()[0]
    assert pg.start() == pg.start() == pg.credentials()["url"]
    assert (pg.data_dir / "postmaster.pid").read_text().split()[0] == pid
    assert ensure_started(pg.home) == pg.credentials()["url"]


def test_restart_keeps_data(pg: EmbeddedPostgres) -> None:
    url = pg.credentials()["url"]
    with psycopg.connect(url) as conn:
        conn.execute("create table kept (v text)")
        conn.execute("insert into kept values ('still here')")
    pg.stop()
    assert not pg.is_running()
    assert pg.start() == url
    assert pg.is_running()
    with psycopg.connect(url) as conn:
        assert conn.execute("select v from kept").fetchall() == [("still here",)]


def test_taken_port_is_replaced(pg: EmbeddedPostgres) -> None:
    old = pg.credentials()
    pg.stop()
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore TIME_WAIT
        squatter.bind(("127.0.0.1", old["port"]))
        squatter.listen()
        url = pg.start()
    new = pg.credentials()
    assert new["port"] != old["port"] and new["password"] == old["password"]
    assert url == new["url"] and f":{new['port']}/" in url
    assert _mode(pg.credentials_file) == 0o600
    with psycopg.connect(url) as conn:
        assert conn.execute("select v from kept").fetchall() == [("still here",)]


def test_failed_start_raises_with_log_tail(pg: EmbeddedPostgres) -> None:
    pg.stop()
    conf = pg.data_dir / "postgresql.conf"
    original = conf.read_text()
    with conf.open("a") as f:  # appending keeps the file's owner (the service user when root)
        f.write("\nno_such_setting_xyz = 1\n")
    try:
        with pytest.raises(RuntimeError, match="no_such_setting_xyz") as err:
            pg.start(timeout=10)
        assert str(pg.data_dir) in str(err.value)
    finally:
        conf.write_text(original)
    assert pg.start() == pg.credentials()["url"]


def test_stop_then_not_running(pg: EmbeddedPostgres) -> None:
    pg.start()
    pg.stop()
    assert not pg.is_running()
    pg.stop()  # stopping a stopped server is harmless
    assert not (pg.data_dir / "postmaster.pid").exists()


@pytest.mark.skipif(not IS_ROOT, reason="the root case needs root")
def test_root_with_private_home_relocates_data() -> None:
    # A home under /root (mode 0700) the service user cannot traverse; its mode must not change.
    home = Path(tempfile.mkdtemp(dir=Path.home()))
    home_mode = _mode(home)
    pg = EmbeddedPostgres(home)
    try:
        url = ensure_started(home)
        assert pg.is_running()
        assert pg.data_dir.is_relative_to(VAR_LIB) and pg.data_dir.name == "pgdata"
        assert Path((home / "pgdata-location").read_text().strip()) == pg.data_dir
        svc = pwd.getpwnam(SERVICE_USER)
        for path in (pg.data_dir, pg.log_file):
            assert path.stat().st_uid == svc.pw_uid
        assert _mode(pg.data_dir) == 0o700 and _mode(pg.log_file) == 0o600
        assert _mode(home) == home_mode and _mode(Path.home()) == 0o700
        assert _mode(pg.credentials_file) == 0o600 and pg.credentials_file.stat().st_uid == 0
        with psycopg.connect(url) as conn:
            conn.execute("create table t (v int)")
            conn.execute("insert into t values (42)")
        pg.stop()
        assert not pg.is_running()
        # A fresh object (a later process) finds the relocated data via pgdata-location.
        again = EmbeddedPostgres(home)
        assert again.start() == url
        with psycopg.connect(url) as conn:
            assert conn.execute("select v from t").fetchone() == (42,)
    finally:
        _discard(pg)
    assert not pg.data_dir.exists()


@pytest.mark.skipif(not IS_ROOT, reason="the root case needs root")
def test_root_with_traversable_home_keeps_data_in_home() -> None:
    home = Path(tempfile.mkdtemp(dir="/tmp"))
    home.chmod(0o755)
    pg = EmbeddedPostgres(home)
    try:
        url = pg.start()
        assert pg.data_dir == home / "pgdata" and not pg.location_file.exists()
        assert pg.data_dir.stat().st_uid == pwd.getpwnam(SERVICE_USER).pw_uid
        assert _mode(pg.data_dir) == 0o700
        with psycopg.connect(url) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
    finally:
        _discard(pg)
