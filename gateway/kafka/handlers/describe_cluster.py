"""DescribeCluster (key 60): a single server is the whole cluster, its only broker and its controller; a
cluster node lists every live node and names the elected node as the controller."""

from __future__ import annotations

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.handlers.metadata import OPERATIONS_NOT_REQUESTED
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.describe_cluster import (
    DescribeClusterRequest,
    DescribeClusterResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType

DESCRIBE_CLUSTER = DescribeClusterRequest.API_KEY
BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2  # Kafka's EndpointType (0 = UNKNOWN)
_R = DescribeClusterResponse


@api(DescribeClusterRequest, 0, 1)
def handle_describe_cluster(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    config = ctx.broker.config
    v0 = ctx.api_version == 0
    endpoint = BROKER_ENDPOINT if v0 else request.endpoint_type
    # Refusals as Kafka's AuthHelper gives them: the code and message alone (v0 can only say INVALID_REQUEST).
    if endpoint not in (BROKER_ENDPOINT, CONTROLLER_ENDPOINT):
        return _R(error_code=ErrorCode.INVALID_REQUEST if v0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                  error_message=f"Unsupported endpoint type {endpoint}")
    if endpoint == CONTROLLER_ENDPOINT:
        return _R(error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                  error_message="The request was sent to an endpoint of type BROKER, but we wanted an endpoint "
                                "of type CONTROLLER")
    return _R(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=BROKER_ENDPOINT,
        cluster_id=config.cluster_id,
        controller_id=config.node_id if ctx.broker.cluster is None else ctx.broker.cluster.controller_id(config.node_id),
        brokers=[_R.DescribeClusterBroker(broker_id=n.node_id, host=host, port=port, rack=None)
                 for n in ctx.broker.cluster.brokers() for host, port in [ctx.node_address(n)]]
        if ctx.broker.cluster is not None else
                [_R.DescribeClusterBroker(broker_id=config.node_id, host=ctx.advertised()[0],
                                          port=ctx.advertised()[1], rack=None)],
        cluster_authorized_operations=_cluster_operations(ctx) if request.include_cluster_authorized_operations
        else OPERATIONS_NOT_REQUESTED,
    )


def _cluster_operations(ctx: RequestContext) -> int:
    """The principal's cluster operations, as Kafka's AuthHelper answers them: none at all (0) unless it
    may DESCRIBE the cluster."""
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER)
