"""Recipes: a workflow's steps as YAML or JSON, validated up front with every problem reported.

Pure Python, no database. `load_recipe_text` / `load_recipe_file` turn a document into a frozen
`Recipe`; `Recipe.to_dict()` is the canonical form (defaults filled in) that runs snapshot and
that `canonical_hash` is computed from.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from engine_adapter.model import domain
from engine_adapter.model.recipe_values import (
    EVENT_NAME,
    MAX_DURATION,
    MAX_DURATION_S,
    RETENTION_KEYS,
    RecipeError,
    format_duration,
    parse_duration,
    retention_seconds,
)

# short: nearly every message here quotes a value
from engine_adapter.model.recipe_values import quote as _q
from engine_adapter.model.vocab import StepKind
from engine_adapter.recipes import cron, expressions, payload_schema, recipe_doc, shell_context
from engine_adapter.recipes.notify_spec import NotifyRule, parse_notify
from engine_adapter.recipes.webhook_spec import Webhook, parse_webhooks
from engine_adapter.sandbox import step_limits, workdirs

KINDS = domain.KINDS
TOP_KEYS = (
    "slug",
    "name",
    "description",
    "bot",
    "schedule",
    "timezone",
    "catch_up",
    "on_event",
    "max_concurrent_runs",
    "workdir",
    "network",
    "limits",
    "env",
    "payload_schema",
    "steps",
    "outputs",
    "webhooks",
    "notify",
    "allow_proposals",
    "protected",
    "timeout",
    "max_steps",
    "retention",
)
MAX_STEPS = 100_000
MAX_RETRIES = 10
MAX_CONCURRENT_RUNS = 10_000
DEFAULT_CATCH_UP = "latest"

_SLUG = re.compile(r"[a-z0-9-]{1,64}")
_NAME = re.compile(r"[a-z0-9_-]+")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Never passed to a step, whatever `env` says: Threadline's own settings, and libpq's (PGPASSWORD,
# PGSERVICEFILE, ...), which reach the database.
RESERVED_ENV_PREFIXES = ("THREADLINE_", "PG")


def is_reserved_env(name: str) -> bool:
    return name.upper().startswith(RESERVED_ENV_PREFIXES)


# No braces inside: a scan from each "{{" stops at the next brace, so matching stays linear.
PLACEHOLDER = re.compile(r"\{\{([^{}]*)\}\}")
_PAYLOAD_REF = re.compile(r"payload(?:\.[A-Za-z0-9_-]+)+")
_STEP_REF = re.compile(r"steps\.([a-z0-9_-]+)\.(?:output|status|exit_code|reason)")
_OUTPUTS_REF = re.compile(r"outputs(?:\.[A-Za-z0-9_-]+)+")
_PATH_REF = re.compile(r"[a-z]+(?:\.[A-Za-z0-9_-]+)*")


def find_placeholders(text: str) -> list[str]:
    """The dotted paths inside `{{ ... }}` in text, in order, whitespace stripped."""
    return [m.group(1).strip() for m in PLACEHOLDER.finditer(text)]


def check_wake(wake: datetime, now: datetime | None = None) -> str | None:
    """Why a sleep_until time cannot be slept until (none: it can); a past one wakes at once."""
    now = now or datetime.now(UTC)
    try:
        ahead = wake - now
    except (OverflowError, TypeError) as err:
        return f"{_q(wake.isoformat())} cannot be compared with now ({err})"
    if ahead > timedelta(seconds=MAX_DURATION_S):
        return (
            f"{_q(wake.isoformat())} is more than {MAX_DURATION} ahead, the longest a step "
            f"may sleep"
        )
    return None


def _check_command(text: str, path: str, errors: list[str]) -> None:
    """Placeholders where a variable reference cannot stand, or where bash would take its value
    as a name, arithmetic or code (shell_context.py; render.render_command checks again)."""
    matches = list(PLACEHOLDER.finditer(text))
    for match, place in zip(
        matches, shell_context.placements(text, [m.span() for m in matches]), strict=True
    ):
        if place.refusal:
            errors.append(f"{path}: {{{{{match.group(1).strip()}}}}} {place.refusal}")


def _check_placeholders(
    text: str, path: str, earlier: set[str] | None, errors: list[str], in_loop: bool = False
) -> None:
    for ref in find_placeholders(text):
        m = _STEP_REF.fullmatch(ref)
        root = ref.split(".", 1)[0]
        if m:
            if earlier is not None and m.group(1) not in earlier:
                errors.append(f"{path}: {{{{{ref}}}}} refers to no earlier step")
        elif root in expressions.LOOP_ROOTS and _PATH_REF.fullmatch(ref):
            if not in_loop:
                errors.append(f"{path}: {{{{{ref}}}}} exists only inside a foreach or repeat")
        elif not (_PAYLOAD_REF.fullmatch(ref) or _OUTPUTS_REF.fullmatch(ref)):
            errors.append(
                f"{path}: {{{{{ref}}}}} is not a known placeholder "
                "(use {{payload.<key>}}, {{steps.<id>.output}}, {{outputs.<name>}}, or {{item}} "
                "inside a foreach)"
            )
    if "{{" in PLACEHOLDER.sub("", text):
        errors.append(f'{path}: has an unclosed "{{{{"')


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _choice(
    d: dict, key: str, where: str, options: tuple[str, ...], default: str | None, errors: list[str]
) -> str | None:
    """d[key] (or default, also for an explicit null) if it is one of options; `where` is the
    key's path for errors."""
    value = default if d.get(key) is None else d[key]
    if value is not None and value not in options:
        errors.append(f"{where}: {_q(value)} must be one of {', '.join(options)}")
    return value


@dataclass(frozen=True)
class Step:
    """One step of a recipe, or a block of steps.

    `text` is the command, instruction, duration, timestamp, question, event name, sub-workflow
    slug or foreach list expression; `blocks` holds a block's step lists by name (`then`/`else`,
    each parallel branch, a loop's body)."""

    id: str
    kind: str
    text: str
    timeout_s: float | None = None
    retries: int = 0
    on_failure: str | None = None
    accept: str | None = None
    from_: str | None = None
    approvers: tuple[str, ...] = ()
    self_approval: bool = False  # a gate the run's initiator may decide (refused by default)
    on_timeout: str | None = None
    condition: str | None = None  # `if`: run the step (or take `then`) only when it holds
    output_name: str | None = None  # `output`: later steps read it as outputs.<name>
    blocks: tuple[tuple[str, tuple[Step, ...]], ...] = ()
    completion: str | None = None  # parallel: all | any
    max_parallel: int | None = None
    max_items: int | None = None
    max_iterations: int | None = None
    until: str | None = None
    events: tuple[str, ...] = ()  # wait_for_event: the names, any of which ends the wait
    key: str | None = None  # wait_for_event: the correlation key (may hold placeholders)
    payload: dict[str, Any] | None = None  # workflow: the child's payload (values may hold {{…}})
    tools: tuple[str, ...] = ()  # dispatch_task: the tools an agent bot may call (finish aside)
    workflows: tuple[str, ...] = ()  # dispatch_task: what its agent's start_workflow may start
    retry_on: tuple[str | int, ...] = ()  # bot steps: which failures retries retry (all: empty)
    backoff: tuple[float, float] | None = None  # bot steps: first wait and cap, seconds
    limits: dict[str, str | int] | None = None  # bot steps: over the recipe's (step_limits.py)

    def block(self, name: str) -> tuple[Step, ...]:
        return dict(self.blocks).get(name, ())

    def walk(self) -> Iterator[Step]:
        """This step and every step nested in it, depth first in recipe order."""
        yield self
        for _, steps in self.blocks:
            for step in steps:
                yield from step.walk()

    def to_dict(self) -> dict[str, Any]:
        """Canonical form: only the keys this kind allows, defaults filled, None omitted."""
        d: dict[str, Any] = {"id": self.id}
        if self.condition is not None:
            d["if"] = self.condition
        if self.kind == domain.CONDITIONAL:
            for name, steps in self.blocks:
                d[name] = [s.to_dict() for s in steps]
        elif self.kind == domain.PARALLEL:
            # A list, not a mapping: JSON objects keep no key order in the database, and the
            # branches' order is the join order.
            d["parallel"] = [
                {"branch": name, "steps": [s.to_dict() for s in steps]}
                for name, steps in self.blocks
            ]
            d.update(completion=self.completion, max_parallel=self.max_parallel)
        elif self.kind == domain.FOREACH:
            d.update(foreach=self.text, steps=[s.to_dict() for s in self.block("steps")])
            d.update(max_items=self.max_items, max_parallel=self.max_parallel)
        elif self.kind == domain.REPEAT:
            d["repeat"] = [s.to_dict() for s in self.block("repeat")]
            d.update(until=self.until, max_iterations=self.max_iterations)
        elif self.kind == domain.WAIT_FOR_EVENT:
            d[self.kind] = self.text if len(self.events) == 1 else list(self.events)
            d["key"] = self.key
        elif self.kind == domain.WORKFLOW:
            d.update(workflow=self.text, payload=self.payload)
        else:
            d[self.kind] = self.text
        if self.timeout_s is not None:
            d["timeout"] = format_duration(self.timeout_s)
        if self.kind in domain.BOT_KINDS:
            d["retries"] = self.retries
        if self.kind in (*domain.BOT_KINDS, domain.PARALLEL, domain.FOREACH, domain.WORKFLOW):
            d["on_failure"] = self.on_failure
        if self.kind in (domain.HUMAN_GATE, domain.WAIT_FOR_EVENT):
            d["on_timeout"] = self.on_timeout
        if self.kind == domain.HUMAN_GATE:
            d["accept"] = self.accept
            if self.from_ is not None:
                d["from"] = self.from_
            if self.approvers:
                d["approvers"] = list(self.approvers)
            if self.self_approval:
                d["self_approval"] = True
        if self.output_name is not None:
            d["output"] = self.output_name
        if self.tools:  # omitted when none, so recipes without tools keep their hashes
            d["tools"] = list(self.tools)
        if self.workflows:
            d["workflows"] = list(self.workflows)
        if self.retry_on:  # omitted when unset, so older recipes keep their hashes
            d["retry_on"] = list(self.retry_on)
        if self.backoff is not None:
            d["backoff"] = {
                "initial": format_duration(self.backoff[0]),
                "max": format_duration(self.backoff[1]),
            }
        d["limits"] = self.limits
        return {k: v for k, v in d.items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        """Rebuild (and re-validate) a step from its canonical dict, e.g. a run's JSON snapshot."""
        tree = _Tree()
        # References were checked when the recipe was applied; a snapshot's step may sit in a
        # loop (or a branch's run, whose loop is its parent's), so loop names are allowed here.
        step = _parse_step(d, "step", None, True, tree)
        if tree.errors or step is None:
            raise RecipeError(tree.errors)
        return step


def branches_of(step: dict[str, Any]) -> list[tuple[Any, Any]]:
    """A parallel step's (branch name, steps) in order: written as a mapping in a recipe, stored
    as a list of {branch, steps} (the canonical form). Empty when it is neither."""
    raw = step.get("parallel")
    if isinstance(raw, dict):
        return list(raw.items())
    if isinstance(raw, list) and all(
        isinstance(b, dict) and set(b) == {"branch", "steps"} for b in raw
    ):
        return [(b["branch"], b["steps"]) for b in raw]
    return []


def step_docs(steps: Any, path: str = "steps") -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, step) of every step of a canonical recipe's step list, nested ones included, in
    recipe order."""
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        here = f"{path}[{i}]"
        yield here, step
        for key in ("then", "else", "steps", "repeat"):
            yield from step_docs(step.get(key), f"{here}.{key}")
        for name, branch in branches_of(step):
            yield from step_docs(branch, f"{here}.parallel.{name}")


def sub_workflows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, slug) of every sub-workflow step of a canonical recipe document."""
    found = []
    for path, step in step_docs(doc.get("steps")):
        if isinstance(step.get("workflow"), str):
            found.append((f"{path}.workflow", step["workflow"]))
        for i, slug in enumerate(step.get("workflows") or []):  # an agent's start_workflow
            if isinstance(slug, str):
                found.append((f"{path}.workflows[{i}]", slug))
    return found


def find_step_doc(doc: dict[str, Any], step_id: str) -> dict[str, Any] | None:
    """A step of a canonical recipe by id (ids are unique across the tree)."""
    return next((s for _, s in step_docs(doc.get("steps")) if s.get("id") == step_id), None)


def walk_steps(steps: Iterable[Step]) -> Iterator[Step]:
    for step in steps:
        yield from step.walk()


@dataclass
class _Tree:
    """What validating one recipe's step tree collects as it goes."""

    errors: list[str] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)  # every step id -> where it is defined
    output_names: dict[str, str] = field(default_factory=dict)  # `output` names -> where


_COMMON_STEP_KEYS = {"id", "if", "output"}
_STEP_KEYS: dict[str, set[str]] = {
    domain.RUN_COMMAND: {"timeout", "retries", "on_failure", "retry_on", "backoff", "limits"},
    domain.DISPATCH_TASK: {
        "timeout",
        "retries",
        "on_failure",
        "tools",
        "workflows",
        "retry_on",
        "backoff",
        "limits",
    },
    domain.SLEEP: set(),
    domain.SLEEP_UNTIL: set(),
    domain.HUMAN_GATE: {
        "timeout",
        "accept",
        "from",
        "approvers",
        "on_timeout",
        "self_approval",
        "not_by_initiator",  # before self_approval: `true` is now the default; `false` refused
    },
    domain.WAIT_FOR_EVENT: {"key", "timeout", "on_timeout"},
    domain.WORKFLOW: {"payload", "on_failure"},
    domain.CONDITIONAL: {"then", "else"},
    domain.PARALLEL: {"completion", "max_parallel", "on_failure"},
    domain.FOREACH: {"steps", "max_items", "max_parallel", "on_failure"},
    domain.REPEAT: {"until", "max_iterations"},
}
_ALL_STEP_KEYS = {*_COMMON_STEP_KEYS, *KINDS, *set().union(*_STEP_KEYS.values())}
MAX_BRANCHES = 100
MAX_PARALLEL = 100
MAX_ITEMS = 10_000
DEFAULT_MAX_ITEMS = 100
MAX_ITERATIONS = 1000


def _bounded_int(
    d: dict, key: str, path: str, low: int, high: int, default: int | None, errors: list[str]
) -> int | None:
    value = d.get(key, default)
    if value is None:
        return None
    if not _is_int(value) or not low <= value <= high:
        errors.append(f"{path}.{key}: {_q(value)} must be an integer from {low} to {high}")
        return None
    return value


def _closest(key: Any, known: Iterable[str]) -> str | None:
    """The known key a misspelt one is close to (run_comand: run_command), if any."""
    close = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.75)
    return close[0] if close else None


def did_you_mean(key: Any, known: Iterable[str]) -> str:
    """ "; did you mean X?" for a misspelt key close to a known one, else ""."""
    close = _closest(key, known)
    return f"; did you mean {close}?" if close else ""


def _unknown(path: str, key: Any, known: Iterable[str]) -> str:
    return f"{path}: unknown field{did_you_mean(key, known)}"


def _step_kind(d: dict, path: str, errors: list[str]) -> str | None:
    kinds = [k for k in domain.KEYED_KINDS if k in d]
    if not kinds and "then" in d:
        return domain.CONDITIONAL
    if len(kinds) != 1:
        found = ", ".join(kinds) or "none"
        if not kinds:  # a misspelt kind (run_comand) is the usual reason
            found += "".join(
                f"; did you mean {close}, not {k}?"
                for k in d
                if k not in _ALL_STEP_KEYS and (close := _closest(k, domain.KEYED_KINDS))
            )
        errors.append(
            f"{path}: needs exactly one of {', '.join(domain.KEYED_KINDS)}, or if/then/else "
            f"(found {found})"
        )
        return None
    return kinds[0]


def _parse_steps(
    raw: Any, path: str, earlier: set[str] | None, in_loop: bool, tree: _Tree
) -> tuple[Step, ...]:
    """A non-empty list of steps; each may refer to the steps before it (and to `earlier`)."""
    if not isinstance(raw, list) or not raw:
        tree.errors.append(f"{path}: must be a non-empty list of steps")
        return ()
    seen = None if earlier is None else set(earlier)
    steps = []
    for i, item in enumerate(raw):
        step = _parse_step(item, f"{path}[{i}]", seen, in_loop, tree)
        if step is not None:
            steps.append(step)
            if seen is not None:
                seen |= {s.id for s in step.walk()}
        elif seen is not None and isinstance(item, dict) and isinstance(item.get("id"), str):
            seen.add(item["id"])  # one error at a time: later references to it are not blamed
    return tuple(steps)


def _check_expression(
    expr: Any, where: str, earlier: set[str] | None, in_loop: bool, errors: list[str]
) -> str | None:
    if isinstance(expr, bool):  # YAML's `true` / `false`
        expr = "true" if expr else "false"
    problems = expressions.check(expr, earlier=earlier, in_loop=in_loop)
    errors.extend(f"{where}: {p}" for p in problems)
    return expr.strip() if not problems else None


def _parse_step(
    d: Any, path: str, earlier: set[str] | None, in_loop: bool, tree: _Tree
) -> Step | None:
    """Validate one step mapping (and what it nests); append problems to tree.errors; None if it
    cannot be built."""
    errors = tree.errors
    if not isinstance(d, dict):
        errors.append(f"{path}: must be a mapping, got {_q(d)}")
        return None
    n_before = len(errors)
    kind = _step_kind(d, path, errors)
    for key in d:
        if key not in _ALL_STEP_KEYS:
            errors.append(_unknown(f"{path}.{key}", key, _ALL_STEP_KEYS))
        elif kind and key not in (*_COMMON_STEP_KEYS, kind) and key not in _STEP_KEYS[kind]:
            where = ", ".join(k for k in KINDS if key in _STEP_KEYS[k])
            errors.append(f"{path}.{key}: not allowed on a {kind} step (only on {where})")

    sid = d.get("id")
    if sid is None:
        errors.append(f"{path}.id: required")
    elif not isinstance(sid, str) or not _NAME.fullmatch(sid):
        errors.append(f"{path}.id: {_q(sid)} must match [a-z0-9_-]+")
    elif sid in tree.ids:
        errors.append(f"{path}.id: {_q(sid)} is used by {tree.ids[sid]} too")
    else:
        tree.ids[sid] = path

    condition = None
    if "if" in d:
        condition = _check_expression(d["if"], f"{path}.if", earlier, in_loop, errors)
    elif kind == domain.CONDITIONAL:
        errors.append(f"{path}.if: required with then/else")
    output_name = d.get("output")
    if output_name is not None:
        if not isinstance(output_name, str) or not _NAME.fullmatch(output_name):
            errors.append(f"{path}.output: {_q(output_name)} must match [a-z0-9_-]+")
            output_name = None
        elif output_name in tree.output_names:
            errors.append(
                f"{path}.output: {_q(output_name)} is named by {tree.output_names[output_name]} too"
            )
        else:
            tree.output_names[output_name] = path

    fields: dict[str, Any] = {}
    text: Any = d.get(kind) if kind else None
    if kind in domain.BLOCK_KINDS:
        text = _parse_block(d, kind, path, earlier, in_loop, tree, fields)
    elif kind == domain.WAIT_FOR_EVENT:
        text = _parse_wait(d, path, earlier, in_loop, errors, fields)
    elif kind == domain.WORKFLOW:
        text = _parse_workflow(d, path, earlier, in_loop, errors, fields)
    else:
        text = _parse_leaf_text(d, kind, text, path, earlier, in_loop, errors)

    timeout_s = None
    if "timeout" in d:
        try:
            timeout_s = parse_duration(d["timeout"])
            if timeout_s <= 0:
                errors.append(f"{path}.timeout: {_q(d['timeout'])} must be positive")
        except ValueError as err:
            errors.append(f"{path}.timeout: {err}")

    if kind in domain.BOT_KINDS:
        fields["retries"] = d.get("retries", 0)
        if not _is_int(fields["retries"]) or not 0 <= fields["retries"] <= MAX_RETRIES:
            errors.append(
                f"{path}.retries: {_q(fields['retries'])} must be an integer from 0 to "
                f"{MAX_RETRIES}"
            )
    if kind in domain.BOT_KINDS:
        _parse_retry_policy(d, path, errors, fields)
        fields["limits"] = step_limits.check_limits(d.get("limits"), f"{path}.limits", errors)
    if kind in (*domain.BOT_KINDS, domain.PARALLEL, domain.FOREACH, domain.WORKFLOW):
        fields["on_failure"] = _choice(
            d, "on_failure", f"{path}.on_failure", ("fail", "continue"), "fail", errors
        )
    if kind == domain.WAIT_FOR_EVENT:
        fields["on_timeout"] = _choice(
            d, "on_timeout", f"{path}.on_timeout", ("fail", "continue"), "fail", errors
        )
    if kind == domain.HUMAN_GATE:
        _parse_gate(d, path, errors, fields)
    if kind == domain.DISPATCH_TASK and "tools" in d:
        fields["tools"] = _parse_tools(d["tools"], f"{path}.tools", errors)
    if kind == domain.DISPATCH_TASK:
        fields["workflows"] = _parse_started(d, fields.get("tools", ()), path, errors)
    if len(errors) > n_before:
        return None
    assert isinstance(sid, str) and kind is not None  # else an error was said above
    return Step(
        id=sid,
        kind=kind,
        text=text,
        timeout_s=timeout_s,
        condition=condition,
        output_name=output_name,
        **fields,
    )


def _parse_leaf_text(
    d: dict,
    kind: str | None,
    text: Any,
    path: str,
    earlier: set[str] | None,
    in_loop: bool,
    errors: list[str],
) -> Any:
    if kind == StepKind.SLEEP:
        try:
            text = format_duration(parse_duration(text))
        except ValueError as err:
            errors.append(f"{path}.sleep: {err}")
    elif kind == StepKind.SLEEP_UNTIL and isinstance(text, (datetime, date)):
        if not isinstance(text, datetime) or text.tzinfo is None:
            errors.append(f"{path}.sleep_until: {_q(text)} has no timezone (add Z or +hh:mm)")
        elif problem := check_wake(text):
            errors.append(f"{path}.sleep_until: {problem}")
        text = text.isoformat()
    elif kind and (not isinstance(text, str) or not text.strip()):
        errors.append(f"{path}.{kind}: must be a non-empty string, got {_q(text)}")
    elif kind == StepKind.SLEEP_UNTIL and not find_placeholders(text):
        try:
            wake = datetime.fromisoformat(text.strip())
            if wake.tzinfo is None:
                errors.append(f"{path}.sleep_until: {_q(text)} has no timezone (add Z or +hh:mm)")
            elif problem := check_wake(wake):
                errors.append(f"{path}.sleep_until: {problem}")
        except ValueError:
            errors.append(
                f"{path}.sleep_until: {_q(text)} is not an ISO-8601 timestamp or a {{placeholder}}"
            )
        text = text.strip()
    if kind and kind != StepKind.SLEEP and isinstance(text, str):
        _check_placeholders(text, f"{path}.{kind}", earlier, errors, in_loop)
    if kind == StepKind.RUN_COMMAND and isinstance(text, str):
        _check_command(text, f"{path}.{kind}", errors)
    return text


def _parse_tools(raw: Any, path: str, errors: list[str]) -> tuple[str, ...]:
    """The tools an agent may call on this step: a list of known names, each once."""
    known = ", ".join(domain.AGENT_TOOLS)
    if not isinstance(raw, list):
        errors.append(f"{path}: {_q(raw)} must be a list of tool names ({known})")
        return ()
    for i, name in enumerate(raw):
        if name not in domain.AGENT_TOOLS:
            errors.append(f"{path}[{i}]: {_q(name)} is not a tool (known: {known})")
        elif raw.index(name) != i:
            errors.append(f"{path}[{i}]: {_q(name)} is listed twice")
    return tuple(raw)


def _parse_retry_policy(d: dict, path: str, errors: list[str], fields: dict[str, Any]) -> None:
    """`retry_on` (exit codes, failure, timeout) and `backoff: {initial, max}` of a bot step."""
    raw = d.get("retry_on")
    if raw is not None:
        known = f"exit codes 1-255, {', '.join(domain.RETRY_CLASSES)}"
        if not isinstance(raw, list) or not raw:
            errors.append(f"{path}.retry_on: {_q(raw)} must be a non-empty list of {known}")
        else:
            for i, item in enumerate(raw):
                ok = item in domain.RETRY_CLASSES or (_is_int(item) and 1 <= item <= 255)
                if not ok:
                    errors.append(f"{path}.retry_on[{i}]: {_q(item)} is not one of {known}")
            fields["retry_on"] = tuple(dict.fromkeys(raw))
    raw = d.get("backoff")
    if raw is None:
        return
    if not isinstance(raw, dict) or set(raw) - {"initial", "max"}:
        errors.append(f"{path}.backoff: {_q(raw)} must be a mapping with initial and max")
        return
    try:
        initial = parse_duration(raw.get("initial", domain.DEFAULT_BACKOFF_S))
        cap = parse_duration(raw.get("max", domain.DEFAULT_MAX_BACKOFF_S))
    except ValueError as err:
        errors.append(f"{path}.backoff: {err}")
        return
    if not 0 < initial <= cap:
        errors.append(f"{path}.backoff: initial must be positive and at most max")
        return
    fields["backoff"] = (initial, cap)


def _parse_started(
    d: dict, tools: tuple[str, ...], path: str, errors: list[str]
) -> tuple[str, ...]:
    """The workflows an agent's start_workflow may start: needed exactly when it has the tool."""
    raw = d.get("workflows")
    if raw is None:
        if domain.START_WORKFLOW in tools:
            errors.append(f"{path}.workflows: the start_workflow tool needs a list of workflows")
        return ()
    if domain.START_WORKFLOW not in tools:
        errors.append(f"{path}.workflows: only applies with the start_workflow tool")
        return ()
    if not isinstance(raw, list) or not raw:
        errors.append(f"{path}.workflows: {_q(raw)} must be a non-empty list of workflow slugs")
        return ()
    for i, slug in enumerate(raw):
        if not isinstance(slug, str) or not _SLUG.fullmatch(slug):
            errors.append(f"{path}.workflows[{i}]: {_q(slug)} must be a workflow slug ([a-z0-9-]+)")
        elif raw.index(slug) != i:
            errors.append(f"{path}.workflows[{i}]: {_q(slug)} is listed twice")
    return tuple(raw)


def _parse_gate(d: dict, path: str, errors: list[str], fields: dict[str, Any]) -> None:
    accept = _choice(d, "accept", f"{path}.accept", ("decision", "any_reply"), "decision", errors)
    fields["accept"] = accept
    fields["on_timeout"] = _choice(
        d, "on_timeout", f"{path}.on_timeout", ("deny", "approve"), "deny", errors
    )
    from_ = d.get("from")
    if from_ is not None and (not isinstance(from_, str) or not from_.strip()):
        errors.append(f"{path}.from: {_q(from_)} must be a non-empty string")
    elif from_ is not None and accept != "any_reply":
        errors.append(f"{path}.from: only applies with accept: any_reply")
    fields["from_"] = from_
    raw = d.get("approvers", [])
    if not isinstance(raw, list) or not all(isinstance(a, str) and a.strip() for a in raw):
        errors.append(f"{path}.approvers: {_q(raw)} must be a list of names")
    else:
        fields["approvers"] = tuple(raw)
    self_approval = d.get("self_approval", False)
    if not isinstance(self_approval, bool):
        errors.append(f"{path}.self_approval: {_q(self_approval)} must be true or false")
    fields["self_approval"] = self_approval is True
    # The old opt-in: a gate refuses its run's initiator by default now, so `true` says what
    # every gate does (kept so older recipes still load); anything else is refused.
    if "not_by_initiator" in d and (d["not_by_initiator"] is not True or self_approval is True):
        errors.append(
            f"{path}.not_by_initiator: {_q(d['not_by_initiator'])}: no longer an option; a "
            "gate refuses the run's initiator by default, and `self_approval: true` lets them "
            "decide it"
        )


def _parse_block(
    d: dict,
    kind: str,
    path: str,
    earlier: set[str] | None,
    in_loop: bool,
    tree: _Tree,
    fields: dict[str, Any],
) -> str:
    """The step lists of a block; returns its text (a foreach's list expression, else "")."""
    errors = tree.errors
    text: str | None = ""  # None: a foreach list expression with problems (said in errors)
    if kind == domain.CONDITIONAL:
        # Only one of then/else runs, so both may name the same output.
        before = dict(tree.output_names)
        blocks = [("then", _parse_steps(d.get("then"), f"{path}.then", earlier, in_loop, tree))]
        if "else" in d:
            named_by_then, tree.output_names = tree.output_names, before
            blocks.append(("else", _parse_steps(d["else"], f"{path}.else", earlier, in_loop, tree)))
            tree.output_names = {**named_by_then, **tree.output_names}
    elif kind == domain.PARALLEL:
        blocks = []
        pairs = branches_of(d)
        if not pairs:
            errors.append(f"{path}.parallel: must map branch names to step lists")
        elif len(pairs) > MAX_BRANCHES:
            errors.append(f"{path}.parallel: {len(pairs)} branches; at most {MAX_BRANCHES}")
        elif len({name for name, _ in pairs}) < len(pairs):
            errors.append(f"{path}.parallel: names a branch twice")
        else:
            for name, steps in pairs:
                if not isinstance(name, str) or not _NAME.fullmatch(name):
                    errors.append(f"{path}.parallel: branch name {_q(name)} must match [a-z0-9_-]+")
                    continue
                # A branch sees the steps before the group, never its sibling branches' steps.
                where = f"{path}.parallel.{name}"
                blocks.append((name, _parse_steps(steps, where, earlier, in_loop, tree)))
        fields["completion"] = _choice(
            d, "completion", f"{path}.completion", ("all", "any"), "all", errors
        )
        fields["max_parallel"] = _bounded_int(
            d, "max_parallel", path, 1, MAX_PARALLEL, None, errors
        )
        if fields["completion"] == "any" and fields["max_parallel"] is not None:
            errors.append(
                f"{path}.max_parallel: only with completion: all (an any group starts "
                "every branch at once, so the first to finish can win)"
            )
    elif kind == domain.FOREACH:
        text = _check_expression(d.get("foreach"), f"{path}.foreach", earlier, in_loop, errors)
        blocks = [("steps", _parse_steps(d.get("steps"), f"{path}.steps", earlier, True, tree))]
        fields["max_items"] = _bounded_int(
            d, "max_items", path, 1, MAX_ITEMS, DEFAULT_MAX_ITEMS, errors
        )
        fields["max_parallel"] = _bounded_int(d, "max_parallel", path, 1, MAX_PARALLEL, 1, errors)
    else:  # repeat
        body = _parse_steps(d.get("repeat"), f"{path}.repeat", earlier, True, tree)
        blocks = [("repeat", body)]
        inside = None if earlier is None else earlier | {s.id for s in walk_steps(body)}
        if "until" not in d:
            errors.append(f"{path}.until: required (the condition that ends the loop)")
        else:
            fields["until"] = _check_expression(d["until"], f"{path}.until", inside, True, errors)
        if "max_iterations" not in d:
            errors.append(f"{path}.max_iterations: required (a loop must be bounded)")
        fields["max_iterations"] = _bounded_int(
            d, "max_iterations", path, 1, MAX_ITERATIONS, None, errors
        )
    fields["blocks"] = tuple(blocks)
    return text or ""


def _parse_wait(
    d: dict,
    path: str,
    earlier: set[str] | None,
    in_loop: bool,
    errors: list[str],
    fields: dict[str, Any],
) -> str:
    raw = d.get(domain.WAIT_FOR_EVENT)
    names: list[Any] = raw if isinstance(raw, list) else [raw]
    if not names or not all(isinstance(n, str) and EVENT_NAME.fullmatch(n) for n in names):
        errors.append(
            f"{path}.wait_for_event: {_q(raw)} must be an event name or a list of them, each "
            f"matching {EVENT_NAME.pattern}"
        )
        return ""
    if len(set(names)) != len(names):
        errors.append(f"{path}.wait_for_event: lists an event twice")
    fields["events"] = tuple(names)
    key = d.get("key")
    if key is not None:
        if not isinstance(key, str) or not key.strip():
            errors.append(f"{path}.key: {_q(key)} must be a non-empty string")
        else:
            _check_placeholders(key, f"{path}.key", earlier, errors, in_loop)
            fields["key"] = key
    return names[0]


def _parse_workflow(
    d: dict,
    path: str,
    earlier: set[str] | None,
    in_loop: bool,
    errors: list[str],
    fields: dict[str, Any],
) -> str:
    slug = d.get(domain.WORKFLOW)
    if not isinstance(slug, str) or not _SLUG.fullmatch(slug):
        errors.append(f"{path}.workflow: {_q(slug)} must be a workflow slug ([a-z0-9-]+)")
        slug = ""
    payload = d.get("payload")
    if payload is not None:
        if not isinstance(payload, dict):
            errors.append(f"{path}.payload: {_q(payload)} must be a mapping")
        else:
            for k, v in payload.items():
                if isinstance(v, str):
                    _check_placeholders(v, f"{path}.payload.{k}", earlier, errors, in_loop)
            fields["payload"] = payload
    return slug


@dataclass(frozen=True)
class Recipe:
    """A validated workflow definition."""

    slug: str
    name: str
    description: str | None = None
    bot: str = "shell"
    schedule: str | None = None
    timezone: str = "UTC"
    catch_up: str | None = None  # latest (default with a schedule) | all | none
    on_event: str | None = None
    max_concurrent_runs: int | None = None
    workdir: str | None = None
    network: bool = True  # false: steps run with no network at all (needs bubblewrap)
    limits: dict[str, str | int] | None = None  # every bot step's (step_limits.py)
    env: tuple[str, ...] = ()
    payload_schema: dict[str, Any] | None = None  # JSON Schema every payload must satisfy
    steps: tuple[Step, ...] = ()
    outputs: dict[str, str] | None = None  # the run's outputs: name -> expression, at its end
    webhooks: tuple[Webhook, ...] = ()  # POST /hooks/<path> triggers (webhook_spec.py)
    notify: tuple[NotifyRule, ...] = ()  # who hears of gates and failures (notify_spec.py)
    allow_proposals: bool = False  # changes may be proposed (proposals.py), never made directly
    protected: bool = False  # a high-risk change only through a reviewed proposal (proposals.py)
    timeout_s: float | None = None  # a run still going after this is cancelled (the conductor)
    max_steps: int | None = None  # a run that would start more step tries is cancelled
    retention: dict[str, str] | None = None  # runs / output: how long finished runs keep them
    # The text it was parsed from (None for a document), set only together with what it parses
    # to: stored beside the recipe to be shown as written; no part of its equality or hash.
    text: str | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The canonical normalized document: defaults filled in, None (and empty env) omitted.

        catch_up is left out at its default (latest; the database reads a missing one so): a
        recipe stored before catch_up existed keeps its hash; re-applied, it is no new version."""
        d = {
            k: getattr(self, k)
            for k in TOP_KEYS
            if k not in ("env", "steps", "outputs", "webhooks", "notify", "timeout")
        }
        if d["catch_up"] == DEFAULT_CATCH_UP:
            d["catch_up"] = None
        d["network"] = None if self.network else False  # the default keeps older hashes
        d["allow_proposals"] = self.allow_proposals or None
        d["protected"] = self.protected or None  # omitted unless set: older hashes hold
        d["timeout"] = None if self.timeout_s is None else format_duration(self.timeout_s)
        d["env"] = list(self.env) or None
        d["webhooks"] = [w.to_dict() for w in self.webhooks] or None
        d["notify"] = [n.to_dict() for n in self.notify] or None
        d["steps"] = [s.to_dict() for s in self.steps]
        d["outputs"] = self.outputs or None
        return {k: v for k, v in d.items() if v is not None}

    @property
    def canonical_hash(self) -> str:
        """sha256 of the canonical JSON: equal for documents that differ only in form."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    @classmethod
    def from_dict(cls, d: Any, source: str = "<recipe>") -> Recipe:
        """Validate a parsed document (or a canonical dict) and build the Recipe."""
        return _build_recipe(d, source)


def _parse_outputs(raw: Any, step_ids: set[str], errors: list[str]) -> dict[str, str] | None:
    """A run's declared outputs: name -> expression over the finished run's steps and payload."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not raw:
        errors.append(f"outputs: {_q(raw)} must map output names to expressions")
        return None
    out = {}
    for name, expr in raw.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            errors.append(f"outputs: name {_q(name)} must match [a-z0-9_-]+")
            continue
        problems = expressions.check(expr, earlier=step_ids, in_loop=False)
        errors.extend(f"outputs.{name}: {p}" for p in problems)
        if not problems:
            out[name] = expr.strip()
    return out


def _opt_str(d: dict, key: str, errors: list[str]) -> str | None:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        errors.append(f"{key}: {_q(value)} must be a string")
        return None
    return value


def _build_recipe(d: Any, source: str) -> Recipe:
    problems = recipe_doc.check_document(d)
    if problems:  # nothing below may meet such a value
        raise RecipeError(problems, source)
    if not isinstance(d, dict):
        raise RecipeError(
            [f"{source}: top level must be a mapping of fields, got {_q(d)[:60]}"], source
        )
    errors: list[str] = [_unknown(str(k), k, TOP_KEYS) for k in d if k not in TOP_KEYS]

    slug = d.get("slug")
    if slug is None:
        errors.append("slug: required")
    elif not isinstance(slug, str) or not _SLUG.fullmatch(slug):
        errors.append(f"slug: {_q(slug)} must match [a-z0-9-]+ (1 to 64 characters)")
    name = _opt_str(d, "name", errors) or slug
    description = _opt_str(d, "description", errors)
    bot = d.get("bot", "shell")
    if not isinstance(bot, str) or not _NAME.fullmatch(bot):
        errors.append(f"bot: {_q(bot)} must match [a-z0-9_-]+")

    schedule = _opt_str(d, "schedule", errors)
    if schedule is not None:
        try:
            schedule = cron.check_expr(schedule)
        except cron.CronError as err:
            errors.append(f"schedule: {err}")
    timezone = d.get("timezone", "UTC")
    try:
        cron.zone(timezone)
    except cron.CronError as err:
        errors.append(f"timezone: {err}")
    catch_up = _choice(
        d,
        "catch_up",
        "catch_up",
        ("latest", "all", "none"),
        DEFAULT_CATCH_UP if schedule is not None else None,
        errors,
    )
    if catch_up is not None and schedule is None:
        errors.append("catch_up: only applies with a schedule")
    on_event = d.get("on_event")
    if on_event is not None and (
        not isinstance(on_event, str) or not EVENT_NAME.fullmatch(on_event)
    ):
        errors.append(
            f"on_event: {_q(on_event)} must be an event name matching {EVENT_NAME.pattern}"
        )
    mcr = d.get("max_concurrent_runs")
    if mcr is not None and (not _is_int(mcr) or not 1 <= mcr <= MAX_CONCURRENT_RUNS):
        errors.append(
            f"max_concurrent_runs: {_q(mcr)} must be an integer from 1 to {MAX_CONCURRENT_RUNS}"
        )
    network = d.get("network", True)
    if not isinstance(network, bool):
        errors.append(f"network: {_q(network)} must be true (the default) or false (no network)")
    limits = step_limits.check_limits(d.get("limits"), "limits", errors)
    run_timeout = None
    if "timeout" in d:
        try:
            run_timeout = parse_duration(d["timeout"])
        except ValueError as err:
            errors.append(f"timeout: {err}")
    max_steps = d.get("max_steps")
    if max_steps is not None and (not _is_int(max_steps) or not 1 <= max_steps <= MAX_STEPS):
        errors.append(f"max_steps: {_q(max_steps)} must be an integer from 1 to {MAX_STEPS}")
    retention = _parse_retention(d.get("retention"), errors)
    allow_proposals = d.get("allow_proposals", False)
    if not isinstance(allow_proposals, bool):
        errors.append(f"allow_proposals: {_q(allow_proposals)} must be true or false (default)")
    protected = d.get("protected", False)
    if not isinstance(protected, bool):
        errors.append(f"protected: {_q(protected)} must be true or false (default)")
    elif protected and allow_proposals is not True:
        errors.append(
            "protected: true needs allow_proposals: true (a protected workflow's high-risk "
            "changes are made only through reviewed proposals)"
        )
    workdir = _opt_str(d, "workdir", errors)
    if workdir is not None and (problem := workdirs.declared_problem(workdir)):
        errors.append(f"workdir: {_q(workdir)} {problem}")

    env = d.get("env", [])
    if not isinstance(env, list):
        errors.append(f"env: {_q(env)} must be a list of variable names")
        env = []
    for i, var in enumerate(env):
        if not isinstance(var, str) or not _ENV.fullmatch(var):
            errors.append(f"env[{i}]: {_q(var)} must match [A-Za-z_][A-Za-z0-9_]*")
        elif var in env[:i]:
            errors.append(f"env[{i}]: {_q(var)} is listed twice")
        elif is_reserved_env(var):
            errors.append(
                f"env[{i}]: {_q(var)} is never passed to a step: THREADLINE_* and PG* "
                "variables hold Threadline's own settings and database logins"
            )

    schema = None
    if "payload_schema" in d:
        schema = payload_schema.check_schema(d["payload_schema"], errors)
    if schema is not None and schedule is not None:
        for problem in payload_schema.payload_problems(schema, {}):
            errors.append(f"payload_schema: a scheduled run's payload is {{}}, and {problem}")

    tree = _Tree(errors=errors)
    steps: tuple[Step, ...] = ()
    if d.get("steps") is None:
        errors.append("steps: required")
    else:
        steps = _parse_steps(d["steps"], "steps", set(), False, tree)
    outputs = _parse_outputs(d.get("outputs"), {s.id for s in walk_steps(steps)}, errors)

    webhooks = parse_webhooks(d.get("webhooks"), errors)
    notify = parse_notify(d.get("notify"), errors)
    secrets = {w.secret.removeprefix("env:") for w in webhooks if w.secret}
    for i, var in enumerate(env):
        if isinstance(var, str) and var in secrets:
            errors.append(
                f"env[{i}]: {_q(var)} holds a webhook's secret (webhooks[].secret), "
                "which is never passed to a step"
            )
    if errors:
        raise RecipeError(errors, source)
    assert isinstance(slug, str) and isinstance(name, str)  # else an error was said above
    return Recipe(
        slug=slug,
        name=name,
        description=description,
        bot=bot,
        schedule=schedule,
        timezone=timezone,
        catch_up=catch_up,
        on_event=on_event,
        max_concurrent_runs=mcr,
        workdir=workdir,
        network=network,
        limits=limits,
        env=tuple(env),
        payload_schema=schema,
        steps=steps,
        outputs=outputs,
        webhooks=webhooks,
        notify=notify,
        allow_proposals=allow_proposals,
        protected=protected is True,
        timeout_s=run_timeout,
        max_steps=max_steps,
        retention=retention,
    )


def _parse_retention(raw: Any, errors: list[str]) -> dict[str, str] | None:
    """`retention: {runs: 180d, output: 30d}`: how long this workflow's finished runs are kept,
    and their streamed command output (retention.py; each defaults to the global setting)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not raw or set(raw) - set(RETENTION_KEYS):
        errors.append(f"retention: {_q(raw)} must be a mapping with runs and/or output durations")
        return None
    seconds = {}
    for key in RETENTION_KEYS:
        if key in raw:
            try:
                seconds[key] = retention_seconds(raw[key])
            except ValueError as err:
                errors.append(f"retention.{key}: {err}")
    if seconds.get("output", 0) > seconds.get("runs", float("inf")):
        errors.append("retention.output: must not be longer than retention.runs")
    return {key: format_duration(value) for key, value in seconds.items()} or None


def load_recipe_text(text: str, source: str = "<recipe>") -> Recipe:
    """Parse YAML or JSON text and validate it; raises RecipeError listing every problem."""
    try:
        doc = recipe_doc.parse_text(text)
    except recipe_doc.DocumentError as err:
        raise RecipeError([f"{source}: {err}"], source) from None
    return replace(_build_recipe(doc, source), text=text)


def load_recipe_file(path: str | Path) -> Recipe:
    """Load and validate a recipe file (.yaml, .yml or .json)."""
    p = Path(path)
    try:
        with p.open(encoding="utf-8") as f:
            text = f.read(recipe_doc.MAX_CHARS + 1)  # a longer one is refused, unread
    except (OSError, UnicodeDecodeError) as exc:
        why = f"{exc.__class__.__name__}: {getattr(exc, 'strerror', None) or exc}"
        raise RecipeError([f"{p}: cannot read recipe ({why})"], str(p)) from None
    return load_recipe_text(text, source=str(p))
