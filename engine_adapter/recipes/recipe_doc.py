"""A recipe's text to a plain document, with bounds that hold before anything is expanded.

Recipes come from files, the console's editor and API callers, so a document is bounded in
size, nesting and values (YAML aliases counted as expanded, before a value is built from them),
and holds only what JSON and PostgreSQL can store: string keys, no NUL, no lone surrogates,
finite numbers, integers that fit 64 bits.
"""

from __future__ import annotations

import json
import math
import re
from collections import deque
from datetime import date
from typing import Any

import yaml

from engine_adapter.model.errors import Invalid

MAX_CHARS = 256 * 1024
MAX_DEPTH = 64
MAX_VALUES = 20_000  # after YAML aliases are expanded
MAX_INT = 2**63 - 1
MAX_ERRORS = 20
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_$-]+")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class DocumentError(Invalid):
    """The text is no document, or the document breaks a bound; the message names where."""


def parse_text(text: Any) -> Any:
    """YAML or JSON text -> a document (dicts, lists, scalars); DocumentError otherwise."""
    if not isinstance(text, str):
        raise DocumentError(f"a recipe is text, not {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise DocumentError(
            f"the document has {len(text)} characters; a recipe has at most {MAX_CHARS}"
        )
    json_error = None
    if text.lstrip().startswith("{"):  # JSON first: YAML rejects tab-indented JSON
        try:
            return json.loads(text, object_pairs_hook=_json_pairs)
        except json.JSONDecodeError as exc:
            json_error = f"{exc.msg} (line {exc.lineno}, column {exc.colno})"
        except RecursionError:  # the interpreter's own guard, about a thousand levels down
            json_error = f"nested deeper than {MAX_DEPTH} levels"
        except ValueError as exc:  # a duplicate key; an over-long integer
            json_error = str(exc)
    try:
        return yaml.load(text, Loader=BoundedLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise DocumentError(f"not valid YAML/JSON: {json_error or _yaml_message(exc)}") from None
    except Exception as exc:  # whatever the parser raises (an impossible date,
        # an over-long integer from a constructor), the text is no document
        raise DocumentError(f"not valid YAML/JSON: {json_error or _describe(exc)}") from None


def check_document(doc: Any) -> list[str]:
    """Problems of a parsed document as "<path>: <problem>": nesting, size, keys and values."""
    errors: list[str] = []
    todo: deque[tuple[Any, str, int]] = deque([(doc, "", 0)])
    seen = 0
    while todo and len(errors) < MAX_ERRORS:
        value, path, depth = todo.popleft()
        where = (path if len(path) <= 160 else f"{path[:60]}...{path[-97:]}") or "top level"
        seen += 1
        if seen > MAX_VALUES:
            errors.append(f"{where}: the document has more than {MAX_VALUES} values")
            break
        if depth > MAX_DEPTH:
            errors.append(f"{where}: nested deeper than {MAX_DEPTH} levels")
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    errors.append(f"{where}: key {_show(key)} must be a string{_key_hint(key)}")
                elif problem := _string_problem(key):
                    errors.append(f"{where}: key {_show(key)} {problem}")
                else:
                    todo.append((item, _join(path, key), depth + 1))
        elif isinstance(value, list):
            todo.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, str):
            if problem := _string_problem(value):
                errors.append(f"{where}: {problem}")
        elif isinstance(value, bool) or value is None or isinstance(value, date):
            pass
        elif isinstance(value, int):
            if abs(value) > MAX_INT:
                errors.append(f"{where}: the integer is too large (at most {MAX_INT})")
        elif isinstance(value, float):
            if not math.isfinite(value):
                errors.append(f"{where}: {value} is not a finite number")
        else:
            errors.append(
                f"{where}: a {type(value).__name__} value is not allowed "
                f"(only mappings, lists, strings, numbers, booleans and null)"
            )
    return errors


def json_only(doc: Any, path: str) -> list[str]:
    """Where a checked document holds a value JSON has no type for (a YAML date)."""
    errors: list[str] = []
    todo: deque[tuple[Any, str]] = deque([(doc, path)])
    while todo and len(errors) < MAX_ERRORS:
        value, where = todo.popleft()
        if isinstance(value, dict):
            todo.extend((v, _join(where, k)) for k, v in value.items())
        elif isinstance(value, list):
            todo.extend((v, f"{where}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, date):
            errors.append(f"{where}: {value.isoformat()} is a YAML date, not JSON: quote it")
    return errors


def _string_problem(text: str) -> str | None:
    if "\0" in text:
        return "contains a NUL character"
    if _SURROGATE.search(text):
        return "contains a lone surrogate, which is not valid Unicode"
    return None


def _join(path: str, key: str) -> str:
    part = key if _PLAIN_KEY.fullmatch(key) else f"[{json.dumps(key)}]"
    return f"{path}.{part}" if path and not part.startswith("[") else f"{path}{part}"


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)  # ASCII: a key may hold anything
    return text if len(text) <= 80 else text[:77] + "..."


def _key_hint(key: Any) -> str:
    if isinstance(key, bool):
        return ' (YAML reads yes, no, on, off as booleans: quote the key, e.g. "on")'
    return ""


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {json.dumps(key)}")
        out[key] = value
    return out


def _yaml_message(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    msg = f"{context}, {problem}" if context else problem
    return msg + (f" (line {mark.line + 1}, column {mark.column + 1})" if mark else "")


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, nesting deeper than MAX_DEPTH and more than
    MAX_VALUES values counting each alias as the value it repeats (a ~400-byte "billion laughs"
    would expand to billions), all while composing, before any value is built."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._open = 0
        self._total = 0  # values so far, each alias counted as what it repeats
        self._size: dict[int, tuple[int, int]] = {}  # id(node) -> (values, height), expanded

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._size:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"alias *{event.anchor} is inside the value it names",
                    event.start_mark,
                )
            if target is not None:
                self._count(self._size[id(target)][0], event.start_mark)
            return super().compose_node(parent, index)
        self._count(1, self.peek_event().start_mark)
        self._open += 1
        try:
            if self._open > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested deeper than {MAX_DEPTH} levels",
                    self.peek_event().start_mark,
                )
            node = super().compose_node(parent, index)
        finally:
            self._open -= 1
        children = [self._size[id(c)] for c in _children(node)]
        values = 1 + sum(n for n, _ in children)
        height = 1 + max((h for _, h in children), default=0)
        if values > MAX_VALUES or height > MAX_DEPTH:
            what = (
                f"more than {MAX_VALUES} values"
                if values > MAX_VALUES
                else f"nesting deeper than {MAX_DEPTH} levels"
            )
            raise yaml.composer.ComposerError(
                None, None, f"{what} once aliases are expanded", node.start_mark
            )
        self._size[id(node)] = (values, height)
        return node

    def _count(self, values: int, mark: Any) -> None:
        self._total += values
        if self._total > MAX_VALUES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"more than {MAX_VALUES} values (an alias counts as the values it repeats)",
                mark,
            )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _no_duplicates(loader: BoundedLoader, node: yaml.MappingNode) -> dict:
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *defaults`: its keys may be overridden here, that is its point
        key = loader.construct_object(key_node)
        try:
            duplicate = key in seen
        except TypeError:
            continue  # unhashable: construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {_show(key)}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


BoundedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)
