"""``BatchClient``: a stream's history between two stream cuts as independent segment ranges, in the
manner of Pravega's batch API.

``list_segments`` turns two cuts into ``SegmentRange`` s, one per segment that holds data between them
(segment id, start and end offset); ``read_segment`` iterates one range's committed events. Ranges do
not depend on each other, so a job hands them to threads or processes and reads a stream's history in
parallel; nothing is coordinated and nothing is stored on the server. Events come in segment order
within a range; between ranges the only order is per routing key: a key's events in a segment come
before its events in the segment's successors (``SegmentRange.predecessors`` names them), which is the
order a reader group delivers them in.

Where a segment's range lies, from the stream's epoch history (``StreamDescription.history``): two
segments whose key ranges overlap are never open at the same time, so the one created in the earlier
epoch lies wholly before the other (the controller's own rule for truncation). Against the from-cut a
segment is therefore *in* it (start at the cut's offset), *before* it (it overlaps a cut segment of a
later epoch: skipped) or *after* it (start at its beginning); against the to-cut it is in it (end at the
cut's offset), after it (skipped) or before it (end at its length: it is sealed). Without a to-cut an
open segment ends at its durable length when listed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from millrace.client.connection import Reply
from millrace.client.segment_reader import SegmentEventReader
from millrace.client.serializers import Serializer
from millrace.client.streams import Segment, StreamCut, StreamDescription
from millrace.protocol import messages as m
from millrace.protocol.contracts import SegmentInfo
from millrace.protocol.errors import ConnectionLostError, InvalidStreamCutError, SegmentNotFoundError
from millrace.protocol.messages import decode_reply
from millrace.protocol.names import segment_name

if TYPE_CHECKING:
    from millrace.client.manager import StreamManager

T = TypeVar("T")

READ_WAIT_MS = 500  # a long poll while a range's end is not yet readable (an open Kafka transaction below it)
SCALE_WAIT_S = 0.05  # between looks at a stream whose scale is under way
_AFTER_CUT = -1  # _end's answer for a segment that lies wholly after the to-cut


@dataclass(frozen=True, slots=True)
class SegmentRange:
    """The bytes [start_offset, end_offset) of one segment: a unit of work for a batch job.

    Plain values, so a range can be pickled to another process. Offsets are batch boundaries."""

    scope: str
    stream: str
    segment_id: int
    start_offset: int
    end_offset: int
    key_start: float
    key_end: float
    predecessors: tuple[int, ...]  # segments sealed to make this one (empty for the stream's first epoch)

    @property
    def segment_name(self) -> str:
        return segment_name(self.scope, self.stream, self.segment_id)

    @property
    def length(self) -> int:
        """Bytes in the range (envelopes and record batches as stored), a measure of its work."""
        return self.end_offset - self.start_offset


@dataclass(frozen=True, slots=True)
class BatchEvent(Generic[T]):
    """One event of a range, deserialized, with where it is: (segment_id, position, index) is its place
    in the stream, (partition, kafka_offset) its place as a Kafka record."""

    data: T
    key: bytes | None  # the routing key's bytes (the Kafka record key)
    segment_id: int
    position: int  # segment offset of the batch holding the event
    index: int  # the event's number within that batch
    partition: int
    kafka_offset: int
    timestamp_ms: int

    @property
    def routing_key(self) -> str | None:
        return None if self.key is None else self.key.decode("utf-8", "replace")  # a Kafka key may be any bytes


class BatchClient:
    """Lists and reads the segment ranges of a stream's history. ``BatchClient(sm)`` or
    ``sm.create_batch_client()``; it uses the manager's connections, so it is closed with it.

    Safe to share between threads: every ``read_segment`` iterator has its own reader."""

    def __init__(self, manager: StreamManager) -> None:
        self.manager = manager
        self.controller = manager.controller

    # -- listing ----------------------------------------------------------------------------------
    def list_segments(self, scope: str, stream: str, from_cut: StreamCut | None = None,
                      to_cut: StreamCut | None = None) -> list[SegmentRange]:
        """The ranges holding the stream's data between ``from_cut`` (default: the head) and
        ``to_cut`` (default: the tail now), oldest epoch first, empty ranges left out.

        Data the stream no longer holds (truncated, or removed by retention) is not listed: a range
        starts no earlier than its segment's start offset now. InvalidStreamCutError for a cut of
        another stream, one naming unknown segments or not covering the key space once, or a
        from-cut that lies after the to-cut."""
        described = self._settled_description(scope, stream, wait=to_cut is None)
        segments = {s.segment_id: s for epoch in described.history for s in epoch.created}
        predecessors = _predecessors(described)
        if from_cut is None:
            start_at = dict(described.truncation) or {s.segment_id: 0 for s in described.history[0].created}
        else:
            start_at = _positions(from_cut, scope, stream, segments)
        end_at = None if to_cut is None else _positions(to_cut, scope, stream, segments)

        # Where each segment starts and, if a cut says so, ends; None: at its length.
        bounds: dict[int, tuple[int, int | None]] = {}
        for sid, segment in segments.items():
            start = _start(segment, start_at, segments)
            end = None if end_at is None else _end(segment, end_at, segments)
            if start is None or end == _AFTER_CUT:
                if start is None and end_at is not None and sid in end_at:
                    raise InvalidStreamCutError(f"segment {sid} of the to-cut lies before the from-cut")
                if start is not None and sid in start_at:
                    raise InvalidStreamCutError(f"segment {sid} of the from-cut lies after the to-cut")
                continue
            if end is not None and end < start:
                raise InvalidStreamCutError(f"segment {sid}: the from-cut's offset {start} is past the "
                                            f"to-cut's {end}")
            bounds[sid] = (start, end)

        infos = self._infos(scope, stream, list(bounds))
        ranges = []
        for sid, (start, end) in bounds.items():
            info = infos.get(sid)
            if info is None:
                continue  # deleted: it lay wholly before the stream's head
            start = max(start, info.start_offset)
            stop = info.length if end is None else min(end, info.length)
            if stop <= start:
                continue
            s = segments[sid]
            ranges.append(SegmentRange(scope, stream, sid, start, stop, s.key_start, s.key_end,
                                       predecessors.get(sid, ())))
        ranges.sort(key=lambda r: (r.segment_id >> 32, r.key_start))
        return ranges

    def _settled_description(self, scope: str, stream: str, wait: bool) -> StreamDescription:
        """The stream's description, after any scale under way: a scale moves writers to the new
        segments before the old ones are sealed and before its epoch shows in the history, so a
        tail listed mid-scale would miss what the new segments already hold."""
        described = self.manager.describe_stream(scope, stream)
        deadline = time.monotonic() + self.controller.timeout
        while wait and described.state == "scaling" and time.monotonic() < deadline:
            time.sleep(SCALE_WAIT_S)
            described = self.manager.describe_stream(scope, stream)
        return described

    def _infos(self, scope: str, stream: str, segment_ids: list[int]) -> dict[int, SegmentInfo]:
        """Each segment's start, length and sealed flag now (pipelined on one connection); a deleted
        segment is left out."""
        try:
            return self._infos_once(scope, stream, segment_ids)
        except ConnectionLostError:
            return self._infos_once(scope, stream, segment_ids)  # reads: asking again is safe

    def _infos_once(self, scope: str, stream: str, segment_ids: list[int]) -> dict[int, SegmentInfo]:
        pool, endpoint = self.controller.pool, self.controller.endpoint
        pending: list[tuple[int, Future[Reply]]] = [
            (sid, pool.request(endpoint, m.GetSegmentInfo(segment=segment_name(scope, stream, sid))))
            for sid in segment_ids
        ]
        infos: dict[int, SegmentInfo] = {}
        for sid, reply in pending:
            with contextlib.suppress(SegmentNotFoundError):  # deleted: wholly before the stream's head
                infos[sid] = decode_reply(SegmentInfo, reply.result(self.controller.timeout)[0])
        return infos

    # -- reading ------------------------------------------------------------------------------------
    def read_segment(self, segment_range: SegmentRange,
                     serializer: Serializer[T] | None = None) -> Iterator[BatchEvent[T]]:
        """The range's committed events in segment order, deserialized (bytes by default). Records of
        aborted Kafka transactions and transaction markers are not events; where an open transaction
        holds back the range's end, the iterator waits for it to finish.

        A read whose connection drops is sent again once on a new connection (reads are safe to
        repeat), so a server restart costs nothing; ConnectionLostError if that fails too,
        SegmentTruncatedError if the range was truncated away since it was listed."""
        # Per event, so bound once: the default keeps the bytes as they are without a call.
        deserialize: Callable[[bytes], Any] | None = None if serializer is None else serializer.deserialize
        r = segment_range
        reader = SegmentEventReader(self.controller, r.scope, r.stream, r.segment_id, offset=r.start_offset,
                                    end_offset=r.end_offset)
        read_next = reader.read_next
        while True:
            raw = read_next(READ_WAIT_MS)
            if raw is None:
                if reader.at_end:
                    return
                continue  # the range's end is not readable yet: an open transaction below it
            data: Any = raw.data if deserialize is None else deserialize(raw.data)
            yield BatchEvent(data, raw.key, raw.segment_id, raw.position, raw.index, raw.partition,
                             raw.kafka_offset, raw.timestamp_ms)


def _overlap(a: Segment, b: Segment) -> bool:
    return a.key_start < b.key_end and b.key_start < a.key_end


def _start(segment: Segment, cut: Mapping[int, int], segments: Mapping[int, Segment]) -> int | None:
    """Where ``segment``'s data after the from-cut starts; None if it lies wholly before the cut."""
    if segment.segment_id in cut:
        return cut[segment.segment_id]
    if any(_overlap(segment, segments[c]) and segment.epoch < segments[c].epoch for c in cut):
        return None
    return 0


def _end(segment: Segment, cut: Mapping[int, int], segments: Mapping[int, Segment]) -> int | None:
    """Where ``segment``'s data before the to-cut ends: the cut's offset, None for its whole length,
    ``_AFTER_CUT`` if it lies wholly after the cut."""
    if segment.segment_id in cut:
        return cut[segment.segment_id]
    if any(_overlap(segment, segments[c]) and segment.epoch > segments[c].epoch for c in cut):
        return _AFTER_CUT
    return None


def _positions(cut: StreamCut, scope: str, stream: str, segments: Mapping[int, Segment]) -> dict[int, int]:
    """The cut's positions, checked against the stream's history."""
    if (cut.scope, cut.stream) != (scope, stream):
        raise InvalidStreamCutError(f"a cut of {cut.scope}/{cut.stream} is not a cut of {scope}/{stream}")
    unknown = [sid for sid in cut.positions if sid not in segments]
    if unknown:
        raise InvalidStreamCutError(f"{scope}/{stream} has no segment {unknown[0]}")
    covered = 0.0
    for s in sorted((segments[sid] for sid in cut.positions), key=lambda s: s.key_start):
        if s.key_start != covered:
            raise InvalidStreamCutError(f"{cut} does not cover the key space exactly once at {covered}")
        covered = s.key_end
    if covered != 1.0:
        raise InvalidStreamCutError(f"{cut} stops at key {covered}, not 1.0")
    return dict(cut.positions)


def _predecessors(described: StreamDescription) -> dict[int, tuple[int, ...]]:
    """Each segment's predecessors: the segments its epoch sealed over an overlapping key range."""
    out: dict[int, tuple[int, ...]] = {}
    for epoch in described.history:
        for created in epoch.created:
            out[created.segment_id] = tuple(s.segment_id for s in epoch.sealed if _overlap(s, created))
    return out
