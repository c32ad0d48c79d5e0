"""The observability benchmark's pieces that are cheap to run: its OTLP receiver counts the spans a
real SDK exporter sends it, and its table sets each setting beside nothing."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from bench.observability_figures import SETTINGS, Turn, start_watcher, stop_watcher, table
from engine_adapter.testing import harness


def test_the_receiver_counts_the_spans_an_sdk_sends(tmp_path):
    port_file = tmp_path / "otlp.port"
    proc = start_watcher(tmp_path, "otlp", str(port_file))
    try:
        harness.wait_for(lambda: port_file.exists() and port_file.read_text(), 30, 0.05, "port")
        endpoint = f"http://127.0.0.1:{port_file.read_text()}/v1/traces"
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        tracer = provider.get_tracer("bench-test")
        for name in ("run", "step", "attempt"):
            with tracer.start_as_current_span(name):
                pass
        provider.shutdown()  # one request: the spans are counted, not the requests
        assert stop_watcher(proc, tmp_path, "otlp") == ("spans", 3.0)
    finally:
        harness.kill(proc)


def test_the_table_gives_each_setting_beside_nothing():
    def turns(steps_per_s: float, postgres_ms: float, event: tuple[str, float]) -> list[Turn]:
        return [Turn(steps_per_s, (postgres_ms, 1, 1, 1, 10), (12.0, 100.0), event)]

    lines = table(
        {
            "nothing": turns(20.0, 10.0, ("none", 0.0)),
            "scraper": turns(10.0, 15.0, ("scrapes", 0.5)),
            "feed": turns(20.0, 20.0, ("redraws", 0.7)),
            "traces": turns(40.0, 10.0, ("spans", 2.2)),
        },
        runs=10,
        rounds=1,
    )
    assert tuple(lines[2].split()) == SETTINGS
    assert lines[3].split() == "steps/s 20.0 (1.00) 10.0 (0.50) 20.0 (1.00) 40.0 (2.00)".split()
    assert "15.00 (1.50)" in lines[4] and "20.00 (2.00)" in lines[4]
    assert lines[-2].split()[-6:] == ["scrapes", "0.50", "redraws", "0.70", "spans", "2.20"]
    assert "noisy" in lines[-1]
