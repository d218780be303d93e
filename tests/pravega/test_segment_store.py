"""Pravega's segment store wire protocol on ``--pravega-segment-port``: Pravega's official client writes
events and byte streams through it, and what it stores is Pravega's event framing, checked by the
stream layer; Kafka topics refuse it; bad frames close the connection and lose nothing acknowledged."""

from __future__ import annotations

import asyncio
import collections
import itertools
import struct
import threading
import time
import uuid

import pravega_client
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from millrace import StreamManager
from millrace.gateway.pravega_protocol import commands as wc
from millrace.protocol.errors import InvalidRequestError
from millrace.protocol.event_frames import count_frames, frame_event, split_frames
from tests.pravega.wire_client import WireClient
from tests.server_process import ServerProcess, create_topic


def segment_names(sm: StreamManager, scope: str, stream: str) -> list[str]:
    return [s.segment.name for s in sm.describe_stream(scope, stream).segments]


def stored_events(client: WireClient, segment: str) -> list[bytes]:
    data = client.read_all(segment)
    events, used = split_frames(data)
    assert used == len(data), f"{segment} holds {len(data) - used} bytes that are no whole event"
    return events


def test_hello_and_keep_alive(server: ServerProcess) -> None:
    with WireClient(server.pravega_segment_port) as client:
        assert client.call(wc.KeepAlive()) == wc.KeepAlive()


def test_a_writer_with_routing_keys_writes_every_event_once_in_key_order(
        server: ServerProcess, controller_uri: str, millrace_sm: StreamManager) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("writes")
    pravega.create_stream("writes", "orders", 3)
    writer = pravega.create_writer("writes", "orders")
    sent = [(f"key-{i % 11}", f"order {i}") for i in range(600)]
    for key, event in sent:
        writer.write_event(event, key)
    writer.flush()

    by_segment = {}
    with WireClient(server.pravega_segment_port) as client:
        for name in segment_names(millrace_sm, "writes", "orders"):
            by_segment[name] = [e.decode() for e in stored_events(client, name)]
    stored = list(itertools.chain.from_iterable(by_segment.values()))
    assert sorted(stored) == sorted(event for _, event in sent)  # no loss, no duplicate
    for key in {key for key, _ in sent}:  # one key's events in one segment, in the order written
        expected = [event for k, event in sent if k == key]
        holding = [events for events in by_segment.values() if expected[0] in events]
        assert [e for e in holding[0] if e in set(expected)] == expected
    assert sum(1 for events in by_segment.values() if events) > 1  # the keys spread over the segments


def read_with_a_reader_group(pravega: pravega_client.StreamManager, scope: str, stream: str, group: str,
                             count: int, timeout: float = 60.0) -> list[str]:
    """Every event a new reader group of one reader reads, until ``count`` of them or ``timeout``."""
    reader = pravega.create_reader_group(group, scope, stream).create_reader("reader-1")

    async def read() -> list[str]:
        got: list[str] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            piece = await asyncio.wait_for(reader.get_segment_slice_async(), timeout)
            got.extend(event.data().decode() for event in piece)
            reader.release_segment(piece)
        return got

    try:
        return asyncio.run(read())
    finally:
        reader.reader_offline()


def test_a_reader_group_reads_everything_across_a_split_and_a_merge_once(
        controller_uri: str, millrace_sm: StreamManager) -> None:
    """The writer follows its segments' successors when they are sealed under it, the reader group (its
    state in a table segment) follows them too, and no event is lost or read twice."""
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("scaled")
    pravega.create_stream("scaled", "clicks", 2)
    writer = pravega.create_writer("scaled", "clicks")
    sent: list[str] = []

    def write(count: int) -> None:
        for _ in range(count):
            event = f"click {len(sent)}"
            writer.write_event(event, f"user-{len(sent) % 13}")
            sent.append(event)
        writer.flush()

    write(150)
    first = millrace_sm.describe_stream("scaled", "clicks").segments
    millrace_sm.split_segment("scaled", "clicks", first[0].segment, 2)
    write(150)
    split = millrace_sm.describe_stream("scaled", "clicks").segments
    millrace_sm.merge_segments("scaled", "clicks", [split[0].segment, split[1].segment])
    write(150)
    got = read_with_a_reader_group(pravega, "scaled", "clicks", "everything", len(sent))
    assert sorted(got) == sorted(sent) and len(got) == len(set(got))
    for user in range(13):  # one routing key's events in the order written, across the scale
        mine = {e for i, e in enumerate(sent) if i % 13 == user}
        assert [e for e in got if e in mine] == [e for e in sent if e in mine]


def test_a_byte_stream_round_trip(controller_uri: str) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("bytes")
    pravega.create_stream("bytes", "blob", 1)
    stream = pravega.create_byte_stream("bytes", "blob")
    payload = bytes(range(256)) * 9000  # 2.3 MB: more than one read and one append
    for start in range(0, len(payload), 100_000):
        stream.write(payload[start:start + 100_000])
    stream.flush()
    assert stream.current_tail_offset() == len(payload)
    stream.seek(0, 0)
    got = bytearray()
    buffer = bytearray(300_000)
    while len(got) < len(payload):
        n = stream.readinto(buffer)
        assert n > 0
        got += buffer[:n]
    assert bytes(got) == payload
    stream.truncate(100_000)  # a segment command, done through the stream (its head moves)
    assert stream.current_head_offset() == 100_000
    stream.seek(100_000, 0)
    n = stream.readinto(buffer)
    assert bytes(buffer[:n]) == payload[100_000:100_000 + n]


def test_the_writer_id_records_the_last_event_number_so_a_reconnect_resends_nothing_stored(
        server: ServerProcess, controller_uri: str, millrace_sm: StreamManager) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("once")
    pravega.create_stream("once", "s", 1)
    (segment,) = segment_names(millrace_sm, "once", "s")
    writer = uuid.uuid4()
    with WireClient(server.pravega_segment_port) as first:
        setup = first.setup(segment, writer)
        assert isinstance(setup, wc.AppendSetup) and setup.last_event_number == -(2 ** 63)  # a new writer
        acked = first.append(writer, [b"a", b"b"], 2)
        assert acked == wc.DataAppended(writer_id=writer, event_number=2, previous_event_number=-(2 ** 63),
                                        request_id=first.request_id, current_segment_write_offset=18)
        assert first.attribute(segment, writer) == 2  # Pravega's writer attribute: readable by its id
        with WireClient(server.pravega_segment_port) as second:  # the writer reconnects
            again = second.setup(segment, writer)
            assert isinstance(again, wc.AppendSetup) and again.last_event_number == 2
            assert isinstance(second.append(writer, [b"c"], 3), wc.DataAppended)
        # The first connection still believes the writer is at 2: its next append is refused whole.
        refused = first.append(writer, [b"c-again"], 3)
        assert isinstance(refused, wc.InvalidEventNumber) and refused.event_number == 3
        assert first.closed_by_server()
    with WireClient(server.pravega_segment_port) as reader:
        assert stored_events(reader, segment) == [b"a", b"b", b"c"]


def test_a_conditional_append_at_the_wrong_offset_is_refused_and_the_writer_goes_on(
        server: ServerProcess, controller_uri: str, millrace_sm: StreamManager) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("conditional")
    pravega.create_stream("conditional", "s", 1)
    (segment,) = segment_names(millrace_sm, "conditional", "s")
    writer = uuid.uuid4()
    with WireClient(server.pravega_segment_port) as client:
        client.setup(segment, writer)
        wrong = client.call(wc.ConditionalAppend(writer_id=writer, event_number=1, expected_offset=5,
                                                 event=wc.Event(data=b"x"), request_id=client.next_id()))
        assert wrong == wc.ConditionalCheckFailed(writer_id=writer, event_number=1, request_id=client.request_id)
        right = client.call(wc.ConditionalAppend(writer_id=writer, event_number=2, expected_offset=0,
                                                 event=wc.Event(data=b"y"), request_id=client.next_id()))
        assert isinstance(right, wc.DataAppended) and right.current_segment_write_offset == 9
        assert stored_events(client, segment) == [b"y"]


def test_a_tail_read_waits_for_the_next_append(server: ServerProcess, controller_uri: str,
                                               millrace_sm: StreamManager) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("tail")
    pravega.create_stream("tail", "s", 1)
    (segment,) = segment_names(millrace_sm, "tail", "s")

    def append_later() -> None:
        time.sleep(0.5)
        with WireClient(server.pravega_segment_port) as writer_connection:
            writer = uuid.uuid4()
            writer_connection.setup(segment, writer)
            writer_connection.append(writer, [b"late"], 1)

    thread = threading.Thread(target=append_later)
    thread.start()
    with WireClient(server.pravega_segment_port) as reader:
        started = time.monotonic()
        reply = reader.read(segment, 0)
        assert isinstance(reply, wc.SegmentRead) and reply.data == frame_event(b"late")
        assert time.monotonic() - started >= 0.4
    thread.join()


def test_a_kafka_topic_refuses_pravega_writers_and_raw_commands(server: ServerProcess,
                                                                millrace_sm: StreamManager) -> None:
    create_topic(server, "pv-orders", 2)
    segment = segment_names(millrace_sm, "kafka", "pv-orders")[0]
    writer = uuid.uuid4()
    with WireClient(server.pravega_segment_port) as client:
        refused = client.setup(segment, writer)
        assert isinstance(refused, wc.OperationUnsupported)
        assert "Kafka record batches" in refused.server_stack_trace
        for command in (wc.SealSegment(request_id=client.next_id(), segment=segment),
                        wc.TruncateSegment(request_id=client.next_id(), segment=segment, truncation_offset=0),
                        wc.DeleteSegment(request_id=client.next_id(), segment=segment)):
            assert isinstance(client.call(command), wc.OperationUnsupported)
        assert client.info(segment).write_offset == 0
        # Its Kafka batches are no Pravega events: a Pravega reader is refused rather than misled.
        assert isinstance(client.read(segment, 0), wc.OperationUnsupported)
        # Appending without an answered setup is no way around it.
        client.send(wc.AppendBlockEnd(writer_id=writer, size_of_whole_events=9, data=frame_event(b"x"),
                                      num_events=1, last_event_number=1, request_id=client.next_id()))
        assert isinstance(client.receive(), wc.InvalidEventNumber)
        assert client.closed_by_server()
    with WireClient(server.pravega_segment_port) as client:
        assert client.info(segment).write_offset == 0


def test_a_pravega_events_segment_takes_only_whole_event_frames(server: ServerProcess, controller_uri: str,
                                                                millrace_sm: StreamManager) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("framed")
    pravega.create_stream("framed", "s", 1)
    (segment,) = segment_names(millrace_sm, "framed", "s")
    writer = uuid.uuid4()
    with WireClient(server.pravega_segment_port) as client:
        client.setup(segment, writer)
        assert isinstance(client.append(writer, [b"first"], 1), wc.DataAppended)
        raw = client.call(wc.AppendBlockEnd(writer_id=writer, size_of_whole_events=7, data=b"no frame",
                                            num_events=1, last_event_number=2, request_id=client.next_id()))
        assert isinstance(raw, wc.OperationUnsupported) and "whole event frames" in raw.server_stack_trace
        # A byte writer's raw appends (ConditionalBlockEnd) are refused by the events segment too.
        other = uuid.uuid4()
        client.setup(segment, other)
        as_bytes = client.call(wc.ConditionalBlockEnd(writer_id=other, event_number=1, expected_offset=13,
                                                      data=b"raw bytes", request_id=client.next_id()))
        assert isinstance(as_bytes, wc.OperationUnsupported)
    with WireClient(server.pravega_segment_port) as client:
        assert stored_events(client, segment) == [b"first"]


def test_millrace_event_writers_refuse_a_stream_pravega_writers_wrote(controller_uri: str,
                                                                       millrace_sm: StreamManager) -> None:
    """A stream is one format: Pravega's framing and Millrace's Kafka batches never share it."""
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("one-format")
    pravega.create_stream("one-format", "s", 1)
    writer = pravega.create_writer("one-format", "s")
    writer.write_event("from pravega")
    writer.flush()
    with (pytest.raises(InvalidRequestError, match="format of its own"),
          millrace_sm.create_writer("one-format", "s") as millrace_writer):
        millrace_writer.write_event(b"from millrace")
        millrace_writer.flush()


def test_frames_before_hello_are_small_and_a_wrong_version_is_closed(server: ServerProcess) -> None:
    with WireClient(server.pravega_segment_port, hello=False) as client:
        client.send(wc.KeepAlive())  # no Hello first
        assert client.closed_by_server()
    with WireClient(server.pravega_segment_port, hello=False) as client:
        client.send(struct.pack(">ii", 3, 4 << 20))  # an AppendBlock announcing 4 MiB before Hello
        assert client.closed_by_server()
    with WireClient(server.pravega_segment_port, hello=False) as client:
        assert isinstance(client.call(wc.Hello(high_version=3, low_version=1)), wc.Hello)
        assert client.closed_by_server()
    with WireClient(server.pravega_segment_port) as client:
        client.send(struct.pack(">ii", 3, 64 << 20))  # past Pravega's 16 MiB frame limit
        assert client.closed_by_server()


# -- the property: bad frames are refused or close the connection, and no acknowledged event is lost ------

_GARBAGE = st.one_of(
    st.binary(min_size=1, max_size=40).map(lambda b: ("bytes", b)),
    st.just(("unknown type", struct.pack(">ii", 12345, 0))),
    st.just(("negative length", struct.pack(">ii", 3, -5))),
    # A first byte other than 0 is never an event frame's type.
    st.binary(max_size=30).map(lambda b: ("not events", b"\x01" + b)),
    st.just(("no setup", b"")),
)
_STEP = st.one_of(st.integers(min_value=1, max_value=5).map(lambda n: ("events", n)), _GARBAGE)
_examples = itertools.count()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_STEP, min_size=2, max_size=8))
def test_bad_frames_lose_nothing_acknowledged(server: ServerProcess, controller_uri: str,
                                              millrace_sm: StreamManager,
                                              steps: list[tuple[str, object]]) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("prop")
    stream = f"s{next(_examples)}"
    pravega.create_stream("prop", stream, 1)
    (segment,) = segment_names(millrace_sm, "prop", stream)
    writer = uuid.uuid4()
    acked = 0  # the writer's last event number answered DataAppended
    port = server.pravega_segment_port

    def connect() -> tuple[WireClient, int]:
        client = WireClient(port)
        setup = client.setup(segment, writer)
        assert isinstance(setup, wc.AppendSetup)
        last = max(setup.last_event_number, 0)
        assert last >= acked  # nothing acknowledged is forgotten
        return client, last

    client, last = connect()
    try:
        for kind, value in steps:
            if kind == "events":
                assert isinstance(value, int)
                events = [f"{n}".encode() for n in range(last + 1, last + 1 + value)]
                reply = client.append(writer, events, last + value)
                assert isinstance(reply, wc.DataAppended), reply
                last = acked = last + value
                continue
            assert isinstance(value, bytes)
            if kind == "not events":
                bad = client.call(wc.AppendBlockEnd(writer_id=writer, size_of_whole_events=len(value),
                                                    data=value, num_events=1, last_event_number=last + 1,
                                                    request_id=client.next_id()))
                assert isinstance(bad, wc.OperationUnsupported), bad
                continue  # refused, and the connection serves on
            if kind == "no setup":
                client.send(wc.AppendBlockEnd(writer_id=uuid.uuid4(), size_of_whole_events=9,
                                              data=frame_event(b"z"), num_events=1, last_event_number=1,
                                              request_id=client.next_id()))
            else:
                client.send(value)
            # Garbage: the server answers with an error and closes, or waits for the rest of a frame; either
            # way this connection is done, and the writer reconnects.
            client.sock.settimeout(1.0)
            try:
                reply = client.receive()
                assert not isinstance(reply, wc.DataAppended), reply
            except (ConnectionError, OSError):
                pass
            client.sock.close()
            client, last = connect()
        data = client.read_all(segment)
        count_frames(data) if data else None  # the segment is whole event frames, whatever came
        numbers = [int(e) for e in split_frames(data)[0]]
        assert numbers == list(range(1, last + 1))  # every stored event once, in order, none acknowledged lost
        assert collections.Counter(numbers).most_common(1)[0][1] == 1 if numbers else True
    finally:
        client.sock.close()


def test_stream_names_of_a_scope_must_exist(server: ServerProcess) -> None:
    with WireClient(server.pravega_segment_port) as client:
        assert not client.info("nowhere/none/0.#epoch.0").exists
        reply = client.setup("nowhere/none/0.#epoch.0", uuid.uuid4())
        assert isinstance(reply, wc.NoSuchSegment | wc.OperationUnsupported)


pytestmark = pytest.mark.timeout(300)


def test_table_segments_version_keys_and_follow_changes(server: ServerProcess) -> None:
    from millrace.gateway.pravega_protocol import table_commands as tc

    table = "tables/config_kvtable/0.#epoch.0"  # named as Pravega's clients name them
    with WireClient(server.pravega_segment_port) as client:
        def call(command_type: type, **fields: object) -> object:
            return client.call(command_type(request_id=client.next_id(), segment=table, **fields))

        def entry(key: bytes, value: bytes, version: int = tc.NO_VERSION) -> tc.TableEntry:
            return tc.TableEntry(key=tc.TableKey(data=key, key_version=version), value=tc.TableValue(data=value))

        assert isinstance(call(tc.CreateTableSegment), wc.SegmentCreated)
        assert isinstance(call(tc.CreateTableSegment), wc.SegmentAlreadyExists)
        updated = call(tc.UpdateTableEntries, table_entries=(entry(b"a", b"1", tc.NOT_EXISTS), entry(b"b", b"2")))
        assert isinstance(updated, tc.TableEntriesUpdated)
        version_a, version_b = updated.updated_versions
        assert isinstance(call(tc.UpdateTableEntries, table_entries=(entry(b"a", b"x", tc.NOT_EXISTS),)),
                          tc.TableKeyBadVersion)
        assert isinstance(call(tc.UpdateTableEntries, table_entries=(entry(b"zz", b"x", 5),)),
                          tc.TableKeyDoesNotExist)
        again = call(tc.UpdateTableEntries, table_entries=(entry(b"a", b"3", version_a), entry(b"a", b"4", version_a)))
        assert isinstance(again, tc.TableEntriesUpdated) and len(set(again.updated_versions)) == 1  # one key
        read = call(tc.ReadTable, keys=(tc.TableKey(data=b"a"), tc.TableKey(data=b"missing")))
        assert isinstance(read, tc.TableRead)
        assert [(e.key.data, e.value.data, e.key.key_version) for e in read.entries] == [
            (b"a", b"4", again.updated_versions[0]), (b"missing", b"", tc.NOT_EXISTS)]
        assert isinstance(call(tc.RemoveTableKeys, keys=(tc.TableKey(data=b"b", key_version=version_b),)),
                          tc.TableKeysRemoved)
        keys = call(tc.ReadTableKeys, suggested_key_count=10, args=tc.TableIteratorArgs())
        assert isinstance(keys, tc.TableKeysRead) and [k.data for k in keys.keys] == [b"a"]
        after = call(tc.ReadTableKeys, suggested_key_count=10,
                     args=tc.TableIteratorArgs(continuation_token=keys.continuation_token))
        assert isinstance(after, tc.TableKeysRead) and after.keys == ()  # the end, never back at the start
        delta = call(tc.ReadTableEntriesDelta, from_position=0, suggested_entry_count=100)
        assert isinstance(delta, tc.TableEntriesDeltaRead) and delta.reached_end and not delta.should_clear
        assert [(e.key.data, e.value.data) for e in delta.entries] == [(b"a", b"4")]  # b was removed
        later = call(tc.ReadTableEntriesDelta, from_position=delta.last_position, suggested_entry_count=100)
        assert isinstance(later, tc.TableEntriesDeltaRead) and later.entries == () and later.reached_end
        # The table lives in Millrace's internal namespace: no stream segment command reaches it.
        assert not client.info(table).exists
        assert isinstance(client.read(table + "#pravega-table", 0), wc.OperationUnsupported)
        assert isinstance(call(tc.DeleteTableSegment, must_be_empty=True), tc.TableSegmentNotEmpty)
        assert isinstance(call(tc.DeleteTableSegment, must_be_empty=False), wc.SegmentDeleted)
        assert isinstance(call(tc.ReadTable, keys=(tc.TableKey(data=b"a"),)), wc.NoSuchSegment)


def test_a_block_ending_in_a_partial_event_is_stored_whole(server: ServerProcess, controller_uri: str,
                                                           millrace_sm: StreamManager) -> None:
    """Pravega's Java writer fills a block of a size it announced before knowing its events: whole
    events, then the start of one whose rest the block's end carries."""
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("blocks")
    pravega.create_stream("blocks", "s", 1)
    (segment,) = segment_names(millrace_sm, "blocks", "s")
    writer = uuid.uuid4()
    whole = frame_event(b"one") + frame_event(b"two")
    third = frame_event(b"three, split")
    with WireClient(server.pravega_segment_port) as client:
        client.setup(segment, writer)
        client.send(wc.AppendBlock(writer_id=writer, data=whole + wc.PartialEvent(data=third[:6]).encode()))
        client.send(wc.KeepAlive())  # nothing may come between a block and its end: this closes
        assert client.closed_by_server()
    with WireClient(server.pravega_segment_port) as client:
        assert client.setup(segment, writer) == wc.AppendSetup(request_id=client.request_id, segment=segment,
                                                               writer_id=writer, last_event_number=-(2 ** 63))
        client.send(wc.AppendBlock(writer_id=writer, data=whole + wc.PartialEvent(data=third[:6]).encode()))
        ended = client.call(wc.AppendBlockEnd(writer_id=writer, size_of_whole_events=len(whole), data=third[6:],
                                              num_events=3, last_event_number=3, request_id=client.next_id()))
        assert isinstance(ended, wc.DataAppended) and ended.event_number == 3
        assert stored_events(client, segment) == [b"one", b"two", b"three, split"]


def test_a_pravega_events_stream_is_truncated_only_where_an_event_begins(
        server: ServerProcess, controller_uri: str, millrace_sm: StreamManager) -> None:
    import grpc

    from millrace.gateway.pravega.proto import controller_pb2 as pb
    from millrace.gateway.pravega.proto.controller_pb2_grpc import ControllerServiceStub

    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("cut")
    pravega.create_stream("cut", "s", 1)
    writer = pravega.create_writer("cut", "s")
    for event in ("first", "second", "third"):
        writer.write_event(event)
    writer.flush()
    (segment,) = segment_names(millrace_sm, "cut", "s")
    second_starts = len(frame_event(b"first"))
    with grpc.insecure_channel(f"127.0.0.1:{server.pravega_controller_port}") as channel:
        stub = ControllerServiceStub(channel)

        def cut(offset: int) -> pb.StreamCut:
            return pb.StreamCut(streamInfo=pb.StreamInfo(scope="cut", stream="s"), cut={0: offset})

        with pytest.raises(grpc.RpcError) as inside:
            stub.truncateStream(cut(second_starts + 3))  # inside the second event
        assert inside.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert stub.truncateStream(cut(second_starts)).status == pb.UpdateStreamStatus.SUCCESS
    with WireClient(server.pravega_segment_port) as client:
        assert client.info(segment).start_offset == second_starts
        assert stored_events(client, segment) == [b"second", b"third"]


def test_a_sealed_stream_refuses_the_writer_and_is_still_read(controller_uri: str) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("sealed")
    pravega.create_stream("sealed", "s", 2)
    writer = pravega.create_writer("sealed", "s")
    sent = [f"e{i}" for i in range(20)]
    for i, event in enumerate(sent):
        writer.write_event(event, f"k{i % 5}")
    writer.flush()
    assert pravega.seal_stream("sealed", "s") is True
    with pytest.raises(ValueError, match="writing an event"):  # SegmentIsSealed, with no successor
        writer.write_event("too late", "k0")
        writer.flush()
    assert sorted(read_with_a_reader_group(pravega, "sealed", "s", "after-seal", len(sent))) == sorted(sent)
