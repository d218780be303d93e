"""The controller: scopes, streams, segment epochs and key ranges, with metadata in table segments."""

from store.controller.controller import (
    EPOCHS_TABLE,
    SCOPES_TABLE,
    STREAMS_TABLE,
    Controller,
    StreamInfo,
)
from store.controller.errors import InvalidStreamCutError, StreamNotSealedError, StreamSealedError
from store.controller.keys import key_hash
from store.controller.names import parse_segment_name, segment_epoch, segment_id, segment_name, segment_number
from store.controller.records import (
    EpochRecord,
    RetentionPolicy,
    RetentionType,
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
    "InvalidStreamCutError",
    "RetentionPolicy",
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
