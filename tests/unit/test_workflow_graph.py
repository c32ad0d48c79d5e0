"""The recipe page's graph laid out from a recipe (no browser): steps in order top to bottom,
branches side by side, a loop's body inside its frame, nothing overlapping."""

from __future__ import annotations

import re
from itertools import combinations

from console.workflow_graph import Node, graph_html, layout
from engine_adapter.recipes.recipes import load_recipe_text

RECIPE = """
slug: shapes
steps:
  - id: fetch
    run_command: ./fetch.sh
  - id: tests
    parallel:
      lint:
        - id: lint
          run_command: ruff check .
      unit:
        - id: unit
          run_command: pytest -q
        - id: coverage
          run_command: coverage report
  - id: triage
    if: steps.unit.exit_code > 1
    then:
      - id: page
        run_command: ./page.sh
    else:
      - id: note
        run_command: echo minor
  - id: smoke
    foreach: lines(steps.fetch.output)
    steps:
      - id: probe
        run_command: ./smoke.sh {{item}}
  - id: green
    repeat:
      - id: ci
        run_command: ./ci.sh
    until: steps.ci.output == "green"
    max_iterations: 5
  - id: release
    human_gate: "Release?"
  - id: nap
    if: payload.slow
    sleep: 1m
  - id: deploy
    workflow: deploy
"""


def laid_out() -> dict[str, Node]:
    box = layout(load_recipe_text(RECIPE).to_dict()["steps"])
    nodes = {n.step: n for n in box.nodes}
    assert len(nodes) == len(box.nodes)  # one shape per step
    return nodes


def overlap(a: Node, b: Node) -> bool:
    return a.x < b.x + b.w and b.x < a.x + a.w and a.y < b.y + b.h and b.y < a.y + a.h


def test_every_step_has_a_shape_and_none_overlap():
    nodes = laid_out()
    assert set(nodes) == {
        "fetch", "tests", "lint", "unit", "coverage", "triage", "page", "note", "probe", "ci",
        "release", "nap", "deploy",
    }  # fmt: skip
    assert [(a, b) for a, b in combinations(nodes.values(), 2) if overlap(a, b)] == []
    kinds = {n.step: n.kind for n in nodes.values()}
    assert (kinds["tests"], kinds["triage"], kinds["release"], kinds["deploy"]) == (
        "parallel", "conditional", "human_gate", "workflow",
    )  # fmt: skip


def test_top_level_steps_go_down_in_recipe_order():
    nodes = laid_out()
    order = ["fetch", "tests", "triage", "smoke", "green", "release", "nap", "deploy"]
    ys = [nodes[s].y for s in order if s in nodes]
    assert ys == sorted(ys) and len(set(ys)) == len(ys)


def test_branches_sit_side_by_side_and_a_branch_keeps_its_order():
    nodes = laid_out()
    lint, unit, coverage = nodes["lint"], nodes["unit"], nodes["coverage"]
    assert lint.y == unit.y and lint.x + lint.w <= unit.x
    assert coverage.x == unit.x and coverage.y > unit.y
    page, note = nodes["page"], nodes["note"]
    assert page.y == note.y and page.x + page.w <= note.x
    # Both branches under their fork, above the step after it.
    assert nodes["tests"].y < lint.y < nodes["triage"].y


def test_a_loops_body_is_inside_its_frame():
    box = layout(load_recipe_text(RECIPE).to_dict()["steps"])
    frames = {f.step: f for f in box.frames}
    assert set(frames) == {"smoke", "green"}
    nodes = {n.step: n for n in box.nodes}
    for loop, body in (("smoke", "probe"), ("green", "ci")):
        f, n = frames[loop], nodes[body]
        assert f.x < n.x and n.x + n.w < f.x + f.w and f.y < n.y and n.y + n.h < f.y + f.h
    assert "foreach lines(steps.fetch.output) · one item at a time" in frames["smoke"].tip


def test_the_svg_names_each_step_and_links_a_sub_workflow():
    drawn = graph_html(load_recipe_text(RECIPE).to_dict()["steps"])
    steps = re.findall(r'class="tl-gnode" data-step="([^"]+)" data-kind="([^"]+)"', drawn)
    assert ("release", "human_gate") in steps and len(steps) == 13
    assert '<a href="/recipe?slug=deploy">' in drawn
    assert "only if payload.slow" in drawn  # a conditional step says its condition
    assert "http" not in drawn.replace("http://www.w3.org/2000/svg", "")  # nothing fetched
