"""Traces (issue 25) without a database: with no OTLP endpoint configured a process imports no
OpenTelemetry and sends nothing; with one, the same calls reach a real OTLP/HTTP receiver, in the
trace whose id is the run id's 128 bits."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from tests.otlp_receiver import otlp_env, receiver

RUN = "019ac3f0-0000-7000-8000-00000000abcd"

# A process's way through traces.py: start, a step try's and an attempt's spans, shutdown.
PROBE = f"""
import sys
import engine_adapter.conductor.conductor, engine_adapter.bots.bots
from engine_adapter.store import traces
started = traces.start("probe")
traces.step_tried({RUN!r}, "wf", "build", 1, "run_command", traces.now_ns(), "completed", None)
traces.attempt_ended({RUN!r} + ":build:1", "build", 1, 1, traces.now_ns(), "completed",
                     bot="b", worker="w", sandbox="s", exit_code=0)
traces.shutdown()
print(started, any(m.startswith("opentelemetry") for m in sys.modules))
"""


def probe(env: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_without_an_endpoint_nothing_is_imported_or_sent():
    with receiver() as got:
        # The receiver is there, but nothing names it: nothing may go out, nothing be imported.
        assert probe({"NO_PROXY": "127.0.0.1"}) == "False False"
        # Switched off by the SDK's own settings, even with an endpoint.
        env = otlp_env(got.endpoint)
        assert probe({**env, "OTEL_SDK_DISABLED": "true"}) == "False False"
        assert probe({**env, "OTEL_TRACES_EXPORTER": "none"}) == "False False"
        assert got.requests == 0 and got.spans == []


def test_with_an_endpoint_spans_go_out_in_the_runs_trace():
    with receiver() as got:
        assert probe(otlp_env(got.endpoint)) == "True True"
        spans = got.wait_for(lambda s: len(s) == 2 and s)
    step, attempt = sorted(spans, key=lambda s: s.name, reverse=True)
    assert {s.trace_id for s in spans} == {uuid.UUID(RUN).int}
    assert step.name == "step build" and attempt.name == "attempt build"
    assert attempt.parent_id == step.span_id  # no context passed: both derived from the step try
    assert step.attributes["threadline.run_id"] == RUN
    assert attempt.attributes["threadline.attempt"] == 1
    assert step.service == "probe"


def test_span_ids_are_derived_from_what_they_stand_for():
    from engine_adapter.store import traces

    assert traces.trace_id(RUN) == uuid.UUID(RUN).int
    assert traces.step_ref(RUN, "a", 1) == traces.step_ref(RUN, "a", 1)
    assert traces.step_ref(RUN, "a", 1) != traces.step_ref(RUN, "a", 2)
    assert traces.run_ref(RUN).span_id != traces.step_ref(RUN, "a", 1).span_id
    assert traces.attempt_ref(f"{RUN}:a:1", 2).run_id == RUN
