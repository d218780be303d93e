"""Finding a request's topics and partition logs, creating topics on the way when allowed."""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, cast

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import Broker
from millrace.gateway.kafka.cluster import not_controller
from millrace.gateway.kafka.node_requests import request_node
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.create_topics import CreateTopicsRequest
from millrace.streams.partitions import PartitionLog
from millrace.streams.topics import TopicError, TopicInfo

Logs = tuple[TopicInfo, list[PartitionLog]]
T = TypeVar("T")
CREATE_TOPICS_VERSION = 4
log = logging.getLogger(__name__)


def _create_or_get(broker: Broker, name: str) -> TopicInfo | None:
    """Blocking (worker pool): create the topic unless it exists."""
    # A concurrent create may win, or the name may be illegal: the lookup below decides.
    with contextlib.suppress(TopicError):
        broker.topics.create(name, broker.config.default_partitions)
    return broker.topics.get(name)


def refreshed(broker: Broker, name: str,
              lookup: Callable[[str], TopicInfo | None]) -> defer.Deferred[TopicInfo | None]:
    """Reactor: read the topics table now (on the worker pool), then look ``name`` up again with
    ``lookup`` (``topics.get`` for a Kafka topic, ``topics.record`` for any record): on a cluster node,
    for a record another node wrote since this node's last periodic refresh."""
    return broker.blocking(broker.topics.refresh).addCallback(lambda _: lookup(name))


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

    return request_node(node.host, node.port, request, CREATE_TOPICS_VERSION,
                        f"millrace-node-{broker.config.node_id}").addCallbacks(answered, unreachable)


def topic_logs(broker: Broker, name: str,
               auto_create: bool) -> defer.Deferred[Logs | None]:
    """Deferred of (TopicInfo, [PartitionLog]) or None for an unknown topic. Creating a topic blocks, so
    it runs on the worker pool; a loaded topic answers at once (in the same reactor turn)."""
    waiting = _resolving(broker).get(name)
    if waiting is not None:
        return _behind(waiting, lambda: topic_logs(broker, name, auto_create))
    topic = broker.topics.get(name)
    if topic is not None:
        # Deferred is invariant to mypy, though a Deferred of logs is a Deferred of logs-or-None.
        return cast("defer.Deferred[Logs | None]", record_logs(broker, topic))
    if not (auto_create and broker.config.auto_create_topics):
        return defer.succeed(None)

    def opened(info: TopicInfo | None) -> Any:
        return None if info is None else _load(broker, info)

    def create() -> defer.Deferred[Any]:
        if not_controller(broker):
            return _ask_controller(broker, name).addCallback(opened)
        return broker.blocking(_create_or_get, broker, name).addCallback(opened)

    return _in_arrival_order(broker, name, create)


def record_logs(broker: Broker, topic: TopicInfo) -> defer.Deferred[Logs]:
    """Deferred of (TopicInfo, [PartitionLog]) of a topic or partitioned stream, at once when loaded."""
    waiting = _resolving(broker).get(topic.name)
    if waiting is not None:
        return _behind(waiting, lambda: record_logs(broker, topic))
    parts = broker.partitions.loaded(topic.name)
    if parts is not None and len(parts) >= topic.partition_count:
        return defer.succeed((topic, parts))
    return _in_arrival_order(broker, topic.name, lambda: _load(broker, topic))


def _load(broker: Broker, topic: TopicInfo) -> defer.Deferred[Logs]:
    return broker.partitions.open_topic(topic).addCallback(lambda opened: (topic, opened))


# Requests that find a topic being resolved (created, or its partitions loaded, off the reactor) wait
# behind the request that started it and go on in arrival order, each only after the one before it ran
# its own callbacks: otherwise a later request (on the same connection, say) could find the topic ready
# and append before an earlier one still waiting for the load. Pipelined produce requests of an
# idempotent producer would then land out of sequence (its first batch refused with
# OUT_OF_ORDER_SEQUENCE, fatal to the producer): a cluster node hits this whenever it loads a topic made
# through another node while a producer already writes to it (tests/cluster/test_produce_order.py).
_RESOLVING: weakref.WeakKeyDictionary[Broker, dict[str, list[defer.Deferred[None]]]] = weakref.WeakKeyDictionary()


def _resolving(broker: Broker) -> dict[str, list[defer.Deferred[None]]]:
    return _RESOLVING.setdefault(broker, {})


def _behind(waiting: list[defer.Deferred[None]], again: Callable[[], defer.Deferred[T]]) -> defer.Deferred[T]:
    turn: defer.Deferred[None] = defer.Deferred()
    waiting.append(turn)
    return turn.addCallback(lambda _: again())


def _in_arrival_order(broker: Broker, name: str, resolve: Callable[[], defer.Deferred[T]]) -> defer.Deferred[T]:
    """Resolve ``name`` for this request; requests arriving meanwhile wait (``_behind``) until this
    request's own callbacks have run, then each tries again in turn."""
    resolving = _resolving(broker)
    waiting: list[defer.Deferred[None]] = []
    resolving[name] = waiting
    result: defer.Deferred[T] = defer.Deferred()

    def done(outcome: Any) -> None:
        resolving.pop(name, None)
        if isinstance(outcome, Failure):
            result.errback(outcome)
        else:
            result.callback(outcome)
        for turn in waiting:
            turn.callback(None)

    resolve().addBoth(done)
    return result


def partition_or_none(parts: list[PartitionLog], index: int) -> PartitionLog | None:
    return parts[index] if 0 <= index < len(parts) else None
