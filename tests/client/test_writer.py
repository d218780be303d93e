"""EventStreamWriter against a real server: native events are Kafka records (read back by kafka-python
and confluent-kafka), order per routing key across scaling, exactly once across a server SIGKILL,
fencing of an older instance of a writer id."""

from __future__ import annotations

import os
import signal
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
    WriterBufferFullError,
    WriterFencedError,
)
from millrace.client import writer as writer_module
from millrace.protocol.errors import EventsRefusedError
from millrace.protocol.messages import AppendEvents
from tests.ports import free_port
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



def test_a_writer_holds_at_most_its_buffer_while_the_server_is_away(server: ServerProcess, uri: str) -> None:
    """The application's memory is bounded while nothing is acknowledged (Kafka's buffer.memory and
    max.block.ms): a write that does not fit waits for room, then raises WriterBufferFullError; with
    ``block=False`` at once. What was queued lands once the server answers again, and what was refused
    never does."""
    create_topic(server, "bounded", 1)
    event = b"x" * 1000  # with its routing key "k": 1,001 bytes of the buffer
    with StreamManager(uri) as sm:
        writer = sm.create_writer("kafka", "bounded", max_buffered_bytes=10_000, max_block_seconds=0.3)
        writer.write_event(b"first", routing_key="k").result(30)
        server.pause()
        try:
            queued = [writer.write_event(event, routing_key="k") for _ in range(9)]
            assert writer.buffered_bytes == 9 * 1001
            with pytest.raises(WriterBufferFullError, match="waited 0.3 s"):
                writer.write_event(event, routing_key="k")
            with pytest.raises(WriterBufferFullError):
                writer.write_events("k", [event, event])
            with pytest.raises(WriterBufferFullError):
                writer.write_event(event, routing_key="k", block=False)
            assert writer.buffered_bytes == 9 * 1001
            assert not any(f.done() for f in queued)

            # One more write waits; the server's answers make room for it.
            waiting: list[Future[EventPosition]] = []
            writer.max_block_seconds = 60
            blocked = threading.Thread(target=lambda: waiting.append(writer.write_event(event, routing_key="k")))
            blocked.start()
            blocked.join(0.5)
            assert blocked.is_alive() and not waiting  # still waiting for room
        finally:
            server.resume()
        blocked.join(30)
        assert not blocked.is_alive()
        offsets = [f.result(30).offset for f in [*queued, *waiting]]
        assert offsets == list(range(1, 11))
        writer.close()
        assert writer.buffered_bytes == 0
    values = [v for _, _, _, v in confluent_read(server, "bounded", 1, 11)]
    assert values == [b"first", *[event] * 10]


def test_flush_waits_for_futures_a_landed_batch_is_still_completing(server: ServerProcess, uri: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A landed batch leaves its partition under the writer's lock and its futures are marked done
    after it; a flush in between must not return before they are (it did)."""
    create_topic(server, "flush-settling", 1)
    completing = threading.Event()
    original = writer_module._complete_landed

    def slow_completion(*args: object) -> None:
        completing.set()
        time.sleep(0.3)  # the window, widened: the batch is out of the partition, its futures not done
        original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(writer_module, "_complete_landed", slow_completion)
    with StreamManager(uri) as sm:
        writer = sm.create_writer("kafka", "flush-settling")
        fut = writer.write_event(b"e", routing_key="k")
        assert completing.wait(30)
        writer.flush()
        assert fut.done() and fut.result(timeout=0).offset == 0
        writer.close()


def test_an_event_bigger_than_the_whole_buffer_goes_alone(server: ServerProcess, uri: str) -> None:
    create_topic(server, "bounded-big", 1)
    with StreamManager(uri) as sm:
        writer = sm.create_writer("kafka", "bounded-big", max_buffered_bytes=100, max_block_seconds=30)
        futures = [writer.write_event(b"y" * 500) for _ in range(3)]  # each waits for the one before
        assert [f.result(30).offset for f in futures] == [0, 1, 2]
        writer.close()


@pytest.mark.slow
def test_exactly_once_across_a_server_sigkill(tmp_path) -> None:
    native, kafka = free_port(), free_port()
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
                sm.controller.call(AppendEvents(scope="kafka", stream="garbage", partition=0), payload)
        writer = sm.create_writer("kafka", "garbage")
        assert writer.write_event(b"fine", routing_key="k").result(30).offset == 0
        writer.close()


def _run_writer(uri: str, topic: str, writer_id: str, first: int, count: int, *flags: str,
                until_acked: int | None = None) -> tuple[list[str], list[str]]:
    """Run ``writer_process``; with ``until_acked`` SIGKILL it once that many events are acknowledged.
    Returns the values it reported acknowledged and skipped (written before)."""
    cmd = [sys.executable, "-m", "tests.client.writer_process", uri, topic, writer_id, str(first), str(count),
           *flags]
    acked: list[str] = []
    skipped: list[str] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    for line in proc.stdout:
        word, _, value = line.strip().partition(" ")
        (acked if word == "acked" else skipped if word == "skipped" else []).append(value)
        if until_acked is not None and len(acked) >= until_acked:
            proc.send_signal(signal.SIGKILL)  # with events written and not yet acknowledged
            break
    proc.wait(120)
    if until_acked is None:
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    return acked, skipped


def _highest_number(server: ServerProcess, topic: str, partitions: int) -> int:
    return max(int(v.split(b":")[1]) for _, _, _, v in read_to_end(server, topic, partitions))


def _assert_each_event_once(server: ServerProcess, topic: str, partitions: int, last: int,
                            keyed: bool = True) -> list[str]:
    """The topic holds the events ``key:0`` .. ``key:last`` exactly once each, in number order per key
    when they were written with their keys (events without one are spread by number, in no order)."""
    stored = [v.decode() for _, _, _, v in sorted(read_to_end(server, topic, partitions))]
    assert len(stored) == len(set(stored))  # nothing twice
    numbers = sorted(int(v.split(":")[1]) for v in stored)
    assert numbers == list(range(last + 1))  # nothing missing
    for key in {v.split(":")[0] for v in stored} if keyed else ():
        mine = [int(v.split(":")[1]) for v in stored if v.startswith(f"{key}:")]
        assert mine == sorted(mine)  # in write order per key (a partition's offsets)
    return stored


def test_a_writer_killed_and_restarted_under_its_id_continues_without_duplicates(server: ServerProcess,
                                                                                  uri: str) -> None:
    """SIGKILL a writer mid-stream, restart it under the same writer id writing new events: every
    acknowledged event is stored once, and the new instance's numbers continue above the old ones."""
    create_topic(server, "writer-crash", 4)
    acked, _ = _run_writer(uri, "writer-crash", "crashing-writer", 0, 1_000_000, until_acked=2000)
    with StreamManager(uri) as sm:
        probe = sm.create_writer("kafka", "writer-crash", writer_id="crashing-writer")
        # The stream recorded the killed instance's numbers; a new instance continues above them.
        assert probe.last_event_number == max(probe.written_before.values()) >= 2000 - 1
        probe.close()
    more, skipped = _run_writer(uri, "writer-crash", "crashing-writer", 5_000_000, 400)
    assert len(more) == 400 and not skipped
    stored = [v.decode() for _, _, _, v in sorted(read_to_end(server, "writer-crash", 4))]
    assert len(stored) == len(set(stored))
    assert set(acked + more) <= set(stored)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
def test_a_restarted_writer_that_writes_its_events_again_stores_each_once(server: ServerProcess, uri: str,
                                                                          keyed: bool) -> None:
    """Exactly once across a restart (Pravega's writer id + event numbers): SIGKILL a writer mid-stream,
    then a new instance under the same id writes the same events again from the first, with the same
    event numbers: those stored already are skipped, the rest written, each event stored once."""
    topic = f"replay-{'keyed' if keyed else 'unkeyed'}"
    create_topic(server, topic, 4)
    flags = ("--numbered",) if keyed else ("--numbered", "--unkeyed")
    acked, _ = _run_writer(uri, topic, "replaying-writer", 0, 1_000_000, *flags, until_acked=3000)
    time.sleep(0.5)  # whatever the killed process had sent is appended by now
    last = _highest_number(server, topic, 4) + 2000  # past everything the killed instance got to write
    again, skipped = _run_writer(uri, topic, "replaying-writer", 0, last + 1, *flags)
    assert len(skipped) >= len(acked)  # the acknowledged ones at least were found written
    assert len(again) + len(skipped) == last + 1
    stored = _assert_each_event_once(server, topic, 4, last, keyed)
    assert set(acked) <= set(stored)


def test_replay_after_a_server_sigkill_and_splits_stores_each_event_once(tmp_path) -> None:
    """The event numbers are durable with the data and follow a partition into its successors: a
    numbered writer writes while the topic's segment splits twice, the server is SIGKILLed, the writer
    too; after the restart a new instance writes every event again and each is stored once."""
    native, kafka = free_port(), free_port()
    data = str(tmp_path / "data")
    args = ("--native-port", str(native), "--kafka-port", str(kafka))
    server = ServerProcess(data, *args).start()
    uri = f"tcp://127.0.0.1:{native}"
    try:
        create_topic(server, "replay-crash", 4, **{"millrace.segments.initial": "1"})
        cmd = [sys.executable, "-m", "tests.client.writer_process", uri, "replay-crash", "w1", "0", "1000000",
               "--numbered"]
        writer = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert writer.stdout is not None
        acked: list[str] = []
        with StreamManager(uri) as sm:
            for line in writer.stdout:
                if line.startswith("acked "):
                    acked.append(line.split()[1])
                if len(acked) in (1000, 2000):
                    for seg in sm.describe_stream("kafka", "replay-crash").segments:
                        sm.split_segment("kafka", "replay-crash", seg.segment)  # while appends are in flight
                if len(acked) >= 3000:
                    break
            assert len(sm.describe_stream("kafka", "replay-crash").segments) == 4
        server.kill()  # SIGKILL with the writer's batches in flight
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
        server = ServerProcess(data, *args).start()
        last = _highest_number(server, "replay-crash", 4) + 2000
        again, skipped = _run_writer(uri, "replay-crash", "w1", 0, last + 1, "--numbered")
        assert len(skipped) >= len(acked)
        stored = _assert_each_event_once(server, "replay-crash", 4, last)
        assert set(acked) <= set(stored)
    finally:
        server.kill()
