"""Controller errors beyond those in store.errors."""

from __future__ import annotations

from store.errors import StoreError


class StreamNotSealedError(StoreError):
    """Deleting a stream requires sealing it first (as in Pravega)."""


class StreamSealedError(StoreError):
    """The stream is sealed (or being sealed); its configuration can no longer change."""


class InvalidStreamCutError(StoreError):
    """A stream cut names unknown segments, does not cover the key space exactly once, lies past
    a segment's length, or would move the stream's head backwards."""
