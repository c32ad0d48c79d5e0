"""OpenTelemetry traces of runs, sent over OTLP/HTTP when an endpoint is configured
(OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; the SDK reads the rest of its
OTEL_* settings itself). With none configured nothing here imports OpenTelemetry.

A run is a trace whose id is the run id's 128 bits, and every span id is derived from what the
span stands for (the run; a step's path and try; an attempt; an agent turn), so the conductor and
the bots, restarts and crashes included, put their spans into the same trace and under the same
parents without passing any context. A span sent twice (a crash before its checkpoint) keeps its
id. A child run (a parallel branch, a foreach item, a sub-workflow) is a trace of its own, linked
both ways with its parent's step span: its id is then the child's run id too.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from engine_adapter.model import names
from engine_adapter.model.vocab import AttemptOutcome, RunState, StepStatus
from engine_adapter.store import db

ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
Attributes = Mapping[str, str | int | float | bool | None]


def configured() -> bool:
    """An OTLP endpoint is set, and the SDK is not switched off (OTEL_SDK_DISABLED,
    OTEL_TRACES_EXPORTER=none)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(os.environ.get(name, "").strip() for name in ENDPOINT_ENVS)


@dataclass(frozen=True)
class Ref:
    """Where a span sits: its trace (a run's id) and its own id."""

    run_id: str
    span_id: int

    @property
    def trace_id(self) -> int:
        return trace_id(self.run_id)


def trace_id(run_id: str) -> int:
    """A run's trace id: its UUIDv7's 128 bits (never zero, as a trace id must not be)."""
    return uuid.UUID(str(run_id)).int


def _span_id(*parts: object) -> int:
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1  # zero is not a valid span id


def run_ref(run_id: str) -> Ref:
    return Ref(str(run_id), _span_id("run", run_id))


def step_ref(run_id: str, path: str, try_no: int) -> Ref:
    """A step try's span: its bot steps' every round and attempt sit under it."""
    return Ref(str(run_id), _span_id("step", run_id, path, try_no))


def attempt_ref(step_key: str, attempt: int) -> Ref:
    run_id = names.split_step_key(step_key)[0]
    return Ref(run_id, _span_id("attempt", step_key, attempt))


def turn_ref(step_key: str, attempt: int, turn: int) -> Ref:
    run_id = names.split_step_key(step_key)[0]
    return Ref(run_id, _span_id("turn", step_key, attempt, turn))


class _Exporter:
    """The SDK's batch span processor over its OTLP/HTTP exporter: spans are queued and sent from
    its own thread, never on the caller's."""

    def __init__(self, service: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        resource = Resource.create({})  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: service}))
        self.resource = resource
        self.scope = InstrumentationScope("threadline")
        self.processor = BatchSpanProcessor(OTLPSpanExporter())

    def send(
        self,
        name: str,
        at: Ref,
        parent: Ref | None,
        start_ns: int,
        end_ns: int,
        attributes: Attributes,
        links: Sequence[Ref],
        error: str | None,
    ) -> None:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import Link, SpanContext, Status, StatusCode, TraceFlags

        def context(ref: Ref) -> SpanContext:
            return SpanContext(ref.trace_id, ref.span_id, False, TraceFlags(TraceFlags.SAMPLED))

        span = ReadableSpan(
            name,
            context=context(at),
            parent=context(parent) if parent else None,
            resource=self.resource,
            attributes={k: v for k, v in attributes.items() if v is not None},
            links=[Link(context(ref)) for ref in links],
            status=Status(StatusCode.ERROR, error) if error else Status(StatusCode.UNSET),
            start_time=start_ns,
            end_time=max(end_ns, start_ns),
            instrumentation_scope=self.scope,
        )
        self.processor.on_end(span)

    def shutdown(self) -> None:
        self.processor.shutdown()  # sends what is queued first


_exporter: _Exporter | None = None
_lock = threading.Lock()


def start(service: str) -> bool:
    """Called once by a process (the conductor, the bots): begin sending spans if an endpoint is
    configured, flushing them at exit. Whether spans are sent."""
    global _exporter
    if not configured():
        return False
    with _lock:
        if _exporter is None:
            _exporter = _Exporter(service)
            atexit.register(shutdown)
    return True


def enabled() -> bool:
    return _exporter is not None


def shutdown() -> None:
    """Send what is queued and stop (a process's way out; also registered at exit)."""
    global _exporter
    with _lock:
        exporter, _exporter = _exporter, None
    if exporter is not None:
        exporter.shutdown()


def now_ns() -> int:
    return time.time_ns()


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


def span(
    name: str,
    at: Ref,
    parent: Ref | None,
    start_ns: int,
    end_ns: int,
    attributes: Attributes,
    links: Iterable[Ref] = (),
    error: str | None = None,
) -> None:
    """One finished span; nothing when no endpoint is configured."""
    exporter = _exporter
    if exporter is not None:
        exporter.send(name, at, parent, start_ns, end_ns, attributes, list(links), error)


# -- the spans Threadline sends --------------------------------------------------------------------
def run_ended(conn: psycopg.Connection[Any], run_id: str, state: str) -> None:
    """The run's root span, from its creation to now, sent as it ends; a child run's links to the
    step of its parent that started it."""
    if _exporter is None:
        return
    run = db.fetch_row(conn, "get_run", dict(run_id=run_id))
    parent = run.get("parent") or {}
    links = []
    if parent.get("run_id"):
        links.append(step_ref(parent["run_id"], parent["step"], int(parent["try"])))
    span(
        f"run {run['workflow']}",
        run_ref(run_id),
        None,
        _ns(run["created_at"]),
        now_ns(),
        {
            "threadline.run_id": str(run_id),
            "threadline.workflow": run["workflow"],
            "threadline.workflow_version": run["workflow_version"],
            "threadline.state": str(state),
            "threadline.parent_run_id": parent.get("run_id"),
            "threadline.parent_step": parent.get("step"),
            "threadline.branch": parent.get("branch"),
        },
        links,
        error=None if state == RunState.COMPLETED else f"run {state}",
    )


def step_tried(
    run_id: str,
    workflow: str,
    path: str,
    try_no: int,
    kind: str,
    started_ns: int,
    outcome: str,
    within: tuple[str, int] | None,
    *,
    reason: str | None = None,
    exit_code: int | None = None,
    attempts: int | None = None,
    children: Iterable[str] = (),
) -> None:
    """A step try's span, from the conductor taking it up to its result: under the run's root, or
    under the try of the loop or block it runs in; linked to the child runs it started."""
    parent = step_ref(run_id, *within) if within else run_ref(run_id)
    failed = outcome not in (StepStatus.COMPLETED, StepStatus.SKIPPED)
    span(
        f"step {path}",
        step_ref(run_id, path, try_no),
        parent,
        started_ns,
        now_ns(),
        {
            "threadline.run_id": str(run_id),
            "threadline.workflow": workflow,
            "threadline.step": path,
            "threadline.try": try_no,
            "threadline.step_kind": kind,
            "threadline.outcome": outcome,
            "threadline.reason": reason,
            "threadline.exit_code": exit_code,
            "threadline.attempts": attempts,
        },
        [run_ref(child) for child in children],
        error=(reason or f"step {outcome}") if failed else None,
    )


def attempt_ended(
    step_key: str,
    path: str,
    try_no: int,
    attempt: int,
    started_ns: int,
    outcome: str,
    *,
    bot: str,
    worker: str,
    sandbox: str,
    exit_code: int | None = None,
    reason: str | None = None,
) -> None:
    """A bot attempt's span, from its claim to its report, under its step try's span."""
    at = attempt_ref(step_key, attempt)
    span(
        f"attempt {path}",
        at,
        step_ref(at.run_id, path, try_no),
        started_ns,
        now_ns(),
        {
            "threadline.run_id": at.run_id,
            "threadline.step": path,
            "threadline.try": try_no,
            "threadline.step_key": step_key,
            "threadline.attempt": attempt,
            "threadline.outcome": outcome,
            "threadline.exit_code": exit_code,
            "threadline.reason": reason,
            "threadline.bot": bot,
            "threadline.worker": worker,
            "threadline.sandbox": sandbox,
        },
        error=(reason or f"attempt {outcome}") if outcome == AttemptOutcome.FAILED else None,
    )


def agent_turn(
    step_key: str,
    path: str,
    attempt: int,
    turn: int,
    started_ns: int,
    model: str,
    usage: Mapping[str, Any],
) -> None:
    """An agent's model turn, under its attempt's span, with its tokens (and cost, if priced)."""
    span(
        f"agent turn {path}",
        turn_ref(step_key, attempt, turn),
        attempt_ref(step_key, attempt),
        started_ns,
        now_ns(),
        {
            "threadline.run_id": names.split_step_key(step_key)[0],
            "threadline.step": path,
            "threadline.attempt": attempt,
            "threadline.turn": turn,
            "threadline.model": model,
            "threadline.tokens_in": usage.get("in"),
            "threadline.tokens_out": usage.get("out"),
            "threadline.cost_usd": usage.get("cost_usd"),
        },
    )
