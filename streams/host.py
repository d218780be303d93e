"""What the stream layer's helpers need of the process hosting it: its topics registry, its partition
storage and a worker pool for blocking work. The gateway's broker is one (``gateway.kafka.broker``);
each protocol adapter asks for what it uses, so neither needs the other's view of the broker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet.defer import Deferred

if TYPE_CHECKING:
    from millrace.streams.partitions import SegmentPartitionStorage
    from millrace.streams.topics import TopicRegistry


class StreamHost(Protocol):
    @property
    def topics(self) -> TopicRegistry: ...

    @property
    def partitions(self) -> SegmentPartitionStorage: ...

    def blocking(self, fn: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        """Run ``fn`` (which blocks on table-segment or store I/O) on the worker pool; the Deferred
        fires on the reactor thread."""
        ...
