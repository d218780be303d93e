"""The segment store: segments hashed onto a fixed set of independent segment containers.

This is the store's whole public surface; the controller, table segments, the native protocol and
the Kafka gateway all go through it. Every method is thread-safe. Methods that wait for durability
or I/O return a ``StoreFuture`` (the concurrent.futures surface, made lighter); callers on the
Twisted reactor adapt them to Deferreds.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from millrace.store.budget import MIB, ByteBudget, current_admission
from millrace.store.containers.config import ContainerConfig
from millrace.store.containers.container import SegmentContainer
from millrace.store.containers.rates import RateConfig, RateRegistry, SegmentRates
from millrace.store.contracts import AttributeUpdate, ReadResult, SegmentInfo
from millrace.store.durablelog.interface import DurableDataLog
from millrace.store.futures import StoreFuture, settled
from millrace.store.lts.interface import ChunkStorage
from millrace.store.scheduler import Scheduler

TRANSACTION_DELIMITER = "#transaction."
# Bytes a container may hold that it cannot drop (appends not yet durable, durable data not yet in
# long-term storage) before the connections writing to it stop reading (see store.budget).
DEFAULT_CONTAINER_BUDGET_BYTES = 64 * MIB


def container_key(segment_name: str) -> str:
    """The part of a name that picks its container: transaction segments stay with their parent,
    so that merging a transaction into its parent is a local, atomic operation."""
    cut = segment_name.find(TRANSACTION_DELIMITER)
    return segment_name if cut < 0 else segment_name[:cut]


def container_index(segment_name: str, container_count: int) -> int:
    """The container a segment lives in: the same on every node of a cluster, for every process."""
    return zlib.crc32(container_key(segment_name).encode()) % container_count


class SegmentStore:
    """The ``SegmentService`` of one process: every container runs here, so its queries answer from
    memory (their ``*_future`` forms with completed futures)."""

    def __init__(
        self,
        container_count: int,
        log_factory: Callable[[int], DurableDataLog],
        storage: ChunkStorage,
        config: ContainerConfig | None = None,
        rates: RateConfig | None = None,
        rate_clock: Callable[[], float] = time.monotonic,
        container_budget_bytes: int = DEFAULT_CONTAINER_BUDGET_BYTES,
    ) -> None:
        self.config = config or ContainerConfig()
        self.rate_config = rates or RateConfig()
        self.storage = storage
        self.scheduler = Scheduler()
        # Long-term storage reads block; one pool serves every container.
        self._read_pool = ThreadPoolExecutor(self.config.storage_read_threads * 2, "lts-read")
        self.containers: list[SegmentContainer] = [
            SegmentContainer(
                cid,
                log_factory(cid),
                storage,
                self.config,
                self.scheduler,
                self._read_pool,
                RateRegistry(self.rate_config, rate_clock),
            )
            for cid in range(container_count)
        ]
        # What each container holds that it cannot drop (indexed like ``containers``): appends not
        # yet durable, plus durable data not yet in long-term storage, which the cache cannot evict.
        # A flood therefore slows to what the log and long-term storage sustain instead of filling
        # memory.
        self.budgets: list[ByteBudget] = [
            ByteBudget(container_budget_bytes, f"container-{c.container_id}", backlog=c.unflushed_bytes,
                       call_later=self.scheduler.call_later)
            for c in self.containers
        ]
        for container, budget in zip(self.containers, self.budgets, strict=True):
            container.attach_budget(budget)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Recover every container (checkpoint + log replay) and start their background work."""
        for container in self.containers:
            container.start()

    def close(self) -> None:
        for container in self.containers:
            container.close()
        self._read_pool.shutdown(wait=True)
        self.scheduler.stop()
        self.storage.close()

    def container_for(self, segment_name: str) -> SegmentContainer:
        return self.containers[self.container_id_of(segment_name)]

    def container_id_of(self, name: str) -> int:
        return container_index(name, len(self.containers))

    # -- segment operations ------------------------------------------------------------------------
    def create_segment(self, name: str, attributes: dict[str, int] | None = None) -> StoreFuture[None]:
        return self.container_for(name).create_segment(name, attributes or {})

    def append(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        attributes: Sequence[AttributeUpdate] = (),
        events: int = 1,
    ) -> StoreFuture[int]:
        """Append ``data``; the future gives the offset it landed at, once durable.
        ``expected_offset`` makes it conditional on the current length (BadOffsetError otherwise);
        ``attributes`` are applied atomically with the append (BadAttributeUpdateError fails both).
        ``events`` is how many events the bytes carry (a Kafka batch: its record count), for the
        segment's rates (``segment_rates``) once the append is durable.

        Until then the bytes count against the container's budget (its operation processor holds
        them) and, when a connection is dispatching the request that appends
        (``store.budget.charging``), against that connection's budget too."""
        index = self.container_id_of(name)
        admission = current_admission()
        if admission is None:  # the container holds the bytes against its budget until durable
            return self.containers[index].append(name, data, expected_offset, attributes, events)
        size = len(data)
        admission.budget.acquire(size)
        admission.touch(self.budgets[index])
        try:
            fut = self.containers[index].append(name, data, expected_offset, attributes, events)
        except BaseException:
            admission.budget.release(size)
            raise
        fut.add_done_callback(lambda _: admission.budget.release(size))
        return fut

    def read(self, name: str, offset: int, max_length: int, wait_timeout: float = 0.0) -> StoreFuture[ReadResult]:
        """Read up to ``max_length`` durable bytes from ``offset``. At the tail, wait up to
        ``wait_timeout`` seconds for the next append (an empty result when none arrives)."""
        return self.container_for(name).read(name, offset, max_length, wait_timeout)

    def get_info(self, name: str) -> SegmentInfo:
        return self.container_for(name).get_info(name)

    def get_info_future(self, name: str) -> StoreFuture[SegmentInfo]:
        return settled(lambda: self.get_info(name))

    def segment_rates(self, name: str) -> SegmentRates:
        """The segment's durable ingest rates over each window of ``rate_config`` (see
        ``store.containers.rates``). SegmentNotFoundError for an unknown segment."""
        return self.container_for(name).segment_rates(name)

    def segment_rates_future(self, name: str) -> StoreFuture[SegmentRates]:
        return settled(lambda: self.segment_rates(name))

    def exists(self, name: str) -> bool:
        return self.container_for(name).exists(name)

    def seal(self, name: str) -> StoreFuture[int]:
        """Seal; the future gives the final length."""
        return self.container_for(name).seal(name)

    def merge(self, target: str, source: str) -> StoreFuture[int]:
        """Append sealed ``source`` atomically to ``target`` and remove it; gives the offset in the
        target where the source's data begins. Both must live in the same container."""
        return self.container_for(target).merge(target, source)

    def truncate(self, name: str, offset: int) -> StoreFuture[None]:
        """Drop the prefix below ``offset`` (start_offset becomes ``offset``)."""
        return self.container_for(name).truncate(name, offset)

    def delete(self, name: str) -> StoreFuture[None]:
        return self.container_for(name).delete(name)

    def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> StoreFuture[None]:
        return self.container_for(name).update_attributes(name, updates)

    def list_segments(self) -> list[str]:
        return sorted(n for c in self.containers for n in c.segment_names())

    def list_segments_future(self) -> StoreFuture[list[str]]:
        return settled(self.list_segments)
