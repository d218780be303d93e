"""Retention and log truncation, as pure decisions over reactor-owned partition state.

- A partition's log start moves past every durable batch older than ``retention.ms`` and past the
  oldest durable batches while the partition is larger than ``retention.bytes`` (Kafka's rules, per
  partition, whole batches only).
- A segment is truncated below the first batch any of its partitions still needs: segments may carry
  several partitions, so one partition's retention never cuts another's data.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from millrace.streams.partitions.formats import ENVELOPE
from millrace.streams.partitions.partition import PartitionLog


def retained_start(p: PartitionLog, retention_ms: int, retention_bytes: int, now_ms: int) -> int:
    """The log start ``p`` should have under the given limits (-1 = unlimited)."""
    index = p.index
    new_start = p.log_start
    durable = index.entries_below(p.high_watermark)
    if retention_ms >= 0:
        for i in range(durable):  # stops at the first batch young enough to keep
            if index.max_ts[i] >= now_ms - retention_ms:
                break
            new_start = max(new_start, index.last[i] + 1)
    if retention_bytes >= 0:
        size = index.bytes
        for i in range(durable):  # stops as soon as what remains fits
            if size <= retention_bytes:
                break
            size -= index.length[i]
            new_start = max(new_start, index.last[i] + 1)
    return new_start


def stream_retained_starts(parts: Sequence[PartitionLog], retention_ms: int, retention_bytes: int,
                           now_ms: int) -> list[int]:
    """The log start of each of a native stream's partitions under its retention policy (-1 =
    unlimited): a time limit applies to each batch as ``retention.ms`` does; a size limit applies to
    the whole stream, as a stream's policy means it, dropping the oldest durable batches (by their
    timestamps, each partition from its front) until what remains fits."""
    starts = [retained_start(p, retention_ms, -1, now_ms) for p in parts]
    if retention_bytes < 0:
        return starts
    durable = [p.index.entries_below(p.high_watermark) for p in parts]
    # Each partition's first batch at or past its (time-retained) start, and the bytes from there on.
    fronts = [p.index.entry_at(start) for p, start in zip(parts, starts, strict=True)]
    size = sum(sum(p.index.length[i] for i in range(front, len(p.index)))
               for p, front in zip(parts, fronts, strict=True))
    candidates = [(p.index.max_ts[front], k, front) for k, (p, front) in enumerate(zip(parts, fronts, strict=True))
                  if front < durable[k]]
    heapq.heapify(candidates)
    while size > retention_bytes and candidates:
        _, k, i = heapq.heappop(candidates)
        index = parts[k].index
        size -= index.length[i]
        starts[k] = max(starts[k], index.last[i] + 1)
        if i + 1 < durable[k]:
            heapq.heappush(candidates, (index.max_ts[i + 1], k, i + 1))
    return starts


def truncation_points(parts: Iterable[PartitionLog]) -> dict[str, int]:
    """Segment name -> the offset below which none of ``parts`` needs its data."""
    needed: dict[str, int] = {}
    for p in parts:
        for number, writer in enumerate(p.segments):
            # First live batch of p in this segment (its envelope), or the segment's tail when p has none.
            i = p.index.first_in_segment(number)
            first = p.index.pos[i] - ENVELOPE.size if i is not None else writer.tail
            needed[writer.name] = min(needed.get(writer.name, first), first)
    return needed
