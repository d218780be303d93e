"""Container operations as they are written to the durable log, and their binary encoding.

Appends are the hot path and get a fixed struct header followed by the raw bytes; the rare
operations carry a small JSON body. Every operation is self-describing by its first byte.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from millrace.store.errors import DataCorruptionError

APPEND = 1
CREATE = 2
SEAL = 3
MERGE = 4
TRUNCATE = 5
DELETE = 6
ATTRIBUTES = 7
CHECKPOINT = 8
STORAGE_FLUSHED = 9

# type, segment id, offset, attribute-bytes length; then attribute JSON, then data.
_APPEND_HEADER = struct.Struct("<BQQI")


@dataclass(slots=True)
class Append:
    segment_id: int
    offset: int
    data: bytes
    # Resolved attribute values after the update (None = removed); already validated.
    attributes: dict[str, int | None] = field(default_factory=dict)


@dataclass(slots=True)
class Create:
    segment_id: int
    name: str
    attributes: dict[str, int]
    created_ms: int


@dataclass(slots=True)
class Seal:
    segment_id: int


@dataclass(slots=True)
class Merge:
    target_id: int
    source_id: int
    target_offset: int  # where the source's bytes begin in the target
    length: int


@dataclass(slots=True)
class Truncate:
    segment_id: int
    offset: int


@dataclass(slots=True)
class Delete:
    segment_id: int


@dataclass(slots=True)
class Attributes:
    segment_id: int
    attributes: dict[str, int | None]


@dataclass(slots=True)
class Checkpoint:
    snapshot: dict[str, Any]


@dataclass(slots=True)
class StorageFlushed:
    segment_id: int
    offset: int
    length: int
    chunk: str


Operation = Append | Create | Seal | Merge | Truncate | Delete | Attributes | Checkpoint | StorageFlushed

_JSON_TYPES: dict[type, int] = {
    Create: CREATE,
    Seal: SEAL,
    Merge: MERGE,
    Truncate: TRUNCATE,
    Delete: DELETE,
    Attributes: ATTRIBUTES,
    Checkpoint: CHECKPOINT,
    StorageFlushed: STORAGE_FLUSHED,
}
_JSON_CLASSES = {code: cls for cls, code in _JSON_TYPES.items()}


def encode_append(segment_id: int, offset: int, data: bytes, attributes: dict[str, int | None]) -> bytes:
    attr = json.dumps(attributes, separators=(",", ":")).encode() if attributes else b""
    return b"".join((_APPEND_HEADER.pack(APPEND, segment_id, offset, len(attr)), attr, data))


def encode(op: Operation) -> bytes:
    if isinstance(op, Append):
        return encode_append(op.segment_id, op.offset, op.data, op.attributes)
    code = _JSON_TYPES[type(op)]
    body = {name: getattr(op, name) for name in op.__slots__}
    return bytes((code,)) + json.dumps(body, separators=(",", ":")).encode()


def decode(payload: bytes) -> Operation:
    """Decode one log entry. A payload that does not parse is corruption the log's CRC missed."""
    try:
        code = payload[0]
        if code == APPEND:
            _, segment_id, offset, attr_len = _APPEND_HEADER.unpack_from(payload)
            start = _APPEND_HEADER.size
            attributes = json.loads(payload[start : start + attr_len]) if attr_len else {}
            return Append(segment_id, offset, payload[start + attr_len :], attributes)
        cls = _JSON_CLASSES[code]
        return cls(**json.loads(payload[1:]))
    except (IndexError, KeyError, TypeError, ValueError, struct.error) as exc:
        raise DataCorruptionError(f"undecodable container operation: {exc!r}") from exc


# A durable-log entry is a *frame* of operations, each prefixed by its length, so that one group
# commit of the container writes one entry however many operations it carries.
_OP_LEN = struct.Struct("<I")


def frame_part(op: Operation) -> bytes:
    payload = encode(op)
    return _OP_LEN.pack(len(payload)) + payload


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
