"""Native reader groups as the server shows them (the console's ``/api/reader-groups``, ``/metrics``'
``millrace_reader_group_unread_bytes``, ``millrace groups``).

A reader group has no server part: its state (readers, the segments each holds and their positions,
what waits for what, checkpoints) lives in the state synchronizer of the stream ``SCOPE/_RG<group>``,
written by its readers (``client/reader_group.py``). The server folds that segment itself with the
shared model and codec (``protocol/reader_group_state.py``, ``protocol/synchronizer.py``), reading it
from the segment store and never writing to it, so it shows what the readers last recorded (they record
their positions every ``RECORD_S`` and when caught up).

Unread bytes, per segment: its length (or its end cut's offset, in a bounded read) minus the position
reading resumes at; successors no reader reached yet count whole (from their start offset), as the
client's ``ReaderGroup.unread_bytes`` counts them.

Threads: every call blocks (segment reads, controller table reads) and runs on a worker pool; each
group's fold is cached with the offset it reached, so a later look reads only what was appended since
(or starts again at the segment's start when compaction truncated the cached part away). One lock
serialises the looks: the cache is shared by the pool's threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from millrace.protocol import reader_group_state as rgs
from millrace.protocol.names import segment_name
from millrace.protocol.reader_group_state import STATE_STREAM_PREFIX, ReaderGroupState, SegmentPosition
from millrace.protocol.synchronizer import Fold, StateCorruptError
from millrace.store.controller import Controller
from millrace.store.errors import (
    ScopeNotFoundError,
    SegmentNotFoundError,
    SegmentTruncatedError,
    StreamNotFoundError,
)

T = TypeVar("T")

log = logging.getLogger(__name__)

READ_BYTES = 1 << 20
TIMEOUT_SECONDS = 30.0
MAX_READS = 4096  # reads per look at one group: a bound however fast readers append (4 GiB at 1 MiB)


class ReaderGroupNotFoundError(LookupError):
    """No reader group of that name in that scope."""


@dataclass
class SegmentUnread:
    """One segment the group has yet to read (or holds read to its end): where, by whom, how much."""

    segment: str
    stream: str  # scope/stream
    state: str  # held | unassigned | completed (held for a sibling) | ended (end cut) | successor
    reader: str | None
    offset: int  # where reading resumes (a successor: its start offset)
    skip: int
    length: int  # the segment's length, or its end cut's offset in a bounded read
    unread_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"segment": self.segment, "stream": self.stream, "state": self.state, "reader": self.reader,
                "offset": self.offset, "skip": self.skip, "length": self.length, "unread_bytes": self.unread_bytes}


class ReaderGroupViews:
    """Reads reader groups' state segments (read-only) and folds them, caching each fold."""

    def __init__(self, controller: Controller, timeout: float = TIMEOUT_SECONDS) -> None:
        self.controller = controller
        self.timeout = timeout
        self._folds: dict[str, Fold[ReaderGroupState, rgs.Update]] = {}  # by state segment name
        self._lock = threading.Lock()

    # -- which groups ------------------------------------------------------------------------------
    def groups(self, scope: str | None = None) -> list[tuple[str, str]]:
        """(scope, group) of every reader group, or of ``scope``'s."""
        out = []
        scopes = [scope] if scope is not None else self.controller.list_scopes()
        for s in scopes:
            try:
                streams = self.controller.list_streams(s)
            except ScopeNotFoundError:
                if scope is not None:
                    raise
                continue  # deleted since it was listed
            out += [(s, name[len(STATE_STREAM_PREFIX):]) for name in streams if name.startswith(STATE_STREAM_PREFIX)]
        if scope is None:
            with self._lock:  # forget the folds of groups deleted since
                live = {segment_name(s, STATE_STREAM_PREFIX + g, 0) for s, g in out}
                for gone in [k for k in self._folds if k not in live]:
                    del self._folds[gone]
        return sorted(out)

    # -- one group's state ---------------------------------------------------------------------------
    def state(self, scope: str, group: str) -> ReaderGroupState:
        """The group's state as its synchronizer holds it now (what its readers last wrote)."""
        try:
            (current,) = self.controller.get_current_segments(scope, STATE_STREAM_PREFIX + group)
        except (StreamNotFoundError, ScopeNotFoundError):
            raise ReaderGroupNotFoundError(f"no reader group {group!r} in scope {scope!r}") from None
        name = current.name
        with self._lock:
            fold = self._folds.get(name)
            if fold is None:
                fold = self._folds[name] = Fold(rgs.decode_state, rgs.apply, rgs.decode_update)
            try:
                self._catch_up(name, fold)
            except SegmentNotFoundError:
                self._folds.pop(name, None)
                raise ReaderGroupNotFoundError(f"no reader group {group!r} in scope {scope!r}") from None
            except BaseException:
                self._folds.pop(name, None)  # a half-read fold is never reused
                raise
            state = fold.state
        if state is None:
            raise ReaderGroupNotFoundError(f"reader group {group!r} in scope {scope!r} holds no state yet")
        return state

    def _catch_up(self, name: str, fold: Fold[ReaderGroupState, rgs.Update]) -> None:
        for _ in range(MAX_READS):
            try:
                read = self.controller.store.read(name, fold.read_to, READ_BYTES).result(self.timeout)
            except SegmentTruncatedError:
                # A compaction truncated what the cache had not read yet: its snapshot lies at the start.
                fold.restart(self.controller.store.get_info(name).start_offset)
                continue
            if not read.data:
                return
            fold.feed(read.data)
        raise TimeoutError(f"{name} grows faster than it can be read")

    # -- unread bytes --------------------------------------------------------------------------------
    def unread(self, state: ReaderGroupState) -> list[SegmentUnread]:
        """Every segment the group has yet to read, or holds read to its end, with its unread bytes:
        the frontier at the recorded positions, then the successors past it not reached yet (whole; none
        past an end cut)."""
        held = {key: reader for reader, positions in state.readers.items() for key in positions}
        kinds: dict[str, tuple[str, SegmentPosition]] = {}
        for key, pos in state.ended.items():
            kinds[key] = ("ended", pos)
        for key, pos in state.held_completed().items():
            kinds[key] = ("completed", pos)
        for key, pos in state.unassigned.items():
            kinds[key] = ("unassigned", pos)
        for positions in state.readers.values():
            for key, pos in positions.items():
                kinds[key] = ("held", pos)
        out: list[SegmentUnread] = []
        for qualified in state.streams:
            scope, stream = qualified.split("/", 1)
            for sid, (position, end) in rgs.left_to_read(state, qualified, self._successors(scope, stream)).items():
                key = segment_name(scope, stream, sid)
                try:
                    info = self.controller.store.get_info(key)
                except SegmentNotFoundError:
                    continue  # deleted (its stream truncated past it): nothing left to read
                kind, pos = kinds.get(key, ("successor", position or SegmentPosition(info.start_offset)))
                length = min(info.length, info.length if end is None else end)
                out.append(SegmentUnread(key, qualified, kind, held.get(key), pos.offset, pos.skip, length,
                                         max(0, length - max(pos.offset, info.start_offset))))
        return out

    def _successors(self, scope: str, stream: str) -> dict[int, set[int]]:
        """segment id -> the ids of its successors, from the stream's epoch history ({} once deleted)."""
        try:
            history = self.controller.get_epoch_history(scope, stream)
        except (StreamNotFoundError, ScopeNotFoundError):
            return {}
        out: dict[int, set[int]] = {}
        for epoch in history:
            for pred, succ in epoch.edges:
                out.setdefault(pred, set()).add(succ)
        return out

    # -- answers -------------------------------------------------------------------------------------
    def summary(self, scope: str, group: str) -> dict[str, Any]:
        """What a listing shows of a group: its streams, online readers and unread bytes."""
        state = self.state(scope, group)
        return {"scope": scope, "group": group, "streams": list(state.streams), "online_readers": sorted(state.readers),
                "unread_bytes": sum(s.unread_bytes for s in self.unread(state))}

    def summaries(self, scope: str | None = None) -> list[dict[str, Any]]:
        return list(self._each(scope, self.summary))

    def describe(self, scope: str, group: str) -> dict[str, Any]:
        """The group in full: readers with their segments and positions, every segment left to read with
        its unread bytes, totals per stream and in all, checkpoints pending and completed."""
        state = self.state(scope, group)
        segments = self.unread(state)
        by_stream = {qualified: 0 for qualified in state.streams}
        for s in segments:
            by_stream[s.stream] = by_stream.get(s.stream, 0) + s.unread_bytes
        readers = [{"reader": reader, "segments": [s.to_json() for s in segments if s.reader == reader],
                    "unread_bytes": sum(s.unread_bytes for s in segments if s.reader == reader)}
                   for reader in sorted(state.readers)]
        return {"scope": scope, "group": group, "streams": list(state.streams), "generation": state.generation,
                "online_readers": sorted(state.readers), "readers": readers,
                "segments": [s.to_json() for s in segments], "waiting_successors": sorted(state.future),
                "unread_bytes": sum(by_stream.values()), "unread_by_stream": by_stream,
                "checkpoints": {"pending": [{"name": c.name, "waiting": list(c.waiting)} for c in state.checkpoints],
                                "completed": list(state.completed_checkpoints)},
                "config": state.config}

    def unread_by_stream(self, scope: str | None = None) -> list[tuple[str, str, str, int]]:
        """(scope, group, scope/stream, unread bytes) of every group's every stream (what /metrics shows)."""
        def rows(s: str, g: str) -> list[tuple[str, str, str, int]]:
            state = self.state(s, g)
            totals = {qualified: 0 for qualified in state.streams}
            for seg in self.unread(state):
                totals[seg.stream] = totals.get(seg.stream, 0) + seg.unread_bytes
            return [(s, g, qualified, n) for qualified, n in totals.items()]
        return [row for found in self._each(scope, rows) for row in found]

    def _each(self, scope: str | None, look: Callable[[str, str], T]) -> Iterator[T]:
        for s, g in self.groups(scope):
            try:
                yield look(s, g)
            except ReaderGroupNotFoundError:
                continue  # deleted since it was listed, or not initialized yet
            except StateCorruptError as exc:
                # One group's state that cannot be folded (its own describe says why) hides no other.
                log.warning("reader group %s/%s left out: %s", s, g, exc)
