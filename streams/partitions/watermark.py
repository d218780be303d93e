"""The high watermark and the order of acknowledgements.

Invariants:
- ``offset`` is one past the last offset of the newest append that is durable together with every
  append before it: the high watermark only counts durable data, never passing a gap, even when the
  appends sit in different segments (a scaling switch hands later appends to a successor).
- Acknowledgements are released in offset order, when the high watermark passes them, so a client never
  hears of a batch before every earlier batch of the partition is durable.
- A failed append fails itself and every later pending append: none of them can be acknowledged in
  order any more (some may be durable in a successor; the partition reloads and clients retry). An
  idempotent producer's batch among them is answered only after the reload, by whether the store holds
  it (``storage``): its outcome is unknown until then.

The last stable offset (partitions/transactions.py) is this high watermark capped by the first offset
of the oldest open transaction.

Owned by the reactor thread once the partition is installed.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from twisted.internet import defer

_PENDING, _DURABLE, _FAILED = 0, 1, 2


class IdempotentBatch(NamedTuple):
    """What identifies an idempotent producer's batch in a partition's producer state."""

    producer_id: int
    epoch: int
    first_sequence: int
    last_sequence: int


class PendingAppend:
    """An append handed to the store whose acknowledgement waits for the high watermark."""

    __slots__ = ("last_offset", "state", "acked", "batch")

    def __init__(self, last_offset: int, batch: IdempotentBatch | None = None) -> None:
        self.last_offset = last_offset
        self.state = _PENDING
        # Fires with None once the high watermark passes it, or with the batch's stored base offset when a
        # reload found it durable after its append failed.
        self.acked: defer.Deferred[int | None] = defer.Deferred()
        self.batch = batch  # an idempotent producer's batch: found again after a failure by its identity


class HighWatermark:
    __slots__ = ("offset", "_pending")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self._pending: deque[PendingAppend] = deque()  # in offset order

    def track(self, last_offset: int, batch: IdempotentBatch | None = None) -> PendingAppend:
        """Register the next append of the partition (offsets ascending)."""
        append = PendingAppend(last_offset, batch)
        self._pending.append(append)
        return append

    def made_durable(self, append: PendingAppend) -> list[defer.Deferred[int | None]]:
        """Note that ``append`` is durable; returns the acknowledgements the watermark now passes, in
        offset order (the caller fires them, then wakes the partition's fetchers)."""
        if append.state != _PENDING:
            return []  # already failed along with an earlier append
        append.state = _DURABLE
        passed = []
        pending = self._pending
        while pending and pending[0].state == _DURABLE:
            done = pending.popleft()
            self.offset = done.last_offset + 1
            passed.append(done.acked)
        return passed

    def failed(self, append: PendingAppend) -> list[PendingAppend]:
        """Drop ``append`` and every later pending append; returns them in offset order (the caller
        fails their acknowledgements)."""
        if append.state != _PENDING:
            return []
        doomed: list[PendingAppend] = []
        pending = self._pending
        while pending:
            last = pending.pop()
            last.state = _FAILED
            doomed.append(last)
            if last is append:
                break
        doomed.reverse()
        return doomed
