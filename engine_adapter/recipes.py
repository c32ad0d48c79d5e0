"""Recipes: a workflow's steps as YAML or JSON, validated up front with every problem reported.

Pure Python, no database. `load_recipe_text` / `load_recipe_file` turn a document into a frozen
`Recipe`; `Recipe.to_dict()` is the canonical form (defaults filled in) that runs snapshot and
that `canonical_hash` is computed from.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import cron, payload_schema, recipe_doc, shell_context

if TYPE_CHECKING:
    from .webhook_spec import Webhook

KINDS = ("run_command", "dispatch_task", "sleep", "sleep_until", "human_gate")
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
    "env",
    "payload_schema",
    "steps",
    "webhooks",
)
_STEP_KEYS = {
    "run_command": {"timeout", "retries", "on_failure"},
    "dispatch_task": {"timeout", "retries", "on_failure"},
    "sleep": set(),
    "sleep_until": set(),
    "human_gate": {"timeout", "accept", "from", "approvers", "on_timeout", "not_by_initiator"},
}
_ALL_STEP_KEYS = {"id", *KINDS, *set().union(*_STEP_KEYS.values())}
MAX_RETRIES = 10
MAX_CONCURRENT_RUNS = 10_000
# Every duration (a sleep, a step or gate timeout, how far ahead a sleep_until lies): a year and
# a day covers any real schedule, and keeps every deadline far inside what clocks can hold.
MAX_DURATION_S = 366 * 86_400.0
MAX_DURATION = "366 days"
_MAX_DURATION_TEXT = 64
DEFAULT_CATCH_UP = "latest"

_SLUG = re.compile(r"[a-z0-9-]{1,64}")
_NAME = re.compile(r"[a-z0-9_-]+")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Never passed to a step, whatever `env` says: Threadline's own settings, and libpq's (PGPASSWORD,
# PGSERVICEFILE, ...), which reach the database.
RESERVED_ENV_PREFIXES = ("THREADLINE_", "PG")


def is_reserved_env(name: str) -> bool:
    return name.upper().startswith(RESERVED_ENV_PREFIXES)


EVENT_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,200}")  # `on_event` and `threadline emit NAME`
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# No braces inside: a scan from each "{{" stops at the next brace, so matching stays linear.
PLACEHOLDER = re.compile(r"\{\{([^{}]*)\}\}")
_PAYLOAD_REF = re.compile(r"payload(?:\.[A-Za-z0-9_-]+)+")
_STEP_REF = re.compile(r"steps\.([a-z0-9_-]+)\.output")


class RecipeError(ValueError):
    """A recipe is invalid; `errors` holds every problem as "<path>: <problem>"."""

    def __init__(self, errors: list[str], source: str | None = None) -> None:
        self.errors = list(errors)
        self.source = source
        super().__init__("\n".join(self.errors))

    def __reduce__(self) -> tuple[Any, ...]:  # across processes (the console's bounded check)
        return (RecipeError, (self.errors, self.source))


def _q(value: Any) -> str:
    """Quote a value for an error message: strings in double quotes, others as JSON; cut short."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def parse_duration(text: str | float) -> float:
    """ "30s", "10m", "2h", "1d", "1h30m", "500ms" or bare seconds ("90", 90) -> seconds, whole
    milliseconds, at most MAX_DURATION_S; ValueError saying which rule the text breaks."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        # A huge int would not fit a float; NaN is no duration.
        seconds = -1.0 if math.isnan(text) else float(min(text, MAX_DURATION_S + 1))
    else:
        s = text.strip() if isinstance(text, str) else ""
        parts = _DURATION_PART.findall(s) if len(s) <= _MAX_DURATION_TEXT else []
        if re.fullmatch(r"\d{1,20}", s):
            seconds = float(s)
        elif not s or "".join(n + u for n, u in parts) != s:
            raise ValueError(f"{_q(text)} is not a duration")
        else:
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not 0 <= seconds:
        raise ValueError(f"{_q(text)} is not a duration")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"{_q(text)} is longer than {MAX_DURATION}, the longest a duration may be")
    return round(seconds * 1000) / 1000


def format_duration(seconds: float) -> str:
    """Canonical duration string, the inverse of parse_duration: 5400 -> "1h30m", 0.5 -> "500ms"."""
    ms = round(seconds * 1000)
    out = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if ms >= size:
            out.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(out) or "0s"


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
    """Placeholders where a variable reference cannot stand (render.render_command)."""
    matches = list(PLACEHOLDER.finditer(text))
    for match, context in zip(matches, shell_context.contexts(text, [m.span() for m in matches])):
        if context in shell_context.REFUSED:
            errors.append(
                f"{path}: {{{{{match.group(1).strip()}}}}} {shell_context.REFUSED[context]}"
            )


def _check_placeholders(text: str, path: str, earlier: set[str] | None, errors: list[str]) -> None:
    for ref in find_placeholders(text):
        m = _STEP_REF.fullmatch(ref)
        if m:
            if earlier is not None and m.group(1) not in earlier:
                errors.append(f"{path}: {{{{{ref}}}}} refers to no earlier step")
        elif not _PAYLOAD_REF.fullmatch(ref):
            errors.append(
                f"{path}: {{{{{ref}}}}} is not a known placeholder "
                "(use {{payload.<key>}} or {{steps.<id>.output}})"
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
    """One step of a recipe; `text` is the command, instruction, duration, timestamp or question."""

    id: str
    kind: str
    text: str
    timeout_s: float | None = None
    retries: int = 0
    on_failure: str | None = None
    accept: str | None = None
    from_: str | None = None
    approvers: tuple[str, ...] = ()
    not_by_initiator: bool = False  # a gate the run's initiator may not decide
    on_timeout: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Canonical form: only the keys this kind allows, defaults filled, None omitted."""
        d: dict[str, Any] = {"id": self.id, self.kind: self.text}
        if self.timeout_s is not None:
            d["timeout"] = format_duration(self.timeout_s)
        if self.kind in ("run_command", "dispatch_task"):
            d["retries"] = self.retries
            d["on_failure"] = self.on_failure
        if self.kind == "human_gate":
            d.update(accept=self.accept, on_timeout=self.on_timeout)
            if self.from_ is not None:
                d["from"] = self.from_
            if self.approvers:
                d["approvers"] = list(self.approvers)
            if self.not_by_initiator:
                d["not_by_initiator"] = True
        return {k: v for k, v in d.items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        """Rebuild (and re-validate) a step from its canonical dict, e.g. a run's JSON snapshot."""
        errors: list[str] = []
        step = _parse_step(d, "step", None, errors)
        if errors or step is None:
            raise RecipeError(errors)
        return step


def _parse_step(d: Any, path: str, earlier: set[str] | None, errors: list[str]) -> Step | None:
    """Validate one step mapping; append problems to errors; None if it cannot be built."""
    if not isinstance(d, dict):
        errors.append(f"{path}: must be a mapping, got {_q(d)}")
        return None
    n_before = len(errors)
    kinds = [k for k in KINDS if k in d]
    if len(kinds) != 1:
        found = ", ".join(kinds) or "none"
        errors.append(f"{path}: needs exactly one of {', '.join(KINDS)} (found {found})")
    kind = kinds[0] if len(kinds) == 1 else None
    for key in d:
        if key not in _ALL_STEP_KEYS:
            errors.append(f"{path}.{key}: unknown field")
        elif kind and key not in ("id", *KINDS) and key not in _STEP_KEYS[kind]:
            where = ", ".join(k for k in KINDS if key in _STEP_KEYS[k])
            errors.append(f"{path}.{key}: not allowed on a {kind} step (only on {where})")

    sid = d.get("id")
    if sid is None:
        errors.append(f"{path}.id: required")
    elif not isinstance(sid, str) or not _NAME.fullmatch(sid):
        errors.append(f"{path}.id: {_q(sid)} must match [a-z0-9_-]+")

    text = d.get(kind) if kind else None
    if kind == "sleep":
        try:
            text = format_duration(parse_duration(text))
        except ValueError as err:
            errors.append(f"{path}.sleep: {err}")
    elif kind == "sleep_until" and isinstance(text, (datetime, date)):
        if not isinstance(text, datetime) or text.tzinfo is None:
            errors.append(f"{path}.sleep_until: {_q(text)} has no timezone (add Z or +hh:mm)")
        elif problem := check_wake(text):
            errors.append(f"{path}.sleep_until: {problem}")
        text = text.isoformat()
    elif kind and (not isinstance(text, str) or not text.strip()):
        errors.append(f"{path}.{kind}: must be a non-empty string, got {_q(text)}")
    elif kind == "sleep_until" and not find_placeholders(text):
        try:
            wake = datetime.fromisoformat(text.strip())
            if wake.tzinfo is None:
                errors.append(f"{path}.sleep_until: {_q(text)} has no timezone (add Z or +hh:mm)")
            elif problem := check_wake(wake):
                errors.append(f"{path}.sleep_until: {problem}")
        except ValueError:
            errors.append(
                f"{path}.sleep_until: {_q(text)} is not an ISO-8601 timestamp "
                "or a {{placeholder}}"
            )
        text = text.strip()
    if kind and kind != "sleep" and isinstance(text, str):
        _check_placeholders(text, f"{path}.{kind}", earlier, errors)
    if kind == "run_command" and isinstance(text, str):
        _check_command(text, f"{path}.{kind}", errors)

    timeout_s = None
    if "timeout" in d:
        try:
            timeout_s = parse_duration(d["timeout"])
            if timeout_s <= 0:
                errors.append(f"{path}.timeout: {_q(d['timeout'])} must be positive")
        except ValueError as err:
            errors.append(f"{path}.timeout: {err}")

    retries, on_failure, accept, from_, approvers, on_timeout = 0, None, None, None, (), None
    not_by_initiator = False
    if kind in ("run_command", "dispatch_task"):
        retries = d.get("retries", 0)
        if not _is_int(retries) or not 0 <= retries <= MAX_RETRIES:
            errors.append(
                f"{path}.retries: {_q(retries)} must be an integer from 0 to {MAX_RETRIES}"
            )
        on_failure = _choice(
            d, "on_failure", f"{path}.on_failure", ("fail", "continue"), "fail", errors
        )
    if kind == "human_gate":
        accept = _choice(
            d, "accept", f"{path}.accept", ("decision", "any_reply"), "decision", errors
        )
        on_timeout = _choice(
            d, "on_timeout", f"{path}.on_timeout", ("deny", "approve"), "deny", errors
        )
        from_ = d.get("from")
        if from_ is not None and (not isinstance(from_, str) or not from_.strip()):
            errors.append(f"{path}.from: {_q(from_)} must be a non-empty string")
        elif from_ is not None and accept != "any_reply":
            errors.append(f"{path}.from: only applies with accept: any_reply")
        raw = d.get("approvers", [])
        if not isinstance(raw, list) or not all(isinstance(a, str) and a.strip() for a in raw):
            errors.append(f"{path}.approvers: {_q(raw)} must be a list of names")
        else:
            approvers = tuple(raw)
        not_by_initiator = d.get("not_by_initiator", False)
        if not isinstance(not_by_initiator, bool):
            errors.append(f"{path}.not_by_initiator: {_q(not_by_initiator)} must be true or false")
    if len(errors) > n_before:
        return None
    return Step(
        id=sid,
        kind=kind,
        text=text,
        timeout_s=timeout_s,
        retries=retries,
        on_failure=on_failure,
        accept=accept,
        from_=from_,
        approvers=approvers,
        on_timeout=on_timeout,
        not_by_initiator=not_by_initiator,
    )


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
    env: tuple[str, ...] = ()
    payload_schema: dict[str, Any] | None = None  # JSON Schema every payload must satisfy
    steps: tuple[Step, ...] = ()
    webhooks: tuple[Webhook, ...] = ()  # POST /hooks/<path> triggers (webhook_spec.py)

    def to_dict(self) -> dict[str, Any]:
        """The canonical normalized document: defaults filled in, None (and empty env) omitted.

        catch_up is left out at its default (latest; the database reads a missing one so): a
        recipe stored before catch_up existed keeps its hash; re-applied, it is no new version."""
        d = {k: getattr(self, k) for k in TOP_KEYS if k not in ("env", "steps", "webhooks")}
        if d["catch_up"] == DEFAULT_CATCH_UP:
            d["catch_up"] = None
        d["network"] = None if self.network else False  # the default keeps older hashes
        d["env"] = list(self.env) or None
        d["webhooks"] = [w.to_dict() for w in self.webhooks] or None
        d["steps"] = [s.to_dict() for s in self.steps]
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
    errors: list[str] = [f"{k}: unknown field" for k in d if k not in TOP_KEYS]

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
    workdir = _opt_str(d, "workdir", errors)
    if workdir is not None and not workdir.startswith("/"):
        errors.append(f"workdir: {_q(workdir)} must be an absolute path")

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

    steps: list[Step] = []
    raw_steps = d.get("steps")
    if raw_steps is None:
        errors.append("steps: required")
    elif not isinstance(raw_steps, list) or not raw_steps:
        errors.append("steps: must be a non-empty list of steps")
    else:
        seen: dict[str, int] = {}
        for i, raw in enumerate(raw_steps):
            sid = raw.get("id") if isinstance(raw, dict) else None
            if isinstance(sid, str) and sid in seen:
                errors.append(f"steps[{i}].id: {_q(sid)} is used by steps[{seen[sid]}] too")
            step = _parse_step(raw, f"steps[{i}]", set(seen), errors)
            if isinstance(sid, str):
                seen.setdefault(sid, i)
            if step is not None:
                steps.append(step)

    from .webhook_spec import parse_webhooks  # imports this module: import it late

    webhooks = parse_webhooks(d.get("webhooks"), errors)
    secrets = {w.secret.removeprefix("env:") for w in webhooks if w.secret}
    for i, var in enumerate(env):
        if isinstance(var, str) and var in secrets:
            errors.append(
                f"env[{i}]: {_q(var)} holds a webhook's secret (webhooks[].secret), "
                "which is never passed to a step"
            )
    if errors:
        raise RecipeError(errors, source)
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
        env=tuple(env),
        payload_schema=schema,
        steps=tuple(steps),
        webhooks=webhooks,
    )


def load_recipe_text(text: str, source: str = "<recipe>") -> Recipe:
    """Parse YAML or JSON text and validate it; raises RecipeError listing every problem."""
    try:
        doc = recipe_doc.parse_text(text)
    except recipe_doc.DocumentError as err:
        raise RecipeError([f"{source}: {err}"], source) from None
    return _build_recipe(doc, source)


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
