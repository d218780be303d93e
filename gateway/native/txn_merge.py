"""A native transaction's segments: how a commit lands their batches in the stream's partitions (the
merge), and the blocking segment I/O around them (seal and read back, delete, the event numbers stored).

A commit seals each transaction segment, reads its batches and appends them, in order, to their
partitions' *current* segments under the writer id ``txn:<uuid>`` with the batch's index in its
transaction segment as its event number, so the partition assigns Kafka offsets now and a batch appended
again after a crash answers ALREADY_WRITTEN instead of landing twice.

A native stream's partition may retire while a transaction is open (the stream split inside its key
range): its batches are then split by routing key among the partitions live when the commit was decided
(``reroute``), each piece keeping its batch's index as event number, so each partition still sees its
pieces in order and once. The COMMITTING record keeps the stream's partition count then, and every pass
of the merge, the first or one resumed after a crash, routes against the stream's record as it stood at
that count (``TopicInfo.view``), so each pass sends each piece to the same partition. A partition that
retired since (a split while the commit was cut off) holds exactly the pieces at or below its last event
number for ``txn:<uuid>`` (pieces land in index order per partition): it answers those ALREADY_WRITTEN
and refuses the next with PARTITION_RETIRED (``local_batch_appender`` here, ``APPEND_EVENTS`` on its
leader), and the refused piece and the rest go on, split by key, to the pieces its carve made
(``passed_on``), which may pass on in turn. So no piece lands twice, whatever splits a resumed commit
meets.

Threads: the reactor; segment I/O that blocks runs on the worker pool (``NativeHost.blocking``).
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime

from millrace.gateway.native.host import NativeHost
from millrace.gateway.native.txn_state import WRITER_PREFIX, events_attribute
from millrace.protocol.errors import EventsRefusedError, RetriableError, SegmentNotFoundError
from millrace.protocol.events import PARTITION_RETIRED, batch_records, encode_batch
from millrace.protocol.keys import key_hash
from millrace.store.controller.transactions import TxnRecord
from millrace.streams.errors import Reason
from millrace.streams.partitions import PartitionError, PartitionLog
from millrace.streams.partitions.formats import ENVELOPE, ENVELOPE_MAGIC
from millrace.streams.partitions.writer_events import ALREADY_WRITTEN, WriterEvents
from millrace.streams.resolve import record_logs, refreshed
from millrace.streams.topics import TopicInfo

log = logging.getLogger(__name__)

RETRY_SECONDS = 0.2
MAX_RETRY_SECONDS = 5.0
READ_CHUNK = 4 * 1024 * 1024
MERGE_WINDOW = 16  # a partition's batches appended at once during a commit
BLOCKING_TIMEOUT = 60.0

_Batches = list[tuple[int, int, bytes]]  # (partition, index in the transaction segment, batch)
BatchAppender = Callable[[TopicInfo, PartitionLog, bytes, WriterEvents], "defer.Deferred[int]"]


def local_batch_appender(broker: NativeHost) -> BatchAppender:
    """Commits append through this node's partition storage (a single server leads every partition). A
    partition retired in ``topic`` takes only the batches it holds already (they answer ALREADY_WRITTEN),
    as an ``APPEND_EVENTS`` to its leader would: any other is refused with PARTITION_RETIRED."""

    def append(topic: TopicInfo, log_: PartitionLog, batch: bytes, events: WriterEvents) -> defer.Deferred[int]:
        if log_.partition in topic.retired and not log_.writer_events.holds(events):
            raise retired_refusal(topic, log_.partition)
        return broker.partitions.append(topic, log_, memoryview(batch), events=events)

    return append


def retired_refusal(topic: TopicInfo, partition: int) -> EventsRefusedError:
    """What a retired partition answers a batch it does not hold (as ``APPEND_EVENTS`` does)."""
    return EventsRefusedError(f"{topic.name}: partition {partition} retired when the stream split inside its "
                              f"key range", PARTITION_RETIRED)


def is_retired_refusal(exc: BaseException) -> bool:
    """The partition refused a batch it does not hold because it retired (here or on its leader)."""
    return isinstance(exc, EventsRefusedError) and exc.reason == PARTITION_RETIRED


def sealed_batches(broker: NativeHost, name: str) -> _Batches:
    """Blocking: seal a transaction segment and read its batches back, in order (none if it was never
    made or is gone)."""
    store = broker.store
    try:
        length = store.seal(name).result(BLOCKING_TIMEOUT)
    except SegmentNotFoundError:
        return []
    data = bytearray()
    while len(data) < length:
        read = store.read(name, len(data), min(READ_CHUNK, length - len(data))).result(BLOCKING_TIMEOUT)
        if not read.data:
            raise RuntimeError(f"{name}: no data at {len(data)} below its length {length}")
        data += read.data
    batches: _Batches = []
    pos = 0
    while pos < length:
        magic, _version, partition, size = ENVELOPE.unpack_from(data, pos)
        if magic != ENVELOPE_MAGIC or pos + ENVELOPE.size + size > length:
            raise RuntimeError(f"{name}: no batch envelope at {pos}")
        start = pos + ENVELOPE.size
        batches.append((partition, len(batches), bytes(data[start:start + size])))
        pos = start + size
    return batches


def reroute(topic: TopicInfo, batches: _Batches) -> _Batches:
    """The batches of ``topic``'s retired partitions split by routing key among its live partitions (an
    event without a key goes to the first live partition inside its old one's slice); the others as
    they are. Pieces keep their batch's index and its events' order."""
    if not topic.retired or all(p not in topic.retired for p, _, _ in batches):
        return batches
    live = [(p, lo, hi) for p, (lo, hi) in enumerate(topic.slices) if p not in topic.retired]
    out: _Batches = []
    for partition, index, batch in batches:
        if partition not in topic.retired:
            out.append((partition, index, batch))
            continue
        lo, hi = topic.slices[partition]
        inside = [(p, a, b) for p, a, b in live if lo <= a and b <= hi]
        out += [(p, index, piece) for p, piece in split_batch(batch, inside)]
    return out


def split_batch(batch: bytes, targets: list[tuple[int, float, float]]) -> list[tuple[int, bytes]]:
    """A batch's events split by routing key among ``targets`` (partition, key range start, end), which
    cover the key ranges of its events; an event without a key goes to the first target. Per target
    partition (in order) one batch of its events, in their order."""
    pieces: dict[int, list[tuple[bytes | None, bytes]]] = {}
    timestamp = 0
    for record in batch_records(batch):
        timestamp = record.timestamp_ms
        if record.key is None:
            target = targets[0][0]
        else:
            h = key_hash(record.key.decode())
            target = next(p for p, a, b in targets if a <= h < b)
        pieces.setdefault(target, []).append((record.key, record.value))
    return [(p, encode_batch(events, timestamp)) for p, events in sorted(pieces.items())]


def passed_on(topic: TopicInfo, partition: int, batches: list[tuple[int, bytes]]) -> dict[int, list[tuple[int, bytes]]]:
    """Batches a retired ``partition`` never took, split by routing key among the pieces its carve made
    (``TopicInfo.pieces_of``): per piece, its parts in index order."""
    pieces = [(q, *topic.slices[q]) for q in topic.pieces_of(partition)]
    out: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for index, batch in batches:
        for q, piece in split_batch(batch, pieces):
            out[q].append((index, piece))
    return out


def delete_segments(broker: NativeHost, names: list[str]) -> None:
    """Blocking: delete transaction segments that exist."""
    for name in names:
        with contextlib.suppress(SegmentNotFoundError):
            broker.store.delete(name).result(BLOCKING_TIMEOUT)


def next_events(broker: NativeHost, record: TxnRecord) -> dict[str, int]:
    """Blocking: per partition written so far, the next event number its transaction segment expects."""
    answer: dict[str, int] = {}
    for name, partitions in record.segments:
        try:
            attributes = broker.store.get_info(name).attributes
        except SegmentNotFoundError:
            continue
        for p in partitions:
            last = attributes.get(events_attribute(p))
            if last is not None:
                answer[str(p)] = last + 1
    return answer


class CommitMerge:
    """Lands committed transactions' batches in their partitions, retrying until every one has landed
    (or ``stopped()``: another node serves the transactions now and finishes the commit)."""

    def __init__(self, broker: NativeHost, clock: IReactorTime, stream_key: Callable[[TxnRecord], str],
                 stopped: Callable[[], bool]) -> None:
        self.broker = broker
        self.clock = clock
        self.stream_key = stream_key
        self.stopped = stopped
        # How a commit lands a batch in its partition: here, through this node's partition storage; a
        # cluster node sends the batches of partitions another node leads to that node (``txn_cluster``).
        self.append_batch: BatchAppender = local_batch_appender(broker)

    def merge(self, record: TxnRecord) -> defer.Deferred[None]:
        """Append every batch of the transaction segments to its partition, in order (retried until done)."""
        name = self.stream_key(record)
        writer_id = f"{WRITER_PREFIX}{record.txn_id}"

        counts = [0, 0]  # batches, and those a commit before a crash had appended already

        def routed_batches(segment: str) -> tuple[int, _Batches]:
            """Blocking (a worker: re-routing decodes records): the segment's batches, as stored and as
            they land: routed among the partitions live when the commit was decided, so every pass
            routes them alike (a partition retired since passes on what it never took: ``_land_in``)."""
            batches = sealed_batches(self.broker, segment)
            topic = self.broker.topics.record(name)  # an in-memory read, safe from any thread
            if topic is None:
                return len(batches), batches
            count = topic.partition_count if record.partition_count is None else record.partition_count
            if count > topic.partition_count:
                raise RetriableError(f"{name} had {count} partitions at the commit of {record.txn_id}; this "
                                     f"node knows {topic.partition_count}")
            return len(batches), reroute(topic.view(count), batches)

        def merge_segment(read: tuple[int, _Batches]) -> defer.Deferred[Any]:
            stored, batches = read
            by_partition: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
            counts[0] += stored
            for partition, index, batch in batches:
                by_partition[partition].append((index, batch))
            return defer.gatherResults([self._land(name, writer_id, p, todo, 0, counts)
                                        for p, todo in by_partition.items()], consumeErrors=True)

        def merged(_: Any) -> None:
            if counts[1]:
                log.info("transaction %s: commit resumed, %d of its %d batches had been appended already",
                         record.txn_id, counts[1], counts[0])

        # The topics table read first: a partition another node retired must not take these batches.
        return self.broker.blocking(self.broker.topics.refresh).addCallback(lambda _: defer.gatherResults([
            self.broker.blocking(routed_batches, segment).addCallback(merge_segment)
            for segment, _ in record.segments], consumeErrors=True)).addCallback(merged)

    def _land(self, name: str, writer_id: str, partition: int, batches: list[tuple[int, bytes]],
              attempt: int, counts: list[int]) -> defer.Deferred[None]:
        """Append ``batches`` to the partition's current segment, ``MERGE_WINDOW`` at a time (a big
        transaction neither holds the reactor for one long turn nor floods the container); from the first
        that failed, again later (those that had landed answer ALREADY_WRITTEN)."""
        topic = self.broker.topics.record(name)
        if topic is not None:
            return self._land_in(topic, name, writer_id, partition, batches, attempt, counts)

        # Not known here is not gone: a node that took over the transactions may not have read the topics
        # table since the stream was made through another node (it refreshes it periodically). Only a
        # stream still missing after a fresh read was deleted, and its batches have nowhere to go.
        def found(topic: TopicInfo | None) -> defer.Deferred[None]:
            if topic is None:
                log.warning("committing into %s: the stream is gone, %d batches of partition %d dropped", name,
                            len(batches), partition)
                return defer.succeed(None)
            return self._land_in(topic, name, writer_id, partition, batches, attempt, counts)

        return refreshed(self.broker, name, self.broker.topics.record).addCallback(found)

    def _land_in(self, topic: TopicInfo, name: str, writer_id: str, partition: int,
                 batches: list[tuple[int, bytes]], attempt: int, counts: list[int]) -> defer.Deferred[None]:
        def append_all(found: tuple[TopicInfo, list[PartitionLog]]) -> defer.Deferred[Any]:
            current, parts = found
            acks: list[defer.Deferred[int]] = []
            for index, batch in batches[:MERGE_WINDOW]:
                try:
                    acks.append(self.append_batch(current, parts[partition], batch,
                                                  WriterEvents(writer_id, index, index)))
                except (PartitionError, EventsRefusedError) as exc:
                    acks.append(defer.fail(exc))
                    break
            return defer.DeferredList(acks, consumeErrors=True)

        def landed(results: list[tuple[bool, Any]]) -> defer.Deferred[None] | None:
            if self.stopped():
                # Another node serves the transactions now and finishes this commit from its COMMITTING
                # record. Failing keeps this node from recording COMMITTED over batches it never landed
                # (a conditional write that nothing else had changed yet would have gone through).
                raise RetriableError("this node no longer serves the native transactions; the one that does "
                                     "finishes the commit")
            failed = next((i for i, (ok, _) in enumerate(results) if not ok), len(results))
            counts[1] += sum(1 for _, offset in results[:failed] if offset == ALREADY_WRITTEN)
            if failed == len(results):
                rest = batches[failed:]
                return self._land(name, writer_id, partition, rest, 0, counts) if rest else None
            reason = results[failed][1]
            if is_retired_refusal(reason.value):
                return self._retired(name, writer_id, partition, batches[failed:], attempt, counts)
            delay = min(MAX_RETRY_SECONDS, RETRY_SECONDS * 2 ** min(attempt, 5))
            level = logging.DEBUG if isinstance(reason.value, PartitionError) and reason.value.reason in (
                Reason.NOT_OWNER, Reason.LOADING, Reason.SEGMENT_SEALED) else logging.WARNING
            log.log(level, "committing into %s-%d: %s; again in %.1f s", name, partition,
                    reason.getErrorMessage(), delay)
            return task.deferLater(self.clock, delay, lambda: None).addCallback(
                lambda _: self._land(name, writer_id, partition, batches[failed:], attempt + 1, counts))

        return record_logs(self.broker, topic).addCallback(append_all).addCallback(landed)

    def _retired(self, name: str, writer_id: str, partition: int, batches: list[tuple[int, bytes]],
                 attempt: int, counts: list[int]) -> defer.Deferred[None]:
        """``partition`` retired since the commit was decided and refused the first of ``batches``: it
        holds those before (a partition takes its batches in index order, and answered them
        ALREADY_WRITTEN), never these, so they go on, split by routing key, to the pieces its carve made
        (each of which may have retired too, and passes on in turn)."""

        def split(topic: TopicInfo | None) -> defer.Deferred[Any]:
            if topic is None or partition not in topic.retired:
                # Its leader knows of a carve this node has not read (or the stream is gone): land again
                # from the record read afresh.
                delay = min(MAX_RETRY_SECONDS, RETRY_SECONDS * 2 ** min(attempt, 5))
                return task.deferLater(self.clock, delay, lambda: None).addCallback(
                    lambda _: self._land(name, writer_id, partition, batches, attempt + 1, counts))
            return self.broker.blocking(passed_on, topic, partition, batches).addCallback(
                lambda pieces: defer.gatherResults([self._land(name, writer_id, q, todo, 0, counts)
                                                    for q, todo in pieces.items()], consumeErrors=True))

        topic = self.broker.topics.record(name)
        if topic is not None and partition in topic.retired:
            return split(topic)
        return refreshed(self.broker, name, self.broker.topics.record).addCallback(split)

