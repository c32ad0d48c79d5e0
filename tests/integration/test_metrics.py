"""GET /metrics (issue 25): Prometheus metrics from the read schema, served by the console to a
valid API token only; the numbers equal what connect()'s lists show."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine_adapter import connect
from engine_adapter.sandbox.sandbox import detect
from engine_adapter.testing import harness
from tests.integration.test_api import api, token  # noqa: F401  (the console fixture)

RECIPE = """
slug: metered
steps:
  - id: work
    run_command: echo {{payload.n}}; test {{payload.n}} -lt 2
  - id: check
    human_gate: "Fine?"
    self_approval: true
"""


def scrape(base: str, bearer: str | None) -> tuple[int, str]:
    request = urllib.request.Request(base + "/metrics")
    if bearer:
        request.add_header("Authorization", f"Bearer {bearer}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_metrics_need_a_token_and_match_the_read_views(api, db_url, logins, apply):  # noqa: F811
    status, body = scrape(api, None)
    assert status == 401 and "bearer token" in body
    assert scrape(api, "tl_not_a_token")[0] == 401

    viewer = token(db_url, "grafana", "viewer")
    status, body = scrape(api, viewer)
    assert status == 200
    assert samples(body)["threadline_processes_alive"]

    apply(RECIPE)
    writer = connect(url=db_url, write=True)
    runs = [writer.spawn("metered", {"n": n}) for n in range(3)]
    for run in runs[2:]:
        harness.wait_for_state(db_url, run, "failed")
    for run in runs[:2]:
        harness.wait_for_state(db_url, run, "waiting")
    writer.approve(runs[0])
    harness.wait_for_state(db_url, runs[0], "completed")

    client = connect(url=logins["viewer"])
    found = samples(scrape(api, viewer)[1])
    by_state = {
        (s.labels["workflow"], s.labels["state"]): s.value for s in found["threadline_runs"]
    }
    listed = client.runs().groupby(["workflow", "state"]).size().to_dict()
    assert by_state == {k: float(v) for k, v in listed.items()}
    assert by_state[("metered", "failed")] == 1 and by_state[("metered", "waiting")] == 1

    steps = client.steps(workflow="metered")
    finished = steps[steps.finished_at.notna()]
    counts = {
        (s.labels["kind"], s.labels["outcome"]): s.value
        for s in found["threadline_step_duration_seconds_count"]
        if s.labels["workflow"] == "metered"
    }
    assert counts == {
        k: float(v) for k, v in finished.groupby(["kind", "outcome"]).size().to_dict().items()
    }
    total = sum(
        s.value
        for s in found["threadline_step_duration_seconds_sum"]
        if s.labels["workflow"] == "metered"
    )
    assert total == pytest.approx(finished.duration_s.sum(), abs=1e-6)

    gates = client.gates(workflow="metered")
    (waits,) = [s for s in found["threadline_gate_wait_seconds_count"]]
    assert waits.value == gates.decided_at.notna().sum() == 1
    opened = {s.labels["kind"]: s.value for s in found["threadline_steps_open"]}
    assert opened["gate"] == len(gates[gates.open]) == 1
    alive = {s.labels["kind"]: s.value for s in found["threadline_processes_alive"]}
    assert alive == {k: float(v) for k, v in client.workers(alive=True).kind.value_counts().items()}
    assert found["threadline_instructions_unclaimed"][0].value == 0


LIMITED = {  # a step of its own workflow each
    # Its output streams into the thread before it times out: a retried attempt's limit is
    # read from its retry note, whatever came before it.
    "sleepy": "run_command: echo started; sleep 30\n    timeout: 1s\n    retries: 1",
    "spinner": "run_command: \"python3 -c 'while True: pass'\"\n    limits: {cpu: 1s}",
    "chatty": "run_command: head -c 5000 /dev/zero | tr '\\\\0' x\n    limits: {output: 1KiB}",
}


def test_limits_hit_are_counted_by_workflow_and_limit(api, db_url, logins, apply):  # noqa: F811
    """A timeout (once retried, once the last try), a CPU limit and an output cut: each attempt
    counted by its limit, as the attempts view names it."""
    if detect().bwrap is None:
        pytest.skip("per-step limits need bubblewrap (apt-get install bubblewrap)")
    for slug, step in LIMITED.items():
        apply(f"slug: {slug}\nsteps:\n  - id: work\n    {step}\n")
    writer = connect(url=db_url, write=True)
    ended = {slug: writer.spawn(slug) for slug in LIMITED}
    for slug, run in ended.items():
        harness.wait_for_state(db_url, run, "completed" if slug == "chatty" else "failed", 90)

    found = samples(scrape(api, token(db_url, "grafana", "viewer"))[1])
    hits = {
        (s.labels["workflow"], s.labels["limit"]): s.value
        for s in found["threadline_sandbox_limits_hit_total"]
    }
    assert hits == {("sleepy", "timeout"): 2, ("spinner", "cpu"): 1, ("chatty", "output"): 1}
    attempts = connect(url=logins["viewer"]).attempts()
    named = attempts[attempts.limit_hit.notna()].groupby(["workflow", "limit_hit"]).size()
    assert hits == {k: float(v) for k, v in named.to_dict().items()}


def test_runs_no_conductor_has_taken_up_are_counted(procs, db_url, apply):
    """Runs spawned while no conductor runs wait for one; once one runs, none wait."""
    procs.start("console", args=["--port", str(port := harness.free_port())])
    base = f"http://127.0.0.1:{port}"
    harness.wait_for(lambda: harness.answers(base + "/api/v1/openapi.json"), 90, 0.3, "console")
    viewer = token(db_url, "grafana", "viewer")
    apply(RECIPE)
    writer = connect(url=db_url, write=True)
    runs = [writer.spawn("metered", {"n": 5}) for _ in range(3)]

    def unclaimed() -> float:
        return samples(scrape(base, viewer)[1])["threadline_runs_unclaimed"][0].value

    assert unclaimed() == 3
    procs.start("conductor")
    procs.start("bots")
    for run in runs:
        harness.wait_for_state(db_url, run, "failed")
    assert unclaimed() == 0
