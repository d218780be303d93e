"""Reader groups: several readers share the segments of one or more streams and follow their scaling,
as Pravega's ``ReaderGroup`` / ``EventStreamReader``.

    group = sm.create_reader_group("dashboard", "iot", "readings")   # from the head of the stream
    reader = group.create_reader("reader-1")
    event = reader.read_next_event(timeout=5.0)                      # None on timeout

**Where the group lives.** The group's state (``client/reader_group_state.py``: who holds which
segment at which position, what waits for what, checkpoints) is a ``StateSynchronizer`` in the stream
``<scope>/_RG<name>``. Every change (a reader joins or leaves, acquires or releases a segment,
completes one, records positions or a checkpoint; a reset) is one update appended conditionally on
the revision it was decided on, so readers in any number of processes agree, and an application
that restarts opens the group (``sm.reader_group``) and goes on where it was.

Invariants (the model's, see ``reader_group_state``; kept here by deciding every change inside a
conditional update, on the newest state):

* A segment is read by at most one reader: the one the state says holds it. A reader opens a
  segment only after its acquisition landed, and stops reading one before its release is sent.
* Segments are shared fairly (at most one change per reader every ``REBALANCE_S``): a reader
  acquires unassigned segments while it holds fewer than ceil(segments / readers) and no other
  reader holds fewer, and releases one while it holds more than that, or more than max(1,
  unassigned) above the least loaded reader.
* A successor is read only after all its predecessors were read to their ends (a reader completes
  a sealed segment only once it returned its last event), so events of one routing key come out in
  the order they were written, across splits and merges.
* Positions are ``(offset, skip)`` per segment. A reader records its positions in the state when it
  releases a segment, at checkpoints, every ``RECORD_S`` and when it has caught up;
  ``reader_offline(reader, None)`` therefore resumes at the last recorded positions (at least once)
  and ``reader_offline(reader, position)`` at exactly ``position`` (exactly once, if the
  application records each event's position with its effect; a position taken before a reset is
  ignored). Calling ``read_next_event`` again means the events it returned before
  are processed: only then may the reader give up segments or record positions past them.
* A checkpoint freezes each reader's segments until the reader records it; a reader records it at
  its next read, at a batch boundary in every segment it holds (it first finishes a batch it is
  inside of), and returns a checkpoint event. The checkpoint's cut splits the events exactly where
  each reader returned its checkpoint event.
* After ``reset_to`` every reader drops its segments at its next state refresh (at most
  ``REFRESH_S`` later; at once for readers of the handle that reset) and goes on from the new
  positions; events it returns before that come from the old ones, so stop reading around a reset
  when that matters.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from millrace.client import reader_group_state as rgs
from millrace.client.reader_group_state import ReaderGroupState, SegmentPosition
from millrace.client.segment_reader import SegmentEvent, SegmentEventReader
from millrace.client.serializers import Serializer
from millrace.client.streams import StreamCut, StreamDescription
from millrace.client.synchronizer import StateSynchronizer, Updates
from millrace.protocol.errors import (
    SegmentNotFoundError,
    SegmentTruncatedError,
    StoreError,
)
from millrace.protocol.names import parse_segment_name, segment_name

if TYPE_CHECKING:
    from millrace.client.manager import StreamManager

T = TypeVar("T")
R = TypeVar("R")

STATE_STREAM_PREFIX = "_RG"  # the group's state stream: <scope>/_RG<name>, as Pravega names it
REFRESH_S = 0.2  # how stale a reader's view of the group may get while it has data to read
REBALANCE_S = 0.5  # between a reader's fair-share checks (acquire, release)
RECORD_S = 2.0  # between a reader's records of its positions (what reader_offline(None) resumes from)
STICKY_EVENTS = 1000  # events in a row from one segment before the others get a turn
# A long poll on one segment while the reader holds several: the others wait that long, so it is
# short (an idle reader of several segments sends ~50 empty reads a second; p99 latency ~25 ms).
POLL_MS = 20
IDLE_POLL_MS = 500  # ... while it holds one
SCALE_WAIT_S = 0.05  # between looks at a stream whose scale is under way
COMPACT_EVERY = 500  # updates by one group object between compactions of the state stream


class ReaderGroupNotFoundError(StoreError):
    """No reader group of that name in that scope."""


class ReaderNotInReaderGroupError(StoreError):
    """The reader is not online in the group (it was declared offline, or the group was reset to
    other streams and recreated): create it again to go on."""


class ReaderAlreadyOnlineError(StoreError):
    """A reader of that id is online already: declare it offline first (``reader_offline``)."""


class CheckpointFailedError(StoreError):
    """The checkpoint did not complete: a reset dropped it, its name is taken, or too many are pending."""


@dataclass(frozen=True)
class Position:
    """A reader's place in its segments: segment name -> (offset, skip). Plain JSON (``to_json``), so
    an application can store it beside its own results and pass it to ``reader_offline`` later, from
    any process."""

    segments: Mapping[str, SegmentPosition] = field(default_factory=dict)
    generation: int | None = None  # the group's generation it was taken in (a reset bumps it)

    def to_json(self) -> str:
        return json.dumps({"generation": self.generation,
                           "segments": {k: p.to_json() for k, p in sorted(self.segments.items())}},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str) -> Position:
        parsed = json.loads(raw)
        return cls({str(k): SegmentPosition.from_json(v) for k, v in parsed["segments"].items()},
                   parsed["generation"])


@dataclass(frozen=True)
class EventRead(Generic[T]):
    """What ``read_next_event`` returns: an event (deserialized) with where it was, or a checkpoint.

    ``position`` is the reader's position just after this event (pass the last processed one to
    ``reader_offline``). For a checkpoint, ``is_checkpoint`` is set, ``checkpoint_name`` names it and
    ``data`` is None."""

    data: T | None
    routing_key: str | None
    position: Position
    scope: str
    stream: str
    segment_id: int
    kafka_offset: int
    partition: int
    timestamp_ms: int
    is_checkpoint: bool = False
    checkpoint_name: str | None = None


@dataclass(frozen=True)
class Checkpoint:
    """A completed checkpoint: ``cuts`` has a ``StreamCut`` per stream ("scope/stream" -> cut), and
    ``positions`` the exact positions (a segment left unassigned inside a batch, by a reader that went
    offline with such a position, has a skip that a cut cannot carry). ``reset_to(checkpoint)`` is
    exact; ``reset_to(checkpoint.cuts)`` starts such a segment at its batch's beginning."""

    name: str
    positions: Position
    cuts: Mapping[str, StreamCut]


class _StateSerializer:
    def serialize(self, state: ReaderGroupState) -> bytes:
        return json.dumps(state.to_json(), separators=(",", ":")).encode()

    def deserialize(self, data: bytes) -> ReaderGroupState:
        return ReaderGroupState.from_json(json.loads(data))


def state_stream(name: str) -> str:
    return STATE_STREAM_PREFIX + name


def open_state(manager: StreamManager, scope: str, name: str,
               initial: ReaderGroupState | None) -> StateSynchronizer[ReaderGroupState, dict[str, Any]]:
    """The group's synchronizer (its stream is created if missing; ``initial`` written if it holds no
    state yet)."""
    return manager.internal_synchronizer(scope, state_stream(name), initial, _StateSerializer(),
                                         apply_update=rgs.apply)


def split_stream(scope: str, qualified: str) -> tuple[str, str]:
    """("scope", "stream") of ``stream`` (in the group's scope) or ``other-scope/stream``."""
    if "/" in qualified:
        other, stream = qualified.split("/", 1)
        return other, stream
    return scope, qualified


def cut_positions(cut: StreamCut) -> dict[str, SegmentPosition]:
    return {segment_name(cut.scope, cut.stream, sid): SegmentPosition(off) for sid, off in cut.positions.items()}


class ReaderGroup(Generic[T]):
    """A handle on a reader group. Several handles (in one process or many) share the group."""

    def __init__(self, manager: StreamManager, scope: str, name: str,
                 sync: StateSynchronizer[ReaderGroupState, dict[str, Any]], serializer: Serializer[T]) -> None:
        self.manager = manager
        self.controller = manager.controller
        self.scope = scope
        self.name = name
        self.serializer = serializer
        self._sync = sync
        self._lock = threading.Lock()
        self._updates = 0
        self._descriptions: dict[tuple[str, str], StreamDescription] = {}

    @property
    def streams(self) -> list[str]:
        """The group's streams, as "scope/stream"."""
        return list(self.state().streams)

    def state(self) -> ReaderGroupState:
        """The group's state as stored now (a fresh read)."""
        self._sync.fetch_updates()
        return self._sync.state

    # -- readers --------------------------------------------------------------------------------------
    def create_reader(self, reader_id: str, serializer: Serializer[T] | None = None) -> EventStreamReader[T]:
        """Bring ``reader_id`` online; it gets segments at its first reads. ReaderAlreadyOnlineError if
        it is online already (after a crash, ``reader_offline`` it first)."""
        def join(state: ReaderGroupState) -> tuple[Updates[dict[str, Any]], bool]:
            if reader_id in state.readers:
                return Updates([]), False
            return Updates([rgs.add_reader(reader_id)]), True

        if not self._update(join):
            raise ReaderAlreadyOnlineError(f"reader {reader_id!r} is online in {self.scope}/{self.name} already")
        return EventStreamReader(self, reader_id, serializer if serializer is not None else self.serializer)

    def reader_offline(self, reader_id: str, last_position: Position | None) -> None:
        """Declare ``reader_id`` gone: its segments become unassigned at ``last_position`` (the
        position of the last event the application processed: exactly once) or, with None, at the
        positions it last recorded (some events may be read again). Nothing if it is not online."""
        given = None if last_position is None else dict(last_position.segments)
        generation = None if last_position is None else last_position.generation
        self._update(lambda state: (Updates([rgs.remove_reader(reader_id, given, generation)]
                                            if reader_id in state.readers else []), None))

    def online_readers(self) -> list[str]:
        return sorted(self.state().readers)

    # -- checkpoints and resets -------------------------------------------------------------------------
    def initiate_checkpoint(self, name: str, timeout: float = 30.0) -> Checkpoint:
        """Start a checkpoint and wait until every online reader has recorded it (readers do at their
        next ``read_next_event``, so call this from another thread than the readers'). TimeoutError
        if they have not within ``timeout``; CheckpointFailedError if it cannot start or was dropped."""
        def create(state: ReaderGroupState) -> tuple[Updates[dict[str, Any]], str | None]:
            if name in state.completed_checkpoints or any(c.name == name for c in state.checkpoints):
                return Updates([]), f"a checkpoint named {name!r} exists"
            if len(state.checkpoints) >= rgs.MAX_PENDING_CHECKPOINTS:
                return Updates([]), f"{len(state.checkpoints)} checkpoints are pending already"
            return Updates([rgs.create_checkpoint(name)]), None

        refused = self._update(create)
        if refused is not None:
            raise CheckpointFailedError(refused)
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if name in state.completed_checkpoints:
                return self._checkpoint(name, state.completed_checkpoints[name])
            if not any(c.name == name for c in state.checkpoints):
                raise CheckpointFailedError(f"checkpoint {name!r} was dropped (cancelled, or the group was reset)")
            if time.monotonic() >= deadline:
                waiting = next(c.waiting for c in state.checkpoints if c.name == name)
                raise TimeoutError(f"checkpoint {name!r}: readers {waiting} have not recorded it")
            time.sleep(0.02)

    def cancel_checkpoints(self) -> None:
        """Drop every pending checkpoint (one a reader that stopped reading will never record, which
        also keeps that reader's segments where they are): its waiters raise CheckpointFailedError."""
        self._update(lambda state: (Updates([rgs.cancel_checkpoints()] if state.checkpoints else []), None))

    def _checkpoint(self, name: str, positions: Mapping[str, SegmentPosition]) -> Checkpoint:
        by_stream: dict[tuple[str, str], dict[int, int]] = {}
        for key, pos in positions.items():
            scope, stream, sid = parse_segment_name(key)
            by_stream.setdefault((scope, stream), {})[sid] = pos.offset
        cuts = {f"{sc}/{st}": StreamCut(sc, st, offsets) for (sc, st), offsets in sorted(by_stream.items())}
        return Checkpoint(name, Position(dict(positions)), cuts)

    def reset_to(self, cuts: Checkpoint | StreamCut | Iterable[StreamCut] | Mapping[str, StreamCut]) -> None:
        """Read from these positions instead: every reader drops its segments (at its next state
        refresh) and goes on from the new positions; the group's streams become the cuts' streams.
        Pending checkpoints are dropped."""
        if isinstance(cuts, Checkpoint):
            positions = dict(cuts.positions.segments)  # exact: skips included
            streams = list(cuts.cuts)
        else:
            if isinstance(cuts, StreamCut):
                listed = [cuts]
            elif isinstance(cuts, Mapping):
                listed = list(cuts.values())
            else:
                listed = list(cuts)
            positions, streams = {}, []
            for cut in listed:
                positions.update(cut_positions(cut))
                streams.append(f"{cut.scope}/{cut.stream}")
        self._update(lambda state: (Updates([rgs.reset(streams, positions)]), None))

    def unread_bytes(self) -> int:
        """Bytes of the group's streams not yet read past: the frontier's rest plus everything after
        it, from the recorded positions (readers record them every ``RECORD_S`` and when caught up)."""
        state = self.state()
        frontier = state.frontier()
        total = 0
        for qualified in state.streams:
            scope, stream = qualified.split("/", 1)
            described = self.manager.describe_stream(scope, stream)
            successors = successor_map(described)
            mine = {parse_segment_name(k)[2]: p for k, p in frontier.items() if k.startswith(f"{qualified}/")}
            todo, seen = list(mine), set(mine)
            while todo:
                for succ in successors.get(todo.pop(), {}):
                    if succ not in seen:
                        seen.add(succ)
                        todo.append(succ)
            for sid in seen:
                info = self.controller.segment_info(segment_name(scope, stream, sid))
                start = mine[sid].offset if sid in mine else info.start_offset
                total += max(0, info.length - start)
        return total

    # -- internals ---------------------------------------------------------------------------------------
    def _update(self, fn: Callable[[ReaderGroupState], tuple[Updates[dict[str, Any]], R]]) -> R:
        """A conditional update of the group's state (``fn(state) -> (Updates, result)``), compacting
        the state stream now and then."""
        result = self._sync.update_with_result(fn)
        with self._lock:
            self._updates += 1
            compact = self._updates % COMPACT_EVERY == 0
        if compact:
            self._sync.compact()
        return result

    def describe(self, scope: str, stream: str, fresh: bool = False) -> StreamDescription:
        key = (scope, stream)
        with self._lock:
            described = None if fresh else self._descriptions.get(key)
        if described is None:
            described = self.manager.describe_stream(scope, stream)
            with self._lock:
                self._descriptions[key] = described
        return described

    def close(self) -> None:
        """Stop using this handle (the group and its readers' state stay in the store)."""
        self._sync.close()

    def __enter__(self) -> ReaderGroup[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ReaderGroup({self.scope}/{self.name})"


class ReaderGroupManager:
    """Pravega's ``ReaderGroupManager``: the reader groups of one scope (the same calls as the
    ``StreamManager`` methods it forwards to, without repeating the scope)."""

    def __init__(self, manager: StreamManager, scope: str) -> None:
        self.manager = manager
        self.scope = scope

    def create_reader_group(self, name: str, streams: str | list[str],
                            start: StreamCut | list[StreamCut] | None = None,
                            serializer: Serializer[T] | None = None) -> ReaderGroup[T]:
        return self.manager.create_reader_group(name, self.scope, streams, start, serializer)

    def reader_group(self, name: str, serializer: Serializer[T] | None = None) -> ReaderGroup[T]:
        return self.manager.reader_group(name, self.scope, serializer)

    def delete_reader_group(self, name: str) -> None:
        self.manager.delete_reader_group(name, self.scope)

    def list_reader_groups(self) -> list[str]:
        return self.manager.list_reader_groups(self.scope)


def successor_map(described: StreamDescription) -> dict[int, dict[int, list[int]]]:
    """segment id -> {successor id: all of that successor's predecessors}, from the epoch history."""
    ranges = {s.segment_id: (s.key_start, s.key_end) for e in described.history for s in (*e.created, *e.sealed)}
    out: dict[int, dict[int, list[int]]] = {}
    for epoch in described.history:
        sealed = [s.segment_id for s in epoch.sealed]
        for created in epoch.created:
            lo, hi = created.key_start, created.key_end
            preds = [sid for sid in sealed if sid in ranges and ranges[sid][0] < hi and lo < ranges[sid][1]]
            for pred in preds:
                out.setdefault(pred, {})[created.segment_id] = preds
    return out


@dataclass
class _Held:
    key: str
    scope: str
    stream: str
    reader: SegmentEventReader


class EventStreamReader(Generic[T]):
    """One reader of a group. Use it from one thread; ``close()`` (or ``with``) takes it offline at
    the position of the last event it returned."""

    def __init__(self, group: ReaderGroup[Any], reader_id: str, serializer: Serializer[T]) -> None:
        self.group = group
        self.reader_id = reader_id
        self.serializer = serializer
        self.controller = group.controller
        self._generation = -1
        self._held: dict[str, _Held] = {}
        self._turn = 0  # where a pass starts when no segment is current
        self._current: str | None = None  # the segment that gave the last event
        self._streak = 0  # events in a row from it
        self._refreshed = 0.0
        self._rebalanced = 0.0
        self._recorded = time.monotonic()
        self._progressed = False  # read something since the last record of positions
        self._closed = False

    # -- reading --------------------------------------------------------------------------------------
    def read_next_event(self, timeout: float = 0.0) -> EventRead[T] | None:
        """The next event (or checkpoint) for this reader; None if there was none within ``timeout``
        seconds. Calling it again means the events returned before are processed.

        A request whose connection dropped is sent again once the pool has reconnected, so a server
        restart costs a pause; ConnectionLostError escapes when the server stays unreachable for the
        manager's ``reconnect_timeout``. The reader stays usable after any error: what was under way
        is settled by the group's state, which the reader follows at its next call."""
        if self._closed:
            raise ValueError(f"reader {self.reader_id!r} is closed")
        deadline = time.monotonic() + timeout
        while True:
            got = self._step(deadline)
            if got is not None or time.monotonic() >= deadline:
                return got

    def _step(self, deadline: float) -> EventRead[T] | None:
        """One round: follow the state, checkpoint or rebalance if due, read. None: nothing yet."""
        now = time.monotonic()
        if not self._held or now - self._refreshed >= REFRESH_S:
            self._refresh()
        elif self._state().generation != self._generation:
            self._reconcile()  # a reset through this process's handle: follow it at once
        checkpoint = self._state().checkpoint_for(self.reader_id)
        if checkpoint is not None:
            return self._checkpoint(checkpoint, deadline)
        if not self._held or now - self._rebalanced >= REBALANCE_S:
            self._rebalance()
        if self._progressed and now - self._recorded >= RECORD_S:
            self._record()
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        got = self._read_some(max(0, remaining_ms))
        if got is not None:
            return got
        if self._progressed:
            self._record()  # caught up: what the state records is where this reader is
        if not self._held and time.monotonic() < deadline:
            # Nothing to read until the state gives this reader a segment: look again at refresh pace.
            time.sleep(min(REFRESH_S, max(0.0, deadline - time.monotonic())))
        return None

    def _read_some(self, wait_ms: int) -> EventRead[T] | None:
        """One pass over the held segments without waiting (completing finished ones), then, if
        nothing came, one long poll on the next segment in turn. The pass starts at the segment
        that gave the last event, whose next events are usually in hand already (a segment probed
        first costs a round trip when it has nothing), and moves on after ``STICKY_EVENTS`` of
        them so every held segment gets its turn."""
        keys = sorted(self._held)
        if not keys:
            return None
        start = keys.index(self._current) if self._current in self._held else self._turn
        if self._streak >= STICKY_EVENTS:
            start, self._streak = start + 1, 0
        order = [self._held[k] for k in keys[start % len(keys):] + keys[:start % len(keys)]]
        for h in order:
            event = self._read(h, 0)
            if event is not None:
                if h.key != self._current:
                    self._current, self._streak = h.key, 0
                self._streak += 1
                return event
        self._current = None
        self._turn += 1
        for h in list(order):
            if h.key in self._held and h.reader.at_end:
                self._complete(h)
        live = [h for h in order if h.key in self._held and not h.reader.at_end]
        if not live or wait_ms <= 0:
            return None
        poll = min(wait_ms, POLL_MS if len(self._held) > 1 else IDLE_POLL_MS,
                   max(1, int((REFRESH_S - (time.monotonic() - self._refreshed)) * 1000)))
        return self._read(live[0], poll)

    def _read(self, h: _Held, wait_ms: int) -> EventRead[T] | None:
        try:
            event = h.reader.read_next(wait_ms)
        except SegmentTruncatedError:
            # Retention removed what we had not read: go on from what is left.
            start = self.controller.segment_info(h.key).start_offset
            h.reader = self._open(h.scope, h.stream, h.key, SegmentPosition(start))
            return None
        except SegmentNotFoundError:
            # The segment deleted (nothing more to read in it; its successors follow), or a segment
            # behind it (a partition's index) not there yet: only the first ends it.
            try:
                self.controller.segment_info(h.key)
            except SegmentNotFoundError:
                h.reader.at_end = True
            else:
                time.sleep(SCALE_WAIT_S)
            return None
        if event is None:
            return None
        self._progressed = True
        return self._event(h, event)

    def _event(self, h: _Held, event: SegmentEvent) -> EventRead[T]:
        return EventRead(self.serializer.deserialize(event.data), event.routing_key, self.position(), h.scope,
                         h.stream, event.segment_id, event.kafka_offset, event.partition, event.timestamp_ms)

    def position(self) -> Position:
        """Where this reader is now: just after the last event it returned."""
        return Position({k: SegmentPosition(h.reader.offset, h.reader.skip) for k, h in self._held.items()},
                        self._generation)

    # -- the group's state ------------------------------------------------------------------------------
    def _state(self) -> ReaderGroupState:
        return self.group._sync.state

    def _refresh(self) -> None:
        self.group._sync.fetch_updates()
        self._reconcile()

    def _reconcile(self) -> None:
        """Make the open segments what the state says this reader holds."""
        self._refreshed = time.monotonic()
        state = self._state()
        mine = state.readers.get(self.reader_id)
        if mine is None:
            self._held.clear()
            raise ReaderNotInReaderGroupError(f"reader {self.reader_id!r} is not online in {self.group!r}")
        if state.generation != self._generation:
            self._held.clear()  # a reset: start over from the new positions
            self._generation = state.generation
        for key in [k for k in self._held if k not in mine]:
            del self._held[key]
        for key, pos in mine.items():
            if key not in self._held:
                scope, stream, _ = parse_segment_name(key)
                self._held[key] = _Held(key, scope, stream, self._open(scope, stream, key, pos))

    def _open(self, scope: str, stream: str, key: str, pos: SegmentPosition) -> SegmentEventReader:
        return SegmentEventReader(self.controller, scope, stream, parse_segment_name(key)[2], pos.offset, pos.skip)

    def _positions(self) -> dict[str, SegmentPosition]:
        return dict(self.position().segments)

    def _rebalance(self) -> None:
        """Release one segment above the fair share, or acquire unassigned ones below it."""
        self._rebalanced = time.monotonic()
        state = self._state()
        if rgs.segment_to_release(state, self.reader_id) is None and \
                not rgs.segments_to_acquire(state, self.reader_id):
            return
        generation, positions = self._generation, self._positions()

        def decide(state: ReaderGroupState) -> tuple[Updates[dict[str, Any]], None]:
            release = rgs.segment_to_release(state, self.reader_id)
            if release is not None and release in positions:
                return Updates([rgs.release(self.reader_id, generation, release, positions[release])]), None
            acquire = rgs.segments_to_acquire(state, self.reader_id)
            return Updates([rgs.acquire(self.reader_id, generation, acquire)] if acquire else []), None

        self.group._update(decide)
        self._reconcile()

    def _record(self) -> None:
        self._recorded = time.monotonic()
        self._progressed = False
        update = rgs.record_positions(self.reader_id, self._generation, self._positions())
        self.group._update(lambda state: (Updates([update]), None))
        self._reconcile()

    def _checkpoint(self, name: str, deadline: float) -> EventRead[T] | None:
        """Finish a batch this reader is inside of (its events come before the checkpoint), else
        record the checkpoint and return its event."""
        inside = [h for k, h in sorted(self._held.items()) if h.reader.skip > 0 and not h.reader.at_end]
        if inside:
            wait = max(0, min(POLL_MS, int((deadline - time.monotonic()) * 1000)))
            return self._read(inside[0], wait)
        update = rgs.checkpoint_reader(self.reader_id, self._generation, name, self._positions())
        self.group._update(lambda state: (Updates([update]), None))
        position = self.position()
        self._reconcile()
        self._recorded = time.monotonic()
        self._progressed = False
        return EventRead(None, None, position, "", "", -1, -1, -1, -1, is_checkpoint=True, checkpoint_name=name)

    def _complete(self, h: _Held) -> None:
        """``h`` was read to its end: mark it completed with its successors (which become readable
        once all their predecessors are); later if the scale that sealed it is not visible yet."""
        scope, stream, sid = parse_segment_name(h.key)
        successors = self._successors(scope, stream, sid)
        if successors is None:
            return
        update = rgs.complete_segment(self.reader_id, self._generation, h.key, h.reader.offset, successors)
        self.group._update(lambda state: (Updates([update]), None))
        self._reconcile()
        self._rebalanced = 0.0  # successors may be waiting: look for them at once

    def _successors(self, scope: str, stream: str, sid: int) -> dict[str, list[str]] | None:
        """The successors of a finished segment with all their predecessors; {} if the stream is
        sealed (or the segment was deleted with its stream); None while the scale is under way."""
        for fresh in (False, True):
            try:
                described = self.group.describe(scope, stream, fresh=fresh)
            except StoreError:
                return {}
            found = successor_map(described).get(sid)
            if found:
                return {segment_name(scope, stream, s): [segment_name(scope, stream, p) for p in preds]
                        for s, preds in found.items()}
            if described.sealed:
                return {}
        time.sleep(SCALE_WAIT_S)
        return None

    # -- lifetime -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Go offline at the position of the last event returned: others take over from there."""
        if self._closed:
            return
        self._closed = True
        self.group.reader_offline(self.reader_id, self.position())

    def __enter__(self) -> EventStreamReader[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EventStreamReader({self.reader_id} in {self.group.scope}/{self.group.name})"

