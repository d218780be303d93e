"""Container operations: the whole meaning of each one in its own class.

An operation's life has three steps, and each class says what it does at each:

- ``prepare`` (a classmethod, under the container lock): validate a request against the *accepted*
  metadata and build the operation, or say why nothing needs logging (``AlreadyDone``) or what has to
  happen first (``FlushFirst``). Validation failures raise ``StoreError``s.
- ``accept`` (under the lock, as the operation is handed to the durable log): change the accepted
  layer. It cannot fail; the next operation is validated against its result.
- ``apply`` (under the lock, once the log acknowledged it, strictly in log order): change the durable
  layer, the read index and the rest of ``MemoryState``; return the caller's result.

Recovery replays logged operations through the same ``accept`` and ``apply``. Each class also encodes
itself for the log and decodes itself back; its ``CODE``, the encoding's first byte, registers it.
Adding an operation is adding one class here.

Appends are the hot path and get a fixed struct header followed by the raw bytes; the rare operations
carry a small JSON body.
"""

from __future__ import annotations

import json
import struct
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, Self

from millrace.store.containers.memory_state import MemoryState
from millrace.store.containers.metadata import (
    ChunkRef,
    ContainerMetadata,
    SegmentMetadata,
    apply_attributes,
    resolve_attribute_updates,
)
from millrace.store.contracts import AttributeUpdate
from millrace.store.durablelog.interface import Buffer, LogAddress
from millrace.store.errors import (
    BadOffsetError,
    DataCorruptionError,
    OffsetOutOfRangeError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentTruncatedError,
    StoreError,
)


def _refuse(error: StoreError) -> Any:
    raise error


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class AlreadyDone:
    """Validation found nothing to log (an idempotent retry, or a refusal that must wait): the caller
    gets ``value()`` once every operation accepted before is durable; a ``StoreError`` it raises is the
    caller's answer."""

    value: Callable[[], Any]


@dataclass(frozen=True, slots=True)
class FlushFirst:
    """The operation needs ``segment_id`` wholly in long-term storage: prepare it again once the
    storage writer has flushed it."""

    segment_id: int


_BY_CODE: dict[int, type[Operation]] = {}

# A durable-log entry is a *frame* of operations, each prefixed by its length, so that one group
# commit of the container writes one entry however many operations it carries.
_OP_LEN = struct.Struct("<I")


class Operation(ABC):
    """One change to a container's segments, as the durable log records it."""

    __slots__ = ()
    CODE: ClassVar[int]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        code = cls.__dict__.get("CODE")
        if code is None:
            return
        known = _BY_CODE.get(code)
        # @dataclass(slots=True) rebuilds the class, so the same class registers twice.
        if known is not None and known.__qualname__ != cls.__qualname__:
            raise TypeError(f"operation code {code} is taken by {known.__qualname__}")
        _BY_CODE[code] = cls

    def accept(self, metadata: ContainerMetadata) -> tuple[str, ...]:
        """Change the accepted layer. Returns the chunks this operation releases, to delete from
        long-term storage once it is durable."""
        return ()

    @abstractmethod
    def apply(self, state: MemoryState, address: LogAddress | None) -> Any:
        """Change the durable layer once durable; ``address`` is the log entry's when this operation
        opens it. Returns what the caller's future completes with."""

    @abstractmethod
    def encode(self) -> bytes: ...

    @classmethod
    @abstractmethod
    def decode(cls, payload: bytes) -> Self:
        """The operation ``encode`` wrote (``payload`` starts with ``CODE``)."""

    def frame_parts(self) -> tuple[Buffer, ...]:
        """This operation in a log entry (its length, then what ``encode`` makes), as buffers the log
        writes back to back; ``decode_frame`` reads entries of them."""
        payload = self.encode()
        return (_OP_LEN.pack(len(payload)) + payload,)


class _JsonOperation(Operation):
    """A rare operation: its code byte, then its fields as a JSON object."""

    __slots__ = ()

    def encode(self) -> bytes:
        fields: tuple[str, ...] = self.__slots__  # a subclass's dataclass slots are its fields
        body = {name: getattr(self, name) for name in fields}
        return bytes((self.CODE,)) + json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, payload: bytes) -> Self:
        return cls(**json.loads(payload[1:]))


# type, segment id, offset, attribute-bytes length; then attribute JSON, then data.
_APPEND_HEADER = struct.Struct("<BQQI")
# The same, behind the operation's length prefix in a frame.
_APPEND_PART_HEADER = struct.Struct("<IBQQI")


@dataclass(slots=True)
class Append(Operation):
    CODE: ClassVar[int] = 1
    segment_id: int
    offset: int
    data: bytes
    # Resolved attribute values after the update (None = removed); already validated.
    attributes: dict[str, int | None] = field(default_factory=dict)
    # How many events the bytes carry, for the segment's rates. Not logged: a replayed append
    # has None, because replayed appends are not load.
    events: int | None = field(default=None, compare=False)

    @staticmethod
    def check_request(data: bytes, events: int, max_bytes: int) -> None:
        """What an append request must satisfy whatever the segment's state."""
        if len(data) > max_bytes:
            raise StoreError(f"append of {len(data)} bytes exceeds {max_bytes}")
        if events < 0:
            raise StoreError(f"an append carries a non-negative event count, not {events}")

    @classmethod
    def prepare(
        cls,
        metadata: ContainerMetadata,
        name: str,
        data: bytes,
        expected_offset: int | None,
        updates: Sequence[AttributeUpdate],
        events: int,
    ) -> Append:
        seg = metadata.writable(name)
        offset = seg.length
        if expected_offset is not None and expected_offset != offset:
            raise BadOffsetError(f"{name}: expected offset {expected_offset}, length is {offset}",
                                 expected_offset, offset)
        resolved = resolve_attribute_updates(seg.attributes, updates) if updates else {}
        return cls(seg.segment_id, offset, bytes(data), resolved, events)

    def accept(self, metadata: ContainerMetadata) -> tuple[str, ...]:
        seg = metadata.by_id[self.segment_id]
        seg.length = self.offset + len(self.data)
        if self.attributes:
            apply_attributes(seg.attributes, self.attributes)
        return ()

    def apply(self, state: MemoryState, address: LogAddress | None) -> int:
        seg = state.metadata.by_id.get(self.segment_id)
        if seg is None:
            return self.offset
        end = self.offset + len(self.data)
        if end > seg.durable_length:
            seg.durable_length = end
        seg.last_modified_ms = now_ms()
        if self.attributes:
            apply_attributes(seg.durable_attributes, self.attributes)
        read_index = state.read_index
        if end > seg.durable_start_offset and end > seg.storage_length:
            read_index.append(self.segment_id, self.offset, self.data)
            state.writer.notice_dirty(read_index.dirty_bytes)
        read_index.tail_reads.tail_moved(self.segment_id, seg.durable_length, seg.durable_sealed)
        stats = state.stats
        stats["appends"] += 1
        stats["append_bytes"] += len(self.data)
        if self.events is not None:
            state.rates.record(self.segment_id, self.events, len(self.data))
        return self.offset

    def encode(self) -> bytes:
        attr = json.dumps(self.attributes, separators=(",", ":")).encode() if self.attributes else b""
        return b"".join((_APPEND_HEADER.pack(self.CODE, self.segment_id, self.offset, len(attr)), attr, self.data))

    def frame_parts(self) -> tuple[Buffer, ...]:
        # The data as it is, beside a small header: the hot path copies it in no join (a file log writes
        # the parts with writev; a log that needs one buffer joins them once).
        attr = json.dumps(self.attributes, separators=(",", ":")).encode() if self.attributes else b""
        size = _APPEND_HEADER.size + len(attr) + len(self.data)
        header = _APPEND_PART_HEADER.pack(size, self.CODE, self.segment_id, self.offset, len(attr))
        return (header + attr, self.data) if attr else (header, self.data)

    @classmethod
    def decode(cls, payload: bytes) -> Self:
        _, segment_id, offset, attr_len = _APPEND_HEADER.unpack_from(payload)
        start = _APPEND_HEADER.size
        attributes = json.loads(payload[start : start + attr_len]) if attr_len else {}
        return cls(segment_id, offset, payload[start + attr_len :], attributes)


@dataclass(slots=True)
class Create(_JsonOperation):
    CODE: ClassVar[int] = 2
    segment_id: int
    name: str
    attributes: dict[str, int]
    created_ms: int

    @classmethod
    def prepare(cls, metadata: ContainerMetadata, name: str, attributes: dict[str, int]) -> Create | AlreadyDone:
        accepted = metadata.by_name.get(name)
        if accepted is not None:
            if metadata.visible.get(name) is not accepted:
                # Another caller's creation is still in flight: refuse once it is durable, so that a
                # caller told "exists" finds the segment (a load that creates its index segment if
                # missing, racing the topic's creation, then failed to read it).
                return AlreadyDone(partial(_refuse, SegmentExistsError(name)))
            raise SegmentExistsError(name)
        return cls(metadata.next_id, name, dict(attributes), now_ms())

    def accept(self, metadata: ContainerMetadata) -> tuple[str, ...]:
        seg = SegmentMetadata(self.segment_id, self.name, self.created_ms, self.attributes)
        metadata.by_name[self.name] = metadata.by_id[self.segment_id] = seg
        metadata.next_id = max(metadata.next_id, self.segment_id + 1)
        return ()

    def apply(self, state: MemoryState, address: LogAddress | None) -> None:
        state.metadata.visible[self.name] = state.metadata.by_id[self.segment_id]


@dataclass(slots=True)
class Seal(_JsonOperation):
    CODE: ClassVar[int] = 3
    segment_id: int

    @classmethod
    def prepare(cls, metadata: ContainerMetadata, name: str) -> Seal | AlreadyDone:
        seg = metadata.segment(name)
        if seg.sealed:
            # Idempotent: a retried seal must not fail once the first one landed.
            return AlreadyDone(lambda: seg.length)
        return cls(seg.segment_id)

    def accept(self, metadata: ContainerMetadata) -> tuple[str, ...]:
        metadata.by_id[self.segment_id].sealed = True
        return ()

    def apply(self, state: MemoryState, address: LogAddress | None) -> int:
        seg = state.metadata.by_id[self.segment_id]
        seg.durable_sealed = True
        seg.last_modified_ms = now_ms()
        state.read_index.tail_reads.tail_moved(self.segment_id, seg.durable_length, sealed=True)
        state.writer.wake()  # a sealed segment is flushed whole without waiting
        return seg.durable_length


@dataclass(slots=True)
class Merge(_JsonOperation):
    CODE: ClassVar[int] = 4
    target_id: int
    source_id: int
    target_offset: int  # where the source's bytes begin in the target
    length: int

    @classmethod
    def prepare(cls, metadata: ContainerMetadata, target: str, source: str) -> Merge | FlushFirst:
        """The source must be sealed and wholly in long-term storage, so the merge itself only moves
        chunk references (no data is copied)."""
        tgt = metadata.writable(target)
        src = metadata.segment(source)
        if src is tgt:
            raise StoreError("cannot merge a segment into itself")
        if not src.sealed:
            raise StoreError(f"merge source {source} is not sealed")
        if src.merging:
            raise StoreError(f"merge source {source} is already being merged")
        if not src.durable_sealed or src.storage_length < src.length:
            return FlushFirst(src.segment_id)
        return cls(tgt.segment_id, src.segment_id, tgt.length, src.length - src.start_offset)

    def accept(self, metadata: ContainerMetadata) -> tuple[str, ...]:
        tgt, src = metadata.by_id[self.target_id], metadata.by_id[self.source_id]
        for ref in src.chunks.shifted(self.target_offset - src.start_offset, src.start_offset):
            tgt.chunks.add(ref)
        tgt.length = self.target_offset + self.length
        src.merging = src.deleted = True
        metadata.by_name.pop(src.name, None)
        return ()  # the source's chunks now belong to the target

    def apply(self, state: MemoryState, address: LogAddress | None) -> int:
        metadata = state.metadata
        tgt = metadata.by_id[self.target_id]
        src = metadata.by_id.pop(self.source_id)
        if metadata.visible.get(src.name) is src:
            del metadata.visible[src.name]
        state.read_index.remove(self.source_id)
        state.rates.forget(self.source_id)
        tgt.durable_length = self.target_offset + self.length
        tgt.last_modified_ms = now_ms()
        tails = state.read_index.tail_reads
        tails.tail_moved(self.target_id, tgt.durable_length, tgt.durable_sealed)
        tails.segment_gone(self.source_id, SegmentNotFoundError(src.name))
        return self.target_offset


@dataclass(slots=True)
class Truncate(_JsonOperation):
    CODE: ClassVar[int] = 5
    segment_id: int
    offset: int

    @classmethod
    def prepare(cls, metadata: ContainerMetadata, name: str, offset: int) -> Truncate | AlreadyDone:
        seg = metadata.segment(name)
        if offset > seg.length or offset < 0:
            raise OffsetOutOfRangeError(f"{name}: truncate at {offset}, length {seg.length}")
        if offset <= seg.start_offset:
            return AlreadyDone(lambda: None)
        return cls(seg.segment_id, offset)

    def accept(self, metadata: ContainerMetadata) -> tuple[str, ...]:
        seg = metadata.by_id[self.segment_id]
        seg.start_offset = self.offset
        return tuple(ref.chunk for ref in seg.chunks.drop_below(self.offset))

    def apply(self, state: MemoryState, address: LogAddress | None) -> None:
        seg = state.metadata.by_id[self.segment_id]
        seg.durable_start_offset = max(seg.durable_start_offset, self.offset)
        state.read_index.drop_below(self.segment_id, self.offset)


@dataclass(slots=True)
class Delete(_JsonOperation):
    CODE: ClassVar[int] = 6
    segment_id: int

    @classmethod
    def prepare(cls, metadata: ContainerMetadata, name: str) -> Delete:
        return cls(metadata.segment(name).segment_id)

    def accept(self, metadata: ContainerMetadata) -> tuple[str, ...]:
        seg = metadata.by_id[self.segment_id]
        seg.deleted = True
        metadata.by_name.pop(seg.name, None)
        return tuple(ref.chunk for ref in seg.chunks.refs)

    def apply(self, state: MemoryState, address: LogAddress | None) -> None:
        metadata = state.metadata
        seg = metadata.by_id.pop(self.segment_id)
        if metadata.visible.get(seg.name) is seg:
            del metadata.visible[seg.name]
        state.read_index.remove(self.segment_id)
        state.rates.forget(self.segment_id)
        state.read_index.tail_reads.segment_gone(self.segment_id, SegmentNotFoundError(seg.name))


@dataclass(slots=True)
class Attributes(_JsonOperation):
    CODE: ClassVar[int] = 7
    segment_id: int
    attributes: dict[str, int | None]

    @classmethod
    def prepare(cls, metadata: ContainerMetadata, name: str, updates: Sequence[AttributeUpdate]) -> Attributes:
        seg = metadata.segment(name)
        if seg.merging:
            raise SegmentSealedError(f"segment {name} is being merged: its attributes no longer change")
        return cls(seg.segment_id, resolve_attribute_updates(seg.attributes, updates))

    def accept(self, metadata: ContainerMetadata) -> tuple[str, ...]:
        apply_attributes(metadata.by_id[self.segment_id].attributes, self.attributes)
        return ()

    def apply(self, state: MemoryState, address: LogAddress | None) -> None:
        seg = state.metadata.by_id[self.segment_id]
        apply_attributes(seg.durable_attributes, self.attributes)
        seg.last_modified_ms = now_ms()


@dataclass(slots=True)
class Checkpoint(_JsonOperation):
    """A snapshot of the accepted layer (``ContainerMetadata.snapshot``). The processor makes it open
    its log entry, so the log can be truncated right before it."""

    CODE: ClassVar[int] = 8
    snapshot: dict[str, Any]

    @classmethod
    def prepare(cls, metadata: ContainerMetadata, container_id: int) -> Checkpoint:
        return cls(metadata.snapshot(container_id))

    def apply(self, state: MemoryState, address: LogAddress | None) -> None:
        if address is not None:
            state.checkpoints.record(address, self.snapshot["lengths"])

    @classmethod
    def decode(cls, payload: bytes) -> Self:
        snapshot = json.loads(payload[1:])["snapshot"]
        # JSON turned the segment ids into strings.
        snapshot["lengths"] = {int(k): v for k, v in snapshot["lengths"].items()}
        return cls(snapshot)


@dataclass(slots=True)
class StorageFlushed(_JsonOperation):
    """The storage writer wrote bytes [offset, offset+length) of a segment to ``chunk``."""

    CODE: ClassVar[int] = 9
    segment_id: int
    offset: int
    length: int
    chunk: str

    @classmethod
    def prepare(
        cls, metadata: ContainerMetadata, segment_id: int, offset: int, length: int, chunk: str
    ) -> StorageFlushed:
        """Fails when the segment went away or was truncated past the chunk while it was written."""
        seg = metadata.by_id.get(segment_id)
        if seg is None or seg.deleted:
            raise SegmentNotFoundError(f"segment {segment_id}")
        if offset + length <= seg.start_offset:
            raise SegmentTruncatedError(f"{seg.name}: truncated past {offset + length}")
        return cls(segment_id, offset, length, chunk)

    def accept(self, metadata: ContainerMetadata) -> tuple[str, ...]:
        seg = metadata.by_id.get(self.segment_id)
        if seg is not None:
            seg.chunks.add(ChunkRef(self.offset, self.length, self.chunk))
        return ()

    def apply(self, state: MemoryState, address: LogAddress | None) -> None:
        state.read_index.mark_clean(self.segment_id, self.offset + self.length)


Prepared = Operation | AlreadyDone | FlushFirst


def decode(payload: bytes) -> Operation:
    """Decode one operation. A payload that does not parse is corruption the log's CRC missed."""
    try:
        return _BY_CODE[payload[0]].decode(payload)
    except (IndexError, KeyError, TypeError, ValueError, struct.error) as exc:
        raise DataCorruptionError(f"undecodable container operation: {exc!r}") from exc


def decode_frame(frame: bytes) -> list[Operation]:
    out: list[Operation] = []
    pos = 0
    view = memoryview(frame)
    while pos < len(frame):
        if pos + 4 > len(frame):
            raise DataCorruptionError(f"frame ends inside an operation header at {pos}")
        (size,) = _OP_LEN.unpack_from(frame, pos)
        pos += 4
        if pos + size > len(frame):
            raise DataCorruptionError(f"operation at {pos} runs {size} bytes past the frame end")
        out.append(decode(bytes(view[pos : pos + size])))
        pos += size
    return out
