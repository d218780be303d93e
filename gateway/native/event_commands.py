"""Event writer commands of the native protocol: events go through the Kafka partition storage.

``OPEN_WRITER`` turns a writer id into a (producer id, epoch) through the transaction coordinator,
whose per-id state is durable and whose every open bumps the epoch (fencing older instances of the
id), and answers the stream's partition slices so the writer routes keys itself. ``APPEND_EVENTS``
appends one RecordBatch v2 (``millrace.protocol.events``) to one partition through
``PartitionStorage.append``, exactly as a Kafka Produce does: same offsets, idempotence (duplicates
answer the original offset), high watermark and scaling switches; a batch of a writer opened with its
own id also names the writer and its event numbers, which the partition records in its segment's
attributes (``partitions.writer_events``): ``OPEN_WRITER`` answers the id's last number per partition, and
a batch written before by an earlier instance answers offset -1 instead of being stored again.
``READ_EVENTS`` answers the committed events of one segment (``event_reads``). On a cluster node both
answer ``WRONG_HOST`` (naming the segment) where the segment's container runs elsewhere, and
``OPEN_WRITER`` names each partition's open segment, so the client goes to the owners. All run on the
reactor.

Every stream can take events. A Kafka topic is served as is; a stream of another scope gets its
partitions from the topic registry on its first ``OPEN_WRITER`` (``TopicRegistry.adopt_stream``),
after which the partition storage serves it under the key ``scope/stream`` exactly like a topic. Its
partitions follow its segments: a split inside a partition's slice retires the partition, and an
``APPEND_EVENTS`` to a retired one is refused (``EventsRefusedError`` with ``PARTITION_RETIRED``, nothing
stored; a batch it holds already, by producer sequence or writer event numbers, answers as stored), so the
writer asks ``WRITER_ROUTING`` for the slices now and sends those events again to the
partitions that hold their keys; ``OPEN_WRITER`` names the retired partitions too.
"""

from __future__ import annotations

import struct

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.native.dispatch import Handlers, handlers, serve
from millrace.gateway.native.event_reads import read_events, served_here
from millrace.gateway.native.host import NativeHost
from millrace.gateway.native.stream_errors import native_refusal
from millrace.gateway.native.table_commands import Answer
from millrace.protocol import messages as m
from millrace.protocol.errors import (
    EventsRefusedError,
    InvalidRequestError,
    StreamNotFoundError,
)
from millrace.protocol.events import PARTITION_RETIRED
from millrace.protocol.records import RecordBatchError, iter_batches
from millrace.streams.errors import Reason, StreamError
from millrace.streams.partitions import PartitionError, PartitionLog
from millrace.streams.partitions.writer_events import WriterEvents
from millrace.streams.resolve import record_logs, refreshed
from millrace.streams.topics import TopicError, TopicInfo

WRITER_ID_PREFIX = "millrace.writer:"  # keeps writer ids apart from Kafka transactional ids
WRITER_LEASE_MS = 15 * 60 * 1000  # a writer holds no transaction, so the coordinator never times it out


_PRODUCER_ID = struct.Struct(">q")
_PRODUCER_ID_AT = 43  # in a RecordBatch v2 header


def _producer_id(batch: bytes) -> int:
    """The producer id a client's batch carries (-1 for none, or too short to say: the partition then
    refuses the batch as corrupt)."""
    if len(batch) < _PRODUCER_ID_AT + _PRODUCER_ID.size:
        return -1
    return int(_PRODUCER_ID.unpack_from(batch, _PRODUCER_ID_AT)[0])


def known_record(broker: NativeHost, name: str) -> defer.Deferred[TopicInfo | None]:
    """The partition record of ``name``. A cluster node learns of streams made (or first written)
    through other nodes from the topics table each second; a client sent here as the owner of their
    segments may come first, so an unknown record makes such a node read the table now."""
    topic = broker.topics.record(name)
    if topic is not None or broker.cluster is None:
        return defer.succeed(topic)
    return refreshed(broker, name, broker.topics.record)


def stream_key(broker: NativeHost, scope: str, stream: str) -> str:
    """The registry key of a stream."""
    return broker.topics.key(scope, stream)


def _adopt(broker: NativeHost, scope: str, stream: str) -> TopicInfo:
    """Blocking (worker pool): partition a stream outside the Kafka scope on its first writer (an
    unknown stream raises the controller's StreamNotFoundError, which the client knows)."""
    try:
        return broker.topics.adopt_stream(scope, stream)
    except TopicError as exc:
        raise InvalidRequestError(str(exc)) from None


def partitioned_stream(broker: NativeHost, scope: str, stream: str) -> defer.Deferred[TopicInfo]:
    """The stream's partition record, made on first use for a stream outside the Kafka scope (topics
    are made by Kafka's CreateTopics only: an unknown one raises StreamNotFoundError)."""
    topic = broker.topics.record(broker.topics.key(scope, stream))
    if topic is not None:
        return defer.succeed(topic)
    if scope == broker.config.scope:
        raise StreamNotFoundError(f"{scope}/{stream}")
    return broker.blocking(_adopt, broker, scope, stream)


def _resent(p: PartitionLog, payload: bytes, events: WriterEvents | None) -> bool:
    """The batch is one the partition holds already (its answer was lost, or a resumed commit's merge
    sends it again): a retired partition answers it as stored rather than refusing it, which would make
    the writer store its events a second time elsewhere."""
    if events is not None and p.writer_events.holds(events):
        return True
    try:
        h = next(iter_batches(memoryview(payload))).header
    except (StopIteration, RecordBatchError):
        return False  # the append refuses it as it would anyway
    last = h.base_sequence + h.record_count - 1
    return h.base_sequence >= 0 and p.producers.holds(h.producer_id, h.producer_epoch, h.base_sequence, last)


def event_handlers(broker: NativeHost) -> Handlers:
    def open_writer(r: m.OpenWriter, _payload: bytes) -> defer.Deferred[m.OpenWriterReply]:
        scope, stream, name = r.scope, r.stream, stream_key(broker, r.scope, r.stream)
        writer_id = r.writer_id
        if not writer_id:
            raise InvalidRequestError("a writer id is not empty")
        found = partitioned_stream(broker, scope, stream)

        def init(topic: TopicInfo) -> defer.Deferred[m.OpenWriterReply]:
            def opened(lease: tuple[int, int]) -> defer.Deferred[m.OpenWriterReply]:
                producer_id, epoch = lease
                current = broker.topics.record(name) or topic

                def answer(found: tuple[TopicInfo, list[PartitionLog]]) -> m.OpenWriterReply:
                    # After the epoch bump: an older instance can append nothing more, so these numbers
                    # stay the last ones until this instance writes.
                    numbers = {str(p.partition): n for p in found[1]
                               if (n := p.writer_events.last(writer_id)) is not None}
                    # Each partition's open segment: a cluster client sends its batches to that
                    # segment's owner (GET_SEGMENT_OWNER) instead of learning it from WRONG_HOST.
                    segments = tuple(p.writer.name if p.writer is not None else None for p in found[1])
                    return m.OpenWriterReply(producer_id=producer_id, epoch=epoch, slices=tuple(current.slices),
                                             event_numbers=numbers, segments=segments,
                                             retired=tuple(sorted(found[0].retired)))

                return record_logs(broker, current).addCallback(answer)

            def refused(failure: Failure) -> Failure:
                if isinstance(failure.value, StreamError):
                    return Failure(native_refusal(failure.value))
                return failure

            return broker.transactions.lease_writer(WRITER_ID_PREFIX + writer_id, WRITER_LEASE_MS).addCallbacks(
                opened, refused)

        return found.addCallback(init)

    def append_events(r: m.AppendEvents, payload: bytes) -> defer.Deferred[m.OffsetReply]:
        stream = f"{r.scope}/{r.stream}"
        partition = r.partition
        events = None
        if (r.first_event is None) != (r.last_event is None) or (r.first_event is not None and r.writer_id is None):
            raise InvalidRequestError("a writer's batch names its writer and its first and last event numbers")
        if r.writer_id is not None and r.first_event is not None and r.last_event is not None:
            try:
                events = WriterEvents(r.writer_id, r.first_event, r.last_event)
            except PartitionError as exc:
                raise InvalidRequestError(str(exc)) from None

        producer_id = _producer_id(payload)
        if producer_id >= 0:
            # A producer id is the writer's own lease: another writer's would make the owner's next
            # batch a duplicate of this one, acknowledged and lost.
            ids = broker.partitions.producer_ids
            if r.writer_id is None or (ids is not None and not ids.issued_for_transaction(
                    WRITER_ID_PREFIX + r.writer_id, producer_id)):
                raise EventsRefusedError(f"{stream}: producer id {producer_id} is not leased to writer "
                                         f"{r.writer_id!r}: open the writer (OPEN_WRITER) for one",
                                         Reason.PRODUCER_NOT_OWNED.value)

        def append(found: tuple[TopicInfo, list[PartitionLog]]) -> defer.Deferred[int]:
            current, parts = found
            current = broker.topics.record(current.name) or current  # a load may have read a newer one
            if not 0 <= partition < len(parts):
                raise StreamNotFoundError(f"{stream} has no partition {partition}")
            if partition in current.retired and not _resent(parts[partition], payload, events):
                raise EventsRefusedError(f"{stream}: partition {partition} retired when the stream split inside "
                                         f"its key range; route again", PARTITION_RETIRED)
            writer = parts[partition].writer
            if writer is not None:
                served_here(broker, writer.name)  # else NOT_LEADER (retriable) here forever
            return broker.partitions.append(current, parts[partition], memoryview(payload), events=events)

        def refused(failure: Failure) -> Failure:
            exc = failure.value
            if isinstance(exc, PartitionError):
                return Failure(native_refusal(exc))
            return failure

        def logs(topic: TopicInfo | None) -> defer.Deferred[tuple[TopicInfo, list[PartitionLog]]]:
            if topic is None:  # a stream of another scope gets its record from OPEN_WRITER
                raise StreamNotFoundError(stream)
            if partition >= topic.partition_count and broker.cluster is not None:
                # A partition carved through another node since this one last read the topics table.
                return refreshed(broker, topic.name, broker.topics.record).addCallback(
                    lambda fresh: record_logs(broker, fresh or topic))
            return record_logs(broker, topic)

        return known_record(broker, stream_key(broker, r.scope, r.stream)).addCallback(logs).addCallback(
            append).addCallbacks(lambda base: m.OffsetReply(offset=base), refused)

    def writer_routing(r: m.WriterRouting, _payload: bytes) -> defer.Deferred[m.WriterRoutingReply]:
        def answer(found: tuple[TopicInfo, list[PartitionLog]]) -> m.WriterRoutingReply:
            topic, parts = found
            return m.WriterRoutingReply(
                slices=tuple(topic.slices), retired=tuple(sorted(topic.retired)),
                segments=tuple(p.writer.name if p.writer is not None else None for p in parts))

        return partitioned_stream(broker, r.scope, r.stream).addCallback(
            lambda topic: record_logs(broker, broker.topics.record(topic.name) or topic)).addCallback(answer)

    def read_segment_events(r: m.ReadEvents, _payload: bytes) -> defer.Deferred[Answer]:
        if r.offset < 0 or r.max_bytes <= 0 or r.wait_ms < 0:
            raise InvalidRequestError("offset and wait_ms are not negative, max_bytes is positive")
        name = stream_key(broker, r.scope, r.stream)
        return known_record(broker, name).addCallback(lambda _: read_events(
            broker, lambda: broker.topics.record(name), r.scope, r.stream, r.segment_id, r.offset, r.max_bytes,
            r.wait_ms, r.end_offset))

    return handlers(serve(m.OpenWriter, open_writer), serve(m.AppendEvents, append_events),
                    serve(m.WriterRouting, writer_routing),
                    serve(m.ReadEvents, read_segment_events))
