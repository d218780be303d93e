"""The README's first round trips, run as written: the ``sh`` blocks of "A first Kafka round trip" and "A
first native round trip" are parsed out of README.md and run in order with bash, from a scratch directory
standing in for the repository root (its ``.venv`` this checkout's), against one real server, as a reader
runs them one after the other. Only what a test machine must change is substituted: the Kafka and native
addresses the README gives (the defaults, 127.0.0.1:9092 and 9090) become the test server's, and a
``millrace`` command is given the server's native address, which it otherwise takes from the default.
(The README's first Spark job is checked by tests/spark/test_spark_docs.py.)"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server_process import REPO_ROOT, ServerProcess

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is needed (scripts/bootstrap.sh installs it)")]

README = Path(REPO_ROOT) / "README.md"


def section_blocks(heading: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index(f"\n## {heading}\n"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(str(tmp_path / "data")) as running:
        yield running


def run_block(block: str, server: ServerProcess, workdir: Path) -> list[str]:
    """A README block run as written with bash against ``server``; its standard output's lines."""
    block = block.replace("127.0.0.1:9092", server.bootstrap)
    block = block.replace("tcp://127.0.0.1:9090", f"tcp://127.0.0.1:{server.native_port}")
    block = re.sub(r"^(\.venv/bin/millrace .*)$", rf"\1 --server 127.0.0.1:{server.native_port}", block, flags=re.M)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=workdir, capture_output=True, text=True,
                          timeout=90)
    assert done.returncode == 0, f"README block failed:\n{block}\n{done.stdout}\n{done.stderr}"
    return done.stdout.splitlines()


def test_first_kafka_and_native_round_trips_as_written(server: ServerProcess, tmp_path: Path) -> None:
    workdir = tmp_path / "repo"
    workdir.mkdir()
    (workdir / ".venv").symlink_to(Path(REPO_ROOT) / ".venv")
    [kafka] = section_blocks("A first Kafka round trip")
    [native] = section_blocks("A first native round trip")

    out = run_block(kafka, server, workdir)
    assert out[0] == "hello", out  # kcat reads back what it wrote
    description = "\n".join(out[1:])
    assert "kafka/readings" in description and "partitions" in description, description

    out = run_block(native, server, workdir)
    # The native reader's event, then kcat reading the topic: its own record and the native writer's event.
    assert out == ["sensor-1 21.5", "hello", "hello from the native client"], out
