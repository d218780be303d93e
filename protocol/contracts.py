"""Value types of the segment API that both sides exchange (what callers pass in and get back)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class AttributeUpdateType(enum.IntEnum):
    REPLACE = 0  # set the value
    REPLACE_IF_EQUALS = 1  # set only if the current value equals ``expected`` (None = absent)
    REPLACE_IF_GREATER = 2  # set only if greater than the current value (or absent)
    ACCUMULATE_MAX = 3  # value = max(current, value), never fails
    REMOVE = 4  # delete the attribute


@dataclass(frozen=True)
class AttributeUpdate:
    """One change to a segment attribute. Applied atomically with the append that carries it."""

    key: str
    value: int = 0
    type: AttributeUpdateType = AttributeUpdateType.REPLACE
    expected: int | None = None


@dataclass(frozen=True)
class SegmentInfo:
    name: str
    start_offset: int  # first readable offset (after truncation)
    length: int  # durable length: everything below is acknowledged and readable
    sealed: bool
    storage_length: int  # how much of the segment long-term storage holds
    attributes: dict[str, int] = field(default_factory=dict)
    created_ms: int = 0
    last_modified_ms: int = 0


@dataclass(frozen=True)
class ReadResult:
    """Bytes read from ``offset``. ``end_of_segment`` says the segment is sealed and fully read."""

    offset: int
    data: bytes
    end_of_segment: bool = False


# The format of a stream of one segment that holds no events, recorded on its segment by the stream
# layer (``streams/segment_gate.py``) when a client claims it: a byte stream (``client/byte_stream.py``)
# or a state synchronizer (``client/synchronizer.py``). A format is claimed once and never changes; the
# gateway never gives event writers a stream whose segment carries one (or holds any bytes before its
# first event writer), so byte data, synchronizer entries and event data never mix in one segment.
FORMAT_ATTRIBUTE = "millrace.format"


class SegmentFormat(enum.IntEnum):
    BYTES = 1  # any bytes: appended, truncated and sealed at any offset
    SYNCHRONIZER = 2  # whole synchronizer entries, appended conditionally, truncated before a snapshot
    # Pravega's event framing (``protocol/event_frames.py``): whole frames, written by Pravega's own
    # writers through the Pravega segment store listener; claimed per segment, so such a stream scales
    PRAVEGA_EVENTS = 3


# The byte-stream mark of older data dirs: read as ``SegmentFormat.BYTES``.
LEGACY_BYTE_STREAM_ATTRIBUTE = "millrace.byte_stream"
