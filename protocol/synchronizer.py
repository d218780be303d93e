"""A state synchronizer's segment as bytes: the entries ``client/synchronizer.py`` writes and reads, and
how a sequence of them folds into a state. Pure (no I/O): the client's ``StateSynchronizer`` uses it to
write and to follow the segment, and the server to rebuild a state it only shows (a reader group's, for
the console and ``/metrics``), reading the segment and never writing to it.

Entries (one atomic append each, so there are no torn ones to skip; anything that does not parse is
an error, never skipped)::

    magic:u16  kind:u8  nonce:8 bytes  length:u32  crc32:u32  payload

``STATE`` carries a whole state and replaces the one before; ``UPDATES`` carries a list of serialized
updates applied in order; ``SNAPSHOT`` is a compaction's state, with the nonces of the entries it covers
(``pack_snapshot``). A segment's start offset is always the offset of a ``STATE`` or ``SNAPSHOT`` entry
(compaction truncates only just before a snapshot), so folding from the start rebuilds the state.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from millrace.protocol.errors import StoreError

S = TypeVar("S")
U = TypeVar("U")

MAGIC = 0x5359  # "SY"
KIND_STATE = 1
KIND_UPDATES = 2
KIND_SNAPSHOT = 3
# A snapshot's payload: the offset its nonce list starts at and how many nonces, the nonces, the state.
_SNAPSHOT_HEAD = struct.Struct(">QI")
_HEADER = struct.Struct(">HB8sII")
_COUNT = struct.Struct(">I")


class StateCorruptError(StoreError):
    """The segment holds bytes that are not a synchronizer entry (or an entry kind this client does
    not know): the state cannot be rebuilt, so nothing is guessed."""


@dataclass(frozen=True)
class Entry:
    """One decoded entry and where it lies in the segment."""

    offset: int
    end: int
    kind: int
    nonce: bytes
    payload: bytes


def encode_entry(kind: int, nonce: bytes, payload: bytes) -> bytes:
    return _HEADER.pack(MAGIC, kind, nonce, len(payload), zlib.crc32(payload)) + payload


ENTRY_HEADER_BYTES = _HEADER.size


def entry_length(header: bytes) -> int:
    """The whole length of the entry whose header ``header`` starts with (ENTRY_HEADER_BYTES of it);
    StateCorruptError if it is no entry's header."""
    magic, _, _, length, _ = _HEADER.unpack_from(header)
    if magic != MAGIC:
        raise StateCorruptError("no synchronizer entry here")
    return _HEADER.size + length


def decode_entries(data: bytes, offset: int) -> tuple[list[Entry], int]:
    """The whole entries at the front of ``data`` (which starts at segment ``offset``), and how many
    bytes they take; a trailing partial entry is left for the next read."""
    entries: list[Entry] = []
    pos = 0
    while len(data) - pos >= _HEADER.size:
        magic, kind, nonce, length, crc = _HEADER.unpack_from(data, pos)
        if magic != MAGIC:
            raise StateCorruptError(f"no synchronizer entry at offset {offset + pos}")
        end = pos + _HEADER.size + length
        if end > len(data):
            break
        payload = bytes(data[pos + _HEADER.size:end])
        if zlib.crc32(payload) != crc:
            raise StateCorruptError(f"entry at offset {offset + pos} fails its CRC")
        if kind not in (KIND_STATE, KIND_UPDATES, KIND_SNAPSHOT):
            raise StateCorruptError(f"entry at offset {offset + pos} has unknown kind {kind}")
        entries.append(Entry(offset + pos, offset + end, kind, nonce, payload))
        pos = end
    return entries, pos


def pack_snapshot(covered_from: int, nonces: Iterable[bytes], state: bytes) -> bytes:
    listed = list(nonces)
    return b"".join([_SNAPSHOT_HEAD.pack(covered_from, len(listed)), *listed, state])


def unpack_snapshot(payload: bytes) -> tuple[int, list[bytes], bytes]:
    """(the offset the nonce list covers from, the nonces of the entries covered, the state's bytes)."""
    covered_from, count = _SNAPSHOT_HEAD.unpack_from(payload)
    start = _SNAPSHOT_HEAD.size
    nonces = [payload[start + 8 * i:start + 8 * i + 8] for i in range(count)]
    return covered_from, nonces, payload[start + 8 * count:]


def pack_updates(items: Iterable[bytes]) -> bytes:
    blobs = list(items)
    return b"".join([_COUNT.pack(len(blobs)), *(_COUNT.pack(len(b)) + b for b in blobs)])


def unpack_updates(payload: bytes) -> list[bytes]:
    (count,) = _COUNT.unpack_from(payload, 0)
    pos = _COUNT.size
    out: list[bytes] = []
    for _ in range(count):
        (length,) = _COUNT.unpack_from(payload, pos)
        pos += _COUNT.size
        out.append(payload[pos:pos + length])
        pos += length
    if pos != len(payload):
        raise StateCorruptError("an updates entry's lengths do not add up")
    return out


def fold_entry(state: S | None, entry: Entry, decode_state: Callable[[bytes], S],
               apply_update: Callable[[S, U], S] | None, decode_update: Callable[[bytes], U],
               has_state: bool | None = None) -> S:
    """The state after ``entry``, given the state before it (``has_state``: whether one was read yet;
    by default, whether ``state`` is not None). A state or snapshot replaces it; updates are decoded and
    applied in order (StateCorruptError if there is no state to apply them to, or no ``apply_update``)."""
    if entry.kind == KIND_STATE:
        return decode_state(entry.payload)
    if entry.kind == KIND_SNAPSHOT:
        return decode_state(unpack_snapshot(entry.payload)[2])
    if not (state is not None if has_state is None else has_state):
        raise StateCorruptError(f"updates at offset {entry.offset} precede any state")
    if apply_update is None:
        raise StateCorruptError(f"updates at offset {entry.offset}, but this synchronizer has no apply_update function")
    for blob in unpack_updates(entry.payload):
        state = apply_update(state, decode_update(blob))  # type: ignore[arg-type]  # a state was read
    return state  # type: ignore[return-value]  # likewise


class Fold(Generic[S, U]):
    """A state rebuilt from a synchronizer segment by a reader that never writes to it: feed it the
    segment's bytes from ``revision`` on, and ``restart`` it at the segment's start offset when its
    revision was truncated away (a compaction's snapshot lies there)."""

    def __init__(self, decode_state: Callable[[bytes], S], apply_update: Callable[[S, U], S],
                 decode_update: Callable[[bytes], U], start: int = 0) -> None:
        self.decode_state = decode_state
        self.apply_update = apply_update
        self.decode_update = decode_update
        self.state: S | None = None
        self.revision = start  # the offset after the last entry folded: where the next read starts
        self._partial = b""

    def restart(self, start: int) -> None:
        """Forget the state and fold again from ``start`` (the segment's start offset)."""
        self.state = None
        self.revision = start
        self._partial = b""

    def feed(self, data: bytes) -> int:
        """Fold the whole entries of ``data`` (the segment's bytes after what was fed before); a trailing
        partial entry waits for the next call. The number of entries folded."""
        buffer = self._partial + data
        entries, used = decode_entries(buffer, self.revision)
        for entry in entries:
            self.state = fold_entry(self.state, entry, self.decode_state, self.apply_update, self.decode_update)
            self.revision = entry.end
        self._partial = buffer[used:]
        return len(entries)

    @property
    def read_to(self) -> int:
        """Where the next read of the segment starts (after a partial entry already fed)."""
        return self.revision + len(self._partial)
