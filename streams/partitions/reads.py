"""Reading a partition's batches: find the first batch through the offset index, coalesce adjacent
batches of one segment into few store reads, and strip the envelopes between them. A read that takes
folded index entries (runs of batches, ``offset_index``) walks their batch headers instead, keeping the
batches from the one holding the fetch offset on, below the end and within the byte budget.

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
from millrace.streams.partitions.formats import ENVELOPE, batches_in_span, take_batches
from millrace.streams.partitions.partition import PartitionLog

READ_RUN = 4 << 20  # the most one store read asks for


class _Run:
    """Adjacent index entries of one segment, read with one store read."""

    __slots__ = ("segment", "start", "end", "batches")

    def __init__(self, segment: str, start: int, length: int) -> None:
        self.segment = segment
        self.start = start
        self.end = start + length
        self.batches = [(0, length)]  # (offset in the run, length) of each entry

    def extend(self, position: int, length: int) -> bool:
        """Add the entry at ``position`` if it directly follows (behind its envelope)."""
        if self.end + ENVELOPE.size != position or self.end - self.start >= READ_RUN:
            return False
        self.batches.append((position - self.start, length))
        self.end = position + length
        return True


class Plan:
    """The store reads of one partition's fetch and how many bytes they return: exactly, when every
    entry is one batch; at most, when the read walks folded entries (``walk``: the fetch offset, the
    end, the byte budget and min-one, which the walk applies batch by batch)."""

    __slots__ = ("runs", "size", "walk")

    def __init__(self, runs: list[_Run], size: int, walk: tuple[int, int, int, bool] | None) -> None:
        self.runs = runs
        self.size = size
        self.walk = walk


def plan_batches(p: PartitionLog, offset: int, max_bytes: int, end: int, min_one: bool) -> Plan:
    """The store reads for whole batches of ``p`` from the one holding ``offset``, none starting at
    or past ``end``, at most ``max_bytes`` together; with ``min_one`` at least the first batch even if
    larger (KIP-74: the first partition with data always makes progress). Pure index work, so a
    fetch knows at once how much of its response budget a partition takes (at most, for folded
    entries, whose batches the read finds)."""
    index = p.index
    count = index.count
    i = index.entry_at(offset)
    runs: list[_Run] = []
    total = 0
    walks = False
    while i < len(index) and index.base[i] < end:
        length = index.length[i]
        folded = count[i] > 1
        if total + length > max_bytes and (total or not min_one) and (not folded or total >= max_bytes):
            break  # (a folded entry that does not fit whole may still give the batches that do)
        segment = p.segments[index.seg[i]].name
        position = index.pos[i]
        if not (runs and runs[-1].segment == segment and runs[-1].extend(position, length)):
            runs.append(_Run(segment, position, length))
        walks = walks or folded
        total += length
        i += 1
    return Plan(runs, total, (offset, end, max_bytes, min_one) if walks else None)


def read_plan(store: SegmentService, plan: Plan) -> defer.Deferred[bytes]:
    """The batches of a ``plan``, envelopes stripped."""
    if plan.walk is None:
        return read_runs(store, plan.runs)
    offset, end, max_bytes, min_one = plan.walk
    reads = [read_range(store, run.segment, run.start, run.end - run.start) for run in plan.runs]

    def walk(blobs: list[bytes]) -> bytes:
        parts: list[Any] = []
        total = 0
        for blob in blobs:
            taken = take_batches(memoryview(blob), offset, end, max_bytes - total, min_one and not total, parts)
            if taken < 0:  # a batch past the end or over the budget
                break
            total += taken
        return b"".join(parts)

    return defer.gatherResults(reads, consumeErrors=True).addCallback(walk)


def read_runs(store: SegmentService, runs: list[_Run]) -> defer.Deferred[bytes]:
    """The batches of planned ``runs`` of one-batch entries, envelopes stripped."""
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
    """The decoded records of index entry ``i`` of ``p`` (of each of its batches, when folded)."""
    index = p.index
    d = read_range(store, p.segments[index.seg[i]].name, index.pos[i], index.length[i])
    return d.addCallback(lambda blob: [record for _, _, batch in batches_in_span(memoryview(blob))
                                       for record in next(iter_batches(batch)).records()])


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
