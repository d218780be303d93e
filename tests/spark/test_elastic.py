"""The streaming pipeline (Spark's Kafka source, Kafka and Parquet sinks) keeps going while its source topic
splits, merges and grows partitions under a live producer; Ctrl-C stops it cleanly and the same checkpoint
resumes. Afterwards both sinks equal an independent computation over the source topic, window for window:
nothing missing, nothing doubled. Skips, saying why, without the connector's jars (tests/spark/conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace.client.segments import SegmentClient
from spark_examples.generate import ensure_topic
from spark_examples.readings import generate_readings
from tests.server_process import ServerProcess
from tests.spark import reference
from tests.spark.conftest import connector_or_skip
from tests.spark.kafka_support import (
    ROOT,
    example_command,
    kafka_windows,
    parquet_windows,
    read_topic,
    readings_of,
    run_example,
    watermarks,
)

JARS = connector_or_skip()

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

START = 1_750_000_037_000
# 100 readings/s, 100 ms of event time apart: event time runs ten times faster than the clock, so the
# one-minute windows close (two-minute watermark) while the topic scales. Late readings stay 90 s of
# event time inside the watermark, so only a 9 s delivery skew between partitions could drop one.
RATE = 100.0
READINGS = generate_readings(60_000, devices=11, start_ms=START, interval_ms=100, late_fraction=0.1,
                             max_lateness_ms=30_000, seed=41)
HANG_GUARD_S = 300.0  # a stuck step fails instead of hanging the suite; nothing here is timed


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(str(tmp_path_factory.mktemp("millrace"))).start()
    try:
        yield srv
    finally:
        srv.kill()


def wait_until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.5)


class LiveProducer(threading.Thread):
    """Sends READINGS at RATE per second until stopped, idempotent with acks=all. It picks each reading's
    partition itself (by device) among the first ``partitions``, so new partitions get data only once the
    test says so: after the Spark query has seen them, so none of it reaches Spark later than the rest."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.stop = threading.Event()
        self.delivered: list[tuple[int, int, int]] = []  # (partition, offset, seq)
        self.errors: list[str] = []

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "topic.metadata.refresh.interval.ms": 1000})

        def report(seq: int) -> Callable[[Any, Any], None]:
            def cb(err: Any, msg: Any) -> None:
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.delivered.append((msg.partition(), msg.offset(), seq))
            return cb

        started = time.monotonic()
        try:
            for i, r in enumerate(READINGS):
                if self.stop.is_set() or self.errors:
                    break
                ahead = started + i / RATE - time.monotonic()
                if ahead > 0:
                    producer.poll(ahead)
                partition = zlib.crc32(r.key()) % self.partitions
                producer.produce(self.topic, key=r.key(), value=r.value(), partition=partition, timestamp=r.ts_ms,
                                 on_delivery=report(r.seq))
                producer.poll(0)
            else:
                self.errors.append("ran out of readings before the test stopped it")
        finally:
            if producer.flush(120):
                self.errors.append("readings still undelivered after 120 s")

    def grow(self, partitions: int) -> None:
        self.partitions = partitions


def spark_offsets(checkpoint: Path) -> dict[int, int]:
    """The source offsets (partition -> end offset) of the newest micro-batch a query has planned, from its
    checkpoint's offset log: the partitions the query reads and how far."""
    log = checkpoint / "offsets"
    batches = sorted((int(p.name) for p in log.iterdir() if p.name.isdigit()), reverse=True) if log.is_dir() else []
    for batch in batches:
        try:
            lines = (log / str(batch)).read_text().splitlines()
            (offsets,) = json.loads(lines[-1]).values()
        except (OSError, ValueError, IndexError):
            continue  # being written
        return {int(p): o for p, o in offsets.items()}
    return {}


def test_kafka_sink_while_topic_splits_merges_and_grows(server: ServerProcess, spark: Any, tmp_path: Path) -> None:
    bootstrap = server.bootstrap
    topic, out_topic = f"elastic-{uuid.uuid4().hex[:8]}", f"elastic-out-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, 2, {"millrace.segments.initial": "1"})
    ensure_topic(bootstrap, out_topic, 2)
    parquet, checkpoint = tmp_path / "aggregates", tmp_path / "checkpoint"
    args = ["--bootstrap", bootstrap, "--topic", topic, "--output-topic", out_topic, "--parquet", str(parquet),
            "--checkpoint", str(checkpoint)]
    sinks = [checkpoint / "kafka-sink", checkpoint / "parquet-sink"]
    log_path = tmp_path / "stream.log"
    producer = LiveProducer(bootstrap, topic, 2)
    with log_path.open("w") as log:
        # Its own session, as a terminal runs a command: Ctrl-C signals the whole group, the JVM included.
        stream = subprocess.Popen(example_command("spark_examples.streaming_pipeline", *args, "--trigger-seconds",
                                                  "1", jars=JARS), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    admin = SegmentClient("127.0.0.1", server.native_port)
    try:
        producer.start()

        def spark_read_past(n: int, partitions: int = 2) -> Callable[[], bool]:
            def check() -> bool:
                assert stream.poll() is None, f"the pipeline exited {stream.returncode}:\n{log_path.read_text()[-5000:]}"
                assert not producer.errors, producer.errors
                return all(len(o := spark_offsets(s)) >= partitions and sum(o.values()) >= n for s in sinks)
            return check

        def then_read_more(what: str, partitions: int = 2) -> None:
            n = len(producer.delivered)
            wait_until(f"Spark to read 150 readings past {n} after {what}", spark_read_past(n + 150, partitions))

        then_read_more("starting")
        assert [s["number"] for s in admin.describe_stream("kafka", topic)["segments"]] == [0]
        admin.split_segment("kafka", topic, 0, 2)  # partition 0 | partition 1
        then_read_more("the split")
        admin.merge_segments("kafka", topic, [1, 2])
        then_read_more("the merge")

        from confluent_kafka.admin import AdminClient, NewPartitions

        kafka_admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until its future completes
        kafka_admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
        wait_until("both queries to read the new partitions",
                   lambda: all(set(spark_offsets(s)) == {0, 1, 2, 3} for s in sinks))
        producer.grow(4)
        then_read_more("the new partitions", partitions=4)
        wait_until("Spark to read partitions 2 and 3", lambda: all(
            spark_offsets(s)[2] > 0 and spark_offsets(s)[3] > 0 for s in sinks))
        (carrier,) = admin.describe_stream("kafka", topic)["segments"]
        admin.split_segment("kafka", topic, carrier["number"], 2)
        then_read_more("the second split", partitions=4)
        assert len(admin.describe_stream("kafka", topic)["segments"]) == 2
        assert read_topic(bootstrap, out_topic), "no window was written to the sink while the topic scaled"
    finally:
        admin.close()
        if stream.poll() is None:
            os.killpg(stream.pid, signal.SIGINT)  # Ctrl-C, with the producer still going
        status = stream.wait(300)
        stopped_at = len(producer.delivered)
        wait_until("more readings for the next run", lambda: len(producer.delivered) >= stopped_at + 200
                   or not producer.is_alive())
        producer.stop.set()
        producer.join(180)
    live = log_path.read_text()
    assert not producer.errors, producer.errors
    assert status == 0, f"Ctrl-C: exit status {status}\n{live[-5000:]}"
    assert "SIGINT: stopping after the running batch" in live and "Traceback" not in live, live[-5000:]

    # The same checkpoint again, to the end of what was produced.
    wm = watermarks(run_example("spark_examples.streaming_pipeline", *args, "--available-now", jars=JARS))
    assert min(wm.values()) > max(watermarks(live).values()), "the second run went on from the first"
    records = read_topic(bootstrap, topic)
    assert sorted((r.partition, r.offset) for r in records) == sorted((p, o) for p, o, _ in producer.delivered)
    readings = readings_of(records)
    assert sorted(r.seq for r in readings) == list(range(len(producer.delivered))), "lost or doubled readings"
    assert {r.partition for r in records} == {0, 1, 2, 3}
    everything = reference.aggregates(readings)
    reference.assert_same(parquet_windows(spark, parquet), reference.closed_by(everything, wm["sensors-parquet"]))
    reference.assert_same(kafka_windows(bootstrap, out_topic), reference.closed_by(everything, wm["sensors-kafka"]))
