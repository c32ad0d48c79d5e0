"""Who may open the console: loopback only, unless credentials are configured.

THREADLINE_CONSOLE_USERS names a JSON file {"user": "password", ...} for basic auth, and
THREADLINE_COOKIE_SECRET signs the session cookie. Replies are attributed to the signed-in user.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from pathlib import Path
from typing import Any

USERS_ENV = "THREADLINE_CONSOLE_USERS"
SECRET_ENV = "THREADLINE_COOKIE_SECRET"


class AccessError(ValueError):
    """The console may not listen as asked; the message says what to configure."""


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(address, None))


def auth_options(address: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Panel serve options for signing in; refuses a non-loopback address without credentials."""
    env = dict(os.environ) if env is None else env
    users_file, secret = env.get(USERS_ENV), env.get(SECRET_ENV)
    if not users_file:
        if not is_loopback(address):
            raise AccessError(
                f"the console will not listen on {address} without sign-in: set {USERS_ENV} to a JSON file "
                f'of users ({{"name": "password"}}) and {SECRET_ENV} to a long random string, or use 127.0.0.1')
        return {}
    path = Path(users_file).expanduser()
    try:
        users = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise AccessError(f"{USERS_ENV}: cannot read users from {path}: {err}") from None
    if not isinstance(users, dict) or not users or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in users.items()):
        raise AccessError(f"{USERS_ENV}: {path} must hold a JSON object of user name → non-empty password")
    if not secret or len(secret) < 16:
        raise AccessError(f"{SECRET_ENV} must be set to a random string of at least 16 characters "
                          "when sign-in is on (it signs the session cookie)")
    # Our own sign-in page: Panel's default one loads its logo from the internet.
    login = Path(__file__).parent / "static" / "login.html"
    return {"basic_auth": str(path), "cookie_secret": secret, "login_template": str(login)}
