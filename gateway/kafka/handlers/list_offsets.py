"""ListOffsets (key 2): earliest, latest, max timestamp, or the first offset at a timestamp.

v9 adds LATEST_TIERED (-5, KIP-1005) and v10 a timeout for remote reads (KIP-1075), Kafka 4.0's last
version. No topic has Kafka's tiered storage (``remote.storage.enable``; long-term storage here is
below the log, not a second log), so latest-tiered answers as a 4.0 broker does for such a topic:
offset -1, timestamp -1, leader epoch -1; and nothing ever waits on remote reads.

The internal topics' partitions (``internal_topics``) answer as empty logs, from their coordinator only.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.internal_topics import InternalTopic, empty_log_offset, internal_topic
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka.resolve import Unloadable, topic_logs_or_error
from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.streams.partitions import PartitionError

LIST_OFFSETS = ListOffsetsRequest.API_KEY
LATEST_TIERED = -5  # ListOffsetsRequest.LATEST_TIERED_TIMESTAMP
Response = ListOffsetsResponse


def _result(index: int, error: int, offset: int = -1,
            timestamp: int = -1) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
    return Response.ListOffsetsPartitionResponse(
        partition_index=index, error_code=int(error), offset=offset, timestamp=timestamp)


def _lookup(ctx: RequestContext, parts: list, lp: ListOffsetsRequest.ListOffsetsPartition,
            isolation: int) -> defer.Deferred:
    if not 0 <= lp.partition_index < len(parts):
        return defer.succeed(_result(lp.partition_index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    if lp.current_leader_epoch > 0:
        return defer.succeed(_result(lp.partition_index, ErrorCode.UNKNOWN_LEADER_EPOCH))
    if lp.timestamp == LATEST_TIERED:
        # Nothing is in Kafka's remote storage: no offset, no timestamp, no epoch (left -1 by answer()).
        return defer.succeed(_result(lp.partition_index, ErrorCode.NONE))
    try:
        d = ctx.broker.partitions.list_offset(parts[lp.partition_index], lp.timestamp, isolation)
    except PartitionError as exc:
        return defer.succeed(_result(lp.partition_index, error_code(exc)))
    return d.addCallback(lambda found: _result(lp.partition_index, ErrorCode.NONE, found[0], found[1]))


def _internal_lookup(ctx: RequestContext, topic: InternalTopic,
                     lp: ListOffsetsRequest.ListOffsetsPartition) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
    error = topic.partition_error(ctx.broker, lp.partition_index)
    if error is not ErrorCode.NONE:
        return _result(lp.partition_index, error)
    if lp.timestamp == LATEST_TIERED:
        return _result(lp.partition_index, ErrorCode.NONE)
    return _result(lp.partition_index, ErrorCode.NONE, *empty_log_offset(lp.timestamp))


@api(ListOffsetsRequest, 1, 10)
def handle_list_offsets(ctx: RequestContext, request: ListOffsetsRequest) -> defer.Deferred[ListOffsetsResponse]:
    per_topic = []
    for t in request.topics:
        internal = internal_topic(t.name)
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name):
            per_topic.append(defer.succeed([_result(lp.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                            for lp in t.partitions]))
            continue
        if internal is not None:
            per_topic.append(defer.succeed([_internal_lookup(ctx, internal, lp) for lp in t.partitions]))
            continue

        def with_logs(found: Any, t: ListOffsetsRequest.ListOffsetsTopic = t) -> defer.Deferred:
            if found is None or isinstance(found, Unloadable):
                error = found.error if found is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                return defer.succeed([_result(lp.partition_index, error) for lp in t.partitions])
            return defer.gatherResults([_lookup(ctx, found[1], lp, request.isolation_level) for lp in t.partitions],
                                       consumeErrors=True)

        per_topic.append(topic_logs_or_error(ctx.broker, t.name, auto_create=False).addCallback(with_logs))
    def answer(results: list[list[ListOffsetsResponse.ListOffsetsPartitionResponse]]) -> ListOffsetsResponse:
        if ctx.api_version >= 4:  # every partition has had leader epoch 0; the field exists from v4
            for t, parts in zip(request.topics, results, strict=True):
                for lp, part in zip(t.partitions, parts, strict=True):
                    if not (lp.timestamp == LATEST_TIERED and part.error_code == ErrorCode.NONE):
                        part.leader_epoch = 0
        return Response(topics=[Response.ListOffsetsTopicResponse(name=t.name, partitions=parts)
                                for t, parts in zip(request.topics, results, strict=True)])

    return defer.gatherResults(per_topic, consumeErrors=True).addCallback(answer)
