"""The README stays a short first read and the reference lives in docs/: the docs build with
MkDocs in strict mode (a broken link or anchor fails it), every relative link in the README and
the docs leads to a file (and heading) that exists, and the architecture page's diagram and
table of engine_adapter's parts are what scripts/parts_diagram.py generates from the code now."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)

sys.path.insert(0, str(ROOT / "scripts"))
import parts_diagram  # noqa: E402


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MkDocs both write it for plain headings."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return re.sub(r" ", "-", text)


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def broken_links(page: Path) -> list[str]:
    """Each relative link of a page whose file, or heading, is missing."""
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target) or (target.startswith("#") and not target[1:]):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    return broken


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 250, f"README.md has {lines} lines; move reference text into docs/"


def test_readme_keeps_the_two_commands():
    text = (ROOT / "README.md").read_text()
    for command in ("bash scripts/run.sh", "bash scripts/test.sh"):
        assert f"```bash\n{command}\n```" in text, f"README.md lost the command {command!r}"


def test_relative_links_resolve():
    broken = [b for page in [ROOT / "README.md", *PAGES] for b in broken_links(page)]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text()
    missing = [p.name for p in PAGES if f": {p.name}" not in config]
    assert not missing, f"docs pages missing from mkdocs.yml's nav: {missing}"


def test_docs_build_strict(tmp_path):
    # --quiet would hide the warnings that --strict counts, so the build runs without it.
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def test_parts_diagram_is_fresh():
    page = parts_diagram.PAGE.read_text()
    assert parts_diagram.generate(page) == page, (
        "docs/architecture.md's parts diagram or table is stale: "
        "run .venv/bin/python scripts/parts_diagram.py"
    )


def test_diagram_names_every_part():
    diagram = parts_diagram.diagram()
    missing = [p for p in parts_diagram.parts() if f" {p}" not in diagram]
    assert not missing, f"parts with no arrow in the diagram: {missing}"
