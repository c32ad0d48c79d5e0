"""An OTLP/HTTP trace receiver on 127.0.0.1, for tests: what a collector would be sent, decoded
from the protobuf ExportTraceServiceRequest by opentelemetry-proto's own classes."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _int(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@dataclass
class Span:
    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    links: list[tuple[int, int]]  # (trace id, span id)
    error: bool
    service: str


@dataclass
class Receiver:
    endpoint: str
    spans: list[Span] = field(default_factory=list)
    requests: int = 0

    def wait_for(self, found: Callable[[list[Span]], Any], timeout: float = 30.0) -> Any:
        """Until `found(spans)` is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            got = found(list(self.spans))
            if got:
                return got
            if time.monotonic() > deadline:
                names = sorted(s.name for s in self.spans)
                raise AssertionError(f"spans not received within {timeout}s; got {names}")
            time.sleep(0.05)


def _decode(body: bytes) -> list[Span]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for rs in request.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    Span(
                        s.name,
                        _int(s.trace_id),
                        _int(s.span_id),
                        _int(s.parent_span_id) if s.parent_span_id else None,
                        s.start_time_unix_nano,
                        s.end_time_unix_nano,
                        {a.key: _value(a.value) for a in s.attributes},
                        [(_int(link.trace_id), _int(link.span_id)) for link in s.links],
                        s.status.code == s.status.STATUS_CODE_ERROR,
                        str(resource.get("service.name")),
                    )
                )
    return out


@contextmanager
def receiver() -> Iterator[Receiver]:
    """A receiver at http://127.0.0.1:<port> (its OTEL_EXPORTER_OTLP_ENDPOINT) taking
    POST /v1/traces; stopped on the way out."""
    got = Receiver("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            got.spans.extend(_decode(body))
            got.requests += 1
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    got.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()


def otlp_env(endpoint: str) -> dict[str, str]:
    """What a process needs to send its spans to `endpoint` at once, past any proxy."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
