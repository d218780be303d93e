"""One partition's offset index: offset -> (segment, position, length), in compact arrays.

An entry covers one batch or, once folded, a run of batches that lie back to back in one segment
(``envelope + batch`` after ``envelope + batch``, nothing of another partition between): its base is the
first batch's base offset, its last the last batch's last offset, its position the first batch's (after
its envelope), its length every byte from there to the end of the last batch. Folding is how an infinite
stream lives in finite memory, as Kafka's sparse ``.index`` files (an entry per ``index.interval.bytes``)
let it: the newest ``DENSE_TAIL`` entries stay one batch each, so reads at the tail find their batch at
once; older durable entries fold into runs of up to ``FOLD_BYTES``, and a read that starts inside a run
walks its batch headers (``formats.take_batches``; ``batches_in_span`` where records are decoded). The
index segments keep one entry per batch.

Invariants (checked by the partition that owns the index, relied on by every search here):
- entries are in offset order and dense: ``base[i] == last[i - 1] + 1``;
- segment numbers never decrease along the index (a partition only moves forward, to successors);
- ``running_max_ts[i]`` is the largest ``max_ts`` of entries ``0..i``, so a timestamp search is a bisect;
- ``count[i]`` batches lie in entry ``i``; an entry of several batches was durable when it was folded
  (``fold`` is told the high watermark), so no failed append is ever inside one.

Owned by the reactor thread once the partition is installed (see ``millrace.streams.futures``).
"""

from __future__ import annotations

import bisect
from array import array

from millrace.streams.partitions.formats import ENVELOPE

DENSE_TAIL = 64  # the newest entries, never folded: tail reads find their batch without a walk
FOLD_BYTES = 64 << 10  # the most bytes an entry folds (a batch this large or larger stays alone)


class OffsetIndex:
    __slots__ = ("base", "last", "seg", "pos", "length", "max_ts", "running_max_ts", "count", "bytes", "_dense_from")

    def __init__(self) -> None:
        self.base = array("q")
        self.last = array("q")
        self.seg = array("i")  # number of the segment in the owning partition's segment list
        self.pos = array("q")  # of the entry's first batch (after its envelope) in that segment
        self.length = array("i")  # from that batch's first byte to the end of the entry's last batch
        self.max_ts = array("q")
        self.running_max_ts = array("q")
        self.count = array("i")  # batches in the entry
        self.bytes = 0  # total bytes indexed (the envelopes inside folded entries included)
        self._dense_from = 0  # entries from here on were never considered for folding

    COLUMNS = ("base", "last", "seg", "pos", "length", "max_ts", "running_max_ts", "count")

    def __len__(self) -> int:
        return len(self.base)

    def columns(self) -> list[array[int]]:
        """The index's arrays, in ``COLUMNS`` order (a partition-state snapshot stores them as they are)."""
        return [getattr(self, name) for name in self.COLUMNS]

    @property
    def dense_from(self) -> int:
        """Entries from here on were never considered for folding."""
        return self._dense_from

    @classmethod
    def restored(cls, columns: list[array[int]], dense_from: int) -> OffsetIndex:
        """The index whose ``columns()`` these were (the invariants held when they were taken)."""
        index = cls()
        for name, column in zip(cls.COLUMNS, columns, strict=True):
            setattr(index, name, column)
        index.bytes = sum(index.length)
        index._dense_from = dense_from
        return index

    @property
    def next_offset(self) -> int | None:
        """The offset after the last indexed batch (None when empty)."""
        return self.last[-1] + 1 if self.last else None

    @property
    def batches(self) -> int:
        """How many batches the index covers."""
        return sum(self.count)

    def append(self, seg: int, base: int, last: int, pos: int, length: int, max_ts: int, count: int = 1) -> None:
        self.base.append(base)
        self.last.append(last)
        self.seg.append(seg)
        self.pos.append(pos)
        self.length.append(length)
        self.max_ts.append(max_ts)
        previous = self.running_max_ts[-1] if self.running_max_ts else -1
        self.running_max_ts.append(max(previous, max_ts))
        self.count.append(count)
        self.bytes += length

    def fold(self, durable_end: int) -> None:
        """Fold the entries older than the newest ``DENSE_TAIL`` that end below ``durable_end`` (the high
        watermark) into the entry before them where they lie right behind it in its segment. Works a
        ``DENSE_TAIL`` of entries at a time, so an append pays a small share of one pass."""
        start = self._dense_from
        stop = len(self.base) - DENSE_TAIL
        if stop - start < DENSE_TAIL:
            return
        if self.last[stop - 1] >= durable_end:  # only durable entries fold (``last`` is sorted)
            stop = bisect.bisect_left(self.last, durable_end, start, stop)
            if stop == start:
                return
        lo = start - 1 if start else 0  # the entry before the region may take in the region's first
        columns = (self.base, self.last, self.seg, self.pos, self.length, self.max_ts, self.count)
        out: list[list[int]] = []
        for entry in zip(*(column[lo:stop] for column in columns), strict=True):
            if out:
                prev = out[-1]
                _, last, seg, pos, length, max_ts, count = entry
                span = pos + length - prev[3]
                if seg == prev[2] and pos == prev[3] + prev[4] + ENVELOPE.size and span <= FOLD_BYTES:
                    prev[1], prev[4], prev[6] = last, span, prev[6] + count
                    prev[5] = max(prev[5], max_ts)
                    continue
            out.append(list(entry))
        self.bytes += sum(e[4] for e in out) - sum(self.length[lo:stop])
        for k, column in enumerate(columns):
            column[lo:stop] = array(column.typecode, [e[k] for e in out])
        running = self.running_max_ts[lo - 1] if lo else -1
        maxima = []
        for e in out:
            running = max(running, e[5])
            maxima.append(running)
        self.running_max_ts[lo:stop] = array("q", maxima)
        self._dense_from = lo + len(out)

    def drop_below(self, offset: int) -> None:
        """Forget entries wholly below ``offset`` (after retention or DeleteRecords)."""
        cut = bisect.bisect_right(self.last, offset - 1) if self.last else 0
        if not cut:
            return
        self.bytes -= sum(self.length[:cut])
        for column in (self.base, self.last, self.seg, self.pos, self.length, self.max_ts, self.count):
            del column[:cut]
        self._dense_from = max(0, self._dense_from - cut)
        # The running maximum must forget the dropped batches' timestamps.
        self.running_max_ts = array("q")
        running = -1
        for ts in self.max_ts:
            running = max(running, ts)
            self.running_max_ts.append(running)

    def entries_below(self, offset: int) -> int:
        """How many entries start below ``offset`` (with the high watermark: how many are durable)."""
        return bisect.bisect_left(self.base, offset)

    def entry_at(self, offset: int) -> int:
        """Number of the entry holding ``offset``, or of the first entry after it."""
        i = bisect.bisect_right(self.base, offset) - 1
        if i < 0:
            return 0
        return i if self.last[i] >= offset else i + 1

    def first_reaching_timestamp(self, timestamp: int, start: int = 0, end: int | None = None) -> int:
        """Number of the first entry at or after ``start`` holding a timestamp >= ``timestamp``
        (``end`` when none before it does)."""
        end = len(self.base) if end is None else end
        return max(bisect.bisect_left(self.running_max_ts, timestamp, 0, end), start)

    def first_in_segment(self, seg: int) -> int | None:
        """Number of the first entry in segment ``seg``, None if the segment holds none."""
        i = bisect.bisect_left(self.seg, seg)
        return i if i < len(self.seg) and self.seg[i] == seg else None
