"""The read index: durable segment data kept in memory, with a bounded cache.

Per segment, cached entries are sorted by offset. Entries come in two kinds: *dirty* (durable in
the log but not yet in long-term storage) and *clean* (long-term storage holds them too). Appends
only ever add dirty entries at the tail and the storage writer flushes dirty entries in offset
order, so the dirty entries are always a suffix of a segment's entries. Only clean entries are
evicted, least recently used segment first: evicting never loses data.

The budget counts what an entry costs in memory, not only its data: a single-record batch of a
hundred bytes costs about as much again in the objects that hold it (its bytes object's header, its
offset, two list slots), so a cache of small appends counted by data alone held twice its budget.

Reads at a segment's tail park in ``TailReads`` (Pravega's future reads) until an append or a seal
makes them answerable, the segment goes away, or their timer fires.
"""

from __future__ import annotations

import bisect
import sys
import time
from collections import OrderedDict
from collections.abc import Callable

from millrace.store.scheduler import TimerHandle

# What a cached entry costs beyond its data: its bytes object's header, its offset (an int object), and
# its slots in the two lists.
ENTRY_OVERHEAD = sys.getsizeof(b"") + sys.getsizeof(1 << 40) + 2 * 8

# How a parked read ends: True = the tail moved (read again), False = its wait timed out,
# an exception = the read fails with it.
TailOutcome = bool | BaseException


class SegmentCache:
    __slots__ = ("offsets", "blocks", "head", "dirty", "cached_bytes", "dirty_bytes", "dirty_since")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.blocks: list[bytes] = []
        self.head = 0  # first live entry (entries before it were evicted or truncated)
        self.dirty = 0  # first dirty entry; every entry from here on is dirty
        self.cached_bytes = 0
        self.dirty_bytes = 0
        self.dirty_since = 0.0  # monotonic time the oldest dirty entry arrived

    def add_dirty(self, offset: int, data: bytes) -> None:
        if self.dirty == len(self.offsets):
            self.dirty_since = time.monotonic()
        self.offsets.append(offset)
        self.blocks.append(data)
        self.cached_bytes += len(data) + ENTRY_OVERHEAD
        self.dirty_bytes += len(data)

    def read(self, offset: int, max_length: int) -> tuple[bytes | None, int | None]:
        """Cached bytes from ``offset`` (up to ``max_length``, stopping at a gap), or
        (None, next cached offset or None) when the offset is not cached."""
        i = bisect.bisect_right(self.offsets, offset, self.head) - 1
        if i < self.head or offset >= self.offsets[i] + len(self.blocks[i]):
            nxt = i + 1 if i >= self.head else self.head
            return None, (self.offsets[nxt] if nxt < len(self.offsets) else None)
        first = self.blocks[i]
        skip = offset - self.offsets[i]
        if len(first) - skip >= max_length:
            return first[skip : skip + max_length], None
        parts = [memoryview(first)[skip:]]
        total = len(first) - skip
        end = self.offsets[i] + len(first)
        j = i + 1
        while j < len(self.offsets) and total < max_length and self.offsets[j] == end:
            block = self.blocks[j]
            take = min(len(block), max_length - total)
            parts.append(memoryview(block)[:take])
            total += take
            end += len(block)
            j += 1
        return b"".join(parts), None

    def dirty_run(self, max_bytes: int) -> tuple[int, list[bytes]] | None:
        """The longest gap-free run of dirty entries from the first one, up to ``max_bytes``
        (at least one entry). None when nothing is dirty."""
        if self.dirty >= len(self.offsets):
            return None
        start = self.offsets[self.dirty]
        end = start
        blocks: list[bytes] = []
        size = 0
        for j in range(self.dirty, len(self.offsets)):
            block = self.blocks[j]
            if self.offsets[j] != end or (blocks and size + len(block) > max_bytes):
                break
            blocks.append(block)
            size += len(block)
            end += len(block)
        return start, blocks

    def mark_clean(self, upto: int) -> None:
        """Entries ending at or below ``upto`` are now in long-term storage."""
        while self.dirty < len(self.offsets) and self.offsets[self.dirty] + len(self.blocks[self.dirty]) <= upto:
            self.dirty_bytes -= len(self.blocks[self.dirty])
            self.dirty += 1
        if self.dirty < len(self.offsets):
            self.dirty_since = time.monotonic()

    def evict_clean(self, want: int) -> int:
        """Drop clean entries from the front until ``want`` bytes are freed; return bytes freed."""
        freed = 0
        while self.head < self.dirty and freed < want:
            freed += len(self.blocks[self.head]) + ENTRY_OVERHEAD
            self.blocks[self.head] = b""
            self.head += 1
        self.cached_bytes -= freed
        self._compact()
        return freed

    def drop_below(self, offset: int) -> int:
        """Forget entries wholly below ``offset`` (truncation); return bytes freed."""
        freed = 0
        while self.head < len(self.offsets) and self.offsets[self.head] + len(self.blocks[self.head]) <= offset:
            size = len(self.blocks[self.head])
            freed += size + ENTRY_OVERHEAD
            if self.head >= self.dirty:
                self.dirty_bytes -= size
                self.dirty = self.head + 1
            self.blocks[self.head] = b""
            self.head += 1
        self.cached_bytes -= freed
        self._compact()
        return freed

    def _compact(self) -> None:
        # Amortised O(1) front removal without giving up bisect on plain lists.
        if self.head > 64 and self.head * 2 > len(self.offsets):
            del self.offsets[: self.head]
            del self.blocks[: self.head]
            self.dirty -= self.head
            self.head = 0


class ReadIndex:
    """All segment caches of one container, with LRU eviction of clean data under a byte budget."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.total_bytes = 0
        self.dirty_bytes = 0  # of every segment: what long-term storage does not hold yet
        self._caches: OrderedDict[int, SegmentCache] = OrderedDict()
        self.tail_reads = TailReads()

    def cache(self, segment_id: int) -> SegmentCache:
        cache = self._caches.get(segment_id)
        if cache is None:
            cache = self._caches[segment_id] = SegmentCache()
        return cache

    def peek(self, segment_id: int) -> SegmentCache | None:
        return self._caches.get(segment_id)

    def append(self, segment_id: int, offset: int, data: bytes) -> None:
        cache = self.cache(segment_id)
        cache.add_dirty(offset, data)
        self.total_bytes += len(data) + ENTRY_OVERHEAD
        self.dirty_bytes += len(data)
        self._caches.move_to_end(segment_id)
        if self.total_bytes > self.max_bytes:
            self.evict()

    def read(self, segment_id: int, offset: int, max_length: int) -> tuple[bytes | None, int | None]:
        cache = self._caches.get(segment_id)
        if cache is None:
            return None, None
        self._caches.move_to_end(segment_id)
        return cache.read(offset, max_length)

    def mark_clean(self, segment_id: int, upto: int) -> None:
        cache = self._caches.get(segment_id)
        if cache is not None:
            dirty = cache.dirty_bytes
            cache.mark_clean(upto)
            self.dirty_bytes -= dirty - cache.dirty_bytes

    def drop_below(self, segment_id: int, offset: int) -> None:
        cache = self._caches.get(segment_id)
        if cache is not None:
            dirty = cache.dirty_bytes
            self.total_bytes -= cache.drop_below(offset)
            self.dirty_bytes -= dirty - cache.dirty_bytes

    def remove(self, segment_id: int) -> None:
        cache = self._caches.pop(segment_id, None)
        if cache is not None:
            self.total_bytes -= cache.cached_bytes
            self.dirty_bytes -= cache.dirty_bytes

    def evict(self) -> None:
        excess = self.total_bytes - self.max_bytes
        for cache in list(self._caches.values()):
            if excess <= 0:
                break
            freed = cache.evict_clean(excess)
            self.total_bytes -= freed
            excess -= freed

    def dirty_segments(self) -> list[tuple[int, SegmentCache]]:
        return [(sid, c) for sid, c in self._caches.items() if c.dirty_bytes > 0]


class ParkedRead:
    """A read waiting at a segment's tail. It leaves ``TailReads`` exactly once (woken, expired or
    failed), and only the party that took it out resumes it, so it is resumed exactly once."""

    __slots__ = ("segment_id", "offset", "resume", "timer")

    def __init__(self, segment_id: int, offset: int, resume: Callable[[TailOutcome], None]) -> None:
        self.segment_id = segment_id
        self.offset = offset
        self.resume = resume
        self.timer: TimerHandle | None = None


class TailReads:
    """The reads parked at segment tails. Changed under the container lock; the reads taken out
    are resumed by the caller after it releases the lock (``take_ready``), so a resumed read may
    call back into the container."""

    __slots__ = ("_parked", "_ready")

    def __init__(self) -> None:
        self._parked: dict[int, list[ParkedRead]] = {}
        self._ready: list[tuple[ParkedRead, TailOutcome]] = []

    def park(self, segment_id: int, offset: int, resume: Callable[[TailOutcome], None]) -> ParkedRead:
        parked = ParkedRead(segment_id, offset, resume)
        self._parked.setdefault(segment_id, []).append(parked)
        return parked

    def tail_moved(self, segment_id: int, length: int, sealed: bool) -> None:
        """Ready every read of the segment that the new length or the seal answers."""
        parked = self._parked.get(segment_id)
        if not parked:
            return
        keep = []
        for read in parked:
            if read.offset < length or sealed:
                self._take(read, True)
            else:
                keep.append(read)
        if keep:
            self._parked[segment_id] = keep
        else:
            del self._parked[segment_id]

    def segment_gone(self, segment_id: int, error: BaseException) -> None:
        for read in self._parked.pop(segment_id, ()):
            self._take(read, error)

    def expire(self, read: ParkedRead) -> bool:
        """Take ``read`` out because its timer fired; False when something else took it first."""
        parked = self._parked.get(read.segment_id)
        if not parked or read not in parked:
            return False
        parked.remove(read)
        if not parked:
            del self._parked[read.segment_id]
        return True

    def fail_all(self, error: BaseException) -> None:
        for segment_id in list(self._parked):
            self.segment_gone(segment_id, error)

    def take_ready(self) -> list[tuple[ParkedRead, TailOutcome]]:
        """The reads taken out since the last call, for the caller to resume outside the lock."""
        if not self._ready:
            return []
        ready, self._ready = self._ready, []
        return ready

    def _take(self, read: ParkedRead, outcome: TailOutcome) -> None:
        if read.timer is not None:
            read.timer.cancel()
        self._ready.append((read, outcome))
