"""BatchClient against a real server: the ranges of a stream's history, read in parallel, give exactly
what was written (each segment in order, per key in predecessor order across splits and merges), two
tail cuts bound exactly what was written between them, a lost connection mid-range costs nothing, and a
Kafka topic written by kafka-python and confluent-kafka producers (every codec, an aborted transaction)
reads back as a read_committed Kafka consumer reads it."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from millrace import (
    BatchClient,
    BatchEvent,
    EventPosition,
    InvalidStreamCutError,
    SegmentRange,
    StreamCut,
    StreamManager,
    StringSerializer,
)
from millrace.client.streams import StreamDescription
from tests.ports import free_port
from tests.server_process import ServerProcess

KEYS = [f"device-{n}" for n in range(64)]

# (partition, Kafka offset, key, value): where an event is, whichever way it was read
Coordinates = tuple[int, int, bytes | None, bytes]


def read_all(batch: BatchClient, ranges: list[SegmentRange], threads: int = 4) -> dict[SegmentRange, list[BatchEvent[str]]]:
    """Every range read in its own task, several at once, as a batch job would."""
    with ThreadPoolExecutor(threads) as pool:
        done = {r: pool.submit(lambda r: list(batch.read_segment(r, StringSerializer())), r) for r in ranges}
        return {r: f.result(120) for r, f in done.items()}


def direct_predecessors(described: StreamDescription) -> dict[int, set[int]]:
    """Segment id -> the segments its scale sealed over key ranges overlapping its own."""
    return {c.segment_id: {s.segment_id for s in epoch.sealed if s.key_start < c.key_end and c.key_start < s.key_end}
            for epoch in described.history for c in epoch.created}


def ancestors(direct: dict[int, set[int]]) -> dict[int, set[int]]:
    """Segment id -> every segment that lies before it by the predecessor relation (transitively)."""
    out: dict[int, set[int]] = {}

    def of(sid: int) -> set[int]:
        if sid not in out:
            out[sid] = set().union(*({p} | of(p) for p in direct[sid]))
        return out[sid]

    for sid in direct:
        of(sid)
    return out


def write_round(writer: Any, futures: list[tuple[str, str, Future[EventPosition]]], counters: Counter[str],
                events_per_key: int) -> None:
    for _ in range(events_per_key):
        for k in KEYS:
            value = f"{k}:{counters[k]}"
            counters[k] += 1
            futures.append((k, value, writer.write_event(value, routing_key=k)))


def test_parallel_ranges_equal_everything_written_across_splits_and_merges(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("batch")
        sm.create_stream("batch", "elastic", initial_segments=2)
        writer = sm.create_writer("batch", "elastic", StringSerializer())
        futures: list[tuple[str, str, Future[EventPosition]]] = []
        counters: Counter[str] = Counter()
        scales = [
            lambda d: sm.split_segment("batch", "elastic", d.segments[0].segment),
            lambda d: sm.split_segment("batch", "elastic", d.segments[-1].segment, pieces=4),
            lambda d: sm.merge_segments("batch", "elastic", [s.segment for s in d.segments[:2]]),
            lambda d: sm.split_segment("batch", "elastic", d.segments[0].segment),
            lambda d: sm.merge_segments("batch", "elastic", [s.segment for s in d.segments[-3:]]),
        ]
        for scale in scales:
            write_round(writer, futures, counters, 20)
            writer.flush()  # so every epoch holds events: a retired partition's unsent ones move on
            write_round(writer, futures, counters, 10)
            scale(sm.describe_stream("batch", "elastic"))  # while these appends are in flight
        write_round(writer, futures, counters, 20)
        writer.close()
        written = {(p.partition, p.offset, k.encode(), v) for k, v, f in futures for p in [f.result(30)]}
        assert len(written) == len(futures)

        batch = sm.create_batch_client()
        ranges = batch.list_segments("batch", "elastic")
        described = sm.describe_stream("batch", "elastic")
        assert len(described.history) == len(scales) + 1
        assert len({r.segment_id >> 32 for r in ranges}) == len(scales) + 1  # every epoch holds events
        events = read_all(batch, ranges)

    got = [(e.partition, e.kafka_offset, e.key, e.data) for evs in events.values() for e in evs]
    assert Counter(got) == Counter(written)  # each event once, nothing else
    direct = direct_predecessors(described)
    assert all(set(r.predecessors) == direct[r.segment_id] for r in ranges)
    assert any(len(r.predecessors) == 2 for r in ranges)  # a merge's successor has two
    before = ancestors(direct)
    by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)  # key -> (segment epoch, number) per event
    for r, evs in events.items():
        assert all(e.segment_id == r.segment_id for e in evs)
        places = [(e.position, e.index) for e in evs]
        assert places == sorted(places) and len(set(places)) == len(places)  # segment order
        assert all(r.start_offset <= e.position < r.end_offset for e in evs)
        per_partition: dict[int, list[int]] = defaultdict(list)
        for e in evs:
            per_partition[e.partition].append(e.kafka_offset)
            by_key[e.routing_key or ""].append((r.segment_id, int(e.data.split(":")[1])))
        assert all(offsets == sorted(offsets) for offsets in per_partition.values())
    for k in KEYS:
        chain = list(dict.fromkeys(sid for sid, _ in by_key[k]))  # the key's segments as read, in range order
        # One key lies in one segment per epoch: its segments form a chain, each after the one before.
        assert all(chain[i] in before[chain[i + 1]] for i in range(len(chain) - 1))
        assert len(chain) > 1  # the key did move between segments
        # Ordering the key's events by that chain gives back its write order.
        ordered = sorted(by_key[k], key=lambda item: chain.index(item[0]))
        assert [n for _, n in ordered] == list(range(counters[k]))


def test_two_tail_cuts_bound_what_was_written_between_them(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("cuts")
        sm.create_stream("cuts", "s", initial_segments=1)
        writer = sm.create_writer("cuts", "s", StringSerializer())
        phases: list[list[tuple[str, str, Future[EventPosition]]]] = [[], [], []]
        counters: Counter[str] = Counter()
        cuts: list[StreamCut] = []
        for phase in phases:
            write_round(writer, phase, counters, 10)
            described = sm.describe_stream("cuts", "s")
            sm.split_segment("cuts", "s", described.segments[-1].segment)  # each phase spans a scale
            write_round(writer, phase, counters, 10)
            writer.flush()
            cuts.append(sm.tail_cut("cuts", "s"))
        writer.close()
        batch = BatchClient(sm)

        def between(start: StreamCut | None, end: StreamCut | None) -> Counter[tuple[str | None, str]]:
            ranges = batch.list_segments("cuts", "s", start, end)
            return Counter((e.routing_key, e.data) for evs in read_all(batch, ranges).values() for e in evs)

        def wrote(*selected: list[tuple[str, str, Future[EventPosition]]]) -> Counter[tuple[str | None, str]]:
            return Counter((k, v) for phase in selected for k, v, _ in phase)

        assert cuts[0].positions != cuts[1].positions
        assert between(cuts[0], cuts[1]) == wrote(phases[1])
        assert between(None, cuts[0]) == wrote(phases[0])
        assert between(cuts[0], cuts[2]) == wrote(phases[1], phases[2])
        assert between(cuts[1], None) == wrote(phases[2])
        assert between(None, None) == wrote(*phases)
        assert batch.list_segments("cuts", "s", cuts[1], cuts[1]) == []
        head = sm.head_cut("cuts", "s")
        assert between(head, cuts[1]) == wrote(phases[0], phases[1])

        with pytest.raises(InvalidStreamCutError):
            batch.list_segments("cuts", "s", cuts[1], cuts[0])  # the from-cut lies after the to-cut
        with pytest.raises(InvalidStreamCutError):
            batch.list_segments("cuts", "s", StreamCut("cuts", "other", dict(cuts[0].positions)))
        partial = dict(list(cuts[2].positions.items())[1:])
        with pytest.raises(InvalidStreamCutError):
            batch.list_segments("cuts", "s", None, StreamCut("cuts", "s", partial))  # a hole in the key space


def test_a_truncated_stream_lists_from_its_head(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("trunc")
        sm.create_stream("trunc", "s", initial_segments=2)
        writer = sm.create_writer("trunc", "s", StringSerializer())
        early: list[tuple[str, str, Future[EventPosition]]] = []
        late: list[tuple[str, str, Future[EventPosition]]] = []
        counters: Counter[str] = Counter()
        write_round(writer, early, counters, 5)
        sm.split_segment("trunc", "s", sm.describe_stream("trunc", "s").segments[0].segment)
        write_round(writer, early, counters, 5)
        writer.flush()
        cut = sm.tail_cut("trunc", "s")
        write_round(writer, late, counters, 5)
        writer.close()
        sm.truncate_stream(cut)
        batch = sm.create_batch_client()
        ranges = batch.list_segments("trunc", "s")
        assert all(r.start_offset == cut.positions[r.segment_id] for r in ranges if r.segment_id in cut.positions)
        got = Counter((e.routing_key, e.data) for evs in read_all(batch, ranges).values() for e in evs)
        assert got == Counter((k, v) for k, v, _ in late)
        # A cut from before the truncation lists only what the stream still holds.
        old_head = StreamCut("trunc", "s", {s.segment_id: 0 for s in sm.describe_stream("trunc", "s").history[0].created})
        assert batch.list_segments("trunc", "s", old_head) == ranges



def test_a_range_read_goes_on_across_a_server_restart(tmp_path: Any) -> None:
    data = str(tmp_path / "data")
    args = ("--native-port", str(free_port()), "--kafka-port", str(free_port()))
    server = ServerProcess(data, *args).start()
    try:
        with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
            sm.create_scope("restart")
            sm.create_stream("restart", "s", initial_segments=1)
            writer = sm.create_writer("restart", "s", StringSerializer())
            keys = [f"k{i % 7}" for i in range(2000)]
            values = [f"{i:04d}".ljust(2048, ".") for i in range(2000)]  # 4 MB: several reads
            for key, value in zip(keys, values, strict=True):
                writer.write_event(value, routing_key=key)
            writer.close()
            batch = sm.create_batch_client()
            (whole,) = batch.list_segments("restart", "s")
            events = batch.read_segment(whole, StringSerializer())
            got = [next(events)]
            server.pause()  # the reader's next fetch is outstanding when the server dies: it is sent again
            reading = threading.Thread(target=lambda: got.extend(events))
            reading.start()
            connection = sm.pool.get(sm.endpoint)
            while not connection._pending and reading.is_alive():  # wait for the fetch to be in flight
                time.sleep(0.01)
            server.kill()
            server = ServerProcess(data, *args).start()
            reading.join(120)
            assert not reading.is_alive()
        assert Counter((e.routing_key, e.data) for e in got) == Counter(zip(keys, values, strict=True))
        for key in set(keys):
            assert [e.data for e in got if e.routing_key == key] == [v for k, v in zip(keys, values, strict=True)
                                                                     if k == key]
    finally:
        server.kill()


# -- Kafka -> native: a topic written by Kafka producers -----------------------------------------------

def read_committed(bootstrap: str, topic: str, partitions: int, expected: int) -> set[Coordinates]:
    """What a read_committed consumer reads from the beginning, until every partition reported its end
    and at least ``expected`` records arrived."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: set[Coordinates] = set()
        eof: set[int] = set()
        deadline = time.monotonic() + 60
        while len(eof) < partitions or len(out) < expected:
            assert time.monotonic() < deadline, f"{len(out)} of {expected} records read"
            for m in consumer.consume(500, timeout=0.2):
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    eof.add(m.partition())
                    continue
                eof.discard(m.partition())
                out.add((m.partition(), m.offset(), m.key(), m.value() or b""))
        return out
    finally:
        consumer.close()


def test_a_kafka_topic_reads_through_the_batch_client_as_a_read_committed_consumer_reads_it(
        server: ServerProcess, uri: str) -> None:
    topic = f"batch-kafka-{uuid.uuid4().hex[:8]}"
    partitions = 4
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    expected: set[tuple[bytes, bytes]] = set()

    def kafka_python_round(tag: str) -> None:
        for codec in (None, "gzip", "snappy", "lz4", "zstd"):
            producer = KafkaProducer(bootstrap_servers=server.bootstrap, compression_type=codec, linger_ms=5)
            for i in range(60):
                key, value = f"kp-{i % 9}".encode(), f"{tag}-kafka-python-{codec}-{i}".encode()
                producer.send(topic, key=key, value=value)
                expected.add((key, value))
            producer.flush(30)
            producer.close(10)

    def confluent_round(tag: str) -> None:
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            producer = Producer({"bootstrap.servers": server.bootstrap, "compression.type": codec, "linger.ms": 5})
            for i in range(60):
                key, value = f"ck-{i % 11}".encode(), f"{tag}-confluent-{codec}-{i}".encode()
                producer.produce(topic, key=key, value=value)
                expected.add((key, value))
            assert producer.flush(30) == 0

    def transactions(tag: str) -> None:
        producer = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}",
                             "compression.type": "lz4", "linger.ms": 2})
        producer.init_transactions(30)
        for outcome in ("committed", "aborted", "committed-again"):
            producer.begin_transaction()
            for i in range(40):
                key, value = f"tk-{i % 5}".encode(), f"{tag}-{outcome}-{i}".encode()
                producer.produce(topic, key=key, value=value)
                if outcome != "aborted":
                    expected.add((key, value))
            if outcome == "aborted":
                producer.flush(30)  # the records are stored, then aborted
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)

    with StreamManager(uri) as sm:
        for round_ in ("before", "after"):
            kafka_python_round(round_)
            confluent_round(round_)
            transactions(round_)
            if round_ == "before":  # the topic's 4 segments become 3: a merge under the Kafka clients
                segments = sm.describe_stream("kafka", topic).segments
                sm.merge_segments("kafka", topic, [s.segment for s in segments[1:3]])
        consumed = read_committed(server.bootstrap, topic, partitions, len(expected))
        batch = sm.create_batch_client()
        ranges = batch.list_segments("kafka", topic)
        assert len({r.segment_id >> 32 for r in ranges}) == 2
        events = [e for evs in read_all(batch, ranges).values() for e in evs]

    read = [(e.partition, e.kafka_offset, e.key, e.data.encode()) for e in events]
    assert len(read) == len(set(read))
    assert set(read) == consumed
    assert {(k, v) for _, _, k, v in read} == expected
    assert not any(b"-aborted-" in v for _, _, _, v in read)


def test_a_range_waits_for_an_open_transaction_below_its_end(server: ServerProcess, uri: str) -> None:
    topic = f"batch-open-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}",
                         "linger.ms": 2})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=b"k", value=f"open-{i}".encode())
    producer.flush(30)  # durable, not yet committed
    with StreamManager(uri) as sm:
        batch = sm.create_batch_client()
        (whole,) = batch.list_segments("kafka", topic)  # its end lies past the open transaction
        got: list[bytes] = []
        reading = threading.Thread(target=lambda: got.extend(e.data for e in batch.read_segment(whole)))
        reading.start()
        reading.join(1.0)
        assert reading.is_alive() and got == []  # nothing of an open transaction is readable
        producer.commit_transaction(30)
        reading.join(60)
        assert not reading.is_alive()
    assert got == [f"open-{i}".encode() for i in range(10)]
