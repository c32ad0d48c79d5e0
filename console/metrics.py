"""GET /metrics: Prometheus metrics (engine_adapter.explore.metrics, read from the read schema),
served by the console's Tornado server beside the HTTP API.

Never open by default: a scrape presents an API token like any API call (`threadline token
create ACCOUNT --role viewer`; Prometheus: `authorization: {credentials: <token>}`); any valid
token may read, as any may read the API's lists. A missing, unknown or revoked token is
answered 401.
"""

from __future__ import annotations

from typing import Any

from tornado.ioloop import IOLoop
from tornado.web import RequestHandler

from engine_adapter.access import api_tokens
from engine_adapter.explore import metrics

from . import data

PATH = "/metrics"


class MetricsHandler(RequestHandler):
    def check_xsrf_cookie(self) -> None:  # a bearer token, not cookies
        pass

    async def get(self) -> None:
        header = self.request.headers.get("Authorization", "")
        token = header[len("Bearer ") :].strip() if header.startswith("Bearer ") else ""
        text = await IOLoop.current().run_in_executor(None, self.scrape, token)
        self.set_header("Cache-Control", "no-store")
        if text is None:
            self.set_status(401)
            self.set_header("WWW-Authenticate", 'Bearer realm="threadline"')
            self.set_header("Content-Type", "text/plain; charset=utf-8")
            self.finish("a valid bearer token is required (threadline token create)\n")
            return
        self.set_header("Content-Type", metrics.CONTENT_TYPE)
        self.finish(text)

    @staticmethod
    def scrape(token: str) -> str | None:
        """The metrics text, or None when the token is not a valid one. Database calls block:
        run in a worker thread, so the console's loop keeps serving pages."""
        if not token:
            return None
        with data.connection() as conn:
            if api_tokens.authenticate(conn, token) is None:
                return None
            return metrics.render(conn)


def handlers() -> list[tuple[str, Any]]:
    return [(PATH + "$", MetricsHandler)]
