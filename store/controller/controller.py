"""The controller: scopes, streams, their segments over time, kept entirely in table segments.

Every change to a stream is a conditional update of its record in ``_system/_tables/streams``, so
two controllers (or threads) changing one stream serialize: a loser re-reads and re-applies its
change, or fails when its caller asked for a specific record version. Multi-step operations
(create, seal, delete) first record their intent as a state (CREATING, SEALING, DELETING), then do
the segment work (idempotently), then record the outcome; repeating an interrupted call finishes it.
All methods block: call them from worker threads.
"""

from __future__ import annotations

import bisect
import contextlib
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from store.controller.errors import InvalidStreamCutError, StreamNotSealedError, StreamSealedError
from store.controller.keys import key_hash
from store.controller.names import (
    SYSTEM_SCOPE,
    parse_segment_name,
    segment_epoch,
    segment_id,
    segment_name,
    validate_name,
)
from store.controller.records import (
    EpochRecord,
    ScopeRecord,
    ScopeState,
    SegmentRange,
    StreamConfiguration,
    StreamRecord,
    StreamState,
    equal_split,
)
from store.errors import (
    OffsetOutOfRangeError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    StreamExistsError,
    StreamNotFoundError,
    TableKeyNotFoundError,
    TableKeyVersionMismatchError,
)
from store.tables import NOT_EXISTS, TableStore

SCOPES_TABLE = f"{SYSTEM_SCOPE}/_tables/scopes"
STREAMS_TABLE = f"{SYSTEM_SCOPE}/_tables/streams"
EPOCHS_TABLE = f"{SYSTEM_SCOPE}/_tables/epochs"
SYSTEM_TABLES = (SCOPES_TABLE, STREAMS_TABLE, EPOCHS_TABLE)

_CONDITIONAL = (TableKeyVersionMismatchError, TableKeyNotFoundError)


@dataclass(frozen=True)
class StreamInfo:
    scope: str
    stream: str
    state: StreamState
    config: StreamConfiguration
    created_ms: int
    current_epoch: int
    truncation: dict[int, int]  # the stream cut the stream was last truncated at
    version: int  # of the stream record: pass to update_stream for a conditional update


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _stream_key(scope: str, stream: str) -> bytes:
    return f"{scope}/{stream}".encode()


def _epoch_prefix(scope: str, stream: str) -> bytes:
    return f"{scope}/{stream}/".encode()


def _epoch_key(scope: str, stream: str, epoch: int) -> bytes:
    # Big-endian so the table's byte order is epoch order.
    return _epoch_prefix(scope, stream) + struct.pack(">I", epoch)


class Controller:
    def __init__(self, segment_store, table_store: TableStore) -> None:
        self.store = segment_store
        self.tables = table_store
        self.timeout = table_store.config.timeout  # for each segment-store call
        for table in SYSTEM_TABLES:
            if not table_store.exists(table):
                # Another controller may create it first.
                with contextlib.suppress(SegmentExistsError):
                    table_store.create_table(table)

    # -- scopes ------------------------------------------------------------------------------------
    def create_scope(self, scope: str) -> bool:
        """Create ``scope``; False if it already exists."""
        validate_name("scope", scope)
        if scope == SYSTEM_SCOPE:
            raise ValueError(f"scope {SYSTEM_SCOPE} is reserved")
        record = ScopeRecord(ScopeState.ACTIVE, _now_ms())
        try:
            self.tables.put(SCOPES_TABLE, [(scope.encode(), record.encode(), NOT_EXISTS)])
        except TableKeyVersionMismatchError:
            return False
        return True

    def scope_exists(self, scope: str) -> bool:
        found = self._scope(scope)
        return found is not None and found[0].state == ScopeState.ACTIVE

    def list_scopes(self) -> list[str]:
        return [
            e.key.decode()
            for e in self.tables.entries(SCOPES_TABLE)
            if ScopeRecord.decode(e.value).state == ScopeState.ACTIVE
        ]

    def delete_scope(self, scope: str) -> None:
        """Delete an empty scope (ScopeNotEmptyError while it has streams)."""
        key = scope.encode()
        while True:
            found = self._scope(scope)
            if found is None:
                raise ScopeNotFoundError(scope)
            record, version = found
            if self._has_streams(scope):
                raise ScopeNotEmptyError(scope)
            # Mark first, then look again: a create_stream that got its record in before the mark is
            # seen by the second look; one that comes after sees the mark and backs off.
            try:
                (marked,) = self.tables.put(
                    SCOPES_TABLE, [(key, replace(record, state=ScopeState.DELETING).encode(), version)]
                )
            except _CONDITIONAL:
                continue
            if self._has_streams(scope):
                # If someone else moved the record on meanwhile, their outcome stands.
                with contextlib.suppress(*_CONDITIONAL):
                    self.tables.put(
                        SCOPES_TABLE, [(key, replace(record, state=ScopeState.ACTIVE).encode(), marked)]
                    )
                raise ScopeNotEmptyError(scope)
            try:
                self.tables.remove(SCOPES_TABLE, [(key, marked)])
                return
            except _CONDITIONAL:
                continue

    def list_streams(self, scope: str) -> list[str]:
        if not self.scope_exists(scope):
            raise ScopeNotFoundError(scope)
        prefix = f"{scope}/".encode()
        return [
            e.key[len(prefix) :].decode()
            for e in self.tables.entries(STREAMS_TABLE, prefix=prefix)
            if StreamRecord.decode(e.value).state != StreamState.CREATING
        ]

    # -- stream lifecycle --------------------------------------------------------------------------
    def create_stream(self, scope: str, stream: str, config: StreamConfiguration | None = None) -> StreamInfo:
        """Create a stream of ``config.initial_segments`` segments splitting [0, 1) equally.
        StreamExistsError if it exists. Repeating a create that was interrupted finishes it (with
        the configuration it was started with)."""
        validate_name("stream", stream)
        config = config or StreamConfiguration()
        config.validate()
        if not self.scope_exists(scope):
            raise ScopeNotFoundError(scope)
        key = _stream_key(scope, stream)
        record = StreamRecord(StreamState.CREATING, config, _now_ms(), 0, config.initial_segments)
        try:
            (version,) = self.tables.put(STREAMS_TABLE, [(key, record.encode(), NOT_EXISTS)])
        except TableKeyVersionMismatchError:
            found = self._record(scope, stream)
            if found is None or found[0].state != StreamState.CREATING:
                raise StreamExistsError(f"{scope}/{stream}") from None
            record, version = found
        if not self.scope_exists(scope):
            # delete_scope marked the scope after our first look: withdraw.
            with contextlib.suppress(*_CONDITIONAL):
                self.tables.remove(STREAMS_TABLE, [(key, version)])
            raise ScopeNotFoundError(scope)

        # Deterministic from the record, so a resumed create writes the same epoch 0.
        ranges = equal_split(record.config.initial_segments)
        epoch0 = EpochRecord(
            0, record.created_ms, tuple((segment_id(i, 0), lo, hi) for i, (lo, hi) in enumerate(ranges))
        )
        self.tables.put(EPOCHS_TABLE, [(_epoch_key(scope, stream, 0), epoch0.encode())])
        for sid, _, _ in epoch0.segments:
            with contextlib.suppress(SegmentExistsError):
                self.store.create_segment(segment_name(scope, stream, sid)).result(self.timeout)
        self._mutate(
            scope,
            stream,
            lambda r: replace(r, state=StreamState.ACTIVE) if r.state == StreamState.CREATING else r,
            include_creating=True,
        )
        return self.get_stream(scope, stream)

    def get_stream(self, scope: str, stream: str) -> StreamInfo:
        record, version = self._visible(scope, stream)
        return StreamInfo(
            scope,
            stream,
            record.state,
            record.config,
            record.created_ms,
            record.current_epoch,
            dict(record.truncation),
            version,
        )

    def stream_exists(self, scope: str, stream: str) -> bool:
        try:
            self._visible(scope, stream)
        except StreamNotFoundError:
            return False
        return True

    def update_stream(
        self, scope: str, stream: str, config: StreamConfiguration, expected_version: int | None = None
    ) -> int:
        """Replace the stream's configuration; returns the record's new version. With
        ``expected_version``, fails with TableKeyVersionMismatchError unless the record is still at
        that version. ``initial_segments`` is kept as data: changing it does not rescale."""
        config.validate()

        def change(r: StreamRecord) -> StreamRecord:
            if r.state in (StreamState.SEALING, StreamState.SEALED, StreamState.DELETING):
                raise StreamSealedError(f"{scope}/{stream}")
            return replace(r, config=config)

        return self._mutate(scope, stream, change, expected_version=expected_version)[1]

    def seal_stream(self, scope: str, stream: str) -> None:
        """Seal every open segment; the stream accepts no more writes. Idempotent."""

        def begin(r: StreamRecord) -> StreamRecord:
            return replace(r, state=StreamState.SEALING) if r.state == StreamState.ACTIVE else r

        record, _ = self._mutate(scope, stream, begin)
        if record.state != StreamState.SEALING:
            return
        for segment in self.get_current_segments(scope, stream):
            with contextlib.suppress(SegmentSealedError):
                self.store.seal(segment.name).result(self.timeout)
        self._mutate(
            scope,
            stream,
            lambda r: replace(r, state=StreamState.SEALED) if r.state == StreamState.SEALING else r,
        )

    def delete_stream(self, scope: str, stream: str) -> None:
        """Delete a sealed stream and all its segments (StreamNotSealedError otherwise)."""

        def begin(r: StreamRecord) -> StreamRecord:
            if r.state not in (StreamState.SEALED, StreamState.DELETING):
                raise StreamNotSealedError(f"{scope}/{stream}")
            return replace(r, state=StreamState.DELETING)

        self._mutate(scope, stream, begin)
        # Every epoch record under the prefix, including one an interrupted scale may have left.
        epochs = list(self.tables.entries(EPOCHS_TABLE, prefix=_epoch_prefix(scope, stream)))
        segments = {sid for e in epochs for sid, _, _ in EpochRecord.decode(e.value).segments}
        for sid in sorted(segments):
            with contextlib.suppress(SegmentNotFoundError):
                self.store.delete(segment_name(scope, stream, sid)).result(self.timeout)
        if epochs:
            self.tables.remove(EPOCHS_TABLE, [e.key for e in epochs])
        self.tables.remove(STREAMS_TABLE, [_stream_key(scope, stream)])

    # -- segments ----------------------------------------------------------------------------------
    def get_epoch(self, scope: str, stream: str, epoch: int) -> EpochRecord:
        (entry,) = self.tables.get(EPOCHS_TABLE, [_epoch_key(scope, stream, epoch)])
        if entry is None:
            raise StreamNotFoundError(f"{scope}/{stream} has no epoch {epoch}")
        return EpochRecord.decode(entry.value)

    def get_epoch_history(self, scope: str, stream: str) -> list[EpochRecord]:
        """Every epoch up to the current one, oldest first."""
        record, _ = self._visible(scope, stream)
        entries = self.tables.entries(EPOCHS_TABLE, prefix=_epoch_prefix(scope, stream))
        history = [EpochRecord.decode(e.value) for e in entries]
        return [e for e in history if e.epoch <= record.current_epoch]

    def get_current_segments(self, scope: str, stream: str) -> list[SegmentRange]:
        """The segments of the current epoch, by key range. For a sealed stream: its last ones."""
        record, _ = self._visible(scope, stream)
        return self.get_epoch(scope, stream, record.current_epoch).ranges(scope, stream)

    def get_segment_for_key(self, scope: str, stream: str, routing_key: str) -> SegmentRange:
        """The current segment owning ``key_hash(routing_key)``."""
        return self.get_segment_for_hash(scope, stream, key_hash(routing_key))

    def get_segment_for_hash(self, scope: str, stream: str, key: float) -> SegmentRange:
        if not 0.0 <= key < 1.0:
            raise ValueError(f"key {key} outside [0, 1)")
        segments = self.get_current_segments(scope, stream)
        i = bisect.bisect_right([s.key_start for s in segments], key) - 1
        return segments[i]

    def truncate_stream(self, scope: str, stream: str, stream_cut: Mapping[int | str, int]) -> None:
        """Drop the data before ``stream_cut`` (segment id or name -> offset): each named segment
        is truncated at its offset and every segment wholly before the cut is deleted."""
        record, _ = self._visible(scope, stream)
        if record.state == StreamState.DELETING:
            raise StreamNotFoundError(f"{scope}/{stream} is being deleted")
        known = {
            r.segment_id: r for e in self.get_epoch_history(scope, stream) for r in e.ranges(scope, stream)
        }
        cut = self._normalize_cut(scope, stream, stream_cut, known)

        def change(r: StreamRecord) -> StreamRecord:
            # Against the record being replaced, so racing truncations cannot move the head back.
            for sid, offset in cut.items():
                for old, old_offset in r.truncation.items():
                    if sid == old and offset < old_offset:
                        raise InvalidStreamCutError(f"segment {sid}: offset {offset} is before {old_offset}")
                    if (
                        old in known
                        and known[sid].overlaps(known[old])
                        and segment_epoch(sid) < segment_epoch(old)
                    ):
                        raise InvalidStreamCutError(f"segment {sid} precedes the stream's head")
            return replace(r, truncation=cut)

        self._mutate(scope, stream, change)
        for sid, offset in cut.items():
            name = segment_name(scope, stream, sid)
            if self.store.get_info(name).start_offset < offset:
                # A concurrent truncation may have gone further.
                with contextlib.suppress(OffsetOutOfRangeError):
                    self.store.truncate(name, offset).result(self.timeout)
        # Overlapping an older-created segment means following it: that one lies wholly before.
        before = [
            s
            for s in known
            if s not in cut
            and any(known[s].overlaps(known[c]) and segment_epoch(s) < segment_epoch(c) for c in cut)
        ]
        for sid in before:
            with contextlib.suppress(SegmentNotFoundError):
                self.store.delete(segment_name(scope, stream, sid)).result(self.timeout)

    def _normalize_cut(
        self, scope: str, stream: str, stream_cut: Mapping[int | str, int], known: dict[int, SegmentRange]
    ) -> dict[int, int]:
        cut: dict[int, int] = {}
        for segment, offset in stream_cut.items():
            if isinstance(segment, str):
                s_scope, s_stream, sid = parse_segment_name(segment)
                if (s_scope, s_stream) != (scope, stream):
                    raise InvalidStreamCutError(f"segment {segment} is not in {scope}/{stream}")
            else:
                sid = segment
            if sid not in known:
                raise InvalidStreamCutError(f"{scope}/{stream} has no segment {sid}")
            if offset < 0:
                raise InvalidStreamCutError(f"negative offset {offset} for segment {sid}")
            cut[sid] = offset
        position = 0.0
        for r in sorted((known[s] for s in cut), key=lambda r: r.key_start):
            if r.key_start != position:
                raise InvalidStreamCutError(
                    f"stream cut does not cover the key space exactly once at {position}"
                )
            position = r.key_end
        if position != 1.0:
            raise InvalidStreamCutError(f"stream cut stops at key {position}, not 1.0")
        for sid, offset in cut.items():
            try:
                info = self.store.get_info(segment_name(scope, stream, sid))
            except SegmentNotFoundError:
                raise InvalidStreamCutError(f"segment {sid} was already truncated away") from None
            if offset > info.length:
                raise InvalidStreamCutError(
                    f"segment {sid}: offset {offset} is past its length {info.length}"
                )
        return cut

    # -- records -----------------------------------------------------------------------------------
    def _scope(self, scope: str) -> tuple[ScopeRecord, int] | None:
        (entry,) = self.tables.get(SCOPES_TABLE, [scope.encode()])
        return None if entry is None else (ScopeRecord.decode(entry.value), entry.version)

    def _has_streams(self, scope: str) -> bool:
        return bool(self.tables.iterate_keys(STREAMS_TABLE, limit=1, prefix=f"{scope}/".encode()).items)

    def _record(self, scope: str, stream: str) -> tuple[StreamRecord, int] | None:
        (entry,) = self.tables.get(STREAMS_TABLE, [_stream_key(scope, stream)])
        return None if entry is None else (StreamRecord.decode(entry.value), entry.version)

    def _visible(self, scope: str, stream: str) -> tuple[StreamRecord, int]:
        """The record of a stream that exists for callers: a stream still being created does not."""
        found = self._record(scope, stream)
        if found is None or found[0].state == StreamState.CREATING:
            raise StreamNotFoundError(f"{scope}/{stream}")
        return found

    def _mutate(
        self,
        scope: str,
        stream: str,
        change: Callable[[StreamRecord], StreamRecord],
        expected_version: int | None = None,
        include_creating: bool = False,
    ) -> tuple[StreamRecord, int]:
        """Read-change-conditionally-write the stream record until it sticks; returns the record
        and its version. ``change`` may raise to refuse; returning the record unchanged writes
        nothing."""
        key = _stream_key(scope, stream)
        while True:
            found = self._record(scope, stream) if include_creating else self._visible(scope, stream)
            if found is None:
                raise StreamNotFoundError(f"{scope}/{stream}")
            record, version = found
            if expected_version is not None and version != expected_version:
                raise TableKeyVersionMismatchError(
                    f"{scope}/{stream} is at version {version}, expected {expected_version}"
                )
            updated = change(record)
            if updated == record:
                return record, version
            try:
                (new_version,) = self.tables.put(STREAMS_TABLE, [(key, updated.encode(), version)])
            except TableKeyNotFoundError:
                raise StreamNotFoundError(f"{scope}/{stream}") from None
            except TableKeyVersionMismatchError:
                if expected_version is not None:
                    raise
                continue
            return updated, new_version
