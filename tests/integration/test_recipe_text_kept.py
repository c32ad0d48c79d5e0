"""A recipe keeps the text its author wrote: `recipe show`, `recipe diff`, a rollback and a
proposal show it with its comments, its key order and its durations as written, while the
workflow's hash (and so whether an apply changes anything) is still that of the parsed recipe.
A version stored without text (applied as a document, or before texts were kept) reads as the
recipe rendered."""

from __future__ import annotations

import json
from pathlib import Path

from engine_adapter.catalog import proposals
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.model.identity import Actor
from engine_adapter.recipes.recipes import Recipe, load_recipe_text
from engine_adapter.testing import harness

# Comments, keys in an order of the author's own (steps before slug, run_command before id),
# flow style and a duration that the canonical form would write as 1d.
WRITTEN = """# Nightly report: kept exactly as typed
steps:
  - run_command: echo "report for {{ payload.day }}"   # the only step
    id: report
    timeout: 24h
slug: kept-text
allow_proposals: true
name: Kept text
env: [REPORT_DIR]
"""


def cli(db_url: str, *args: str) -> str:
    done = harness.run_cli(db_url, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def versions(conn) -> list[tuple[int, str]]:
    rows = conn.execute(
        "select version, hash from threadline.workflow_versions where slug = 'kept-text'"
        " order by version"
    )
    return [(r["version"], r["hash"]) for r in rows]


def test_show_and_diff_keep_the_text_as_written(db_url, conn, tmp_path: Path):
    path = tmp_path / "kept.yaml"
    path.write_text(WRITTEN)
    assert cli(db_url, "recipe", "apply", str(path)).strip() == "kept-text v1"
    shown = cli(db_url, "recipe", "show", "kept-text")
    assert shown.startswith(WRITTEN)  # comments, order and 24h, not 1d
    assert shown[len(WRITTEN) :].startswith("# v1 · ")
    assert json.loads(cli(db_url, "recipe", "show", "kept-text", "--json"))["text"] == WRITTEN

    # The same text again is no new version; so is the same recipe in another form.
    assert "(unchanged)" in cli(db_url, "recipe", "apply", str(path))
    same = load_recipe_text(WRITTEN)
    assert not apply_recipe(conn, Recipe.from_dict(same.to_dict())).changed
    assert len(versions(conn)) == 1

    # A changed comment alone is a new version of the same recipe: its hash stays.
    recommented = WRITTEN.replace("# the only step", "# the one step, for now")
    path.write_text(recommented)
    assert cli(db_url, "recipe", "apply", str(path)).strip() == "kept-text v2"
    (_, first), (_, second) = versions(conn)
    assert first == second
    diff = cli(db_url, "recipe", "diff", "kept-text", "1", "2")
    assert '-  - run_command: echo "report for {{ payload.day }}"   # the only step' in diff
    assert '+  - run_command: echo "report for {{ payload.day }}"   # the one step, for now' in diff

    changed = recommented.replace("timeout: 24h", "timeout: 36h")
    path.write_text(changed)
    assert cli(db_url, "recipe", "apply", str(path)).strip() == "kept-text v3"
    diff = cli(db_url, "recipe", "diff", "kept-text", "2", "3")
    assert "-    timeout: 24h\n+    timeout: 36h" in diff
    assert "# Nightly report" not in diff  # the lines around it, as written, are unchanged

    # A rollback restores the earlier version's text along with its recipe.
    assert cli(db_url, "recipe", "rollback", "kept-text", "--to", "1").strip() == (
        "kept-text: v4, a copy of v1"
    )
    assert cli(db_url, "recipe", "show", "kept-text").startswith(WRITTEN)


def test_a_proposal_carries_its_text_into_the_version_it_makes(db_url, conn, apply):
    apply(WRITTEN)
    base = conn.execute("select hash from threadline.workflows where slug = 'kept-text'")
    proposed = WRITTEN.replace("timeout: 24h", "timeout: 12h   # halved")
    made = proposals.propose(
        conn,
        "kept-text",
        base.fetchone()["hash"],
        load_recipe_text(proposed),
        "a shorter limit",
        Actor("carol", "api"),
    )
    assert "-    timeout: 24h\n+    timeout: 12h   # halved" in made["diff"]
    proposals.review(conn, made["id"], True, Actor("alice", "console"), "fine")
    assert proposals.apply(conn, made["id"], Actor("carol", "api")) == 2
    assert cli(db_url, "recipe", "show", "kept-text").startswith(proposed)


def test_a_version_without_text_reads_as_rendered(db_url, conn):
    recipe = load_recipe_text(WRITTEN)
    apply_recipe(conn, Recipe.from_dict(recipe.to_dict()))  # a document: no text to keep
    shown = cli(db_url, "recipe", "show", "kept-text")
    assert shown.startswith("slug: kept-text\nname: Kept text\n")
    assert "timeout: 1d" in shown and "#" not in shown.split("\n# v1")[0]
    # The first text applied to it is kept, though its recipe is the same.
    assert apply_recipe(conn, recipe).changed
    assert cli(db_url, "recipe", "show", "kept-text").startswith(WRITTEN)
