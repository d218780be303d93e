"""OffsetForLeaderEpoch (key 23): every partition has had one leader epoch, 0, since creation, so the
end offset of epoch 0 is the high watermark and later epochs are unknown."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka.resolve import Unloadable, topic_logs_or_error
from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.streams.partitions import PartitionError

OFFSET_FOR_LEADER_EPOCH = OffsetForLeaderEpochRequest.API_KEY
Response = OffsetForLeaderEpochResponse


def _end_offset(ctx: RequestContext, parts: list | None, op: OffsetForLeaderEpochRequest.OffsetForLeaderPartition,
                ) -> OffsetForLeaderEpochResponse.EpochEndOffset:
    def result(error: int, epoch: int = -1, end: int = -1) -> OffsetForLeaderEpochResponse.EpochEndOffset:
        return Response.EpochEndOffset(error_code=int(error), partition=op.partition, leader_epoch=epoch,
                                       end_offset=end)

    if parts is None or not 0 <= op.partition < len(parts):
        return result(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if op.current_leader_epoch > 0:
        return result(ErrorCode.UNKNOWN_LEADER_EPOCH)
    try:
        # Only the leader's end offset: a cluster node's stale copy answered 0 after a failover, and
        # librdkafka took that for a truncation and consumed the partition again from its start.
        offsets = ctx.broker.partitions.leader_offsets(parts[op.partition])
    except PartitionError as exc:
        return result(error_code(exc))
    if op.leader_epoch > 0:
        return result(ErrorCode.NONE)  # an epoch after ours: undefined, as Kafka answers
    return result(ErrorCode.NONE, 0, offsets.high_watermark)


@api(OffsetForLeaderEpochRequest, 2, 4)
def handle_offset_for_leader_epoch(
    ctx: RequestContext, request: OffsetForLeaderEpochRequest,
) -> defer.Deferred[OffsetForLeaderEpochResponse]:
    lookups = [topic_logs_or_error(ctx.broker, t.topic, auto_create=False) for t in request.topics]

    def answer(found: list[Any]) -> OffsetForLeaderEpochResponse:
        return Response(topics=[
            Response.OffsetForLeaderTopicResult(topic=t.topic, partitions=[
                Response.EpochEndOffset(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, partition=op.partition,
                                        leader_epoch=-1, end_offset=-1)
                if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic) else
                Response.EpochEndOffset(error_code=hit.error, partition=op.partition, leader_epoch=-1, end_offset=-1)
                if isinstance(hit, Unloadable) else _end_offset(ctx, hit[1] if hit else None, op)
                for op in t.partitions])
            for t, hit in zip(request.topics, found, strict=True)
        ])

    return defer.gatherResults(lookups, consumeErrors=True).addCallback(answer)
