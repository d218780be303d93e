"""DescribeCluster (key 60): this node is the whole cluster, its only broker and its controller."""

from __future__ import annotations

from typing import Any

from gateway.kafka.handlers.metadata import CLUSTER_OPERATIONS, OPERATIONS_NOT_REQUESTED
from gateway.kafka.registry import api
from gateway.kafka_protocol.codec import response_class
from gateway.kafka_protocol.errors import ErrorCode

DESCRIBE_CLUSTER = 60
BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2
_R = response_class(DESCRIBE_CLUSTER)


@api(DESCRIBE_CLUSTER, 0, 1)
def handle_describe_cluster(ctx: Any, request: Any) -> Any:
    config = ctx.broker.config
    endpoint = request.endpoint_type if ctx.api_version >= 1 else BROKERS_ENDPOINT
    response = _R(throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=endpoint,
                  cluster_id=config.cluster_id, controller_id=config.node_id, brokers=[],
                  cluster_authorized_operations=CLUSTER_OPERATIONS if request.include_cluster_authorized_operations
                  else OPERATIONS_NOT_REQUESTED)
    if endpoint == CONTROLLERS_ENDPOINT:
        # As a Kafka broker answers: controllers are described by asking a controller endpoint.
        response.error_code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        response.error_message = "this node is a broker endpoint; it does not describe controllers"
    elif endpoint != BROKERS_ENDPOINT:
        response.error_code = ErrorCode.INVALID_REQUEST
        response.error_message = f"unknown endpoint type {endpoint}"
    else:
        response.brokers = [_R.DescribeClusterBroker(broker_id=config.node_id, host=config.advertised_host,
                                                     port=config.advertised_port, rack=None)]
    return response
