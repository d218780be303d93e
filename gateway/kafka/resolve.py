"""Finding a Kafka request's topics and partition logs, creating topics on the way when allowed (the
loading itself, shared with the native protocol, is ``streams.resolve``)."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, cast

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import Broker
from millrace.gateway.kafka.cluster import not_controller
from millrace.gateway.kafka.node_requests import request_node
from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.create_topics import CreateTopicsRequest
from millrace.streams.partitions import PartitionLog
from millrace.streams.resolve import (
    Logs,
    behind,
    in_arrival_order,
    load,
    loaded_logs,
    record_logs,
    refreshed,
    resolving,
)
from millrace.streams.topics import TopicError, TopicInfo

CREATE_TOPICS_VERSION = 4
log = logging.getLogger(__name__)


def _create_or_get(broker: Broker, name: str) -> TopicInfo | None:
    """Blocking (worker pool): create the topic unless it exists."""
    # A concurrent create may win, or the name may be illegal: the lookup below decides.
    with contextlib.suppress(TopicError):
        broker.topics.create(name, broker.config.default_partitions)
    return broker.topics.get(name)


def _ask_controller(broker: Broker, name: str) -> defer.Deferred[TopicInfo | None]:
    """Reactor: on a cluster node that is not the controller, the controller creates the topic (as a
    Kafka broker forwards an auto-creation to its active controller); then it is read from the topics
    table. None while the controller is unknown or refuses (the client asks again, as it does while a
    Kafka topic is being created)."""
    node = broker.cluster.controller() if broker.cluster is not None else None
    if node is None:
        return defer.succeed(None)
    request = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=broker.config.default_partitions, replication_factor=-1)], timeout_ms=30_000)

    def answered(response: Any) -> defer.Deferred[TopicInfo | None] | None:
        error = ErrorCode(response.topics[0].error_code)
        if error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.info("the controller did not create topic %s: %s", name, error.name)
            return None
        return refreshed(broker, name, broker.topics.get)

    def unreachable(failure: Failure) -> None:
        log.info("asking the controller to create topic %s failed: %s", name, failure.getErrorMessage())

    return request_node(broker.node_link, node, request, CREATE_TOPICS_VERSION,
                        f"millrace-node-{broker.config.node_id}").addCallbacks(answered, unreachable)


def loaded_topic_logs(broker: Broker, name: str) -> Logs | None:
    """What ``topic_logs`` answers at once for a known, loaded topic, without a Deferred; None when it
    would wait or the topic is unknown."""
    topic = broker.topics.get(name)
    return None if topic is None else loaded_logs(broker, topic)


def topic_logs(broker: Broker, name: str,
               auto_create: bool) -> defer.Deferred[Logs | None]:
    """Deferred of (TopicInfo, [PartitionLog]) or None for an unknown topic. Creating a topic blocks, so
    it runs on the worker pool; a loaded topic answers at once (in the same reactor turn)."""
    waiting = resolving(broker).get(name)
    if waiting is not None:
        return behind(waiting, lambda: topic_logs(broker, name, auto_create))
    topic = broker.topics.get(name)
    if topic is not None:
        # Deferred is invariant to mypy, though a Deferred of logs is a Deferred of logs-or-None.
        return cast("defer.Deferred[Logs | None]", record_logs(broker, topic))
    if not (auto_create and broker.config.auto_create_topics):
        return defer.succeed(None)

    def opened(info: TopicInfo | None) -> Any:
        return None if info is None else load(broker, info)

    def create() -> defer.Deferred[Any]:
        if not_controller(broker.cluster):
            return _ask_controller(broker, name).addCallback(opened)
        return broker.blocking(_create_or_get, broker, name).addCallback(opened)

    return in_arrival_order(broker, name, create)


@dataclass(frozen=True)
class Unloadable:
    """A topic whose partitions could not be loaded (its stored data does not parse, its store failed):
    each of its partitions answers ``error`` (KAFKA_STORAGE_ERROR for damaged data, as Kafka answers a
    partition on an offline log dir) while every other topic of the request is served."""

    error: ErrorCode


def topic_logs_or_error(broker: Broker, name: str, auto_create: bool) -> defer.Deferred[Logs | Unloadable | None]:
    """``topic_logs``, with a failed load turned into the topic's per-partition error: one damaged topic
    never fails a whole request (a Fetch of several topics) nor closes the connection."""
    def refused(failure: Failure) -> Unloadable:
        return Unloadable(error_code(failure.value))

    return cast("defer.Deferred[Logs | Unloadable | None]",
                topic_logs(broker, name, auto_create).addErrback(refused))


def partition_or_none(parts: list[PartitionLog], index: int) -> PartitionLog | None:
    return parts[index] if 0 <= index < len(parts) else None
