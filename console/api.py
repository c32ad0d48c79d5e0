"""The HTTP API: one JSON API over the same read model and commands as the CLI and the console,
served by the console's Tornado server under /api/v1. Every call but the OpenAPI document needs
a bearer token (`threadline token create ACCOUNT --role R`); the token's account is the actor
(shown as delegated when another account minted it), and its roles decide what it may do (a
viewer reads; an operator spawns, replies, cancels, retries and applies workflows; an approver
decides gates): what each route needs is the authorization layer's table
(engine_adapter/access/authorization.py), which audits a refusal here and is asked again by the
call.

It lives in the console process, not the webhook ingress: it acts for people with the console's
database role, which the internet-facing ingress does not hold (only resume links decide there,
one token-bound gate at a time).

A request is judged before its body is read: the method, then the token (401 without a valid
one), the token's role, then the declared size (413 over MAX_BODY, 411 without a
Content-Length); only then does a byte of the body come in. Every answer is JSON, every bad input
a 4xx naming the field.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from tornado.http1connection import HTTP1Connection
from tornado.ioloop import IOLoop
from tornado.web import HTTPError, RequestHandler, stream_request_body

from engine_adapter.access import api_tokens, authorization
from engine_adapter.access.authorization import Action
from engine_adapter.catalog import proposals, workflows
from engine_adapter.ingress.hooks import parse_body
from engine_adapter.model.errors import ThreadlineError, report_bug
from engine_adapter.model.identity import Actor
from engine_adapter.model.vocab import GateDecision, ProposalStatus, TriggerKind
from engine_adapter.read import read_model, run_list
from engine_adapter.recipes import recipe_doc
from engine_adapter.recipes.recipes import Recipe, load_recipe_text
from engine_adapter.runs import commands, gates
from engine_adapter.runs.run_ids import RunIdError, digits, resolve_run_id
from engine_adapter.runs.spawn import manual_key, spawn

from . import data

log = logging.getLogger("threadline.api")
BASE = "/api/v1"
MAX_BODY = 512 * 1024
MAX_PARAM = 1000  # characters of one path or query parameter
PATH_PARAMS = ("run_id", "slug", "proposal_id")
ANY_JSON = ("payload", "recipe")  # body fields of any JSON type; every other one is a string
MAX_SEQ = 2**63 - 1  # thread seqs and proposal ids are bigints
_INTEGER = re.compile(r"-?[0-9]{1,19}")


class ApiError(ThreadlineError):
    """An answer that is an error: its HTTP status and the message in its JSON body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = self.http_status = status

    @classmethod
    def of(cls, err: ThreadlineError) -> ApiError:
        """Any Threadline error as the status its kind maps to (a recipe's: every problem)."""
        problems = getattr(err, "errors", None)
        return cls(err.http_status, "; ".join(problems) if problems else str(err))


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # OpenAPI form: /runs/{run_id}
    summary: str
    action: Action | None  # what the authorization layer is asked; None: a read, any token
    call: Callable[..., Any]  # (conn, actor, body, query, **path params) -> JSON value
    body: tuple[str, ...] = ()  # the body's fields, each optional unless listed in required
    required: tuple[str, ...] = ()


# -- the calls --------------------------------------------------------------------------------
def _integer(query: dict[str, str], name: str, default: int) -> int:
    """A query parameter that must be a whole number; a 400 naming it and the value otherwise."""
    text = query.get(name)
    if text is None:
        return default
    if not _INTEGER.fullmatch(text):
        raise ApiError(400, f"{name}: {text[:20]!r} must be an integer")
    return int(text)


def _runs(conn: Any, actor: Actor, body: dict, query: dict[str, str]) -> dict[str, Any]:
    filters = run_list.RunFilters.from_params(query)  # FilterError (Invalid): a 400
    after = run_list.Cursor.decode(query["after"]) if query.get("after") else None
    limit = _integer(query, "limit", run_list.PAGE_SIZE)
    if not 1 <= limit <= 500:
        raise ApiError(400, f"limit: {limit} must be from 1 to 500")
    page = run_list.runs_page(conn, filters, after, limit)
    return {
        "runs": [r.to_json() for r in page.rows],
        "next": page.next_cursor.encode() if page.next_cursor else None,
    }


def _run(conn: Any, actor: Actor, body: dict, query: dict, run_id: str) -> dict[str, Any]:
    view = read_model.show_run(conn, run_id, thread_limit=0)
    view.pop("thread")
    return view


def _steps(conn: Any, actor: Actor, body: dict, query: dict, run_id: str) -> Any:
    return read_model.show_run(conn, run_id, thread_limit=0)["steps"]


def _thread(conn: Any, actor: Actor, body: dict, query: dict, run_id: str) -> Any:
    after, limit = _integer(query, "after", 0), _integer(query, "limit", 200)
    if not 1 <= limit <= 1000 or not 0 <= after <= MAX_SEQ:
        raise ApiError(400, f"limit must be from 1 to 1000, after from 0 to {MAX_SEQ}")
    read_model.show_run(conn, run_id, thread_limit=0)  # RunNotFound for an unknown run
    rows = read_model.thread_entries(conn, run_id, after=after, limit=limit)
    return [_jsonable(r) for r in rows]


def _spawn(conn: Any, actor: Actor, body: dict, query: dict) -> dict[str, Any]:
    slug, key = body["workflow"], body.get("idempotency_key")
    spawned = spawn(
        conn,
        slug,
        body.get("payload"),
        idempotency_key=manual_key(slug, key) if key else None,
        trigger={"kind": TriggerKind.MANUAL, **actor.as_caller(), "via": "api"},
        actor=actor,
    )
    return {"run_id": spawned.run_id, "created": spawned.created}


def _decide(decision: GateDecision) -> Callable[..., Any]:
    def call(conn: Any, actor: Actor, body: dict, query: dict, run_id: str) -> dict[str, Any]:
        key = gates.decide(
            conn, run_id, decision, actor, body.get("reason"), gate_key=body.get("gate")
        )
        return {"run_id": run_id, "gate": key, "decision": decision}

    return call


def _reply(conn: Any, actor: Actor, body: dict, query: dict, run_id: str) -> dict[str, Any]:
    outcome = gates.reply(conn, run_id, _text(body, "text"), actor)
    return {"seq": outcome.seq, "decision": outcome.decision, "hint": outcome.hint}


def _cancel(conn: Any, actor: Actor, body: dict, query: dict, run_id: str) -> dict[str, Any]:
    commands.cancel_run(conn, run_id, actor, body.get("reason"))
    return {"run_id": run_id, "cancelled": True}


def _retry(conn: Any, actor: Actor, body: dict, query: dict, run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "retrying": commands.retry_run(conn, run_id, actor)}


def _workflows(conn: Any, actor: Actor, body: dict, query: dict) -> Any:
    return [_jsonable(w) for w in workflows.list_workflows(conn)]


def _workflow(conn: Any, actor: Actor, body: dict, query: dict, slug: str) -> Any:
    return _jsonable(workflows.get_workflow(conn, slug))


def _versions(conn: Any, actor: Actor, body: dict, query: dict, slug: str) -> Any:
    workflows.get_workflow(conn, slug)
    return [_jsonable(v) for v in workflows.list_versions(conn, slug)]


def _apply(conn: Any, actor: Actor, body: dict, query: dict) -> dict[str, Any]:
    applied = workflows.apply_recipe(conn, _recipe(body), actor=actor)
    return {"slug": applied.slug, "version": applied.version, "changed": applied.changed}


def _diff(conn: Any, actor: Actor, body: dict, query: dict, slug: str) -> Any:
    if not query.get("a") or not query.get("b"):
        raise ApiError(400, "a and b: give two versions (numbers or hash prefixes)")
    return {"diff": workflows.diff_versions(conn, slug, query["a"], query["b"])}


def _rollback(conn: Any, actor: Actor, body: dict, query: dict, slug: str) -> Any:
    applied = workflows.rollback(conn, slug, _text(body, "to"), actor)
    restored = workflows.get_version(conn, slug, applied.version)["rolled_back_from"]
    return {"slug": slug, "version": applied.version, "rolled_back_from": restored}


def _proposals(conn: Any, actor: Actor, body: dict, query: dict) -> Any:
    return [_jsonable(p) for p in proposals.list_proposals(conn, query.get("workflow") or None)]


def _proposal(conn: Any, actor: Actor, body: dict, query: dict, proposal_id: str) -> Any:
    return _jsonable(proposals.get(conn, _id(proposal_id)))


def _propose(conn: Any, actor: Actor, body: dict, query: dict, slug: str) -> Any:
    parsed = _recipe(body)
    row = proposals.propose(
        conn, slug, _text(body, "base_hash"), parsed, _text(body, "summary"), actor
    )
    return _jsonable(row)


def _review(approve: bool) -> Callable[..., Any]:
    def call(conn: Any, actor: Actor, body: dict, query: dict, proposal_id: str) -> Any:
        proposals.review(conn, _id(proposal_id), approve, actor, body.get("note"))
        return {
            "id": int(proposal_id),
            "status": ProposalStatus.APPROVED if approve else ProposalStatus.REJECTED,
        }

    return call


def _apply_proposal(conn: Any, actor: Actor, body: dict, query: dict, proposal_id: str) -> Any:
    number = _id(proposal_id)  # a 400 naming the value before anything reads it
    return {"id": number, "version": proposals.apply(conn, number, actor)}


def _recipe(body: dict) -> Recipe:
    """The body's `recipe`: YAML (or JSON) text, or an object."""
    recipe = body["recipe"]
    if isinstance(recipe, str):
        return load_recipe_text(recipe, "recipe")
    return Recipe.from_dict(recipe, "recipe")


def _id(text: str) -> int:
    if not (text.isascii() and text.isdigit() and int(text) <= MAX_SEQ):
        raise ApiError(400, f"proposal_id: {text[:20]!r} must be a number")
    return int(text)


def _text(body: dict, name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ApiError(400, f"{name}: must be a non-empty string")
    return value


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(row, default=str))


ROUTES = (
    Route("GET", "/runs", "List runs, newest first (filters: workflow, state, trigger)", None,
          _runs),
    Route("POST", "/runs", "Start a run", Action.SPAWN, _spawn, ("workflow", "payload",
          "idempotency_key"), ("workflow",)),
    Route("GET", "/runs/{run_id}", "A run: state, steps, outputs, the open gate", None, _run),
    Route("GET", "/runs/{run_id}/steps", "A run's step tree", None, _steps),
    Route("GET", "/runs/{run_id}/thread", "A run's thread entries after a seq", None, _thread),
    Route("POST", "/runs/{run_id}/approve", "Approve the open gate", Action.DECIDE,
          _decide(GateDecision.APPROVE),
          ("reason", "gate")),
    Route("POST", "/runs/{run_id}/deny", "Deny the open gate", Action.DECIDE,
          _decide(GateDecision.DENY),
          ("reason", "gate")),
    Route("POST", "/runs/{run_id}/reply", "Write in the thread (it may answer a gate)",
          Action.REPLY, _reply, ("text",), ("text",)),
    Route("POST", "/runs/{run_id}/cancel", "Cancel a run and its child runs", Action.CANCEL,
          _cancel,
          ("reason",)),
    Route("POST", "/runs/{run_id}/retry", "Retry a failed run at its failed step",
          Action.RETRY,
          _retry),
    Route("GET", "/workflows", "List workflows", None, _workflows),
    Route("POST", "/workflows", "Apply a recipe (YAML text or an object)",
          Action.APPLY_RECIPE, _apply,
          ("recipe",), ("recipe",)),
    Route("GET", "/workflows/{slug}", "A workflow and its current recipe", None, _workflow),
    Route("GET", "/workflows/{slug}/versions", "A workflow's versions", None, _versions),
    Route("GET", "/workflows/{slug}/diff", "What changed between versions a and b", None, _diff),
    Route("POST", "/workflows/{slug}/rollback", "A new version equal to an earlier one",
          Action.ROLLBACK, _rollback, ("to",), ("to",)),
    Route("POST", "/workflows/{slug}/proposals", "Propose a change to a workflow",
          Action.PROPOSE,
          _propose, ("base_hash", "recipe", "summary"), ("base_hash", "recipe", "summary")),
    Route("GET", "/proposals", "List proposals (filter: workflow)", None, _proposals),
    Route("GET", "/proposals/{proposal_id}", "A proposal: its diff, risk and status", None,
          _proposal),
    Route("POST", "/proposals/{proposal_id}/approve", "Approve a proposal",
          Action.REVIEW_PROPOSAL,
          _review(True), ("note",)),
    Route("POST", "/proposals/{proposal_id}/reject", "Reject a proposal", Action.REVIEW_PROPOSAL,
          _review(False),
          ("note",), ("note",)),
    Route("POST", "/proposals/{proposal_id}/apply", "Apply an approved proposal",
          Action.APPLY_PROPOSAL,
          _apply_proposal),
)  # fmt: skip


# -- serving ----------------------------------------------------------------------------------
def _pattern(path: str) -> str:
    out = BASE + path
    for name in PATH_PARAMS:
        out = out.replace("{" + name + "}", f"(?P<{name}>[^/]+)")
    return out + "$"


@stream_request_body  # prepare() runs when the headers are in, before the body is read
class ApiHandler(RequestHandler):
    """Every route of one path: method, token, role and declared size before the body is read;
    then the body, the call and a JSON answer."""

    def initialize(self, routes: dict[str, Route]) -> None:
        self.routes = routes  # by method
        self.actor: Actor | None = None
        self.chunks: list[bytes] = []
        self.received = 0

    def check_xsrf_cookie(self) -> None:  # bearer tokens, not cookies: no cross-site forgery
        pass

    async def prepare(self) -> None:
        try:
            route = self.routes.get(self.request.method or "")
            if route is None:
                self.set_header("Allow", ", ".join(self.routes))
                raise ApiError(405, f"{self.request.method} is not allowed here")
            self.actor = await IOLoop.current().run_in_executor(None, self.authenticate)
            if route.action is not None:
                await IOLoop.current().run_in_executor(None, self.authorize, route)
            self.check_length()
        except ApiError as err:
            # Answered now: Tornado closes the connection instead of reading the body.
            self.answer(err.status, {"error": str(err)})

    def authenticate(self) -> Actor:
        header = self.request.headers.get("Authorization", "")
        token = header[len("Bearer ") :].strip() if header.startswith("Bearer ") else ""
        actor = None
        if token:
            with data.connection() as conn:
                actor = api_tokens.authenticate(conn, token)
        if actor is None:
            self.set_header("WWW-Authenticate", 'Bearer realm="threadline"')
            raise ApiError(401, "a valid bearer token is required (threadline token create)")
        return actor

    def authorize(self, route: Route) -> None:
        """The token's roles against the route's action, before the body is read: a refusal is
        audited by the authorization layer and answered 403."""
        assert self.actor is not None and route.action is not None
        why = authorization.why_not(self.actor, route.action)
        if why is None:
            return
        with data.connection() as conn:
            authorization.record(conn, self.actor, route.action, "refused", why)
        verb = route.summary[0].lower() + route.summary[1:]
        raise ApiError(403, authorization.message(self.actor, route.action, why, verb))

    def check_length(self) -> None:
        headers = self.request.headers
        declared = headers.get("Content-Length")
        if declared is None:
            if "Transfer-Encoding" in headers:
                raise ApiError(411, "a body needs a Content-Length header")
            return
        if not (declared.isascii() and declared.isdigit()):
            raise ApiError(400, f"Content-Length: {declared[:20]!r} is not a number")
        if int(declared) > MAX_BODY:
            raise ApiError(413, f"the body is {declared} bytes; the limit is {MAX_BODY}")
        connection = self.request.connection
        assert isinstance(connection, HTTP1Connection)  # tornado's server speaks HTTP/1 only
        connection.set_max_body_size(MAX_BODY)  # the declared size, held to

    def data_received(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received <= MAX_BODY:
            self.chunks.append(chunk)

    async def get(self, **params: str) -> None:
        route = self.routes[self.request.method or ""]  # prepare answered any other method
        try:
            status, value = await self.run(route, params)
        except ThreadlineError as err:  # the body, the query and the call's own
            status, value = err.http_status, {"error": str(ApiError.of(err))}
        self.answer(status, value)

    # Every method goes through get: prepare answered a JSON 405 to any the path lacks.
    post = put = patch = delete = head = options = get

    async def run(self, route: Route, params: dict[str, str]) -> tuple[int, Any]:
        assert self.actor is not None
        actor = self.actor
        query = self.query()
        check_params(params, query)
        body = self.body(route)

        def call() -> tuple[int, Any]:
            with data.connection() as conn:
                try:
                    if "run_id" in params:  # the id, or a unique prefix of it (run_ids.py)
                        params["run_id"] = resolve_run_id(conn, params["run_id"])
                    return 200, route.call(conn, actor, body, query, **params)
                except ThreadlineError as err:  # its kind says the status (model/errors.py)
                    raise ApiError.of(err) from None
                except psycopg.DataError as err:  # a value the database cannot take
                    raise ApiError(400, f"invalid input: {str(err).splitlines()[0]}") from None
                except Exception as err:  # a bug: a JSON 500, not Tornado's HTML; the log has it
                    raise ApiError(
                        500, report_bug(log, err, f"{route.method} {route.path}")
                    ) from err

        # Database calls block: in a worker thread, so the console's loop keeps serving pages.
        return await IOLoop.current().run_in_executor(None, call)

    def query(self) -> dict[str, str]:
        try:
            return {k: self.get_query_argument(k) for k in self.request.query_arguments}
        except HTTPError as err:  # not UTF-8
            raise ApiError(400, f"the query: {err.log_message}") from None

    def body(self, route: Route) -> dict[str, Any]:
        if self.received > MAX_BODY:
            raise ApiError(413, f"the body is over {MAX_BODY} bytes")
        raw = b"".join(self.chunks)
        if self.request.method != "POST":
            if raw.strip():
                raise ApiError(400, f"a {self.request.method} takes no body")
            return {}
        body = parse_body(raw or b"{}")  # Invalid: answered 400 by get()
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        unknown = sorted(set(body) - set(route.body))
        if unknown:
            raise ApiError(400, f"unknown field(s) {unknown}; this call takes {list(route.body)}")
        missing = [f for f in route.required if f not in body]
        if missing:
            raise ApiError(400, f"missing field(s) {missing}")
        problems = recipe_doc.check_document(body)  # nesting, size, NUL, numbers
        problems += [
            f"{name}: must be a string"
            for name, value in body.items()
            if name not in ANY_JSON
            and not isinstance(value, str)
            and not (value is None and name not in route.required)
        ]
        if problems:
            raise ApiError(400, "; ".join(problems))
        return {k: v for k, v in body.items() if v is not None or k in ANY_JSON}

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Whatever Tornado itself refuses is answered in JSON too."""
        self.answer(status_code, {"error": self._reason})

    def answer(self, status: int, value: Any) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(value, ensure_ascii=False, default=str))


def check_params(params: dict[str, str], query: dict[str, str]) -> None:
    """Path and query parameters: bounded, no NUL, and a run id that is one."""
    for name, value in [*params.items(), *query.items()]:
        if len(value) > MAX_PARAM or "\0" in value:
            raise ApiError(400, f"{name}: at most {MAX_PARAM} characters, no NUL")
    run_id = params.get("run_id")
    if run_id is not None:
        try:
            digits(run_id)  # the id, or a prefix of it: resolved once a connection is open
        except RunIdError as err:
            raise ApiError(400, f"run_id: {err}") from None


class OpenApiHandler(RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(openapi()))


def openapi() -> dict[str, Any]:
    """The OpenAPI document, made from the one route table."""
    paths: dict[str, dict[str, Any]] = {}
    for r in ROUTES:
        op: dict[str, Any] = {
            "summary": r.summary,
            "security": [{"bearer": []}],
            "x-roles": list(authorization.roles_for(r.action)) if r.action else ["any"],
            "parameters": [
                {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                for n in PATH_PARAMS
                if "{" + n + "}" in r.path
            ],
            "responses": {
                code: {"description": text}
                for code, text in (
                    ("200", "OK"),
                    ("400", "bad input: the error names the field"),
                    ("401", "no valid bearer token"),
                    ("403", "the token's roles do not allow it"),
                    ("404", "no such run or workflow"),
                    ("405", "the path takes no such method"),
                    ("409", "refused by the run's state (a gate closed, not an approver)"),
                    ("411", "a body sent without a Content-Length"),
                    ("413", f"a body over {MAX_BODY} bytes"),
                    ("422", "a recipe that is invalid: every problem, by its path"),
                    ("500", "a bug in Threadline: the server's log has its traceback"),
                )
            },
        }
        if r.body:
            op["requestBody"] = {
                "required": bool(r.required),
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {f: {} for f in r.body},
                            "required": list(r.required),
                            "additionalProperties": False,
                        }
                    }
                },
            }
        paths.setdefault(BASE + r.path, {})[r.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Threadline API", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": paths,
    }


def handlers() -> list[tuple[str, type[RequestHandler], dict[str, Any]] | tuple[str, Any]]:
    """The API's Tornado handlers, one per path."""
    by_path: dict[str, dict[str, Route]] = {}
    for r in ROUTES:
        by_path.setdefault(r.path, {})[r.method] = r
    out: list[Any] = [(BASE + "/openapi.json$", OpenApiHandler)]
    out += [(_pattern(path), ApiHandler, {"routes": rs}) for path, rs in by_path.items()]
    return out
