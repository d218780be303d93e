"""Segment names and ids; the rules live in ``millrace.protocol.names``, shared with the client."""

from __future__ import annotations

from millrace.protocol.names import (
    EPOCH_DELIMITER,
    MARK_STREAM_PREFIX,
    SYSTEM_SCOPE,
    parse_segment_name,
    segment_epoch,
    segment_id,
    segment_name,
    segment_number,
    validate_name,
)

__all__ = [
    "EPOCH_DELIMITER",
    "MARK_STREAM_PREFIX",
    "SYSTEM_SCOPE",
    "parse_segment_name",
    "segment_epoch",
    "segment_id",
    "segment_name",
    "segment_number",
    "validate_name",
]
