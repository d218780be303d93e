"""Fetch (key 1): durable batches of each partition, long-polling on max_wait_ms / min_bytes.

Fetch sessions (KIP-227) are refused the way a broker with a full session cache refuses them: a full
fetch asking for a new session gets session id 0, so the client keeps sending full requests; an
incremental fetch naming a session we never gave gets FETCH_SESSION_ID_NOT_FOUND.

The internal topics' partitions (``internal_topics``) are empty logs: no records at offset 0,
OFFSET_OUT_OF_RANGE past it, and only from their coordinator.
"""

from __future__ import annotations

import time
from typing import Any

from twisted.internet import defer, task

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.internal_topics import InternalTopic, internal_topic, internal_topic_by_id
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka.resolve import Unloadable, topic_logs_or_error
from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.fetch import FetchRequest, FetchResponse
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.streams.partitions import (
    READ_COMMITTED,
    FetchedRecords,
    PartitionError,
    PartitionLog,
    PartitionOffsets,
)

FETCH = FetchRequest.API_KEY
Response = FetchResponse
_Topic = FetchResponse.FetchableTopicResponse
_Entry = tuple[FetchRequest.FetchPartition, PartitionLog | None, int]  # a partition, its log, or why not
_EMPTY_LOG = PartitionOffsets(high_watermark=0, last_stable=0, log_start=0)


def _empty(index: int, error: int, offsets: PartitionOffsets | None = None) -> FetchResponse.PartitionData:
    return Response.PartitionData(
        partition_index=index, error_code=int(error),
        high_watermark=offsets.high_watermark if offsets is not None else -1,
        last_stable_offset=offsets.last_stable if offsets is not None else -1,
        log_start_offset=offsets.log_start if offsets is not None else -1, records=b"",
    )


class _FetchPlan:
    """The request's partitions resolved to logs (or errors), fetched once or repeatedly."""

    def __init__(self, ctx: RequestContext, request: FetchRequest) -> None:
        self.ctx = ctx
        self.request = request
        self.topics: list[tuple[FetchRequest.FetchTopic, list[_Entry]]] = []
        self.internal = False  # an internal topic's partition is asked for (nothing ever arrives there)

    def resolve(self) -> defer.Deferred:
        broker = self.ctx.broker
        by_id = self.ctx.api_version >= 13
        lookups: list[defer.Deferred[Any]] = []
        for ft in self.request.topics:
            internal = internal_topic_by_id(ft.topic_id) if by_id else internal_topic(ft.topic)
            if internal is not None:
                self.internal = True
                lookups.append(defer.succeed(internal))
                continue
            if by_id:
                topic = broker.topics.by_id(ft.topic_id)
                name = topic.name if topic is not None else None
            else:
                name = ft.topic
            lookups.append(topic_logs_or_error(broker, name, auto_create=False) if name else defer.succeed(None))

        def resolved(found: list[Any]) -> None:
            unknown = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            for ft, hit in zip(self.request.topics, found, strict=True):
                entries: list[_Entry] = []
                # Kafka asks READ before it looks the topic up: a client may not learn what it may not read.
                name = ft.topic if not by_id else (hit.name if isinstance(hit, InternalTopic) else
                                                   hit[0].name if isinstance(hit, tuple) else None)
                denied = name is not None and not self.ctx.authorized(AclOperation.READ, ResourceType.TOPIC, name)
                for fp in ft.partitions:
                    if denied:
                        entries.append((fp, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                    elif isinstance(hit, InternalTopic):
                        entries.append((fp, None, self._internal_error(hit, fp)))
                    elif hit is None:
                        entries.append((fp, None, unknown))
                    elif isinstance(hit, Unloadable):
                        entries.append((fp, None, hit.error))
                    elif not 0 <= fp.partition < len(hit[1]):
                        entries.append((fp, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    else:
                        entries.append((fp, hit[1][fp.partition], ErrorCode.NONE))
                self.topics.append((ft, entries))

        return defer.gatherResults(lookups, consumeErrors=True).addCallback(resolved)

    def _internal_error(self, topic: InternalTopic, fp: FetchRequest.FetchPartition) -> ErrorCode:
        """An internal topic's partition answers as an empty log (NONE: no records) from its leader."""
        error = topic.partition_error(self.ctx.broker, fp.partition)
        if error is ErrorCode.NONE and fp.fetch_offset != 0:
            return ErrorCode.OFFSET_OUT_OF_RANGE
        return error

    def logs(self) -> list[PartitionLog]:
        return [p for _, entries in self.topics for _, p, _ in entries if p is not None]

    def fetch_once(self) -> defer.Deferred:
        """Deferred of (response topics, bytes returned, any error, bytes held in ``Broker.fetch_memory``
        until the caller gives them back).

        KIP-74: the response's ``max_bytes`` (capped by the broker's ``fetch_max_bytes`` and by what is
        left of ``Broker.fetch_memory``) and each partition's ``partition_max_bytes`` bound whole
        batches, shared out in request order; the first partition with data returns at least its first
        batch whatever the limits (as Kafka's ``minOneMessage``), so a consumer never stalls on a batch
        larger than its limits, and the others return only what still fits. Sizes come from the offset
        index, so every partition's share is fixed before any store read starts (the reads then run
        concurrently) and the response never exceeds the limits by more than that first batch."""
        broker = self.ctx.broker
        partitions, memory = broker.partitions, broker.fetch_memory
        asked = self.request.max_bytes if self.ctx.api_version >= 3 else 0x7FFFFFFF
        budget = min(asked, broker.config.fetch_max_bytes, max(0, memory.limit - memory.used))
        planned_bytes = 0
        min_one = True
        errors = False
        reads: list[defer.Deferred[FetchResponse.PartitionData]] = []
        for _, entries in self.topics:
            for fp, p, error in entries:
                if p is None and error == ErrorCode.NONE:  # an internal topic's empty partition
                    reads.append(defer.succeed(_empty(fp.partition, error, _EMPTY_LOG)))
                    continue
                if p is None:
                    errors = True
                    reads.append(defer.succeed(_empty(fp.partition, error)))
                    continue
                try:
                    planned = partitions.fetch(p, fp.fetch_offset, max(0, min(fp.partition_max_bytes, budget)),
                                               self.request.isolation_level, min_one)
                except PartitionError as exc:
                    errors = True
                    reads.append(defer.succeed(_empty(fp.partition, error_code(exc), partitions.offsets(p))))
                    continue
                budget = max(0, budget - planned.size)
                planned_bytes += planned.size
                min_one = min_one and planned.size == 0
                reads.append(planned.result.addCallback(self._partition_data, fp.partition))
        layout = self.topics

        def assemble(results: list[FetchResponse.PartitionData]) -> tuple[list[_Topic], int, bool, int]:
            it = iter(results)
            out = []
            total = 0
            for ft, entries in layout:
                parts = []
                for _ in entries:
                    data = next(it)
                    total += len(data.records or b"")
                    parts.append(data)
                out.append(Response.FetchableTopicResponse(topic=ft.topic, topic_id=ft.topic_id, partitions=parts))
            return out, total, errors, planned_bytes

        memory.acquire(planned_bytes)

        def release(failure: Any) -> Any:
            memory.release(planned_bytes)
            return failure

        return defer.gatherResults(reads, consumeErrors=True).addCallbacks(assemble, release)

    def _partition_data(self, fetched: FetchedRecords, partition: int) -> FetchResponse.PartitionData:
        data = _empty(partition, ErrorCode.NONE, fetched.offsets)
        data.records = fetched.records
        if self.request.isolation_level == READ_COMMITTED:
            data.aborted_transactions = [
                Response.AbortedTransaction(producer_id=pid, first_offset=first)
                for pid, first in fetched.aborted_transactions]
        return data


def _count(ctx: RequestContext, plan: _FetchPlan, topics: list[_Topic]) -> None:
    """Kafka's BytesOutPerSec per topic and the errors the partitions answered, for /metrics (by the
    partitions' logs: a v13+ request names topics by id only)."""
    traffic = ctx.broker.traffic
    for (_, entries), answered in zip(plan.topics, topics, strict=True):
        sent = 0
        name = ""
        for (_, p, _), data in zip(entries, answered.partitions, strict=True):
            if data.error_code:
                traffic.errors[FETCH, data.error_code] += 1
            elif p is not None and data.records:
                sent += len(data.records)
                name = p.topic
        if sent:
            traffic.bytes_out[name] += sent


def _respond(ctx: RequestContext, topics: list[_Topic], error: int = ErrorCode.NONE) -> FetchResponse:
    return Response(error_code=int(error), session_id=0, responses=topics)


@api(FetchRequest, 4, 17)
def handle_fetch(ctx: RequestContext, request: FetchRequest) -> FetchResponse | defer.Deferred[FetchResponse]:
    if ctx.api_version >= 7 and (request.session_id != 0 or request.session_epoch > 0):
        ctx.broker.traffic.errors[FETCH, ErrorCode.FETCH_SESSION_ID_NOT_FOUND] += 1
        return _respond(ctx, [], ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    plan = _FetchPlan(ctx, request)
    deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
    min_bytes = max(request.min_bytes, 1) if request.max_wait_ms > 0 else 0

    def attempt(_: Any = None) -> defer.Deferred:
        return plan.fetch_once().addCallback(decide)

    def decide(outcome: tuple[list[_Topic], int, bool, int]) -> FetchResponse | defer.Deferred[FetchResponse]:
        topics, total, errors, held = outcome
        memory = ctx.broker.fetch_memory
        remaining = deadline - time.monotonic()
        if total >= min_bytes or errors or remaining <= 0.001:
            # The response's bytes stay in memory until the socket has taken them.
            ctx.when_sent(lambda: memory.release(held))
            _count(ctx, plan, topics)
            return _respond(ctx, topics)
        memory.release(held)
        if not plan.logs():
            # Only internal topics, which stay empty: wait out max_wait_ms as Kafka's delayed fetch does,
            # so a consumer polling them does not spin.
            return (task.deferLater(ctx.broker.partitions.clock, remaining, lambda: _respond(ctx, topics))
                    if plan.internal else _respond(ctx, topics))
        return ctx.broker.partitions.wait_for_data(plan.logs(), remaining).addCallback(attempt)

    return plan.resolve().addCallback(attempt)
