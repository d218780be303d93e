"""The README and the pages of docs/ hold together: every link between them names a file that exists and,
with a ``#fragment``, a heading of that file (GitHub's anchors); and none of them carries the project's
history (issue numbers), which lives in git."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*```")


def prose(path: Path) -> list[tuple[int, str]]:
    """A page's lines outside fenced code blocks, with their line numbers."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def anchors(path: Path) -> set[str]:
    """GitHub's anchor of each heading: lower case, punctuation dropped, spaces made hyphens."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for _, line in prose(path) if re.match(r"#{1,6} ", line)}


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_links_resolve(page: Path) -> None:
    broken = []
    for number, line in prose(page):
        for target in _LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check
                continue
            file, _, fragment = target.partition("#")
            linked = (page.parent / file).resolve() if file else page
            if not linked.exists():
                broken.append(f"{page.name}:{number}: {target} (no such file)")
            elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                broken.append(f"{page.name}:{number}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_page_is_linked_from_the_readme() -> None:
    linked = {target.partition("#")[0] for _, line in prose(ROOT / "README.md") for target in _LINK.findall(line)}
    pages = {f"docs/{page.name}" for page in PAGES[1:]}
    assert pages <= linked, pages - linked


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_issue_numbers_and_no_dates(page: Path) -> None:
    """History lives in git: no page names an issue or a work session, and the figures carry no date of
    a run (other pages' dates are example data)."""
    text = page.read_text(encoding="utf-8")
    dated = r"|\b20\d\d-\d\d-\d\d\b" if page.name == "performance.md" else ""
    found = re.findall(r"(?i)\bissues? \d+|(?<![\w/&])#\d+\b|\bsessions? \d+" + dated, text)
    assert not found, found
