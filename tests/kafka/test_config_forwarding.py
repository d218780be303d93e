"""Topic config changes on a cluster node that is not the controller, where the controller cannot be
asked: each TOPIC resource answers retriably (REQUEST_TIMED_OUT, as Kafka's forwarding does), never
NOT_CONTROLLER, unless the request is itself a forward (then NOT_CONTROLLER: it is not forwarded again);
BROKER resources are answered by the node itself. The forward to a live controller is tested on a real
cluster (tests/cluster/test_controller.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from twisted.internet.defer import Deferred

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.handlers.configs import (
    BROKER_RESOURCE,
    FORWARDED_CLIENT_ID,
    SET,
    TOPIC_RESOURCE,
    handle_alter_configs,
    handle_incremental_alter_configs,
)
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.alter_configs import AlterConfigsRequest
from millrace.gateway.kafka_protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest

NODE_ID = 2


class NoController:
    """A cluster view in which this node is not the controller and no controller is known."""

    def is_controller(self) -> bool:
        return False

    def controller(self) -> None:
        return None


def context(client_id: str = "admin") -> RequestContext:
    broker: Any = SimpleNamespace(cluster=NoController(), acls=None, config=SimpleNamespace(node_id=NODE_ID),
                                  topics=SimpleNamespace(get=lambda name: None))
    return RequestContext(broker=broker, api_key=IncrementalAlterConfigsRequest.API_KEY, api_version=1,
                          correlation_id=1, client_id=client_id, peer="127.0.0.1:1")


def incremental(*resources: tuple[int, str]) -> IncrementalAlterConfigsRequest:
    r = IncrementalAlterConfigsRequest
    return r(resources=[r.AlterConfigsResource(resource_type=kind, resource_name=name, configs=[
        r.AlterableConfig(name="retention.ms", config_operation=SET, value="1000")] if kind == TOPIC_RESOURCE
        else []) for kind, name in resources], validate_only=True)


def answered(response: Any) -> list[tuple[int, str, int]]:
    if isinstance(response, Deferred):
        out: list[Any] = []
        response.addBoth(out.append)
        assert out, "the answer needs no I/O here"
        response = out[0]
    return [(r.resource_type, r.resource_name, r.error_code) for r in response.responses]


def test_controller_unknown_answers_retriably_per_topic_and_broker_resources_locally() -> None:
    response = handle_incremental_alter_configs(context(), incremental(
        (TOPIC_RESOURCE, "a"), (BROKER_RESOURCE, str(NODE_ID)), (TOPIC_RESOURCE, "b"), (BROKER_RESOURCE, "9")))
    assert answered(response) == [
        (TOPIC_RESOURCE, "a", ErrorCode.REQUEST_TIMED_OUT),
        (BROKER_RESOURCE, str(NODE_ID), ErrorCode.NONE),
        (TOPIC_RESOURCE, "b", ErrorCode.REQUEST_TIMED_OUT),
        (BROKER_RESOURCE, "9", ErrorCode.INVALID_REQUEST),  # another broker's: not this node's to alter
    ]
    assert ErrorCode.REQUEST_TIMED_OUT.retriable


def test_legacy_alter_configs_is_forwarded_too() -> None:
    r = AlterConfigsRequest
    request = r(resources=[r.AlterConfigsResource(resource_type=TOPIC_RESOURCE, resource_name="a", configs=[
        r.AlterableConfig(name="retention.ms", value="1000")])])
    assert answered(handle_alter_configs(context(), request)) == [(TOPIC_RESOURCE, "a", ErrorCode.REQUEST_TIMED_OUT)]


def test_a_forward_is_not_forwarded_again() -> None:
    response = handle_incremental_alter_configs(context(f"{FORWARDED_CLIENT_ID}1"), incremental(
        (TOPIC_RESOURCE, "a"), (BROKER_RESOURCE, str(NODE_ID))))
    assert answered(response) == [(TOPIC_RESOURCE, "a", ErrorCode.NOT_CONTROLLER),
                                  (BROKER_RESOURCE, str(NODE_ID), ErrorCode.NONE)]
