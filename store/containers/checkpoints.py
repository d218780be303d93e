"""The checkpoint policy: when a container logs a metadata checkpoint, and how far its durable log
may be truncated.

A checkpoint is a snapshot of the accepted metadata taken under the container lock, so it describes
exactly the state after every operation logged before it. It always opens its log entry, so the log
can be truncated right before it. Checkpoints are due every ``every_bytes`` of logged operations,
and when an idle container has had activity since the last one. The log is truncated before the
newest checkpoint whose data long-term storage fully holds. Guarded by the container lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from millrace.store.containers.metadata import ContainerMetadata
from millrace.store.durablelog.interface import LogAddress


@dataclass(slots=True)
class CheckpointRecord:
    """A durable checkpoint: the log entry it opens, and each segment's accepted length then."""

    address: LogAddress
    lengths: dict[int, int]


class CheckpointPolicy:
    def __init__(self, every_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._every_bytes = every_bytes
        self._clock = clock
        self._bytes_since = 0
        self._last_time = clock()
        self._records: list[CheckpointRecord] = []

    def logged(self, size: int) -> bool:
        """Count an operation of ``size`` bytes handed to the log; True when a checkpoint is due."""
        self._bytes_since += size
        return self._bytes_since >= self._every_bytes

    def written(self) -> None:
        """A checkpoint was just handed to the log."""
        self._bytes_since = 0
        self._last_time = self._clock()

    def idle_due(self, max_age: float) -> bool:
        """Operations arrived since the last checkpoint and it is ``max_age`` old: checkpointing
        lets an idle container truncate its log."""
        return self._bytes_since > 0 and self._clock() - self._last_time >= max_age

    def record(self, address: LogAddress, lengths: dict[int, int]) -> None:
        """A checkpoint opening the entry at ``address`` is durable (live or replayed)."""
        self._records.append(CheckpointRecord(address, lengths))

    def __len__(self) -> int:
        return len(self._records)

    def truncation_point(self, metadata: ContainerMetadata) -> LogAddress | None:
        """Where to truncate the log: just before the newest checkpoint whose data long-term storage
        holds. Forgets the checkpoints before it (the log will begin with it). None: keep all."""
        best: CheckpointRecord | None = None
        kept = 0
        for i, record in enumerate(self._records):
            if not _flushed(record, metadata):
                break
            best, kept = record, i + 1
        if best is None or best.address.sequence <= 1:
            return None
        del self._records[: kept - 1]  # keep ``best``: it is now the log's first entry
        return LogAddress(best.address.sequence - 1)


def _flushed(record: CheckpointRecord, metadata: ContainerMetadata) -> bool:
    """Whether long-term storage holds everything the checkpoint's segments had (or they are gone or
    truncated past it)."""
    for segment_id, length in record.lengths.items():
        seg = metadata.by_id.get(segment_id)
        if seg is None or seg.deleted:
            continue
        if seg.storage_length < length and seg.start_offset < length:
            return False
    return True
