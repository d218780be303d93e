"""Nothing a client sends reaches a segment except through the layer that owns its stream's format
(``streams/segment_gate.py``), whoever asks: these servers run without an authorizer, so every client
is as powerful as a super user, and the format rules still hold. Each test makes the attack through a
real client, checks the refusal, and reads everything acknowledged before back whole, before and after
a restart."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidTopicError

from millrace import StreamManager
from millrace.client.segments import SegmentClient
from millrace.client.streams import StreamCut
from millrace.protocol import messages as m
from millrace.protocol.contracts import FORMAT_ATTRIBUTE, AttributeUpdate, SegmentFormat
from millrace.protocol.errors import FormatViolationError, InvalidRequestError, InvalidStreamCutError
from millrace.protocol.synchronizer import KIND_STATE, encode_entry
from tests.server_process import ServerProcess, create_topic


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(str(tmp_path / "data")) as s:
        yield s


def _produce(server: ServerProcess, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all", linger_ms=0)
    for value in values:
        producer.send(topic, value, partition=0).get(30)
    producer.close()


def _consume(server: ServerProcess, topic: str, partitions: int = 1) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    got = [r.value for r in consumer]
    consumer.close()
    return got


def _update(raw: SegmentClient, segment: str, update: AttributeUpdate) -> None:
    raw.call(m.UpdateSegmentAttributes(segment=segment, attributes=(update,)))


def _segments_of(server: ServerProcess, scope: str, stream: str) -> list[str]:
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        return [s.segment.name for s in sm.describe_stream(scope, stream).segments]


def test_raw_segment_commands_never_touch_a_kafka_topic(server: ServerProcess) -> None:
    """The attack of a user with only WRITE on a topic, through the native listener: truncate its segment
    inside a batch, append garbage, seal it, merge into it, delete it. Every one is refused, and the
    topic reads back whole before and after a restart."""
    create_topic(server, "orders", 1)
    create_topic(server, "audit", 1)
    values = [f"order-{i}".encode() for i in range(10)]
    _produce(server, "orders", values)
    _produce(server, "audit", values)
    (segment,) = _segments_of(server, "kafka", "orders")
    (other,) = _segments_of(server, "kafka", "audit")
    with SegmentClient("127.0.0.1", server.native_port) as raw:
        length = raw.get_info(segment).length
        attacks = [
            lambda: raw.truncate(segment, 200),
            lambda: raw.append(segment, b"\xff" * 200),
            lambda: raw.append(segment, b"\xff" * 200, expected_offset=length),
            lambda: raw.seal(other),
            lambda: raw.merge(segment, other),
            lambda: raw.delete(segment),
            lambda: _update(raw, segment, AttributeUpdate(FORMAT_ATTRIBUTE, SegmentFormat.BYTES)),
            lambda: _update(raw, segment, AttributeUpdate("anything", 1)),
            lambda: raw.create_segment("kafka/orders/9.#epoch.0"),
            lambda: raw.append(segment + "#kafka-index", b"\x00" * 50),
        ]
        for attack in attacks:
            with pytest.raises(FormatViolationError):
                attack()
        assert raw.get_info(segment).length == length and not raw.get_info(other).sealed
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        with pytest.raises(FormatViolationError, match="never sealed"):
            sm.seal_stream("kafka", "audit")
        with pytest.raises(FormatViolationError, match="DeleteRecords"):
            sm.truncate_stream(sm.tail_cut("kafka", "orders"))
    assert _consume(server, "orders") == values and _consume(server, "audit") == values
    _produce(server, "audit", [b"after"])  # still open to producers
    server.stop()
    server.start()
    assert _consume(server, "orders") == values and _consume(server, "audit") == [*values, b"after"]


def test_internal_state_takes_no_raw_command(server: ServerProcess) -> None:
    """Tables, system streams and transaction segments change only through their own commands."""
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm, \
            SegmentClient("127.0.0.1", server.native_port) as raw:
        sm.create_scope("kv")
        table = sm.create_key_value_table("kv", "settings")
        table.put("k", b"v")
        names = [n for n in raw.list_segments() if "#kvtable" in n or n.startswith("_system/")]
        assert any("#kvtable" in n for n in names) and any(n.startswith("_system/") for n in names)
        for name in names:
            for attack in (lambda n=name: raw.append(n, b"junk"), lambda n=name: raw.truncate(n, 1),
                           lambda n=name: raw.seal(n), lambda n=name: raw.delete(n)):
                with pytest.raises(FormatViolationError):
                    attack()
        assert table.get("k")[0] == b"v"


def test_byte_streams_and_synchronizers_keep_their_formats(server: ServerProcess) -> None:
    """A byte stream takes any bytes and nothing else's commands; a synchronizer's segment only whole
    entries at the offset its writer read to; an unclaimed stream no raw bytes at all; formats never
    change, and such a stream never scales or takes events."""
    uri = f"tcp://127.0.0.1:{server.native_port}"
    with StreamManager(uri) as sm, SegmentClient("127.0.0.1", server.native_port) as raw:
        sm.create_scope("fmt")
        sm.create_stream("fmt", "plain", initial_segments=1)
        (plain,) = _segments_of(server, "fmt", "plain")
        with pytest.raises(FormatViolationError, match="no format"):
            raw.append(plain, b"raw bytes")

        sm.create_byte_stream("fmt", "bytes")
        (byte_segment,) = _segments_of(server, "fmt", "bytes")
        with sm.create_byte_writer("fmt", "bytes") as writer:
            writer.write(b"hello")
            writer.flush()
        raw.append(byte_segment, b" world")  # any bytes
        with pytest.raises(FormatViolationError, match="does not change"):
            _update(raw, byte_segment, AttributeUpdate(FORMAT_ATTRIBUTE, SegmentFormat.SYNCHRONIZER))
        with pytest.raises(FormatViolationError):
            _update(raw, byte_segment, AttributeUpdate("millrace.format", 7))
        with pytest.raises(FormatViolationError, match="never scales"):
            sm.split_segment("fmt", "bytes", sm.describe_stream("fmt", "bytes").segments[0].segment)
        with pytest.raises((FormatViolationError, InvalidRequestError)):
            sm.create_writer("fmt", "bytes").write_event(b"event", routing_key="k")

        sync = sm.create_synchronizer("fmt", "state", initial={"n": 0})
        (sync_segment,) = _segments_of(server, "fmt", "state")
        end = raw.get_info(sync_segment).length
        for attack in (lambda: raw.append(sync_segment, b"not an entry", expected_offset=end),
                       lambda: raw.append(sync_segment, encode_entry(KIND_STATE, b"n" * 8, b"{}")[:-1],
                                          expected_offset=end),
                       lambda: raw.truncate(sync_segment, 3)):
            with pytest.raises(FormatViolationError):
                attack()
        with pytest.raises(InvalidStreamCutError, match="state or a snapshot"):
            sm.truncate_stream(StreamCut("fmt", "state", {0: 5}))
        sync.update(lambda state: {"n": state["n"] + 1})
        assert sync.state == {"n": 1}
    with StreamManager(uri) as sm:
        assert sm.create_synchronizer("fmt", "state").state == {"n": 1}
        reader = sm.create_byte_reader("fmt", "bytes", timeout=1.0)
        assert reader.read(11) == b"hello world"
        reader.close()


def test_event_streams_are_cut_only_at_batch_boundaries(server: ServerProcess) -> None:
    """A native event stream's truncation lands where a batch begins: a cut inside one is refused, the
    tail and the head are taken."""
    uri = f"tcp://127.0.0.1:{server.native_port}"
    with StreamManager(uri) as sm:
        sm.create_scope("ev")
        sm.create_stream("ev", "log", initial_segments=1)
        with sm.create_writer("ev", "log") as writer:
            for i in range(20):
                writer.write_event(f"event-{i}".encode(), routing_key="k")
                writer.flush()
        tail = sm.tail_cut("ev", "log")
        (segment_id, end), = tail.positions.items()
        for inside in (1, 5, end - 1):
            with pytest.raises(InvalidStreamCutError, match="no event batch begins there"):
                sm.truncate_stream(StreamCut("ev", "log", {segment_id: inside}))
        with SegmentClient("127.0.0.1", server.native_port) as raw:
            (segment,) = _segments_of(server, "ev", "log")
            with pytest.raises(FormatViolationError, match="holds events"):
                raw.append(segment, b"\x00" * 16)
        sm.truncate_stream(tail)  # at a batch boundary: taken
        assert sm.head_cut("ev", "log") == tail


def test_reserved_names_are_refused_at_creation(server: ServerProcess) -> None:
    """Internal streams' names (a reader group's state, a stream's marks) cannot be taken by a Kafka
    topic or a user stream, so a name never passes for another kind of stream."""
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        for name in ("_RGdashboard", "_MARKorders"):
            with pytest.raises(InvalidTopicError):
                admin.create_topics([NewTopic(name, 1, 1)])
        admin.create_topics([NewTopic("_schemas", 1, 1)])  # other "_" names stay Kafka's, as in Kafka
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, max_block_ms=5000)
    with pytest.raises(Exception):  # noqa: B017,PT011 - auto-creation refuses it: no metadata ever comes
        producer.send("_RGauto", b"x").get(10)
    producer.close()
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("names")
        with SegmentClient("127.0.0.1", server.native_port) as raw, \
                pytest.raises(InvalidRequestError, match="reserved"):
            raw.call(m.CreateStream(scope="names", stream="_private"))


def test_a_topic_whose_data_does_not_parse_is_refused_and_named_not_dropped(tmp_path: Path) -> None:
    """Data that is not Kafka batches (here written by a store-level writer behind the server's back, as
    only a bug or a disk could now) never makes a topic vanish: its requests are refused with a storage
    error, the log names the segment and the offset, and every other topic keeps serving."""
    from tests.kafka.wire import local
    from tests.storehelpers import open_store

    data = str(tmp_path / "data")
    values = [f"v{i}".encode() for i in range(10)]
    server = ServerProcess(data).start()
    try:
        create_topic(server, "damaged", 1)
        create_topic(server, "healthy", 1)
        _produce(server, "damaged", values)
        _produce(server, "healthy", values)
        (segment,) = _segments_of(server, "kafka", "damaged")
        assert server.stop() == 0
        store = open_store(data)
        try:
            end = store.get_info(segment).length
            store.append(segment, b"\xff" * 200, expected_offset=end).result(10)
        finally:
            store.close()
        server.start()
        wire = local(server.kafka_port)
        try:
            fetched = wire.fetch("damaged", 0, 0)
            assert fetched.error_code == 56  # KAFKA_STORAGE_ERROR
        finally:
            wire.close()
        assert _consume(server, "healthy") == values
        _produce(server, "healthy", [b"more"])
        logged = "".join(server.output)
        assert "topic damaged cannot be loaded" in logged and f"{segment}: no Kafka batch envelope at {end}" in logged
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        try:
            assert "damaged" in admin.list_topics()  # refused, never dropped
        finally:
            admin.close()
    finally:
        server.kill()


def test_racing_claims_of_the_same_format_all_succeed(server: ServerProcess) -> None:
    """Members of a synchronizer start together, each claiming the format: the losers' claims race the
    winner's still on its way to the log, and each must still be answered as the same claim again."""
    streams, members = 6, 6
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("race")
        for i in range(streams):
            sm.create_stream("race", f"s{i}", initial_segments=1)
    segments = [_segments_of(server, "race", f"s{i}")[0] for i in range(streams)]
    start, failures = threading.Barrier(members), []

    def member() -> None:
        with SegmentClient("127.0.0.1", server.native_port) as raw:
            for segment in segments:
                start.wait(30)
                try:
                    _update(raw, segment, AttributeUpdate(FORMAT_ATTRIBUTE, SegmentFormat.SYNCHRONIZER))
                except Exception as exc:  # noqa: BLE001 - collected for the assertion
                    failures.append(exc)

    threads = [threading.Thread(target=member) for _ in range(members)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
