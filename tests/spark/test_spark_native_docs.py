"""docs/spark.md's "Spark, natively" section, run as written: its Python example and its two commands are
parsed out of the page and run against a real Millrace, so the section cannot drift from what works.

What a test machine must change is substituted, nothing else: the native address (the page says
127.0.0.1:9090) and the example's checkpoint folder (``spark-out/...``: Spark resolves a relative path
against the JVM's directory, which the shared test session fixed at its start). The example runs in the
test's local[2] session with the names it leaves to its reader bound: ``spark``, and ``monday`` and
``tuesday``, two cuts of ``kafka/sensor-readings`` with readings before, between and after them. The commands follow the page's section on Spark's Kafka source and sink,
whose generator fills ``sensor-readings``; here a smaller set of readings stands in for it. Every output
is checked against what was written (read back over Kafka) and tests/spark/reference.py's independent
window computation. No Kafka connector is needed (skips, saying why, without PySpark or Java)."""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace import BytesSerializer, StreamManager, StringSerializer
from spark_examples.generate import ensure_topic, produce
from spark_examples.readings import generate_readings
from tests.server_process import ServerProcess
from tests.spark import reference
from tests.spark.conftest import pyspark_missing
from tests.spark.kafka_support import ROOT, parquet_windows, read_topic, readings_of, watermarks
from tests.spark.shell_commands import joined_commands

if pyspark_missing():
    pytest.skip(str(pyspark_missing()), allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

HANG_GUARD_S = 600.0  # a stuck command fails instead of hanging the suite; nothing here is timed
PAGE_NATIVE = "127.0.0.1:9090"
START = 1_750_000_037_000
MONDAY = generate_readings(1200, devices=5, start_ms=START, interval_ms=100, late_fraction=0.1,
                           max_lateness_ms=30_000, seed=11)
TUESDAY = generate_readings(800, devices=5, start_ms=START, interval_ms=100, late_fraction=0.1,
                            max_lateness_ms=30_000, seed=11, first_seq=1200)
LATER = generate_readings(400, devices=5, start_ms=START, interval_ms=100, late_fraction=0.1,
                          max_lateness_ms=30_000, seed=11, first_seq=2000)


def section() -> str:
    text = (ROOT / "docs" / "spark.md").read_text()
    part = text[text.index("\n## Spark, natively\n"):]
    end = part.find("\n## ", 1)
    return part if end < 0 else part[:end]


def indented_blocks(text: str) -> list[list[str]]:
    """The section's indented code blocks, each as its lines with the indent taken off."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("    "):
            current.append(line[4:])
        elif current and line.strip():
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(str(tmp_path_factory.mktemp("millrace")), "--default-partitions", "3") as running:
        yield running


def test_page_native_spark_section_as_written(server: ServerProcess, spark: Any, tmp_path: Path) -> None:
    example, shell = indented_blocks(section())
    assert example[0] == "from millrace.spark import MillraceDataSource", example
    endpoint = f"127.0.0.1:{server.native_port}"

    # The readings the page's generator would have written, in two parts with a cut between them.
    ensure_topic(server.bootstrap, "sensor-readings", 3)
    produce(server.bootstrap, "sensor-readings", MONDAY, progress=False)
    first = Counter(r.value for r in read_topic(server.bootstrap, "sensor-readings"))
    with StreamManager(endpoint) as sm:
        monday = sm.tail_cut("kafka", "sensor-readings")
        produce(server.bootstrap, "sensor-readings", TUESDAY, progress=False)
        tuesday = sm.tail_cut("kafka", "sensor-readings")
        between = Counter(r.value for r in read_topic(server.bootstrap, "sensor-readings")) - first
        produce(server.bootstrap, "sensor-readings", LATER, progress=False)  # after the end cut: not read
        records = read_topic(server.bootstrap, "sensor-readings")
        # The example's streaming query copies iot/readings into iot/cleaned.
        sm.create_scope("iot")
        sm.create_stream("iot", "readings", initial_segments=2)
        sm.create_stream("iot", "cleaned", initial_segments=1)
        raw = [(f"sensor-{n % 4}", f"reading-{n}") for n in range(30)]
        with sm.create_writer("iot", "readings", StringSerializer()) as writer:
            for key, value in raw:
                writer.write_event(value, routing_key=key)

        code = "\n".join(example).replace(PAGE_NATIVE, endpoint)
        code = code.replace('"spark-out/', f'"{tmp_path}/spark-out/')
        names: dict[str, Any] = {"spark": spark, "monday": monday, "tuesday": tuesday}
        exec(compile(code, "docs/spark.md (Spark, natively)", "exec"), names)  # noqa: S102 - the page's own code
        query = names["query"]
        try:
            query.processAllAvailable()
        finally:
            query.stop()

        # The batch read holds exactly what was written between the two cuts, with the columns named.
        events = names["events"]
        assert {"routing_key", "event", "stream", "segment_id", "segment_offset", "event_index",
                "timestamp"} <= set(events.columns)
        rows = events.collect()
        assert Counter(bytes(r.event) for r in rows) == between
        assert {r.stream for r in rows} == {"kafka/sensor-readings"}
        # The streaming query wrote every event of iot/readings into iot/cleaned, once.
        batch = sm.create_batch_client()
        cleaned = Counter((e.routing_key, e.data) for r in batch.list_segments("iot", "cleaned")
                          for e in batch.read_segment(r, BytesSerializer()))
        assert cleaned == Counter((key, value.encode()) for key, value in raw)

    # The two commands, from a directory laid out like the repository root.
    stream, history = joined_commands(shell)
    assert stream.startswith("spark_examples/run.sh stream --source native") and \
        history.startswith("spark_examples/run.sh history --source native"), shell
    home = tmp_path / "repo"
    home.mkdir()
    for name in ("spark_examples", "scripts", ".venv"):
        (home / name).symlink_to(ROOT / name)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "SPARK_KAFKA_JARS")}

    def run(command: str) -> str:
        line = command.replace(PAGE_NATIVE, endpoint)
        proc = subprocess.run(["bash", "-c", line], cwd=home, env=env, capture_output=True, text=True,
                              timeout=HANG_GUARD_S)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{command}\nexited {proc.returncode}:\n{out[-6000:]}"
        assert "Traceback" not in out, out[-6000:]
        return out

    readings = readings_of(records)
    everything = reference.aggregates(readings)
    watermark = watermarks(run(stream))["sensors-parquet"]
    assert watermark > START
    production = reference.closed_by(everything, watermark)
    assert production
    reference.assert_same(parquet_windows(spark, home / "spark-out" / "native-aggregates"), production)

    compared = run(history)
    reference.assert_same(parquet_windows(spark, home / "spark-out" / "native-history"), everything)
    found = re.search(r"compared with production: same (\d+), different (\d+), only_history (\d+), "
                      r"only_production (\d+)", compared)
    assert found, compared[-3000:]
    assert [int(n) for n in found.groups()] == [len(production), 0, len(everything) - len(production), 0]
