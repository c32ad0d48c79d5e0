"""Where Threadline keeps its state and which database it talks to."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from engine_adapter.model.errors import Conflict, Invalid

DATABASE_URL_ENV = "THREADLINE_DATABASE_URL"
HOME_ENV = "THREADLINE_HOME"
PG_PORT_ENV = "THREADLINE_PG_PORT"  # the embedded server's port (default: a free one, kept)
QUEUE = "threadline"
HANDLER_NAME = "threadline.run"
HANDLER_VERSION = 1


def application_name(command: str) -> str:
    """How a Threadline process (`threadline <command>`) names itself to Postgres."""
    return f"threadline {command}"


class NotConfigured(Conflict):
    """No database to talk to: neither THREADLINE_DATABASE_URL nor a started embedded server."""

    http_status = 503


def threadline_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".threadline").expanduser()


def port_from_env(name: str) -> int | None:
    """The TCP port environment variable `name` asks for; None when unset or empty."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise Invalid(f"{name}={value!r}: not a port (a number from 1 to 65535)")
    return int(value)


def pg_port_wanted() -> int | None:
    return port_from_env(PG_PORT_ENV)


def credentials_path(home: Path | None = None) -> Path:
    return (home or threadline_home()) / "credentials.json"


def read_credentials(home: Path | None = None) -> dict[str, Any]:
    """$THREADLINE_HOME/credentials.json: the owner's URL of the embedded server ("url") and the
    logins of the process roles ("roles": kind -> URL); {} when there is none yet."""
    try:
        return json.loads(credentials_path(home).read_text())
    except FileNotFoundError:
        return {}


def write_credentials(creds: dict[str, Any], home: Path | None = None) -> None:
    """Replace credentials.json atomically, readable by its owner only (0600)."""
    path = credentials_path(home)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)  # O_CREAT's mode does not apply to an existing file
        json.dump(creds, f, indent=2)
    tmp.replace(path)


def database_url(role: str | None = None) -> str:
    """THREADLINE_DATABASE_URL if set (used as given: the operator chose its role); else, from
    credentials.json, the login of the process role `role` (conductor, bots, console, hooks,
    viewer) once `db migrate` or `up` made it, or the owner's URL (migrations only)."""
    url = os.environ.get(DATABASE_URL_ENV)
    if url:
        return url
    creds = read_credentials()
    if role and role in creds.get("roles", {}):
        return creds["roles"][role]
    if role and "url" in creds and "roles" not in creds:
        # The server is made but not yet set up (migrated, logins given): a process role waits
        # for its first start to finish instead of reaching a half-made schema as the owner.
        raise NotConfigured(
            f"the embedded database of {credentials_path().parent} has no process logins yet "
            "(its first start has not finished): run `threadline db migrate` or `threadline up`"
        )
    if "url" in creds:
        return creds["url"]
    raise NotConfigured(
        f"no database: set {DATABASE_URL_ENV} or start the embedded one with `threadline up` "
        f"(looked for {credentials_path()})"
    )
