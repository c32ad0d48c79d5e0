"""Sign-in for the console's Bokeh/Tornado server: an AuthProvider that admits a request only with
a cookie naming a session open on the server (pages, the websocket and Bokeh's other endpoints
alike), a sign-in page that takes a password or a one-time link's token, and sign-out, which ends
the session on the server. The console only passes the proof on: the database checks it and
says whom it signs in, with which roles (migration 049).

A valid link always signs in, whatever failures others caused from the same address (on loopback
every local account shares 127.0.0.1): the link is checked first, and only failed links are
throttled (answered late, 429). Passwords are different: a wrong guess costs the guesser nothing
but a check, so failed passwords lock the name and the address out for a while (ratelimit.py).
"""

from __future__ import annotations

import asyncio
import html
import logging
import string
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from bokeh.server.auth_provider import AuthProvider
from tornado.web import RequestHandler
from tornado.websocket import WebSocketHandler

from .access import (
    SESSION_COOKIE,
    SESSION_DAYS,
    Access,
    current,
    end_session,
    session_from_cookie,
    sign_in,
)
from .ratelimit import FailureLimiter
from .sessions import SignInRefused
from .users import add_command, legacy_user

log = logging.getLogger("threadline.console")
LOGIN_PAGE = string.Template((Path(__file__).parent / "static" / "login.html").read_text())
limiter = FailureLimiter()
# A failed link from an address with too many failures is answered this late: a guesser waits,
# the right link (checked first) never does.
FAILED_LINK_DELAY_S = 2.0


def _without_token(url: str) -> str:
    parts = urlsplit(url)
    query = urlencode(
        [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "token"]
    )
    return urlunsplit(("", "", parts.path or "/", query, ""))


def _safe_next(url: str | None) -> str:
    """Only a path on this server: never another site (an open redirect)."""
    if not url or not url.startswith("/") or url.startswith("//") or "\\" in url:
        return "/"
    return url


def _token_of(url: str) -> str | None:
    return dict(parse_qsl(urlsplit(url).query)).get("token")


class LoginHandler(RequestHandler):
    def _page(self, status: int, message: str = "", ok: bool = False) -> None:
        hint = (
            "Sign in with your user name and password, or open a sign-in link "
            "(<code>threadline up</code> prints one, <code>threadline console link</code> a "
            "fresh one)."
        )
        self.set_status(status)
        self.write(
            LOGIN_PAGE.safe_substitute(
                message=html.escape(message),
                message_class="ok" if ok else "error",
                hint=hint,
                next=html.escape(_without_token(_safe_next(self.get_argument("next", "/")))),
                form_display="block",
            )
        )

    def _sign_in(self, via: str, secret: str, account: str | None, next_url: str) -> bool:
        """Sign in with the proof (the database checks it), or say the database is away; False:
        the proof was refused, and nothing changed."""
        try:
            cookie, record = sign_in(current(), via, secret, account)
        except SignInRefused:
            return False
        except psycopg.Error as err:
            log.error("sign-in unavailable: %s", err)
            self._page(503, "Sign-in is unavailable: the database cannot be reached. Try again.")
            return True
        self.set_cookie(
            SESSION_COOKIE,
            cookie,
            expires_days=SESSION_DAYS,
            httponly=True,
            samesite="Lax",
            path="/",
        )
        log.info("%s signed in (%s) from %s", record.user, via, self.request.remote_ip)
        self.redirect(_without_token(_safe_next(next_url)))
        return True

    async def get(self) -> None:
        next_url = _safe_next(self.get_argument("next", "/"))
        token = self.get_argument("token", None) or _token_of(next_url)
        if token is None:
            self._page(200, "Signed out." if self.get_argument("signed_out", None) else "", ok=True)
            return
        if self._sign_in("token", token, None, next_url):
            return  # the right link signs in, whatever failures came before it
        address = self.request.remote_ip or "?"
        limiter.fail(f"link:{address}")
        log.warning("a used, expired or unknown sign-in link from %s", address)
        if limiter.wait_s(f"link:{address}"):
            await asyncio.sleep(FAILED_LINK_DELAY_S)
            self._page(
                429,
                "This sign-in link is used up or expired, and too many failed links came from "
                "this address: run `threadline console link` for a fresh one.",
            )
            return
        self._page(
            401,
            "This sign-in link is used up or expired: run `threadline console link` "
            "for a fresh one.",
        )

    def post(self) -> None:
        name, password = self.get_argument("username", ""), self.get_argument("password", "")
        address = self.request.remote_ip or "?"
        wait = limiter.wait_s(f"user:{name}", f"address:{address}")
        if wait:
            self._page(
                429,
                f"Too many failed sign-ins for {name or 'this user'} or from this address: "
                f"try again in {int(wait) + 1} s.",
            )
            return
        if self._sign_in("password", password, name, self.get_argument("next", "/")):
            return
        old = legacy_user(current().old_users_file, name, password)
        if old is not None:  # the right password, kept where sign-in no longer looks
            log.warning("%s signed in with a password of the old users file", name)
            self._page(
                401,
                f"Your password is kept in the console's old users file, which is no longer "
                f"read: ask the admin to run `{add_command(old)}`.",
            )
            return
        limiter.fail(f"user:{name}", f"address:{address}")
        log.warning("failed sign-in for %r from %s", name, address)
        self._page(401, "Invalid user name or password.")

    def check_xsrf_cookie(self) -> None:
        """The form carries no xsrf token; the session cookie is SameSite=Lax, and signing someone
        in as yourself gains nothing a link would not."""


class LogoutHandler(RequestHandler):
    def get(self) -> None:
        """End the session on the server (the old cookie then opens nothing), then forget it."""
        user = end_session(current(), self.get_cookie(SESSION_COOKIE))
        if user:
            log.info("%s signed out from %s", user, self.request.remote_ip)
        self.clear_cookie(SESSION_COOKIE, path="/")
        self.redirect("/login?signed_out=1")


# autoload.js embeds a page into another site's page. The console is never embedded, and Panel's
# handler for it fails with a 500 when not signed in (its session check redirects, then it carries
# on without a session), so it is not served at all.
NOT_SERVED = r"(?:/.*)?/autoload\.js"


class NotServed(RequestHandler):
    def get(self, *_args: str) -> None:
        self.set_status(404)
        self.finish("not served")


class ConsoleAuth(AuthProvider):
    """Admits a request only with a session cookie that is valid now."""

    def __init__(self, access: Access) -> None:
        self.access = access
        super().__init__()

    @property
    def get_user(self) -> Any:
        def get_user(handler: RequestHandler) -> str | None:
            if not isinstance(handler, WebSocketHandler) and handler.get_query_argument(
                "token", None
            ):
                # a sign-in link: trade the token for a cookie first (via the sign-in page)
                return None
            session = session_from_cookie(self.access, handler.get_cookie(SESSION_COOKIE))
            return session.user if session else None

        return get_user

    @property
    def login_url(self) -> str:
        return "/login"

    @property
    def login_handler(self) -> type[RequestHandler]:
        return LoginHandler

    @property
    def logout_url(self) -> str:
        return "/logout"

    @property
    def logout_handler(self) -> type[RequestHandler]:
        return LogoutHandler
