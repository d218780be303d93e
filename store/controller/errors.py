"""Controller errors beyond those in store.errors."""

from __future__ import annotations

from millrace.store.errors import StoreError


class StreamNotSealedError(StoreError):
    """Deleting a stream requires sealing it first (as in Pravega)."""


class StreamSealedError(StoreError):
    """The stream is sealed (or being sealed); its configuration can no longer change."""


class InvalidStreamCutError(StoreError):
    """A stream cut names unknown segments, does not cover the key space exactly once, lies past
    a segment's length, or would move the stream's head backwards."""


class ScaleConflictError(StoreError):
    """Another scale got there first: the stream is scaling differently right now, the segments to
    seal are already sealed, or the stream is no longer at the epoch the caller expected. Re-read
    the stream's current segments and decide again."""


class InvalidScaleError(StoreError, ValueError):
    """A scale request that can never succeed: unknown or non-adjacent segments, or new key ranges
    that do not cover the sealed segments' union exactly once."""
