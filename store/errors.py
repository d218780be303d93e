"""Errors the segment store raises. Those a client can see live in ``millrace.protocol.errors``
(shared with the native client, which raises the same classes from wire statuses) and are named here
too; the rest concern the store's own media and never cross the wire as themselves."""

from __future__ import annotations

from millrace.protocol.errors import (
    BadAttributeUpdateError,
    BadOffsetError,
    ContainerOfflineError,
    OffsetOutOfRangeError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentTruncatedError,
    StoreError,
    StreamExistsError,
    StreamNotFoundError,
    TableKeyNotFoundError,
    TableKeyVersionMismatchError,
)

__all__ = [
    "BadAttributeUpdateError",
    "BadOffsetError",
    "ChunkExistsError",
    "ChunkNotFoundError",
    "ContainerOfflineError",
    "DataCorruptionError",
    "DataLogWriterFencedError",
    "OffsetOutOfRangeError",
    "ScopeNotEmptyError",
    "ScopeNotFoundError",
    "SegmentExistsError",
    "SegmentNotFoundError",
    "SegmentSealedError",
    "SegmentTruncatedError",
    "StoreError",
    "StreamExistsError",
    "StreamNotFoundError",
    "TableKeyNotFoundError",
    "TableKeyVersionMismatchError",
]


class DataCorruptionError(StoreError):
    """Durable data failed validation somewhere other than a torn tail; the container stops."""


class DataLogWriterFencedError(StoreError):
    """A newer owner took over the durable log; this writer must stop (never append again)."""


class ChunkNotFoundError(StoreError):
    """Long-term storage has no chunk of that name."""


class ChunkExistsError(StoreError):
    """Long-term storage already has a chunk of that name (chunks are written once)."""
