"""AlterPartitionReassignments (key 45) and ListPartitionReassignments (key 46) on a one-broker cluster.

This node is the only broker, so the only valid assignment of a partition is the one it has ([node]) and
no reassignment is ever in progress. Answered as Kafka 4.0's controller (``ReplicationControlManager``):

* Alter, per partition: an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION with Kafka's message; a
  null replica list (cancel) NO_REASSIGNMENT_IN_PROGRESS; an empty list, a broker id other than this node
  or a repeated one INVALID_REPLICA_ASSIGNMENT with Kafka's message (``validateManualPartitionAssignment``
  checks the ids in ascending order); [node] NONE, a no-op (the target equals the current replicas).
  The top-level error is NONE, its message null.
* List: no topics, whatever is asked.
"""

from __future__ import annotations

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from millrace.gateway.kafka_protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType

_A = AlterPartitionReassignmentsResponse


def _assignment_error(replicas: list[int], node: int) -> str | None:
    """Kafka's ``validateManualPartitionAssignment`` message for ``replicas``, None if valid."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for broker in sorted(replicas):
        if broker != node:
            return f"The manual partition assignment includes broker {broker}, but no such broker is registered."
        if broker == previous:
            return f"The manual partition assignment includes the broker {previous} more than once."
        previous = broker
    return None


@api(AlterPartitionReassignmentsRequest, 0, 0)
def handle_alter_partition_reassignments(
    ctx: RequestContext, request: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse:
    registry = ctx.broker.topics
    node = ctx.broker.config.node_id

    def outcome(name: str, target: AlterPartitionReassignmentsRequest.ReassignablePartition,
                ) -> tuple[ErrorCode, str | None]:
        topic = registry.get(name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}."
        if not 0 <= target.partition_index < topic.partition_count:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {name}:{target.partition_index}."
        if target.replicas is None:
            return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS.description
        invalid = _assignment_error(target.replicas, node)
        if invalid is not None:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, invalid
        return ErrorCode.NONE, None  # [node]: already the partition's replicas, nothing to move

    if not ctx.authorized(AclOperation.ALTER, ResourceType.CLUSTER):
        return _A(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                  error_message="Cluster authorization failed.", responses=[])
    responses = []
    for t in request.topics:
        partitions = []
        for target in t.partitions:
            error, message = outcome(t.name, target)
            partitions.append(_A.ReassignablePartitionResponse(partition_index=target.partition_index,
                                                                error_code=error, error_message=message))
        responses.append(_A.ReassignableTopicResponse(name=t.name, partitions=partitions))
    return _A(throttle_time_ms=0, error_code=0, error_message=None, responses=responses)


@api(ListPartitionReassignmentsRequest, 0, 0)
def handle_list_partition_reassignments(
    ctx: RequestContext, request: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse:
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                  error_message="Cluster authorization failed.", topics=[])
    return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message=None, topics=[])
