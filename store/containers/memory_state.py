"""What applying a durable operation changes (Pravega's memory-state updater's targets).

An operation's ``apply`` changes only this: the durable layer of the metadata, the read index and the
reads parked at its tails, the segments' rates, the container's counters, the checkpoint records, and
it may nudge the storage writer. It runs under the container lock, in log order, on the thread that
completes the log write (or the recovering thread). Parked reads it readies are resumed by the
operation processor after the lock is released.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Protocol

from millrace.store.containers.checkpoints import CheckpointPolicy
from millrace.store.containers.metadata import ContainerMetadata
from millrace.store.containers.rates import RateRegistry
from millrace.store.containers.read_index import ReadIndex


class WriterSignals(Protocol):
    """What the container tells its storage writer. Each call only takes the writer's own condition
    lock, so it is safe under the container lock."""

    def wake(self) -> None: ...

    def notice_dirty(self, cached_bytes: int) -> None: ...

    def delete_chunks(self, names: Sequence[str]) -> None: ...


class MemoryState:
    __slots__ = ("metadata", "read_index", "rates", "stats", "checkpoints", "writer")

    def __init__(
        self,
        metadata: ContainerMetadata,
        read_index: ReadIndex,
        rates: RateRegistry,
        checkpoints: CheckpointPolicy,
        writer: WriterSignals,
    ) -> None:
        self.metadata = metadata
        self.read_index = read_index
        self.rates = rates
        self.stats: collections.Counter[str] = collections.Counter()
        self.checkpoints = checkpoints
        self.writer = writer
