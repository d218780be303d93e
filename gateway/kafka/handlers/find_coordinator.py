"""FindCoordinator (10): in one process this node coordinates every group and transactional id; on a
cluster the group coordinator is the owner of the groups table's container and the transaction
coordinator the owner of the transactions table's container (``gateway/kafka/cluster.py``).

Key types: 0 = consumer group and 1 = transactional id, 2 = share group (v6+, not supported:
COORDINATOR_NOT_AVAILABLE); any other is an INVALID_REQUEST, as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType

if TYPE_CHECKING:
    from millrace.gateway.kafka.nodes import KafkaNode

FIND_COORDINATOR = FindCoordinatorRequest.API_KEY
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2


def _lookup(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, str | None]:
    if key_type == KEY_TYPE_GROUP and not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."
    if key_type == KEY_TYPE_TRANSACTION and not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                                               key):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Transactional Id authorization failed."
    cluster = ctx.broker.cluster
    if cluster is not None and key_type == KEY_TYPE_GROUP and cluster.group_coordinator() is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the groups table's container has no live owner"
    if cluster is not None and key_type == KEY_TYPE_TRANSACTION and cluster.transaction_coordinator() is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the transactions table's container has no live owner"
    if key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        return ErrorCode.NONE, None
    if key_type == KEY_TYPE_SHARE and ctx.api_version >= 6:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "share groups are not supported"
    return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}"


def _coordinator(ctx: RequestContext, key_type: int) -> tuple[int, str, int]:
    """(node id, host, port) of the coordinator for ``key_type``: this node, or on a cluster the owner of
    the groups (transactions) table's container (``_lookup`` has checked there is one)."""
    config = ctx.broker.config
    cluster = ctx.broker.cluster
    node: KafkaNode | None = None
    if cluster is not None:
        node = cluster.transaction_coordinator() if key_type == KEY_TYPE_TRANSACTION else cluster.group_coordinator()
    if node is not None:
        return (node.node_id, *ctx.node_address(node))
    return (config.node_id, *ctx.advertised())


@api(FindCoordinatorRequest, 0, 6)
def handle_find_coordinator(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    cls = FindCoordinatorResponse
    key_type = request.key_type if ctx.api_version >= 1 else KEY_TYPE_GROUP
    node_id, host, port = _coordinator(ctx, key_type)
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, message = _lookup(ctx, key_type, key)
            ok = error is ErrorCode.NONE
            coordinators.append(cls.Coordinator(
                key=key, node_id=node_id if ok else -1, host=host if ok else "",
                port=port if ok else -1, error_code=int(error), error_message=message))
        return cls(throttle_time_ms=0, coordinators=coordinators)
    error, message = _lookup(ctx, key_type, request.key)
    if error is not ErrorCode.NONE:
        return cls(throttle_time_ms=0, error_code=int(error), error_message=message, node_id=-1, host="", port=-1)
    return cls(throttle_time_ms=0, error_code=0, error_message=None, node_id=node_id, host=host, port=port)
