"""End to end with Spark's real Kafka connector: a Millrace server, the generator, the streaming pipeline run
twice on one checkpoint (it must resume) and the historical pipeline over offsets and timestamps, each run
with its documented command on local[2] Spark; every aggregate is checked against an independent pure-Python
computation of the same readings.

The connector is not a Python package and this machine cannot download it: its jars (what `--packages
org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.x` resolves) come from SPARK_KAFKA_JARS or ../shared/spark-jars
beside the repository (tests/spark/conftest.py); without either the module skips, saying so."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from spark_examples.generate import ensure_topic, produce
from spark_examples.kafka_options import offsets_json
from spark_examples.readings import Reading, generate_readings
from tests.server_process import ServerProcess
from tests.spark import reference
from tests.spark.conftest import connector_or_skip
from tests.spark.kafka_support import kafka_windows, parquet_windows, run_example, watermarks

JARS = connector_or_skip()

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

START = 1_750_000_037_000
PARTITIONS = 3
FIRST = generate_readings(3000, devices=7, start_ms=START, interval_ms=100, late_fraction=0.1,
                          max_lateness_ms=30_000, seed=21)
SECOND = generate_readings(3000, devices=7, start_ms=START, interval_ms=100, late_fraction=0.1,
                           max_lateness_ms=30_000, seed=21, first_seq=3000)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(str(tmp_path_factory.mktemp("millrace")), "--default-partitions", str(PARTITIONS)).start()
    try:
        yield srv
    finally:
        srv.kill()


def in_range(placed: dict[int, list[tuple[int, Reading]]], start: dict[int, int], end: dict[int, int],
             ) -> list[Reading]:
    return [r for p, recs in placed.items() for o, r in recs if start[p] <= o < end[p]]


def first_at_or_after(recs: list[tuple[int, Reading]], ts: int, otherwise: int) -> int:
    """Kafka's offset for a timestamp: the first offset whose record timestamp is >= ts."""
    return next((o for o, r in recs if r.ts_ms >= ts), otherwise)


def test_streaming_resumes_and_history_rewinds(server: ServerProcess, spark: Any, tmp_path: Path) -> None:
    bootstrap = server.bootstrap
    topic, out_topic = f"readings-{uuid.uuid4().hex[:8]}", f"aggregates-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, PARTITIONS)
    ensure_topic(bootstrap, out_topic, PARTITIONS)
    parquet, checkpoint = tmp_path / "aggregates", tmp_path / "checkpoint"
    stream_args = ["--bootstrap", bootstrap, "--topic", topic, "--output-topic", out_topic,
                   "--parquet", str(parquet), "--checkpoint", str(checkpoint), "--available-now",
                   "--max-offsets-per-trigger", "1000", "--window", "1 minute", "--watermark", "2 minutes"]

    placed: dict[int, list[tuple[int, Reading]]] = {p: [] for p in range(PARTITIONS)}
    for r, (p, o) in zip(FIRST, produce(bootstrap, topic, FIRST, progress=False), strict=True):
        placed[p].append((o, r))

    # The streaming pipeline, a first time: windows closed by its watermark, in Parquet and in the topic.
    wm1 = watermarks(run_example("spark_examples.streaming_pipeline", *stream_args, jars=JARS))
    assert set(wm1) == {"sensors-kafka", "sensors-parquet"} and min(wm1.values()) > START, wm1
    want1 = reference.closed_by(reference.aggregates(FIRST), wm1["sensors-parquet"])
    assert want1
    reference.assert_same(parquet_windows(spark, parquet), want1)
    reference.assert_same(kafka_windows(bootstrap, out_topic),
                          reference.closed_by(reference.aggregates(FIRST), wm1["sensors-kafka"]))

    # More readings, then the same command again: it resumes from the checkpoint, nothing counted twice.
    for r, (p, o) in zip(SECOND, produce(bootstrap, topic, SECOND, progress=False), strict=True):
        placed[p].append((o, r))
    for recs in placed.values():
        recs.sort(key=lambda x: x[0])
        assert [o for o, _ in recs] == list(range(len(recs)))
    wm2 = watermarks(run_example("spark_examples.streaming_pipeline", *stream_args, jars=JARS))
    assert wm2["sensors-parquet"] > wm1["sensors-parquet"], (wm1, wm2)
    everything = reference.aggregates(FIRST + SECOND)
    reference.assert_same(parquet_windows(spark, parquet), reference.closed_by(everything, wm2["sensors-parquet"]))
    reference.assert_same(kafka_windows(bootstrap, out_topic), reference.closed_by(everything, wm2["sensors-kafka"]))

    # History, all of it: every window, including those the watermark has not closed yet; compared with
    # what production wrote.
    out = run_example("spark_examples.historical_pipeline", "--bootstrap", bootstrap, "--topic", topic,
                      "--parquet", str(tmp_path / "h-all"), "--compare-with", str(parquet), "--show", "0", jars=JARS)
    reference.assert_same(parquet_windows(spark, tmp_path / "h-all"), everything)
    produced = reference.closed_by(everything, wm2["sensors-parquet"])
    assert (f"compared with production: same {len(produced)}, different 0, "
            f"only_history {len(everything) - len(produced)}, only_production 0") in out, out[-3000:]

    # History by event time (Kafka timestamps): each partition from its first record at or after --from to
    # its first record at or after --to, late readings included where they sit in the log.
    t_from, t_to = START + 150_000, START + 420_000
    start = {p: first_at_or_after(recs, t_from, len(recs)) for p, recs in placed.items()}
    end = {p: first_at_or_after(recs, t_to, len(recs)) for p, recs in placed.items()}
    run_example("spark_examples.historical_pipeline", "--bootstrap", bootstrap, "--topic", topic,
                "--from", str(t_from), "--to", datetime.fromtimestamp(t_to / 1000).astimezone().isoformat(),
                "--parquet", str(tmp_path / "h-time"), "--show", "0", jars=JARS)
    reference.assert_same(parquet_windows(spark, tmp_path / "h-time"),
                          reference.aggregates(in_range(placed, start, end)))

    # History between explicit offsets (-2 earliest, -1 latest).
    n = {p: len(recs) for p, recs in placed.items()}
    start = {0: n[0] // 10, 1: -2, 2: n[2] // 2}
    end = {0: n[0] * 3 // 4, 1: n[1] // 3, 2: -1}
    run_example("spark_examples.historical_pipeline", "--bootstrap", bootstrap, "--topic", topic,
                "--starting-offsets", offsets_json(topic, start), "--ending-offsets", offsets_json(topic, end),
                "--parquet", str(tmp_path / "h-offsets"), "--show", "0", jars=JARS)
    resolved_start = {p: 0 if o == -2 else o for p, o in start.items()}
    resolved_end = {p: len(placed[p]) if o == -1 else o for p, o in end.items()}
    reference.assert_same(parquet_windows(spark, tmp_path / "h-offsets"),
                          reference.aggregates(in_range(placed, resolved_start, resolved_end)))
