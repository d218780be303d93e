"""Controller errors beyond those in store.errors. A client sees them too, so they live in
``millrace.protocol.errors``; the controller names them here."""

from __future__ import annotations

from millrace.protocol.errors import (
    InvalidScaleError,
    InvalidStreamCutError,
    ScaleConflictError,
    StreamNotSealedError,
    StreamSealedError,
)

__all__ = [
    "InvalidScaleError",
    "InvalidStreamCutError",
    "ScaleConflictError",
    "StreamNotSealedError",
    "StreamSealedError",
]
