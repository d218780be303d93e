"""Errors the segment store raises. Each maps onto a client-visible condition."""

from __future__ import annotations


class StoreError(Exception):
    """Base of every segment-store error."""


class SegmentNotFoundError(StoreError):
    """The named segment does not exist (or was deleted / merged away)."""


class SegmentExistsError(StoreError):
    """A create named a segment that already exists."""


class SegmentSealedError(StoreError):
    """A modification reached a sealed segment."""


class BadOffsetError(StoreError):
    """A conditional append's expected offset did not match the segment length."""

    def __init__(self, message: str, expected: int, actual: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class BadAttributeUpdateError(StoreError):
    """A conditional attribute update's expected value did not match."""


class OffsetOutOfRangeError(StoreError):
    """A read or truncate named an offset outside [start_offset, length]."""


class SegmentTruncatedError(OffsetOutOfRangeError):
    """A read named an offset below the segment's start offset."""


class ContainerOfflineError(StoreError):
    """The container is not running (shut down, failed, or recovering)."""


class DataCorruptionError(StoreError):
    """Durable data failed validation somewhere other than a torn tail; the container stops."""


class DataLogWriterFencedError(StoreError):
    """A newer owner took over the durable log; this writer must stop (never append again)."""


class ChunkNotFoundError(StoreError):
    """Long-term storage has no chunk of that name."""


class ChunkExistsError(StoreError):
    """Long-term storage already has a chunk of that name (chunks are written once)."""


class TableKeyNotFoundError(StoreError):
    """A conditional table update or removal named a key that is absent."""


class TableKeyVersionMismatchError(StoreError):
    """A conditional table update named a version that is not the key's current one."""


class StreamNotFoundError(StoreError):
    """The controller knows no such scope/stream."""


class StreamExistsError(StoreError):
    """The controller already has a stream of that name."""


class ScopeNotFoundError(StoreError):
    """The controller knows no such scope."""


class ScopeNotEmptyError(StoreError):
    """A scope still holding streams cannot be deleted."""
