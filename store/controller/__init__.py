"""The controller: scopes, streams, segment epochs and key ranges, with metadata in table segments."""

from millrace.store.controller.controller import (
    EPOCHS_TABLE,
    SCOPES_TABLE,
    STREAMS_TABLE,
    Controller,
    StreamInfo,
)
from millrace.store.controller.errors import (
    InvalidScaleError,
    InvalidStreamCutError,
    ScaleConflictError,
    StreamNotSealedError,
    StreamSealedError,
)
from millrace.store.controller.keys import key_hash
from millrace.store.controller.names import (
    parse_segment_name,
    segment_epoch,
    segment_id,
    segment_name,
    segment_number,
)
from millrace.store.controller.records import (
    EpochRecord,
    PendingScale,
    RetentionPolicy,
    RetentionType,
    ScaleReason,
    ScalingPolicy,
    ScalingType,
    SegmentRange,
    StreamConfiguration,
    StreamState,
)

__all__ = [
    "EPOCHS_TABLE",
    "SCOPES_TABLE",
    "STREAMS_TABLE",
    "Controller",
    "EpochRecord",
    "InvalidScaleError",
    "InvalidStreamCutError",
    "PendingScale",
    "RetentionPolicy",
    "ScaleConflictError",
    "ScaleReason",
    "RetentionType",
    "ScalingPolicy",
    "ScalingType",
    "SegmentRange",
    "StreamConfiguration",
    "StreamInfo",
    "StreamNotSealedError",
    "StreamSealedError",
    "StreamState",
    "key_hash",
    "parse_segment_name",
    "segment_epoch",
    "segment_id",
    "segment_name",
    "segment_number",
]
