"""connect(): a client of a live Threadline install, for notebooks and scripts.

Reads go only through the read schema's views (threadline_read, migration 046) on the viewer's
login, in read-only transactions; a write login (the owner's, as the CLI uses) is opened only
when asked for with write=True and the home's credentials hold it. Writes reuse the domain
functions every door calls, acting as the local account the way the CLI does.
"""

from __future__ import annotations

import os
import uuid
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine_adapter.model.errors import Refused
from engine_adapter.model.identity import Actor, cli_actor
from engine_adapter.model.settings import (
    DATABASE_URL_ENV,
    NotConfigured,
    credentials_path,
    read_credentials,
)
from engine_adapter.store import db
from engine_adapter.store.roles import url_with

if TYPE_CHECKING:
    import pandas as pd
    import psycopg
    import sqlalchemy

    from engine_adapter.explore.feed import Feed
    from engine_adapter.explore.widgets import Badge, RunsWidget, RunWidget

READ_ONLY = "-c default_transaction_read_only=on"
DEFAULT_LIMIT = 10_000


class ReadOnlyClient(Refused, PermissionError):
    """A write asked of a client connected without write=True. (A PermissionError too, as
    Python's own word for it, for callers that catch that.)"""


def connect(home: str | Path | None = None, url: str | None = None, write: bool = False) -> Client:
    """A client of the install whose home is `home` (else THREADLINE_DATABASE_URL, else
    $THREADLINE_HOME or ~/.threadline), or of the database at `url`.

    Read-only by default: the home's viewer login, every transaction read-only. write=True takes
    the home's owner login (whoever may read the credentials holds the database anyway) or `url`
    as given; a home without one refuses."""
    if url is None and home is None and os.environ.get(DATABASE_URL_ENV):
        url = os.environ[DATABASE_URL_ENV]
    if url is None:
        url = _home_url(Path(home).expanduser() if home is not None else None, write)
    return Client(url, write)


def _home_url(home: Path | None, write: bool) -> str:
    creds = read_credentials(home)
    where = credentials_path(home)
    if write:
        if "url" not in creds:
            raise NotConfigured(f"no write login in {where}: only the install's owner may write")
        return str(creds["url"])
    viewer = creds.get("roles", {}).get("viewer")
    if not viewer:
        raise NotConfigured(
            f"no viewer login in {where}: run `threadline up` or `threadline db migrate` first"
        )
    return str(viewer)


def _engine_url(url: str) -> sqlalchemy.engine.URL:
    from sqlalchemy.engine import make_url

    # A libpq keyword string (host=... user=...) or a URL: SQLAlchemy takes only the URL.
    return make_url(url_with(url)).set(drivername="postgresql+psycopg")


class Client:
    """Lists across runs as DataFrames (newest first, at most `limit` rows); `engine` for any
    other read: pd.read_sql("select * from threadline_read.runs", client.engine)."""

    def __init__(self, url: str, write: bool) -> None:
        from sqlalchemy import create_engine

        self.url = url
        self.write = write
        options = {} if write else {"options": READ_ONLY}
        self.engine: sqlalchemy.Engine = create_engine(
            _engine_url(url), connect_args=options, pool_pre_ping=True
        )
        self._feed: Feed | None = None

    def __repr__(self) -> str:
        return f"<threadline client {self.engine.url!r}{' (write)' if self.write else ''}>"

    def close(self) -> None:
        if self._feed is not None:
            self._feed.stop()
        self.engine.dispose()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_version(self) -> int:
        """The read schema's version (raised when a view's column is renamed or removed)."""
        return int(self._read_sql("select threadline_read.read_schema_version() as v", {}).v[0])

    # -- reads ------------------------------------------------------------------------------------
    def runs(
        self,
        workflow: str | None = None,
        state: str | None = None,
        trigger: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> pd.DataFrame:
        """Runs; trigger is what started them (manual, schedule, webhook, event, ...)."""
        return self._list("explore_runs", locals())

    def steps(
        self,
        workflow: str | None = None,
        run: str | None = None,
        step: str | None = None,
        outcome: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> pd.DataFrame:
        """Step tries (a bot's instruction or a gate's question); outcome: completed, failed,
        approve, deny, reply, timeout, open or ended."""
        return self._list("explore_steps", locals())

    def attempts(
        self,
        workflow: str | None = None,
        run: str | None = None,
        step: str | None = None,
        outcome: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> pd.DataFrame:
        """Bot processes' attempts at step tries; outcome: completed, failed, cancelled, lost,
        running."""
        return self._list("explore_attempts", locals())

    def run(self, run: str) -> pd.DataFrame:
        """One run's row of the runs view (empty when there is no such run)."""
        return self._read_sql(db.q("explore_run"), {"run_id": _run_uuid(run)})

    def thread(self, run: str, limit: int = DEFAULT_LIMIT) -> pd.DataFrame:
        """One run's thread, in order."""
        return self._list("explore_thread", locals())

    def gates(
        self,
        workflow: str | None = None,
        run: str | None = None,
        open: bool | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> pd.DataFrame:
        """Gate waits: how long each waited for a person, and who decided."""
        return self._list("explore_gates", locals())

    def tokens(
        self,
        workflow: str | None = None,
        run: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> pd.DataFrame:
        """Agent turns with their tokens and cost."""
        return self._list("explore_tokens", locals())

    def workers(
        self, kind: str | None = None, alive: bool | None = None, limit: int = DEFAULT_LIMIT
    ) -> pd.DataFrame:
        """Conductor and bot processes: alive or not, their last heartbeat."""
        return self._list("explore_workers", locals())

    def _list(self, query: str, given: dict[str, Any]) -> pd.DataFrame:
        params = {k: v for k, v in given.items() if k != "self"}
        if "run" in params:
            params["run_id"] = _run_uuid(params.pop("run"))
        if not isinstance(params["limit"], int) or params["limit"] < 1:
            raise ValueError(f"limit must be a positive integer, not {params['limit']!r}")
        return self._read_sql(db.q(query), params)

    def _read_sql(self, sql: str, params: dict[str, Any]) -> pd.DataFrame:
        import pandas as pd

        return pd.read_sql(sql, self.engine, params=params)

    # -- live widgets (ipywidgets; the `notebook` extra) ------------------------------------------
    def feed(self) -> Feed:
        """This client's change feed: one listening thread for all of its widgets."""
        from engine_adapter.explore.feed import Feed

        if self._feed is None:
            self._feed = Feed(self.url)
        return self._feed

    def run_widget(self, run: str) -> RunWidget:
        """A live view of one run: steps, thread, and reply/approve/deny (write=True only)."""
        from engine_adapter.explore.widgets import RunWidget

        return RunWidget(self, str(_run_uuid(run)))

    def runs_widget(self, workflow: str | None = None, state: str | None = None) -> RunsWidget:
        """A live list of runs, filtered by workflow and state."""
        from engine_adapter.explore.widgets import RunsWidget

        return RunsWidget(self, workflow, state)

    def badge(self) -> Badge:
        """A live line of the conductor and bot processes alive."""
        from engine_adapter.explore.widgets import Badge

        return Badge(self)

    # -- writes (write=True only) -----------------------------------------------------------------
    def spawn(self, workflow: str, payload: Any = None, *, request_id: str | None = None) -> str:
        """Start a run of `workflow` as the local account; returns its id. A repeated
        request_id returns the run it started the first time."""
        from engine_adapter.runs.spawn import manual_key, spawn

        request_id = request_id or str(uuid.uuid4())
        actor = self._actor("spawn")
        with self._conn() as conn:
            return spawn(
                conn,
                workflow,
                payload,
                idempotency_key=manual_key(workflow, request_id),
                trigger={"kind": "manual", **actor.as_caller(), "request_id": request_id},
                actor=actor,
            ).run_id

    def reply(self, run: str, text: str) -> int:
        """Write a message into a run's thread (it may answer the gate the run waits at);
        returns its entry's seq."""
        from engine_adapter.runs.gates import reply

        actor = self._actor("reply")
        with self._conn() as conn:
            return reply(conn, self._resolve(conn, run), text, actor).seq

    def approve(self, run: str, reason: str | None = None, gate: str | None = None) -> str:
        """Approve the gate the run waits at (or the one `gate` names); returns its step key."""
        return self._decide(run, "approve", reason, gate)

    def deny(self, run: str, reason: str | None = None, gate: str | None = None) -> str:
        """Deny the gate the run waits at; returns its step key."""
        return self._decide(run, "deny", reason, gate)

    def _decide(self, run: str, decision: str, reason: str | None, gate: str | None) -> str:
        from engine_adapter.runs.gates import decide

        actor = self._actor(decision)
        with self._conn() as conn:
            return decide(conn, self._resolve(conn, run), decision, actor, reason, gate_key=gate)

    def _actor(self, what: str) -> Actor:
        if not self.write:
            raise ReadOnlyClient(
                f"cannot {what}: this client is read-only; connect(write=True) to act"
            )
        return cli_actor()

    def _conn(self) -> psycopg.Connection[Any]:
        return db.connect(self.url)

    @staticmethod
    def _resolve(conn: psycopg.Connection[Any], run: str) -> str:
        from engine_adapter.runs.run_ids import resolve_run_id

        return resolve_run_id(conn, run)


def _run_uuid(run: Any) -> str | None:
    """A run filter: a full run id (lists take no prefixes: they read only the views)."""
    if run is None:
        return None
    try:
        return str(uuid.UUID(str(run)))
    except ValueError:
        raise ValueError(f"run must be a full run id, not {run!r}") from None
