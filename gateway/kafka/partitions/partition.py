"""One Kafka partition's state: its offset index, segments, producers, high watermark, log start and
waiting fetches.

Invariants:
- ``log_start <= high_watermark <= next_offset``; offsets in ``[log_start, high_watermark)`` are
  durable and fetchable, ``[high_watermark, next_offset)`` are assigned to appends still in flight.
- The offset index covers exactly ``[first live batch, next_offset)`` and only moves forward through
  ``segments`` (a partition's data runs from sealed predecessors into their successors).

A partition is built either on the reactor or, during a load, on a worker thread before anything
else can see it; from its installation on it is owned by the reactor thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from millrace.gateway.kafka.partitions.formats import CONTROL_ATTRIBUTE, TRANSACTIONAL_ATTRIBUTE, IndexEntry
from millrace.gateway.kafka.partitions.offset_index import OffsetIndex
from millrace.gateway.kafka.partitions.producers import MARKER_COORDINATOR_EPOCH, Producers
from millrace.gateway.kafka.partitions.segments import SegmentWriter
from millrace.gateway.kafka.partitions.transactions import PartitionTransactions
from millrace.gateway.kafka.partitions.waiters import Waiters
from millrace.gateway.kafka.partitions.watermark import HighWatermark


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """What a response reports about a partition at one moment."""

    log_start: int
    high_watermark: int
    # The high watermark capped by the first offset of the oldest open transaction.
    last_stable: int


class PartitionLog:
    """One partition (reactor thread once installed)."""

    def __init__(self, topic: str, partition: int, writer: SegmentWriter | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.index = OffsetIndex()
        self.segments: list[SegmentWriter] = []  # every segment holding data of this partition, oldest first
        self._segment_numbers: dict[str, int] = {}
        self.writer: SegmentWriter | None = None  # the open segment new batches go to
        self.log_start = 0
        self.next_offset = 0
        self.watermark = HighWatermark(0)
        self.producers = Producers()
        self.txns = PartitionTransactions()
        self.waiters = Waiters()
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

    def recovered(self, writer: SegmentWriter, entry: IndexEntry, commit: bool | None = None) -> None:
        """Add a stored batch during a load (segments oldest first, each in order); ``commit`` tells a
        transaction marker's kind (None for data batches)."""
        last = self.index.next_offset
        if last is not None and entry.base_offset != last:
            # base < next: already indexed (an entry repeated by a crash between index appends).
            # base > next: a batch made durable in a successor while an earlier one in the predecessor
            # was not; it was never acknowledged (acks wait for the high watermark), so it is not part
            # of the partition and its offsets are assigned again.
            return
        self.index.append(self.segment_number(writer), entry.base_offset, entry.last_offset, entry.position,
                          entry.length, entry.max_timestamp)
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

    def open_at(self, stored_log_start: int) -> None:
        """Finish a load: offsets continue after the last recovered batch, from the stored log start."""
        end = self.index.next_offset
        self.next_offset = end if end is not None else stored_log_start
        first = self.index.base[0] if len(self.index) else self.next_offset
        self.log_start = max(stored_log_start, first)
        self.next_offset = max(self.next_offset, self.log_start)
        self.watermark = HighWatermark(self.next_offset)
        self.index.drop_below(self.log_start)
        self.txns.drop_below(self.log_start)
