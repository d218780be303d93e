"""``READ_EVENTS``: the committed events of one segment from a position, for native readers.

A native reader owns whole segments (reader groups, batch reads) and reads each in segment order,
where a Kafka consumer reads partitions through the offset index. The segment holds ``envelope +
RecordBatch`` units of several partitions; this command reads a run of them and answers those a
read_committed Kafka consumer of their partitions would see, so both kinds of reader agree on
every stream:

- a batch counts only if its partition's offset index holds it at this very place (the index
  records every append, in flight or durable): anything else is a leftover of a crash that the
  partition dropped on recovery, or lies wholly below the partition's log start, and is skipped;
- control batches (transaction markers) and the batches of aborted transactions are skipped;
- the first batch at or past its partition's last stable offset (not yet durable, or in an open
  transaction) ends the answer: what follows it in the segment waits too, so a segment's events
  come out in segment order and per partition in offset order. With nothing visible the command
  long-polls the partition up to ``wait_ms``.

The answer's payload is the visible batches as stored (envelopes stripped; baseOffset is the
Kafka offset), its header gives each batch's envelope position, partition and first visible offset
(a batch straddling the log start), ``next_offset`` (the batch boundary to read from next) and
``end_of_segment`` (sealed and read, or ``end_offset`` reached). All partition state is read on the
reactor thread, the owner of it; the store reads come back through ``to_deferred``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer

from millrace.gateway.native.host import NativeHost
from millrace.gateway.native.table_commands import Answer
from millrace.protocol import messages as m
from millrace.protocol.errors import InvalidRequestError, RetriableError, WrongHostError
from millrace.protocol.names import segment_name
from millrace.store.contracts import ReadResult
from millrace.streams.futures import to_deferred
from millrace.streams.partitions import PartitionError, PartitionLog
from millrace.streams.partitions.formats import (
    CONTROL_ATTRIBUTE,
    ENVELOPE,
    ENVELOPE_MAGIC,
    ENVELOPE_VERSION,
    TRANSACTIONAL_ATTRIBUTE,
)
from millrace.streams.partitions.reads import read_range
from millrace.streams.resolve import record_logs
from millrace.streams.topics import TopicInfo

MAX_READ_BYTES = 8 << 20
# From a batch's first byte: baseOffset, batchLength, then (at 21) attributes and (at 43) producerId.
_BASE_AND_LENGTH = struct.Struct(">qi")
_ATTRIBUTES = struct.Struct(">h")
_PRODUCER_ID = struct.Struct(">q")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_ATTRIBUTES_AT = 21
_PRODUCER_ID_AT = 43
_BATCH_HEADER_SIZE = 61


@dataclass
class _Scan:
    """What one pass over the bytes read found."""

    batches: list[list[int]] = field(default_factory=list)  # [envelope position, partition, first offset]
    views: list[memoryview] = field(default_factory=list)
    next_offset: int = 0
    blocked_on: PartitionLog | None = None  # the partition whose unstable batch ended the scan
    short: int = 0  # bytes needed to see the whole first batch, when the read cut it


def _held_range(p: PartitionLog, base: int, last: int, position: int, segment: str) -> tuple[int, int] | None:
    """(first offset a reader may see, last offset) of the batch at ``position``: the first is its
    base or the log start it straddles; None when the partition does not hold that batch there (its
    index entry, or the folded entry it lies inside, is elsewhere)."""
    index = p.index
    i = index.entry_at(base)
    if i >= len(index) or p.segments[index.seg[i]].name != segment:
        return None
    if index.count[i] == 1:
        if index.base[i] != base or index.pos[i] != position:
            return None
    elif not (index.base[i] <= base and last <= index.last[i]
              and index.pos[i] <= position < index.pos[i] + index.length[i]):
        return None
    return max(base, p.log_start), last


def _scan(data: bytes, start: int, segment: str, parts: list[PartitionLog], end_offset: int | None) -> _Scan:
    view = memoryview(data)
    scan = _Scan(next_offset=start)
    at = 0
    while at + ENVELOPE.size <= len(view):
        position = start + at
        if end_offset is not None and position >= end_offset:
            break
        magic, version, partition, length = ENVELOPE.unpack_from(view, at)
        if magic != ENVELOPE_MAGIC or version != ENVELOPE_VERSION or not 0 <= partition < len(parts):
            raise InvalidRequestError(f"{segment}: no event batch at offset {position} (not a batch boundary, "
                                      "or not an event stream)")
        batch_at = at + ENVELOPE.size
        if batch_at + length > len(view):
            if not scan.batches:
                scan.short = ENVELOPE.size + length
            break
        if length < _BATCH_HEADER_SIZE:
            raise InvalidRequestError(f"{segment}: batch at {position} is shorter than its header")
        p = parts[partition]
        base, _ = _BASE_AND_LENGTH.unpack_from(view, batch_at)
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(view, batch_at + _LAST_OFFSET_DELTA_AT)
        held = _held_range(p, base, base + delta, position + ENVELOPE.size, segment)
        if held is not None:
            if base >= p.txns.last_stable(p.high_watermark):
                scan.blocked_on = p
                break
            first, last = held
            (attributes,) = _ATTRIBUTES.unpack_from(view, batch_at + _ATTRIBUTES_AT)
            skip = bool(attributes & CONTROL_ATTRIBUTE) or (
                bool(attributes & TRANSACTIONAL_ATTRIBUTE)
                and p.txns.in_aborted(_PRODUCER_ID.unpack_from(view, batch_at + _PRODUCER_ID_AT)[0], base))
            if not skip and first <= last:
                scan.batches.append([position, partition, first])
                scan.views.append(view[batch_at : batch_at + length])
        at = batch_at + length
        scan.next_offset = start + at
    return scan


def read_events(broker: NativeHost, record: Callable[[], TopicInfo | None], scope: str, stream: str, segment_id: int,
                offset: int, max_bytes: int, wait_ms: int, end_offset: int | None) -> defer.Deferred[Answer]:
    """The READ_EVENTS answer (reactor thread); see the module docstring. ``record`` looks up the
    stream's partition record (None until its first event writer opens)."""
    segment = segment_name(scope, stream, segment_id)
    served_here(broker, segment)
    max_bytes = max(ENVELOPE.size + _BATCH_HEADER_SIZE, min(max_bytes, MAX_READ_BYTES))
    deadline = time.monotonic() + wait_ms / 1000

    def answer(scan: _Scan, end_of_segment: bool) -> Answer:
        header = m.ReadEventsReply(offset=offset, next_offset=scan.next_offset, end_of_segment=end_of_segment,
                                   batches=tuple((b[0], b[1], b[2]) for b in scan.batches))
        return Answer(header, b"".join(scan.views) if len(scan.views) != 1 else bytes(scan.views[0]))

    if end_offset is not None and offset >= end_offset:
        return defer.succeed(answer(_Scan(next_offset=offset), True))

    def attempt(parts: list[PartitionLog]) -> defer.Deferred[Answer]:
        _check_loaded(broker, segment, parts)
        remaining = max(0.0, deadline - time.monotonic())
        # The store waits at the tail; a scan blocked on an unstable batch waits on its partition below.
        read = to_deferred(broker.store.read(segment, offset, max_bytes, remaining))

        def scanned(result: ReadResult, data: bytes | None = None) -> Any:
            raw = data if data is not None else result.data
            if not raw:
                return answer(_Scan(next_offset=offset), result.end_of_segment)
            if not parts:
                # The first event writer may have partitioned the stream while this read waited.
                found = record()
                if found is None:
                    raise InvalidRequestError(f"{scope}/{stream} holds data that was not written as events")
                return record_logs(broker, found).addCallback(lambda logs: attempt(logs[1]))
            scan = _scan(raw, offset, segment, parts, end_offset)
            if scan.short and data is None:  # the first batch is larger than one read: read it whole
                return read_range(broker.store, segment, offset, scan.short).addCallback(
                    lambda whole: scanned(result, whole))
            reached_end = end_offset is not None and scan.next_offset >= end_offset
            if scan.batches or scan.next_offset != offset or reached_end:
                if not reached_end and scan.next_offset == offset + len(raw) and len(raw) < max_bytes:
                    # Everything read was taken and the read stopped short of max_bytes: perhaps the
                    # sealed end.
                    return _sealed_at(broker, segment, scan.next_offset).addCallback(
                        lambda sealed: answer(scan, sealed))
                return answer(scan, reached_end)
            left = deadline - time.monotonic()
            if scan.blocked_on is None or left <= 0:
                return answer(scan, False)
            # Nothing visible yet: wait for the blocking partition's watermark or marker to move.
            return broker.partitions.wait_for_data([scan.blocked_on], left).addCallback(lambda _: attempt(parts))

        return read.addCallback(scanned)

    topic = record()
    if topic is None:
        return attempt([])
    return record_logs(broker, topic).addCallback(lambda found: attempt(found[1]))


def served_here(broker: NativeHost, segment: str) -> None:
    """On a cluster node, WrongHostError unless this node runs the container of ``segment``, whose owner
    leads the partitions it is the open segment of: the client then asks for the owner and goes there (a
    single server serves every segment). Another node's copy of those partitions is stale (its index
    lacks later batches, its high watermark never moves), so reading or appending there would wait for
    nothing (or pass batches by)."""
    cluster = broker.cluster
    if cluster is not None and cluster.terms().get(cluster.container_of(segment)) is None:
        raise WrongHostError(f"{segment} is not served by this node", segment)


def _check_loaded(broker: NativeHost, segment: str, parts: list[PartitionLog]) -> None:
    """On a cluster node: the partitions whose open segment this is must hold state of the node's current
    term of its container (``check_leader``, which starts the reload otherwise), since a copy loaded
    before the term lacks what the previous owner appended: RetriableError (or WrongHostError once the
    container left) meanwhile."""
    if broker.cluster is None:
        return
    for p in parts:
        if p.writer is not None and p.writer.name == segment:
            try:
                broker.partitions.check_leader(p)
            except PartitionError as exc:
                served_here(broker, segment)
                raise RetriableError(str(exc)) from None


def _sealed_at(broker: NativeHost, segment: str, offset: int) -> defer.Deferred[bool]:
    """Whether ``segment`` is sealed and ends at ``offset`` (a read that ended exactly at a sealed tail
    is not told so by the store until the next read). On a cluster node the router's future: the
    segment's container may have moved to another node since the read began, and the reactor must not
    wait for that node's answer."""
    info = to_deferred(broker.store.get_info_future(segment))  # a single server's: completed at once
    return info.addCallback(lambda found: found.sealed and found.length == offset)
