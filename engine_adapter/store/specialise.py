"""Absurd's runtime functions, specialised for Threadline's queue: static SQL, planned once per
connection, in place of the `EXECUTE format(...)` each call plans afresh.

Absurd keeps one set of tables per queue (`t_<queue>`, `r_<queue>`, ...), so each of its
functions builds its statements' text from the queue's name at every call, and Postgres parses
and plans each of them again: that is most of the time a run spends in Absurd's functions
(docs/speed.md). Threadline has one queue. `apply` reads the bundled schema's own definitions of
the functions in RUNTIME and re-creates each of them with its statements written out twice: for
Threadline's queue as static statements (its tables' names in place of `%I`, the `USING` values
in place of `$n`), which PL/pgSQL prepares once per connection, and for any other queue exactly
as Absurd wrote them. A statement this rewrite does not understand stays as Absurd wrote it.

Nothing else changes: the tables, the functions' names, arguments, results, owners, grants and
security settings stay Absurd's (and migration 044's), so the SDK, `absurdctl` and other queues
see the engine they know. tests/integration/test_engine_differential.py runs the same calls on
a specialised queue and a plain one and compares every result and row;
scripts/absurd_sdk_tests.sh runs Absurd's own SDK tests over specialised queues.

Off by default. `threadline db migrate --engine specialised` turns it on (schema.set_engine;
every later migrate keeps it current, also after Absurd re-creates a function), and
`--engine plain` puts Absurd's own text back.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import psycopg

# Absurd's functions a run calls (spawn, claim, checkpoints, events, finish): the hot path.
RUNTIME = tuple(
    """
    spawn_task claim_task complete_run schedule_run fail_run retry_task
    set_task_checkpoint_state extend_claim get_task_checkpoint_state get_task_checkpoint_states
    await_event emit_event cancel_task get_task_result
    """.split()
)

_DEFINITION = re.compile(
    r"^create (?:or replace )?function absurd\.(\w+) \(.*?^\$\$;$", re.DOTALL | re.MULTILINE
)
_TABLE_ARG = re.compile(r"^'([a-z]_)'\s*\|\|\s*p_queue_name$")
_PLACEHOLDER = re.compile(r"%(?:(\d+)\$)?([IsL%])")
_PARAM = re.compile(r"\$(\d+)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SAFE_WORDS = {"coalesce", "true", "false", "null"}
_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
_LOOP = re.compile(r"loop\b", re.IGNORECASE)


class _Unsupported(Exception):
    """A statement this rewrite leaves dynamic."""


def definitions(schema_sql: str) -> dict[str, str]:
    """Each RUNTIME function's `create function` statement, as the bundled schema has it."""
    found = {m.group(1): m.group(0) for m in _DEFINITION.finditer(schema_sql)}
    missing = [name for name in RUNTIME if name not in found]
    if missing:
        raise ValueError(f"the bundled Absurd schema lacks {', '.join(missing)}")
    return {name: found[name] for name in RUNTIME}


def _specialised(definition: str, queues: tuple[str, ...], mark: str = "") -> str:
    """`definition` re-created (`create or replace`) with a static copy of its body for each of
    `queues`, chosen by p_queue_name; any other queue runs the original body."""
    head, body = definition.split("\nas $$\n", 1)
    body = body.removesuffix("$$;")
    declare, statements = _split_body(body)
    branches = []
    for n, queue in enumerate(queues):
        keyword = "if" if n == 0 else "elsif"
        branches.append(f"  {keyword} p_queue_name = {_literal(queue)} then\n")
        branches.append(_static(statements, queue))
    rebuilt = (
        "#variable_conflict use_column\n"  # static SQL's names are columns, as in EXECUTE's
        + (mark + "\n" if mark else "")
        + declare
        + "begin\n"
        + "".join(branches)
        + "  else\n"
        + statements
        + "  end if;\nend;\n"
    )
    head = head.replace("create function", "create or replace function", 1)
    return f"{head}\nas $$\n{rebuilt}$$;"


@cache  # a migrate asks for it and for its mark: the rewrite runs once per process
def script(schema_sql: str, queues: tuple[str, ...]) -> str:
    """Every RUNTIME function specialised for `queues` (empty: as Absurd wrote them)."""
    parts = []
    mark = _mark(schema_sql, queues) if queues else ""
    for definition in definitions(schema_sql).values():
        if queues:
            parts.append(_specialised(definition, queues, mark))
        else:
            parts.append(definition.replace("create function", "create or replace function", 1))
    return "\n\n".join(parts) + "\n"


def apply(conn: psycopg.Connection[Any], schema_sql: str, queues: tuple[str, ...]) -> None:
    """Re-create the RUNTIME functions for `queues` (empty: as Absurd wrote them), keeping what
    `create or replace` would reset: migration 044 made some of them security definer with a
    fixed search_path. Their owner and grants stay as they were."""
    kept = conn.execute(_RUNTIME_FUNCTIONS, (list(RUNTIME),)).fetchall()
    conn.execute(script(schema_sql, queues))
    for row in kept:  # the catalog's own text: a signature and settings it printed itself
        if row["definer"]:
            conn.execute(f"alter function {row['fn']} security definer")
        for setting in row["config"] or []:
            name, value = setting.split("=", 1)
            conn.execute(f"alter function {row['fn']} set {name} = {value}")


def current(conn: psycopg.Connection[Any], schema_sql: str, queues: tuple[str, ...]) -> bool:
    """Whether every RUNTIME function in the database is this rewrite's for `queues` (each
    carries its mark): false after an upgrade of Absurd's or a change to the rewrite."""
    mark = _mark(schema_sql, queues)
    rows = conn.execute(_RUNTIME_FUNCTIONS, (list(RUNTIME),)).fetchall()
    return len(rows) == len(RUNTIME) and all(mark in row["source"] for row in rows)


_RUNTIME_FUNCTIONS = """
select p.oid::regprocedure::text as fn, p.prosecdef as definer, p.proconfig as config,
       p.prosrc as source
  from pg_proc p join pg_namespace n on n.oid = p.pronamespace
 where n.nspname = 'absurd' and p.proname = any(%s)
"""


@cache
def _mark(schema_sql: str, queues: tuple[str, ...]) -> str:
    """A comment naming what a specialised body was made from: the rewrite's output itself."""
    text = "\n".join(_specialised(d, queues) for d in definitions(schema_sql).values())
    return (
        f"-- specialised for {', '.join(queues)}: {hashlib.sha256(text.encode()).hexdigest()[:16]}"
    )


def _split_body(body: str) -> tuple[str, str]:
    """(the declare section, the outer block's statements) of a PL/pgSQL body."""
    begin = re.search(r"^begin$", body, re.MULTILINE)
    end = list(re.finditer(r"^end;$", body, re.MULTILINE))
    if not begin or not end:
        raise ValueError("a function body without a top-level begin ... end;")
    return body[: begin.start()], body[begin.end() + 1 : end[-1].start()]


@dataclass
class _Format:
    end: int  # just after its closing parenthesis
    sql: str  # the statement, its placeholders filled in for one queue


def _static(statements: str, queue: str) -> str:
    """`statements` with each EXECUTE of a format() over the queue's tables made static."""
    out = statements
    # `v_sql := format(...);` then `... execute v_sql using ...`: the text moves to its use.
    for m in list(re.finditer(r"^\s*(v_\w+) := format\(", out, re.MULTILINE))[::-1]:
        try:
            out = _inline_formatted(out, m, queue)
        except _Unsupported:
            continue
    pos = 0
    while True:
        found = re.search(r"\bexecute format\(", out[pos:])
        if found is None:
            return out
        start = pos + found.start()
        try:
            fmt = _parse_format(out, pos + found.end() - len("format("), queue)
            replaced = _statement(out, start, fmt.end - start, fmt.sql)
        except _Unsupported:
            pos = start + 1
            continue
        out = out[:start] + replaced
        pos = start + 1


def _inline_formatted(out: str, m: re.Match[str], queue: str) -> str:
    """`v_x := format(...);` dropped and its statement written where `execute v_x` runs it."""
    fmt = _parse_format(out, m.end() - len("format("), queue)
    semicolon = out.index(";", fmt.end)
    use = re.search(rf"\bexecute {m.group(1)}\b", out[semicolon:])
    if out[fmt.end : semicolon].strip() or use is None:
        raise _Unsupported(f"{m.group(1)} is not executed as it was formatted")
    at = semicolon + use.start()
    return (
        out[: m.start()]
        + out[semicolon + 1 : at]
        + _statement(out, at, use.end() - use.start(), fmt.sql)
    )


def _statement(text: str, start: int, length: int, sql: str) -> str:
    """The rest of `text` from `start`, the `execute ...` of `length` characters there (and its
    INTO and USING clauses) replaced by the static statement `sql`."""
    rest = text[start + length :]
    end = _clause_end(rest)
    clause, tail = rest[:end], rest[end:]
    into, using = _clauses(clause)
    values = _split_args(using) if using else []
    for value in values:
        for word in _WORD.findall(value):
            if word.lower() not in _SAFE_WORDS and not word.startswith(("p_", "v_")):
                raise _Unsupported(f"a USING value {value!r} may name a column")

    def param(m: re.Match[str]) -> str:
        n = int(m.group(1))
        if n > len(values):
            raise _Unsupported(f"${n} without a USING value")
        return f"({values[n - 1].strip()})"

    sql = _PARAM.sub(param, sql)
    before = text[:start].rstrip().lower()
    if into:
        sql = f"{sql}\n  into {into.strip()}"
    elif _main_verb(sql) == "select" and not before.endswith(("return query", " in")):
        # PL/pgSQL runs a query whose rows go nowhere as PERFORM (a lock's `select ... for share`)
        if not re.match(r"\s*select\b", sql, re.IGNORECASE):
            raise _Unsupported("a WITH query whose rows go nowhere")
        sql = re.sub(r"^\s*select\b", "perform", sql, count=1, flags=re.IGNORECASE)
    return sql + " " + tail.lstrip(" ")


def _main_verb(sql: str) -> str:
    """select, insert, update or delete: what a statement is, past a WITH's queries."""
    depth = 0
    for m in re.finditer(r"[()]|'(?:[^']|'')*'|\b(select|insert|update|delete)\b", sql, re.I):
        token = m.group(0)
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth == 0 and m.group(1):
            return m.group(1).lower()
    raise _Unsupported("a statement of no known kind")


def _clause_end(rest: str) -> int:
    """Where an EXECUTE's INTO/USING clauses end: its `;`, or the `loop` of a FOR ... IN."""
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "'":
            raise _Unsupported("a literal in an EXECUTE's clauses")
        elif depth == 0 and ch == ";":
            return i
        elif depth == 0 and _LOOP.match(rest, i) and (i == 0 or not _WORD.match(rest[i - 1])):
            return i
    raise _Unsupported("an EXECUTE without an end")


def _clauses(clause: str) -> tuple[str | None, str | None]:
    """(INTO targets, USING values) of an EXECUTE's clauses, in either order."""
    into = re.search(r"\binto\b(.*?)(?=\busing\b|$)", clause, re.DOTALL | re.IGNORECASE)
    using = re.search(r"\busing\b(.*?)(?=\binto\b|$)", clause, re.DOTALL | re.IGNORECASE)
    if re.search(r"\binto\s+strict\b", clause, re.IGNORECASE):
        raise _Unsupported("INTO STRICT")
    return (into.group(1) if into else None), (using.group(1) if using else None)


def _parse_format(text: str, at: int, queue: str) -> _Format:
    """The format(...) call at `at`: its literal with each %I made the queue's table name."""
    i = at + len("format(")
    while text[i].isspace():
        i += 1
    if text[i] != "'":
        raise _Unsupported("a format string that is not a literal")
    literal, i = _read_literal(text, i)
    depth, j, args_start = 0, i, i
    while True:
        ch = text[j]
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                break
            depth -= 1
        elif ch == "'":
            _, j = _read_literal(text, j)
            continue
        j += 1
    args = [a.strip() for a in _split_args(text[args_start:j]) if a.strip()]
    tables = []
    for arg in args:
        m = _TABLE_ARG.match(arg)
        if m is None:
            raise _Unsupported(f"a format argument {arg!r} that is not a queue table")
        tables.append(_ident(m.group(1) + queue))
    return _Format(j + 1, _fill(literal, tables))


def _fill(literal: str, tables: list[str]) -> str:
    """format()'s placeholders: %I and %n$I take the tables; %% is a percent sign."""
    nxt = 0

    def one(m: re.Match[str]) -> str:
        nonlocal nxt
        position, kind = m.group(1), m.group(2)
        if kind == "%":
            return "%"
        if kind != "I":
            raise _Unsupported(f"a %{kind} placeholder")
        if position:
            nxt = int(position)
            return tables[nxt - 1]
        nxt += 1
        return tables[nxt - 1]

    return _PLACEHOLDER.sub(one, literal)


def _read_literal(text: str, i: int) -> tuple[str, int]:
    """The SQL string literal starting at text[i] (a quote), unescaped; the index after it."""
    assert text[i] == "'"
    out, j = [], i + 1
    while True:
        ch = text[j]
        if ch == "'":
            if j + 1 < len(text) and text[j + 1] == "'":
                out.append("'")
                j += 2
                continue
            return "".join(out), j + 1
        out.append(ch)
        j += 1


def _split_args(text: str) -> list[str]:
    """`text` split at its top-level commas (none inside parentheses or literals)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "'":
            _, i = _read_literal(text, i)
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def _ident(name: str) -> str:
    return name if _IDENT.match(name) else '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
