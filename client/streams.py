"""Stream-level value types of the client: configurations, descriptions and stream cuts.

They are built from the native protocol's messages (``protocol.messages``) without importing the
server's classes: the client is a peer of the server, not a user of its modules.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from millrace.protocol import messages as m
from millrace.protocol.names import segment_name


class ScalingType(enum.Enum):
    FIXED_NUM_SEGMENTS = "fixed_num_segments"
    BY_RATE_IN_EVENTS_PER_SEC = "by_rate_in_events_per_sec"
    BY_RATE_IN_KBYTES_PER_SEC = "by_rate_in_kbytes_per_sec"


class RetentionType(enum.Enum):
    NONE = "none"
    TIME = "time"  # value: milliseconds
    SIZE = "size"  # value: bytes
    # Released by subscriber reader groups: truncated at the lowest of their retention cuts.
    CONSUMPTION = "consumption"


@dataclass(frozen=True)
class ScalingPolicy:
    """How a stream's segment count follows its load (as Pravega's ``ScalingPolicy``).

    With a rate policy a segment splits into ``scale_factor`` pieces when hotter than ``target_rate``
    (events/s or KiB/s per segment) and cold neighbours merge, never below ``min_segments``."""

    type: ScalingType = ScalingType.FIXED_NUM_SEGMENTS
    target_rate: int = 0
    scale_factor: int = 0
    min_segments: int = 1

    @classmethod
    def fixed(cls, segments: int) -> ScalingPolicy:
        return cls(ScalingType.FIXED_NUM_SEGMENTS, 0, 0, segments)

    @classmethod
    def by_event_rate(cls, events_per_second: int, scale_factor: int = 2, min_segments: int = 1) -> ScalingPolicy:
        return cls(ScalingType.BY_RATE_IN_EVENTS_PER_SEC, events_per_second, scale_factor, min_segments)

    @classmethod
    def by_data_rate(cls, kib_per_second: int, scale_factor: int = 2, min_segments: int = 1) -> ScalingPolicy:
        return cls(ScalingType.BY_RATE_IN_KBYTES_PER_SEC, kib_per_second, scale_factor, min_segments)


@dataclass(frozen=True)
class RetentionPolicy:
    """What the server may drop from a stream's head: nothing, data older than a time, data beyond a
    size, or (``by_consumption``) what every subscriber reader group has released."""

    type: RetentionType = RetentionType.NONE
    value: int = 0

    @classmethod
    def by_time(cls, milliseconds: int) -> RetentionPolicy:
        return cls(RetentionType.TIME, milliseconds)

    @classmethod
    def by_size(cls, size_bytes: int) -> RetentionPolicy:
        return cls(RetentionType.SIZE, size_bytes)

    @classmethod
    def by_consumption(cls) -> RetentionPolicy:
        """Pravega's consumption-based retention: the server truncates the stream at the lowest of
        its subscribers' retention cuts (``update_retention_stream_cut``, or each group's last
        checkpoint), never past one; a stream without subscribers keeps everything."""
        return cls(RetentionType.CONSUMPTION)


@dataclass(frozen=True)
class StreamConfiguration:
    initial_segments: int = 1
    scaling: ScalingPolicy = field(default_factory=ScalingPolicy)
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    tags: tuple[str, ...] = ()  # Pravega's stream tags: labels ``list_streams(scope, tag)`` finds it by


@dataclass(frozen=True)
class Segment:
    """One segment of a stream and the slice [key_start, key_end) of the routing-key space it owns."""

    segment_id: int
    name: str
    key_start: float
    key_end: float

    @property
    def epoch(self) -> int:
        """The epoch that created it (the high half of its id)."""
        return self.segment_id >> 32

    @property
    def number(self) -> int:
        return self.segment_id & 0xFFFFFFFF

    def holds(self, key_hash: float) -> bool:
        return self.key_start <= key_hash < self.key_end or (key_hash == 1.0 and self.key_end == 1.0)


@dataclass(frozen=True)
class SegmentState:
    """A current segment with what the store knows of it (None where the store does not know it)."""

    segment: Segment
    start_offset: int | None
    length: int | None
    sealed: bool | None


@dataclass(frozen=True)
class Epoch:
    """One step of a stream's history: the scale that made it and the segments it sealed and created."""

    epoch: int
    created_ms: int
    reason: str
    sealed: tuple[Segment, ...]
    created: tuple[Segment, ...]


@dataclass(frozen=True)
class StreamDescription:
    """A stream as the controller describes it now."""

    scope: str
    stream: str
    state: str  # "active", "scaling", "sealing", "sealed", ...
    epoch: int
    created_ms: int
    config: StreamConfiguration
    segments: tuple[SegmentState, ...]  # the current epoch's, by key range
    history: tuple[Epoch, ...]  # oldest first
    truncation: dict[int, int]  # the stream's head as a cut (segment id -> offset); empty: never truncated
    partition_count: int | None  # a Kafka topic's or an event-written stream's partitions; None for others

    @property
    def sealed(self) -> bool:
        return self.state in ("sealing", "sealed")

    @classmethod
    def from_reply(cls, reply: m.StreamDescriptionReply) -> StreamDescription:
        segments = tuple(
            SegmentState(Segment(s.segment_id, s.name, s.key_start, s.key_end), s.start_offset, s.length, s.sealed)
            for s in reply.segments
        )
        history = tuple(
            Epoch(e.epoch, e.created_ms, e.reason, _known_ranges(e.sealed), _known_ranges(e.created))
            for e in reply.history
        )
        config = reply.config
        return cls(reply.scope, reply.stream, reply.state, reply.epoch, reply.created_ms,
                   StreamConfiguration(config.initial_segments,
                                       ScalingPolicy(ScalingType(config.scaling.type), config.scaling.target_rate,
                                                     config.scaling.scale_factor, config.scaling.min_segments),
                                       RetentionPolicy(RetentionType(config.retention.type), config.retention.value),
                                       tuple(reply.tags or ())),
                   segments, history, {int(k): v for k, v in reply.truncation.items()}, reply.partition_count)


def _known_ranges(ranges: tuple[m.KeyRange, ...]) -> tuple[Segment, ...]:
    """The ranges whose bounds the history still knows, as segments."""
    return tuple(Segment(r.segment_id, r.name, r.key_start, r.key_end) for r in ranges
                 if r.key_start is not None and r.key_end is not None)


SERIAL_VERSION = 1  # of the bytes to_bytes writes; from_bytes refuses newer ones it cannot read


def encode_value(kind: str, body: dict[str, Any]) -> bytes:
    """The bytes of a serialisable client value: compact JSON naming its kind and format version, so a
    value read back as the wrong kind, or written by a newer client, is refused rather than misread."""
    return json.dumps({"kind": kind, "v": SERIAL_VERSION, **body}, separators=(",", ":"), sort_keys=True).encode()


def decode_value(kind: str, raw: bytes | str) -> dict[str, Any]:
    """The body ``encode_value`` wrote for ``kind``; ValueError for anything else."""
    try:
        parsed = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a serialised {kind}: {exc}") from None
    if not isinstance(parsed, dict) or parsed.get("kind") != kind:
        found = parsed.get("kind") if isinstance(parsed, dict) else type(parsed).__name__
        raise ValueError(f"not a serialised {kind} (found {found!r})")
    if parsed.get("v") != SERIAL_VERSION:
        raise ValueError(f"a serialised {kind} of format version {parsed.get('v')!r}; this client reads "
                         f"version {SERIAL_VERSION}")
    return parsed


def from_base64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64: {exc}") from None


@dataclass(frozen=True)
class StreamCut:
    """A position in a stream: an offset in each of a set of segments that together cover the
    routing-key space exactly once. Reading from a cut gives everything after it, in every key.

    Serialisable as Pravega's (``to_bytes`` / ``from_bytes``, ``to_base64`` / ``from_base64``), to
    store beside an application's results or hand to another process."""

    scope: str
    stream: str
    positions: Mapping[int, int]  # segment id -> offset

    def to_bytes(self) -> bytes:
        return encode_value("StreamCut", self._body())

    @classmethod
    def from_bytes(cls, raw: bytes) -> StreamCut:
        """The cut ``to_bytes`` wrote; ValueError for other bytes."""
        return cls._from_body(decode_value("StreamCut", raw))

    def to_base64(self) -> str:
        return base64.b64encode(self.to_bytes()).decode("ascii")

    @classmethod
    def from_base64(cls, text: str) -> StreamCut:
        return cls.from_bytes(from_base64(text))

    def _body(self) -> dict[str, Any]:
        return {"scope": self.scope, "stream": self.stream,
                "positions": {str(sid): offset for sid, offset in sorted(self.positions.items())}}

    @classmethod
    def _from_body(cls, body: Mapping[str, Any]) -> StreamCut:
        try:
            return cls(str(body["scope"]), str(body["stream"]),
                       {int(sid): int(offset) for sid, offset in body["positions"].items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"a malformed serialised StreamCut: {exc!r}") from None

    def to_wire(self) -> dict[str, int]:
        # By name: JSON keys are strings, and the controller reads a string key as a segment name.
        return {segment_name(self.scope, self.stream, sid): offset for sid, offset in sorted(self.positions.items())}

    def __str__(self) -> str:
        inside = ", ".join(f"{sid >> 32}.{sid & 0xFFFFFFFF}@{off}" for sid, off in sorted(self.positions.items()))
        return f"{self.scope}/{self.stream}[{inside}]"
