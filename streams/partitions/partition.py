"""One Kafka partition's state: its offset index, segments, producers, high watermark, log start and
waiting fetches.

Invariants:
- ``log_start <= high_watermark <= next_offset``; offsets in ``[log_start, high_watermark)`` are
  durable and fetchable, ``[high_watermark, next_offset)`` are assigned to appends still in flight.
- The offset index covers exactly ``[first live batch, next_offset)`` and only moves forward through
  ``segments`` (a partition's data runs from sealed predecessors into their successors). On a compacted
  partition ``segments[0]`` is its compacted segment, which holds ``[log_start, compaction.end)`` with
  gaps where the cleaner removed whole batches; from ``compaction.end`` on the index is dense again.

A partition is built either on the reactor or, during a load, on a worker thread before anything
else can see it; from its installation on it is owned by the reactor thread.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING

from millrace.streams.partitions.formats import CONTROL_ATTRIBUTE, TRANSACTIONAL_ATTRIBUTE, IndexEntry
from millrace.streams.partitions.offset_index import OffsetIndex
from millrace.streams.partitions.producers import MARKER_COORDINATOR_EPOCH, Producers
from millrace.streams.partitions.segments import SegmentWriter
from millrace.streams.partitions.transactions import PartitionTransactions, TransactionVerifications
from millrace.streams.partitions.waiters import Waiters
from millrace.streams.partitions.watermark import HighWatermark
from millrace.streams.partitions.writer_events import WriterEventNumbers

if TYPE_CHECKING:
    from millrace.streams.partitions.compaction import CompactionRecord


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """What a response reports about a partition at one moment."""

    log_start: int
    high_watermark: int
    # The high watermark capped by the first offset of the oldest open transaction.
    last_stable: int


class PartitionLog:
    """One partition (reactor thread once installed)."""

    def __init__(self, topic: str, partition: int, writer: SegmentWriter | None = None, folds: bool = True) -> None:
        self.topic = topic
        self.partition = partition
        self.index = OffsetIndex()
        # Whether durable index entries fold into runs (``offset_index``): not on a compacted topic, whose
        # cleaner plans and installs at batch boundaries (the cleaner turns it off when it finds one).
        self.folds = folds
        self.segments: list[SegmentWriter] = []  # every segment holding data of this partition, oldest first
        self._segment_numbers: dict[str, int] = {}
        self.writer: SegmentWriter | None = None  # the open segment new batches go to
        self.log_start = 0
        self.next_offset = 0
        self.watermark = HighWatermark(0)
        self.producers = Producers()
        self.txns = PartitionTransactions()
        # Transactions the coordinator on another node confirmed include this partition (cluster only)
        self.verifications = TransactionVerifications()
        self.writer_events = WriterEventNumbers(partition)
        # The segment in which a load first dropped a stored batch as not contiguous: from that segment on,
        # the partition's writer attributes are void (``writer_events``); ``_dropped_reached`` once the load
        # has come to it.
        self.dropped_in: str | None = None
        self._dropped_reached = False
        self.waiters = Waiters()
        # The compactions table's record of this partition and its table version (None: never compacted)
        self.compaction: CompactionRecord | None = None
        self.compaction_version: int | None = None
        if writer is not None:
            self.write_to(writer)

    def __repr__(self) -> str:
        return f"PartitionLog({self.topic}-{self.partition})"

    @property
    def high_watermark(self) -> int:
        return self.watermark.offset

    def offsets(self) -> PartitionOffsets:
        hw = self.watermark.offset
        return PartitionOffsets(self.log_start, hw, self.txns.last_stable(hw))

    def write_to(self, writer: SegmentWriter) -> None:
        """Send new batches to ``writer``'s segment (at load, growth, or a scaling switch)."""
        self.writer = writer
        self.segment_number(writer)

    def segment_number(self, writer: SegmentWriter) -> int:
        number = self._segment_numbers.get(writer.name)
        if number is None:
            number = self._segment_numbers[writer.name] = len(self.segments)
            self.segments.append(writer)
        return number

    def adopt(self, writer: SegmentWriter) -> None:
        """During a load from a snapshot (``snapshots``): ``writer`` is the real writer of a segment the
        snapshot names, in place of the stand-in the snapshot's partition was restored with."""
        number = self._segment_numbers.get(writer.name)
        if number is not None:
            self.segments[number] = writer

    def recovered(self, writer: SegmentWriter, entry: IndexEntry, commit: bool | None = None) -> None:
        """Add a stored batch during a load (segments oldest first, each in order); ``commit`` tells a
        transaction marker's kind (None for data batches)."""
        last = self.index.next_offset
        if self.compaction is not None:
            last = max(last or 0, self.compaction.end)  # the cleaned range may end in removed batches
        if last is not None and entry.base_offset != last:
            # base < next: already indexed (an entry repeated by a crash between index appends).
            # base > next: a batch made durable in a successor while an earlier one in the predecessor
            # was not; it was never acknowledged (acks wait for the high watermark), so it is not part
            # of the partition and its offsets are assigned again.
            if entry.base_offset > last and self.dropped_in is None:
                self.dropped_in = writer.name
            return
        self._add(writer, entry, commit)

    def recovered_compacted(self, writer: SegmentWriter, entries: list[IndexEntry], commits: list[bool | None],
                            record: CompactionRecord, version: int) -> None:
        """Add the batches of the partition's compacted segment (first, before any data segment's):
        they may have gaps, and the data segments' batches below ``record.end`` are already in them."""
        self.compaction, self.compaction_version = record, version
        for entry, commit in zip(entries, commits, strict=True):
            self._add(writer, entry, commit)

    def _add(self, writer: SegmentWriter, entry: IndexEntry, commit: bool | None) -> None:
        self.index.append(self.segment_number(writer), entry.base_offset, entry.last_offset, entry.position,
                          entry.length, entry.max_timestamp)
        if self.folds:  # everything a load finds is durable: the index stays folded as it grows
            self.index.fold(entry.last_offset + 1)
        if entry.attributes & CONTROL_ATTRIBUTE:
            # The index entry does not keep the marker's coordinator epoch; Millrace's one coordinator
            # writes every marker at MARKER_COORDINATOR_EPOCH (it never moves to another node).
            self.producers.fence(entry.producer_id, entry.producer_epoch, entry.max_timestamp,
                                 MARKER_COORDINATOR_EPOCH)
            self.txns.marker(entry.producer_id, entry.base_offset, bool(commit))
            return
        if entry.attributes & TRANSACTIONAL_ATTRIBUTE:
            self.txns.batch(entry.producer_id, entry.base_offset)
        if entry.producer_id >= 0:
            self.producers.recovered(entry.producer_id, entry.producer_epoch, entry.base_sequence,
                                     entry.base_sequence + entry.last_offset_delta, entry.base_offset,
                                     entry.max_timestamp)

    def recovered_attributes(self, attributes: dict[str, int], segment: str) -> None:
        """Take a recovered segment's attributes, after its batches (``writer_events``' load rule)."""
        if self._dropped_reached or segment == self.dropped_in:
            self._dropped_reached = True
            return
        self.writer_events.recovered(attributes, segment)

    def open_at(self, stored_log_start: int) -> None:
        """Finish a load: offsets continue after the last recovered batch, from the stored log start."""
        end = self.index.next_offset
        if self.compaction is not None:
            end = max(end or 0, self.compaction.end)
        self.next_offset = end if end is not None else stored_log_start
        first = self.index.base[0] if len(self.index) else self.next_offset
        if self.compaction is not None:
            # Compaction never moves the log start (Kafka's neither): removed batches leave a gap.
            first = min(first, self.compaction.log_start)
        self.log_start = max(stored_log_start, first)
        self.next_offset = max(self.next_offset, self.log_start)
        self.watermark = HighWatermark(self.next_offset)
        self.index.drop_below(self.log_start)
        self.txns.drop_below(self.log_start)

    def forget_segments(self, gone: set[str]) -> bool:
        """After a load from a snapshot: forget the segments the snapshot named that no longer exist
        (retention deleted them). False if an entry past the log start still lies in one, or the load
        rule for writer attributes needs one: then the snapshot is stale."""
        numbers = {i for i, w in enumerate(self.segments) if w.name in gone}
        if not numbers:
            return True
        if self.dropped_in in gone or any(s in numbers for s in set(self.index.seg)):
            return False
        kept = [w for w in self.segments if w.name not in gone]
        renumber = {self._segment_numbers[w.name]: i for i, w in enumerate(kept)}
        self.index.seg = array("i", [renumber[s] for s in self.index.seg])
        self.segments, self._segment_numbers = kept, {w.name: i for i, w in enumerate(kept)}
        return True

    def trim_for_snapshot(self, stored_log_start: int) -> None:
        """Forget what lies below the log start (as ``open_at`` will), keeping the last entry so that a
        load goes on checking contiguity from it."""
        if len(self.index):
            self.index.drop_below(min(stored_log_start, self.index.base[-1]))
        self.txns.drop_below(stored_log_start)

    def install_compaction(self, writer: SegmentWriter, entries: list[IndexEntry], record: CompactionRecord,
                           version: int, removed_markers: set[int]) -> SegmentWriter | None:
        """Switch ``[log_start, record.end)`` to a new compacted segment (reactor thread, once its table
        record is durable). Batches at or past ``record.end`` stay where they are; so do the data segments
        in ``segments`` (their tails bound what this partition needs of them, nothing). Returns the previous
        compacted segment's writer, which nothing of this partition references any more."""
        previous = self.segments[0] if self.compaction is not None else None
        old_index, old_segments = self.index, self.segments
        self.index = OffsetIndex()
        self.segments, self._segment_numbers = [], {}
        number = self.segment_number(writer)
        for e in entries:
            if e.last_offset >= self.log_start:
                self.index.append(number, e.base_offset, e.last_offset, e.position, e.length, e.max_timestamp)
        renumber = [-1 if s is previous else self.segment_number(s) for s in old_segments]
        for i in range(old_index.entry_at(record.end), len(old_index)):
            self.index.append(renumber[old_index.seg[i]], old_index.base[i], old_index.last[i], old_index.pos[i],
                              old_index.length[i], old_index.max_ts[i], old_index.count[i])
        self.compaction, self.compaction_version = record, version
        self.txns.forget_aborted(removed_markers)
        return previous
