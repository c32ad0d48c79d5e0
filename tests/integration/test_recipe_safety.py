"""Values from payloads never run as code, payloads are checked against the recipe's schema
before anything is written, poisonous stored values fail a step instead of the conductor, and a
refused recipe writes nothing. Real conductor and bot processes, a real database."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, event, given, settings
from recipe_strategies import RECIPE_TEXT

from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import Recipe, RecipeError, Step, load_recipe_text
from engine_adapter.runs.events import emit
from engine_adapter.runs.spawn import PayloadRejected, spawn
from engine_adapter.testing import harness

ATTACKS = ["$(touch PWNED)", ";touch PWNED", "`touch PWNED`", "'\"; touch PWNED; \"'"]
CONTEXTS = ("bare", "double", "heredoc", "subst", "backticks", "relay")
INJECTION = """
slug: injection
workdir: {work}
steps:
  - id: bare
    run_command: printf %s {{{{payload.x}}}} > out-{{{{payload.i}}}}-bare.txt
  - id: double
    run_command: printf %s "{{{{payload.x}}}}" > "out-{{{{payload.i}}}}-double.txt"
  - id: heredoc
    run_command: |
      cat > out-{{{{payload.i}}}}-heredoc.txt <<EOF
      {{{{payload.x}}}}
      EOF
  - id: subst
    run_command: printf %s "$(printf %s {{{{payload.x}}}})" > out-{{{{payload.i}}}}-subst.txt
  - id: backticks
    run_command: printf %s "`printf %s {{{{payload.x}}}}`" > out-{{{{payload.i}}}}-backticks.txt
  - id: emit
    run_command: printf %s "{{{{payload.x}}}}"
  - id: relay
    run_command: printf %s "{{{{steps.emit.output}}}}" > out-{{{{payload.i}}}}-relay.txt
"""


def count(conn, table: str) -> int:
    return conn.execute(f"select count(*) as n from {table}").fetchone()["n"]


def test_no_payload_value_runs_in_any_quoting_context(conn, apply, procs, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(0o777)  # steps may run as an unprivileged user
    apply(INJECTION.format(work=work))
    procs.start("conductor")
    procs.start("bots")
    run_ids = [
        spawn(conn, "injection", {"x": attack, "i": i}).run_id for i, attack in enumerate(ATTACKS)
    ]
    for run_id in run_ids:
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
        instructions = [e["text"] for e in view["thread"] if e["kind"] == "instruction"]
        assert all("touch PWNED" not in text for text in instructions)  # references, not values
    assert not (work / "PWNED").exists()
    for i, attack in enumerate(ATTACKS):
        for context in CONTEXTS:
            expected = attack + ("\n" if context == "heredoc" else "")
            assert (work / f"out-{i}-{context}.txt").read_text() == expected, (attack, context)


def test_a_value_no_environment_holds_fails_its_step_with_a_message(conn, apply, procs):
    apply('slug: big-value\nsteps:\n  - id: one\n    run_command: echo "{{payload.blob}}"\n')
    procs.start("conductor")
    run_id = spawn(conn, "big-value", {"blob": "x" * 200_000}).run_id
    view = harness.wait_for_state(procs.url, run_id, "failed", timeout=30)
    assert view["steps"][0]["status"] == "failed"
    assert "{{payload.blob}}: the value is 200000 bytes" in view["steps"][0]["output"]


CHECKS = """
slug: checks
on_event: checks.requested
payload_schema:
  type: object
  properties:
    target: {type: string, pattern: "^[^-]"}
  required: [target]
steps:
  - id: checks
    run_command: pytest -q {{payload.target}}
"""


def test_a_payload_the_schema_refuses_writes_nothing(conn, apply):
    apply(CHECKS)
    tables = ("threadline.run_threads", "threadline.thread_entries", "absurd.t_threadline")
    with pytest.raises(PayloadRejected) as err:
        spawn(conn, "checks", {"target": "--basetemp=/x"})
    assert str(err.value) == (
        "workflow 'checks' refuses the payload: "
        'payload.target: "--basetemp=/x" does not match "^[^-]"'
    )
    with pytest.raises(PayloadRejected, match="payload: 'target' is a required property"):
        spawn(conn, "checks", {})
    with pytest.raises(PayloadRejected, match=r'payload\.target: 5 is not of type "string"'):
        emit(conn, "checks.requested", {"target": 5})
    assert all(count(conn, t) == 0 for t in tables)

    run_id = spawn(conn, "checks", {"target": "tests/unit"}).run_id
    snapshot = conn.execute(
        "select recipe from threadline.run_threads where run_id = %s", (run_id,)
    ).fetchone()["recipe"]
    assert snapshot["payload_schema"]["properties"]["target"]["pattern"] == "^[^-]"


def test_stored_out_of_range_durations_fail_the_step_not_the_conductor(conn, procs):
    # Stored before the bounds existed: built directly, as validation no longer lets them in.
    huge = 10**20 * 86_400.0
    for slug, step in (
        ("huge-sleep", Step(id="nap", kind="sleep", text="100000000000000000000d")),
        (
            "huge-gate",
            Step(
                id="ok",
                kind="human_gate",
                text="ok?",
                timeout_s=huge,
                accept="decision",
                on_timeout="deny",
            ),
        ),
    ):
        apply_recipe(conn, Recipe(slug=slug, name=slug, steps=(step,)))
    conductor = procs.start("conductor")
    runs = [spawn(conn, slug).run_id for slug in ("huge-sleep", "huge-gate")]
    for run_id in runs:
        view = harness.wait_for_state(procs.url, run_id, "failed", timeout=30)
        step = view["steps"][0]
        assert step["status"] == "failed"
        assert "cannot run" in step["output"] and "longer than 366 days" in step["output"]
        failed = [e["text"] for e in view["thread"] if "failed (try 1)" in e["text"]]
        assert failed and "longer than 366 days" in failed[0]
    assert conductor.poll() is None  # it never crashed


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=RECIPE_TEXT)
def test_a_refused_recipe_writes_no_row(conn, text):
    tables = ("threadline.workflows", "threadline.workflow_versions", "threadline.webhook_triggers")
    before = {t: count(conn, t) for t in tables}
    try:
        applied = apply_recipe(conn, load_recipe_text(text))
    except RecipeError:
        event("refused")
        assert {t: count(conn, t) for t in tables} == before
        return
    event("applied")
    stored = conn.execute(
        "select recipe from threadline.workflows where slug = %s", (applied.slug,)
    ).fetchone()["recipe"]
    assert Recipe.from_dict(json.loads(json.dumps(stored))).slug == applied.slug
