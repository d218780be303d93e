"""Reader groups: several readers share the segments of one or more streams and follow their scaling,
as Pravega's ``ReaderGroup`` / ``EventStreamReader``.

    group = sm.create_reader_group("dashboard", "iot", "readings")   # from the head of the stream
    reader = group.create_reader("reader-1")
    event = reader.read_next_event(timeout=5.0)                      # None on timeout

**Where the group lives.** The group's state (``protocol/reader_group_state.py``: who holds which
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
* ``reset_to`` takes every reader offline (as Pravega's reset): each learns it at its next state
  refresh (at most ``REFRESH_S`` later; at once for readers of the handle that reset) and raises
  ``ReinitializationRequiredError`` from then on; readers created again read from the new
  positions. Events a reader returns before it noticed come from the old ones, so stop reading
  around a reset when that matters.
"""

from __future__ import annotations

import base64
import contextlib
import enum
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from millrace.client import watermarks
from millrace.client.notifications import DEFAULT_INTERVAL_S as DEFAULT_NOTIFY_INTERVAL_S
from millrace.client.notifications import EndOfDataNotifier, SegmentNotifier, Submitter
from millrace.client.segment_reader import SegmentEvent, SegmentEventReader, read_segment_events
from millrace.client.serializers import Serializer
from millrace.client.streams import StreamCut, StreamDescription, decode_value, encode_value, from_base64
from millrace.client.synchronizer import StateSynchronizer, Updates
from millrace.protocol import reader_group_state as rgs
from millrace.protocol.errors import (
    InvalidRequestError,
    SegmentNotFoundError,
    SegmentTruncatedError,
    StoreError,
    StreamNotFoundError,
)
from millrace.protocol.names import parse_segment_name, segment_name
from millrace.protocol.reader_group_state import ReaderGroupState, SegmentPosition

if TYPE_CHECKING:
    from millrace.client.controller import ControllerClient
    from millrace.client.manager import StreamManager

T = TypeVar("T")
R = TypeVar("R")
NotifierT = TypeVar("NotifierT", SegmentNotifier, EndOfDataNotifier)

SILENT_CHECKPOINT_PREFIX = "_cuts-"  # generate_stream_cuts' checkpoints (forgotten once their cuts are taken)
AUTO_CHECKPOINT_PREFIX = "_auto-"  # checkpoints readers start by themselves (automatic_checkpoint_interval)
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


class StreamDataRetention(enum.Enum):
    """Whether a reader group holds its streams' data back from consumption-based retention (Pravega's
    ``ReaderGroupConfig.StreamDataRetention``): NONE does not (it is no subscriber); the other two make
    the group a **subscriber** of each of its streams, whose retention cut (where it has released the
    data before) a stream with ``RetentionPolicy.by_consumption()`` is never truncated past. The cut
    starts at the group's start cuts and moves with ``update_retention_stream_cut`` (MANUAL) or with
    every completed checkpoint (AUTOMATIC)."""

    NONE = "none"
    MANUAL_RELEASE_AT_USER_STREAMCUT = "manual_release_at_user_streamcut"
    AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT = "automatic_release_at_last_checkpoint"


class ReaderGroupNotFoundError(StoreError):
    """No reader group of that name in that scope."""


class ReaderNotInReaderGroupError(StoreError):
    """The reader is not online in the group (it was declared offline, or the group was reset to
    other streams and recreated): create it again to go on."""


class ReaderAlreadyOnlineError(StoreError):
    """A reader of that id is online already: declare it offline first (``reader_offline``)."""


class CheckpointFailedError(StoreError):
    """The checkpoint did not complete: a reset dropped it, its name is taken, or too many are pending."""


class ReinitializationRequiredError(ReaderNotInReaderGroupError):
    """The group was reset (``reset_to``) after this reader was created: as in Pravega, a reset takes
    every reader offline, and the application closes the reader and creates it again (with
    ``create_reader``), which then reads from the new positions."""


class ConfigMismatchError(StoreError):
    """``create_reader_group`` found the group existing with another configuration (streams, start or
    end cuts), as Pravega's ``ConfigMismatchException``: open it as it is with ``reader_group``, or
    delete it first."""


class TruncatedDataError(StoreError):
    """Data this reader had not read yet was truncated away (``truncate_stream`` or retention), as
    Pravega's ``TruncatedDataException``: events of ``segment`` from ``from_offset`` up to
    ``to_offset`` (None: the segment's end; the whole rest was deleted) are lost to the reader. The
    reader has moved on already: its next ``read_next_event`` goes on from the stream's new head."""

    def __init__(self, segment: str, from_offset: int, to_offset: int | None) -> None:
        lost = f"offsets {from_offset} to {to_offset}" if to_offset is not None else \
            f"everything from offset {from_offset} on (the segment was deleted)"
        super().__init__(f"segment {segment}: {lost} truncated away before this reader read it")
        self.segment = segment
        self.scope, self.stream, self.segment_id = parse_segment_name(segment)
        self.from_offset = from_offset
        self.to_offset = to_offset


class NoSuchEventError(StoreError):
    """``fetch_event``: no event at that pointer (Pravega's ``NoSuchEventException``): the pointer names
    no record of a visible batch there. A pointer into data truncated away raises
    ``SegmentTruncatedError`` instead, and one into a deleted segment ``SegmentNotFoundError``."""


@dataclass(frozen=True)
class EventPointer:
    """Where one event lies (Pravega's ``EventPointer``): its segment, the offset of the stored batch
    holding it and its index in that batch. Every ``EventRead`` carries one; ``fetch_event`` reads
    the event again from it, at any later time and from any process (it serialises as ``to_bytes`` /
    ``to_base64``), as long as the stream still holds it."""

    scope: str
    stream: str
    segment_id: int
    offset: int  # the segment offset of the batch (a batch boundary)
    index: int  # the record's number within that batch

    @property
    def segment(self) -> str:
        return segment_name(self.scope, self.stream, self.segment_id)

    def to_bytes(self) -> bytes:
        return encode_value("EventPointer", {"scope": self.scope, "stream": self.stream,
                                             "segment_id": self.segment_id, "offset": self.offset,
                                             "index": self.index})

    @classmethod
    def from_bytes(cls, raw: bytes) -> EventPointer:
        """The pointer ``to_bytes`` wrote; ValueError for other bytes."""
        body = decode_value("EventPointer", raw)
        try:
            return cls(str(body["scope"]), str(body["stream"]), int(body["segment_id"]), int(body["offset"]),
                       int(body["index"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a malformed serialised EventPointer: {exc!r}") from None

    def to_base64(self) -> str:
        return base64.b64encode(self.to_bytes()).decode("ascii")

    @classmethod
    def from_base64(cls, text: str) -> EventPointer:
        return cls.from_bytes(from_base64(text))

    def __str__(self) -> str:
        return f"{self.segment}@{self.offset}#{self.index}"


def fetch_event(controller: ControllerClient, pointer: EventPointer, serializer: Serializer[T]) -> T:
    """The event at ``pointer``, deserialized: one read of the batch it lies in (a read changes
    nothing, so it may come from anywhere at any time). NoSuchEventError if no visible event is
    there; SegmentTruncatedError / SegmentNotFoundError if the stream no longer holds it."""
    # max_bytes=1: the server answers the first batch at the offset whole, however large, and no more.
    got = read_segment_events(controller, pointer.scope, pointer.stream, pointer.segment_id, pointer.offset,
                              max_bytes=1)
    for event in got.events:
        if event.position == pointer.offset and event.index == pointer.index:
            return serializer.deserialize(event.data)
    raise NoSuchEventError(f"no event at {pointer}: no visible batch begins at offset {pointer.offset} of "
                           f"{pointer.segment}, or it has no record {pointer.index}")


@dataclass(frozen=True)
class Position:
    """A reader's place in its segments: segment name -> (offset, skip). Plain JSON (``to_json``), or
    bytes as Pravega's (``to_bytes`` / ``to_base64``), so an application can store it beside its own
    results and pass it to ``reader_offline`` later, from any process."""

    segments: Mapping[str, SegmentPosition] = field(default_factory=dict)
    generation: int | None = None  # the group's generation it was taken in (a reset bumps it)

    def to_json(self) -> str:
        return json.dumps(self._body(), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str) -> Position:
        return cls._from_body(json.loads(raw))

    def to_bytes(self) -> bytes:
        return encode_value("Position", self._body())

    @classmethod
    def from_bytes(cls, raw: bytes) -> Position:
        """The position ``to_bytes`` wrote; ValueError for other bytes."""
        return cls._from_body(decode_value("Position", raw))

    def to_base64(self) -> str:
        return base64.b64encode(self.to_bytes()).decode("ascii")

    @classmethod
    def from_base64(cls, text: str) -> Position:
        return cls.from_bytes(from_base64(text))

    def _body(self) -> dict[str, Any]:
        return {"generation": self.generation,
                "segments": {k: p.to_json() for k, p in sorted(self.segments.items())}}

    @classmethod
    def _from_body(cls, body: Mapping[str, Any]) -> Position:
        try:
            generation = body["generation"]
            return cls({str(k): SegmentPosition.from_json(v) for k, v in body["segments"].items()},
                       None if generation is None else int(generation))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"a malformed serialised Position: {exc!r}") from None


F = TypeVar("F")
_new_object = object.__new__
_set_attribute = object.__setattr__


def _frozen(cls: type[F], fields: dict[str, Any]) -> F:
    """An instance of the frozen dataclass ``cls`` holding ``fields`` (all of them), made without its
    ``__init__``, which sets each field through ``object.__setattr__``: for the three made per event
    that was a third of a reader's time. tests/client/test_reader_fast_path.py checks both agree."""
    made = _new_object(cls)
    _set_attribute(made, "__dict__", fields)
    return made


@dataclass(frozen=True)
class EventRead(Generic[T]):
    """What ``read_next_event`` returns: an event (deserialized) with where it was, or a checkpoint.

    ``position`` is the reader's position just after this event (pass the last processed one to
    ``reader_offline``). For a checkpoint, ``is_checkpoint`` is set, ``checkpoint_name`` names it and
    ``data`` is None. In a group with end cuts, once every reader has read up to them, every call
    returns an ``EventRead`` with ``is_read_completed`` set and ``data`` None (Pravega's
    ``isReadCompleted``). ``event_pointer`` (None for those) reads the event again with
    ``fetch_event``."""

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
    is_read_completed: bool = False
    event_pointer: EventPointer | None = None


@dataclass(frozen=True)
class Checkpoint:
    """A completed checkpoint: ``cuts`` has a ``StreamCut`` per stream ("scope/stream" -> cut), and
    ``positions`` the exact positions (a segment left unassigned inside a batch, by a reader that went
    offline with such a position, has a skip that a cut cannot carry). ``reset_to(checkpoint)`` is
    exact; ``reset_to(checkpoint.cuts)`` starts such a segment at its batch's beginning."""

    name: str
    positions: Position
    cuts: Mapping[str, StreamCut]

    def to_bytes(self) -> bytes:
        """Bytes to store (Pravega's ``Checkpoint`` serialisation); ``from_bytes`` gives it back, to
        ``reset_to`` from another process or after a restart."""
        return encode_value("Checkpoint", {"name": self.name, "positions": self.positions._body(),
                                           "cuts": {k: c._body() for k, c in sorted(self.cuts.items())}})

    @classmethod
    def from_bytes(cls, raw: bytes) -> Checkpoint:
        """The checkpoint ``to_bytes`` wrote; ValueError for other bytes."""
        body = decode_value("Checkpoint", raw)
        try:
            name, positions, cuts = str(body["name"]), body["positions"], body["cuts"].items()
        except (KeyError, AttributeError) as exc:
            raise ValueError(f"a malformed serialised Checkpoint: {exc!r}") from None
        return cls(name, Position._from_body(positions), {str(k): StreamCut._from_body(c) for k, c in cuts})

    def to_base64(self) -> str:
        return base64.b64encode(self.to_bytes()).decode("ascii")

    @classmethod
    def from_base64(cls, text: str) -> Checkpoint:
        return cls.from_bytes(from_base64(text))


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


def cuts_config(cuts: Iterable[StreamCut]) -> dict[str, dict[str, int]]:
    """Cuts as a group's configuration holds them: "scope/stream" -> {segment id: offset} (JSON keys)."""
    return {f"{c.scope}/{c.stream}": {str(sid): off for sid, off in sorted(c.positions.items())} for c in cuts}


def group_config(streams: Iterable[str], start: Iterable[StreamCut], end: Iterable[StreamCut],
                 automatic_checkpoint_interval: float | None = None,
                 retention_type: StreamDataRetention = StreamDataRetention.NONE) -> dict[str, Any]:
    """A group's configuration as ``create_reader_group`` was asked for it, to compare when it is
    asked again: the streams, and the start and end cuts given (a stream given none starts at "its
    head" and has no end, whatever the head is when the group is created), and the automatic
    checkpoint interval and retention type if given (absent otherwise, as in groups stored before
    they existed)."""
    config: dict[str, Any] = {"streams": list(streams), "start": cuts_config(start), "end": cuts_config(end)}
    if automatic_checkpoint_interval is not None:
        if automatic_checkpoint_interval <= 0:
            raise ValueError(f"automatic_checkpoint_interval must be positive seconds, not "
                             f"{automatic_checkpoint_interval!r}")
        config["automatic_checkpoint_interval"] = float(automatic_checkpoint_interval)
    if retention_type != StreamDataRetention.NONE:
        config["retention_type"] = retention_type.value
    return config


def retention_of(state: ReaderGroupState) -> StreamDataRetention:
    """The group's retention type (from its configuration)."""
    return StreamDataRetention((state.config or {}).get("retention_type", StreamDataRetention.NONE.value))


def subscriber_name(scope: str, name: str) -> str:
    """How a group is known among its streams' subscribers: ``<scope>/<group>``."""
    return f"{scope}/{name}"


def automatic_interval(state: ReaderGroupState) -> float | None:
    """The group's automatic checkpoint interval in seconds (from its configuration), or None."""
    interval = (state.config or {}).get("automatic_checkpoint_interval")
    return None if interval is None else float(interval)


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
        self._notifiers: list[SegmentNotifier | EndOfDataNotifier] = []  # closed with the handle

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
        def join(state: ReaderGroupState) -> tuple[Updates[dict[str, Any]], int | None]:
            if reader_id in state.readers:
                return Updates([]), None
            return Updates([rgs.add_reader(reader_id)]), state.generation

        generation = self._update(join)
        if generation is None:
            raise ReaderAlreadyOnlineError(f"reader {reader_id!r} is online in {self.scope}/{self.name} already")
        return EventStreamReader(self, reader_id, serializer if serializer is not None else self.serializer,
                                 generation)

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
        return self._run_checkpoint(name, timeout, silent=False)

    def generate_stream_cuts(self, timeout: float = 30.0) -> dict[str, StreamCut]:
        """A cut per stream ("scope/stream" -> cut) where the readers are now, agreed with them as
        Pravega's ``generateStreamCuts``: a checkpoint the readers record at their next
        ``read_next_event`` without returning an event for it. Every event a reader returned before
        lies before the cuts, every later one after; a cut serves as another group's start or end.
        TimeoutError if the online readers have not recorded it within ``timeout``."""
        name = f"{SILENT_CHECKPOINT_PREFIX}{uuid.uuid4().hex}"
        try:
            checkpoint = self._run_checkpoint(name, timeout, silent=True)
        finally:  # taken or given up: either way it must not hold the readers' segments any longer
            self._update(lambda state: (Updates([rgs.forget_checkpoint(name)]), None))
        return dict(checkpoint.cuts)

    def get_stream_cuts(self) -> dict[str, StreamCut]:
        """A cut per stream ("scope/stream" -> cut) at the group's recorded positions (Pravega's
        ``getStreamCuts``): readers record theirs every ``RECORD_S``, when caught up, at checkpoints
        (automatic ones included) and when giving segments up, so the cuts may lie somewhat before
        what readers returned."""
        return self._cuts(self.state().frontier())

    @property
    def automatic_checkpoint_interval(self) -> float | None:
        """Seconds between the checkpoints readers start by themselves (None: only those asked for)."""
        return automatic_interval(self.state())

    @property
    def retention_type(self) -> StreamDataRetention:
        return retention_of(self.state())

    def update_retention_stream_cut(self, cuts: StreamCut | Iterable[StreamCut] | Mapping[str, StreamCut]) -> None:
        """Release the data before ``cuts`` (one cut per stream of the group, as many streams as wanted)
        to consumption-based retention, as Pravega's ``updateRetentionStreamCut``: a stream with
        ``RetentionPolicy.by_consumption()`` may then be truncated up to them (and up to the other
        subscribers' cuts). Only for groups created with ``MANUAL_RELEASE_AT_USER_STREAMCUT``
        (InvalidRequestError otherwise); InvalidRequestError for a cut of another stream."""
        retention = self.retention_type
        if retention != StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT:
            raise InvalidRequestError(f"{self!r} releases data {retention.name}: update_retention_stream_cut is "
                                      "for groups created with MANUAL_RELEASE_AT_USER_STREAMCUT")
        listed = _listed_cuts(cuts)
        strangers = sorted(str(c) for c in listed if f"{c.scope}/{c.stream}" not in self.streams)
        if strangers:
            raise InvalidRequestError(f"{self!r} does not read the streams of {strangers}")
        self._release(listed)

    def _release(self, cuts: Iterable[StreamCut]) -> None:
        for cut in cuts:
            self.controller.update_subscriber_cut(cut.scope, cut.stream, subscriber_name(self.scope, self.name), cut)

    def _released_at_checkpoint(self, name: str, state: ReaderGroupState) -> None:
        """A checkpoint completed: a group releasing AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT releases the
        data before its cuts (``generate_stream_cuts``' silent ones release nothing)."""
        if name.startswith(SILENT_CHECKPOINT_PREFIX) or name not in state.completed_checkpoints or \
                retention_of(state) != StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT:
            return
        self._release(self._checkpoint(name, state.completed_checkpoints[name]).cuts.values())

    def last_checkpoint(self) -> Checkpoint | None:
        """The newest completed checkpoint, automatic or initiated (``generate_stream_cuts``' are not
        kept), or None if none completed yet (or a reset dropped them)."""
        completed = self.state().completed_checkpoints
        for name in reversed(list(completed)):
            if not name.startswith(SILENT_CHECKPOINT_PREFIX):
                return self._checkpoint(name, completed[name])
        return None

    def _run_checkpoint(self, name: str, timeout: float, silent: bool) -> Checkpoint:
        def create(state: ReaderGroupState) -> tuple[Updates[dict[str, Any]], str | None]:
            if name in state.completed_checkpoints or any(c.name == name for c in state.checkpoints):
                return Updates([]), f"a checkpoint named {name!r} exists"
            if len(state.checkpoints) >= rgs.MAX_PENDING_CHECKPOINTS:
                return Updates([]), f"{len(state.checkpoints)} checkpoints are pending already"
            return Updates([rgs.create_checkpoint(name, silent)]), None

        refused = self._update(create)
        if refused is not None:
            raise CheckpointFailedError(refused)
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if name in state.completed_checkpoints:
                self._released_at_checkpoint(name, state)
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
        return Checkpoint(name, Position(dict(positions)), self._cuts(positions))

    def _cuts(self, positions: Mapping[str, SegmentPosition]) -> dict[str, StreamCut]:
        """Positions as a cut per stream of the group. A sealed stream's segments read to their end
        leave the frontier (nothing follows them): they are put back at their lengths, so each cut
        covers the key space."""
        by_stream: dict[str, dict[int, int]] = {qualified: {} for qualified in self.state().streams}
        for key, pos in positions.items():
            scope, stream, sid = parse_segment_name(key)
            by_stream.setdefault(f"{scope}/{stream}", {})[sid] = pos.offset
        cuts = {}
        for qualified, offsets in sorted(by_stream.items()):
            scope, stream = qualified.split("/", 1)
            described = self.manager.describe_stream(scope, stream)
            if described.sealed:
                ranges = {s.segment_id: s for e in described.history for s in (*e.created, *e.sealed)}
                for current in described.segments:
                    s = current.segment
                    if not any(ranges[sid].key_start < s.key_end and s.key_start < ranges[sid].key_end
                               for sid in offsets if sid in ranges):
                        offsets[s.segment_id] = current.length or 0
            cuts[qualified] = StreamCut(scope, stream, offsets)
        return cuts

    def reset_to(self, cuts: Checkpoint | StreamCut | Iterable[StreamCut] | Mapping[str, StreamCut]) -> None:
        """Read from these positions instead, as Pravega's ``resetReaderGroup``: every reader is taken
        offline (its next ``read_next_event`` raises ``ReinitializationRequiredError``; create it
        again), and readers created afterwards read from the new positions. The group's streams become
        the cuts' streams, its configuration's start cuts these (its end cuts stay). Pending
        checkpoints are dropped. A subscriber group's retention cuts follow: each becomes its
        stream's new start cut (backwards, retention keeps what the group will read again; forwards,
        it may drop what the group skips), and streams the group no longer reads lose it as a
        subscriber."""
        before = self.state()
        if isinstance(cuts, Checkpoint):
            positions = dict(cuts.positions.segments)  # exact: skips included
            streams = list(cuts.cuts)
            listed = list(cuts.cuts.values())
        else:
            listed = _listed_cuts(cuts)
            positions, streams = {}, []
            for cut in listed:
                positions.update(cut_positions(cut))
                streams.append(f"{cut.scope}/{cut.stream}")
        start = cuts_config(listed)

        def reset(state: ReaderGroupState) -> tuple[Updates[dict[str, Any]], None]:
            config = None if state.config is None else {**state.config, "streams": streams, "start": start}
            return Updates([rgs.reset(streams, positions, config)]), None

        if retention_of(before) == StreamDataRetention.NONE:
            self._update(reset)
            return
        # While the positions move, hold every stream from its head: then no retention round can pass
        # what readers read, before the reset (behind the old cut) or after it (behind the new one).
        subscriber = subscriber_name(self.scope, self.name)
        for cut in listed:
            self.controller.update_subscriber_cut(cut.scope, cut.stream, subscriber,
                                                  self.manager.head_cut(cut.scope, cut.stream))
        self._update(reset)
        self._release(listed)
        for qualified in sorted(set(before.streams) - set(streams)):
            scope, stream = qualified.split("/", 1)
            with contextlib.suppress(StreamNotFoundError):  # deleted meanwhile: its subscribers went with it
                self.controller.update_subscriber_cut(scope, stream, subscriber, None)

    def unread_bytes(self) -> int:
        """Bytes of the group's streams not yet read past: the frontier's rest plus everything after
        it, from the recorded positions (readers record them every ``RECORD_S`` and when caught up);
        in a bounded read, up to the end cuts."""
        state = self.state()
        total = 0
        for qualified in state.streams:
            scope, stream = qualified.split("/", 1)
            successors = successor_map(self.manager.describe_stream(scope, stream))
            for sid, (position, end) in rgs.left_to_read(state, qualified, successors).items():
                info = self.controller.segment_info(segment_name(scope, stream, sid))
                start = info.start_offset if position is None else max(position.offset, info.start_offset)
                total += max(0, min(info.length, info.length if end is None else end) - start)
        return total

    # -- notifications -----------------------------------------------------------------------------------
    def segment_notifier(self, executor: Submitter | None = None, *,
                         interval: float | None = DEFAULT_NOTIFY_INTERVAL_S) -> SegmentNotifier:
        """A notifier telling its listeners the number of segments the group reads whenever it
        changes (Pravega's ``getSegmentNotifier``): ``register_listener(fn)`` calls
        ``fn(SegmentNotification)`` on ``executor`` (or the notifier's polling thread), checking every
        ``interval`` seconds (None: only when ``check()`` is called). Closed with this handle."""
        def counts() -> tuple[int, int]:
            state = self.state()
            return state.assignable_count(), len(state.readers)

        return self._notifier(SegmentNotifier(counts, interval, executor))

    def end_of_data_notifier(self, executor: Submitter | None = None, *,
                             interval: float | None = DEFAULT_NOTIFY_INTERVAL_S) -> EndOfDataNotifier:
        """A notifier telling its listeners once when every stream of the group is sealed and read
        to its end, or read up to its end cut (Pravega's ``getEndOfDataNotifier``); as
        ``segment_notifier`` otherwise."""
        return self._notifier(EndOfDataNotifier(lambda: self.state().read_completed(), interval, executor))

    def _notifier(self, notifier: NotifierT) -> NotifierT:
        with self._lock:
            self._notifiers.append(notifier)
        return notifier

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
        """Stop using this handle (the group and its readers' state stay in the store); its notifiers
        stop too."""
        with self._lock:
            notifiers, self._notifiers = self._notifiers, []
        for notifier in notifiers:
            notifier.close()
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
                            serializer: Serializer[T] | None = None,
                            end: StreamCut | list[StreamCut] | None = None, *,
                            automatic_checkpoint_interval: float | None = None,
                            retention_type: StreamDataRetention = StreamDataRetention.NONE) -> ReaderGroup[T]:
        return self.manager.create_reader_group(name, self.scope, streams, start, serializer, end=end,
                                                automatic_checkpoint_interval=automatic_checkpoint_interval,
                                                retention_type=retention_type)

    def reader_group(self, name: str, serializer: Serializer[T] | None = None) -> ReaderGroup[T]:
        return self.manager.reader_group(name, self.scope, serializer)

    def delete_reader_group(self, name: str) -> None:
        self.manager.delete_reader_group(name, self.scope)

    def list_reader_groups(self) -> list[str]:
        return self.manager.list_reader_groups(self.scope)

    def fetch_event(self, pointer: EventPointer, serializer: Serializer[T] | None = None) -> T:
        """The event at ``pointer`` (``StreamManager.fetch_event``)."""
        return self.manager.fetch_event(pointer, serializer)


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


def _highest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass
class _Held:
    key: str
    scope: str
    stream: str
    reader: SegmentEventReader


class EventStreamReader(Generic[T]):
    """One reader of a group. Use it from one thread; ``close()`` (or ``with``) takes it offline at
    the position of the last event it returned."""

    def __init__(self, group: ReaderGroup[Any], reader_id: str, serializer: Serializer[T], generation: int) -> None:
        self.group = group
        self.reader_id = reader_id
        self.serializer = serializer
        self.controller = group.controller
        self._generation = generation  # the group's generation it joined in: a reset ends this reader
        self._reset = False  # the group was reset: every call raises ReinitializationRequiredError
        self._held: dict[str, _Held] = {}
        self._turn = 0  # where a pass starts when no segment is current
        self._current: str | None = None  # the segment that gave the last event
        self._streak = 0  # events in a row from it
        self._refreshed = 0.0
        self._rebalanced = 0.0
        self._recorded = time.monotonic()
        self._checkpointed = time.monotonic()  # since when no checkpoint was started or recorded here
        self._progressed = False  # read something since the last record of positions
        self._closed = False
        # The fast path of read_next_event (see _quiet): the state it was last found quiet in, and
        # until when no timer of _step is due.
        self._quiet_state: ReaderGroupState | None = None
        self._quiet_until = 0.0
        # Places of every held segment as of the first of a run of events of segment _snapshot_key
        # (whose own entry goes stale): each event of the run copies it with its own place put in.
        self._snapshot: dict[str, SegmentPosition] = {}
        self._snapshot_key: str | None = None
        # get_current_time_window: each stream's marks (opened at the first call) and last window
        self._marks: dict[str, StateSynchronizer[watermarks.Marks, dict[str, Any]]] = {}
        self._windows: dict[str, watermarks.TimeWindow] = {}

    # -- reading --------------------------------------------------------------------------------------
    def read_next_event(self, timeout: float = 0.0) -> EventRead[T] | None:
        """The next event (or checkpoint) for this reader; None if there was none within ``timeout``
        seconds. Calling it again means the events returned before are processed.

        A request whose connection dropped is sent again once the pool has reconnected, so a server
        restart costs a pause; ConnectionLostError escapes when the server stays unreachable for the
        manager's ``reconnect_timeout``. The reader stays usable after any error (what was under way
        is settled by the group's state, which the reader follows at its next call), except
        ``ReinitializationRequiredError`` after a reset of the group: create the reader again.
        ``TruncatedDataError``: data this reader had not read was truncated away; the next call goes
        on from the new head."""
        if self._reset:
            raise self._reinitialization_required()
        if self._closed:
            raise ValueError(f"reader {self.reader_id!r} is closed")
        # The fast path: the next event of the segment that gave the last one is in hand, and nothing
        # _step would do first is due (no timer ran out, the state has not changed since it was found
        # quiet), so _step would return just this event: return it without the rest of _step.
        h = self._held.get(self._current) if self._current is not None else None
        if h is not None and self._streak < STICKY_EVENTS and h.reader.has_buffered() \
                and self.group._sync.state is self._quiet_state and time.monotonic() < self._quiet_until:
            event = h.reader.read_next(0)
            if event is not None:  # always, with events in hand
                self._streak += 1
                self._progressed = True
                return self._event(h, event)
        deadline = time.monotonic() + timeout
        while True:
            got = self._step(deadline)
            if got is not None or time.monotonic() >= deadline:
                return got

    def _step(self, deadline: float) -> EventRead[T] | None:
        """One round: follow the state, checkpoint or rebalance if due, read. None: nothing yet."""
        self._quiet_state = None  # an error below leaves the fast path shut until a round completes
        got = self._step_once(deadline)
        self._quiet()
        return got

    def _quiet(self) -> None:
        """Note whether, and until when, a next call may take the fast path: while the group's state is
        this one (of this reader's generation, with no checkpoint waiting for it) and before any timer
        of ``_step`` (refresh, rebalance, record, automatic checkpoint) runs out."""
        state = self._state()
        if state.generation != self._generation or state.checkpoint_for(self.reader_id) is not None:
            self._quiet_state = None
            return
        until = min(self._refreshed + REFRESH_S, self._rebalanced + REBALANCE_S, self._recorded + RECORD_S)
        interval = automatic_interval(state)
        if interval is not None:
            until = min(until, self._checkpointed + interval)
        self._quiet_state, self._quiet_until = state, until

    def _step_once(self, deadline: float) -> EventRead[T] | None:
        now = time.monotonic()
        if not self._held or now - self._refreshed >= REFRESH_S:
            self._refresh()
        elif self._state().generation != self._generation:
            self._reconcile()  # a reset through this process's handle: follow it at once
        interval = automatic_interval(self._state())
        if interval is not None and now - self._checkpointed >= interval:
            self._start_automatic_checkpoint()
        checkpoint = self._state().checkpoint_for(self.reader_id)
        if checkpoint is not None:
            return self._checkpoint(checkpoint, deadline)
        if not self._held or now - self._rebalanced >= REBALANCE_S:
            self._rebalance()
        if not self._held and self._state().end and self._state().read_completed():
            # A bounded read every reader has finished (a group without end cuts keeps waiting, as
            # before bounded reads existed, also when its streams are sealed and read).
            return EventRead(None, None, self.position(), "", "", -1, -1, -1, -1, is_read_completed=True)
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
            self._snapshot_key = None  # its place moves (below), and other events' snapshot with it
            # Truncation (by hand or retention) removed what we had not read: say so, as Pravega does,
            # and go on from what is left at the next call.
            lost_from = h.reader.offset
            start = self.controller.segment_info(h.key).start_offset
            h.reader = self._open(h.scope, h.stream, h.key, SegmentPosition(start))
            raise TruncatedDataError(h.key, lost_from, start) from None
        except SegmentNotFoundError:
            self._snapshot_key = None
            # The segment deleted, or a segment behind it (a partition's index) not there yet: only
            # the first ends it (its successors follow). Deleted with its stream, it just ends; deleted
            # while its stream lives, a truncation took it away with what was left of it.
            try:
                self.controller.segment_info(h.key)
            except SegmentNotFoundError:
                h.reader.at_end = True
                if self._stream_exists(h.scope, h.stream):
                    raise TruncatedDataError(h.key, h.reader.offset, None) from None
            else:
                time.sleep(SCALE_WAIT_S)
            return None
        except BaseException:
            self._snapshot_key = None  # e.g. a lost connection: whatever moved, the snapshot is stale
            raise
        if event is None:
            # Nothing came, yet the place may have moved past batches nobody sees (markers, aborted
            # transactions): the next event's positions are taken afresh.
            self._snapshot_key = None
            return None
        self._progressed = True
        return self._event(h, event)

    def _stream_exists(self, scope: str, stream: str) -> bool:
        """Whether the stream still exists (one being deleted does not)."""
        try:
            described = self.group.describe(scope, stream, fresh=True)
        except StreamNotFoundError:
            return False
        return described.state != "deleting"

    def _event(self, h: _Held, event: SegmentEvent) -> EventRead[T]:
        """The ``EventRead`` of ``event`` just read from ``h``, with the reader's position after it."""
        data = self.serializer.deserialize(event.data)
        key, reader = h.key, h.reader
        if self._snapshot_key != key:
            # The first event of this segment since another's (or since any place moved otherwise):
            # every held segment's place afresh, for this segment's events from now on.
            self._snapshot = {k: SegmentPosition(o.reader.offset, o.reader.skip) for k, o in self._held.items()}
            self._snapshot_key = key
        segments = dict(self._snapshot)  # the held segments in the reader's order, as position() has them
        segments[key] = SegmentPosition(reader.offset, reader.skip)
        position = _frozen(Position, {"segments": segments, "generation": self._generation})
        pointer = _frozen(EventPointer, {"scope": h.scope, "stream": h.stream, "segment_id": event.segment_id,
                                         "offset": event.position, "index": event.index})
        return _frozen(EventRead, {
            "data": data, "routing_key": event.routing_key, "position": position, "scope": h.scope,
            "stream": h.stream, "segment_id": event.segment_id, "kafka_offset": event.kafka_offset,
            "partition": event.partition, "timestamp_ms": event.timestamp_ms, "is_checkpoint": False,
            "checkpoint_name": None, "is_read_completed": False, "event_pointer": pointer})

    def get_current_time_window(self, stream: str) -> watermarks.TimeWindow:
        """Bounds on event times around this reader's position in ``stream`` ("scope/stream", or a
        stream of the group's scope), from the marks its writers noted (``note_time``), as Pravega's
        ``getCurrentTimeWindow``: events it has still to read there carry times at or after
        ``lower_time_bound``, events it returned times at or before ``upper_time_bound`` (None where
        not known yet, e.g. before this reader holds a segment of it). Neither goes back (an upper
        bound may become unknown, when no writer has noted a time ahead of the reader)."""
        scope, name = split_stream(self.group.scope, stream)
        qualified = f"{scope}/{name}"
        held = {parse_segment_name(k)[2]: h.reader.offset for k, h in self._held.items()
                if (h.scope, h.stream) == (scope, name)}
        marks = self._marks.get(qualified)
        if marks is None:
            try:
                marks = self._marks[qualified] = watermarks.open_marks(self.controller, scope, name)
            except StoreError:
                return self._windows.get(qualified, watermarks.TimeWindow(None, None))
        marks.fetch_updates()
        described = self.group.describe(scope, name)
        ranges = watermarks.ranges_of(described.history)
        if any(sid not in ranges for sid in held):
            ranges = watermarks.ranges_of(self.group.describe(scope, name, fresh=True).history)
        window = watermarks.time_window(marks.state, held, ranges)
        before = self._windows.get(qualified)
        if before is not None:
            # Never back: a writer that joins later cannot lower what was known. An upper bound that
            # became unknown (no writer's mark ahead any more) stays unknown: the old one may no
            # longer hold for what was read since.
            upper = window.upper_time_bound
            window = watermarks.TimeWindow(_highest(before.lower_time_bound, window.lower_time_bound),
                                           None if upper is None else _highest(before.upper_time_bound, upper))
        self._windows[qualified] = window
        return window

    def fetch_event(self, pointer: EventPointer) -> T:
        """The event at ``pointer`` read again with this reader's serializer (Pravega's
        ``EventStreamReader.fetchEvent``); it changes nothing of the reader's place."""
        return fetch_event(self.controller, pointer, self.serializer)

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
        self._snapshot_key = None  # the held segments may change: events' positions are taken afresh
        state = self._state()
        if state.generation != self._generation:
            # A reset took every reader offline; a reader of the new generation under this id (made
            # again by the application) is not this one.
            self._held.clear()
            self._reset = self._closed = True
            raise self._reinitialization_required()
        mine = state.readers.get(self.reader_id)
        if mine is None:
            self._held.clear()
            raise ReaderNotInReaderGroupError(f"reader {self.reader_id!r} is not online in {self.group!r}")
        for key in [k for k in self._held if k not in mine]:
            del self._held[key]
        for key, pos in mine.items():
            if key not in self._held:
                scope, stream, _ = parse_segment_name(key)
                self._held[key] = _Held(key, scope, stream, self._open(scope, stream, key, pos))

    def _open(self, scope: str, stream: str, key: str, pos: SegmentPosition) -> SegmentEventReader:
        """A reader of ``key`` from ``pos``, up to its end cut's offset if it has one (the server
        returns nothing past it and reports the end there)."""
        end = self._state().end.get(key)
        return SegmentEventReader(self.controller, scope, stream, parse_segment_name(key)[2], pos.offset, pos.skip,
                                  end_offset=None if end is None else end.offset)

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

    def _start_automatic_checkpoint(self) -> None:
        """Start a checkpoint of the group's automatic interval, as Pravega's readers do: whichever
        reader's timer runs out first, unless a checkpoint is under way already (every reader's timer
        restarts when it records one). Only the newest completed automatic checkpoint is kept besides
        the one started, so they never push the application's own out."""
        self._checkpointed = time.monotonic()
        name = f"{AUTO_CHECKPOINT_PREFIX}{uuid.uuid4().hex}"

        def start(state: ReaderGroupState) -> tuple[Updates[dict[str, Any]], None]:
            if self.reader_id not in state.readers or any(not c.silent for c in state.checkpoints) \
                    or len(state.checkpoints) >= rgs.MAX_PENDING_CHECKPOINTS:
                return Updates([]), None
            older = [n for n in state.completed_checkpoints if n.startswith(AUTO_CHECKPOINT_PREFIX)][:-1]
            return Updates([*(rgs.forget_checkpoint(n) for n in older), rgs.create_checkpoint(name)]), None

        self.group._update(start)

    def _checkpoint(self, name: str, deadline: float) -> EventRead[T] | None:
        """Finish a batch this reader is inside of (its events come before the checkpoint), else
        record the checkpoint and return its event."""
        inside = [h for k, h in sorted(self._held.items()) if h.reader.skip > 0 and not h.reader.at_end]
        if inside:
            wait = max(0, min(POLL_MS, int((deadline - time.monotonic()) * 1000)))
            return self._read(inside[0], wait)
        silent = any(c.name == name and c.silent for c in self._state().checkpoints)
        update = rgs.checkpoint_reader(self.reader_id, self._generation, name, self._positions())
        self.group._update(lambda state: (Updates([update]), None))
        position = self.position()
        self._reconcile()
        # The last reader to record a checkpoint completes it: it releases what lies before it.
        self.group._released_at_checkpoint(name, self._state())
        self._recorded = self._checkpointed = time.monotonic()
        self._progressed = False
        if silent:
            return None  # generate_stream_cuts: recorded, and the application sees nothing of it
        return EventRead(None, None, position, "", "", -1, -1, -1, -1, is_checkpoint=True, checkpoint_name=name)

    def _complete(self, h: _Held) -> None:
        """``h`` was read to its end: mark it completed with its successors (which become readable
        once all their predecessors are); later if the scale that sealed it is not visible yet."""
        scope, stream, sid = parse_segment_name(h.key)
        # At an end cut nothing follows (the state adds no successors for it): no need to look.
        successors = {} if h.key in self._state().end else self._successors(scope, stream, sid)
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
    def _reinitialization_required(self) -> ReinitializationRequiredError:
        return ReinitializationRequiredError(
            f"reader {self.reader_id!r}: {self.group!r} was reset since it was created; close it and create "
            "it again to read from the new positions")

    def close(self) -> None:
        """Go offline at the position of the last event returned: others take over from there. After
        a reset of the group it is offline already (and another reader may have its id): nothing."""
        for marks in self._marks.values():
            marks.close()
        self._marks.clear()
        if self._closed:
            return
        self._closed = True
        position, generation = self.position(), self._generation

        def leave(state: ReaderGroupState) -> tuple[Updates[dict[str, Any]], None]:
            if state.generation != generation or self.reader_id not in state.readers:
                return Updates([]), None
            return Updates([rgs.remove_reader(self.reader_id, dict(position.segments), generation)]), None

        self.group._update(leave)

    def __enter__(self) -> EventStreamReader[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EventStreamReader({self.reader_id} in {self.group.scope}/{self.group.name})"


def _listed_cuts(cuts: StreamCut | Mapping[Any, StreamCut] | Iterable[StreamCut]) -> list[StreamCut]:
    """One cut, a mapping whose values are cuts, or any iterable of cuts, as a list."""
    if isinstance(cuts, StreamCut):
        return [cuts]
    if isinstance(cuts, Mapping):
        return list(cuts.values())
    return list(cuts)
