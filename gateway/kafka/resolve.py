"""Finding a request's topics and partition logs, creating topics on the way when allowed."""

from __future__ import annotations

import contextlib
from typing import Any, cast

from twisted.internet import defer

from millrace.gateway.kafka.broker import Broker
from millrace.gateway.kafka.partitions import PartitionLog
from millrace.gateway.kafka.topics import TopicError, TopicInfo

Logs = tuple[TopicInfo, list[PartitionLog]]


def _create_or_get(broker: Broker, name: str) -> TopicInfo | None:
    """Blocking (worker pool): create the topic unless it exists."""
    # A concurrent create may win, or the name may be illegal: the lookup below decides.
    with contextlib.suppress(TopicError):
        broker.topics.create(name, broker.config.default_partitions)
    return broker.topics.get(name)


def topic_logs(broker: Broker, name: str,
               auto_create: bool) -> defer.Deferred[Logs | None]:
    """Deferred of (TopicInfo, [PartitionLog]) or None for an unknown topic. Creating a topic blocks, so
    it runs on the worker pool; a loaded topic answers at once (in the same reactor turn)."""
    topic = broker.topics.get(name)
    if topic is not None:
        # Deferred is invariant to mypy, though a Deferred of logs is a Deferred of logs-or-None.
        return cast("defer.Deferred[Logs | None]", record_logs(broker, topic))
    if not (auto_create and broker.config.auto_create_topics):
        return defer.succeed(None)

    def opened(info: TopicInfo | None) -> Any:
        return None if info is None else record_logs(broker, info)

    return broker.blocking(_create_or_get, broker, name).addCallback(opened)


def record_logs(broker: Broker, topic: TopicInfo) -> defer.Deferred[Logs]:
    """Deferred of (TopicInfo, [PartitionLog]) of a topic or partitioned stream, at once when loaded."""
    parts = broker.partitions.loaded(topic.name)
    if parts is not None and len(parts) >= topic.partition_count:
        return defer.succeed((topic, parts))
    return broker.partitions.open_topic(topic).addCallback(lambda opened: (topic, opened))


def partition_or_none(parts: list[PartitionLog], index: int) -> PartitionLog | None:
    return parts[index] if 0 <= index < len(parts) else None
