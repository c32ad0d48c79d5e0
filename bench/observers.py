"""The watchers bench/observability_figures.py runs beside a conductor and a bots process, each a
process of its own so its CPU is its own; each prints one count line when told to stop (SIGTERM).

    python -m bench.observers scrape BASE_URL TOKEN INTERVAL_S   # a Prometheus-style scraper
    python -m bench.observers follow VIEWER_URL                  # a notebook's live widgets
    python -m bench.observers otlp PORT_FILE                     # an OTLP/HTTP trace receiver
"""

from __future__ import annotations

import gzip
import signal
import sys
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def _stop_on_sigterm() -> None:
    def stop(*_: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)


def scrape(base: str, token: str, interval_s: float) -> None:
    """GET /metrics every interval and parse it with Prometheus's own text parser, as a
    Prometheus server would; an answer other than 200 ends the scraper with an error."""
    from prometheus_client.parser import text_string_to_metric_families

    request = urllib.request.Request(base + "/metrics")
    request.add_header("Authorization", f"Bearer {token}")
    scrapes, samples = 0, 0
    try:
        next_at = time.monotonic()
        while True:
            with urllib.request.urlopen(request, timeout=30) as response:
                body = response.read().decode()
            samples += sum(len(f.samples) for f in text_string_to_metric_families(body))
            scrapes += 1
            next_at += interval_s
            time.sleep(max(0.0, next_at - time.monotonic()))
    finally:
        print(f"samples {samples} scrapes {scrapes}", flush=True)


def follow(viewer_url: str) -> None:
    """What a notebook holds open: connect() on the viewer login, a runs widget and the badge,
    both redrawn from the client's change feed (one listening thread)."""
    from engine_adapter import connect

    client = connect(url=viewer_url)
    runs, badge = client.runs_widget(), client.badge()
    try:
        while True:
            time.sleep(3600)
    finally:
        print(f"redraws {runs.redraws + badge.redraws}", flush=True)
        client.close()


def otlp(port_file: Path) -> None:
    """Take POST /v1/traces on 127.0.0.1 and decode each request (as a collector must), counting
    the spans; the port chosen is written to port_file once the receiver listens."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    got = {"requests": 0, "spans": 0}
    reply = ExportTraceServiceResponse().SerializeToString()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            got["requests"] += 1
            got["spans"] += sum(
                len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_file.write_text(str(server.server_address[1]))
    try:
        server.serve_forever()
    finally:
        print(f"requests {got['requests']} spans {got['spans']}", flush=True)


def main(argv: list[str]) -> int:
    _stop_on_sigterm()
    kind, *rest = argv
    if kind == "scrape":
        scrape(rest[0], rest[1], float(rest[2]))
    elif kind == "follow":
        follow(rest[0])
    elif kind == "otlp":
        otlp(Path(rest[0]))
    else:
        raise SystemExit(f"unknown watcher {kind!r}: scrape, follow or otlp")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
