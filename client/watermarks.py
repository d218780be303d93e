"""Watermarks (Pravega's ``EventStreamWriter.noteTime`` and ``EventStreamReader.getCurrentTimeWindow``).

A writer that notes a time ``t`` promises that the events it writes from then on carry times at or
after ``t``. ``note_time`` first flushes the writer, then records a **mark**: ``(t, cut)`` where
``cut`` is the stream's tail cut taken after the flush, so every event the writer wrote before noting
``t`` lies before the cut. Marks are kept per writer (the newest ``MARKS_KEPT``) in a state
synchronizer in the stream ``<scope>/_MARK<stream>``, created at the first note.

A reader's **time window** over a stream follows from its positions in the segments it holds: a mark
is *passed* when the reader's positions lie at or after the mark's cut throughout those segments'
key ranges. Then

* ``lower_time_bound`` = min over writers of the time of the writer's newest passed mark: whatever
  the reader has still to read of any writer was written after that writer noted its time, so it
  carries a time at or after the bound (None while some writer has no passed mark);
* ``upper_time_bound`` = max over writers of the time of the writer's oldest mark *ahead* (its cut
  at or after the reader's positions throughout those key ranges): whatever the reader has read was
  written before those marks, so it carries a time at or before the bound (None while some writer
  has no mark ahead of the reader: the nearest bound is unknown).

Both only grow as the reader moves on and writers note later times; a reader also never lets its
bounds go back (a writer that joins late cannot lower them).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from millrace.client.controller import ControllerClient
from millrace.client.streams import ScalingPolicy, StreamConfiguration
from millrace.client.synchronizer import StateSynchronizer, Updates, claim_synchronizer_format
from millrace.protocol.errors import StreamExistsError
from millrace.protocol.names import MARK_STREAM_PREFIX  # <scope>/_MARK<stream>, reserved as every "_" name is

MARKS_KEPT = 32  # per writer: a reader further behind than that sees its bounds from the oldest kept
COMPACT_EVERY = 64  # notes by one writer between compactions of the marks' stream

# writer id -> its marks, oldest first: [time, {segment id (as str): offset}]
Marks = dict[str, list[list[Any]]]


@dataclass(frozen=True)
class TimeWindow:
    """Bounds on the times of events around a reader's position (Pravega's ``TimeWindow``): events it
    has still to read carry times at or after ``lower_time_bound``, events it has read times at or
    before ``upper_time_bound``; None where not known yet."""

    lower_time_bound: int | None
    upper_time_bound: int | None

    @property
    def is_nearest_bound_unknown(self) -> bool:
        return self.lower_time_bound is None or self.upper_time_bound is None


class _MarksSerializer:
    def serialize(self, state: Marks) -> bytes:
        return json.dumps(state, separators=(",", ":")).encode()

    def deserialize(self, data: bytes) -> Marks:
        raw = json.loads(data)
        return {str(w): [[int(t), {str(k): int(v) for k, v in c.items()}] for t, c in marks]
                for w, marks in raw.items()}


class _UpdateSerializer:
    def serialize(self, update: dict[str, Any]) -> bytes:
        return json.dumps(update, separators=(",", ":")).encode()

    def deserialize(self, data: bytes) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(data)
        return parsed


def mark_stream(stream: str) -> str:
    return MARK_STREAM_PREFIX + stream


def _apply(state: Marks, update: Mapping[str, Any]) -> Marks:
    """A writer's new mark, kept if its time is not before the writer's newest (times only grow)."""
    new = copy.deepcopy(state)
    marks = new.setdefault(str(update["writer"]), [])
    if not marks or int(update["time"]) >= marks[-1][0]:
        marks.append([int(update["time"]), {str(k): int(v) for k, v in update["cut"].items()}])
        del marks[:-MARKS_KEPT]
    return new


def open_marks(controller: ControllerClient, scope: str, stream: str) -> StateSynchronizer[Marks, dict[str, Any]]:
    """The synchronizer of ``scope/stream``'s marks (its stream created at first use)."""
    name = mark_stream(stream)
    with contextlib.suppress(StreamExistsError):
        controller.create_stream(scope, name, StreamConfiguration(scaling=ScalingPolicy.fixed(1)))
    segment = controller.describe_stream(scope, name).segments[0].segment
    claim_synchronizer_format(controller, segment.name)
    sync: StateSynchronizer[Marks, dict[str, Any]] = StateSynchronizer(
        controller, scope, name, segment.segment_id, segment.name, _MarksSerializer(), _apply, _UpdateSerializer())
    sync.initialize({})
    return sync


class TimeNoter:
    """One writer's marks of ``scope/stream``: ``note(t)`` records ``(t, the stream's tail cut now)``
    (the caller made its events durable first). The marks' stream is opened at the first note."""

    def __init__(self, controller: ControllerClient, scope: str, stream: str, writer_id: str) -> None:
        self.controller = controller
        self.scope = scope
        self.stream = stream
        self.writer_id = writer_id
        self._sync: StateSynchronizer[Marks, dict[str, Any]] | None = None
        self._notes = 0

    def note(self, timestamp: int) -> None:
        described = self.controller.describe_stream(self.scope, self.stream)
        tail = {str(s.segment.segment_id): s.length or 0 for s in described.segments}
        if self._sync is None:
            self._sync = open_marks(self.controller, self.scope, self.stream)
        update = {"writer": self.writer_id, "time": int(timestamp), "cut": tail}
        self._sync.update(lambda state: Updates([update]))
        self._notes += 1
        if self._notes % COMPACT_EVERY == 0:
            self._sync.compact()  # the stream keeps only the newest state, not every note

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()


@dataclass(frozen=True)
class _Range:
    segment_id: int
    key_start: float
    key_end: float


def passed(mark: Mapping[int, int], held: Mapping[int, int], ranges: Mapping[int, _Range]) -> bool:
    """Whether positions ``held`` (segment id -> offset, the reader's) lie at or after the cut ``mark``
    throughout the held segments' key ranges: in the same segment at or past its offset, or in a
    segment of a later epoch than the mark's there."""
    return _ordered(mark, held, ranges, 1)


def ahead(mark: Mapping[int, int], held: Mapping[int, int], ranges: Mapping[int, _Range]) -> bool:
    """Whether the cut ``mark`` lies at or after positions ``held`` throughout the held segments' key
    ranges (so everything read from them lies before it)."""
    return _ordered(mark, held, ranges, -1)


def _ordered(mark: Mapping[int, int], held: Mapping[int, int], ranges: Mapping[int, _Range], sign: int) -> bool:
    """With ``sign`` 1, whether ``held`` lies at or after ``mark`` wherever their key ranges meet; with -1,
    whether ``mark`` lies at or after ``held`` (a segment of a later epoch lies after, whatever offset)."""
    for sid, offset in held.items():
        for mid, moff in mark.items():
            if sid not in ranges or mid not in ranges:
                return False
            h, c = ranges[sid], ranges[mid]
            if not (h.key_start < c.key_end and c.key_start < h.key_end):
                continue
            if mid == sid:
                if (offset - moff) * sign < 0:
                    return False
            elif ((sid >> 32) - (mid >> 32)) * sign <= 0:
                return False  # the other lies in a segment of the same or the wrong epoch there
    return True


def time_window(marks: Marks, held: Mapping[int, int], ranges: Mapping[int, _Range]) -> TimeWindow:
    """The bounds (module docstring) for a reader at ``held`` in one stream."""
    if not marks or not held:
        return TimeWindow(None, None)
    lowers: list[int | None] = []
    uppers: list[int | None] = []
    for writer_marks in marks.values():
        cuts = [(t, {int(k): v for k, v in c.items()}) for t, c in writer_marks]
        done = [t for t, c in cuts if passed(c, held, ranges)]
        later = [t for t, c in cuts if ahead(c, held, ranges)]
        lowers.append(max(done) if done else None)
        uppers.append(min(later) if later else None)
    lower = None if any(v is None for v in lowers) else min(v for v in lowers if v is not None)
    upper = None if any(v is None for v in uppers) else max(v for v in uppers if v is not None)
    return TimeWindow(lower, upper)


def ranges_of(history: Any) -> dict[int, _Range]:
    """segment id -> key range, from a stream description's epoch history."""
    return {s.segment_id: _Range(s.segment_id, s.key_start, s.key_end)
            for e in history for s in (*e.created, *e.sealed)}
