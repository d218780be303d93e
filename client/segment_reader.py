"""Reading the committed events of one segment: the unit every native reader is built from.

Reader groups and batch reads hand whole segments to readers; each reads its segment in segment
order through ``READ_EVENTS`` (``gateway/native/event_reads.py``), which answers only what a
read_committed Kafka consumer of the segment's partitions would see: no transaction markers, no
aborted transactions, nothing past a partition's last stable offset. So a native reader and a Kafka
consumer agree on every stream, whichever side wrote it.

A position in a segment is ``(offset, skip)``: ``offset`` is a batch boundary (where a stored batch
begins) and ``skip`` is how many records of that batch were already delivered. Stream cuts hold
batch boundaries only (skip 0).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from millrace.client.connection import Reply
from millrace.client.controller import ControllerClient
from millrace.protocol import messages as m
from millrace.protocol.errors import ConnectionLostError, RetriableError, WrongHostError
from millrace.protocol.events import batch_records
from millrace.protocol.messages import decode_reply
from millrace.protocol.names import segment_name

READ_BYTES = 1 << 20


class SegmentEvent:
    """One event as read from a segment, with where it is. A plain slotted class rather than a
    frozen dataclass: readers make one per event, and a frozen init costs twice as much."""

    __slots__ = ("data", "key", "partition", "kafka_offset", "timestamp_ms", "segment_id", "position", "index")

    def __init__(self, data: bytes, key: bytes | None, partition: int, kafka_offset: int, timestamp_ms: int,
                 segment_id: int, position: int, index: int) -> None:
        self.data = data  # the record's value (b"" for a null value)
        self.key = key  # the routing key's bytes (the record's key)
        self.partition = partition  # the Kafka partition holding the event
        self.kafka_offset = kafka_offset
        self.timestamp_ms = timestamp_ms
        self.segment_id = segment_id
        self.position = position  # segment offset of the envelope of the batch holding the event
        self.index = index  # the record's number within that batch

    @property
    def routing_key(self) -> str | None:
        return None if self.key is None else self.key.decode("utf-8", "replace")

    def __repr__(self) -> str:
        return (f"SegmentEvent(segment={self.segment_id}, position={self.position}, index={self.index}, "
                f"partition={self.partition}, offset={self.kafka_offset}, key={self.key!r}, {len(self.data)} bytes)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SegmentEvent) and all(
            getattr(self, name) == getattr(other, name) for name in self.__slots__)


@dataclass(frozen=True, slots=True)
class SegmentRead:
    """One answer of ``READ_EVENTS``."""

    events: list[SegmentEvent]  # in segment order; none at or beyond the read's end offset
    next_offset: int  # where the next read starts (a batch boundary)
    end_of_segment: bool  # sealed and everything read, or the end offset reached


def read_segment_events(controller: ControllerClient, scope: str, stream: str, segment_id: int, offset: int, *,
                        max_bytes: int = READ_BYTES, wait_ms: int = 0, end_offset: int | None = None) -> SegmentRead:
    """The committed events of a segment from the batch boundary ``offset`` (waiting up to
    ``wait_ms`` when there are none yet). Raises SegmentTruncatedError below the segment's start,
    SegmentNotFoundError for a deleted segment, ConnectionLostError when the connection drops."""
    request = m.ReadEvents(scope=scope, stream=stream, segment_id=segment_id, offset=offset, max_bytes=max_bytes,
                           wait_ms=wait_ms, end_offset=end_offset)
    header, payload = _routed_read(controller, segment_name(scope, stream, segment_id), request,
                                   controller.timeout + wait_ms / 1000)
    answer = decode_reply(m.ReadEventsReply, header)
    events: list[SegmentEvent] = []
    view = memoryview(payload)
    at = 0
    append = events.append
    for position, partition, first in answer.batches:
        length = 12 + int.from_bytes(view[at + 8 : at + 12], "big")
        for index, (key, value, offset, timestamp) in enumerate(batch_records(view[at : at + length])):
            if offset >= first:  # a batch straddling its partition's log start
                append(SegmentEvent(value, key, partition, offset, timestamp, segment_id, position, index))
        at += length
    return SegmentRead(events, answer.next_offset, answer.end_of_segment)


def _routed_read(controller: ControllerClient, segment: str, request: m.ReadEvents, timeout: float) -> Reply:
    """READ_EVENTS sent to the segment's owner. A read changes nothing, so after WrongHostError (the
    container moved), a lost connection (the owner died) or RetriableError (a new owner loading) it is
    sent again to the owner looked up anew, backing off, until the pool's reconnect timeout runs out
    (then the last error escapes)."""
    owners = controller.owners
    bound = controller.pool.reconnect_timeout
    deadline = time.monotonic() + bound
    delay = 0.05
    while True:
        owner = None
        try:
            owner = owners.owner(segment, max(0.0, deadline - time.monotonic()))
            return controller.pool.get(owner, patience=min(1.0, bound)).request(
                request).result(timeout)
        except (WrongHostError, ConnectionLostError, RetriableError) as exc:
            if owner is not None and not isinstance(exc, RetriableError):
                owners.forget(segment, owner)
            if time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


class SegmentEventReader:
    """Iterates one segment's committed events from ``(offset, skip)``, up to ``end_offset`` if given.

    Not thread-safe: one reader, one thread. ``offset``/``skip`` are always the resume point after
    the last event returned, so a caller may record them at any moment. Each read's events are
    decoded once into a list that ``read_next`` hands out by index (a reader's hot path: no copy or
    filtering per event)."""

    def __init__(self, controller: ControllerClient, scope: str, stream: str, segment_id: int, offset: int = 0,
                 skip: int = 0, end_offset: int | None = None, read_bytes: int = READ_BYTES) -> None:
        self.controller = controller
        self.scope = scope
        self.stream = stream
        self.segment_id = segment_id
        self.offset = offset
        self.skip = skip
        self.end_offset = end_offset
        self.read_bytes = read_bytes
        self.at_end = end_offset is not None and offset >= end_offset
        self._events: list[SegmentEvent] = []  # the last read's events ...
        self._next = 0  # ... of which those from here on are still to hand out
        self._read_to = offset  # the next read's offset (past the buffered events)
        self._ends_after_buffer = False  # the last read reached the end: finished once the buffer is

    def has_buffered(self) -> bool:
        """Whether ``read_next`` has an event in hand (it returns it without asking the server)."""
        return self._next < len(self._events)

    def read_next(self, wait_ms: int = 0) -> SegmentEvent | None:
        """The next event; None when none arrived within ``wait_ms`` or the segment is finished."""
        events, at = self._events, self._next
        while at >= len(events):
            if self.at_end:
                return None
            read_from = self._read_to
            got = read_segment_events(self.controller, self.scope, self.stream, self.segment_id, read_from,
                                      max_bytes=self.read_bytes, wait_ms=wait_ms, end_offset=self.end_offset)
            self._read_to = got.next_offset
            self._ends_after_buffer = got.end_of_segment
            events, at = got.events, 0
            # Records of the batch at the resume point that were delivered before are skipped (they
            # lead the answer: a read starts at the resume point's batch).
            offset, skip = self.offset, self.skip
            while at < len(events) and events[at].position == offset and events[at].index < skip:
                at += 1
            self._events, self._next = events, at
            if at >= len(events):
                self.offset, self.skip = got.next_offset, 0  # all before it was delivered or is invisible
                if got.end_of_segment:
                    self.at_end = True
                    return None
                if got.next_offset == read_from:
                    return None  # no progress: nothing came within wait_ms
                # Progress without events (markers or aborted batches skipped): read on.
        event = events[at]
        at += 1
        self._next = at
        if at < len(events):
            following = events[at].position
            if following == event.position:
                self.offset, self.skip = following, event.index + 1
            else:
                self.offset, self.skip = following, 0  # the batch is done: resume at the next one
        else:
            self.offset, self.skip = self._read_to, 0
            if self._ends_after_buffer:
                self.at_end = True
        return event
