"""Who may use the console, and for what.

Sign-in is always on: a one-time link (console/tokens.py) signs in the OS account running
Threadline with every role, and console passwords (console/users.py) add people with roles; the
database checks either proof and gives the roles itself (migration 049). A session is kept on the
server (console/sessions.py); its cookie carries only the session's id, signed with
THREADLINE_COOKIE_SECRET or with a secret generated once in $THREADLINE_HOME, and signing out
ends it. `--no-auth` turns sign-in off, on loopback only, where the install's owner allowed it
(`threadline up --no-auth`); actions are then attributed to the account running the console.

Every write asks `actor_for` first, server-side: hiding a button is a courtesy, not the check.
What each write needs is the authorization layer's
(engine_adapter/access/authorization.py): a refusal here is audited there, and the domain
function the write calls asks the layer again.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from tornado.web import create_signed_value, decode_signed_value

from engine_adapter.access import authorization
from engine_adapter.access.authorization import Action
from engine_adapter.model.errors import Invalid
from engine_adapter.model.identity import ROLES, Actor, os_user
from engine_adapter.model.settings import threadline_home
from engine_adapter.model.vocab import Door

from . import sessions
from .sessions import SESSION_DAYS, Record
from .users import USERS_ENV, upgrade_advice

log = logging.getLogger("threadline.console")

SECRET_ENV = "THREADLINE_COOKIE_SECRET"
SECRET_FILE = "console-cookie-secret"
SESSION_COOKIE = "threadline_session"
ALL_ROLES = frozenset(ROLES)


class AccessError(Invalid):
    """The console may not start as asked; the message says what to configure."""


class NotAllowed(authorization.Refused):
    """The signed-in user (or nobody) may not do this; the message says who and why."""


@dataclass(frozen=True)
class Access:
    home: Path
    no_auth: bool = False
    # An earlier version's users file, read only to tell its users what the admin runs.
    old_users_file: Path | None = None
    secret: str | None = None


@dataclass(frozen=True)
class Session:
    user: str
    roles: frozenset[str]
    via: str  # "token" (a sign-in link), "password" or "no-auth"
    # The session's id: the credential the database checks for each change (migration 045).
    sid: str | None = field(default=None, repr=False, compare=False)


_current: Access | None = None


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return all(
            ipaddress.ip_address(info[4][0]).is_loopback
            for info in socket.getaddrinfo(address, None)
        )


def configure(
    address: str,
    *,
    no_auth: bool = False,
    env: dict[str, str] | None = None,
    home: Path | None = None,
) -> Access:
    """Check the sign-in setup before the console starts, and keep it for the requests."""
    global _current
    env = dict(os.environ) if env is None else env
    home = home or threadline_home()
    loopback = is_loopback(address)
    if no_auth:
        if not loopback:
            raise AccessError(
                f"--no-auth: refused on {address}; sign-in may only be turned off on a "
                "loopback address (127.0.0.1)"
            )
        _current = Access(home, no_auth=True)
        return _current
    users_file = env.get(USERS_ENV)
    old_users = Path(users_file).expanduser() if users_file else None
    advice = upgrade_advice(old_users) if old_users else None
    if advice:
        log.warning("%s", advice)
    secret = env.get(SECRET_ENV)
    if secret is not None and len(secret) < 16:
        raise AccessError(
            f"{SECRET_ENV} must be a random string of at least 16 characters (it signs "
            "the session cookie)"
        )
    if secret is None and not loopback:
        raise AccessError(
            f"{SECRET_ENV} must be set to a random string of at least 16 characters when "
            f"the console listens on {address} (it signs the session cookie)"
        )
    _current = Access(home, old_users_file=old_users, secret=secret or stored_secret(home))
    return _current


def stored_secret(home: Path) -> str:
    """The cookie secret kept in $THREADLINE_HOME (mode 0600), made on first use."""
    path = home / SECRET_FILE
    home.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise AccessError(
                f"{path}: readable by others (mode {mode:o}); run chmod 600 {path}"
            ) from None
        secret = path.read_text().strip()
        if len(secret) < 16:
            raise AccessError(
                f"{path}: too short to sign cookies; delete it and a new one is made"
            ) from None
        return secret
    with os.fdopen(fd, "w") as out:
        secret = secrets.token_hex(32)
        out.write(secret + "\n")
    return secret


def current() -> Access:
    if _current is None:
        raise NotAllowed("the console's sign-in is not configured")
    return _current


def sign_in(
    access: Access, via: str, secret: str, account: str | None = None
) -> tuple[bytes, Record]:
    """A new server-side session for a proof the database checks (a link's token, or an account
    and its password), and the cookie value that names it; sessions.SignInRefused says why
    not."""
    assert access.secret is not None
    sid, record = sessions.open_session(via, secret, account)
    return create_signed_value(access.secret, SESSION_COOKIE, sid), record


def _session_id(access: Access, value: str | bytes | None) -> str | None:
    """The session id a cookie carries, if its signature holds."""
    if not value or access.secret is None:
        return None
    raw = decode_signed_value(access.secret, SESSION_COOKIE, value, max_age_days=SESSION_DAYS)
    try:
        return raw.decode("ascii") if raw else None
    except UnicodeDecodeError:
        return None


def session_from_cookie(access: Access, value: str | bytes | None) -> Session | None:
    """The session a cookie names, if it is still open on the server (its roles the database's);
    None: no session."""
    if access.no_auth:
        return Session(os_user(), ALL_ROLES, "no-auth", no_auth_session())
    sid = _session_id(access, value)
    try:
        record = sessions.find(sid) if sid else None
    except psycopg.Error as err:  # the database unreachable: nobody is signed in meanwhile
        log.error("sessions unreadable: %s", err)
        return None
    if record is None:
        return None
    return Session(record.user, record.roles, record.via, sid)


_no_auth_sid: str | None = None


def no_auth_session() -> str | None:
    """With sign-in off (loopback only), one session for the account running the console,
    opened on first use: the database still acts only for a session it holds, and opens it only
    for the account the install's owner let in without sign-in."""
    global _no_auth_sid
    if _no_auth_sid is None:
        try:
            _no_auth_sid, _ = sessions.open_session("no-auth", account=os_user())
        except (psycopg.Error, sessions.SignInRefused) as err:
            log.error("no session for the console's account: %s", err)
    return _no_auth_sid


def end_session(access: Access, value: str | bytes | None) -> str | None:
    """Sign out: the cookie's session is removed on the server. Returns whose it was."""
    sid = _session_id(access, value)
    return sessions.close(sid) if sid else None


def current_session() -> Session | None:
    """The session of the page being served (its cookie, checked again now)."""
    import panel as pn

    try:
        access = current()
    except NotAllowed:
        return None
    return session_from_cookie(access, pn.state.cookies.get(SESSION_COOKIE))


def session_actor(session: Session) -> Actor:
    return Actor(session.user, Door.CONSOLE, roles=session.roles, credential=session.sid)


def _signed_out(action: Action, what: str | None) -> str:
    return f"Not signed in: sign in again to {what or authorization.RULES[action].verb}."


def refusal(session: Session | None, action: Action, what: str | None = None) -> str | None:
    """Why session may not do action (None: it may); `what` words the action otherwise."""
    if session is None:
        return _signed_out(action, what)
    actor = session_actor(session)
    why = authorization.why_not(actor, action)
    return authorization.message(actor, action, why, what) if why else None


def actor_for(action: Action, what: str | None = None) -> Actor:
    """The actor for a write by the page's signed-in user, or NotAllowed saying why not: the
    refusal of a session audited by the authorization layer (nobody signed in: nobody to name)."""
    session = current_session()
    try:
        return actor_of(session, action, what)
    except NotAllowed as err:
        if session is not None:
            from . import data

            try:
                with data.connection() as conn:
                    actor = session_actor(session)
                    authorization.record(conn, actor, action, "refused", err.reason)
            except psycopg.Error:  # the refusal stands whether or not its row is written
                log.exception("authorization audit of a console refusal failed")
        raise


def actor_of(session: Session | None, action: Action, what: str | None = None) -> Actor:
    """The session's actor, if it may do action; else NotAllowed naming who, what and why."""
    if session is None:
        raise NotAllowed(_signed_out(action, what), action)
    actor = session_actor(session)
    why = authorization.why_not(actor, action)
    if why:
        raise NotAllowed(authorization.message(actor, action, why, what), action, why)
    return actor
