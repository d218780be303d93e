"""Binary layout of table segments.

A table segment is a sequence of *batches*; one ``put``/``remove`` call is one batch, written by
one segment append, so a batch is all-or-nothing. Layout (little-endian)::

    batch  = header(16) payload
    header = magic:u16 format:u8 flags:u8 count:u32 payload_len:u32 crc32c:u32
    entry  = kind:u8 key_len:u16 value_len:u32 [version:u64 if kind & EXPLICIT_VERSION] key value

The CRC-32C covers the first 12 header bytes and the payload, so a reader can tell a valid batch
from garbage. An entry's version is the segment offset of its header, unless it carries an explicit
version: compaction copies live entries to the tail with their original version, so versions
survive compaction (as in Pravega's table segments).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from millrace.store.errors import DataCorruptionError

MAGIC = 0x7A5E
FORMAT = 1

BATCH_HEADER = struct.Struct("<HBBIII")
ENTRY_HEADER = struct.Struct("<BHI")
VERSION = struct.Struct("<Q")

KIND_PUT = 1
KIND_REMOVE = 2
EXPLICIT_VERSION = 0x80

MAX_KEY_BYTES = 8192  # Pravega's limit too: keys are held in memory by the index
MAX_VALUE_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class EncodedEntry:
    """One entry as it will be written: ``version`` is None unless it must be kept explicitly."""

    key: bytes
    value: bytes | None  # None: a removal (tombstone)
    version: int | None = None

    @property
    def size(self) -> int:
        return entry_size(
            len(self.key), 0 if self.value is None else len(self.value), self.version is not None
        )


@dataclass(frozen=True, slots=True)
class DecodedEntry:
    """An entry read back. ``offset`` is where its header sits in the segment."""

    offset: int
    key: bytes
    value: bytes | None
    version: int  # explicit, or equal to ``offset``
    value_offset: int
    size: int


def entry_size(key_len: int, value_len: int, explicit_version: bool) -> int:
    return ENTRY_HEADER.size + (VERSION.size if explicit_version else 0) + key_len + value_len


def encode_batch(entries: list[EncodedEntry]) -> tuple[bytes, list[int]]:
    """Serialize a batch; also return each entry's header position relative to the batch start."""
    parts: list[bytes] = []
    positions: list[int] = []
    pos = BATCH_HEADER.size
    for e in entries:
        kind = KIND_PUT if e.value is not None else KIND_REMOVE
        value = e.value or b""
        if e.version is not None:
            kind |= EXPLICIT_VERSION
        parts.append(ENTRY_HEADER.pack(kind, len(e.key), len(value)))
        if e.version is not None:
            parts.append(VERSION.pack(e.version))
        parts.append(e.key)
        parts.append(value)
        positions.append(pos)
        pos += e.size
    payload = b"".join(parts)
    head = BATCH_HEADER.pack(MAGIC, FORMAT, 0, len(entries), len(payload), 0)[:12]
    crc = crc32c.crc32c(payload, crc32c.crc32c(head))
    return head + struct.pack("<I", crc) + payload, positions


def batch_length(header: bytes, offset: int) -> int:
    """Total size of the batch whose header is ``header`` (validated), at segment ``offset``."""
    magic, fmt, _flags, _count, payload_len, _crc = BATCH_HEADER.unpack_from(header)
    if magic != MAGIC or fmt != FORMAT:
        raise DataCorruptionError(f"no table batch at offset {offset} (magic {magic:#x}, format {fmt})")
    return BATCH_HEADER.size + payload_len


def decode_batch(data: bytes | memoryview, offset: int) -> Iterator[DecodedEntry]:
    """Validate and decode one whole batch that starts at segment ``offset``."""
    view = memoryview(data)
    _magic, _fmt, _flags, count, payload_len, crc = BATCH_HEADER.unpack_from(view)
    payload = view[BATCH_HEADER.size : BATCH_HEADER.size + payload_len]
    if len(payload) != payload_len or crc32c.crc32c(payload, crc32c.crc32c(view[:12])) != crc:
        raise DataCorruptionError(f"table batch at offset {offset} fails its CRC")
    pos = BATCH_HEADER.size
    for _ in range(count):
        kind, key_len, value_len = ENTRY_HEADER.unpack_from(view, pos)
        start = pos
        pos += ENTRY_HEADER.size
        version = start + offset
        if kind & EXPLICIT_VERSION:
            (version,) = VERSION.unpack_from(view, pos)
            pos += VERSION.size
        key = bytes(view[pos : pos + key_len])
        pos += key_len
        value_offset = offset + pos
        base = kind & ~EXPLICIT_VERSION
        if base == KIND_PUT:
            value: bytes | None = bytes(view[pos : pos + value_len])
        elif base == KIND_REMOVE:
            value = None
        else:
            raise DataCorruptionError(f"unknown table entry kind {kind} at offset {offset + start}")
        pos += value_len
        yield DecodedEntry(offset + start, key, value, version, value_offset, pos - start)
    if pos != BATCH_HEADER.size + payload_len:
        raise DataCorruptionError(f"table batch at offset {offset} has trailing bytes")
