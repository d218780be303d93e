"""Frame codec for the local durable log (pure functions, no I/O).

A frame is a 20-byte little-endian header followed by the payload::

    magic u32 | length u32 | sequence u64 | crc u32 | payload[length]

``crc`` is CRC-32C over the first 16 header bytes (magic, length, sequence) and then the payload, so a
flipped bit anywhere in a frame, including its sequence number, is detected.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

from crc32c import crc32c

MAGIC = 0x474C524D  # b"MRLG" read little-endian; never all zeros, so zero-filled tails never parse
MAGIC_BYTES = struct.pack("<I", MAGIC)
HEADER = struct.Struct("<IIQI")
HEADER_SIZE = HEADER.size
_PREFIX = struct.Struct("<IIQ")
# A header claiming more than this is treated as garbage rather than trusted for a huge read.
MAX_PAYLOAD = 256 * 1024 * 1024

_pack_prefix = _PREFIX.pack
_pack_crc = struct.Struct("<I").pack
_unpack_header = HEADER.unpack_from
_CONCAT_LIMIT = 4096


def encode_header(sequence: int, payload: bytes | bytearray | memoryview) -> bytes:
    """The header for ``payload`` at ``sequence`` (the writer appends the payload after it)."""
    n = len(payload)
    prefix = _pack_prefix(MAGIC, n, sequence)
    if n <= _CONCAT_LIMIT:
        # Hot path: for small entries one CRC call over a copy beats two chained calls.
        return prefix + _pack_crc(crc32c(prefix + payload))
    return prefix + _pack_crc(crc32c(payload, crc32c(prefix)))


def encode_header_of_parts(sequence: int, parts: Sequence[bytes | bytearray | memoryview], length: int) -> bytes:
    """``encode_header`` for a payload of ``length`` bytes given as ``parts`` written back to back."""
    if len(parts) == 1:
        return encode_header(sequence, parts[0])
    prefix = _pack_prefix(MAGIC, length, sequence)
    crc = crc32c(prefix)
    for part in parts:
        crc = crc32c(part, crc)
    return prefix + _pack_crc(crc)


def encode_frame(sequence: int, payload: bytes) -> bytes:
    """Header and payload as one buffer."""
    return encode_header(sequence, payload) + payload


def parse_frame(buf: bytes | memoryview, pos: int) -> tuple[int, int, int] | None:
    """Validate the frame at ``pos``; return (sequence, payload_start, frame_end) or None if invalid.

    Invalid means: too short for a header, wrong magic, length past the end of ``buf``, or CRC mismatch.
    """
    end_of_header = pos + HEADER_SIZE
    if end_of_header > len(buf):
        return None
    magic, length, sequence, crc = _unpack_header(buf, pos)
    if magic != MAGIC or length > MAX_PAYLOAD:
        return None
    end = end_of_header + length
    if end > len(buf):
        return None
    view = memoryview(buf)
    if crc32c(view[end_of_header:end], crc32c(view[pos : pos + 16])) != crc:
        return None
    return sequence, end_of_header, end


def iter_frames(buf: bytes | memoryview, pos: int = 0) -> Iterator[tuple[int, int, int]]:
    """Yield (sequence, payload_start, frame_end) for consecutive valid frames from ``pos``.

    Stops silently at the end of ``buf`` or at the first invalid frame; the caller compares the last
    ``frame_end`` it saw with ``len(buf)`` to tell which.
    """
    n = len(buf)
    while pos < n:
        parsed = parse_frame(buf, pos)
        if parsed is None:
            return
        yield parsed
        pos = parsed[2]


def find_valid_frame(buf: bytes | memoryview, start: int, min_sequence: int) -> int | None:
    """Position of the first valid frame at or after ``start`` whose sequence is >= ``min_sequence``.

    Used to tell a torn tail (nothing valid after the damage) from corruption (valid frames follow it).
    The sequence floor keeps stale look-alike bytes (e.g. a payload that embeds an old frame) from
    counting; a genuine later frame always carries a higher sequence than the damaged one.
    """
    data = bytes(buf) if isinstance(buf, memoryview) else buf
    pos = data.find(MAGIC_BYTES, start)
    while pos != -1:
        parsed = parse_frame(data, pos)
        if parsed is not None and parsed[0] >= min_sequence:
            return pos
        pos = data.find(MAGIC_BYTES, pos + 1)
    return None
