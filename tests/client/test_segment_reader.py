"""READ_EVENTS and SegmentEventReader: a segment's committed events, as a read_committed Kafka
consumer of its partitions would see them, from either kind of writer."""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer

from millrace import StreamManager
from millrace.client.segment_reader import SegmentEvent, SegmentEventReader, read_segment_events
from millrace.protocol.errors import InvalidRequestError, SegmentNotFoundError, SegmentTruncatedError
from tests.server_process import ServerProcess, create_topic


def all_segment_events(sm: StreamManager, scope: str, stream: str) -> list[SegmentEvent]:
    """Every committed event of every segment the stream ever had, segment by segment."""
    found: list[SegmentEvent] = []
    for epoch in sm.describe_stream(scope, stream).history:
        for segment in epoch.created:
            reader = SegmentEventReader(sm.controller, scope, stream, segment.segment_id)
            while (event := reader.read_next()) is not None:
                found.append(event)
    return found


def test_native_events_read_back_per_segment_in_key_order(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("reads")
        sm.create_stream("reads", "keyed", initial_segments=2)
        with sm.create_writer("reads", "keyed") as writer:
            for i in range(600):
                writer.write_event(f"{i % 7}:{i}".encode(), routing_key=f"k{i % 7}")
        events = all_segment_events(sm, "reads", "keyed")
    assert sorted(e.data for e in events) == sorted(f"{i % 7}:{i}".encode() for i in range(600))
    per_key: dict[str | None, list[int]] = defaultdict(list)
    for e in events:
        per_key[e.routing_key].append(int(e.data.split(b":")[1]))
        assert e.routing_key == f"k{e.data.split(b':')[0].decode()}"
    assert all(seq == sorted(seq) for seq in per_key.values())


def test_a_reader_resumes_inside_a_batch_and_stops_at_an_end_offset(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("reads")
        sm.create_stream("reads", "resume", initial_segments=1)
        with sm.create_writer("reads", "resume") as writer:
            futures = [writer.write_event(str(i).encode(), routing_key="one") for i in range(50)]
        segment = sm.describe_stream("reads", "resume").segments[0].segment.segment_id
        reader = SegmentEventReader(sm.controller, "reads", "resume", segment)
        first = [reader.read_next() for _ in range(7)]
        assert [e.data for e in first if e] == [str(i).encode() for i in range(7)]
        # A new reader at the first one's resume point continues exactly after the 7th event.
        resumed = SegmentEventReader(sm.controller, "reads", "resume", segment, reader.offset, reader.skip)
        rest = []
        while (event := resumed.read_next()) is not None:
            rest.append(event.data)
        assert rest == [str(i).encode() for i in range(7, 50)]
        assert not resumed.at_end  # the segment is open: more may come
        # An end offset at the batch boundary of event 20's batch: nothing from that batch on.
        boundary = futures[20].result().offset
        cut = next(e.position for e in all_segment_events(sm, "reads", "resume") if e.kafka_offset == boundary)
        bounded = SegmentEventReader(sm.controller, "reads", "resume", segment, end_offset=cut)
        got = []
        while (event := bounded.read_next()) is not None:
            got.append(event.kafka_offset)
        assert bounded.at_end and got == list(range(got[-1] + 1)) and got[-1] < boundary


def test_a_sealed_segment_ends_and_a_long_poll_is_woken(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("reads")
        sm.create_stream("reads", "sealing", initial_segments=1)
        writer = sm.create_writer("reads", "sealing")
        writer.write_event(b"first").result()
        segment = sm.describe_stream("reads", "sealing").segments[0].segment.segment_id
        reader = SegmentEventReader(sm.controller, "reads", "sealing", segment)
        assert reader.read_next().data == b"first"
        later = threading.Timer(0.3, lambda: writer.write_event(b"second"))
        later.start()
        assert reader.read_next(wait_ms=10_000).data == b"second"  # woken by the append, not the timeout
        writer.close()
        sm.seal_stream("reads", "sealing")
        assert reader.read_next(wait_ms=100) is None and reader.at_end
        # A read that takes a sealed segment's last bytes says so at once (no further read needed).
        again = SegmentEventReader(sm.controller, "reads", "sealing", segment)
        assert [again.read_next().data for _ in range(2)] == [b"first", b"second"] and again.at_end


def test_kafka_producers_compressed_batches_are_read(server: ServerProcess, uri: str) -> None:
    topic = f"compressed-{uuid.uuid4().hex[:6]}"
    create_topic(server, topic, 2)
    sent = []
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        producer = Producer({"bootstrap.servers": server.bootstrap, "compression.type": codec, "linger.ms": 20})
        for i in range(200):
            key, value = f"{codec}-{i % 5}".encode(), f"{codec}:{i}".encode() * 3
            producer.produce(topic, value, key)
            sent.append((key, value))
        assert producer.flush(30) == 0
    with StreamManager(uri) as sm:
        events = all_segment_events(sm, "kafka", topic)
    assert sorted((e.key, e.data) for e in events) == sorted(sent)


def test_aborted_and_open_transactions_are_not_read(server: ServerProcess, uri: str) -> None:
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    create_topic(server, topic, 1)
    producer = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": f"t-{topic}"})
    producer.init_transactions(30)
    for outcome in ("commit", "abort"):
        producer.begin_transaction()
        for i in range(20):
            producer.produce(topic, f"{outcome}-{i}".encode(), b"k")
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    plain = Producer({"bootstrap.servers": server.bootstrap})
    producer.begin_transaction()
    producer.produce(topic, b"open-0", b"k")
    producer.flush(30)
    plain.produce(topic, b"after-open", b"k")  # behind the open transaction: invisible until it ends
    assert plain.flush(30) == 0
    with StreamManager(uri) as sm:
        segment = sm.describe_stream("kafka", topic).segments[0].segment.segment_id
        reader = SegmentEventReader(sm.controller, "kafka", topic, segment)
        seen = []
        while (event := reader.read_next(wait_ms=200)) is not None:
            seen.append(event.data)
        assert seen == [f"commit-{i}".encode() for i in range(20)]
        producer.commit_transaction(30)
        while (event := reader.read_next(wait_ms=2000)) is not None:
            seen.append(event.data)
        assert seen[20:] == [b"open-0", b"after-open"]
    # The same as a read_committed Kafka consumer sees.
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    consumed: list[bytes] = []
    while len(consumed) < len(seen):
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        consumed.append(message.value())
    consumer.close()
    assert consumed == seen


def test_bad_positions_get_clear_errors(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("reads")
        sm.create_stream("reads", "errors", initial_segments=1)
        with sm.create_writer("reads", "errors") as writer:
            for i in range(10):
                writer.write_event(f"event-{i}".encode())
        segment = sm.describe_stream("reads", "errors").segments[0].segment.segment_id
        with pytest.raises(InvalidRequestError, match="batch boundary"):
            read_segment_events(sm.controller, "reads", "errors", segment, 3)
        with pytest.raises(SegmentNotFoundError):
            read_segment_events(sm.controller, "reads", "errors", segment + 99, 0)
        events = all_segment_events(sm, "reads", "errors")
        sm.truncate_stream(sm.tail_cut("reads", "errors"))
        with pytest.raises(SegmentTruncatedError):
            read_segment_events(sm.controller, "reads", "errors", segment, events[0].position)
        with pytest.raises(InvalidRequestError):
            read_segment_events(sm.controller, "reads", "errors", segment, -1)


def test_a_read_waiting_before_the_first_writer_gets_its_events(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("reads")
        sm.create_stream("reads", "early", initial_segments=1)
        segment = sm.describe_stream("reads", "early").segments[0].segment.segment_id
        # The stream has no partitions yet: the read waits at the empty segment's tail while the first
        # writer partitions the stream and writes, and must then read those bytes as events.
        def write() -> None:
            with sm.create_writer("reads", "early") as writer:
                writer.write_event(b"first")

        later = threading.Timer(0.3, write)
        later.start()
        got = read_segment_events(sm.controller, "reads", "early", segment, 0, wait_ms=10_000)
        later.join()
        assert [e.data for e in got.events] == [b"first"]
