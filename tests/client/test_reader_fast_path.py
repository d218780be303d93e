"""The reader's per-event path without per-event Python work: events made without their dataclasses'
``__init__`` equal those made with it, and each event's position, built from a place snapshot shared
by a run of one segment's events, is the reader's exact place just after it (also once later events
moved the reader on), across several segments and batches."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from millrace import EventPointer, EventRead, Position, StreamManager
from millrace.client.reader_group import SegmentPosition, _frozen


def test_frozen_gives_what_init_gives() -> None:
    pointer = EventPointer("s", "t", 3, 120, 2)
    position = Position({"s/t/3.#epoch.0": SegmentPosition(120, 3)}, 4)
    read = EventRead(b"data", "key", position, "s", "t", 3, 17, 1, 1000, event_pointer=pointer)
    fast: EventRead[Any] = _frozen(EventRead, {
        "data": b"data", "routing_key": "key", "position": position, "scope": "s", "stream": "t",
        "segment_id": 3, "kafka_offset": 17, "partition": 1, "timestamp_ms": 1000, "is_checkpoint": False,
        "checkpoint_name": None, "is_read_completed": False, "event_pointer": pointer})
    # Every field, by name: a field added to EventRead and not to the reader's fast path fails here.
    assert {f.name for f in dataclasses.fields(EventRead)} == set(vars(fast))
    assert fast == read and repr(fast) == repr(read) and type(fast) is EventRead
    assert _frozen(EventPointer, {"scope": "s", "stream": "t", "segment_id": 3, "offset": 120, "index": 2}) == pointer
    assert _frozen(Position, {"segments": position.segments, "generation": 4}) == position
    try:
        fast.data = b"other"  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("an EventRead made by _frozen must stay frozen")


def test_each_event_carries_the_readers_place_just_after_it(sm: StreamManager) -> None:
    scope, stream = "fast-path", "orders"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=3)
    with sm.create_writer(scope, stream) as writer:
        for n in range(3000):  # many batches per segment, more than STICKY_EVENTS in some
            writer.write_event(b"%d" % n, routing_key=f"key-{n % 30}")
            if n % 500 == 499:
                writer.flush()
    group = sm.create_reader_group("g", scope, stream)
    reader = group.create_reader("r")
    reads: list[tuple[EventRead[Any], Position]] = []
    while (event := reader.read_next_event(timeout=1.0)) is not None:
        if not event.is_checkpoint:
            reads.append((event, reader.position()))  # the eager place, taken at once
    assert sorted(int(e.data) for e, _ in reads) == list(range(3000))
    assert len({e.segment_id for e, _ in reads}) == 3
    # Looked at only now, after the reader moved on: each is still the place just after its event.
    for event, place in reads:
        assert event.position == place
        assert type(event.position.segments) is dict and list(event.position.segments) == list(place.segments)
        assert dataclasses.asdict(event.position) == dataclasses.asdict(place)
    reader.close()
    group.close()


def test_event_positions_follow_a_segment_given_up_mid_run(sm: StreamManager) -> None:
    """A second reader joins while the first is inside a run of one segment's events: the first gives
    a segment up at its next rebalance, and the positions of its later events no longer name it."""
    scope, stream = "fast-path-release", "orders"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=3)
    with sm.create_writer(scope, stream) as writer:
        for n in range(3000):
            writer.write_event(b"%d" % n, routing_key=f"key-{n % 30}")
    group = sm.create_reader_group("g", scope, stream)
    first = group.create_reader("first")
    reads: list[tuple[EventRead[Any], Position]] = []
    while len(reads) < 300 and (event := first.read_next_event(timeout=1.0)) is not None:
        reads.append((event, first.position()))
    assert len(first.position().segments) == 3
    second = group.create_reader("second")  # the fair share drops to 2: the first gives one up
    for _ in range(150):  # paced, so rebalances (every REBALANCE_S) fall inside the run
        event = first.read_next_event(timeout=1.0)
        assert event is not None
        reads.append((event, first.position()))
        time.sleep(0.01)
    assert len(first.position().segments) < 3  # it gave at least one up (the second has not read yet)
    for event, place in reads:
        assert event.position == place
    first.close()
    second.close()
    group.close()
