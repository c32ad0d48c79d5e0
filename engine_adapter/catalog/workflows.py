"""Workflows are rows: applying a recipe stores it as a new immutable version."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engine_adapter.access import authorization
from engine_adapter.access.authorization import Action
from engine_adapter.catalog import proposals
from engine_adapter.model.errors import CONTRACT_INVALID, Conflict, NotFound, Refused
from engine_adapter.model.identity import Actor
from engine_adapter.model.settings import QUEUE
from engine_adapter.recipes.recipe_text import recipe_diff, shown_text
from engine_adapter.recipes.recipes import Recipe, RecipeError, sub_workflows
from engine_adapter.store import db

# Raised by migration 003's trigger when another workflow holds a webhook path.
_WEBHOOK_PATH_TAKEN = "webhook_triggers_pkey"


class WorkflowNotFound(NotFound):
    contract_exit, envelope_type = CONTRACT_INVALID, "workflow_not_found"


class ProtectedChange(Refused, RecipeError):
    """A direct change to a protected workflow that only a reviewed proposal may make."""


@dataclass(frozen=True)
class Applied:
    slug: str
    version: int
    changed: bool  # False when the recipe's hash and its text equal the current version's


def apply_recipe(
    conn: psycopg.Connection[Any],
    recipe: Recipe,
    source: str = "update",
    rolled_back_from: int | None = None,
    actor: Actor | None = None,
) -> Applied:
    """Create the workflow or add a version; an unchanged recipe writes nothing (but a person's
    allowed apply, audited). The recipe's text is stored with its version, to be shown as written;
    a changed text of the same recipe (a comment, the key order) is a new version with the same
    hash, and a recipe with no text (a document) changes nothing the hash does not. Every door that
    changes a recipe comes here (the CLI's apply and rollback, the console's editor, the API, a
    run request that carries its workflow): a high-risk change to a protected workflow is
    refused (ProtectedChange, nothing written) unless source is "proposal", which only
    proposals.apply passes, for a proposal someone other than its authors approved.

    A new or changed schedule (cron or zone) takes effect now: the database stamps
    `schedule_enabled_at` (migration 002), and a cleared one stops at once. A raised or removed
    max_concurrent_runs admits queued runs in the same transaction. A webhook path another
    workflow holds raises RecipeError, and nothing is written."""
    try:
        return _apply(conn, recipe, source, rolled_back_from, actor)
    except psycopg.errors.UniqueViolation as err:
        if err.diag.constraint_name != _WEBHOOK_PATH_TAKEN:
            raise
        raise RecipeError([err.diag.message_primary or str(err)]) from None


def _apply(
    conn: psycopg.Connection[Any],
    recipe: Recipe,
    source: str,
    rolled_back_from: int | None,
    actor: Actor | None,
) -> Applied:
    doc = recipe.to_dict()
    text = recipe.text  # the text this recipe was parsed from, where there is one
    row = dict(
        slug=recipe.slug,
        name=recipe.name,
        description=recipe.description,
        bot=recipe.bot,
        recipe=doc,
        schedule=recipe.schedule,
        timezone=recipe.timezone,
        hash=recipe.canonical_hash,
        source=source,
        rolled_back_from=rolled_back_from,
        source_text=text,
    )
    with authorization.transaction(conn, actor, Action.APPLY_RECIPE, workflow=recipe.slug):
        _refuse_secret_clashes(conn, recipe)
        _refuse_workflow_cycles(conn, recipe)
        current = db.fetch_one(conn, "lock_workflow", dict(slug=recipe.slug))
        if current is not None and (
            current["hash"] == recipe.canonical_hash
            and same_text(get_version(conn, recipe.slug, current["version"])["source_text"], text)
        ):
            return Applied(recipe.slug, current["version"], changed=False)
        if current is not None and source != "proposal":
            if why := proposals.refuse_direct(current["recipe"], doc):
                raise ProtectedChange([why])
        # The workflow's row and the version's snapshot, together (migration 047): a new
        # workflow's version is 1, whatever source was asked.
        version = db.fetch_row(conn, "store_workflow_version", dict(row=Jsonb(row)))["version"]
        if current is not None and _more_room(current["recipe"], recipe):
            db.fetch_one(conn, "admit_queued", dict(queue=QUEUE, workflow=recipe.slug))
    return Applied(recipe.slug, version, changed=True)


def _refuse_secret_clashes(conn: psycopg.Connection[Any], recipe: Recipe) -> None:
    """A variable is either a webhook's secret or passed to steps, across all workflows."""
    secrets = [w.secret.removeprefix("env:") for w in recipe.webhooks if w.secret]
    clashes = db.fetch_all(
        conn, "secret_clashes", dict(slug=recipe.slug, env=list(recipe.env), secrets=secrets)
    )
    if clashes:
        raise RecipeError(
            [
                f"env: {c['name']} is a webhook secret of workflow {c['other']!r}, and a webhook's "
                "secret is never passed to a step"
                if c["held_as"] == "secret"
                else f"webhooks: {c['name']} is passed to the steps of workflow {c['other']!r} "
                "(its env), so it cannot be a webhook's secret"
                for c in clashes
            ]
        )


def _more_room(old: dict[str, Any], new: Recipe) -> bool:
    """Whether the new version raises or removes the old one's max_concurrent_runs."""
    before = old.get("max_concurrent_runs")
    after = new.max_concurrent_runs
    return before is not None and (after is None or after > before)


def set_enabled(
    conn: psycopg.Connection[Any], slug: str, enabled: bool, actor: Actor | None = None
) -> None:
    """Disable (or enable again) a workflow: no schedule slot, event or webhook starts a run while
    it is disabled. The database records when its schedule takes effect again (migration 002),
    so enabling never catches up the slots missed while disabled."""
    target = dict(workflow=slug, detail={"enabled": enabled})
    with authorization.transaction(conn, actor, Action.ENABLE_WORKFLOW, **target):
        found = db.fetch_one(conn, "set_workflow_enabled", dict(slug=slug, enabled=enabled))
    if found is None:
        raise WorkflowNotFound(f"no workflow {slug!r} (see `threadline recipe list`)")


def get_workflow(conn: psycopg.Connection[Any], slug: str) -> dict[str, Any]:
    row = db.fetch_one(conn, "get_workflow", dict(slug=slug))
    if row is None:
        raise WorkflowNotFound(f"no workflow {slug!r} (see `threadline recipe list`)")
    return row


def list_workflows(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return db.fetch_all(conn, "list_workflows")


def list_versions(conn: psycopg.Connection[Any], slug: str) -> list[dict[str, Any]]:
    return db.fetch_all(conn, "list_workflow_versions", dict(slug=slug))


def get_version(conn: psycopg.Connection[Any], slug: str, version: int) -> dict[str, Any]:
    row = db.fetch_one(conn, "workflow_version", dict(slug=slug, version=version))
    if row is None:
        raise WorkflowNotFound(f"workflow {slug!r} has no version {version}")
    return row


def same_text(kept: str | None, given: str | None) -> bool:
    """Whether a recipe's text, given again, says nothing new beside the kept one: none given
    (a document), or the same lines but for whitespace at their ends and blank lines around."""
    if given is None:
        return True
    return kept is not None and _lines(kept) == _lines(given)


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def version_text(row: dict[str, Any]) -> str:
    """A stored version as shown: its text as written, else its recipe rendered."""
    return shown_text(row["recipe"], row["source_text"])


def written_text(conn: psycopg.Connection[Any], slug: str, version: int) -> str:
    """Version `version` of slug as its author wrote it (rendered where no text was kept)."""
    return version_text(get_version(conn, slug, version))


def _refuse_workflow_cycles(conn: psycopg.Connection[Any], recipe: Recipe) -> None:
    """A sub-workflow step may not lead back to its own workflow, through any number of stored
    workflows (with this recipe in place of its stored version): such a run would never end."""
    stored: dict[str, list[tuple[str, str]]] = {recipe.slug: sub_workflows(recipe.to_dict())}

    def calls(slug: str) -> list[str]:
        if slug not in stored:
            row = db.fetch_one(conn, "get_workflow", dict(slug=slug))
            stored[slug] = sub_workflows(row["recipe"]) if row else []
        return [callee for _, callee in stored[slug]]

    errors = []
    for path, callee in stored[recipe.slug]:
        chain = _path_back(callee, recipe.slug, calls, [recipe.slug, callee])
        if chain:
            errors.append(
                f"{path}: {callee!r} leads back to {recipe.slug!r} ({' -> '.join(chain)}); "
                "sub-workflows may not form a cycle"
            )
    if errors:
        raise RecipeError(errors)


def _path_back(slug: str, target: str, calls: Any, chain: list[str]) -> list[str] | None:
    """The chain of sub-workflow calls from slug to target, if there is one (depth first)."""
    if slug == target:
        return chain
    for callee in calls(slug):
        if callee in chain[1:]:
            continue  # a cycle elsewhere, not through target: its own apply refused it
        found = _path_back(callee, target, calls, [*chain, callee])
        if found:
            return found
    return None


# -- history ---------------------------------------------------------------------------------------
class VersionNotFound(NotFound):
    """A version reference that names no version, or more than one."""


class AlreadyCurrent(Conflict):
    """A rollback to the recipe the workflow has now: nothing to do, nothing written."""


def resolve_version(conn: psycopg.Connection[Any], slug: str, ref: str) -> dict[str, Any]:
    """A version of slug by number ("3") or by its canonical hash, whole or a prefix of at least
    6 hex digits ("sha256:" optional)."""
    get_workflow(conn, slug)  # WorkflowNotFound first
    text = ref.strip()
    if text.isdigit():
        return get_version(conn, slug, int(text))
    prefix = text.removeprefix("sha256:").lower()
    if len(prefix) < 6 or any(c not in "0123456789abcdef" for c in prefix):
        raise VersionNotFound(
            f"{ref!r}: name a version by its number or by 6 or more hex digits of its hash"
        )
    found = db.fetch_all(conn, "versions_by_hash", dict(slug=slug, prefix=prefix))
    versions = sorted({row["version"] for row in found})
    if not versions:
        raise VersionNotFound(f"workflow {slug!r} has no version with hash {ref}")
    # Equal hashes are equal recipes: a rollback repeats an earlier hash. The latest stands.
    if len({row["hash"] for row in found}) > 1:
        raise VersionNotFound(
            f"hash prefix {ref} is ambiguous in workflow {slug!r}: versions "
            f"{', '.join(map(str, versions))}; give more digits"
        )
    return get_version(conn, slug, versions[-1])


def diff_versions(conn: psycopg.Connection[Any], slug: str, a: str, b: str) -> str:
    va, vb = resolve_version(conn, slug, a), resolve_version(conn, slug, b)
    return recipe_diff(
        version_text(va),
        version_text(vb),
        f"{slug} version {va['version']}",
        f"{slug} version {vb['version']}",
    )


def rollback(
    conn: psycopg.Connection[Any], slug: str, ref: str, actor: Actor | None = None
) -> Applied:
    """A new version equal to an earlier one, recording which; the current one named is refused
    (nothing to do). Runs already spawned keep their snapshot."""
    about = dict(workflow=slug, detail={"to": ref})
    with authorization.transaction(conn, actor, Action.ROLLBACK, **about):
        target = resolve_version(conn, slug, ref)
        current = get_workflow(conn, slug)
        now = get_version(conn, slug, current["version"])
        if target["hash"] == current["hash"] and same_text(
            now["source_text"], target["source_text"]
        ):
            raise AlreadyCurrent(
                f"workflow {slug!r} is at version {target['version']}'s recipe already "
                f"(version {current['version']}); nothing to roll back"
            )
        restored = Recipe.from_dict(target["recipe"], f"{slug} version {target['version']}")
        return apply_recipe(
            conn,
            replace(restored, text=target["source_text"]),
            source="rollback",
            rolled_back_from=target["version"],
        )
