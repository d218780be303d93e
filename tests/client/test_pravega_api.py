"""More of Pravega's client API in the native client, against a real server: event pointers that read
one event again (``fetch_event``), checkpoints the readers start by themselves
(``automatic_checkpoint_interval``), consumption-based retention held back by subscriber groups, and
watermarks from writers' noted times (``note_time``, ``commit(timestamp)``) bounding what readers read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import millrace
from millrace import (
    BytesSerializer,
    ConfigMismatchError,
    EventPointer,
    EventRead,
    EventStreamReader,
    InvalidRequestError,
    JsonSerializer,
    NoSuchEventError,
    ReinitializationRequiredError,
    RetentionPolicy,
    SegmentTruncatedError,
    StreamCut,
    StreamDataRetention,
    StreamManager,
    StringSerializer,
    TimeWindow,
    TruncatedDataError,
)
from tests.client.conftest import drain
from tests.server_process import ServerProcess
from tests.waiting import wait_for


# -- 1. event pointers ---------------------------------------------------------------------------------
def test_event_pointers_read_each_event_again(sm: StreamManager) -> None:
    scope, stream = "pointers", "orders"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=2)
    with sm.create_writer(scope, stream, StringSerializer()) as writer:
        for i in range(10):
            writer.write_event(f"single-{i}", routing_key=f"k{i % 4}")
        writer.write_events("k-batch", ["one", "two", "three"])  # one batch, in a row (after singles, perhaps)
        writer.flush()
    group = sm.create_reader_group("g", scope, stream, serializer=StringSerializer())
    reader = group.create_reader("r")
    events = drain(reader)
    assert sorted(e.data for e in events) == sorted([f"single-{i}" for i in range(10)] + ["one", "two", "three"])

    pointers = {e.data: e.event_pointer for e in events}
    assert all(isinstance(p, EventPointer) for p in pointers.values())
    batch = [pointers[name] for name in ("one", "two", "three")]
    assert len({(p.segment_id, p.offset) for p in batch if p is not None}) == 1  # same batch...
    first = batch[0].index if batch[0] is not None else -1
    assert [p.index for p in batch if p is not None] == [first, first + 1, first + 2]  # ... each by its index

    rgm = sm.reader_group_manager(scope)
    for data, pointer in pointers.items():
        assert pointer is not None and (pointer.scope, pointer.stream) == (scope, stream)
        # Serialised and back, from another handle: the same event, read again.
        again = EventPointer.from_base64(pointer.to_base64())
        assert again == pointer == EventPointer.from_bytes(pointer.to_bytes())
        assert sm.fetch_event(again, StringSerializer()) == data
        assert rgm.fetch_event(again, StringSerializer()) == data
        assert reader.fetch_event(again) == data
    assert sm.fetch_event(batch[1]) == b"two"  # bytes by default
    assert reader.read_next_event(timeout=0.2) is None  # fetching moved nothing of the reader's place

    last = batch[2]
    assert last is not None
    with pytest.raises(NoSuchEventError) as missing:  # past the batch's last record
        sm.fetch_event(EventPointer(scope, stream, last.segment_id, last.offset, last.index + 1))
    assert isinstance(missing.value, millrace.StoreError) and str(last.offset) in str(missing.value)
    with pytest.raises(ValueError):
        EventPointer.from_bytes(sm.tail_cut(scope, stream).to_bytes())  # another kind of value
    with pytest.raises(ValueError):
        StreamCut.from_bytes(last.to_bytes())

    # Truncated away: the stream no longer holds the event, and says so.
    sm.truncate_stream(sm.tail_cut(scope, stream))
    with pytest.raises(SegmentTruncatedError):
        sm.fetch_event(last)
    reader.close()


def test_checkpoint_events_have_no_pointer(sm: StreamManager) -> None:
    sm.create_scope("pointers2")
    sm.create_stream("pointers2", "s", initial_segments=1)
    group = sm.create_reader_group("g", "pointers2", "s", serializer=BytesSerializer(),
                                   automatic_checkpoint_interval=0.2)
    reader = group.create_reader("r")
    event = None
    for _ in range(50):
        event = reader.read_next_event(timeout=0.2)
        if event is not None:
            break
    assert event is not None and event.is_checkpoint and event.event_pointer is None
    reader.close()


# -- 2. automatic checkpoints --------------------------------------------------------------------------
def read_rounds(readers: list[EventStreamReader[Any]], rounds: int
                ) -> tuple[list[EventRead[Any]], dict[str, list[str]]]:
    """Call the readers in turn ``rounds`` times (each call returns at most one event, or waits 0.1 s):
    the events, and each reader's checkpoint names."""
    events: list[EventRead[Any]] = []
    checkpoints: dict[str, list[str]] = {r.reader_id: [] for r in readers}
    for _ in range(rounds):
        for reader in readers:
            event = reader.read_next_event(timeout=0.1)
            if event is None:
                continue
            if event.is_checkpoint:
                assert event.data is None and event.checkpoint_name is not None
                checkpoints[reader.reader_id].append(event.checkpoint_name)
            else:
                events.append(event)
    return events, checkpoints


def test_readers_take_automatic_checkpoints(sm: StreamManager) -> None:
    scope, stream = "autockpt", "s"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=2)
    with sm.create_writer(scope, stream, StringSerializer()) as writer:
        for i in range(40):
            writer.write_event(f"e{i}", routing_key=f"k{i % 8}")
        writer.flush()

    plain = sm.create_reader_group("plain", scope, stream, serializer=StringSerializer())
    assert plain.automatic_checkpoint_interval is None
    lone = plain.create_reader("r")
    events, checkpoints = read_rounds([lone], 70)  # 40 events, then 3 s: no checkpoint unless asked for
    assert len(events) == 40 and checkpoints == {"r": []} and plain.last_checkpoint() is None
    lone.close()

    group = sm.create_reader_group("auto", scope, stream, serializer=StringSerializer(),
                                   automatic_checkpoint_interval=0.3)
    assert group.automatic_checkpoint_interval == 0.3 and group.last_checkpoint() is None
    readers = [group.create_reader("r1"), group.create_reader("r2")]
    events, checkpoints = read_rounds(readers, 60)  # 40 events between them, then 4 s and more
    assert sorted(e.data for e in events) == sorted(f"e{i}" for i in range(40))  # each once

    # Both readers took part in the same automatic checkpoints, several of them.
    assert checkpoints["r1"] and checkpoints["r2"]
    assert all(n.startswith("_auto-") for names in checkpoints.values() for n in names)
    shared = [n for n in checkpoints["r1"] if n in checkpoints["r2"]]
    assert len(shared) >= 2, checkpoints
    # Only the newest completed automatic checkpoints are kept: they never crowd out the application's.
    assert len(group.state().completed_checkpoints) <= 2
    last = group.last_checkpoint()
    assert last is not None and last.name in shared
    # Everything was read before the last one: its cut, and the recorded cuts, are at the tail.
    tail = sm.tail_cut(scope, stream)
    assert last.cuts == {f"{scope}/{stream}": tail}
    assert group.get_stream_cuts() == {f"{scope}/{stream}": tail}

    # The interval is part of the configuration, as in Pravega's ReaderGroupConfig.
    with pytest.raises(ConfigMismatchError):
        sm.create_reader_group("auto", scope, stream, automatic_checkpoint_interval=5.0)
    with pytest.raises(ConfigMismatchError):
        sm.create_reader_group("auto", scope, stream)
    sm.create_reader_group("auto", scope, stream, automatic_checkpoint_interval=0.3).close()
    with pytest.raises(ValueError):
        sm.create_reader_group("bad", scope, stream, automatic_checkpoint_interval=0)
    for reader in readers:
        reader.close()


# -- 3. consumption-based retention --------------------------------------------------------------------
@pytest.fixture(scope="module")
def retention_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server that enforces retention every 0.2 s."""
    with ServerProcess(str(tmp_path_factory.mktemp("retention")), "--retention-check-seconds", "0.2") as running:
        yield running


def test_subscribers_hold_consumption_retention_back(retention_server: ServerProcess) -> None:
    """A stream of consumption-based retention is truncated at the lowest of its subscribers' retention
    cuts, never past one: a group releasing at a cut by hand holds the head there while another has
    released everything at its last (automatic) checkpoint; once it releases too, the head moves on."""
    scope, stream = "consume", "s"
    with StreamManager(f"tcp://127.0.0.1:{retention_server.native_port}") as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, stream, initial_segments=2, retention=RetentionPolicy.by_consumption())
        assert sm.describe_stream(scope, stream).config.retention == RetentionPolicy.by_consumption()
        written: list[str] = []

        def write(phase: str) -> StreamCut:
            with sm.create_writer(scope, stream, StringSerializer()) as writer:
                for i in range(20):
                    written.append(f"{phase}{i}")
                    writer.write_event(f"{phase}{i}", routing_key=f"k{i % 8}")
            return sm.tail_cut(scope, stream)

        write("a")
        held = write("b")  # where the manual subscriber releases up to
        tail = write("c")
        head = sm.head_cut(scope, stream)
        manual = sm.create_reader_group("manual", scope, stream, serializer=StringSerializer(),
                                        retention_type=StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT)
        auto = sm.create_reader_group("auto", scope, stream, serializer=StringSerializer(),
                                      retention_type=StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT,
                                      automatic_checkpoint_interval=0.3)
        plain = sm.create_reader_group("plain", scope, stream, serializer=StringSerializer())
        # Subscribers from their start cuts; a group without a retention type is none.
        assert sm.subscriber_cuts(scope, stream) == {f"{scope}/manual": head, f"{scope}/auto": head}
        assert manual.retention_type == StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT
        with pytest.raises(InvalidRequestError):
            auto.update_retention_stream_cut(held)  # it releases at its checkpoints only
        with pytest.raises(InvalidRequestError):
            plain.update_retention_stream_cut(held)
        sm.create_stream(scope, "other", initial_segments=1)
        with pytest.raises(InvalidRequestError):
            manual.update_retention_stream_cut(sm.tail_cut(scope, "other"))
        manual.update_retention_stream_cut(held)

        # The automatic subscriber reads everything and checkpoints after it: it releases all of it.
        reader = auto.create_reader("r")
        read: list[str] = []
        while True:
            event = reader.read_next_event(timeout=0.5)
            if event is not None and event.is_checkpoint and len(read) == len(written):
                break
            if event is not None and event.data is not None:
                read.append(event.data)
        assert sorted(read) == sorted(written)
        wait_for(lambda: sm.subscriber_cuts(scope, stream)[f"{scope}/auto"] == tail, "the release at the checkpoint")

        # Retention truncates up to the manual subscriber's cut, and no further.
        wait_for(lambda: sm.head_cut(scope, stream) == held, "retention up to the manual subscriber's cut")
        again = plain.create_reader("r")
        kept: list[str] = []
        while True:
            try:
                got = again.read_next_event(timeout=1.0)
            except TruncatedDataError:
                continue
            if got is None:
                break
            if got.data is not None:
                kept.append(got.data)
        assert sorted(kept) == sorted(f"c{i}" for i in range(20))  # all it had not released is there
        assert sm.head_cut(scope, stream) == held

        # It releases the rest: retention follows.
        manual.update_retention_stream_cut({f"{scope}/{stream}": tail})
        wait_for(lambda: sm.head_cut(scope, stream) == tail, "retention up to the tail")

        # A deleted group is no subscriber any more.
        reader.close()
        sm.delete_reader_group("auto", scope)
        assert list(sm.subscriber_cuts(scope, stream)) == [f"{scope}/manual"]
        again.close()


def test_reset_moves_a_subscribers_retention_cut(retention_server: ServerProcess) -> None:
    """``reset_to`` moves a subscriber group's retention cut with its positions: a reset backwards holds
    what the group reads again (retention stops at the new cut, and the group never meets
    TruncatedDataError), a reset forwards lets go what it skips, and a stream the reset leaves is no
    longer held by the group. Another subscriber holds the head until each reset is done."""
    scope, stream = "resets", "s"
    with StreamManager(f"tcp://127.0.0.1:{retention_server.native_port}") as sm:
        sm.create_scope(scope)
        for name, segments in ((stream, 2), ("left", 1)):
            sm.create_stream(scope, name, initial_segments=segments, retention=RetentionPolicy.by_consumption())

        def write(phase: str) -> StreamCut:
            with sm.create_writer(scope, stream, StringSerializer()) as writer:
                for i in range(20):
                    writer.write_event(f"{phase}{i}", routing_key=f"k{i % 8}")
            return sm.tail_cut(scope, stream)

        first, second = write("a"), write("b")
        manual = StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT
        holder = sm.create_reader_group("holder", scope, stream, serializer=BytesSerializer(), retention_type=manual)
        group = sm.create_reader_group("g", scope, [stream, "left"], serializer=StringSerializer(),
                                       retention_type=manual)
        reader = group.create_reader("r")
        assert len(drain(reader)) == 40
        group.update_retention_stream_cut(second)  # done with everything

        # Backwards: b is read again, so the group's cut goes back to where b begins.
        group.reset_to(first)
        assert sm.subscriber_cuts(scope, stream)[f"{scope}/g"] == first
        assert f"{scope}/g" not in sm.subscriber_cuts(scope, "left")  # the group reads it no more
        holder.update_retention_stream_cut(second)
        wait_for(lambda: sm.head_cut(scope, stream) == first, "retention up to the reset cut")
        with pytest.raises(ReinitializationRequiredError):
            reader.read_next_event(timeout=1.0)
        reader = group.create_reader("r")
        assert sorted(e.data for e in drain(reader)) == sorted(f"b{i}" for i in range(20))  # none truncated
        assert sm.head_cut(scope, stream) == first

        # Forwards: c is skipped, so the group releases it.
        third = write("c")
        group.reset_to(third)
        assert sm.subscriber_cuts(scope, stream)[f"{scope}/g"] == third
        holder.update_retention_stream_cut(third)
        wait_for(lambda: sm.head_cut(scope, stream) == third, "retention up to the skipped data's end")


# -- 4 and 5. watermarks --------------------------------------------------------------------------------
def read_with_windows(reader: EventStreamReader[Any], stream: str, count: int) -> list[TimeWindow]:
    """Read ``count`` events, checking around each that the reader's time window bounds event times:
    an event read after a window carries a time at or after its lower bound, the events read before
    a window times at or before its upper bound. The windows seen, in order."""
    windows = [reader.get_current_time_window(stream)]
    read: list[int] = []
    idle = 0
    while len(read) < count:
        event = reader.read_next_event(timeout=0.5)
        if event is None or event.data is None:
            idle += 1
            assert idle < 50, f"only {len(read)} of {count} events came"
            continue
        lower = windows[-1].lower_time_bound
        assert lower is None or event.data["t"] >= lower, (event.data, windows[-1])
        read.append(event.data["t"])
        window = reader.get_current_time_window(stream)
        assert window.upper_time_bound is None or max(read) <= window.upper_time_bound, (read, window)
        if window.lower_time_bound is not None and window.upper_time_bound is not None:
            assert window.lower_time_bound <= window.upper_time_bound
        windows.append(window)
    return windows


def assert_monotonic(windows: list[TimeWindow]) -> None:
    """Lower bounds never go back once known; upper bounds never go back while known (one becomes
    unknown once no writer has a mark ahead of the reader)."""
    for before, after in zip(windows, windows[1:], strict=False):
        was, now = before.lower_time_bound, after.lower_time_bound
        assert was is None or (now is not None and now >= was), (before, after)
        was, now = before.upper_time_bound, after.upper_time_bound
        assert was is None or now is None or now >= was, (before, after)


def test_watermarks_advance_monotonically_and_bound_event_times(sm: StreamManager) -> None:
    scope, stream = "marks", "s"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=2)
    writers = [sm.create_writer(scope, stream, JsonSerializer(), writer_id=f"w{i}") for i in range(2)]
    for rnd in range(8):  # each writer: times of round r in [100 r, 100 r + 99], then notes 100 (r + 1)
        for n, writer in enumerate(writers):
            for i in range(6):
                writer.write_event({"t": rnd * 100 + 10 * n + i}, routing_key=f"k{(i + n) % 5}")
            writer.note_time((rnd + 1) * 100)
    for writer in writers:
        writer.close()

    group = sm.create_reader_group("g", scope, stream, serializer=JsonSerializer())
    reader = group.create_reader("r")
    assert reader.get_current_time_window(stream) == TimeWindow(None, None)  # no segment held yet
    windows = read_with_windows(reader, stream, 8 * 2 * 6)
    assert_monotonic(windows)
    assert windows[1].upper_time_bound == 100  # after the first event: both writers' first marks lie ahead
    # Everything read: every writer's marks are passed, and the last says all later events come at 800.
    assert windows[-1].lower_time_bound == 800 and windows[-1].upper_time_bound is None
    assert reader.get_current_time_window(f"{scope}/{stream}").lower_time_bound == 800
    reader.close()
    # The marks are the stream's: deleting it deletes them, and the scope can go (reader group first).
    sm.delete_reader_group("g", scope)
    sm.seal_stream(scope, stream)
    sm.delete_stream(scope, stream)
    assert sm.list_streams(scope) == []
    sm.delete_scope(scope)


def test_transaction_commit_notes_its_time(sm: StreamManager) -> None:
    scope, stream = "txmarks", "s"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=1)
    with sm.create_transaction_writer(scope, stream, writer_id="txw", serializer=JsonSerializer()) as txw:
        for rnd in range(3):
            txn = txw.begin_txn()
            for i in range(5):
                txn.write_event({"t": rnd * 100 + i}, routing_key=f"k{i}")
            txn.commit(timestamp=(rnd + 1) * 100)
        aborted = txw.begin_txn()
        aborted.write_event({"t": 0}, routing_key="k0")
        aborted.abort()
    group = sm.create_reader_group("g", scope, stream, serializer=JsonSerializer())
    reader = group.create_reader("r")
    windows = read_with_windows(reader, stream, 15)
    assert_monotonic(windows)
    assert windows[1].upper_time_bound == 100  # the first commit's time lies ahead of the first events
    assert windows[-1].lower_time_bound == 300
    reader.close()
