"""DescribeProducers (key 61): the producer states each partition keeps (Kafka's ``activeProducers``).

Answered as Kafka 4.0's ``KafkaApis.handleDescribeProducersRequest`` and ``UnifiedLog.activeProducers``:
per requested partition, every producer id the partition remembers (``partitions/producers.py``: until it
expires after ``producer.id.expiration.ms``) with its epoch, the last sequence it wrote (-1 when it wrote
only through markers since its epoch began), its last write time, the coordinator epoch of its last
transaction marker here (-1 before any) and the first offset of its open transaction here (-1 without one).
An illegal topic name answers INVALID_TOPIC_EXCEPTION with Kafka's message, an unknown topic
UNKNOWN_TOPIC_OR_PARTITION with the error's message, an unknown partition of a known topic
UNKNOWN_TOPIC_OR_PARTITION without one.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.describe_producers import (
    DescribeProducersRequest,
    DescribeProducersResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.streams.partitions import PartitionLog
from millrace.streams.resolve import record_logs

_R = DescribeProducersResponse
MAX_TOPIC_NAME = 249
_LEGAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def invalid_topic_message(name: str) -> str | None:
    """Kafka's ``Topic.validate`` message for an illegal topic name, None for a legal one."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters, Topic name: {name}"
    if not set(name) <= _LEGAL_CHARS:
        return f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def _producers(part: PartitionLog) -> list[DescribeProducersResponse.ProducerState]:
    return [
        _R.ProducerState(producer_id=pid, producer_epoch=state.epoch,
                         last_sequence=state.batches[-1][1] if state.batches else -1,
                         last_timestamp=state.last_ms, coordinator_epoch=state.coordinator_epoch,
                         current_txn_start_offset=part.txns.open.get(pid, -1))
        for pid, state in part.producers.states()
    ]


@api(DescribeProducersRequest, 0, 0)
def handle_describe_producers(ctx: RequestContext,
                              request: DescribeProducersRequest) -> defer.Deferred[DescribeProducersResponse]:
    broker = ctx.broker

    def topic_response(t: DescribeProducersRequest.TopicRequest) -> defer.Deferred[Any]:
        def refused(error: ErrorCode, message: str | None) -> DescribeProducersResponse.TopicResponse:
            return _R.TopicResponse(name=t.name, partitions=[
                _R.PartitionResponse(partition_index=p, error_code=error, error_message=message)
                for p in t.partition_indexes])

        if not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, t.name):
            return defer.succeed(refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."))
        invalid = invalid_topic_message(t.name)
        if invalid is not None:
            return defer.succeed(refused(ErrorCode.INVALID_TOPIC_EXCEPTION, invalid))
        topic = broker.topics.get(t.name)
        if topic is None:
            return defer.succeed(refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.description))

        def described(found: Any) -> DescribeProducersResponse.TopicResponse:
            _, parts = found
            return _R.TopicResponse(name=t.name, partitions=[
                _R.PartitionResponse(partition_index=p, error_code=0, error_message=None,
                                     active_producers=_producers(parts[p]))
                if 0 <= p < topic.partition_count else
                _R.PartitionResponse(partition_index=p, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     error_message=None)
                for p in t.partition_indexes])

        return record_logs(broker, topic).addCallback(described)

    return defer.gatherResults([topic_response(t) for t in request.topics], consumeErrors=True).addCallback(
        lambda topics: _R(throttle_time_ms=0, topics=topics))
