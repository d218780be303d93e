"""What the listeners count as they serve, for ``/metrics`` (``gateway/shared/metrics.py`` exports it).

Kafka's RequestMetrics, per listener: each request's time from its arrival to its response being ready
to write, per API (the Kafka listener) or command (the native one), in a ``LatencyHistogram`` of plain
ints; the open connections, whose paused state is read at scrape; and, for Kafka, record bytes in and
out per topic and the produce and fetch errors by code. Nothing here is a Prometheus object: the request
path pays a dictionary lookup and a bisect, and the HTTP listener builds the series when it is scraped.

Threads: everything here is the reactor's (the connections' and the scrape's thread).
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from millrace.store.latency import LatencyHistogram

if TYPE_CHECKING:
    from millrace.gateway.shared.framing import BudgetedReceiver


class ListenerMetrics:
    """One listener's requests and connections. ``latency`` maps a request kind (a Kafka API key, a
    native command) to its histogram; ``connections`` holds the connections open now."""

    __slots__ = ("name", "latency", "connections")

    def __init__(self, name: str) -> None:
        self.name = name
        self.latency: dict[int, LatencyHistogram] = {}
        self.connections: set[BudgetedReceiver] = set()

    def histogram(self, kind: int) -> LatencyHistogram:
        """The histogram of ``kind``'s requests (made at its first request)."""
        found = self.latency.get(kind)
        if found is None:
            found = self.latency[kind] = LatencyHistogram()
        return found


class RequestMetrics:
    """Every listener of one protocol, by listener name."""

    def __init__(self) -> None:
        self.listeners: dict[str, ListenerMetrics] = {}

    def listener(self, name: str) -> ListenerMetrics:
        found = self.listeners.get(name)
        if found is None:
            found = self.listeners[name] = ListenerMetrics(name)
        return found


class KafkaTraffic:
    """Kafka's per-topic BytesIn/BytesOut and the errors Produce and Fetch answered, per partition:
    ``bytes_in[topic]`` counts record batch bytes appended (accepted Produce partitions),
    ``bytes_out[topic]`` record bytes returned by Fetch, ``errors[(api key, error code)]`` the partitions
    answered with that error."""

    def __init__(self) -> None:
        self.bytes_in: collections.Counter[str] = collections.Counter()
        self.bytes_out: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[tuple[int, int]] = collections.Counter()

    def topic_deleted(self, topic: str) -> None:
        """A deleted topic's series go with it (a new topic of the same name starts from zero)."""
        self.bytes_in.pop(topic, None)
        self.bytes_out.pop(topic, None)
