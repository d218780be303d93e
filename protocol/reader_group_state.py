"""A reader group's shared state as plain data, and the pure functions that change it.

This is the model of Pravega's ``ReaderGroupState`` / ``ReaderGroupStateManager``: no I/O here. The
state lives in a state synchronizer (``client/synchronizer.py``, entries as ``protocol/synchronizer.py``
encodes them) in the stream ``<scope>/_RG<group>`` (``STATE_STREAM_PREFIX``); every change is one
``Update`` (a JSON dict) applied with ``apply``, appended conditionally on the revision it was computed
from, so every member applies the same updates to the same states in the same order. It lives in
``protocol/`` because both sides read it: the client decides and writes (``client/reader_group.py``), the
server only folds a group's entries to show it (``gateway/http/console/reader_groups.py``, read-only).

Segments are named by their full segment names (``scope/stream/<n>.#epoch.<e>``), which carry the
stream, so one state serves several streams. A position in a segment is ``(offset, skip)``: the
batch boundary to read from and how many records of that batch were already delivered.

Invariants (checked by tests/client/test_reader_group_model.py):

* **One owner.** A segment is in at most one place: one reader's assignment, ``unassigned``, or
  ``future`` (a successor waiting for its predecessors). No segment is read by two readers at once.
* **The frontier covers each stream's key space exactly once**: the assigned and unassigned segments,
  plus the completed predecessors a future segment still waits beside (held at their end offsets).
  So nothing is skipped, and a checkpoint taken from the frontier is a valid stream cut.
* **Successors after all predecessors.** A successor becomes assignable only when every one of its
  predecessors is completed (read to its end), so events of one routing key come out in order
  across splits and merges.
* **Fair share.** With S assignable segments and R online readers a reader acquires unassigned
  segments while it holds fewer than ceil(S / R) and no more than the least loaded other reader;
  it releases one while it holds more than ceil(S / R) or more than max(1, unassigned) above the
  least loaded other reader (Pravega's rule: ceil alone would leave a new reader idle beside two readers holding
  two segments each). A released segment cannot come back to the reader that released it (it then
  still holds more than the least loaded), so segments do not ping-pong; once settled nothing is
  unassigned and holdings differ by at most one.
* **A reader with a checkpoint pending changes nothing it holds** (no acquire, release or
  completion) until it has recorded its positions for it, and reads nothing new before (it only
  finishes a batch it is inside of). So the cut (the waiting readers' positions, plus the
  unassigned and held-completed segments' positions when the checkpoint started) covers the key
  space exactly once and splits the events exactly where each reader returned its checkpoint. (An
  acquisition would not be harmless: a successor made unassigned after the start by a reader that
  had already checkpointed would enter the cut beside its predecessor.)
* **Bounded reads end at the end cuts.** A segment of an end cut (``end``) is read only up to its
  end offset; completing it there adds none of its successors (they lie past the cut) and keeps it in
  ``ended`` at that offset, so the frontier still covers the key space and a checkpoint's cut stays
  a valid cut. The group's read is complete (``read_completed``) when nothing is held, unassigned or
  waiting any more.
* **Stale updates are no-ops.** Every reader update names the reader and the state's generation
  (bumped by ``reset``); an update from a reader that is offline, of another generation, or about a
  segment it no longer holds changes nothing. Updates are total functions: applying never fails.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from millrace.protocol.names import parse_segment_name

Update = dict[str, Any]
SegmentKey = str  # a segment's full name: scope/stream/<number>.#epoch.<epoch>

STATE_STREAM_PREFIX = "_RG"  # a group's state stream: <scope>/_RG<name>, as Pravega names it
MAX_PENDING_CHECKPOINTS = 3  # as Pravega's default maxOutstandingCheckpointRequest
COMPLETED_CHECKPOINTS_KEPT = 10


@dataclass(frozen=True, order=True)
class SegmentPosition:
    """Where reading a segment resumes: a batch boundary and the records of that batch already
    delivered."""

    offset: int
    skip: int = 0

    def to_json(self) -> list[int]:
        return [self.offset, self.skip]

    @classmethod
    def from_json(cls, raw: Iterable[int]) -> SegmentPosition:
        offset, skip = raw
        return cls(int(offset), int(skip))


Positions = dict[SegmentKey, SegmentPosition]


@dataclass
class PendingCheckpoint:
    name: str
    waiting: list[str]  # readers that have not recorded their positions yet
    positions: Positions  # what is recorded so far (starts with the unassigned and held segments)
    silent: bool = False  # readers record it without returning a checkpoint event (generate_stream_cuts)


@dataclass
class ReaderGroupState:
    """The whole shared state. Treat instances as immutable: transitions return new ones."""

    streams: list[str]  # "scope/stream", in the order the group was configured
    generation: int = 0  # bumped by reset: updates of an older generation are ignored
    readers: dict[str, Positions] = field(default_factory=dict)  # reader -> held segments, last recorded
    unassigned: Positions = field(default_factory=dict)
    # successor -> {predecessor: its end offset once completed, None while it is still being read}
    future: dict[SegmentKey, dict[SegmentKey, int | None]] = field(default_factory=dict)
    checkpoints: list[PendingCheckpoint] = field(default_factory=list)
    completed_checkpoints: dict[str, Positions] = field(default_factory=dict)  # oldest first
    end: Positions = field(default_factory=dict)  # the end cuts' segments (bounded reads): read up to these
    # What the group was created with (streams, start and end cuts as given; reset replaces streams and
    # start), to refuse a create with another one; None for groups stored before it was kept.
    config: dict[str, Any] | None = None
    ended: Positions = field(default_factory=dict)  # end-cut segments read to their end offsets

    # -- queries -------------------------------------------------------------------------------------
    def holder(self, key: SegmentKey) -> str | None:
        for reader, held in self.readers.items():
            if key in held:
                return reader
        return None

    def assignable_count(self) -> int:
        return sum(len(held) for held in self.readers.values()) + len(self.unassigned)

    def fair_share(self) -> int:
        """ceil(assignable segments / online readers): what each reader should hold at most."""
        if not self.readers:
            return 0
        return math.ceil(self.assignable_count() / len(self.readers))

    def checkpoint_for(self, reader: str) -> str | None:
        """The oldest checkpoint still waiting for ``reader``'s positions."""
        for pending in self.checkpoints:
            if reader in pending.waiting:
                return pending.name
        return None

    def held_completed(self) -> Positions:
        """Completed segments kept in the frontier because a successor still waits for a sibling."""
        held: Positions = {}
        for preds in self.future.values():
            for pred, end in preds.items():
                if end is not None:
                    held[pred] = SegmentPosition(end)
        return held

    def frontier(self) -> Positions:
        """Every segment of the frontier at its last recorded position (covers the key space once)."""
        out: Positions = dict(self.ended)
        out.update(self.held_completed())
        out.update(self.unassigned)
        for held in self.readers.values():
            out.update(held)
        return out

    def read_completed(self) -> bool:
        """Whether every segment the group has to read was read to its end (its end cut's offset, or
        a sealed end without successors): nothing is held, unassigned or waiting for predecessors."""
        return not self.unassigned and not self.future and not any(self.readers.values())

    # -- JSON ----------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "streams": list(self.streams),
            "generation": self.generation,
            "readers": {r: _positions_to_json(p) for r, p in self.readers.items()},
            "unassigned": _positions_to_json(self.unassigned),
            "future": {s: dict(p) for s, p in self.future.items()},
            "checkpoints": [{"name": c.name, "waiting": list(c.waiting), "positions": _positions_to_json(c.positions),
                             "silent": c.silent} for c in self.checkpoints],
            "completed_checkpoints": {n: _positions_to_json(p) for n, p in self.completed_checkpoints.items()},
            "end": _positions_to_json(self.end),
            "ended": _positions_to_json(self.ended),
            "config": copy.deepcopy(self.config),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReaderGroupState:
        return cls(
            streams=[str(s) for s in raw["streams"]],
            generation=int(raw["generation"]),
            readers={str(r): _positions_from_json(p) for r, p in raw["readers"].items()},
            unassigned=_positions_from_json(raw["unassigned"]),
            future={str(s): {str(k): (None if v is None else int(v)) for k, v in p.items()}
                    for s, p in raw["future"].items()},
            checkpoints=[PendingCheckpoint(str(c["name"]), [str(w) for w in c["waiting"]],
                                           _positions_from_json(c["positions"]), bool(c.get("silent", False)))
                         for c in raw["checkpoints"]],
            completed_checkpoints={str(n): _positions_from_json(p) for n, p in raw["completed_checkpoints"].items()},
            # Absent from states stored before bounded reads existed: unbounded.
            end=_positions_from_json(raw.get("end", {})),
            ended=_positions_from_json(raw.get("ended", {})),
            config=copy.deepcopy(raw.get("config")),
        )


def left_to_read(state: ReaderGroupState, qualified: str,
                 successors: Mapping[int, Iterable[int]]) -> dict[int, tuple[SegmentPosition | None, int | None]]:
    """The segments of stream ``qualified`` ("scope/stream") the group has yet to read past, by segment
    id: the frontier's, with their recorded positions, and every successor reachable from them that no
    reader reached yet (position None: from its start); none past an end cut. Each with its end cut's
    offset (None: read to its end). ``successors``: segment id -> its successors' ids. What the client's
    ``ReaderGroup.unread_bytes`` and the server's reader-group views count, the lengths being theirs to
    read."""
    prefix = f"{qualified}/"
    mine = {segment_id(k): p for k, p in state.frontier().items() if k.startswith(prefix)}
    ends = {segment_id(k): p.offset for k, p in state.end.items() if k.startswith(prefix)}
    todo, seen = list(mine), set(mine)
    while todo:
        sid = todo.pop()
        for succ in () if sid in ends else successors.get(sid, ()):
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return {sid: (mine.get(sid), ends.get(sid)) for sid in sorted(seen)}


def segment_id(key: SegmentKey) -> int:
    """The segment id of a segment key (its name)."""
    return parse_segment_name(key)[2]


def _positions_to_json(positions: Mapping[SegmentKey, SegmentPosition]) -> dict[str, list[int]]:
    return {k: p.to_json() for k, p in sorted(positions.items())}


def _positions_from_json(raw: Mapping[str, Any]) -> Positions:
    return {str(k): SegmentPosition.from_json(v) for k, v in raw.items()}


def initial_state(streams: Iterable[str], start: Mapping[SegmentKey, SegmentPosition],
                  end: Mapping[SegmentKey, SegmentPosition] | None = None,
                  config: dict[str, Any] | None = None) -> ReaderGroupState:
    """A group with no readers whose frontier is ``start`` (cuts of every stream, merged), reading up
    to ``end`` (end cuts of some or all streams, merged; the others are read without end)."""
    return ReaderGroupState(streams=list(streams), unassigned=dict(start), end=dict(end or {}), config=config)


# -- decisions (what a reader asks for; evaluated on the newest state inside a conditional update) -----
def _least_other(state: ReaderGroupState, reader: str) -> int | None:
    others = [len(held) for r, held in state.readers.items() if r != reader]
    return min(others) if others else None


def segments_to_acquire(state: ReaderGroupState, reader: str) -> list[SegmentKey]:
    """Unassigned segments ``reader`` should take now: up to its fair share if no other reader holds
    fewer; none while a checkpoint waits for it."""
    held = state.readers.get(reader)
    if held is None or state.checkpoint_for(reader) is not None:
        return []
    least = _least_other(state, reader)
    if least is not None and len(held) > least:
        return []  # a reader holding fewer takes it
    wanted = state.fair_share() - len(held)
    if least is not None:
        wanted = min(wanted, least + 1 - len(held))
    return sorted(state.unassigned)[:max(0, wanted)]


def segment_to_release(state: ReaderGroupState, reader: str) -> SegmentKey | None:
    """One segment ``reader`` should give up (it holds more than its fair share, or more than one
    above the least loaded other reader), or None."""
    held = state.readers.get(reader)
    if held is None or state.checkpoint_for(reader) is not None or not held:
        return None
    least = _least_other(state, reader)
    # Unassigned segments will go to the least loaded first: do not release for them meanwhile.
    if len(held) <= state.fair_share() and (least is None or len(held) <= least + max(1, len(state.unassigned))):
        return None
    return max(held)  # any would do; the last by name keeps the choice reproducible (tests, replays)


# -- updates: constructors ------------------------------------------------------------------------------
def add_reader(reader: str) -> Update:
    return {"op": "add_reader", "reader": reader}


def remove_reader(reader: str, position: Mapping[SegmentKey, SegmentPosition] | None,
                  generation: int | None = None) -> Update:
    """``generation``: the one ``position`` was taken in; a position of an older generation (taken
    before a reset) is ignored, as if none were given."""
    return {"op": "remove_reader", "reader": reader, "generation_of_position": generation,
            "position": None if position is None else _positions_to_json(position)}


def acquire(reader: str, generation: int, keys: Iterable[SegmentKey]) -> Update:
    return {"op": "acquire", "reader": reader, "generation": generation, "segments": sorted(keys)}


def release(reader: str, generation: int, key: SegmentKey, position: SegmentPosition) -> Update:
    return {"op": "release", "reader": reader, "generation": generation, "segment": key,
            "position": position.to_json()}


def record_positions(reader: str, generation: int, positions: Mapping[SegmentKey, SegmentPosition]) -> Update:
    return {"op": "record_positions", "reader": reader, "generation": generation,
            "positions": _positions_to_json(positions)}


def complete_segment(reader: str, generation: int, key: SegmentKey, end_offset: int,
                     successors: Mapping[SegmentKey, Iterable[SegmentKey]]) -> Update:
    """``successors``: each successor of ``key`` with all of its predecessors (from the stream's
    epoch history); empty when the stream is sealed."""
    return {"op": "complete_segment", "reader": reader, "generation": generation, "segment": key,
            "end_offset": end_offset, "successors": {s: sorted(p) for s, p in sorted(successors.items())}}


def create_checkpoint(name: str, silent: bool = False) -> Update:
    """``silent``: readers record it without returning a checkpoint event (a cut for the application,
    not a point its readers mark)."""
    return {"op": "create_checkpoint", "name": name, "silent": silent}


def forget_checkpoint(name: str) -> Update:
    """Drop a checkpoint, pending or completed (one ``generate_stream_cuts`` took its cuts from or gave
    up on), so it neither holds readers up nor pushes the application's own out of the
    ``COMPLETED_CHECKPOINTS_KEPT``."""
    return {"op": "forget_checkpoint", "name": name}


def checkpoint_reader(reader: str, generation: int, name: str,
                      positions: Mapping[SegmentKey, SegmentPosition]) -> Update:
    return {"op": "checkpoint_reader", "reader": reader, "generation": generation, "name": name,
            "positions": _positions_to_json(positions)}


def cancel_checkpoints() -> Update:
    return {"op": "cancel_checkpoints"}


def reset(streams: Iterable[str], positions: Mapping[SegmentKey, SegmentPosition],
          config: dict[str, Any] | None = None) -> Update:
    """Every reader goes offline (it must be created again, as after Pravega's reset); the group reads
    ``streams`` from ``positions``; ``config`` replaces the recorded configuration if given."""
    return {"op": "reset", "streams": list(streams), "positions": _positions_to_json(positions), "config": config}


# -- updates: application (pure, total) ------------------------------------------------------------------
def apply(state: ReaderGroupState, update: Mapping[str, Any]) -> ReaderGroupState:
    """The state after ``update``; ``state`` is not modified. Unknown ops raise (a newer writer)."""
    op = update["op"]
    handler = _HANDLERS.get(op)
    if handler is None:
        raise ValueError(f"unknown reader group update {op!r}")
    new = copy.deepcopy(state)
    handler(new, update)
    return new


def _owns(state: ReaderGroupState, update: Mapping[str, Any]) -> Positions | None:
    """The segments of the update's reader, if the update is current (reader online, same generation)."""
    if update.get("generation", state.generation) != state.generation:
        return None
    return state.readers.get(update["reader"])


def _apply_add_reader(state: ReaderGroupState, update: Mapping[str, Any]) -> None:
    state.readers.setdefault(update["reader"], {})


def _apply_remove_reader(state: ReaderGroupState, update: Mapping[str, Any]) -> None:
    reader = update["reader"]
    held = state.readers.pop(reader, None)
    if held is None:
        return
    given = None if update["position"] is None else _positions_from_json(update["position"])
    if update.get("generation_of_position") not in (None, state.generation):
        given = None  # taken before a reset: it says nothing about what the reader holds now
    # Only segments the reader still holds: a position may name segments it has since released or
    # completed (their newer records win), and may lack segments acquired after it was taken (their
    # recorded position is where reading them began).
    final = {key: (given.get(key, pos) if given is not None else pos) for key, pos in held.items()}
    state.unassigned.update(final)
    _checkpoint_positions(state, reader, final)


def _apply_acquire(state: ReaderGroupState, update: Mapping[str, Any]) -> None:
    held = _owns(state, update)
    if held is None or state.checkpoint_for(update["reader"]) is not None:
        return
    for key in update["segments"]:
        if key in state.unassigned:
            held[key] = state.unassigned.pop(key)


def _apply_release(state: ReaderGroupState, update: Mapping[str, Any]) -> None:
    held = _owns(state, update)
    key = update["segment"]
    if held is None or key not in held or state.checkpoint_for(update["reader"]) is not None:
        return
    del held[key]
    state.unassigned[key] = SegmentPosition.from_json(update["position"])


def _apply_record_positions(state: ReaderGroupState, update: Mapping[str, Any]) -> None:
    held = _owns(state, update)
    if held is None:
        return
    for key, pos in _positions_from_json(update["positions"]).items():
        if key in held:
            held[key] = pos


def _apply_complete_segment(state: ReaderGroupState, update: Mapping[str, Any]) -> None:
    held = _owns(state, update)
    key = update["segment"]
    if held is None or key not in held or state.checkpoint_for(update["reader"]) is not None:
        return
    del held[key]
    end = int(update["end_offset"])
    if key in state.end:
        # Read to its end cut: what follows it lies past the cut, whatever successors it has.
        state.ended[key] = SegmentPosition(end)
        return
    for successor, preds in update["successors"].items():
        if successor in state.unassigned or state.holder(successor) is not None:
            continue  # already assignable (a repeated completion): nothing waits any more
        waiting = state.future.setdefault(successor, {p: None for p in preds})
        waiting[key] = end
        if all(v is not None for v in waiting.values()):
            del state.future[successor]
            state.unassigned[successor] = SegmentPosition(0)


def _apply_create_checkpoint(state: ReaderGroupState, update: Mapping[str, Any]) -> None:
    name = update["name"]
    if any(c.name == name for c in state.checkpoints) or name in state.completed_checkpoints:
        return
    known = dict(state.ended)
    known.update(state.held_completed())
    known.update(state.unassigned)
    state.checkpoints.append(PendingCheckpoint(name, sorted(state.readers), known, bool(update.get("silent", False))))
    _complete_checkpoints(state)


def _apply_checkpoint_reader(state: ReaderGroupState, update: Mapping[str, Any]) -> None:
    held = _owns(state, update)
    reader = update["reader"]
    if held is None or state.checkpoint_for(reader) != update["name"]:
        return
    positions = {k: p for k, p in _positions_from_json(update["positions"]).items() if k in held}
    held.update(positions)
    _checkpoint_positions(state, reader, held)


def _checkpoint_positions(state: ReaderGroupState, reader: str, positions: Positions) -> None:
    """``reader`` records ``positions`` for the oldest checkpoint waiting for it (or, going offline,
    for every one: it will never record another)."""
    for pending in state.checkpoints:
        if reader in pending.waiting:
            pending.waiting.remove(reader)
            pending.positions.update(positions)
            if reader in state.readers:
                break
    _complete_checkpoints(state)


def _complete_checkpoints(state: ReaderGroupState) -> None:
    for pending in [c for c in state.checkpoints if not c.waiting]:
        state.checkpoints.remove(pending)
        state.completed_checkpoints[pending.name] = pending.positions
    while len(state.completed_checkpoints) > COMPLETED_CHECKPOINTS_KEPT:
        del state.completed_checkpoints[next(iter(state.completed_checkpoints))]


def _apply_cancel_checkpoints(state: ReaderGroupState, update: Mapping[str, Any]) -> None:
    state.checkpoints = []


def _apply_forget_checkpoint(state: ReaderGroupState, update: Mapping[str, Any]) -> None:
    state.checkpoints = [c for c in state.checkpoints if c.name != update["name"]]
    state.completed_checkpoints.pop(update["name"], None)


def _apply_reset(state: ReaderGroupState, update: Mapping[str, Any]) -> None:
    state.streams = [str(s) for s in update["streams"]]
    state.generation += 1
    state.readers = {}  # every reader is created again (Pravega's ReinitializationRequired)
    if update.get("config") is not None:
        state.config = copy.deepcopy(update["config"])
    state.unassigned = _positions_from_json(update["positions"])
    state.future = {}
    state.ended = {}  # the end cuts stay: positions at or before them are read up to them again
    state.checkpoints = []


_HANDLERS = {
    "add_reader": _apply_add_reader,
    "remove_reader": _apply_remove_reader,
    "acquire": _apply_acquire,
    "release": _apply_release,
    "record_positions": _apply_record_positions,
    "complete_segment": _apply_complete_segment,
    "create_checkpoint": _apply_create_checkpoint,
    "checkpoint_reader": _apply_checkpoint_reader,
    "cancel_checkpoints": _apply_cancel_checkpoints,
    "forget_checkpoint": _apply_forget_checkpoint,
    "reset": _apply_reset,
}


# -- bytes: how the state and its updates are written in the synchronizer's entries ----------------------
# (compact UTF-8 JSON, what the client's state serializer and ``JsonSerializer`` write; a reader of the
# segment, the server among them, decodes them with these.)
def encode_state(state: ReaderGroupState) -> bytes:
    return json.dumps(state.to_json(), separators=(",", ":")).encode()


def decode_state(data: bytes) -> ReaderGroupState:
    return ReaderGroupState.from_json(json.loads(data))


def encode_update(update: Mapping[str, Any]) -> bytes:
    return json.dumps(update, separators=(",", ":")).encode()


def decode_update(data: bytes) -> Update:
    decoded = json.loads(data)
    if not isinstance(decoded, dict):
        raise ValueError(f"a reader group update is a JSON object, not {type(decoded).__name__}")
    return decoded
