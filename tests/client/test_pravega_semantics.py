"""Pravega's reader semantics in the native client, against a real server: a truncation under a reader
raises ``TruncatedDataError`` (and reading goes on from the new head); bounded reads end exactly at
their end cuts and then report ``is_read_completed``; generated and recorded cuts, distances and
serialised cuts, positions and checkpoints; existence checks and stream tags; ConfigMismatchError and
ReinitializationRequiredError; atomic write_events; byte writers refused at write on a sealed stream."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

import millrace
import millrace.client
from millrace import (
    BytesSerializer,
    Checkpoint,
    ConfigMismatchError,
    EventRead,
    EventStreamReader,
    InvalidRequestError,
    InvalidStreamCutError,
    JsonSerializer,
    Position,
    ReinitializationRequiredError,
    StoreError,
    StreamConfiguration,
    StreamCut,
    StreamManager,
    StreamSealedError,
    TruncatedDataError,
)
from millrace.protocol.names import segment_name
from tests.client.conftest import drain
from tests.waiting import wait_for


def write(sm: StreamManager, scope: str, stream: str, values: list[str], key: str = "k") -> None:
    with sm.create_writer(scope, stream, BytesSerializer()) as writer:
        for value in values:
            writer.write_event(value.encode(), routing_key=key)
        writer.flush()






def read_through_truncations(reader: EventStreamReader[Any]) -> tuple[list[bytes], list[TruncatedDataError]]:
    """What the reader returns until it is drained, and the truncation errors on the way."""
    got: list[bytes] = []
    errors: list[TruncatedDataError] = []
    while True:
        try:
            events = drain(reader)
        except TruncatedDataError as exc:
            errors.append(exc)
            assert len(errors) < 10, errors
            continue
        got += [e.data for e in events]
        return got, errors


def test_truncation_under_a_reader_raises_then_reading_goes_on(sm: StreamManager) -> None:
    assert millrace.TruncatedDataError is millrace.client.TruncatedDataError is TruncatedDataError
    sm.create_scope("trunc")
    sm.create_stream("trunc", "log", initial_segments=1)
    write(sm, "trunc", "log", [f"a{i}" for i in range(10)])
    group = sm.create_reader_group("g", "trunc", "log", serializer=BytesSerializer())
    reader = group.create_reader("r")
    assert [e.data for e in drain(reader)] == [f"a{i}".encode() for i in range(10)]
    read_to = reader.position().segments[segment_name("trunc", "log", 0)].offset

    # Written after the reader caught up, then truncated away before it read them.
    write(sm, "trunc", "log", [f"b{i}" for i in range(50)])
    cut = sm.tail_cut("trunc", "log")
    write(sm, "trunc", "log", [f"c{i}" for i in range(5)])
    sm.truncate_stream(cut)

    with pytest.raises(TruncatedDataError) as raised:
        reader.read_next_event(timeout=5.0)
    lost = raised.value
    assert (lost.scope, lost.stream, lost.segment_id) == ("trunc", "log", 0)
    assert (lost.from_offset, lost.to_offset) == (read_to, cut.positions[0]) and read_to < cut.positions[0]
    assert f"offsets {read_to} to {cut.positions[0]}" in str(lost) and lost.segment in str(lost)
    # The next call goes on from the new head: what followed the cut, nothing before it.
    assert [e.data for e in drain(reader)] == [f"c{i}".encode() for i in range(5)]
    reader.close()


def test_truncation_past_a_scale_under_a_reader(sm: StreamManager) -> None:
    """The reader's segment is deleted by a truncation at a cut of its successors: it hears of the
    segment it lost and of the successors' data before the cut, then reads on from the cut."""
    sm.create_scope("trunc2")
    sm.create_stream("trunc2", "log", initial_segments=1)
    write(sm, "trunc2", "log", ["first"])
    group = sm.create_reader_group("g", "trunc2", "log", serializer=BytesSerializer())
    reader = group.create_reader("r")
    assert [e.data for e in drain(reader)] == [b"first"]
    write(sm, "trunc2", "log", [f"old{i}" for i in range(20)])
    sm.split_segment("trunc2", "log", sm.describe_stream("trunc2", "log").segments[0].segment)
    write(sm, "trunc2", "log", [f"mid{i}" for i in range(20)])
    cut = sm.tail_cut("trunc2", "log")
    assert all(sid >> 32 == 1 for sid in cut.positions) and any(cut.positions.values())
    write(sm, "trunc2", "log", [f"new{i}" for i in range(20)])
    sm.truncate_stream(cut)

    got, errors = read_through_truncations(reader)
    assert got == [f"new{i}".encode() for i in range(20)]  # one key: one successor, in order
    assert errors[0].segment_id == 0 and errors[0].to_offset is None and "deleted" in str(errors[0])
    lost_successors = {e.segment_id: (e.from_offset, e.to_offset) for e in errors[1:]}
    assert lost_successors == {sid: (0, off) for sid, off in cut.positions.items() if off > 0}
    reader.close()


def write_keyed(sm: StreamManager, scope: str, stream: str, count: int, written: Counter[str]) -> None:
    """``count`` events over eight keys, each ``{"key", "seq"}`` with the key's next number."""
    with sm.create_writer(scope, stream, JsonSerializer()) as writer:
        for i in range(count):
            key = f"k{i % 8}"
            written[key] += 1
            writer.write_event({"key": key, "seq": written[key]}, routing_key=key)
        writer.flush()


def read_to_completion(readers: list[EventStreamReader[Any]], expected: int) -> list[EventRead[Any]]:
    """Call the readers in turn until each has returned ``is_read_completed``; the events they returned
    (failing at once past ``expected`` of them, and after 50 rounds in a row that bring nothing)."""
    events: list[EventRead[Any]] = []
    completed: set[str] = set()
    idle = 0
    while len(completed) < len(readers):
        idle += 1
        assert idle <= 50, f"only {sorted(completed)} completed, after {len(events)} events"
        for reader in readers:
            event = reader.read_next_event(timeout=0.2)
            if event is None or event.is_checkpoint:
                continue
            if event.is_read_completed:
                assert event.data is None
                idle = 0 if reader.reader_id not in completed else idle
                completed.add(reader.reader_id)
            else:
                assert reader.reader_id not in completed, "an event after the read was complete"
                idle = 0
                events.append(event)
                assert len(events) <= expected, f"read past the end cut: {event}"
    return events


def seqs_by_key(events: list[EventRead[Any]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for e in events:
        out.setdefault(e.data["key"], []).append(e.data["seq"])
    return out


def test_bounded_reads_end_exactly_at_the_end_cuts(sm: StreamManager) -> None:
    """Two readers read from the head to a cut, then from that cut to one taken after a split: exactly
    the events between the cuts, each once and per key in order; then the read is complete."""
    scope, stream = "bounded", "orders"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=2)
    written: Counter[str] = Counter()
    write_keyed(sm, scope, stream, 40, written)
    first = sm.tail_cut(scope, stream)
    write_keyed(sm, scope, stream, 40, written)
    sm.split_segment(scope, stream, sm.describe_stream(scope, stream).segments[0].segment)
    write_keyed(sm, scope, stream, 40, written)
    second = sm.tail_cut(scope, stream)
    assert {sid >> 32 for sid in second.positions} == {0, 1}  # one segment split, one not
    write_keyed(sm, scope, stream, 40, written)  # past both cuts: never read

    to_first = sm.create_reader_group("to-first", scope, stream, end=first, serializer=JsonSerializer())
    assert to_first.unread_bytes() == sum(first.positions.values())
    readers = [to_first.create_reader("r1"), to_first.create_reader("r2")]
    events = read_to_completion(readers, 40)
    assert seqs_by_key(events) == {f"k{k}": list(range(1, 6)) for k in range(8)}
    assert to_first.state().read_completed() and to_first.unread_bytes() == 0
    assert all(getattr(r.read_next_event(timeout=0), "is_read_completed", False) for r in readers)  # and stays

    between = sm.create_reader_group("between", scope, stream, start=first, end=second,
                                     serializer=JsonSerializer())
    events = read_to_completion([between.create_reader("r1"), between.create_reader("r2")], 80)
    assert seqs_by_key(events) == {f"k{k}": list(range(6, 16)) for k in range(8)}
    assert {e.segment_id >> 32 for e in events} == {0, 1}  # through the split into its successors

    # An unbounded group never reports completion: it follows the tail.
    open_ended = sm.create_reader_group("open-ended", scope, stream, start=second, serializer=BytesSerializer())
    reader = open_ended.create_reader("r1")
    assert len(drain(reader)) == 40 and reader.read_next_event(timeout=0.2) is None

    sm.create_stream(scope, "other")
    other = sm.tail_cut(scope, "other")
    with pytest.raises(InvalidRequestError, match="does not read"):
        sm.create_reader_group("stranger", scope, stream, end=other)
    with pytest.raises(InvalidStreamCutError, match="end cut before the start cut"):
        sm.create_reader_group("backwards", scope, stream, start=second, end=first)


class ReaderThread:
    """A reader reading in a thread, as an application's (checkpoints and generated cuts need the
    readers to keep calling ``read_next_event``)."""

    def __init__(self, reader: EventStreamReader[Any]) -> None:
        self.reader = reader
        self.got: list[EventRead[Any]] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                event = self.reader.read_next_event(timeout=0.2)
                if event is not None:
                    self.got.append(event)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.errors.append(exc)

    def join(self) -> list[EventRead[Any]]:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive() and not self.errors, self.errors
        return self.got


def test_generated_and_recorded_cuts_distance_and_serialised_values(sm: StreamManager) -> None:
    """generate_stream_cuts agrees a cut with a reading reader without handing it a checkpoint event;
    get_stream_cuts gives the recorded one; get_distance measures between cuts; StreamCut, Position
    and Checkpoint survive bytes and base64, and what comes back starts groups and resets them."""
    scope, stream = "cuts", "orders"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=2)
    head = sm.head_cut(scope, stream)
    written: Counter[str] = Counter()
    write_keyed(sm, scope, stream, 40, written)
    group = sm.create_reader_group("g", scope, stream, serializer=JsonSerializer())
    running = ReaderThread(group.create_reader("r1"))
    wait_for(lambda: len(running.got) == 40, "the reader to read everything")

    cuts = group.generate_stream_cuts(timeout=30)
    tail = sm.tail_cut(scope, stream)
    assert cuts == {f"{scope}/{stream}": tail}  # the reader had read everything
    assert group.get_stream_cuts() == cuts  # recorded by the same agreement
    assert group.state().completed_checkpoints == {}  # nothing left behind in the group
    write_keyed(sm, scope, stream, 24, written)
    wait_for(lambda: len(running.got) == 64, "the reader to read on")
    got = running.join()
    assert not any(e.is_checkpoint for e in got), "a generated cut showed as a checkpoint event"
    # Nobody reads: a generated cut cannot be agreed, and giving up leaves nothing pending.
    with pytest.raises(TimeoutError):
        group.generate_stream_cuts(timeout=0.5)
    assert group.state().checkpoints == []

    # Distances: bytes between cuts, as stored.
    later = sm.tail_cut(scope, stream)
    assert sm.get_distance(head, tail) == sum(tail.positions.values())
    assert sm.get_distance(tail, later) == sum(later.positions.values()) - sum(tail.positions.values()) > 0
    assert sm.get_distance(tail, tail) == 0
    with pytest.raises(InvalidStreamCutError):
        sm.get_distance(later, tail)
    sm.create_stream(scope, "other")
    with pytest.raises(InvalidStreamCutError):
        sm.get_distance(tail, sm.tail_cut(scope, "other"))

    # Serialised values come back equal, refuse the wrong kind, and work as they were.
    position = got[-1].position
    assert StreamCut.from_bytes(tail.to_bytes()) == tail == StreamCut.from_base64(tail.to_base64())
    assert Position.from_bytes(position.to_bytes()) == position == Position.from_base64(position.to_base64())
    with pytest.raises(ValueError, match="not a serialised StreamCut"):
        StreamCut.from_bytes(position.to_bytes())
    with pytest.raises(ValueError, match="not base64"):
        Checkpoint.from_base64("not base64!")
    end = StreamCut.from_base64(cuts[f"{scope}/{stream}"].to_base64())
    bounded = sm.create_reader_group("to-the-cut", scope, stream, end=end, serializer=BytesSerializer())
    assert len(read_to_completion([bounded.create_reader("b")], 40)) == 40

    running.reader.close()
    running = ReaderThread(group.create_reader("r2"))  # from where r1 went offline: after all 64

    def events() -> list[EventRead[Any]]:
        return [e for e in running.got if not e.is_checkpoint]

    write_keyed(sm, scope, stream, 8, written)
    wait_for(lambda: len(events()) == 8, "the reader to read on")
    checkpoint = group.initiate_checkpoint("saved", timeout=30)
    stored = checkpoint.to_base64()
    assert Checkpoint.from_bytes(checkpoint.to_bytes()) == checkpoint == Checkpoint.from_base64(stored)
    write_keyed(sm, scope, stream, 8, written)
    wait_for(lambda: len(events()) == 16, "the reader to read past the checkpoint")
    assert [e.checkpoint_name for e in running.got if e.is_checkpoint] == ["saved"]
    running.join()
    after_checkpoint = seqs_by_key(events()[8:16])
    group.reset_to(Checkpoint.from_base64(stored))
    with pytest.raises(ReinitializationRequiredError):
        running.reader.read_next_event(timeout=1.0)
    running = ReaderThread(group.create_reader("r2"))  # created again, from the checkpoint
    wait_for(lambda: len(events()) == 8, "the reader to read again after the reset")
    running.join()
    assert seqs_by_key(events()) == after_checkpoint == {f"k{k}": [10] for k in range(8)}


def test_existence_checks_and_stream_tags(sm: StreamManager) -> None:
    assert not sm.check_scope_exists("tags")
    assert not sm.check_stream_exists("tags", "a")
    sm.create_scope("tags")
    assert sm.check_scope_exists("tags") and not sm.check_stream_exists("tags", "a")
    sm.create_stream("tags", "a", tags=["iot", "eu"])
    sm.create_stream("tags", "b", StreamConfiguration(initial_segments=2, tags=("iot",)))
    sm.create_stream("tags", "c")
    assert sm.check_stream_exists("tags", "a")
    assert sorted(sm.list_streams("tags", "iot")) == ["a", "b"]
    assert sm.list_streams("tags", "eu") == ["a"] and sm.list_streams("tags", "none") == []
    assert sorted(sm.list_streams("tags")) == ["a", "b", "c"]
    assert sm.get_stream_tags("tags", "a") == ("iot", "eu")
    assert sm.describe_stream("tags", "b").config == StreamConfiguration(initial_segments=2, tags=("iot",))
    # update_stream replaces the tags with the configuration's.
    sm.update_stream("tags", "c", StreamConfiguration(tags=("eu",)))
    sm.update_stream("tags", "a", StreamConfiguration(tags=("iot",)))
    assert sm.list_streams("tags", "eu") == ["c"] and sorted(sm.list_streams("tags", "iot")) == ["a", "b"]
    with pytest.raises(InvalidRequestError, match="at most 128 tags"):
        sm.create_stream("tags", "d", tags=[f"t{i}" for i in range(129)])
    with pytest.raises(InvalidRequestError, match="a tag is 1..256 characters"):
        sm.update_stream("tags", "c", StreamConfiguration(tags=("x" * 257,)))
    assert not sm.check_stream_exists("tags", "d")
    sm.seal_stream("tags", "c")
    sm.delete_stream("tags", "c")
    assert not sm.check_stream_exists("tags", "c")


def test_config_mismatch_and_reinitialization_after_a_reset(uri: str, sm: StreamManager) -> None:
    """Re-creating a group with its configuration opens it; with another one it is refused. A reset
    through another handle (another process's) takes the readers offline: each raises
    ReinitializationRequiredError until created again, and the old object cannot take the new one
    offline."""
    scope = "reinit"
    sm.create_scope(scope)
    sm.create_stream(scope, "a")
    sm.create_stream(scope, "b")
    write(sm, scope, "a", [f"a{i}" for i in range(6)])
    middle = sm.tail_cut(scope, "a")
    write(sm, scope, "a", [f"a{i}" for i in range(6, 10)])
    group = sm.create_reader_group("g", scope, "a", serializer=BytesSerializer())
    assert sm.create_reader_group("g", scope, "a").streams == [f"{scope}/a"]  # the same: opened
    others: list[dict[str, Any]] = [{"streams": ["a", "b"]}, {"streams": "a", "start": middle},
                                    {"streams": "a", "end": middle}]
    for other in others:
        with pytest.raises(ConfigMismatchError, match="exists with another configuration"):
            sm.create_reader_group("g", scope, **other)

    reader = group.create_reader("r")
    assert len(drain(reader)) == 10
    with StreamManager(uri) as elsewhere:
        elsewhere.reader_group("g", scope).reset_to(middle)
    with pytest.raises(ReinitializationRequiredError, match="create it again"):
        for _ in range(100):  # it notices at its next state refresh
            assert reader.read_next_event(timeout=0.1) is None
    assert group.online_readers() == []
    again = group.create_reader("r")
    reader.close()  # the old object: offline already, and "r" is another reader now
    assert group.online_readers() == ["r"]
    assert [e.data for e in drain(again)] == [f"a{i}".encode() for i in range(6, 10)]
    # The reset is the group's configuration now: its start is the cut.
    assert sm.create_reader_group("g", scope, "a", start=middle).streams == [f"{scope}/a"]
    with pytest.raises(ConfigMismatchError):
        sm.create_reader_group("g", scope, "a")


def test_write_events_lands_all_in_one_batch_or_none(sm: StreamManager) -> None:
    """write_events puts its events in one batch even past the writer's batch size (so they land
    together, in order), exactly once for a writer id written again, and fails whole once the stream
    is sealed."""
    scope, stream = "atomic", "orders"
    sm.create_scope(scope)
    sm.create_stream(scope, stream)
    big = [bytes([i]) * 300_000 for i in range(5)]  # 1.5 MB: more than one ordinary batch
    with sm.create_writer(scope, stream, BytesSerializer(), writer_id="atom") as writer:
        singles = [writer.write_event(b"before", routing_key="order-1") for _ in range(3)]
        together = writer.write_events("order-1", big)
        after = writer.write_event(b"after", routing_key="order-1")
        positions = together.result(30)
        assert [p.offset for p in positions] == [singles[-1].result().offset + 1 + i for i in range(5)]
        assert after.result().offset == positions[-1].offset + 1
        with pytest.raises(ValueError, match="at least one event"):
            writer.write_events("order-1", [])
        with pytest.raises(ValueError, match="at most"):
            writer.write_events("order-1", [b"x" * (5 << 20), b"y" * (4 << 20)])
        numbered = writer.write_events("order-2", [b"n1", b"n2"], event_number=1000).result(30)
    batch = sm.create_batch_client()
    read = [e for r in batch.list_segments(scope, stream) for e in batch.read_segment(r, BytesSerializer())]
    group = [e for e in read if len(e.data) == 300_000]
    assert [e.data for e in group] == big  # in order
    assert len({e.position for e in group}) == 1 and [e.index for e in group] == list(range(5))  # one batch

    # The same writer id again: the numbered events are stored once; overlapping numbers are refused.
    with sm.create_writer(scope, stream, BytesSerializer(), writer_id="atom") as again:
        with pytest.raises(ValueError, match="only some of them"):
            again.write_events("order-2", [b"n2", b"n3"], event_number=1001)
        repeated = again.write_events("order-2", [b"n1", b"n2"], event_number=1000).result(30)
        assert all(p.already_written for p in repeated) and not any(p.already_written for p in numbered)
        sm.seal_stream(scope, stream)
        refused = again.write_events("order-1", [b"late-1", b"late-2"])
        with pytest.raises(StoreError):
            refused.result(30)
    read_again = [e.data for r in batch.list_segments(scope, stream) for e in batch.read_segment(r, BytesSerializer())]
    assert read_again.count(b"n1") == 1 and b"late-1" not in read_again and len(read_again) == len(read)


def test_byte_writer_on_a_sealed_stream_fails_at_write(sm: StreamManager) -> None:
    sm.create_scope("bytes")
    sm.create_byte_stream("bytes", "log")
    early = sm.create_byte_writer("bytes", "log")  # opened before the seal
    with sm.create_byte_writer("bytes", "log") as writer:
        writer.write(b"entry 1\n")
        writer.seal()
    late = sm.create_byte_writer("bytes", "log")
    with pytest.raises(StreamSealedError, match="bytes/log is sealed"):
        late.write(b"entry 2\n")  # at once, not at flush
    late.close()  # nothing was buffered: nothing to fail
    # A writer opened before the seal learns it from its first refused append; from then on every
    # write raises too.
    early.write(b"entry 2\n")
    with pytest.raises(StreamSealedError, match="bytes/log is sealed"):
        early.flush()
    with pytest.raises(StreamSealedError):
        early.write(b"entry 3\n")
    assert sm.create_byte_reader("bytes", "log").read() == b"entry 1\n"
