"""The IoT pipelines of spark_examples/ with the native source (--source native, format("millrace")) give
what they give with Spark's Kafka source: the streaming pipeline's windows, and the history between two
stream cuts, each checked against tests/spark/reference.py's independent computation. Each command runs as
spark_examples/run.sh runs it. Skips, saying why, without the Kafka connector's jars (the Kafka run needs
them; tests/spark/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace import StreamManager
from spark_examples.generate import ensure_topic, produce
from spark_examples.readings import generate_readings
from tests.server_process import ServerProcess
from tests.spark import reference
from tests.spark.conftest import connector_or_skip
from tests.spark.kafka_support import parquet_windows, run_example, watermarks

JARS = connector_or_skip()

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

START = 1_750_000_037_000
PARTITIONS = 3
FIRST = generate_readings(1500, devices=5, start_ms=START, interval_ms=100, late_fraction=0.1,
                          max_lateness_ms=30_000, seed=7)
SECOND = generate_readings(1000, devices=5, start_ms=START, interval_ms=100, late_fraction=0.1,
                           max_lateness_ms=30_000, seed=7, first_seq=1500)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(str(tmp_path_factory.mktemp("millrace")), "--default-partitions", str(PARTITIONS)) as srv:
        yield srv


def test_pipelines_read_natively_as_through_kafka(server: ServerProcess, spark: Any, tmp_path: Path) -> None:
    bootstrap, endpoint = server.bootstrap, f"127.0.0.1:{server.native_port}"
    topic = f"readings-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, FIRST, progress=False)
    with StreamManager(endpoint) as sm:
        between = sm.tail_cut("kafka", topic).to_base64()
    produce(bootstrap, topic, SECOND, progress=False)

    def stream(source: str, *extra: str) -> tuple[dict[str, int], Path]:
        out = tmp_path / source
        wm = watermarks(run_example(
            "spark_examples.streaming_pipeline", "--source", source, *extra, "--topic", topic,
            "--output-topic", "", "--parquet", str(out / "aggregates"), "--checkpoint", str(out / "checkpoint"),
            "--available-now", "--window", "1 minute", "--watermark", "2 minutes", jars=JARS))
        return wm, out / "aggregates"

    native_wm, native_out = stream("native", "--endpoint", endpoint)
    kafka_wm, kafka_out = stream("kafka", "--bootstrap", bootstrap)
    assert native_wm["sensors-parquet"] == kafka_wm["sensors-parquet"] > START, (native_wm, kafka_wm)
    want = reference.closed_by(reference.aggregates(FIRST + SECOND), native_wm["sensors-parquet"])
    assert want
    reference.assert_same(parquet_windows(spark, native_out), want)
    reference.assert_same(parquet_windows(spark, kafka_out), want)

    # History between two cuts: from the tail after FIRST to the tail now, i.e. SECOND exactly.
    run_example("spark_examples.historical_pipeline", "--source", "native", "--endpoint", endpoint,
                "--topic", topic, "--start-cut", between, "--parquet", str(tmp_path / "history"), "--show", "0",
                jars=JARS)
    reference.assert_same(parquet_windows(spark, tmp_path / "history"), reference.aggregates(SECOND))
