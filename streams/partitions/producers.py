"""Idempotent producers: per partition, the last few batches of each producer id, as Kafka keeps them.

Rules (Kafka's): a batch from an older epoch is refused (INVALID_PRODUCER_EPOCH); a new epoch must
start at sequence 0; a batch equal to one of the last ``PRODUCER_WINDOW`` is a duplicate and answers
with the original's base offset (once the original is acknowledged: a retry of a batch still in flight
waits for its outcome); any other batch must continue the sequence (OUT_OF_ORDER_SEQUENCE_NUMBER).

Transaction markers carry the producer's epoch: ``fence`` makes it the partition's current one, so a
zombie whose transaction the coordinator aborted with a bumped epoch is refused here too. The open
transactions themselves are ``transactions.PartitionTransactions``'.

Expiry (Kafka's ``producer.id.expiration.ms``): the state of a producer that wrote nothing for that
long, has no append in flight and no open transaction here is forgotten, so partitions do not keep
every producer id they ever saw. A producer that comes back
after that starts over as a new one, as in Kafka.

Owned by the reactor thread once the partition is installed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer

from millrace.streams.errors import PartitionError, Reason

#: The coordinator epoch of the markers of a single-process server (its coordinator never moves) and of
#: markers read back at a load (the index does not keep it). On a cluster, markers carry the coordinator's
#: term of the transactions table's container, and a partition refuses a marker of an older term than
#: the last it saw (``transactions.markers``).
MARKER_COORDINATOR_EPOCH = 0
PRODUCER_WINDOW = 5  # batches remembered per producer for duplicate detection, as Kafka does
_SEQUENCE_MASK = 0x7FFFFFFF  # sequences wrap at 2**31


@dataclass
class ProducerState:
    epoch: int
    # (first sequence, last sequence, base offset) of the last few batches, oldest first
    batches: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=PRODUCER_WINDOW))
    # base offset -> Deferreds of retries of an append still in flight: they get the original's outcome
    in_flight: dict[int, list[defer.Deferred[int]]] = field(default_factory=dict)
    last_ms: int = 0  # when it last wrote (append time; a recovered batch's max timestamp)
    # The coordinator epoch of its last transaction marker here (Kafka's ProducerStateEntry; -1: none yet)
    coordinator_epoch: int = -1


def _in_window(state: ProducerState, first_sequence: int, last_sequence: int) -> int | None:
    """The base offset of the producer's batch with these sequences among its last few, if there."""
    for seen_first, seen_last, base in state.batches:
        if seen_first == first_sequence and seen_last == last_sequence:
            return base
    return None


class Producers:
    """The producer states of one partition."""

    __slots__ = ("_states",)

    def __init__(self) -> None:
        self._states: dict[int, ProducerState] = {}

    def check(self, producer_id: int, epoch: int, first_sequence: int,
              last_sequence: int) -> tuple[ProducerState, defer.Deferred[int] | None]:
        """Kafka's idempotence rules for one batch: the producer's state and, for a duplicate, a
        Deferred of the original base offset. Raises PartitionError for a batch to refuse."""
        state = self._states.get(producer_id)
        if state is None:
            state = self._states[producer_id] = ProducerState(epoch)
            return state, None
        if epoch < state.epoch:
            raise PartitionError(Reason.PRODUCER_FENCED,
                                 f"producer {producer_id} epoch {epoch} is older than {state.epoch}")
        if epoch > state.epoch:
            if first_sequence != 0:
                raise PartitionError(Reason.OUT_OF_ORDER_SEQUENCE,
                                     f"new epoch {epoch} must start at sequence 0, not {first_sequence}")
            state = self._states[producer_id] = ProducerState(epoch)
            return state, None
        base = _in_window(state, first_sequence, last_sequence)
        if base is not None:
            retries = state.in_flight.get(base)
            if retries is None:
                return state, defer.succeed(base)
            duplicate: defer.Deferred[int] = defer.Deferred()
            retries.append(duplicate)
            return state, duplicate
        if state.batches:
            expected = (state.batches[-1][1] + 1) & _SEQUENCE_MASK
            if first_sequence != expected:
                raise PartitionError(Reason.OUT_OF_ORDER_SEQUENCE,
                                     f"producer {producer_id}: sequence {first_sequence}, expected {expected}")
        return state, None

    def recovered(self, producer_id: int, epoch: int, first_sequence: int, last_sequence: int, base: int,
                  timestamp_ms: int) -> None:
        """Replay one stored batch (recovery, oldest first): rebuilds the window of every producer."""
        state = self._states.get(producer_id)
        if state is None or epoch > state.epoch:
            state = self._states[producer_id] = ProducerState(epoch)
        if epoch == state.epoch:
            state.batches.append((first_sequence, last_sequence, base))
        state.last_ms = max(state.last_ms, timestamp_ms)

    def stored_base(self, producer_id: int, epoch: int, first_sequence: int, last_sequence: int) -> int | None:
        """The base offset of this producer's batch if it is among the last few this partition holds."""
        state = self._states.get(producer_id)
        if state is None or state.epoch != epoch:
            return None
        base = _in_window(state, first_sequence, last_sequence)
        return None if base is None or base in state.in_flight else base

    def holds(self, producer_id: int, epoch: int, first_sequence: int, last_sequence: int) -> bool:
        """This producer's batch is among the last few this partition holds or is writing: a resend."""
        state = self._states.get(producer_id)
        return state is not None and state.epoch == epoch and _in_window(state, first_sequence, last_sequence) is not None

    def fence(self, producer_id: int, epoch: int, now_ms: int, coordinator_epoch: int) -> None:
        """A transaction marker of ``epoch`` was written: older epochs of the producer are refused from
        now on (a coordinator that aborts a zombie's transaction writes its marker with a bumped epoch)."""
        state = self._states.get(producer_id)
        if state is None or epoch > state.epoch:
            state = self._states[producer_id] = ProducerState(epoch)
        state.last_ms = max(state.last_ms, now_ms)
        state.coordinator_epoch = coordinator_epoch

    def expire(self, before_ms: int, keep: Container[int]) -> int:
        """Forget producers idle since before ``before_ms`` with nothing in flight, except ``keep`` (those
        with an open transaction); how many were forgotten."""
        idle = [pid for pid, state in self._states.items()
                if state.last_ms < before_ms and not state.in_flight and pid not in keep]
        for pid in idle:
            del self._states[pid]
        return len(idle)

    def __len__(self) -> int:
        return len(self._states)

    def get(self, producer_id: int) -> ProducerState | None:
        return self._states.get(producer_id)

    def next_sequence(self, producer_id: int, epoch: int) -> int | None:
        """The sequence the producer's next batch must start at, if the partition knows its last one."""
        state = self._states.get(producer_id)
        if state is None or state.epoch != epoch or not state.batches:
            return None
        return (state.batches[-1][1] + 1) & _SEQUENCE_MASK

    def states(self) -> list[tuple[int, ProducerState]]:
        """Every producer this partition keeps, by producer id."""
        return sorted(self._states.items())

    def snapshot(self) -> list[list[Any]]:
        """Every producer's state as plain values (``snapshots``): id, epoch, last write, coordinator epoch
        and its window flattened; nothing in flight (a snapshot is built from stored batches only)."""
        return [[pid, s.epoch, s.last_ms, s.coordinator_epoch, [n for batch in s.batches for n in batch]]
                for pid, s in self._states.items()]

    @classmethod
    def restored(cls, rows: list[list[Any]]) -> Producers:
        """The producers a ``snapshot`` holds."""
        producers = cls()
        for pid, epoch, last_ms, coordinator_epoch, window in rows:
            state = producers._states[pid] = ProducerState(epoch, last_ms=last_ms, coordinator_epoch=coordinator_epoch)
            state.batches.extend(zip(window[0::3], window[1::3], window[2::3], strict=True))
        return producers


class RefusedSequences:
    """Per partition and producer, the first sequence refused with a retriable answer (the partition
    loading, its container elsewhere, a failed append found not stored) and not stored since. It
    outlives the partition's reloads (the storage keeps it, by topic and partition).

    A client pipelines up to five batches per partition. When the first is refused as retriable while
    the partition reloads and the next arrives once the reload is done, the next one's sequence
    skips the refused batch's: Kafka's rules answer OUT_OF_ORDER_SEQUENCE, and librdkafka answers that
    by bumping the producer's epoch and resending every batch it holds unacknowledged, on every
    partition, as new ones. A batch among them that some partition stored, though its answer was lost,
    is then written twice. So a gap that a refusal here explains is answered as retriable too: the
    client resends from the refused batch, in order, under the same epoch."""

    __slots__ = ("_first",)

    def __init__(self) -> None:
        self._first: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}

    def __bool__(self) -> bool:
        """Whether any refusal waits for its resend (the append path asks before anything else)."""
        return bool(self._first)

    def refused(self, topic: str, partition: int, producer_id: int, epoch: int, first_sequence: int) -> None:
        producers = self._first.setdefault((topic, partition), {})
        seen = producers.get(producer_id)
        if seen is None or epoch > seen[0] or (epoch == seen[0] and first_sequence < seen[1]):
            producers[producer_id] = (epoch, first_sequence)

    def explains_gap(self, topic: str, partition: int, producer_id: int, epoch: int, expected: int | None,
                     first_sequence: int) -> bool:
        """Whether a batch refused here lies in the gap before ``first_sequence`` (from ``expected``, the
        sequence the partition waits for; None: it knows none)."""
        seen = self.first_refused(topic, partition, producer_id)
        if seen is None or seen[0] != epoch:
            return False
        return (expected is None or expected <= seen[1]) and seen[1] < first_sequence

    def first_refused(self, topic: str, partition: int, producer_id: int) -> tuple[int, int] | None:
        """(epoch, first sequence) of the producer's refusal waiting for its resend here, if any."""
        return self._first.get((topic, partition), {}).get(producer_id)

    def stored(self, topic: str, partition: int, producer_id: int, epoch: int, last_sequence: int) -> None:
        """The producer's batch up to ``last_sequence`` was taken: refusals up to it (or of an older
        epoch) are answered."""
        producers = self._first.get((topic, partition))
        if producers is not None:
            seen = producers.get(producer_id)
            if seen is not None and (seen[0] != epoch or seen[1] <= last_sequence):
                del producers[producer_id]
                if not producers:
                    del self._first[(topic, partition)]

    def forget(self, topic: str) -> None:
        for key in [key for key in self._first if key[0] == topic]:
            del self._first[key]
