"""Value types of the segment store API (what callers pass in and get back). They live in
``millrace.protocol.contracts``, shared with the native client; the store names them here too."""

from __future__ import annotations

from millrace.protocol.contracts import AttributeUpdate, AttributeUpdateType, ReadResult, SegmentInfo

__all__ = ["AttributeUpdate", "AttributeUpdateType", "ReadResult", "SegmentInfo"]
