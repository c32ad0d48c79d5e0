"""The parts of engine_adapter stand on floors: a part imports only parts on lower floors, so the
tree reads bottom-up (model, then the store and the sandbox, ... up to the command line), the
conductor and the bots never import each other, and only the conductor talks to absurd_sdk."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "engine_adapter"
CONSOLE = PACKAGE.parent / "console"

FLOORS = [
    {"model"},
    {"store", "sandbox"},
    {"recipes"},
    {"access"},
    {"catalog"},
    {"runs"},
    {"read"},
    {"conductor", "bots", "ingress", "testing", "explore"},
    {"cli"},
]
FLOOR = {part: i for i, parts in enumerate(FLOORS) for part in parts}


def imports() -> list[tuple[str, str, str]]:
    """(file, its part, the module it imports) for every import in engine_adapter."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        part = rel.parts[0] if len(rel.parts) > 1 else ""
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((str(rel), part, node.module))
            elif isinstance(node, ast.Import):
                found.extend((str(rel), part, alias.name) for alias in node.names)
    return found


def test_every_part_has_a_floor():
    parts = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert parts == set(FLOOR), f"parts and floors differ: {parts ^ set(FLOOR)}"


def test_no_module_sits_outside_a_part():
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules at the top of engine_adapter: {loose}"


def test_parts_import_only_lower_floors():
    upward = []
    for rel, part, module in imports():
        names = module.split(".")
        if names[0] != "engine_adapter" or len(names) < 2 or names[1] == part:
            continue
        if FLOOR[names[1]] >= FLOOR[part]:
            upward.append(f"{rel} ({part}, floor {FLOOR[part]}) imports {module}")
    assert not upward, "imports up or across a floor:\n" + "\n".join(upward)


def test_relative_imports_are_not_used():
    """Absolute imports name the part, so a reader sees the floor an import comes from."""
    relative = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                relative.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not relative, relative


def test_only_the_conductor_imports_the_engine_sdk():
    others = [rel for rel, part, module in imports() if module.startswith("absurd_sdk")]
    assert others and all(rel.startswith("conductor/") for rel in others), others


def test_only_the_command_line_imports_the_console():
    """The console is a client of the engine; `threadline up` and `threadline token` start it."""
    others = [f"{rel}: {mod}" for rel, _, mod in imports() if mod.split(".")[0] == "console"]
    assert all(line.startswith("cli/") for line in others), others


ENGINE_TABLE = re.compile(r"absurd\.[a-z]_threadline")
QUERY_NAME = re.compile(r"^-- (\w+) --$", re.MULTILINE)


def test_absurds_tables_are_read_in_one_file():
    """Absurd is reached through its functions; the reads of its tables it offers no function
    for sit in store/engine_queries.sql, which says why, and nowhere else."""
    product = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*queries.sql"), *CONSOLE.rglob("*.py")]
    readers = sorted(
        str(p.relative_to(PACKAGE.parent)) for p in product if ENGINE_TABLE.search(p.read_text())
    )
    assert readers == ["engine_adapter/store/engine_queries.sql"]


def test_a_parts_queries_are_named_only_from_its_floor_or_above():
    """A part keeps the queries it owns beside its code (<part>/queries.sql): no code below that
    part's floor names one of them (the console, at the top, may name any)."""
    code = {p: p.read_text() for p in PACKAGE.rglob("*.py")}
    wrong = []
    for file in sorted(PACKAGE.glob("*/*queries.sql")):
        home = file.parent.name
        for name in QUERY_NAME.findall(file.read_text()):
            named = re.compile(rf"[\"']{name}[\"']")
            for path, text in code.items():
                part = path.relative_to(PACKAGE).parts[0]
                if named.search(text) and FLOOR[part] < FLOOR[home]:
                    wrong.append(f"{name} ({home}) named in {path.relative_to(PACKAGE)}")
    assert not wrong, wrong
