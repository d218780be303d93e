"""Controller metadata records and their binary encoding.

Records are sequences of tagged fields ``tag:u8 length:u32 bytes``; readers skip tags they do not
know, and repeated tags form lists. New fields (a scale in progress, predecessor links, a
transaction counter) are new tags: old records stay readable and nothing is migrated.

Layout of the metadata, all in table segments:

- ``_system/_tables/scopes``: scope -> ScopeRecord
- ``_system/_tables/streams``: ``scope/stream`` -> StreamRecord (versioned: every change is a
  conditional update of this key, so concurrent changes cannot both win)
- ``_system/_tables/epochs``: ``scope/stream/`` + epoch as u32 big-endian -> EpochRecord. Epoch
  records are written once and never change; the stream record names the current one. Scaling adds
  an epoch whose segment list keeps the untouched segments (same ids) and adds successors (new
  numbers, created in that epoch), with the reason and the predecessor -> successor edges. (An
  epoch record without edges is epoch 0; edges could also be recomputed from overlapping key ranges
  of consecutive epochs, they are stored so readers need not.)
- While a scale runs the stream record is SCALING and carries the PendingScale (tag 7).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from millrace.store.controller.names import segment_epoch, segment_name, segment_number

_FIELD = struct.Struct("<BI")
_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SCALING = struct.Struct("<BQII")
_RETENTION = struct.Struct("<BQ")
_SEGMENT = struct.Struct("<Qdd")
_CUT = struct.Struct("<Qq")
_EDGE = struct.Struct("<QQ")


def _fields(items: list[tuple[int, bytes]]) -> bytes:
    return b"".join(_FIELD.pack(tag, len(value)) + value for tag, value in items)


def _parse(data: bytes) -> Iterator[tuple[int, bytes]]:
    pos = 0
    while pos < len(data):
        tag, length = _FIELD.unpack_from(data, pos)
        pos += _FIELD.size
        if pos + length > len(data):
            raise ValueError("truncated controller record")
        yield tag, data[pos : pos + length]
        pos += length


# -- configuration -----------------------------------------------------------------------------------
MAX_TAGS = 128  # per stream, as Pravega's StreamConfiguration allows
MAX_TAG_LENGTH = 256
class ScalingType(enum.IntEnum):
    FIXED_NUM_SEGMENTS = 0
    BY_RATE_IN_EVENTS_PER_SEC = 1
    BY_RATE_IN_KBYTES_PER_SEC = 2


@dataclass(frozen=True)
class ScalingPolicy:
    """What the auto-scaler (``store.controller.autoscaler``) aims for. ``target_rate`` is per
    segment, in events/s or KiB/s by ``type``; a hot segment splits into ``scale_factor`` pieces
    (at least 2); cold neighbours merge while the stream keeps at least ``min_segments``."""

    type: ScalingType = ScalingType.FIXED_NUM_SEGMENTS
    target_rate: int = 0
    scale_factor: int = 0
    min_segments: int = 1

    @classmethod
    def by_event_rate(cls, events_per_s: int, scale_factor: int = 2, min_segments: int = 1) -> ScalingPolicy:
        return cls(ScalingType.BY_RATE_IN_EVENTS_PER_SEC, events_per_s, scale_factor, min_segments)

    @classmethod
    def by_kbytes_rate(cls, kib_per_s: int, scale_factor: int = 2, min_segments: int = 1) -> ScalingPolicy:
        return cls(ScalingType.BY_RATE_IN_KBYTES_PER_SEC, kib_per_s, scale_factor, min_segments)


class RetentionType(enum.IntEnum):
    NONE = 0
    TIME = 1  # value: milliseconds
    SIZE = 2  # value: bytes
    CONSUMPTION = 3  # truncated at the lower bound of the subscribers' retention cuts (controller/subscribers.py)


@dataclass(frozen=True)
class RetentionPolicy:
    type: RetentionType = RetentionType.NONE
    value: int = 0

    @classmethod
    def by_time(cls, millis: int) -> RetentionPolicy:
        return cls(RetentionType.TIME, millis)

    @classmethod
    def by_size(cls, size_bytes: int) -> RetentionPolicy:
        return cls(RetentionType.SIZE, size_bytes)

    @classmethod
    def by_consumption(cls) -> RetentionPolicy:
        return cls(RetentionType.CONSUMPTION)


@dataclass(frozen=True)
class StreamConfiguration:
    initial_segments: int = 1  # segments of epoch 0; later changes are made by scaling
    scaling: ScalingPolicy = field(default_factory=ScalingPolicy)
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    tags: tuple[str, ...] = ()  # labels to find streams by (Pravega's stream tags; list_streams(tag))

    def validate(self) -> None:
        if not 1 <= self.initial_segments <= 1 << 16:
            raise ValueError(f"initial_segments must be 1..65536, not {self.initial_segments}")
        if len(self.tags) > MAX_TAGS:
            raise ValueError(f"at most {MAX_TAGS} tags per stream, not {len(self.tags)}")
        for tag in self.tags:
            if not 1 <= len(tag) <= MAX_TAG_LENGTH:
                raise ValueError(f"a tag is 1..{MAX_TAG_LENGTH} characters: {tag[:40]!r}")
        s = self.scaling
        if s.min_segments < 1 or s.target_rate < 0 or s.scale_factor < 0:
            raise ValueError(f"invalid scaling policy {s}")
        ScalingType(s.type)
        RetentionType(self.retention.type)
        if self.retention.value < 0:
            raise ValueError(f"invalid retention policy {self.retention}")

    def encode(self) -> bytes:
        s, r = self.scaling, self.retention
        return _fields(
            [
                (1, _U32.pack(self.initial_segments)),
                (2, _SCALING.pack(s.type, s.target_rate, s.scale_factor, s.min_segments)),
                (3, _RETENTION.pack(r.type, r.value)),
                *((4, tag.encode()) for tag in self.tags),  # one field per tag, in order
            ]
        )

    @classmethod
    def decode(cls, data: bytes) -> StreamConfiguration:
        config = cls()
        for tag, value in _parse(data):
            if tag == 1:
                config = replace(config, initial_segments=_U32.unpack(value)[0])
            elif tag == 2:
                t, rate, factor, minimum = _SCALING.unpack(value)
                config = replace(config, scaling=ScalingPolicy(ScalingType(t), rate, factor, minimum))
            elif tag == 3:
                t, v = _RETENTION.unpack(value)
                config = replace(config, retention=RetentionPolicy(RetentionType(t), v))
            elif tag == 4:
                config = replace(config, tags=(*config.tags, value.decode()))
        return config


# -- scopes ------------------------------------------------------------------------------------------
class ScopeState(enum.IntEnum):
    ACTIVE = 0
    DELETING = 1  # a delete is checking for streams; creates in the scope back off


@dataclass(frozen=True)
class ScopeRecord:
    state: ScopeState
    created_ms: int

    def encode(self) -> bytes:
        return _fields([(1, _U8.pack(self.state)), (2, _U64.pack(self.created_ms))])

    @classmethod
    def decode(cls, data: bytes) -> ScopeRecord:
        state, created = ScopeState.ACTIVE, 0
        for tag, value in _parse(data):
            if tag == 1:
                state = ScopeState(_U8.unpack(value)[0])
            elif tag == 2:
                created = _U64.unpack(value)[0]
        return cls(state, created)


# -- streams -----------------------------------------------------------------------------------------
class StreamState(enum.IntEnum):
    CREATING = 0  # record written, segments not all created yet
    ACTIVE = 1
    SEALING = 2
    SEALED = 3
    DELETING = 4
    SCALING = 5  # a scale is recorded in ``StreamRecord.scale``; it only ever rolls forward


class ScaleReason:
    """Why an epoch exists; stored as text so new reasons need no new code to read them."""

    CREATE = "create"  # epoch 0 (and what records written before scaling existed decode to)
    MANUAL = "manual"
    SCALE_UP = "scale-up"
    SCALE_DOWN = "scale-down"


@dataclass(frozen=True)
class PendingScale:
    """A scale recorded in the stream record before any segment work: everything needed to finish
    it is here, so a retry or another controller completes exactly this scale."""

    epoch: int  # the epoch it creates (always the stream's current epoch + 1)
    created_ms: int
    sealed: tuple[int, ...]  # predecessor segment ids, by key range
    successors: tuple[tuple[int, float, float], ...]  # (segment id, key_start, key_end), by key range
    reason: str

    def encode(self) -> bytes:
        items = [(1, _U32.pack(self.epoch)), (2, _U64.pack(self.created_ms))]
        items += [(3, _U64.pack(sid)) for sid in self.sealed]
        items += [(4, _SEGMENT.pack(*s)) for s in self.successors]
        items.append((5, self.reason.encode()))
        return _fields(items)

    @classmethod
    def decode(cls, data: bytes) -> PendingScale:
        epoch, created, reason = 0, 0, ScaleReason.MANUAL
        sealed: list[int] = []
        successors: list[tuple[int, float, float]] = []
        for tag, value in _parse(data):
            if tag == 1:
                epoch = _U32.unpack(value)[0]
            elif tag == 2:
                created = _U64.unpack(value)[0]
            elif tag == 3:
                sealed.append(_U64.unpack(value)[0])
            elif tag == 4:
                successors.append(_SEGMENT.unpack(value))
            elif tag == 5:
                reason = value.decode()
        return cls(epoch, created, tuple(sealed), tuple(sorted(successors, key=lambda s: s[1])), reason)

    def new_ranges(self) -> list[tuple[float, float]]:
        return [(lo, hi) for _, lo, hi in self.successors]


@dataclass(frozen=True)
class StreamRecord:
    state: StreamState
    config: StreamConfiguration
    created_ms: int
    current_epoch: int = 0
    next_segment_number: int = 0
    truncation: dict[int, int] = field(default_factory=dict)  # segment id -> offset (a stream cut)
    scale: PendingScale | None = None  # set exactly while state is SCALING

    def encode(self) -> bytes:
        items = [
            (1, _U8.pack(self.state)),
            (2, self.config.encode()),
            (3, _U64.pack(self.created_ms)),
            (4, _U32.pack(self.current_epoch)),
            (5, _U32.pack(self.next_segment_number)),
        ]
        items += [(6, _CUT.pack(sid, offset)) for sid, offset in sorted(self.truncation.items())]
        if self.scale is not None:
            items.append((7, self.scale.encode()))
        return _fields(items)

    @classmethod
    def decode(cls, data: bytes) -> StreamRecord:
        state, config, created, epoch, next_number = StreamState.ACTIVE, StreamConfiguration(), 0, 0, 0
        truncation: dict[int, int] = {}
        scale: PendingScale | None = None
        for tag, value in _parse(data):
            if tag == 1:
                state = StreamState(_U8.unpack(value)[0])
            elif tag == 2:
                config = StreamConfiguration.decode(value)
            elif tag == 3:
                created = _U64.unpack(value)[0]
            elif tag == 4:
                epoch = _U32.unpack(value)[0]
            elif tag == 5:
                next_number = _U32.unpack(value)[0]
            elif tag == 6:
                sid, offset = _CUT.unpack(value)
                truncation[sid] = offset
            elif tag == 7:
                scale = PendingScale.decode(value)
        return cls(state, config, created, epoch, next_number, truncation, scale)


@dataclass(frozen=True)
class SegmentRange:
    """A stream segment and the slice [key_start, key_end) of the key space it owns."""

    scope: str
    stream: str
    segment_id: int
    key_start: float
    key_end: float

    @property
    def name(self) -> str:
        return segment_name(self.scope, self.stream, self.segment_id)

    @property
    def number(self) -> int:
        return segment_number(self.segment_id)

    @property
    def creation_epoch(self) -> int:
        return segment_epoch(self.segment_id)

    def contains(self, key: float) -> bool:
        return self.key_start <= key < self.key_end

    def overlaps(self, other: SegmentRange) -> bool:
        return self.key_start < other.key_end and other.key_start < self.key_end


@dataclass(frozen=True)
class EpochRecord:
    """The segments open during one epoch, sorted by key range; they partition [0.0, 1.0).

    Besides when (``created_ms``) an epoch also records why (``reason``, a ``ScaleReason`` value)
    and the scale that made it: ``edges`` are (predecessor id, successor id) pairs, each sealed
    segment of the previous epoch linked to every new segment overlapping its key range."""

    epoch: int
    created_ms: int
    segments: tuple[tuple[int, float, float], ...]  # (segment id, key_start, key_end)
    reason: str = ScaleReason.CREATE
    edges: tuple[tuple[int, int], ...] = ()

    def ranges(self, scope: str, stream: str) -> list[SegmentRange]:
        return [SegmentRange(scope, stream, sid, lo, hi) for sid, lo, hi in self.segments]

    @property
    def sealed_ids(self) -> list[int]:
        """The previous epoch's segments this epoch's scale sealed."""
        return sorted({p for p, _ in self.edges})

    @property
    def created_ids(self) -> list[int]:
        """The segments this epoch created (all of them for epoch 0)."""
        return [sid for sid, _, _ in self.segments if segment_epoch(sid) == self.epoch]

    def encode(self) -> bytes:
        items = [(1, _U32.pack(self.epoch)), (2, _U64.pack(self.created_ms))]
        items += [(3, _SEGMENT.pack(*s)) for s in self.segments]
        if self.reason != ScaleReason.CREATE:
            items.append((4, self.reason.encode()))
        items += [(5, _EDGE.pack(*e)) for e in self.edges]
        return _fields(items)

    @classmethod
    def decode(cls, data: bytes) -> EpochRecord:
        epoch, created, segments, reason = 0, 0, [], ScaleReason.CREATE
        edges: list[tuple[int, int]] = []
        for tag, value in _parse(data):
            if tag == 1:
                epoch = _U32.unpack(value)[0]
            elif tag == 2:
                created = _U64.unpack(value)[0]
            elif tag == 3:
                segments.append(_SEGMENT.unpack(value))
            elif tag == 4:
                reason = value.decode()
            elif tag == 5:
                edges.append(_EDGE.unpack(value))
        return cls(epoch, created, tuple(sorted(segments, key=lambda s: s[1])), reason, tuple(sorted(edges)))


def equal_split(count: int) -> list[tuple[float, float]]:
    """[0, 1) cut into ``count`` equal slices. Boundary i is always computed as i / count, so
    neighbouring slices share exactly the same float and the last ends at exactly 1.0."""
    return [(i / count, (i + 1) / count) for i in range(count)]
