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
from collections import OrderedDict
from collections.abc import Iterable
from typing import NamedTuple


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


class ProducerAborts:
    """Each producer's aborted transactions, to answer "does this offset of this producer lie in one of
    them" with one bisect: a producer's transactions in a partition never overlap, so only its first
    abort marker at or after the offset can hold it. Used by partitions (native reads ask per
    transactional batch) and by the log cleaner."""

    __slots__ = ("_by_producer",)

    def __init__(self, aborted: Iterable[tuple[int, int, int]] = ()) -> None:
        """``aborted``: (producer id, first offset, marker offset), by marker offset."""
        # producer id -> (marker offsets, first offsets) of its aborted transactions, ascending
        self._by_producer: dict[int, tuple[list[int], list[int]]] = {}
        for producer_id, first_offset, marker_offset in aborted:
            self.add(producer_id, first_offset, marker_offset)

    def add(self, producer_id: int, first_offset: int, marker_offset: int) -> None:
        """An aborted transaction whose marker comes after every one added before."""
        markers, firsts = self._by_producer.setdefault(producer_id, ([], []))
        markers.append(marker_offset)
        firsts.append(first_offset)

    def holds(self, producer_id: int, offset: int) -> bool:
        found = self._by_producer.get(producer_id)
        if found is None:
            return False
        markers, firsts = found
        i = bisect.bisect_left(markers, offset)
        return i < len(markers) and firsts[i] <= offset


class PartitionTransactions:
    __slots__ = ("open", "aborted", "_aborted_last", "_aborts")

    def __init__(self) -> None:
        self.open: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.aborted: list[AbortedTxn] = []
        self._aborted_last: list[int] = []  # marker offsets of ``aborted`` (for bisect)
        self._aborts = ProducerAborts()  # ``aborted`` per producer, for ``in_aborted``

    @classmethod
    def restored(cls, open_transactions: dict[int, int], aborted: list[tuple[int, int, int]]) -> PartitionTransactions:
        """The state ``open`` and ``aborted`` describe (a partition-state snapshot's)."""
        txns = cls()
        txns.open = dict(open_transactions)
        for producer_id, first_offset, last_offset in aborted:
            txns._add_aborted(AbortedTxn(producer_id, first_offset, last_offset))
        return txns

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
            self._add_aborted(AbortedTxn(producer_id, first, offset))

    def _add_aborted(self, txn: AbortedTxn) -> None:
        self.aborted.append(txn)
        self._aborted_last.append(txn.last_offset)
        self._aborts.add(*txn)

    def last_stable(self, high_watermark: int) -> int:
        if not self.open:
            return high_watermark
        return min(high_watermark, min(self.open.values()))

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with data in [start, end): their marker is at or after ``start`` and
        they began before ``end`` (what a read_committed fetch of that range must be told)."""
        i = bisect.bisect_left(self._aborted_last, start)
        return [a for a in self.aborted[i:] if a.first_offset < end]

    def in_aborted(self, producer_id: int, offset: int) -> bool:
        """Whether ``offset``, written by ``producer_id``, lies in one of its aborted transactions."""
        return self._aborts.holds(producer_id, offset)

    def forget_aborted(self, marker_offsets: set[int]) -> None:
        """Forget the aborted transactions whose markers compaction removed (with all their data), as
        Kafka's cleaner drops them from the transaction index: a read_committed consumer told of one
        would wait for a marker that is gone and skip that producer's later batches."""
        if not marker_offsets or not any(a.last_offset in marker_offsets for a in self.aborted):
            return
        kept = [a for a in self.aborted if a.last_offset not in marker_offsets]
        self.aborted, self._aborted_last, self._aborts = [], [], ProducerAborts()
        for txn in kept:
            self._add_aborted(txn)

    def drop_below(self, log_start: int) -> None:
        """Forget aborted transactions whose marker is below the log start (retention)."""
        cut = bisect.bisect_left(self._aborted_last, log_start)
        if cut:
            kept = self.aborted[cut:]
            self.aborted, self._aborted_last, self._aborts = [], [], ProducerAborts()
            for txn in kept:
                self._add_aborted(txn)


class VerificationGuard:
    """One producer's transaction as a verification asked the transaction coordinator about it."""

    __slots__ = ("producer_epoch", "transactional_id", "confirmed")

    def __init__(self, producer_epoch: int, transactional_id: str) -> None:
        self.producer_epoch = producer_epoch
        self.transactional_id = transactional_id
        self.confirmed = False


class TransactionVerifications:
    """Which producers' ongoing transactions the transaction coordinator, on another node, confirmed
    include this partition (KIP-890's verification guards). A transactional batch is admitted here only
    under a confirmation. It is asked for before the transaction's first batch here and lasts until the
    partition writes that producer's next marker. The marker drops it at once, also when the answer is
    still on its way: a confirmation of a transaction that has ended since is never used, so no batch
    lands after its transaction's marker.

    At most ``MAX_GUARDS`` producers are remembered, the oldest forgotten first: a forgotten confirmation
    is asked for again; a forgotten question is answered as not confirmed."""

    __slots__ = ("_guards",)

    MAX_GUARDS = 4096

    def __init__(self) -> None:
        self._guards: OrderedDict[int, VerificationGuard] = OrderedDict()

    def admits(self, producer_id: int, producer_epoch: int, transactional_id: str) -> bool:
        guard = self._guards.get(producer_id)
        return (guard is not None and guard.confirmed and guard.producer_epoch == producer_epoch
                and guard.transactional_id == transactional_id)

    def begin(self, producer_id: int, producer_epoch: int, transactional_id: str) -> VerificationGuard:
        """A verification is about to be asked: what ``confirm`` takes once it is answered."""
        guard = self._guards[producer_id] = VerificationGuard(producer_epoch, transactional_id)
        self._guards.move_to_end(producer_id)
        while len(self._guards) > self.MAX_GUARDS:
            self._guards.popitem(last=False)
        return guard

    def confirm(self, producer_id: int, guard: VerificationGuard) -> bool:
        """The coordinator confirmed the transaction: whether it still counts (no marker came since)."""
        if self._guards.get(producer_id) is not guard:
            return False
        guard.confirmed = True
        return True

    def marker(self, producer_id: int) -> None:
        """A marker of the producer is being written: its transaction here is over."""
        self._guards.pop(producer_id, None)
