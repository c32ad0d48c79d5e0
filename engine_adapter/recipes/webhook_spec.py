"""A recipe's `webhooks:` triggers: validation with path-naming errors, and a body mapped to a
payload.

Pure Python, no database. Each trigger serves POST /hooks/<path>. A secret is named, never written
down: `secret: env:NAME` reads it from the ingress's environment, so no secret sits in the database
or in `threadline recipe show`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from engine_adapter.model.errors import Invalid
from engine_adapter.model.recipe_values import EVENT_NAME, quote

KEYS = ("path", "secret", "map", "event", "key")
MAX_PATH = 200
_PATH = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*")
_SECRET = re.compile(r"env:([A-Za-z_][A-Za-z0-9_]*)")
_FIELD = re.compile(r"[A-Za-z0-9_-]+")  # usable as {{payload.<field>}}
# An index has at most 9 digits: a longer one would find nothing, and not fit an int cheaply.
_EXPR = re.compile(r"\$(?:\.[A-Za-z0-9_-]+|\[\d{1,9}\])*")
_SEGMENT = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d{1,9})\]")


class MappingError(Invalid):
    """A mapped field's expression finds nothing in the body."""


@dataclass(frozen=True)
class Webhook:
    path: str
    secret: str | None = None  # "env:NAME"
    map: tuple[tuple[str, str], ...] = ()  # (payload field, "$.a.b"); empty: the whole body
    # Instead of starting a run: deliver this outside event (ending `wait_for_event` steps), its
    # correlation key read from the body at `key` ("$.sha").
    event: str | None = None
    key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path}
        if self.secret is not None:
            d["secret"] = self.secret
        if self.map:
            d["map"] = dict(self.map)
        if self.event is not None:
            d["event"] = self.event
        if self.key is not None:
            d["key"] = self.key
        return d


def secret_env(secret: str) -> str:
    """The environment variable a `env:NAME` secret names."""
    match = _SECRET.fullmatch(secret)
    if match is None:
        raise ValueError(f"{quote(secret)} is not env:NAME")
    return match.group(1)


def parse_webhooks(raw: Any, errors: list[str]) -> tuple[Webhook, ...]:
    """Validate a recipe's `webhooks` list; problems go to errors as "webhooks[i].key: ..."."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        errors.append(f"webhooks: {quote(raw)[:60]} must be a list of webhook triggers")
        return ()
    hooks: list[Webhook] = []
    seen: dict[str, int] = {}
    for i, d in enumerate(raw):
        where = f"webhooks[{i}]"
        if not isinstance(d, dict):
            errors.append(f"{where}: must be a mapping with a path, got {quote(d)[:60]}")
            continue
        n_before = len(errors)
        errors += [
            f"{where}.{k}: unknown field (allowed: {', '.join(KEYS)})" for k in d if k not in KEYS
        ]
        path = d.get("path")
        if path is None:
            errors.append(f"{where}.path: required")
        elif not isinstance(path, str) or len(path) > MAX_PATH or not _PATH.fullmatch(path):
            errors.append(
                f'{where}.path: {quote(path)} must be like "github" or "ci/push": '
                f"letters, digits, _ . - in segments joined by /, no leading /, "
                f"at most {MAX_PATH} characters (served at POST /hooks/<path>)"
            )
        elif path in seen:
            errors.append(f"{where}.path: {quote(path)} is used by webhooks[{seen[path]}] too")
        else:
            seen[path] = i
        secret = d.get("secret")
        if secret is not None and (not isinstance(secret, str) or not _SECRET.fullmatch(secret)):
            # A literal is not echoed: it may be the secret itself.
            named = isinstance(secret, str) and secret.startswith("env:")
            got = quote(secret) if named else "a literal"
            errors.append(
                f"{where}.secret: must be env:NAME, naming the environment variable of "
                f"`threadline hooks` that holds the secret (secrets are not stored in "
                f"recipes), got {got}"
            )
        mapping = d.get("map")
        pairs: list[tuple[str, str]] = []
        if mapping is not None and (not isinstance(mapping, dict) or not mapping):
            errors.append(
                f"{where}.map: must be a mapping of payload field to an expression "
                f"like $.pull_request.number"
            )
        elif mapping:
            for field, expr in mapping.items():
                if not isinstance(field, str) or not _FIELD.fullmatch(field):
                    errors.append(f"{where}.map: field {quote(field)} must match [A-Za-z0-9_-]+")
                elif not isinstance(expr, str) or not _EXPR.fullmatch(expr.strip()):
                    errors.append(
                        f"{where}.map.{field}: {quote(expr)} must be an expression like "
                        f"$, $.a.b or $.items[0].name"
                    )
                else:
                    pairs.append((field, expr.strip()))
        event, key = d.get("event"), d.get("key")
        if event is not None and (not isinstance(event, str) or not EVENT_NAME.fullmatch(event)):
            errors.append(
                f"{where}.event: {quote(event)} must be an event name matching {EVENT_NAME.pattern}"
            )
        if key is not None:
            if event is None:
                errors.append(f"{where}.key: only applies with event")
            elif not isinstance(key, str) or not _EXPR.fullmatch(key.strip()):
                errors.append(f"{where}.key: {quote(key)} must be an expression like $.sha")
            else:
                key = key.strip()
        if len(errors) == n_before and isinstance(path, str):  # a bad path said so above
            hooks.append(Webhook(path=path, secret=secret, map=tuple(pairs), event=event, key=key))
    return tuple(hooks)


def resolve(body: Any, expr: str) -> Any:
    """The value at "$.a.b[0]" in body; MappingError naming the first step that finds nothing."""
    value, walked = body, "$"
    for key, index in _SEGMENT.findall(expr):
        if key:
            if not isinstance(value, dict) or key not in value:
                raise MappingError(f"{walked} has no key {quote(key)}")
            value, walked = value[key], f"{walked}.{key}"
        else:
            n = int(index)
            if not isinstance(value, list) or n >= len(value):
                raise MappingError(f"{walked} has no item [{n}]")
            value, walked = value[n], f"{walked}[{n}]"
    return value


def map_payload(body: Any, mapping: dict[str, str] | None) -> dict[str, Any]:
    """The run's payload: the body itself (which must be an object), or the mapped fields."""
    if not mapping:
        if not isinstance(body, dict):
            raise MappingError(f"the body must be a JSON object, got {type(body).__name__}")
        return body
    payload = {}
    for field, expr in mapping.items():
        try:
            payload[field] = resolve(body, expr)
        except MappingError as err:
            raise MappingError(f"map.{field}: {expr} finds nothing ({err})") from None
    return payload
