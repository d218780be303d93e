"""docs/pravega.md's example, run as written against a real server (only the controller's port is the
test server's): it prints the stream list and the event it wrote."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.server_process import ServerProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "pravega.md"


def example() -> str:
    """The indented Python block after "With the official Python client"."""
    lines = DOC.read_text(encoding="utf-8").split("With the official Python client", 1)[1].splitlines()[1:]
    block = []
    for line in lines:
        if line and not line.startswith("    ") and block:
            break
        if line.startswith("    ") or (block and not line):
            block.append(line)
    return textwrap.dedent("\n".join(block))


def test_the_example_runs_as_written(server: ServerProcess) -> None:
    code = example()
    assert "pravega_client.StreamManager(\"tcp://127.0.0.1:9190\")" in code
    code = code.replace("127.0.0.1:9190", f"127.0.0.1:{server.pravega_controller_port}")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["['readings']", "b'21.5'"], run.stdout
