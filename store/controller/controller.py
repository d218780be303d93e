"""The controller: scopes, streams, their segments over time, kept entirely in table segments.

Every change to a stream is a conditional update of its record in ``_system/_tables/streams``, so
two controllers (or threads) changing one stream serialize: a loser re-reads and re-applies its
change, or fails when its caller asked for a specific record version. Multi-step operations
(create, seal, delete, scale) first record their intent as a state (CREATING, SEALING, DELETING,
SCALING), then do the segment work (idempotently), then record the outcome; repeating an
interrupted call finishes it.

Scaling (Pravega's protocol): record SCALING with the whole PendingScale (new epoch, sealed ids,
successor ids and ranges, reason) in one conditional update, so of two concurrent scales exactly
one gets in and the other gets ScaleConflictError; write the new epoch record (invisible until the
stream names it current); create the successors; let the caller switch writers (``before_seal``);
seal the predecessors; make the new epoch current. A scale never rolls back: once recorded, any
retry of it, ``complete_scale`` or ``seal_stream`` rolls it forward.
All methods block: call them from worker threads.
"""

from __future__ import annotations

import bisect
import contextlib
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from millrace.store.contracts import SegmentService
from millrace.store.controller.errors import (
    InvalidScaleError,
    InvalidStreamCutError,
    ScaleConflictError,
    StreamNotSealedError,
    StreamSealedError,
)
from millrace.store.controller.keys import key_hash
from millrace.store.controller.names import (
    MARK_STREAM_PREFIX,
    SYSTEM_SCOPE,
    parse_segment_name,
    segment_epoch,
    segment_id,
    segment_name,
    validate_name,
)
from millrace.store.controller.records import (
    EpochRecord,
    PendingScale,
    ScaleReason,
    ScopeRecord,
    ScopeState,
    SegmentRange,
    StreamConfiguration,
    StreamRecord,
    StreamState,
    equal_split,
)
from millrace.store.controller.scaling import (
    Range,
    next_epoch,
    normalize_ranges,
    plan_scale,
    split_points_ranges,
    validate_scale,
)
from millrace.store.errors import (
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
from millrace.store.tables import NOT_EXISTS, TableStore

SCOPES_TABLE = f"{SYSTEM_SCOPE}/_tables/scopes"
STREAMS_TABLE = f"{SYSTEM_SCOPE}/_tables/streams"
EPOCHS_TABLE = f"{SYSTEM_SCOPE}/_tables/epochs"
# Key-value tables' records (``kvtables.py`` keeps them): named here so that a scope holding tables
# is not empty.
KV_TABLES_TABLE = f"{SYSTEM_SCOPE}/_tables/kv_tables"
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
    pending_scale: PendingScale | None = None  # while state is SCALING


BeforeSeal = Callable[[list[SegmentRange]], None]


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
    def __init__(self, segment_store: SegmentService, table_store: TableStore) -> None:
        self.store = segment_store
        self.tables = table_store
        self.timeout = table_store.config.timeout  # for each segment-store call
        # The cut each stream's segments were last truncated at by this controller, all of them. The
        # record names a cut before its segments are truncated, so a record's cut missing here may be
        # one a failure (this process's, or a predecessor's) left half done.
        self._truncated: dict[tuple[str, str], dict[int, int]] = {}
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
        """Delete an empty scope (ScopeNotEmptyError while it has streams or key-value tables)."""
        key = scope.encode()
        while True:
            found = self._scope(scope)
            if found is None:
                raise ScopeNotFoundError(scope)
            record, version = found
            if self._holds_anything(scope):
                raise ScopeNotEmptyError(scope)
            # Mark first, then look again: a create_stream that got its record in before the mark is
            # seen by the second look; one that comes after sees the mark and backs off.
            try:
                (marked,) = self.tables.put(
                    SCOPES_TABLE, [(key, replace(record, state=ScopeState.DELETING).encode(), version)]
                )
            except _CONDITIONAL:
                continue
            if self._holds_anything(scope):
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

    def list_streams(self, scope: str, tag: str | None = None) -> list[str]:
        """The streams of ``scope``; with ``tag``, only those whose configuration carries it."""
        if not self.scope_exists(scope):
            raise ScopeNotFoundError(scope)
        prefix = f"{scope}/".encode()
        out = []
        for e in self.tables.entries(STREAMS_TABLE, prefix=prefix):
            record = StreamRecord.decode(e.value)
            if record.state != StreamState.CREATING and (tag is None or tag in record.config.tags):
                out.append(e.key[len(prefix) :].decode())
        return out

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
            record.scale,
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
                raise StreamSealedError(f"{scope}/{stream} is {r.state.name.lower()}: its configuration no longer changes")
            return replace(r, config=config)

        return self._mutate(scope, stream, change, expected_version=expected_version)[1]

    def seal_stream(self, scope: str, stream: str) -> None:
        """Seal every open segment; the stream accepts no more writes. Idempotent."""

        def begin(r: StreamRecord) -> StreamRecord:
            return replace(r, state=StreamState.SEALING) if r.state == StreamState.ACTIVE else r

        while True:
            record, _ = self._mutate(scope, stream, begin)
            if record.state != StreamState.SCALING:
                break
            # A scale in progress finishes first (scales only roll forward); then seal its outcome.
            self.complete_scale(scope, stream)
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
        self._truncated.pop((scope, stream), None)
        if not stream.startswith(MARK_STREAM_PREFIX):
            self._delete_mark_stream(scope, MARK_STREAM_PREFIX + stream)

    def _delete_mark_stream(self, scope: str, mark: str) -> None:
        """Delete a stream's watermark companion, if its writers made one: it is the stream's, and left
        behind it would keep the scope from being deleted."""
        try:
            self.seal_stream(scope, mark)
            self.delete_stream(scope, mark)
        except StreamNotFoundError:
            pass

    # -- scaling -----------------------------------------------------------------------------------
    def scale_stream(
        self,
        scope: str,
        stream: str,
        seal: list[int],
        new_ranges: list[tuple[float, float]],
        reason: str = ScaleReason.MANUAL,
        expected_epoch: int | None = None,
        before_seal: BeforeSeal | None = None,
    ) -> EpochRecord:
        """Seal the adjacent open segments ``seal`` and replace them by new segments owning
        ``new_ranges``, which must cover the sealed union exactly once (boundaries compared as
        exact floats). Returns the new epoch's record.

        ``before_seal(successors)`` runs once the successors exist and before any predecessor is
        sealed: the place to move writers over. If it (or anything after the scale was recorded)
        raises, the stream stays SCALING and the same call, ``complete_scale`` or ``seal_stream``
        finishes it later. A repeated call of a scale that already completed returns its epoch.

        ScaleConflictError: another scale is in progress, or won the race, or the stream is no
        longer at ``expected_epoch``. InvalidScaleError: the request itself is malformed."""
        if not reason:
            raise InvalidScaleError("a scale needs a reason")
        seal_ids = [int(sid) for sid in seal]
        ranges = normalize_ranges(new_ranges)
        key = _stream_key(scope, stream)
        while True:
            record, version = self._visible(scope, stream)
            if record.state == StreamState.SCALING and record.scale is not None:
                if _same_scale(record.scale, seal_ids, ranges) and expected_epoch in (None, record.scale.epoch - 1):
                    pending = record.scale
                    break
                raise ScaleConflictError(
                    f"{scope}/{stream} is scaling to epoch {record.scale.epoch} "
                    f"(sealing {list(record.scale.sealed)}); re-read and try again"
                )
            if record.state != StreamState.ACTIVE:
                raise StreamSealedError(f"{scope}/{stream} is {record.state.name}")
            current = self.get_epoch(scope, stream, record.current_epoch)
            open_ids = {sid for sid, _, _ in current.segments}
            stale = expected_epoch is not None and expected_epoch != record.current_epoch
            if stale or not set(seal_ids) <= open_ids:
                done = self._completed_scale(scope, stream, record.current_epoch, seal_ids, ranges)
                if done is not None:
                    return done
                if stale:
                    raise ScaleConflictError(
                        f"{scope}/{stream} is at epoch {record.current_epoch}, expected {expected_epoch}"
                    )
                self._raise_not_open(scope, stream, record.current_epoch, seal_ids, open_ids)
            pending = plan_scale(current, seal_ids, ranges, record.next_segment_number, reason, _now_ms())
            updated = replace(
                record,
                state=StreamState.SCALING,
                scale=pending,
                next_segment_number=record.next_segment_number + len(ranges),
            )
            try:
                self.tables.put(STREAMS_TABLE, [(key, updated.encode(), version)])
            except TableKeyNotFoundError:
                raise StreamNotFoundError(f"{scope}/{stream}") from None
            except TableKeyVersionMismatchError:
                continue  # the record moved: decide again against what is there now
            break
        return self._finish_scale(scope, stream, pending, before_seal)

    def split_segment(
        self,
        scope: str,
        stream: str,
        segment_id: int,
        at: list[float],
        reason: str = ScaleReason.MANUAL,
        expected_epoch: int | None = None,
        before_seal: BeforeSeal | None = None,
    ) -> EpochRecord:
        """Split an open segment at the key points ``at`` (strictly inside its range)."""
        r = self._segment_range(scope, stream, segment_id)
        ranges = split_points_ranges(r.key_start, r.key_end, at)
        return self.scale_stream(scope, stream, [segment_id], ranges, reason, expected_epoch, before_seal)

    def merge_segments(
        self,
        scope: str,
        stream: str,
        segment_ids: list[int],
        reason: str = ScaleReason.MANUAL,
        expected_epoch: int | None = None,
        before_seal: BeforeSeal | None = None,
    ) -> EpochRecord:
        """Replace two or more adjacent open segments by one owning their union."""
        if len(set(segment_ids)) < 2:
            raise InvalidScaleError("a merge needs at least two distinct segments")
        found = [self._segment_range(scope, stream, sid) for sid in segment_ids]
        merged = (min(r.key_start for r in found), max(r.key_end for r in found))
        return self.scale_stream(scope, stream, list(segment_ids), [merged], reason, expected_epoch, before_seal)

    def complete_scale(self, scope: str, stream: str, before_seal: BeforeSeal | None = None) -> EpochRecord | None:
        """Roll forward the scale the stream is in, if any (after a crash or a failed
        ``before_seal``); returns the epoch it made, None when no scale was pending."""
        record, _ = self._visible(scope, stream)
        if record.state != StreamState.SCALING or record.scale is None:
            return None
        return self._finish_scale(scope, stream, record.scale, before_seal)

    def get_successors(self, scope: str, stream: str, segment: int) -> list[SegmentRange]:
        """The segments that replaced ``segment`` when it was sealed by a scale, by key range;
        [] while it is open (or when a stream seal, not a scale, sealed it)."""
        history = self.get_epoch_history(scope, stream)
        self._require_known(scope, stream, segment, history)
        for e in history:
            successors = {s for p, s in e.edges if p == segment}
            if successors:
                return [r for r in e.ranges(scope, stream) if r.segment_id in successors]
        return []

    def get_predecessors(self, scope: str, stream: str, segment: int) -> list[SegmentRange]:
        """The segments ``segment`` replaced, by key range; [] for a segment of epoch 0."""
        history = self.get_epoch_history(scope, stream)
        self._require_known(scope, stream, segment, history)
        created = segment_epoch(segment)
        if created == 0:
            return []
        predecessors = {p for p, s in history[created].edges if s == segment}
        return [r for r in history[created - 1].ranges(scope, stream) if r.segment_id in predecessors]

    def _finish_scale(
        self, scope: str, stream: str, pending: PendingScale, before_seal: BeforeSeal | None
    ) -> EpochRecord:
        """Every step is idempotent, so any number of callers may run this for the same scale."""
        new = next_epoch(self.get_epoch(scope, stream, pending.epoch - 1), pending)
        # Written before the segments exist so delete_stream can always find every segment; it is
        # invisible until the stream record names its epoch, and identical on every retry.
        self.tables.put(EPOCHS_TABLE, [(_epoch_key(scope, stream, new.epoch), new.encode())])
        created = set(new.created_ids)
        successors = [r for r in new.ranges(scope, stream) if r.segment_id in created]
        for r in successors:
            with contextlib.suppress(SegmentExistsError):
                self.store.create_segment(r.name).result(self.timeout)
        if before_seal is not None:
            before_seal(successors)
        for sid in pending.sealed:
            self.store.seal(segment_name(scope, stream, sid)).result(self.timeout)

        def commit(r: StreamRecord) -> StreamRecord:
            if r.state == StreamState.SCALING and r.scale == pending:
                return replace(r, state=StreamState.ACTIVE, current_epoch=pending.epoch, scale=None)
            if r.current_epoch >= pending.epoch:
                return r  # another caller finished this very scale
            raise ScaleConflictError(f"{scope}/{stream}: scale to epoch {pending.epoch} is no longer pending")

        self._mutate(scope, stream, commit)
        return new

    def _completed_scale(
        self, scope: str, stream: str, current_epoch: int, seal: list[int], ranges: list[Range]
    ) -> EpochRecord | None:
        """The committed epoch that made exactly this scale, if any (for idempotent retries)."""
        for epoch in range(current_epoch, 0, -1):
            e = self.get_epoch(scope, stream, epoch)
            created = [(lo, hi) for sid, lo, hi in e.segments if segment_epoch(sid) == epoch]
            if set(e.sealed_ids) == set(seal) and created == ranges:
                return e
            if epoch <= current_epoch - 64:
                break  # retries come soon after; do not read a long history on every conflict
        return None

    def _raise_not_open(
        self, scope: str, stream: str, current_epoch: int, seal: list[int], open_ids: set[int]
    ) -> None:
        history = self.get_epoch_history(scope, stream)
        known = {sid for e in history for sid, _, _ in e.segments}
        unknown = [sid for sid in seal if sid not in known]
        if unknown:
            raise InvalidScaleError(f"{scope}/{stream} has no segments {unknown}")
        sealed = [sid for sid in seal if sid not in open_ids]
        raise ScaleConflictError(
            f"{scope}/{stream}: segments {sealed} were already sealed (stream is at epoch {current_epoch})"
        )

    def _segment_range(self, scope: str, stream: str, sid: int) -> SegmentRange:
        """The key range of any segment the stream ever had (current epoch first)."""
        for r in self.get_current_segments(scope, stream):
            if r.segment_id == sid:
                return r
        for e in reversed(self.get_epoch_history(scope, stream)):
            for r in e.ranges(scope, stream):
                if r.segment_id == sid:
                    return r
        raise InvalidScaleError(f"{scope}/{stream} has no segment {sid}")

    @staticmethod
    def _require_known(scope: str, stream: str, sid: int, history: list[EpochRecord]) -> None:
        created = segment_epoch(sid)
        if created >= len(history) or all(s != sid for s, _, _ in history[created].segments):
            raise SegmentNotFoundError(segment_name(scope, stream, sid))

    # -- segments ----------------------------------------------------------------------------------
    def get_epoch(self, scope: str, stream: str, epoch: int) -> EpochRecord:
        (entry,) = self.tables.get(EPOCHS_TABLE, [_epoch_key(scope, stream, epoch)])
        if entry is None:
            raise StreamNotFoundError(f"{scope}/{stream} has no epoch {epoch}")
        return EpochRecord.decode(entry.value)

    def get_epoch_history(self, scope: str, stream: str) -> list[EpochRecord]:
        """Every epoch up to the current one, oldest first; each says when it began
        (``created_ms``), why (``reason``) and which segments it replaced (``edges``)."""
        record, _ = self._visible(scope, stream)
        entries = self.tables.entries(EPOCHS_TABLE, prefix=_epoch_prefix(scope, stream))
        history = [EpochRecord.decode(e.value) for e in entries]
        return [e for e in history if e.epoch <= record.current_epoch]

    def check_scale(self, scope: str, stream: str, seal: Sequence[int], new_ranges: Sequence[Sequence[float]]) -> None:
        """Blocking: InvalidScaleError now for a scale ``scale_stream`` would refuse for its segments and
        ranges against the current epoch (for callers with work to do before it, such as carving a
        native stream's partitions)."""
        record, _ = self._visible(scope, stream)
        validate_scale(self.get_epoch(scope, stream, record.current_epoch), [int(s) for s in seal],
                       normalize_ranges(new_ranges))

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
        self._truncated[(scope, stream)] = cut

    def check_stream_cut(self, scope: str, stream: str, stream_cut: Mapping[int | str, int]) -> dict[int, int]:
        """The cut by segment id if ``truncate_stream`` would take it (its segments cover the key space
        once, each still there, each offset within its segment); InvalidStreamCutError otherwise."""
        known = {
            r.segment_id: r for e in self.get_epoch_history(scope, stream) for r in e.ranges(scope, stream)
        }
        return self._normalize_cut(scope, stream, stream_cut, known)

    def truncation_done(self, scope: str, stream: str, cut: Mapping[int, int]) -> bool:
        """Whether this controller has truncated every segment of ``scope/stream`` at ``cut`` (segment
        id -> offset). False for a cut recorded by a call that failed part way or by another process:
        calling ``truncate_stream`` with it again completes it."""
        return self._truncated.get((scope, stream)) == cut

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

    def _holds_anything(self, scope: str) -> bool:
        """Whether ``scope`` has streams or key-value tables (either keeps it from being deleted)."""
        if self._has_streams(scope):
            return True
        return self.tables.exists(KV_TABLES_TABLE) and bool(
            self.tables.iterate_keys(KV_TABLES_TABLE, limit=1, prefix=f"{scope}/".encode()).items)

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


def _same_scale(pending: PendingScale, seal: list[int], ranges: list[Range]) -> bool:
    """Whether a request asks for exactly the recorded scale (the reason may differ on a retry)."""
    return set(pending.sealed) == set(seal) and len(pending.sealed) == len(seal) and pending.new_ranges() == ranges
