"""One partition's transactions: the open transaction of each producer, the last stable offset and the
aborted-transaction index, as Kafka's ProducerStateManager and transaction index keep them.

Invariants:
- ``open[pid]`` is the first offset of producer ``pid``'s transaction in this partition that has no
  marker yet; a transactional batch opens one (if none is open), its marker closes it.
- The last stable offset is the smallest first offset of an open transaction, capped by the high
  watermark: nothing at or past it is visible to read_committed consumers.
- ``aborted`` lists (producer id, first offset, marker offset) of every aborted transaction that
  wrote to the partition, ordered by marker offset (markers are appended in offset order).
- A transaction closes only once its marker is durable (the high watermark passed it), so the last
  stable offset never passes a marker that a crash could lose.

Owned by the reactor thread once the partition is installed (built on a worker during a load).
"""

from __future__ import annotations

import bisect
from typing import NamedTuple


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


class PartitionTransactions:
    __slots__ = ("open", "aborted", "_aborted_last")

    def __init__(self) -> None:
        self.open: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.aborted: list[AbortedTxn] = []
        self._aborted_last: list[int] = []  # marker offsets of ``aborted`` (for bisect)

    def batch(self, producer_id: int, base_offset: int) -> None:
        """A transactional data batch of ``producer_id`` got ``base_offset``."""
        self.open.setdefault(producer_id, base_offset)

    def marker(self, producer_id: int, offset: int, commit: bool) -> None:
        """``producer_id``'s marker at ``offset`` is durable: its transaction here is over."""
        first = self.open.get(producer_id)
        if first is None or first > offset:
            return  # nothing of this producer before the marker is open (a transaction that wrote elsewhere)
        del self.open[producer_id]
        if not commit:
            self.aborted.append(AbortedTxn(producer_id, first, offset))
            self._aborted_last.append(offset)

    def last_stable(self, high_watermark: int) -> int:
        if not self.open:
            return high_watermark
        return min(high_watermark, min(self.open.values()))

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with data in [start, end): their marker is at or after ``start`` and
        they began before ``end`` (what a read_committed fetch of that range must be told)."""
        i = bisect.bisect_left(self._aborted_last, start)
        return [a for a in self.aborted[i:] if a.first_offset < end]

    def drop_below(self, log_start: int) -> None:
        """Forget aborted transactions whose marker is below the log start (retention)."""
        cut = bisect.bisect_left(self._aborted_last, log_start)
        if cut:
            del self.aborted[:cut]
            del self._aborted_last[:cut]
