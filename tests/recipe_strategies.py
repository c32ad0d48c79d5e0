"""Hypothesis strategies for recipe-shaped input: valid recipes mutated with nasty values, YAML
and JSON token soup, and raw unicode (NUL and lone surrogates included). Shared by the unit fuzz
tests and the integration test that applies what validates."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "recipes"
VALID = [yaml.safe_load(p.read_text()) for p in sorted(ASSETS.glob("*.yaml"))] + [
    {
        "slug": "fuzz-base",
        "schedule": "0 7 * * *",
        "timezone": "Europe/Berlin",
        "max_concurrent_runs": 2,
        "env": ["TOKEN"],
        "payload_schema": {
            "type": "object",
            "properties": {"target": {"type": "string", "pattern": "^[^-]"}},
        },
        "webhooks": [{"path": "fuzz/base", "map": {"pr": "$.pull_request.number"}}],
        "steps": [
            {
                "id": "a",
                "run_command": "pytest -q {{payload.target}}",
                "timeout": "10m",
                "retries": 2,
            },
            {"id": "b", "sleep": "1h"},
            {"id": "c", "human_gate": "ok {{steps.a.output}}?", "timeout": "1d"},
            {"id": "d", "sleep_until": "2026-01-01T00:00:00Z"},
            {"id": "e", "dispatch_task": "summarise {{steps.a.output}}"},
        ],
    }
]

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
NASTY_TEXT = st.one_of(
    st.text(max_size=30),
    st.text(st.one_of(st.characters(codec=None, exclude_categories=()), SURROGATES), max_size=10),
    st.text(SURROGATES, min_size=1, max_size=3),
    st.sampled_from(
        [
            "\0",
            "a\0b",
            "America",
            "Etc",
            "../../etc/passwd",
            "zone.tab",
            "A" * 300,
            "366d",
            "367d",
            "100000000000000000000d",
            "0.0001s",
            "1e999",
            "-1s",
            "99" * 40,
            "9999-12-31T23:59:59-12:00",
            "3000-01-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "echo '{{payload.x}}'",
            'echo "{{payload.x}}"',
            "cat <<'E'\n{{payload.x}}\nE",
            "echo $(( {{payload.x}} ))",
            "{{",
            "}}",
            "{{payload.}}",
            "{{steps.zz.output}}",
            "* * * * *",
            "61 * * * *",
            "$.a[99999999999]",
            "env:X",
            "([",
        ]
    ),
)
NASTY_SCALAR = st.one_of(
    NASTY_TEXT,
    st.integers(),
    st.sampled_from([2**31, 2**63, 10**30, -1, 0, 10**4000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.dates(),
    st.datetimes(timezones=st.sampled_from([None, UTC])),
)
NASTY = st.recursive(
    NASTY_SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(NASTY_TEXT, st.integers(), st.booleans(), st.none()), inner, max_size=4
        ),
    ),
    max_leaves=12,
)


@st.composite
def mutated_recipes(draw: st.DrawFn) -> Any:
    """A valid recipe with a few of its values replaced, removed or added to."""
    doc = json.loads(json.dumps(draw(st.sampled_from(VALID))))
    for _ in range(draw(st.integers(1, 3))):
        parent, key = _pick(draw, doc)
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "replace":
            parent[key] = draw(NASTY)
        elif action == "delete" and isinstance(parent, dict):
            parent.pop(key, None)
        elif isinstance(parent, dict):
            parent[draw(st.one_of(NASTY_TEXT, st.sampled_from(["payload_schema", "timeout"])))] = (
                draw(NASTY)
            )
    return doc


@st.composite
def retexted_recipes(draw: st.DrawFn) -> Any:
    """A valid recipe with some of its strings replaced by any text (often still valid)."""
    doc = json.loads(json.dumps(draw(st.sampled_from(VALID))))
    for _ in range(draw(st.integers(1, 3))):
        parent, key = _pick(draw, doc)
        if isinstance(parent[key], str) and key not in ("slug", "id"):
            parent[key] = draw(st.one_of(st.text(max_size=40), NASTY_TEXT))
    return doc


def _pick(draw: st.DrawFn, doc: Any) -> tuple[Any, Any]:
    """A (container, key) somewhere in doc, walking down at random."""
    parent: Any = doc
    key: Any = draw(st.sampled_from(list(doc))) if isinstance(doc, dict) and doc else "slug"
    while True:
        child = parent.get(key) if isinstance(parent, dict) else parent[key]
        if not isinstance(child, (dict, list)) or not child or draw(st.booleans()):
            return parent, key
        parent = child
        key = (
            draw(st.sampled_from(list(child)))
            if isinstance(child, dict)
            else draw(st.integers(0, len(child) - 1))
        )


def as_text(doc: Any, form: str) -> str:
    """A document as JSON (non-finite numbers as Infinity / NaN) or YAML text, best effort."""
    if form == "json":
        return json.dumps(doc, default=_plain, ensure_ascii=False)
    try:
        return yaml.safe_dump(doc, allow_unicode=True)
    except (yaml.YAMLError, UnicodeError, TypeError, ValueError):
        return json.dumps(doc, default=_plain)


def _plain(value: Any) -> Any:
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    raise TypeError(type(value).__name__)


TOKENS = [
    "slug: x\n",
    "steps:\n",
    "  - id: a\n",
    "    run_command: ",
    "    sleep: ",
    "{{payload.x}}",
    "'",
    '"',
    "&a ",
    "*a",
    "[",
    "]",
    "{",
    "}",
    ", ",
    ": ",
    "- ",
    "\n",
    "  ",
    "\t",
    "!!binary ",
    "!!set ",
    "!!python/object:os.system ",
    "!!int ",
    ".inf",
    ".nan",
    "1e999",
    "9" * 50,
    "<<: ",
    "<<EOF\n",
    "EOF\n",
    "$(",
    ")",
    "`",
    "\\",
    "#",
    "\0",
    "\ud800",
    "\ufeff",
    "%YAML 1.1\n",
    "---\n",
    "...\n",
    "? ",
    "|\n",
    ">\n",
    "timezone: ",
    "America",
    "max_concurrent_runs: ",
    "2147483648",
    "payload_schema: ",
    "webhooks: ",
    "&b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n",
    '{"slug": "x", ',
    '"steps": [',
    '{"id": "a", "sleep": ',
    "\\ud800",
    "\\u0000",
]
TOKEN_SOUP = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)
RECIPE_TEXT = st.one_of(
    st.builds(as_text, mutated_recipes(), st.sampled_from(["json", "yaml"])),
    st.builds(as_text, retexted_recipes(), st.sampled_from(["json", "yaml"])),
    TOKEN_SOUP,
    st.text(max_size=200),
    st.text(st.one_of(st.characters(codec=None, exclude_categories=()), SURROGATES), max_size=100),
)
