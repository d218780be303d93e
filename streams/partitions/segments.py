"""The segments of a topic's partitions: one writer per data segment, which tracks the segment's
tail and keeps its index segment in step, and recovery of both after a restart.

Invariants:
- The gateway is a data segment's only writer: every append is conditional on ``tail`` (the accepted
  length this gateway tracks), so a foreign writer fences the gateway instead of interleaving.
- Index entries are appended to the index segment in the data segment's order and only after their
  batch is durable, so an index entry never points past durable data.
- Recovery trusts the index segment up to its first entry that runs past the data, does not start
  where the previous one ended (out of order, or a gap) or is torn, then scans the data segment from
  there, so a crash loses no entry and a restart does not read the whole topic.

A ``SegmentWriter`` is owned by the reactor thread once installed. The recovery functions block on
store reads: they run on a worker thread (or before the reactor starts), on nothing the reactor owns.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from millrace.protocol.errors import ConnectionLostError
from millrace.protocol.records import BATCH_HEADER_SIZE
from millrace.store.contracts import SegmentService
from millrace.store.errors import (
    BadOffsetError,
    ContainerOfflineError,
    SegmentExistsError,
    StoreError,
)
from millrace.streams.futures import to_deferred
from millrace.streams.partitions.formats import (
    ENVELOPE,
    ENVELOPE_MAGIC,
    ENVELOPE_VERSION,
    INDEX_ENTRY_SIZE,
    INDEX_SUFFIX,
    IndexEntry,
)

log = logging.getLogger(__name__)

INDEX_FLUSH_SECONDS = 0.05  # index entries gather this long into one index append
READ_CHUNK = 1 << 20
BLOCKING_TIMEOUT = 60.0  # seconds a recovery read may take before the load fails


class SegmentWriter:
    """Appends to one data segment and keeps its index segment in step (reactor thread)."""

    def __init__(self, store: SegmentService, clock: IReactorTime, name: str, tail: int, index_tail: int) -> None:
        self.store = store
        self.clock = clock
        self.name = name
        self.index_name = name + INDEX_SUFFIX
        self.tail = tail  # accepted length: where the next append must land
        self.index_tail = index_tail  # where the next index append must land
        self.failed: BaseException | None = None  # set once an append failed: the topic reloads
        self._index_pending: list[bytes] = []
        self._index_flush: IDelayedCall | None = None
        # The index is one byte stream with no gaps (recovery trusts a prefix and scans the data past it):
        # below ``_index_confirmed`` it is known to be in the index segment; ``_index_sent`` holds the
        # bytes [confirmed, index_tail) sent and not yet acknowledged, to send again after a failure.
        self._index_confirmed = index_tail
        self._index_sent = bytearray()
        self._index_generation = 0  # bumped by a resync: answers to older sends are then ignored
        self._index_skip = 0  # bytes of coming entries another writer already put in the index
        self._index_stopped = False  # after an unexpected failure: recovery's data scan indexes the rest
        self._index_checking = False  # reading back what another append put in the index
        # Entries go to the index in segment order: ``_index_next`` is where the next batch to index
        # starts, ``_index_early`` holds batches seen durable before a batch ahead of them (by start).
        self._index_next = tail
        self._index_early: dict[int, IndexEntry] = {}

    def reserve(self, length: int) -> int:
        """Claim the next ``length`` bytes of the segment; returns where they start."""
        start = self.tail
        self.tail += length
        return start

    def index(self, entry: IndexEntry) -> None:
        """Queue the entry of a batch that is now durable; written within INDEX_FLUSH_SECONDS, in segment
        order. Appends become durable in order, but their completions may reach the reactor out of order
        (``to_deferred`` fires at once for a future already complete when it is called, while an earlier
        append's completion still waits in callFromThread's queue), and recovery trusts the index only up
        to an entry out of order: a partition whose index read 322, 324, 323 was reloaded with a high
        watermark of 324 over 1206 stored records (tests/cluster/test_nemesis.py). So an entry whose
        predecessor has not come yet waits for it."""
        start = entry.position - ENVELOPE.size
        if start != self._index_next:
            self._index_early[start] = entry
            return
        while True:
            self._index_next = entry.end
            self._queue_index(entry)
            early = self._index_early.pop(self._index_next, None)
            if early is None:
                return
            entry = early

    def _queue_index(self, entry: IndexEntry) -> None:
        packed = entry.pack()
        if self._index_skip > 0 or self._index_stopped:
            self._index_skip -= len(packed)
            return
        self._index_pending.append(packed)
        if self._index_flush is None:
            self._index_flush = self.clock.callLater(INDEX_FLUSH_SECONDS, self.flush_index)

    def discard_index(self) -> None:
        """The segment's topic is gone: drop index entries not yet written (never write them into an
        index segment that a stream re-created under the name may make)."""
        if self._index_flush is not None and self._index_flush.active():
            self._index_flush.cancel()
        self._index_flush = None
        self._index_pending = []
        self._index_stopped = True  # nor send again what failed in flight

    def flush_index(self) -> None:
        self._index_flush = None
        if self._index_checking:
            return  # the check's resync sends what is pending
        if not self._index_pending or self._index_stopped:
            self._index_pending = []
            return
        data = b"".join(self._index_pending)
        self._index_pending = []
        self._send_index(data)

    def _send_index(self, data: bytes) -> None:
        expected = self.index_tail
        self.index_tail += len(data)
        self._index_sent += data
        to_deferred(self.store.append(self.index_name, data, expected_offset=expected)).addCallbacks(
            self._index_appended, self._index_failed, callbackArgs=(self._index_generation, self.index_tail),
            errbackArgs=(self._index_generation,))

    def _index_appended(self, _: Any, generation: int, end: int) -> None:
        if generation != self._index_generation or end <= self._index_confirmed:
            return
        del self._index_sent[:end - self._index_confirmed]
        self._index_confirmed = end

    def _index_failed(self, failure: Failure, generation: int) -> None:
        """An index append failed (on a cluster, its container moved, or another node's recovery
        wrote the same entries first): find where the index really ends and go on from there, so the
        index never gets a gap. A rejected offset says where it ends; what lies between our last known
        end and there is read back and must be what we meant to write (an append of ours whose answer
        was lost, or a recovery that indexed the same batches): a writer whose term ended (a zombie
        whose data appends were refused) finds the new leader's entries there instead, and stops
        rather than append its own after them, which made an index jump from offset 283 to 789 in a
        nemesis run. An unknown outcome sends again from the last known end, whose answer says.
        Anything else leaves the rest of the index to recovery's data scan (no more index appends)."""
        if generation != self._index_generation:
            return  # a resync since then covers it
        exc = failure.value
        log.info("index append to %s failed: %s", self.index_name, failure.getErrorMessage())
        if isinstance(exc, BadOffsetError) and exc.actual > self._index_confirmed:
            self._index_generation += 1
            self._index_checking = True  # entries queue meanwhile; nothing is sent until the check ends
            start, landed = self._index_confirmed, exc.actual
            mine = bytes(self._index_sent) + b"".join(self._index_pending)
            self._check_landed(start, landed, mine, bytearray(), self._index_generation)
        elif isinstance(exc, BadOffsetError) and exc.actual == self._index_confirmed or \
                isinstance(exc, ConnectionLostError | ContainerOfflineError):
            self._index_generation += 1
            self._resync(self._index_confirmed)
        else:
            self._stop_index(failure.getErrorMessage())

    def _check_landed(self, start: int, landed: int, mine: bytes, read: bytearray, generation: int) -> None:
        """Read [start, landed) of the index segment (as far as we have entries to compare) and resync
        if it is ours, stop the index if it is not."""
        want = min(landed - start, len(mine))
        if len(read) >= want:
            self._index_checking = False
            if bytes(read[:want]) != mine[:want]:
                self._stop_index(f"another writer's entries are in the index at {start}..{landed}")
            else:
                self._resync(landed)
            return

        def got(result: Any) -> None:
            if generation != self._index_generation or not result.data:
                self._index_checking = False
                if generation == self._index_generation:
                    self._stop_index(f"index read at {start + len(read)} gave nothing")
                return
            self._check_landed(start, landed, mine, read + bytes(result.data), generation)

        def unreadable(f: Failure) -> None:
            self._index_checking = False
            if generation == self._index_generation:
                self._stop_index(f"reading the index back failed: {f.getErrorMessage()}")

        try:
            reading = self.store.read(self.index_name, start + len(read), want - len(read))
        except Exception:  # noqa: BLE001 - a read refused at once ends the check as one that failed
            unreadable(Failure())
            return
        to_deferred(reading).addCallbacks(got, unreadable)

    def _resync(self, landed: int) -> None:
        """Go on from ``landed``, the index's real end, whose bytes past our last known end are ours."""
        unsent = b"".join(self._index_pending)
        stream = bytes(self._index_sent) + unsent  # the index from _index_confirmed on, in order
        skip = landed - self._index_confirmed  # already in the index (an answer lost, or a recovery's)
        self._index_confirmed = self.index_tail = landed
        self._index_sent = bytearray()
        self._index_pending = []
        if skip < len(stream):
            self._send_index(stream[skip:])
        else:
            self._index_skip = skip - len(stream)  # entries of batches we have yet to hear are durable

    def _stop_index(self, why: str) -> None:
        log.warning("index of %s stops here (recovery indexes the rest from the data): %s", self.name, why)
        self._index_generation += 1
        self._index_stopped = True  # no entry may land past a gap
        self._index_pending = []


@dataclass(frozen=True, slots=True)
class Coverage:
    """How much of a data segment a partition-state snapshot has taken in (``snapshots``): its index
    segment up to ``index_bytes``, whose last entry ends at ``index_reach`` in the data, and its batches
    up to ``data_end``, which may lie past that (the snapshot scanned a tail the index had not reached)."""

    index_bytes: int = 0
    index_reach: int = 0
    data_end: int = 0


@dataclass
class RecoveredSegment:
    """What recovery found in one data segment (plain data, handed to the reactor to install)."""

    name: str
    tail: int
    index_tail: int
    entries: list[IndexEntry] = field(default_factory=list)  # every batch past the segment's start, in order
    attributes: dict[str, int] = field(default_factory=dict)  # the data segment's, as durable
    covered: Coverage = field(default_factory=Coverage)  # how far ``entries`` reach


def create_index_segment(store: SegmentService, name: str) -> None:
    """Blocking: make sure the data segment ``name`` has its index segment."""
    with contextlib.suppress(SegmentExistsError):
        store.create_segment(name + INDEX_SUFFIX).result(BLOCKING_TIMEOUT)


class StaleCoverage(StoreError):
    """A snapshot's coverage of a segment no longer matches what the store holds."""


def recover_segment(store: SegmentService, name: str, covered: Coverage | None = None,
                    persist: bool = True) -> RecoveredSegment:
    """Blocking: load a segment's index segment, then index what the data holds past it, and (with
    ``persist``) append those entries to the index segment. With ``covered``, ``found.entries`` holds only
    the batches past it, the rest being in a snapshot (StaleCoverage if the store no longer holds what it
    covers); ``found.covered`` is what the segment holds now."""
    index_name = name + INDEX_SUFFIX
    if persist:
        create_index_segment(store, name)
    data_info = store.get_info(name)
    index_info = store.get_info(index_name)
    covered = covered or Coverage()
    if (covered.index_bytes > index_info.length or covered.data_end > data_info.length
            or 0 < covered.index_bytes < index_info.start_offset):
        raise StaleCoverage(f"{name}: a snapshot covers more than the store holds")
    index_from = max(index_info.start_offset, covered.index_bytes)
    raw = read_fully(store, index_name, index_from, index_info.length - index_from)
    found = RecoveredSegment(name, data_info.length, index_info.length, attributes=dict(data_info.attributes))
    usable = len(raw) - len(raw) % INDEX_ENTRY_SIZE
    # The trusted index: up to ``index_end`` in the index segment, reaching ``reach`` in the data.
    index_end, reach = index_from, max(data_info.start_offset, covered.index_reach)
    previous_end: int | None = covered.index_reach if covered.index_bytes else None
    broken = False
    for at in range(0, usable, INDEX_ENTRY_SIZE):
        entry = IndexEntry.unpack_from(raw, at)
        if entry.end > data_info.length:
            break  # an index entry can never run ahead of durable data; stop trusting it here
        if previous_end is not None and entry.position - ENVELOPE.size != previous_end:
            # Entries out of segment order or a gap (an index written so by an older gateway): trusting
            # what follows would hide batches behind it. The data scan below indexes them instead.
            log.warning("index segment %s is not contiguous at entry %d (position %d after %d); the data "
                        "past it is scanned at every load", index_name, (index_from + at) // INDEX_ENTRY_SIZE,
                        entry.position - ENVELOPE.size, previous_end)
            broken = True
            break
        previous_end = entry.end
        index_end, reach = index_from + at + INDEX_ENTRY_SIZE, max(reach, entry.end)
        if entry.end > covered.data_end and entry.position >= data_info.start_offset:
            found.entries.append(entry)
    found.covered = Coverage(index_end, reach, max(reach, covered.data_end))
    if usable != len(raw) or reach < data_info.length:
        # The index lags the data (a crash before it was written): index the tail and persist it.
        missing = _scan_data(store, name, reach, data_info.length)
        found.entries.extend(e for e in missing if e.end > covered.data_end)
        found.covered = Coverage(index_end, reach, data_info.length)
        if usable != len(raw) and persist:
            log.warning("index segment %s has a torn tail; rebuilding its end", index_name)
        if missing and not broken and persist:  # appended after a broken part, entries would never be trusted
            # Conditional on the index read: on a cluster the partitions' leader may be appending these
            # very entries now, and two writers must never interleave (a gap or a duplicate). If it
            # moved, the leader is writing it (and its SegmentWriter resyncs on a refused offset).
            with contextlib.suppress(BadOffsetError):
                store.append(index_name, b"".join(e.pack() for e in missing),
                             expected_offset=index_info.length).result(BLOCKING_TIMEOUT)
            found.index_tail = store.get_info(index_name).length
    return found


def _scan_data(store: SegmentService, name: str, start: int, end: int) -> list[IndexEntry]:
    entries = []
    pos = start
    while pos < end:
        head = read_fully(store, name, pos, ENVELOPE.size + BATCH_HEADER_SIZE)
        magic, version, partition, length = ENVELOPE.unpack_from(head)
        if magic != ENVELOPE_MAGIC or version != ENVELOPE_VERSION:
            raise StoreError(f"{name}: no Kafka batch envelope at {pos}")
        batch_pos = pos + ENVELOPE.size
        entries.append(IndexEntry.of_stored(partition, batch_pos, length, head, ENVELOPE.size))
        pos = batch_pos + length
    return entries


def read_fully(store: SegmentService, name: str, offset: int, length: int) -> bytes:
    """Blocking: [offset, offset + length) of a segment, or less if it ends first."""
    out = bytearray()
    while len(out) < length:
        r = store.read(name, offset + len(out), min(READ_CHUNK, length - len(out))).result(BLOCKING_TIMEOUT)
        if not r.data:
            break
        out += r.data
    return bytes(out)
