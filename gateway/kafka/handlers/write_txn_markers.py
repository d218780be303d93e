"""WriteTxnMarkers (27): a transaction coordinator on another node asks this partition leader to close
a producer's transaction with a COMMIT or ABORT marker (``transactions.markers.MarkerWriter``: at
most one marker per transaction end, so the coordinator's retries are harmless).

Errors per partition, as Kafka's leader answers them: UNKNOWN_TOPIC_OR_PARTITION (gone: the coordinator
skips it), NOT_LEADER_OR_FOLLOWER (moved or loading: the coordinator asks the new leader),
INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED (a stale marker, not written).
"""

from __future__ import annotations

import logging
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka.stream_errors import KafkaError, error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.write_txn_markers import (
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.streams.partitions import PartitionError

log = logging.getLogger(__name__)
Response = WriteTxnMarkersResponse


def _error(failure: Failure) -> ErrorCode:
    if failure.check(PartitionError, KafkaError):
        return error_code(failure.value)
    log.warning("writing a transaction marker failed: %s", failure.getErrorMessage())
    return ErrorCode.UNKNOWN_SERVER_ERROR


def _one(ctx: RequestContext, topic: str, partition: int, marker: WriteTxnMarkersRequest.WritableTxnMarker
         ) -> defer.Deferred[ErrorCode]:
    broker = ctx.broker
    info = broker.topics.record(topic)  # any scope's partitioned stream, as the coordinator names it
    if info is None or not 0 <= partition < info.partition_count:
        return defer.succeed(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    def write(parts: list[Any]) -> defer.Deferred[None]:
        return broker.transactions.markers.write(parts[partition], marker.producer_id, marker.producer_epoch,
                                                 marker.transaction_result, marker.coordinator_epoch)

    d = broker.partitions.open_topic(info).addCallback(write)
    return d.addCallbacks(lambda _: ErrorCode.NONE, _error)


@api(WriteTxnMarkersRequest, 0, 1)
def handle_write_txn_markers(ctx: RequestContext, request: WriteTxnMarkersRequest) -> defer.Deferred[Response]:
    results: list[defer.Deferred[ErrorCode]] = []
    # Only brokers write markers (CLUSTER_ACTION); a cluster node's own are sent without a session.
    denied = not ctx.authorized(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
    for marker in request.markers:
        for t in marker.topics:
            results.extend(defer.succeed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED) if denied else
                           _one(ctx, t.name, i, marker) for i in t.partition_indexes)

    def respond(errors: list[ErrorCode]) -> Response:
        it = iter(errors)
        return Response(markers=[Response.WritableTxnMarkerResult(
            producer_id=marker.producer_id,
            topics=[Response.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                Response.WritableTxnMarkerPartitionResult(partition_index=i, error_code=int(next(it)))
                for i in t.partition_indexes]) for t in marker.topics]) for marker in request.markers])

    return defer.gatherResults(results).addCallback(respond)
