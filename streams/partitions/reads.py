"""Reading a partition's batches: find the first batch through the offset index, coalesce adjacent
batches of one segment into few store reads, and strip the envelopes between them.

Runs on the reactor thread. A read served from the store's cache completes in the same reactor turn
(``to_deferred`` fires at once for a completed future); a read from long-term storage comes back
through ``to_deferred`` when the store's read pool is done.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer

from millrace.protocol.records import Record, iter_batches
from millrace.store.contracts import ReadResult, SegmentService
from millrace.store.errors import StoreError
from millrace.streams.futures import to_deferred
from millrace.streams.partitions.formats import ENVELOPE
from millrace.streams.partitions.partition import PartitionLog

READ_RUN = 4 << 20  # the most one store read asks for


class _Run:
    """Adjacent batches of one segment, read with one store read."""

    __slots__ = ("segment", "start", "end", "batches")

    def __init__(self, segment: str, start: int, length: int) -> None:
        self.segment = segment
        self.start = start
        self.end = start + length
        self.batches = [(0, length)]  # (offset in the run, length) of each batch

    def extend(self, position: int, length: int) -> bool:
        """Add the batch at ``position`` if it directly follows (behind its envelope)."""
        if self.end + ENVELOPE.size != position or self.end - self.start >= READ_RUN:
            return False
        self.batches.append((position - self.start, length))
        self.end = position + length
        return True


def plan_batches(p: PartitionLog, offset: int, max_bytes: int, end: int, min_one: bool) -> list[_Run]:
    """The store reads for whole batches of ``p`` from the one holding ``offset``, none starting at
    or past ``end``, at most ``max_bytes`` together; with ``min_one`` at least the first batch even if
    larger (KIP-74: the first partition with data always makes progress). Pure index work, so a
    fetch knows at once how much of its response budget a partition takes."""
    index = p.index
    i = index.entry_at(offset)
    runs: list[_Run] = []
    total = 0
    while i < len(index) and index.base[i] < end:
        length = index.length[i]
        if total + length > max_bytes and (total or not min_one):
            break
        segment = p.segments[index.seg[i]].name
        position = index.pos[i]
        if not (runs and runs[-1].segment == segment and runs[-1].extend(position, length)):
            runs.append(_Run(segment, position, length))
        total += length
        i += 1
    return runs


def planned_size(runs: list[_Run]) -> int:
    """The bytes ``read_runs`` will return for ``runs`` (envelopes stripped)."""
    return sum(length for run in runs for _, length in run.batches)


def read_runs(store: SegmentService, runs: list[_Run]) -> defer.Deferred[bytes]:
    """The batches of planned ``runs``, envelopes stripped."""
    if not runs:
        return defer.succeed(b"")
    if len(runs) == 1 and len(runs[0].batches) == 1:
        return read_range(store, runs[0].segment, runs[0].start, runs[0].end - runs[0].start)
    reads = [read_range(store, run.segment, run.start, run.end - run.start) for run in runs]

    def assemble(blobs: list[bytes]) -> bytes:
        parts: list[Any] = []
        for run, blob in zip(runs, blobs, strict=True):
            if len(run.batches) == 1:
                parts.append(blob)
            else:
                view = memoryview(blob)
                parts.extend(view[at : at + length] for at, length in run.batches)
        return b"".join(parts)

    return defer.gatherResults(reads, consumeErrors=True).addCallback(assemble)


def batch_records(store: SegmentService, p: PartitionLog, i: int) -> defer.Deferred[list[Record]]:
    """The decoded records of index entry ``i`` of ``p``."""
    index = p.index
    d = read_range(store, p.segments[index.seg[i]].name, index.pos[i], index.length[i])
    return d.addCallback(lambda blob: list(next(iter_batches(blob)).records()))


def read_range(store: SegmentService, segment: str, offset: int, length: int) -> defer.Deferred[bytes]:
    """All of [offset, offset + length) of a segment (the store may answer in pieces)."""
    pieces: list[bytes] = []
    result: defer.Deferred[bytes] = defer.Deferred()

    def next_piece(position: int) -> None:
        remaining = offset + length - position
        if remaining <= 0:
            result.callback(pieces[0] if len(pieces) == 1 else b"".join(pieces))
            return

        def got(r: ReadResult) -> None:
            if not r.data:
                result.errback(StoreError(f"{segment}: short read at {position}"))
                return
            pieces.append(r.data)
            next_piece(position + len(r.data))

        to_deferred(store.read(segment, position, min(remaining, READ_RUN))).addCallbacks(got, result.errback)

    next_piece(offset)
    return result
