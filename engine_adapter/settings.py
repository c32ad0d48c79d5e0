"""Where Threadline keeps its state and which database it talks to."""

from __future__ import annotations

import json
import os
from pathlib import Path

DATABASE_URL_ENV = "THREADLINE_DATABASE_URL"
HOME_ENV = "THREADLINE_HOME"
QUEUE = "threadline"
HANDLER_NAME = "threadline.run"
HANDLER_VERSION = 1


class NotConfigured(RuntimeError):
    """No database to talk to: neither THREADLINE_DATABASE_URL nor a started embedded server."""


def threadline_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".threadline").expanduser()


def credentials_path(home: Path | None = None) -> Path:
    return (home or threadline_home()) / "credentials.json"


def database_url() -> str:
    """THREADLINE_DATABASE_URL if set, else the embedded server's URL written by `threadline up`."""
    url = os.environ.get(DATABASE_URL_ENV)
    if url:
        return url
    path = credentials_path()
    try:
        return json.loads(path.read_text())["url"]
    except FileNotFoundError:
        raise NotConfigured(
            f"no database: set {DATABASE_URL_ENV} or start the embedded one with `threadline up` "
            f"(looked for {path})"
        ) from None
