"""EventStreamWriter against a real server: native events are Kafka records (read back by kafka-python
and confluent-kafka), order per routing key across scaling, exactly once across a server SIGKILL,
fencing of an older instance of a writer id."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import Future

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer

from millrace import (
    EventPosition,
    JsonSerializer,
    StreamManager,
    StringSerializer,
    WriterFencedError,
)
from millrace.protocol.errors import EventsRefusedError
from millrace.protocol.wire import Command
from tests.server_process import ServerProcess, create_topic

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def confluent_read(server: ServerProcess, topic: str, partitions: int, count: int) -> list:
    """(partition, offset, key, value) of ``count`` records, read by confluent-kafka from offset 0."""
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.5):
            assert m.error() is None, m.error()
            got.append((m.partition(), m.offset(), m.key(), m.value()))
    # Nothing beyond: a duplicate would show up here.
    got += [(m.partition(), m.offset(), m.key(), m.value()) for m in consumer.consume(1000, 1.0)]
    consumer.close()
    return got


def read_to_end(server: ServerProcess, topic: str, partitions: int) -> list:
    """Every record of ``topic`` up to each partition's high watermark now, as confluent_read gives them."""
    probe = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"probe-{topic}"})
    total = sum(probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions))
    probe.close()
    records = confluent_read(server, topic, partitions, total)
    assert len(records) == total
    return records


def test_native_events_are_kafka_records(server: ServerProcess, uri: str) -> None:
    create_topic(server, "readings", 4)
    with StreamManager(uri) as sm:
        writer = sm.create_writer("kafka", "readings", StringSerializer())
        positions = [writer.write_event(f"{key}:{i}", routing_key=key) for i in range(50)
                     for key in ("sensor-1", "sensor-2", "sensor-3")]
        unkeyed = writer.write_event("no key")
        writer.flush()
        writer.close()
    by_key: dict[str, list[EventPosition]] = defaultdict(list)
    for i, fut in enumerate(positions):
        by_key[("sensor-1", "sensor-2", "sensor-3")[i % 3]].append(fut.result())
    for key, landed in by_key.items():
        assert len({p.partition for p in landed}) == 1, key  # one key, one partition
        assert [p.offset for p in landed] == sorted(p.offset for p in landed)

    records = confluent_read(server, "readings", 4, 151)
    assert len(records) == 151
    assert len({(p, o) for p, o, _, _ in records}) == 151
    for key, landed in by_key.items():
        mine = [(p, o, v) for p, o, k, v in records if k == key.encode()]
        assert [(p, o) for p, o, _ in mine] == [(x.partition, x.offset) for x in landed]
        assert [v for _, _, v in mine] == [f"{key}:{i}".encode() for i in range(50)]
    assert [(k, v) for p, o, k, v in records if k is None] == [(None, b"no key")]
    assert unkeyed.result().offset >= 0

    # kafka-python sees the same records.
    consumer = KafkaConsumer("readings", bootstrap_servers=server.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    seen = sorted((m.partition, m.offset, m.key, m.value) for m in consumer)
    consumer.close()
    assert seen == sorted(records)


def test_native_and_kafka_producers_share_offsets(server: ServerProcess, uri: str) -> None:
    create_topic(server, "shared", 1)
    producer = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True})
    with StreamManager(uri) as sm, sm.create_writer("kafka", "shared", JsonSerializer()) as writer:
        for i in range(10):
            producer.produce("shared", key=b"k", value=f"kafka-{i}".encode())
            producer.flush(30)
            assert writer.write_event({"native": i}, routing_key="k").result(30).offset == 2 * i + 1
    values = [v for _, _, _, v in confluent_read(server, "shared", 1, 20)]
    assert values == [x for i in range(10) for x in (f"kafka-{i}".encode(), b'{"native":%d}' % i)]


def test_order_per_key_holds_across_splits(server: ServerProcess, uri: str) -> None:
    create_topic(server, "elastic-native", 8, **{"millrace.segments.initial": "1"})
    keys = [f"device-{n}" for n in range(16)]
    with StreamManager(uri) as sm:
        writer = sm.create_writer("kafka", "elastic-native", StringSerializer())
        futures: list[Future[EventPosition]] = []
        for round_ in range(3):
            for i in range(100):
                futures += [writer.write_event(f"{k}:{round_ * 100 + i}", routing_key=k) for k in keys]
            segment = sm.describe_stream("kafka", "elastic-native").segments[0].segment
            sm.split_segment("kafka", "elastic-native", segment)  # while appends are in flight
        writer.close()
        assert len(sm.describe_stream("kafka", "elastic-native").segments) == 4
    assert all(f.result().offset >= 0 for f in futures)
    records = confluent_read(server, "elastic-native", 8, len(futures))
    assert len(records) == len(futures)
    for k in keys:
        values = [v for _, _, key, v in sorted(records) if key == k.encode()]
        assert values == [f"{k}:{i}".encode() for i in range(300)]


def test_a_second_instance_of_a_writer_id_fences_the_first(server: ServerProcess, uri: str) -> None:
    create_topic(server, "fenced", 1)
    with StreamManager(uri) as sm:
        first = sm.create_writer("kafka", "fenced", writer_id="loader-1")
        first.write_event(b"a", routing_key="k").result(30)
        second = sm.create_writer("kafka", "fenced", writer_id="loader-1")
        assert (second.producer_id, second.epoch) == (first.producer_id, first.epoch + 1)
        second.write_event(b"b", routing_key="k").result(30)
        with pytest.raises(WriterFencedError):
            first.write_event(b"zombie", routing_key="k").result(30)
        second.close()
    assert [v for _, _, _, v in confluent_read(server, "fenced", 1, 2)] == [b"a", b"b"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_exactly_once_across_a_server_sigkill(tmp_path) -> None:
    native, kafka = _free_port(), _free_port()
    data = str(tmp_path / "data")
    args = ("--native-port", str(native), "--kafka-port", str(kafka))
    server = ServerProcess(data, *args).start()
    try:
        create_topic(server, "crash", 4)
        sm = StreamManager(f"tcp://127.0.0.1:{native}", reconnect_timeout=120.0)
        writer = sm.create_writer("kafka", "crash", StringSerializer(), writer_id="crash-writer")
        keys = [f"k{n}" for n in range(8)]
        written: list[tuple[str, str, Future[EventPosition]]] = []
        stop = threading.Event()

        def write() -> None:
            i = 0
            while not stop.is_set():
                for k in keys:
                    value = f"{k}:{i}"
                    written.append((k, value, writer.write_event(value, routing_key=k)))
                i += 1
                if i % 50 == 0:
                    time.sleep(0.01)  # let the server keep up: a bounded backlog at the crash

        thread = threading.Thread(target=write)
        thread.start()
        time.sleep(1.5)
        server.kill()  # SIGKILL with batches in flight
        server = ServerProcess(data, *args).start()
        time.sleep(1.5)  # the writer resends and continues on the restarted server
        stop.set()
        thread.join(60)
        writer.flush()
        writer.close()
        sm.close()
        assert all(f.done() and f.exception() is None for _, _, f in written)
        assert writer.resent_batches > 0  # the crash cost batches, which were sent again
        records = confluent_read(server, "crash", 4, len(written))
        values = [v.decode() for _, _, _, v in sorted(records)]
        assert len(values) == len(written) == len(set(values))  # every event once, none twice
        for k in keys:
            mine = [v for v in values if v.startswith(f"{k}:")]
            assert mine == [v for key, v, _ in written if key == k]  # in write order per key
    finally:
        server.kill()


def test_a_batch_that_does_not_parse_is_refused_and_the_server_lives(server: ServerProcess, uri: str) -> None:
    create_topic(server, "garbage", 1)
    with StreamManager(uri) as sm:
        for payload in (b"", b"not a record batch", b"\x00" * 80):
            with pytest.raises(EventsRefusedError):
                sm.controller.call(Command.APPEND_EVENTS, {"scope": "kafka", "stream": "garbage", "partition": 0},
                                   payload)
        writer = sm.create_writer("kafka", "garbage")
        assert writer.write_event(b"fine", routing_key="k").result(30).offset == 0
        writer.close()


def test_exactly_once_when_the_writer_process_is_killed(server: ServerProcess, uri: str) -> None:
    """SIGKILL a writer mid-stream, restart it under the same writer id: every acknowledged event is
    stored once, nothing is stored twice, and each key's events are in write order."""
    create_topic(server, "writer-crash", 4)
    cmd = [sys.executable, "-m", "tests.client.writer_process", uri, "writer-crash", "crashing-writer"]
    first = subprocess.Popen([*cmd, "0", "1000000"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    acked: list[str] = []
    assert first.stdout is not None
    for line in first.stdout:
        if line.startswith("acked "):
            acked.append(line.split()[1])
            if len(acked) >= 2000:
                break
    first.send_signal(signal.SIGKILL)  # with events written and not yet acknowledged
    first.wait(30)
    second = subprocess.run([*cmd, "5000000", "400"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert second.returncode == 0, second.stderr
    acked += [line.split()[1] for line in second.stdout.splitlines() if line.startswith("acked ")]
    assert len(acked) >= 2400

    stored = [v.decode() for _, _, _, v in sorted(read_to_end(server, "writer-crash", 4))]
    assert len(stored) == len(set(stored))  # nothing twice
    assert set(acked) <= set(stored)  # everything acknowledged, once
    for key in {v.split(":")[0] for v in stored}:
        numbers = [int(v.split(":")[1]) for v in stored if v.startswith(f"{key}:")]
        assert numbers == sorted(numbers)  # in write order per key, across the restart
