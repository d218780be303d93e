"""One partition's offset index: offset -> (segment, position, length) per batch, in compact arrays.

Invariants (checked by the partition that owns the index, relied on by every search here):
- entries are in offset order and dense: ``base[i] == last[i - 1] + 1``;
- segment numbers never decrease along the index (a partition only moves forward, to successors);
- ``running_max_ts[i]`` is the largest ``max_ts`` of entries ``0..i``, so a timestamp search is a bisect.

Owned by the reactor thread once the partition is installed (see ``millrace.streams.futures``).
"""

from __future__ import annotations

import bisect
from array import array


class OffsetIndex:
    __slots__ = ("base", "last", "seg", "pos", "length", "max_ts", "running_max_ts", "bytes")

    def __init__(self) -> None:
        self.base = array("q")
        self.last = array("q")
        self.seg = array("i")  # number of the segment in the owning partition's segment list
        self.pos = array("q")  # of the batch (after its envelope) in that segment
        self.length = array("i")
        self.max_ts = array("q")
        self.running_max_ts = array("q")
        self.bytes = 0  # total batch bytes indexed

    def __len__(self) -> int:
        return len(self.base)

    @property
    def next_offset(self) -> int | None:
        """The offset after the last indexed batch (None when empty)."""
        return self.last[-1] + 1 if self.last else None

    def append(self, seg: int, base: int, last: int, pos: int, length: int, max_ts: int) -> None:
        self.base.append(base)
        self.last.append(last)
        self.seg.append(seg)
        self.pos.append(pos)
        self.length.append(length)
        self.max_ts.append(max_ts)
        previous = self.running_max_ts[-1] if self.running_max_ts else -1
        self.running_max_ts.append(max(previous, max_ts))
        self.bytes += length

    def drop_below(self, offset: int) -> None:
        """Forget entries wholly below ``offset`` (after retention or DeleteRecords)."""
        cut = bisect.bisect_right(self.last, offset - 1) if self.last else 0
        if not cut:
            return
        self.bytes -= sum(self.length[:cut])
        for column in (self.base, self.last, self.seg, self.pos, self.length, self.max_ts):
            del column[:cut]
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
