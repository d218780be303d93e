"""Every ```python block of docs/client.md runs as written against a real server.

How a section becomes a program: the ``## `` headings cut the page into sections, and the python
blocks of a section, in order, make one program, each block's lines at their own line numbers of
the page (everything else there a blank line). A block indented in the page (inside a list item)
loses the indentation of its fence, so a block whose code is indented by four spaces continues the
``with StreamManager(...) as sm:`` its section opened, as the page means it to. The program runs in
a fresh interpreter compiled under the page's own path, so a failure's traceback shows the line of
docs/client.md that failed. Only addresses change: the native one ("tcp://127.0.0.1:9090") and the
Kafka one ("127.0.0.1:9092") become the test server's; it runs in a temporary directory for the
files a block writes. Each opening fence line calls a marker with the block's number and the last
closing fence one more, so the test sees every block of the section run to its end (no block may be
skipped), and the blocks tested add up to every python block of the page.

One test per section, parametrized by its heading. Sections are self-contained, and their names of
scopes and streams distinct where they would otherwise clash, so any one of them runs alone too.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.server_process import REPO_ROOT, ServerProcess

DOCS = Path(REPO_ROOT) / "docs" / "client.md"
NATIVE_ADDRESS = "tcp://127.0.0.1:9090"
KAFKA_ADDRESS = "127.0.0.1:9092"
MARKER = "__docs_block__"
# Compiles the program under the page's path (tracebacks then quote docs/client.md) and gives it the
# marker, which prints a line the test counts.
RUNNER = (
    "import sys\n"
    "source, path = open(sys.argv[1], encoding='utf-8').read(), sys.argv[2]\n"
    f"namespace = {{'__name__': '__main__', {MARKER!r}: lambda n: print('docs-block', n, flush=True)}}\n"
    "exec(compile(source, path, 'exec'), namespace)\n"
)
_FENCE = re.compile(r"^( *)```python\s*$")


@dataclass(frozen=True)
class Block:
    """A python block: the line numbers (0-based) of its fences and its lines, fence indent removed."""

    opening: int
    closing: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Section:
    heading: str
    blocks: tuple[Block, ...]


def parse(text: str) -> tuple[list[str], list[Section]]:
    """The page's lines and its sections that hold python blocks."""
    lines = text.splitlines()
    sections: list[tuple[str, list[Block]]] = [("(before the first heading)", [])]
    number = 0
    while number < len(lines):
        line = lines[number]
        if line.startswith("## "):
            sections.append((line[3:].strip(), []))
        fence = _FENCE.match(line)
        if fence is None:
            number += 1
            continue
        indent = fence.group(1)
        closing = next(n for n in range(number + 1, len(lines)) if lines[n] == f"{indent}```")
        body = lines[number + 1:closing]
        assert all(not b.strip() or b.startswith(indent) for b in body), f"line {number + 1}: a line left of its fence"
        sections[-1][1].append(Block(number, closing, tuple(b[len(indent):] for b in body)))
        number = closing + 1
    return lines, [Section(heading, tuple(blocks)) for heading, blocks in sections if blocks]


def program(page_lines: int, section: Section) -> str:
    """The section's blocks at their line numbers, with the markers on their fence lines."""
    out = [""] * page_lines
    for index, block in enumerate(section.blocks):
        first = next(line for line in block.lines if line.strip())
        out[block.opening] = first[: len(first) - len(first.lstrip())] + f"{MARKER}({index})"
        out[block.opening + 1:block.closing] = block.lines
    out[section.blocks[-1].closing] = f"{MARKER}({len(section.blocks)})"
    return "\n".join(out) + "\n"


_PAGE, SECTIONS = parse(DOCS.read_text(encoding="utf-8"))
PAGE_LINES = len(_PAGE)


def test_every_python_block_is_in_a_tested_section() -> None:
    """The parser finds every ```python fence of the page (none hides outside a section's program)."""
    fences = sum(1 for line in DOCS.read_text(encoding="utf-8").splitlines() if "```python" in line)
    assert fences == sum(len(s.blocks) for s in SECTIONS) and fences >= 33  # no example dropped
    assert "(before the first heading)" not in [s.heading for s in SECTIONS]


@pytest.mark.parametrize("section", SECTIONS, ids=[re.sub(r"[^a-z0-9]+", "-", s.heading.lower()).strip("-")
                                                for s in SECTIONS])
def test_section_runs_as_written(section: Section, server: ServerProcess, uri: str, tmp_path: Path) -> None:
    source = program(PAGE_LINES, section).replace(NATIVE_ADDRESS, uri).replace(KAFKA_ADDRESS, server.bootstrap)
    script = tmp_path / "section.py"
    script.write_text(source, encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", RUNNER, str(script), str(DOCS)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    ran = [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("docs-block ")]
    assert ran == list(range(len(section.blocks) + 1)), done.stdout
