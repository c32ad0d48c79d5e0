"""Recipes: the list, and one recipe's editor with live validation, versions (diff, rollback),
spawn with a payload form, and its schedule."""

from __future__ import annotations

import html
import json
import time
import uuid
from typing import Any

import pandas as pd
import panel as pn
from panel.viewable import Viewer

from engine_adapter.access.authorization import Action
from engine_adapter.catalog.workflows import (
    WorkflowNotFound,
    apply_recipe,
    get_version,
    get_workflow,
    list_versions,
    list_workflows,
    rollback,
    version_text,
)
from engine_adapter.model.errors import ThreadlineError
from engine_adapter.model.vocab import TriggerKind
from engine_adapter.recipes.recipes import Recipe, RecipeError
from engine_adapter.runs.schedules import schedule_list
from engine_adapter.runs.spawn import manual_key, spawn

from . import access, data, state
from .recipe_check import check_recipe_async
from .style import html_pane, read_only_table
from .workflow_graph import graph_html

DOUBLE_CLICK_S = 1.0
NEW_RECIPE = """slug: my-workflow
name: My workflow
bot: local
payload_schema:            # each run's payload must satisfy this JSON Schema
  type: object
  properties:
    name: {type: string, pattern: "^[A-Za-z][A-Za-z0-9 _.-]*$"}
  required: [name]
steps:
  - id: check              # a value reaches a command as a variable, never as code
    run_command: echo "hello {{ payload.name }}"
  - id: confirm
    human_gate: "The check said: {{ steps.check.output }}. Go on?"
"""


class RecipesPage(Viewer):
    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        with data.connection() as conn:
            rows = list_workflows(conn)
        self.table = read_only_table(
            recipes_frame(rows),
            formatters={"workflow": {"type": "html"}, "runs": {"type": "html"}},
            name="recipes",
        )

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            html_pane(
                '<a href="/recipe?new=1" class="btn btn-primary" id="tl-new-recipe">New recipe</a>'
            ),
            self.table,
            sizing_mode="stretch_width",
        )


def recipes_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "workflow": f'<a href="{state.recipe_url(r["slug"])}">{html.escape(r["slug"])}</a>',
                "name": r["name"],
                "version": r["version"],
                "schedule": r.get("schedule") or "",
                "enabled": r.get("enabled", True),
                "runs": f'<a href="{state.runs_url({"workflow": r["slug"]})}">{r["runs"]}</a>',
            }
            for r in rows
        ],
        columns=["workflow", "name", "version", "schedule", "enabled", "runs"],
    )


class RecipeEditor(Viewer):
    """One recipe (or a new one): edit with live validation, save a version, roll back, spawn."""

    def __init__(self, slug: str | None = None, **params: Any) -> None:
        super().__init__(**params)
        self.slug = slug
        # Why this user may not change recipes or spawn (None: they may); every write checks again.
        self.read_only = access.refusal(
            access.current_session(), Action.APPLY_RECIPE, "save, roll back or spawn"
        )
        self.workflow: dict[str, Any] | None = None
        self.current: dict[str, Any] | None = None  # the current version, with its text
        self.versions: list[dict[str, Any]] = []
        self.schedule: dict[str, Any] | None = None
        if slug:
            with data.connection() as conn:
                self.workflow = get_workflow(conn, slug)  # WorkflowNotFound goes to the caller
                self.current = get_version(conn, slug, self.workflow["version"])
                self.versions = list_versions(conn, slug)
                self.schedule = next(
                    (s for s in schedule_list(conn) if s["workflow"] == slug), None
                )
        # As its author wrote it: comments, key order and durations as typed.
        text = version_text(self.current) if self.current else NEW_RECIPE
        self.editor = pn.widgets.CodeEditor(
            value=text, language="yaml", sizing_mode="stretch_width", height=380, name="recipe"
        )
        self.editor.param.watch(self._edited, "value")
        self._checks = 0  # the latest check's number: an older answer arriving late is dropped
        self.validation = html_pane("", sizing_mode="stretch_width")
        # The workflow as a graph, redrawn from each valid text (workflow_graph.py).
        self.graph = html_pane("", sizing_mode="stretch_width", name="graph")
        self.save = pn.widgets.Button(
            name="Save as new version" if slug else "Create", button_type="primary"
        )
        self.save.on_click(self._save)
        self.saved = html_pane("")
        self.version_pick = pn.widgets.Select(
            name="Compare with version",
            width=200,
            options={
                f"v{v['version']} ({v['source']}"
                + (f" of v{v['rolled_back_from']}" if v["rolled_back_from"] else "")
                + ")": v["version"]
                for v in self.versions
            },
        )
        self.diff = html_pane("")
        self.rollback = pn.widgets.Button(
            name="Roll back to this version",
            button_type="warning",
            disabled=not self.versions or self.read_only is not None,
        )
        self.version_pick.param.watch(lambda _e: self._show_diff(), "value")
        self.rollback.on_click(lambda _e: self._rollback())
        self.payload = pn.widgets.TextAreaInput(
            name="Payload (JSON object)",
            value="{}",
            rows=3,
            placeholder='{"key": "value"}',
            sizing_mode="stretch_width",
        )
        self.spawn_button = pn.widgets.Button(
            name="Spawn a run",
            button_type="success",
            disabled=not slug or self.read_only is not None,
        )
        self.spawn_button.on_click(lambda _e: self._spawn())
        self.spawned = html_pane("")
        # One request id per deliberate click: a second click within DOUBLE_CLICK_S of a spawn
        # reuses the id, so the spawn door returns the same run instead of making another.
        self._request_id = str(uuid.uuid4())
        self._spawned_at = -DOUBLE_CLICK_S
        pn.state.execute(self._edited)
        if self.versions:  # newest first: compare the current version with the one before it
            self.version_pick.value = self.versions[min(1, len(self.versions) - 1)]["version"]
            self._show_diff()

    def __panel__(self) -> pn.viewable.Viewable:
        note = html_pane(
            f'<div class="tl-muted" id="tl-permissions">{html.escape(self.read_only or "")}</div>'
        )
        editor = pn.Column(
            self.editor,
            self.validation,
            pn.Row(self.save, self.saved),
            note,
            sizing_mode="stretch_width",
        )
        parts: list[Any] = [
            editor,
            pn.Card(self.graph, title="Graph", sizing_mode="stretch_width"),
        ]
        if self.slug:
            parts.append(
                pn.Card(
                    self.payload,
                    pn.Row(self.spawn_button),
                    self.spawned,
                    title="Spawn",
                    sizing_mode="stretch_width",
                )
            )
            parts.append(
                pn.Card(
                    pn.Row(self.version_pick, self.rollback),
                    self.diff,
                    title="Versions",
                    sizing_mode="stretch_width",
                )
            )
            parts.append(
                pn.Card(
                    html_pane(schedule_html(self.schedule)),
                    title="Schedule",
                    sizing_mode="stretch_width",
                )
            )
        return pn.Column(*parts, sizing_mode="stretch_width")

    async def _edited(self, _event: Any = None) -> None:
        await self.validate()

    async def validate(self) -> Recipe | None:
        """Check the editor's text in a bounded worker, off the event loop, and show the verdict."""
        self._checks += 1
        mine = self._checks
        recipe, errors = await check_recipe_async(self.editor.value, source="editor")
        if mine != self._checks:
            return None  # the text changed meanwhile: the newer check shows its verdict
        if errors:
            items = "".join(f"<li>{html.escape(e)}</li>" for e in errors)
            self.validation.object = (
                f'<div class="tl-error" id="tl-validation"><b>Not valid:</b><ul>{items}</ul></div>'
            )
            self.save.disabled = True
            return None
        assert recipe is not None  # no errors: the recipe
        if self.slug and recipe.slug != self.slug:
            self.validation.object = (
                f'<div class="tl-error" id="tl-validation">slug: this page edits '
                f"{html.escape(self.slug)}; to make a new workflow use New recipe</div>"
            )
            self.save.disabled = True
            return None
        self.validation.object = (
            f'<div class="tl-ok" id="tl-validation">Valid · {len(recipe.steps)} steps</div>'
        )
        self.graph.object = graph_html(recipe.to_dict()["steps"])
        self.save.disabled = self.read_only is not None
        return recipe

    async def _save(self, _event: Any) -> None:
        recipe = await self.validate()
        if recipe is None:
            return
        try:
            actor = access.actor_for(Action.APPLY_RECIPE, "save a recipe")
        except access.NotAllowed as err:
            self.saved.object = f'<span class="tl-error">{html.escape(str(err))}</span>'
            return
        with data.connection() as conn:
            if not self.slug:
                try:
                    get_workflow(conn, recipe.slug)
                    self.saved.object = (
                        f'<span class="tl-error">slug: {html.escape(recipe.slug)} exists already; '
                        f'<a href="{state.recipe_url(recipe.slug)}">edit it</a></span>'
                    )
                    return
                except WorkflowNotFound:
                    pass
            try:
                applied = apply_recipe(conn, recipe, actor=actor)
            except RecipeError as err:  # e.g. a webhook path another workflow holds
                self.saved.object = f'<span class="tl-error">{html.escape(str(err))}</span>'
                return
        link = state.recipe_url(applied.slug)
        word = "saved" if applied.changed else "unchanged"
        self.saved.object = (
            f'<span class="tl-ok" id="tl-saved">{word}: '
            f'<a href="{link}">{applied.slug} v{applied.version}</a></span>'
        )

    def _show_diff(self) -> None:
        if not self.versions or self.version_pick.value is None or self.current is None:
            return
        assert self.workflow is not None  # read with its current version
        with data.connection() as conn:
            old = get_version(conn, self.slug or "", self.version_pick.value)
        text = state.version_diff(
            version_text(old),
            version_text(self.current),
            f"v{old['version']}",
            f"v{self.workflow['version']} (current)",
        )
        self.diff.object = f'<pre class="tl-text">{html.escape(text)}</pre>'

    def _rollback(self) -> None:
        try:
            actor = access.actor_for(Action.ROLLBACK)
        except access.NotAllowed as err:
            self.saved.object = f'<span class="tl-error">{html.escape(str(err))}</span>'
            return
        version = self.version_pick.value
        try:  # an old version may break a bound added since, or be the current one: say so
            with data.connection() as conn:
                applied = rollback(conn, self.slug or "", str(version), actor)
        except ThreadlineError as err:  # invalid now, no such version, already current
            self.saved.object = f'<span class="tl-error">{html.escape(str(err))}</span>'
            return
        self.saved.object = (
            f'<span class="tl-ok">rolled back: now <a href="{state.recipe_url(applied.slug)}">'
            f"v{applied.version}</a> (a copy of v{version})</span>"
        )

    def _spawn(self) -> None:
        if time.monotonic() - self._spawned_at > DOUBLE_CLICK_S:
            self._request_id = str(uuid.uuid4())
        try:
            payload = json.loads(self.payload.value or "{}")
        except json.JSONDecodeError as err:
            self.spawned.object = (
                f'<span class="tl-error">payload: not valid JSON: {html.escape(str(err))}</span>'
            )
            return
        try:
            actor = access.actor_for(Action.SPAWN)
        except access.NotAllowed as err:
            self.spawned.object = f'<span class="tl-error">{html.escape(str(err))}</span>'
            return
        try:
            with data.connection() as conn:
                result = spawn(
                    conn,
                    self.slug or "",
                    payload,
                    trigger={
                        "kind": TriggerKind.MANUAL,
                        "caller": actor.name,
                        "request_id": self._request_id,
                    },
                    idempotency_key=manual_key(self.slug or "", self._request_id),
                    actor=actor,
                )
        except ThreadlineError as err:  # refused, paused, a payload the workflow refuses
            self.spawned.object = f'<span class="tl-error">{html.escape(str(err))}</span>'
            return
        self._spawned_at = time.monotonic()
        again = "" if result.created else " (the same run: that was a double click)"
        self.spawned.object = (
            f'<span class="tl-ok" id="tl-spawned">Spawned <a href="{state.run_url(result.run_id)}">'
            f"{result.run_id}</a>{again}</span>"
        )


def schedule_html(item: dict[str, Any] | None) -> str:
    """The schedule in words with its next fire times (from the same code the conductor ticks
    with)."""
    if item is None:
        return "<p>No schedule: runs start when spawned, by an event or a webhook.</p>"
    state_word = "" if item["enabled"] else " <b>(workflow disabled: not firing)</b>"
    upcoming = "".join(f"<li>{html.escape(t)}</li>" for t in item["next_local"]) or "<li>none</li>"
    return (
        f"<p><code>{html.escape(item['schedule'])}</code> · {html.escape(item['description'])}"
        f" · catch up: {html.escape(str(item['catch_up']))}{state_word}</p>"
        f'<p>Next fire times:</p><ul id="tl-next-fires">{upcoming}</ul>'
    )
