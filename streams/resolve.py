"""Finding a topic's (or partitioned stream's) partition logs, loading them on the way, in the order
requests ask: what both protocols' appends and reads go through."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.streams.host import StreamHost
from millrace.streams.partitions import PartitionLog
from millrace.streams.topics import TopicInfo

Logs = tuple[TopicInfo, list[PartitionLog]]
T = TypeVar("T")


def refreshed(host: StreamHost, name: str,
              lookup: Callable[[str], TopicInfo | None]) -> defer.Deferred[TopicInfo | None]:
    """Reactor: read the topics table now (on the worker pool), then look ``name`` up again with
    ``lookup`` (``topics.get`` for a Kafka topic, ``topics.record`` for any record): on a cluster node,
    for a record another node wrote since this node's last periodic refresh."""
    return host.blocking(host.topics.refresh).addCallback(lambda _: lookup(name))


def record_logs(host: StreamHost, topic: TopicInfo) -> defer.Deferred[Logs]:
    """Deferred of (TopicInfo, [PartitionLog]) of a topic or partitioned stream, at once when loaded."""
    ready = loaded_logs(host, topic)
    if ready is not None:
        return defer.succeed(ready)
    waiting = resolving(host).get(topic.name)
    if waiting is not None:
        return behind(waiting, lambda: record_logs(host, topic))
    return in_arrival_order(host, topic.name, lambda: load(host, topic))


def loaded_logs(host: StreamHost, topic: TopicInfo) -> Logs | None:
    """(TopicInfo, [PartitionLog]) when the partitions are loaded and no request waits to resolve the
    topic (it goes first): what ``record_logs`` answers at once, without a Deferred."""
    if topic.name in resolving(host):
        return None
    parts = host.partitions.loaded(topic.name)
    return (topic, parts) if parts is not None and len(parts) >= topic.partition_count else None


def load(host: StreamHost, topic: TopicInfo) -> defer.Deferred[Logs]:
    return host.partitions.open_topic(topic).addCallback(lambda opened: (topic, opened))


# Requests that find a topic being resolved (created, or its partitions loaded, off the reactor) wait
# behind the request that started it and go on in arrival order, each only after the one before it ran
# its own callbacks: otherwise a later request (on the same connection, say) could find the topic ready
# and append before an earlier one still waiting for the load. Pipelined produce requests of an
# idempotent producer would then land out of sequence (its first batch refused with
# OUT_OF_ORDER_SEQUENCE, fatal to the producer): a cluster node hits this whenever it loads a topic made
# through another node while a producer already writes to it (tests/cluster/test_produce_order.py).
_RESOLVING: weakref.WeakKeyDictionary[StreamHost, dict[str, list[defer.Deferred[None]]]] = (
    weakref.WeakKeyDictionary())


def resolving(host: StreamHost) -> dict[str, list[defer.Deferred[None]]]:
    """The topics being resolved on ``host``, each with the requests waiting behind it."""
    return _RESOLVING.setdefault(host, {})


def behind(waiting: list[defer.Deferred[None]], again: Callable[[], defer.Deferred[T]]) -> defer.Deferred[T]:
    """Wait in ``waiting`` for the request before, then resolve ``again``."""
    turn: defer.Deferred[None] = defer.Deferred()
    waiting.append(turn)
    return turn.addCallback(lambda _: again())


def in_arrival_order(host: StreamHost, name: str, resolve: Callable[[], defer.Deferred[T]]) -> defer.Deferred[T]:
    """Resolve ``name`` for this request; requests arriving meanwhile wait (``behind``) until this
    request's own callbacks have run, then each tries again in turn."""
    pending = resolving(host)
    waiting: list[defer.Deferred[None]] = []
    pending[name] = waiting
    result: defer.Deferred[T] = defer.Deferred()

    def done(outcome: Any) -> None:
        pending.pop(name, None)
        if isinstance(outcome, Failure):
            result.errback(outcome)
        else:
            result.callback(outcome)
        for turn in waiting:
            turn.callback(None)

    resolve().addBoth(done)
    return result
