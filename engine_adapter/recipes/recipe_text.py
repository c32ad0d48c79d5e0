"""A stored recipe as a person reads it: the text its author wrote where it was kept, else YAML in
the order a recipe is written (the database keeps a document's keys sorted); and the unified diff
of two recipes. The console, the CLI, versions and proposals all show recipes through here."""

from __future__ import annotations

import difflib
from typing import Any

import yaml

from engine_adapter.recipes.recipes import KINDS, TOP_KEYS


class _RecipeDumper(yaml.SafeDumper):
    """Multi-line texts as literal blocks, as a person would write them."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(value), style=style)


_RecipeDumper.add_representer(str, _text)
_RecipeDumper.add_multi_representer(str, _text)  # a vocabulary's member (a StrEnum) is its text


def recipe_yaml(recipe: dict[str, Any]) -> str:
    def ordered(d: dict[str, Any], first: tuple[str, ...]) -> dict[str, Any]:
        return {k: d[k] for k in (*first, *sorted(set(d) - set(first))) if k in d}

    doc = ordered(recipe, TOP_KEYS)
    if isinstance(doc.get("steps"), list):
        doc["steps"] = [ordered(step, ("id", *KINDS)) for step in doc["steps"]]
    return yaml.dump(doc, Dumper=_RecipeDumper, sort_keys=False, allow_unicode=True, width=100)


def shown_text(recipe: dict[str, Any], text: str | None) -> str:
    """A stored recipe as shown: the text it was written as (comments, key order, `24h` kept),
    or, where none was kept (applied as a document, or before texts were), rendered."""
    return recipe_yaml(recipe) if text is None else text


def recipe_diff(
    old: dict[str, Any] | str, new: dict[str, Any] | str, old_label: str, new_label: str
) -> str:
    """A unified diff of two recipes, each a text as shown or a document (rendered); "" when they
    read the same."""
    lines = difflib.unified_diff(
        _shown(old).splitlines(),
        _shown(new).splitlines(),
        old_label,
        new_label,
        lineterm="",
    )
    return "\n".join(lines)


def _shown(recipe: dict[str, Any] | str) -> str:
    return recipe if isinstance(recipe, str) else recipe_yaml(recipe)
