"""Key-value tables on the wire (pure, no I/O): segment names, stored keys and payload packing.

A key-value table ``scope/name`` with N partitions is N table segments ``scope/name#kvtable/<p>``
(stream names cannot hold ``#``, so they never collide with a stream's segments). A key lives in the
partition its key family hashes to, or its own key when it has no family, so every key of one family
shares a table segment and a multi-key update within a family is one atomic table batch.

The table segment stores ``u16 family length, family, key``: iterating one family is a prefix scan.
Keys and values are raw bytes in the frame payload, concatenated; the JSON header lists their
lengths, so no byte is re-encoded (no base64).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from millrace.protocol.keys import bytes_hash

KV_TABLE_MARK = "#kvtable"
MUST_NOT_EXIST = -1  # an expected version meaning "the key must be absent"
MAX_FAMILY_BYTES = 1024

_FAMILY_LEN = struct.Struct(">H")


def table_segment_name(scope: str, table: str, partition: int) -> str:
    return f"{scope}/{table}{KV_TABLE_MARK}/{partition}"


def partition_of(family: bytes | None, key: bytes, partitions: int) -> int:
    """The partition that holds ``key`` (of ``family``, if any)."""
    return min(int(bytes_hash(family if family is not None else key) * partitions), partitions - 1)


def stored_key(family: bytes | None, key: bytes) -> bytes:
    if family is not None and not 1 <= len(family) <= MAX_FAMILY_BYTES:
        raise ValueError(f"a key family has 1..{MAX_FAMILY_BYTES} bytes, not {len(family)}")
    fam = family or b""
    return _FAMILY_LEN.pack(len(fam)) + fam + key


def family_prefix(family: bytes | None) -> bytes:
    """The stored-key prefix of every key of ``family`` (None: of the keys without a family)."""
    return stored_key(family, b"")


def split_stored_key(stored: bytes) -> tuple[bytes | None, bytes]:
    """(family or None, key) of a stored key."""
    if len(stored) < _FAMILY_LEN.size:
        raise ValueError("stored key shorter than its family length")
    (n,) = _FAMILY_LEN.unpack_from(stored)
    if _FAMILY_LEN.size + n > len(stored):
        raise ValueError("stored key's family runs past its end")
    return (stored[2 : 2 + n] if n else None), stored[2 + n :]


def pack(blobs: Sequence[bytes]) -> tuple[list[int], bytes]:
    """(lengths, payload) carrying ``blobs`` in one frame."""
    return [len(b) for b in blobs], b"".join(blobs)


def unpack(lengths: Sequence[int], payload: bytes | memoryview) -> list[bytes]:
    """The blobs ``pack`` made; ValueError when the lengths do not add up to the payload."""
    out: list[bytes] = []
    pos = 0
    for n in lengths:
        n = int(n)
        if n < 0 or pos + n > len(payload):
            raise ValueError("payload shorter than the lengths the header lists")
        out.append(bytes(payload[pos : pos + n]))
        pos += n
    if pos != len(payload):
        raise ValueError(f"{len(payload) - pos} payload bytes beyond the lengths the header lists")
    return out
