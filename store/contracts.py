"""The segment store API: the value types callers pass in and get back (they live in
``millrace.protocol.contracts``, shared with the native client, and are named here too) and
``SegmentService``, the operations every caller of a store is typed against."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from millrace.protocol.contracts import AttributeUpdate, AttributeUpdateType, ReadResult, SegmentInfo

if TYPE_CHECKING:
    from millrace.store.containers.rates import RateConfig, SegmentRates
    from millrace.store.futures import StoreFuture

__all__ = ["AttributeUpdate", "AttributeUpdateType", "ReadResult", "SegmentInfo", "SegmentService"]


class SegmentService(Protocol):
    """The segment operations the controller, the table store, the Kafka and native gateways and the
    auto-scaler call. ``store.segment_store.SegmentStore`` offers them on one process;
    ``store.cluster.routing.ClusterSegmentStore`` on a cluster node (each call runs on the owner of the
    segment's container) and ``store.cluster.routing.LocalSegments`` for the node's own containers
    (what peers call). Same arguments, results and exceptions everywhere.

    Mutations and reads answer with a ``StoreFuture``. The queries ``get_info``, ``exists``,
    ``segment_rates`` and ``list_segments`` answer with a value: in memory on one process, but on a
    cluster node they wait for another node, so callers on the reactor use their ``*_future`` forms,
    which never block the calling thread (a process's own store answers them with completed futures)."""

    def create_segment(self, name: str, attributes: dict[str, int] | None = None) -> StoreFuture[None]: ...

    def append(self, name: str, data: bytes, expected_offset: int | None = None,
               attributes: Sequence[AttributeUpdate] = (), events: int = 1) -> StoreFuture[int]: ...

    def read(self, name: str, offset: int, max_length: int,
             wait_timeout: float = 0.0) -> StoreFuture[ReadResult]: ...

    def seal(self, name: str) -> StoreFuture[int]: ...

    def merge(self, target: str, source: str) -> StoreFuture[int]: ...

    def truncate(self, name: str, offset: int) -> StoreFuture[None]: ...

    def delete(self, name: str) -> StoreFuture[None]: ...

    def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> StoreFuture[None]: ...

    # -- queries: blocking on a cluster node (off the reactor only) ---------------------------------
    def get_info(self, name: str) -> SegmentInfo: ...

    def exists(self, name: str) -> bool: ...

    def segment_rates(self, name: str) -> SegmentRates: ...

    def list_segments(self) -> list[str]: ...

    # -- the same queries, never blocking (what the reactor calls) ---------------------------------
    def get_info_future(self, name: str) -> StoreFuture[SegmentInfo]: ...

    def segment_rates_future(self, name: str) -> StoreFuture[SegmentRates]: ...

    def list_segments_future(self) -> StoreFuture[list[str]]: ...

    # -- placement and configuration: local, never blocking ------------------------------------------
    def container_id_of(self, name: str) -> int:
        """The container the segment hashes to (``segment_store.container_index``: alike on every node)."""
        ...

    @property
    def rate_config(self) -> RateConfig:
        """The windows of ``segment_rates`` (every node of a cluster is configured alike)."""
        ...
