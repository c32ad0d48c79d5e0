"""The console's pictures in Chromium: the run page's waterfall (a bar per step attempt, child
runs nested, a live bar growing while its step runs and ending with it), the recipe page's graph
of a workflow, and a chart with one bar drawn as a bar, not a block."""

from __future__ import annotations

import itertools
from typing import Any

from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

RUN = """slug: ui-waterfall
bot: local
steps:
  - id: quick
    run_command: echo quick
  - id: flaky
    run_command: exit 3
    retries: 1
    backoff: {initial: 1s, max: 1s}
    on_failure: continue
  - id: fan
    parallel:
      left:
        - id: left_work
          run_command: echo left
      right:
        - id: right_work
          run_command: echo right
  - id: slow
    run_command: "sleep 12; echo slow"
  - id: hold
    human_gate: "Go on?"
  - id: finish
    run_command: echo done
"""
SHAPES = """slug: ui-graph
bot: local
steps:
  - id: fetch
    run_command: echo a b
  - id: checks
    parallel:
      lint:
        - id: lint
          run_command: echo lint
      unit:
        - id: unit
          run_command: echo unit
  - id: triage
    if: steps.unit.output == "unit"
    then:
      - id: celebrate
        run_command: echo ok
    else:
      - id: investigate
        run_command: echo look
  - id: smoke
    foreach: lines(steps.fetch.output)
    steps:
      - id: probe
        run_command: echo {{item}}
  - id: release
    human_gate: "Release?"
"""
ONE_FAILURE = """slug: ui-one-failure
bot: local
steps:
  - id: breaks
    run_command: exit 1
"""

ROW = ".tl-wf-row[data-key^='{}']"
BAR = ROW + " .tl-wf-bar"


def rows(page: Any) -> list[dict[str, str]]:
    return page.locator(".tl-wf-row").evaluate_all(
        """rows => rows.map(r => ({key: r.dataset.key, status: r.dataset.status,
            open: r.dataset.open, label: r.querySelector('.tl-wf-label').innerText.trim(),
            indent: r.querySelector('.tl-wf-label').style.paddingLeft,
            link: (r.querySelector('a') || {}).href || '',
            bar: !!r.querySelector('.tl-wf-bar')}))"""
    )


def bar(page: Any, key: str) -> tuple[float, float]:
    """The bar's drawn width in pixels and the seconds it stands for."""
    # Both read at once: a live update replaces the bar between two separate reads; a bar just
    # put in place may not be laid out yet (0 wide), so look again a moment later.
    for _ in range(20):
        width, seconds = page.locator(BAR.format(key)).first.evaluate(
            "e => [e.getBoundingClientRect().width, Number(e.dataset.seconds)]"
        )
        if width:
            break
        page.wait_for_timeout(25)
    return width, seconds


def grows(page: Any, key: str, samples: int = 4) -> None:
    """The open bar of `key` is longer, in seconds and on screen, at every look."""
    seen = []
    for _ in range(samples):
        seen.append(bar(page, key))
        page.wait_for_timeout(800)
    for (px, seconds), (later_px, later_s) in itertools.pairwise(seen):
        assert later_s >= seconds + 0.3 and later_px > px, (key, seen)


def test_the_run_page_draws_a_live_waterfall(page, stack):
    with db.connect(stack.url) as conn:
        apply_recipe(conn, load_recipe_text(RUN))
        run_id = spawn(conn, "ui-waterfall", {}).run_id
    page.goto(stack.base + f"/run?id={run_id}")
    page.wait_for_selector("#tl-waterfall")
    # While `slow` runs its bar is open and grows with the database's clock (it runs long enough
    # for four looks after a loaded machine has first drawn it).
    # (its attempt's row: before a bot takes it, the step's own row stands for it)
    page.wait_for_selector(ROW.format("slow:1.1") + "[data-open='1'] .tl-wf-bar", timeout=60_000)
    grows(page, "slow:1.1")
    # So does a gate's wait, where nothing in the run changes: the live feed's beat moves it.
    page.wait_for_selector(ROW.format("hold") + "[data-open='1'][data-status='gate'] .tl-wf-bar")
    grows(page, "hold")
    done = harness.run_cli(stack.url, "approve", run_id, home=stack.procs.threadline_home)
    assert done.returncode == 0, done.stderr
    # Each ends with its step: closed, and no longer growing.
    harness.wait_for_state(stack.url, run_id, "completed", timeout=60)
    page.wait_for_selector(ROW.format("finish") + "[data-open='0'] .tl-wf-bar")
    page.wait_for_selector(ROW.format("slow") + "[data-open='0']")
    ended_px, ended_s = bar(page, "slow")
    page.wait_for_timeout(1200)
    later_px, later_s = bar(page, "slow")
    # Its seconds stay (an open bar grows with the clock); its width may move a hair when the
    # chart's scale settles on the run's end.
    assert later_s == ended_s and abs(later_px - ended_px) <= 0.01 * ended_px
    assert 11.5 <= ended_s < 15, ended_s

    drawn = {r["label"]: r for r in rows(page)}
    # A bar per attempt: flaky's two failed attempts, each its own row.
    assert drawn["flaky · attempt 1"]["status"] == drawn["flaky · attempt 2"]["status"] == "failed"
    assert drawn["quick"]["status"] == "completed" and drawn["quick"]["bar"]
    assert drawn["hold"]["status"] == "completed" and drawn["hold"]["bar"]
    # The parallel branches as child runs, nested under their group, linked to their own pages.
    for branch, step in (("left", "left_work"), ("right", "right_work")):
        row = drawn[f"branch {branch}"]
        assert "/run?id=" in row["link"] and row["bar"]
        assert drawn[step]["indent"] == "28px" and row["indent"] == "14px"
    assert all(r["open"] == "0" for r in drawn.values())


def test_the_recipe_page_draws_the_workflow_as_a_graph(page, stack):
    with db.connect(stack.url) as conn:
        apply_recipe(conn, load_recipe_text(SHAPES))
    page.goto(stack.base + "/recipe?slug=ui-graph")
    page.wait_for_selector("#tl-graph .tl-gnode")
    nodes = page.locator("#tl-graph .tl-gnode").evaluate_all(
        """gs => gs.map(g => { const b = g.getBoundingClientRect();
            return {step: g.dataset.step, kind: g.dataset.kind, text: g.textContent,
                    x: b.x, y: b.y, w: b.width, h: b.height}; })"""
    )
    kinds = {n["step"]: n["kind"] for n in nodes}
    assert kinds == {
        "fetch": "run_command", "checks": "parallel", "lint": "run_command",
        "unit": "run_command", "triage": "conditional", "celebrate": "run_command",
        "investigate": "run_command", "probe": "run_command", "release": "human_gate",
    }  # fmt: skip
    # The foreach: a frame around its body, saying what it loops over.
    frame = page.locator("#tl-graph .tl-gloopframe[data-step='smoke'][data-kind='foreach']")
    assert "foreach lines(steps.fetch.output)" in (frame.text_content() or "")
    at = {n["step"]: n for n in nodes}
    assert (
        at["lint"]["y"] == at["unit"]["y"] and at["lint"]["x"] + at["lint"]["w"] <= at["unit"]["x"]
    )
    assert at["celebrate"]["y"] == at["investigate"]["y"]
    assert at["fetch"]["y"] < at["checks"]["y"] < at["lint"]["y"] < at["triage"]["y"]
    assert at["triage"]["y"] < at["probe"]["y"] < at["release"]["y"]
    assert all(n["w"] > 100 and n["h"] > 30 for n in nodes)  # drawn, not collapsed
    assert "Release?" in page.locator("#tl-graph").inner_html()


def test_a_chart_with_one_bar_draws_a_bar_not_a_block(page, stack):
    with db.connect(stack.url) as conn:
        apply_recipe(conn, load_recipe_text(ONE_FAILURE))
        run_id = spawn(conn, "ui-one-failure", {}).run_id
    harness.wait_for_state(stack.url, run_id, "failed", timeout=60)
    page.goto(stack.base + "/?workflow=ui-one-failure")
    chart = page.locator(".js-plotly-plot").filter(has_text="Failed runs by step")
    bars = chart.locator(".barlayer .point path")
    bars.first.wait_for()
    assert bars.count() == 1
    one = bars.first.bounding_box()
    area = chart.locator(".bglayer rect, .nsewdrag").first.bounding_box()
    assert one is not None and area is not None
    # Thick enough to see, far from filling the panel's height (it did: a 170 px red block).
    assert 8 <= one["height"] <= area["height"] / 4, (one, area)
    assert one["width"] > area["width"] / 2  # one failure of one: the whole axis
