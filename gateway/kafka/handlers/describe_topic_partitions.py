"""DescribeTopicPartitions (key 75, KIP-966): Metadata's topic view, paginated by partition count.

Answered as Kafka 4.0's ``DescribeTopicPartitionsRequestHandler`` and ``KRaftMetadataCache.describeTopicResponse``
do, with this node as leader, only replica and only in-sync replica of every partition (no eligible leader
replicas: ELR is off, so both ELR lists are empty):

* no topics asked = every topic; otherwise the named ones. Either way only names at or after the cursor's
  topic, each once, in name order;
* a cursor topic missing from a non-empty list, or a negative cursor partition, refuses the whole request:
  every requested topic INVALID_REQUEST (Kafka's ``getErrorResponse``);
* at most ``max(min(2000, ResponsePartitionLimit), 1)`` partitions (2000 = ``max.request.partition.size.limit``);
  the cursor's topic starts at the cursor's partition. When the limit stops inside a topic, NextCursor names
  that topic and its next partition; when it is reached exactly at a topic's end and more topics follow,
  NextCursor names the next topic at partition 0 (whether or not that topic exists);
* a named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an
  illegal name); when every topic is listed, one that vanished meanwhile is left out;
* the internal topics (``internal_topics``) are among every topic and answer when named, flagged internal.
"""

from __future__ import annotations

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.handlers.metadata import OPERATIONS_NOT_REQUESTED, ZERO_UUID
from millrace.gateway.kafka.internal_topics import INTERNAL_TOPICS, internal_topic
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.streams.topics import legal_topic_name

#: Kafka's ``max.request.partition.size.limit`` default: the most partitions one response carries.
MAX_PARTITIONS_PER_RESPONSE = 2000

_R = DescribeTopicPartitionsResponse
_Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
_Partition = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition


def _refused(request: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    """Kafka's error response for an invalid request: every requested topic INVALID_REQUEST."""
    return _R(throttle_time_ms=0, topics=[
        _Topic(error_code=ErrorCode.INVALID_REQUEST, name=t.name, topic_id=ZERO_UUID, is_internal=False, partitions=[])
        for t in request.topics], next_cursor=None)


@api(DescribeTopicPartitionsRequest, 0, 0)
def handle_describe_topic_partitions(
    ctx: RequestContext, request: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse:
    registry = ctx.broker.topics
    node = ctx.broker.config.node_id
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    every_topic = not request.topics
    listed = [*registry.names(), *INTERNAL_TOPICS] if every_topic else [t.name for t in request.topics]
    names = {n for n in listed if n >= cursor_topic}
    # Topics the principal may not describe: left out of a full listing, refused when named (below).
    hidden = {n for n in names if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, n)}
    if every_topic:
        names -= hidden
    if cursor is not None and not every_topic and cursor.topic_name not in names:
        return _refused(request)
    if cursor is not None and cursor.partition_index < 0:
        return _refused(request)

    remaining = max(min(MAX_PARTITIONS_PER_RESPONSE, request.response_partition_limit), 1)
    topics: list[_Topic] = []
    next_cursor: _R.Cursor | None = None
    for name in sorted(names):
        if remaining == 0:
            # The limit fell exactly at the previous topic's end: the next page starts at this one.
            next_cursor = _R.Cursor(topic_name=name, partition_index=0)
            break
        internal = internal_topic(name)
        topic = registry.get(name)
        if name in hidden:
            topics.append(_Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=ZERO_UUID,
                                 is_internal=False, partitions=[],
                                 topic_authorized_operations=OPERATIONS_NOT_REQUESTED))  # Kafka's default
            continue
        if internal is None and topic is None:
            if not every_topic:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if legal_topic_name(name) else \
                    ErrorCode.INVALID_TOPIC_EXCEPTION
                topics.append(_Topic(error_code=error, name=name, topic_id=ZERO_UUID, is_internal=False,
                                     partitions=[],
                                     topic_authorized_operations=ctx.authorized_operations(ResourceType.TOPIC, name)))
            continue
        # On a cluster node each partition's leader is its open segment's container owner (-1: none yet),
        # an internal topic's its coordinator.
        if internal is not None:
            topic_id, leaders = internal.topic_id, [internal.leader(ctx.broker)] * internal.partition_count
        elif topic is not None and ctx.broker.cluster is not None:
            topic_id, leaders = topic.topic_id, ctx.broker.cluster.partition_leaders(ctx.broker.partitions, topic)
        elif topic is not None:
            topic_id, leaders = topic.topic_id, [node] * topic.partition_count
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(len(leaders), start + remaining)
        partitions = [
            _Partition(error_code=0 if leaders[p] >= 0 else ErrorCode.LEADER_NOT_AVAILABLE, partition_index=p,
                       leader_id=leaders[p], leader_epoch=0 if leaders[p] >= 0 else -1,
                       replica_nodes=[leaders[p]] if leaders[p] >= 0 else [],
                       isr_nodes=[leaders[p]] if leaders[p] >= 0 else [], eligible_leader_replicas=[],
                       last_known_elr=[], offline_replicas=[])
            for p in range(start, end)
        ]
        topics.append(_Topic(error_code=0, name=name, topic_id=topic_id, is_internal=internal is not None,
                             partitions=partitions,
                             topic_authorized_operations=ctx.authorized_operations(ResourceType.TOPIC, name)))
        if end < len(leaders):
            next_cursor = _R.Cursor(topic_name=name, partition_index=end)
            break
        remaining -= len(partitions)
    return _R(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)
