"""Finding a request's topics and partition logs, creating topics on the way when allowed."""

from __future__ import annotations

import contextlib
from typing import Any

from twisted.internet import defer

from millrace.gateway.kafka.broker import Broker
from millrace.gateway.kafka.partition_log import PartitionLog
from millrace.gateway.kafka.topics import TopicError, TopicInfo


def _create_or_get(broker: Broker, name: str) -> TopicInfo | None:
    # A concurrent create may win, or the name may be illegal: the lookup below decides.
    with contextlib.suppress(TopicError):
        broker.topics.create(name, broker.config.default_partitions)
    topic = broker.topics.get(name)
    if topic is not None:
        broker.partitions.ensure_topic(topic)
    return topic


def topic_logs(broker: Broker, name: str, auto_create: bool) -> defer.Deferred:
    """Deferred of (TopicInfo, [PartitionLog]) or None for an unknown topic. Loading a topic's logs
    (or creating it) blocks, so it runs off the reactor; the common case answers at once."""
    topic = broker.topics.get(name)
    if topic is None:
        if not (auto_create and broker.config.auto_create_topics):
            return defer.succeed(None)
        d = broker.blocking(_create_or_get, broker, name)
    elif broker.partitions.loaded(name) and len(broker.partitions.partition_logs(name)) >= topic.partition_count:
        return defer.succeed((topic, broker.partitions.partition_logs(name)))
    else:
        d = broker.blocking(broker.partitions.ensure_topic, topic).addCallback(lambda _: topic)

    def done(found: Any) -> Any:
        if found is None:
            return None
        return found, broker.partitions.partition_logs(found.name)

    return d.addCallback(done)


def partition_or_none(parts: list[PartitionLog], index: int) -> PartitionLog | None:
    return parts[index] if 0 <= index < len(parts) else None
