"""DeleteRecords (key 21): move a partition's log start offset forward; storage is reclaimed once
no partition sharing a segment needs the prefix."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka.resolve import Unloadable, topic_logs_or_error
from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.delete_records import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.streams.partitions import PartitionError

DELETE_RECORDS = DeleteRecordsRequest.API_KEY
Response = DeleteRecordsResponse


def _delete(ctx: RequestContext, parts: list | None, dp: DeleteRecordsRequest.DeleteRecordsPartition) -> defer.Deferred:
    def result(error: int, low: int = -1) -> DeleteRecordsResponse.DeleteRecordsPartitionResult:
        return Response.DeleteRecordsPartitionResult(partition_index=dp.partition_index, low_watermark=low,
                                                     error_code=int(error))

    if parts is None or not 0 <= dp.partition_index < len(parts):
        return defer.succeed(result(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    try:
        d = ctx.broker.partitions.delete_records(parts[dp.partition_index], dp.offset)
    except PartitionError as exc:
        return defer.succeed(result(error_code(exc)))
    return d.addCallbacks(
        lambda low: result(ErrorCode.NONE, low), lambda f: result(ErrorCode.UNKNOWN_SERVER_ERROR))


@api(DeleteRecordsRequest, 0, 2)
def handle_delete_records(ctx: RequestContext,
                          request: DeleteRecordsRequest) -> defer.Deferred[DeleteRecordsResponse]:
    per_topic = []
    for t in request.topics:
        if not ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC, t.name):
            per_topic.append(defer.succeed([Response.DeleteRecordsPartitionResult(
                partition_index=dp.partition_index, low_watermark=-1, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                for dp in t.partitions]))
            continue

        def with_logs(found: Any, t: DeleteRecordsRequest.DeleteRecordsTopic = t) -> defer.Deferred:
            if isinstance(found, Unloadable):
                return defer.succeed([Response.DeleteRecordsPartitionResult(
                    partition_index=dp.partition_index, low_watermark=-1, error_code=found.error)
                    for dp in t.partitions])
            parts = found[1] if found else None
            return defer.gatherResults([_delete(ctx, parts, dp) for dp in t.partitions], consumeErrors=True)

        per_topic.append(topic_logs_or_error(ctx.broker, t.name, auto_create=False).addCallback(with_logs))
    return defer.gatherResults(per_topic, consumeErrors=True).addCallback(lambda results: Response(topics=[
        Response.DeleteRecordsTopicResult(name=t.name, partitions=parts)
        for t, parts in zip(request.topics, results, strict=True)
    ]))
