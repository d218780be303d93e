"""Per-segment metadata of a container, in two layers.

The *accepted* layer changes when an operation is validated and handed to the durable log; it is
what later operations are validated against and what checkpoints capture (a checkpoint taken under
the container lock describes exactly the state after every operation logged before it). The
*durable* layer changes when the log acknowledges; it is all that readers and clients ever see.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from millrace.store.contracts import AttributeUpdate
from millrace.store.contracts import AttributeUpdateType as T
from millrace.store.errors import BadAttributeUpdateError, SegmentNotFoundError, SegmentSealedError


@dataclass(slots=True)
class ChunkRef:
    """Bytes [offset, offset+length) of a segment live in ``chunk`` from ``chunk_offset`` on."""

    offset: int
    length: int
    chunk: str
    chunk_offset: int = 0

    @property
    def end(self) -> int:
        return self.offset + self.length

    def to_json(self) -> list[int | str]:
        return [self.offset, self.length, self.chunk, self.chunk_offset]

    @classmethod
    def from_json(cls, raw: list[Any]) -> ChunkRef:
        return cls(raw[0], raw[1], raw[2], raw[3])


class ChunkLayout:
    """A segment's chunks in long-term storage: disjoint ranges sorted by offset.

    Ranges may leave gaps (a merge can place chunks beyond data still waiting to be flushed);
    ``contiguous_end`` is where the gap-free run from the segment's start ends."""

    __slots__ = ("refs", "_offsets", "contiguous_end")

    def __init__(self, start_offset: int = 0, refs: list[ChunkRef] | None = None) -> None:
        self.refs: list[ChunkRef] = []
        self._offsets: list[int] = []
        self.contiguous_end = start_offset
        for ref in refs or ():
            self.add(ref)

    def add(self, ref: ChunkRef) -> None:
        i = bisect.bisect_left(self._offsets, ref.offset)
        self.refs.insert(i, ref)
        self._offsets.insert(i, ref.offset)
        self._extend_contiguous(i)

    def _extend_contiguous(self, i: int) -> None:
        while i < len(self.refs) and self.refs[i].offset <= self.contiguous_end:
            self.contiguous_end = max(self.contiguous_end, self.refs[i].end)
            i += 1

    def find(self, offset: int) -> ChunkRef | None:
        i = bisect.bisect_right(self._offsets, offset) - 1
        if i >= 0 and self.refs[i].offset <= offset < self.refs[i].end:
            return self.refs[i]
        return None

    def covers(self, start: int, end: int) -> bool:
        """Whether every byte of [start, end) is in some chunk."""
        pos = start
        i = max(bisect.bisect_right(self._offsets, pos) - 1, 0)
        while pos < end:
            if i >= len(self.refs) or self.refs[i].offset > pos:
                return False
            pos = max(pos, self.refs[i].end)
            i += 1
        return True

    def drop_below(self, offset: int) -> list[ChunkRef]:
        """Forget chunks wholly below ``offset`` (after a truncation) and return them for deletion."""
        cut = 0
        while cut < len(self.refs) and self.refs[cut].end <= offset:
            cut += 1
        dropped = self.refs[:cut]
        del self.refs[:cut]
        del self._offsets[:cut]
        self.contiguous_end = max(self.contiguous_end, offset)
        self._extend_contiguous(0)
        return dropped

    def shifted(self, delta: int, from_offset: int) -> list[ChunkRef]:
        """Copies of the refs at or above ``from_offset`` moved by ``delta`` (for a merge)."""
        out: list[ChunkRef] = []
        for ref in self.refs:
            if ref.end <= from_offset:
                continue
            skip = max(0, from_offset - ref.offset)
            out.append(ChunkRef(ref.offset + skip + delta, ref.length - skip, ref.chunk, ref.chunk_offset + skip))
        return out


class SegmentMetadata:
    __slots__ = (
        "segment_id", "name", "created_ms", "last_modified_ms",
        # accepted layer
        "length", "start_offset", "sealed", "attributes", "chunks", "deleted",
        # durable layer
        "durable_length", "durable_start_offset", "durable_sealed", "durable_attributes",
        # set while a merge of this (sealed) segment into another is in flight
        "merging",
        # bytes readers took from it since the container started (the console's rate out; not saved)
        "read_bytes",
    )  # fmt: skip

    def __init__(self, segment_id: int, name: str, created_ms: int, attributes: dict[str, int]) -> None:
        self.segment_id = segment_id
        self.name = name
        self.created_ms = created_ms
        self.last_modified_ms = created_ms
        self.length = 0
        self.start_offset = 0
        self.sealed = False
        self.attributes = dict(attributes)
        self.chunks = ChunkLayout()
        self.deleted = False
        self.durable_length = 0
        self.durable_start_offset = 0
        self.durable_sealed = False
        self.durable_attributes = dict(attributes)
        self.merging = False
        self.read_bytes = 0

    @property
    def storage_length(self) -> int:
        return self.chunks.contiguous_end

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.segment_id,
            "name": self.name,
            "created": self.created_ms,
            "modified": self.last_modified_ms,
            "length": self.length,
            "start": self.start_offset,
            "sealed": self.sealed,
            "attributes": self.attributes,
            "chunks": [ref.to_json() for ref in self.chunks.refs],
        }

    @classmethod
    def restore(cls, raw: dict[str, Any]) -> SegmentMetadata:
        seg = cls(raw["id"], raw["name"], raw["created"], raw["attributes"])
        seg.last_modified_ms = raw["modified"]
        seg.length = seg.durable_length = raw["length"]
        seg.start_offset = seg.durable_start_offset = raw["start"]
        seg.sealed = seg.durable_sealed = raw["sealed"]
        seg.chunks = ChunkLayout(raw["start"], [ChunkRef.from_json(r) for r in raw["chunks"]])
        return seg


class ContainerMetadata:
    """Every segment of one container. ``by_id`` holds both layers (a segment's metadata carries
    both); ``by_name`` is the accepted layer's names, ``visible`` the durable layer's (what readers
    find). ``next_id`` is the id the next accepted create takes. Guarded by the container lock."""

    __slots__ = ("by_name", "by_id", "visible", "next_id")

    def __init__(self) -> None:
        self.by_name: dict[str, SegmentMetadata] = {}
        self.by_id: dict[int, SegmentMetadata] = {}
        self.visible: dict[str, SegmentMetadata] = {}
        self.next_id = 1

    def segment(self, name: str) -> SegmentMetadata:
        """The accepted segment called ``name``, for validating a new operation."""
        seg = self.by_name.get(name)
        if seg is None:
            raise SegmentNotFoundError(name)
        return seg

    def writable(self, name: str) -> SegmentMetadata:
        """The accepted segment called ``name``, which must still take appends."""
        seg = self.segment(name)
        if seg.sealed or seg.merging:
            raise SegmentSealedError(f"segment {name} is {'sealed' if seg.sealed else 'being merged'}: it takes no appends")
        return seg

    def visible_segment(self, name: str) -> SegmentMetadata:
        """The durable segment called ``name``, as readers see it."""
        seg = self.visible.get(name)
        if seg is None:
            raise SegmentNotFoundError(name)
        return seg

    def snapshot(self, container_id: int) -> dict[str, Any]:
        """The accepted layer, as a checkpoint records it."""
        segments = [seg for seg in self.by_id.values() if not seg.deleted]
        return {
            "container": container_id,
            "next_id": self.next_id,
            "segments": [seg.snapshot() for seg in segments],
            "lengths": {seg.segment_id: seg.length for seg in segments},
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Make both layers what ``snapshot`` recorded (a checkpoint is durable by definition)."""
        self.next_id = snapshot["next_id"]
        for raw in snapshot["segments"]:
            seg = SegmentMetadata.restore(raw)
            self.by_name[seg.name] = self.visible[seg.name] = self.by_id[seg.segment_id] = seg

    def referenced_chunks(self) -> set[str]:
        return {ref.chunk for seg in self.by_id.values() for ref in seg.chunks.refs}


def resolve_attribute_updates(
    current: dict[str, int], updates: Iterable[AttributeUpdate]
) -> dict[str, int | None]:
    """Validate conditional attribute updates against ``current``; return the resulting values
    (None = removed). Raises BadAttributeUpdateError when a condition fails."""
    resolved: dict[str, int | None] = {}
    for u in updates:
        now = resolved[u.key] if u.key in resolved else current.get(u.key)
        if u.type == T.REPLACE:
            resolved[u.key] = u.value
        elif u.type == T.REPLACE_IF_EQUALS:
            if now != u.expected:
                raise BadAttributeUpdateError(f"attribute {u.key!r} is {now}, expected {u.expected}")
            resolved[u.key] = u.value
        elif u.type == T.REPLACE_IF_GREATER:
            if now is not None and u.value <= now:
                raise BadAttributeUpdateError(f"attribute {u.key!r} is {now}, not below {u.value}")
            resolved[u.key] = u.value
        elif u.type == T.ACCUMULATE_MAX:
            resolved[u.key] = u.value if now is None else max(now, u.value)
        elif u.type == T.REMOVE:
            resolved[u.key] = None
        else:
            raise BadAttributeUpdateError(f"unknown attribute update type {u.type}")
    return resolved


def apply_attributes(target: dict[str, int], resolved: dict[str, int | None]) -> None:
    for key, value in resolved.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
