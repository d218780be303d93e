"""``StateSynchronizer``: a state object shared by several processes, kept in one segment (Pravega's
revisioned stream client and state synchronizer).

The state lives in the single segment of a stream with a fixed scaling policy of one segment: the
controller then owns the name, its scope, sealing, deletion and the truncation record (``head_cut``
stays true), and nothing ever splits the segment under the synchronizer. The segment is a sequence of
entries; the **revision** of a member is the segment offset just after the last entry it applied,
which is also where its next entry must land. Every write is an append conditional on that offset
(``expected_offset``), so it lands only if the writer had seen everything before it: an update
computed from a stale state is refused (``BadOffsetError``), the member reads what it missed and
computes again. No update is lost, and every member applies the same entries in the same order.

Entries (their format and how they fold into a state are ``protocol/synchronizer.py``'s, which the
server shares to show a reader group's state)::

    magic:u16  kind:u8  nonce:8 bytes  length:u32  crc32:u32  payload

``STATE`` carries a whole state (the initial one, or an update that returned a new state) and replaces
the local copy; ``UPDATES`` carries a list of serialized updates applied in order with the
synchronizer's ``apply_update``; ``SNAPSHOT`` is a compaction's state (below). The nonce names the
write attempt: after a lost connection the outcome of a conditional append is unknown, and the member
learns it by reading the slot the append aimed at (it holds that nonce or it does not), so an update
is applied exactly once.

**Compaction** writes the current state as a ``SNAPSHOT`` entry at the tail (conditionally, so it is
the exact state there) and truncates the segment before it. The segment's start offset is therefore
always the offset of a ``STATE`` or ``SNAPSHOT`` entry, and a member that starts, or that finds its
revision below the start (``SegmentTruncatedError``), reads from the start and begins with that
snapshot. A snapshot also lists the nonces of the entries it covers back to an offset (the newest
``RECENT_NONCES``): a member whose lost append was truncated away by another member's compaction
learns from that list whether the append is in the snapshot's state, rather than write it again. If
the slot lies before what the list covers, the outcome cannot be known and ``ConnectionLostError``
says so.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import os
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from millrace.client.controller import ControllerClient
from millrace.client.serializers import JsonSerializer, Serializer
from millrace.client.streams import StreamCut
from millrace.protocol import messages as m
from millrace.protocol.contracts import FORMAT_ATTRIBUTE, AttributeUpdate, SegmentFormat
from millrace.protocol.errors import (
    BadOffsetError,
    ConnectionLostError,
    InvalidStreamCutError,
    SegmentTruncatedError,
    StoreError,
)
from millrace.protocol.messages import decode_reply
from millrace.protocol.synchronizer import (
    KIND_SNAPSHOT,
    KIND_STATE,
    KIND_UPDATES,
    Entry,
    StateCorruptError,
    decode_entries,
    encode_entry,
    fold_entry,
    pack_snapshot,
    pack_updates,
    unpack_snapshot,
)
from millrace.protocol.wire import MAX_FRAME_BYTES

S = TypeVar("S")
U = TypeVar("U")
R = TypeVar("R")

RECENT_NONCES = 1024  # nonces a snapshot lists: 8 KiB
READ_BYTES = 1 << 20
ACCEPTED_WAIT_MS = 1000
# An entry travels in one frame with a small JSON header beside it.
MAX_ENTRY_BYTES = MAX_FRAME_BYTES - 64 * 1024


class StateNotInitializedError(StoreError):
    """The synchronizer's segment holds no state yet: call ``initialize`` first."""


class Updates(Generic[U]):
    """What an update function returns to append changes instead of a whole new state: the changes
    are applied, in order, with the synchronizer's ``apply_update`` by every member."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[U]) -> None:
        self.items: tuple[U, ...] = tuple(items)

    def __repr__(self) -> str:
        return f"Updates({list(self.items)!r})"


def claim_synchronizer_format(controller: ControllerClient, segment: str) -> None:
    """Record on the stream's one segment that it holds a synchronizer's entries: the server then takes
    only whole entries appended conditionally there, and no event writer, byte writer or scale (the
    same claim again is answered at once)."""
    controller.call(m.UpdateSegmentAttributes(segment=segment, attributes=(
        AttributeUpdate(FORMAT_ATTRIBUTE, SegmentFormat.SYNCHRONIZER),)), retry=True)


class StateSynchronizer(Generic[S, U]):
    """A local copy of a shared state, its revision, and conditional updates of it.

    ``state`` is the copy as of ``revision``; treat it as read-only (update functions get their own
    deep copy, since a refused attempt must leave no trace). Methods may be called from any thread;
    one lock serialises them, and update functions run under it.
    """

    def __init__(self, controller: ControllerClient, scope: str, stream: str, segment_id: int, segment: str,
                 serializer: Serializer[S], apply_update: Callable[[S, U], S] | None = None,
                 update_serializer: Serializer[U] | None = None) -> None:
        self.controller = controller
        self.scope = scope
        self.stream = stream
        self.segment_id = segment_id
        self.segment = segment
        self.serializer = serializer
        self.apply_update = apply_update
        self.update_serializer: Serializer[U] = update_serializer or JsonSerializer()
        self.conflicts = 0  # conditional appends refused because another member got there first
        self.lost_answers = 0  # updates whose append lost its answer, settled by reading the slot
        self._revision = 0
        self._accepted_length = 0  # a refused append's view of the segment's length
        self._state: S | None = None
        self._initialized = False
        # (offset, nonce) of the newest entries applied, what a snapshot written here lists; those a
        # snapshot carried over stand at the offset its list starts at (all that is read is the oldest)
        self._recent: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=RECENT_NONCES)
        self._lock = threading.RLock()
        self._closed = False

    # -- the local copy ------------------------------------------------------------------------------
    @property
    def revision(self) -> int:
        """The segment offset after the last entry applied: where this member's next write must land."""
        return self._revision

    @property
    def initialized(self) -> bool:
        return self._initialized

    @property
    def state(self) -> S:
        """The state as of ``revision`` (StateNotInitializedError before any state was read)."""
        if not self._initialized:
            raise StateNotInitializedError(f"{self.scope}/{self.stream} holds no state yet")
        return self._state  # type: ignore[return-value]  # set together with _initialized

    def fetch_updates(self) -> int:
        """Read and apply every entry written since ``revision``; the number applied."""
        with self._lock:
            self._check_open()
            return len(self._fetch())

    # -- writes --------------------------------------------------------------------------------------
    def initialize(self, initial: S) -> bool:
        """Write ``initial`` as the state if the segment holds none yet. False if some member had
        already initialized it (then ``state`` is what it wrote, as updated since)."""
        with self._lock:
            self._check_open()
            payload, nonce = self._encode_state(initial), os.urandom(8)
            for attempt in range(3):
                try:
                    landed = self._write_at(0, KIND_STATE, payload, nonce)
                    break
                except ConnectionLostError:
                    # Resend the same entry: only one of the two can land at offset 0, and reading
                    # offset 0 tells whether one of them did.
                    if attempt == 2:
                        raise
            if landed is not None:
                self._apply(landed)
                self._fetch()
                return True
            return any(e.offset == 0 and e.nonce == nonce for e in self._fetch())

    def update(self, fn: Callable[[S], S | Updates[U]]) -> None:
        """Apply ``fn`` to the local state and write what it returns (a new state, or ``Updates``)
        conditionally on ``revision``; if another member wrote first, fetch what was missed and call
        ``fn`` again (so ``fn`` may run more than once and should have no other effects). A lost
        answer is settled by reading after reconnecting; only if the server stays unreachable does
        ConnectionLostError escape, and then whether the update landed is unknown."""
        self.update_with_result(lambda state: (fn(state), None))

    def update_with_result(self, fn: Callable[[S], tuple[S | Updates[U], R]]) -> R:
        """Like ``update``; ``fn`` also returns a result, and the result of the attempt that landed is
        returned (e.g. whether a lease was granted)."""
        with self._lock:
            self._check_open()
            # No read first: the conditional append is the check, so a member that is up to date
            # (the usual case) pays one round trip, and a stale one learns it from the refusal.
            # Attempts whose answer was lost: nonce -> result. At most one of them can have landed
            # (each aimed at a slot this member had not yet seen filled), and reading shows which.
            unknown: dict[bytes, tuple[R, int]] = {}  # nonce -> (result, the slot it aimed at)
            attempts = 0
            while True:
                if not self._initialized:
                    raise StateNotInitializedError(f"{self.scope}/{self.stream} holds no state yet")
                outcome, result = fn(copy.deepcopy(self.state))
                kind, payload = self._encode_outcome(outcome)
                nonce = os.urandom(8)
                slot = self._revision
                try:
                    landed = self._write_at(slot, kind, payload, nonce)
                except ConnectionLostError:
                    unknown[nonce] = (result, slot)
                    self.lost_answers += 1
                else:
                    if landed is not None:
                        self._apply(landed)  # it is exactly the next entry: no need to read it back
                        return result
                    self.conflicts += 1
                for entry in self._fetch():
                    if entry.nonce in unknown:
                        return unknown[entry.nonce][0]
                    if entry.kind == KIND_SNAPSHOT and unknown:
                        settled = _settled_by_snapshot(entry, unknown)
                        if settled is not None:
                            return settled[0]
                attempts += 1
                _backoff(attempts)

    def update_unconditionally(self, outcome: S | Updates[U]) -> None:
        """Write a new state or updates at the tail whatever others wrote meanwhile: for changes that
        do not depend on the state (commutative updates such as increments, or a plain overwrite).
        A lost connection raises ConnectionLostError: whether the write landed is then unknown."""
        with self._lock:
            self._check_open()
            kind, payload = self._encode_outcome(outcome)
            self._append(encode_entry(kind, os.urandom(8), payload), None)
            self._fetch()

    def compact(self) -> int:
        """Write the current state as a snapshot at the tail and truncate the segment before it, so a
        member that starts later begins there. Safe against concurrent compactions and updates (the
        snapshot is conditional, and truncation never moves back). Returns the snapshot's offset."""
        with self._lock:
            self._check_open()
            while True:
                if not self._initialized:
                    raise StateNotInitializedError(f"{self.scope}/{self.stream} holds no state yet")
                at = self._revision
                recent = list(self._recent)
                snapshot = pack_snapshot(recent[0][0] if recent else at, (nonce for _, nonce in recent),
                                         self._encode_state(self.state))
                try:
                    landed = self._write_at(at, KIND_SNAPSHOT, snapshot)
                except ConnectionLostError:
                    # Unknown outcome: a snapshot that lands later anyway is harmless (it is the
                    # exact state where it lies); only truncate at one known to be there.
                    landed = None
                if landed is not None:
                    self._apply(landed)
                    break
                self.conflicts += 1
                self._fetch()
            # InvalidStreamCutError: a concurrent compaction truncated further already (the head
            # never moves back), which is as good.
            with contextlib.suppress(InvalidStreamCutError):
                self.controller.truncate_stream(StreamCut(self.scope, self.stream, {self.segment_id: at}))
            self._fetch()
            return at

    # -- lifetime ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop using the synchronizer (the manager's connections stay open for its other users)."""
        self._closed = True

    def __enter__(self) -> StateSynchronizer[S, U]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StateSynchronizer({self.scope}/{self.stream}, revision={self._revision})"

    # -- internals -----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self!r} is closed")

    def _encode_state(self, state: S) -> bytes:
        return self.serializer.serialize(state)

    def _encode_outcome(self, outcome: S | Updates[U]) -> tuple[int, bytes]:
        if isinstance(outcome, Updates):
            if self.apply_update is None:
                raise TypeError("Updates need the synchronizer's apply_update function")
            return KIND_UPDATES, pack_updates(self.update_serializer.serialize(u) for u in outcome.items)
        return KIND_STATE, self._encode_state(outcome)

    def _write_at(self, offset: int, kind: int, payload: bytes, nonce: bytes | None = None) -> Entry | None:
        """Append an entry if the segment's length is ``offset``: the entry if it landed, None if the
        segment had moved on. ConnectionLostError leaves the outcome to the caller's next read."""
        nonce = nonce or os.urandom(8)
        data = encode_entry(kind, nonce, payload)
        try:
            self._append(data, offset)
        except BadOffsetError as exc:
            # The refusal is decided on the length the store has accepted, reads see only what is
            # durable: remember how far the next read must reach to see what got in first.
            self._accepted_length = max(self._accepted_length, exc.actual)
            return None
        return Entry(offset, offset + len(data), kind, nonce, payload)

    def _append(self, data: bytes, expected_offset: int | None) -> None:
        if len(data) > MAX_ENTRY_BYTES:
            raise ValueError(f"an entry of {len(data)} bytes exceeds the {MAX_ENTRY_BYTES}-byte limit")
        # Never resent by the controller client: a lost answer is resolved by reading (see callers).
        self.controller.call(m.AppendToSegment(segment=self.segment, expected_offset=expected_offset), data)

    def _fetch(self) -> list[Entry]:
        """Read from ``revision`` to the tail and apply every whole entry; the entries applied. A
        revision below the segment's start (truncated away) starts over from the snapshot there."""
        applied: list[Entry] = []
        buffer = b""
        offset = self._revision
        wait_ms = 0
        give_up = time.monotonic() + ACCEPTED_WAIT_MS / 1000 * 5
        while True:
            try:
                reply, data = self.controller.call(
                    m.ReadSegment(segment=self.segment, offset=offset, max_length=READ_BYTES, wait_ms=wait_ms),
                    retry=True,
                )
            except SegmentTruncatedError:
                offset = self._restart_from_start()
                buffer = b""
                continue
            if not data:
                if buffer:
                    raise StateCorruptError(f"the segment ends inside an entry at {self._revision}")
                if offset >= self._accepted_length:
                    return applied
                if time.monotonic() > give_up:
                    # That append never became durable (its container failed): stop expecting it.
                    self._accepted_length = offset
                    return applied
                # An append that refused ours is accepted but not yet durable: wait for it at the
                # tail (it may yet fail, hence the bound) rather than decide again on a stale state.
                wait_ms = ACCEPTED_WAIT_MS
                continue
            offset = decode_reply(m.ReadReply, reply).offset + len(data)
            wait_ms = 0
            buffer += data
            entries, used = decode_entries(buffer, self._revision)
            buffer = buffer[used:]
            for entry in entries:
                self._apply(entry)
                applied.append(entry)

    def _restart_from_start(self) -> int:
        """Drop the local copy and point at the segment's start, where a snapshot lies."""
        start = self.controller.segment_info(self.segment).start_offset
        self._revision = start
        self._state = None
        self._initialized = False
        return start

    def _apply(self, entry: Entry) -> None:
        self._state = fold_entry(self._state, entry, self.serializer.deserialize, self.apply_update,
                                 self.update_serializer.deserialize, has_state=self._initialized)
        self._initialized = True
        if entry.kind == KIND_SNAPSHOT:
            covered_from, nonces, _ = unpack_snapshot(entry.payload)
            self._recent.clear()
            self._recent.extend((covered_from, nonce) for nonce in nonces)
        self._recent.append((entry.offset, entry.nonce))
        self._revision = entry.end


def _settled_by_snapshot(entry: Entry, unknown: dict[bytes, tuple[R, int]]) -> tuple[R] | None:
    """For attempts whose answer was lost: (the result of the one a snapshot's state holds,), None when
    it holds none of them; ConnectionLostError when an attempt's slot lies before what the snapshot
    lists (its entry was compacted away unlisted, so whether it landed cannot be known)."""
    covered_from, nonces, _ = unpack_snapshot(entry.payload)
    listed = set(nonces)
    for nonce, (result, _slot) in unknown.items():
        if nonce in listed:
            return (result,)
    if any(slot < covered_from for _, slot in unknown.values()):
        raise ConnectionLostError("an update's answer was lost and its slot was compacted away before it "
                                  "could be read: whether it was applied is unknown")
    return None


def _backoff(attempts: int) -> None:
    # Members refused together would collide again together: spread their retries a little.
    time.sleep(random.uniform(0, 0.002 * min(attempts, 10)))
