"""Writer event numbers: native writers write exactly once across reconnects *and* restarts (Pravega's
writer id + event number, kept as segment attributes).

A native writer numbers its events, increasing per writer id; each batch it appends to a partition
carries the writer id and the batch's first and last event numbers (``WriterEvents``). Per (writer id,
partition) the partition keeps the last event number appended, and the data segment records it in the
attribute ``writer:<id>:<partition>`` atomically with the append that wrote it (the store applies an
append's attribute updates in the same durable-log operation as its bytes), so after a crash the segment
says exactly which of the writer's events it holds.

Rules:
- A batch whose last event number is at most the recorded one was written before: it is not appended
  again and answers ``ALREADY_WRITTEN``, once the writer's newest append in flight is acknowledged
  (acknowledgements come in offset order, so that one covers every earlier append); if that append fails,
  so does the duplicate, and the writer retries after the partition reloads.
- A batch that starts at or below the recorded number and ends above it is refused (INVALID_RECORD): a
  writer's batches of one partition never overlap.
- Load (``loading``): segments oldest first, newer values override older ones; a segment's attributes
  count for a partition unless the partition dropped a batch in it or in an earlier segment. A batch is
  dropped when it was durable in a successor while one before it in the predecessor was not; then every
  later batch of the partition is dropped too (offsets must stay contiguous), so every attribute those
  batches set is void, and none set by a kept batch is lost.

Owned by the reactor thread once the partition is installed (built on a worker during a load).
"""

from __future__ import annotations

from dataclasses import dataclass

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.store.contracts import AttributeUpdate, AttributeUpdateType
from millrace.streams.errors import PartitionError, Reason

#: What an append of events written before answers instead of an offset: where they landed is not kept.
ALREADY_WRITTEN = -1
ATTRIBUTE_PREFIX = "writer:"


def attribute_key(writer_id: str, partition: int) -> str:
    """The data segment attribute holding ``writer_id``'s last event number in ``partition``."""
    return f"{ATTRIBUTE_PREFIX}{writer_id}:{partition}"


def parse_attribute_key(key: str) -> tuple[str, int] | None:
    """(writer id, partition) of a writer attribute key, None for any other attribute."""
    if not key.startswith(ATTRIBUTE_PREFIX):
        return None
    writer_id, _, partition = key[len(ATTRIBUTE_PREFIX):].rpartition(":")
    if not writer_id or not partition.isdigit():
        return None
    return writer_id, int(partition)


@dataclass(frozen=True, slots=True)
class WriterEvents:
    """The event numbers one batch carries: ``first_event`` <= ``last_event``, both >= 0."""

    writer_id: str
    first_event: int
    last_event: int

    def __post_init__(self) -> None:
        if not self.writer_id or not 0 <= self.first_event <= self.last_event:
            raise PartitionError(Reason.INVALID_RECORD,
                                 f"event numbers {self.first_event}..{self.last_event} of writer "
                                 f"{self.writer_id!r}: a writer id and 0 <= first <= last")


class _Writer:
    __slots__ = ("last", "waiters", "segments")

    def __init__(self, last: int) -> None:
        self.last = last
        # Duplicates waiting for the writer's newest append in flight (None: nothing in flight)
        self.waiters: list[defer.Deferred[int]] | None = None
        self.segments: set[str] = set()  # data segments whose attributes hold a number of the writer


class WriterEventNumbers:
    """The last event number of each writer id that wrote to one partition."""

    __slots__ = ("partition", "_writers")

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self._writers: dict[str, _Writer] = {}

    def last(self, writer_id: str) -> int | None:
        state = self._writers.get(writer_id)
        return None if state is None else state.last

    def holds(self, events: WriterEvents) -> bool:
        """The batch is one this partition holds or is writing already (its events are at or below the
        writer's last number here): a resend, which ``check`` answers ``ALREADY_WRITTEN``."""
        state = self._writers.get(events.writer_id)
        return state is not None and events.last_event <= state.last

    def check(self, events: WriterEvents) -> defer.Deferred[int] | None:
        """None for a batch to append; for one written before, a Deferred of ``ALREADY_WRITTEN``.
        Raises PartitionError for a batch that overlaps the recorded number."""
        state = self._writers.get(events.writer_id)
        if state is None or events.first_event > state.last:
            return None
        if events.last_event > state.last:
            raise PartitionError(Reason.INVALID_RECORD,
                                 f"writer {events.writer_id}: events {events.first_event}..{events.last_event} "
                                 f"overlap the last one written, {state.last}")
        if state.waiters is None:
            return defer.succeed(ALREADY_WRITTEN)
        duplicate: defer.Deferred[int] = defer.Deferred()
        state.waiters.append(duplicate)
        return duplicate

    def appending(self, events: WriterEvents, acked: defer.Deferred[int], segment: str) -> AttributeUpdate:
        """Record the batch as the writer's newest (its append is being handed to ``segment`` with the
        returned attribute update); ``acked`` is the append's acknowledgement."""
        state = self._writers.get(events.writer_id)
        if state is None:
            state = self._writers[events.writer_id] = _Writer(events.last_event)
        state.last = events.last_event
        state.segments.add(segment)
        waiters: list[defer.Deferred[int]] = []
        state.waiters = waiters

        def settled(result: int | Failure) -> int | Failure:
            if state.waiters is waiters:
                state.waiters = None  # no newer append of the writer is in flight
            for duplicate in waiters:
                if isinstance(result, Failure):
                    duplicate.errback(result)
                else:
                    duplicate.callback(ALREADY_WRITTEN)
            return result

        acked.addBoth(settled)
        # The in-memory check above is the rule; the condition makes a broken one fail loudly instead of
        # recording a number that went backwards.
        return AttributeUpdate(attribute_key(events.writer_id, self.partition), events.last_event,
                               AttributeUpdateType.REPLACE_IF_GREATER)

    def recovered(self, attributes: dict[str, int], segment: str) -> None:
        """Take the writer numbers the attributes of data segment ``segment`` record for this partition
        (load, segments oldest first: a newer segment's number replaces an older one's)."""
        for key, value in attributes.items():
            parsed = parse_attribute_key(key)
            if parsed is not None and parsed[1] == self.partition:
                state = self._writers.get(parsed[0])
                if state is None:
                    state = self._writers[parsed[0]] = _Writer(value)
                state.last = value
                state.segments.add(segment)

    def forget(self, writer_id: str) -> list[str]:
        """Drop a writer id that will never append again (a committed transaction's merge); returns the
        data segments whose attribute of it the caller removes."""
        state = self._writers.pop(writer_id, None)
        return sorted(state.segments) if state is not None else []

    def __len__(self) -> int:
        return len(self._writers)
