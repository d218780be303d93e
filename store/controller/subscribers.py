"""Subscribers of streams and consumption-based retention (Pravega's subscriber reader groups and
``StreamDataRetention``).

A subscriber (a reader group created with a retention type other than NONE) records per stream a
**retention cut**: everything before it may go, as far as that subscriber is concerned. The cuts live
in the system table ``_system/_tables/subscribers`` under ``<scope>/<stream>/<subscriber>`` (JSON:
segment id -> offset), written by the client through ``UPDATE_SUBSCRIBER_CUT``, so the server reads
them where it enforces retention.

A stream whose retention policy is ``CONSUMPTION`` is truncated, at each retention round, at the
**lower bound** of its subscribers' cuts (``lower_bound``): a cut at or before every subscriber's,
so no data a subscriber has not released is ever dropped. With no subscriber nothing is truncated.
A stream's cut updates and its truncation rounds run one at a time in the process (``_stream_lock``):
an update that returns has no round still truncating at the cuts as they were before it, so a group
that holds its data back (a reset moving its positions backwards) is safe from the moment its update
returns. On a cluster both run on the elected controller.
All calls block on table-segment I/O: call them from worker threads.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Mapping, Sequence

from millrace.store.controller.controller import Controller
from millrace.store.controller.errors import InvalidStreamCutError
from millrace.store.controller.names import parse_segment_name, segment_epoch
from millrace.store.controller.records import RetentionType, SegmentRange
from millrace.store.errors import SegmentExistsError, StreamNotFoundError

SUBSCRIBERS_TABLE = "_system/_tables/subscribers"

# A cut as callers give it: segment id or name -> offset.
CutMapping = Mapping[int | str, int] | Mapping[int, int] | Mapping[str, int]


def _prefix(scope: str, stream: str) -> bytes:
    return f"{scope}/{stream}/".encode()


_locks_guard = threading.Lock()
_locks: dict[tuple[str, str], threading.Lock] = {}


def _stream_lock(scope: str, stream: str) -> threading.Lock:
    """The lock serialising ``scope/stream``'s cut updates with its truncation rounds in this process
    (the gateway builds a ``Subscribers`` per use, so the lock cannot live on the instance)."""
    with _locks_guard:
        return _locks.setdefault((scope, stream), threading.Lock())


class Subscribers:
    """The retention cuts of every stream's subscribers, in the controller's tables."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.tables = controller.tables
        if not self.tables.exists(SUBSCRIBERS_TABLE):
            with contextlib.suppress(SegmentExistsError):  # another instance got there first
                self.tables.create_table(SUBSCRIBERS_TABLE)

    def update(self, scope: str, stream: str, subscriber: str, cut: CutMapping | None) -> None:
        """Record ``subscriber``'s retention cut of ``scope/stream`` (segment id or name -> offset);
        None removes the subscriber. StreamNotFoundError for a stream that is not there;
        InvalidStreamCutError for a cut that is not one of the stream's."""
        if not self.controller.stream_exists(scope, stream):
            raise StreamNotFoundError(f"{scope}/{stream}")
        if not subscriber or "\n" in subscriber:
            raise InvalidStreamCutError(f"invalid subscriber name {subscriber!r}")
        key = _prefix(scope, stream) + subscriber.encode()
        if cut is None:
            with _stream_lock(scope, stream):
                self.tables.remove(SUBSCRIBERS_TABLE, [key])
            return
        offsets = self._validated(scope, stream, cut)
        with _stream_lock(scope, stream):  # waits for a round that read the cuts before this one
            self.tables.put(SUBSCRIBERS_TABLE, [(key, json.dumps({str(k): v for k, v in offsets.items()}).encode())])

    def cuts(self, scope: str, stream: str) -> dict[str, dict[int, int]]:
        """Every subscriber of ``scope/stream`` with its retention cut (segment id -> offset)."""
        prefix = _prefix(scope, stream)
        return {bytes(e.key)[len(prefix):].decode(): {int(k): int(v) for k, v in json.loads(e.value).items()}
                for e in self.tables.entries(SUBSCRIBERS_TABLE, prefix=prefix)}

    def forget_stream(self, scope: str, stream: str) -> None:
        """Drop every subscriber of a deleted stream."""
        keys = [bytes(e.key) for e in self.tables.entries(SUBSCRIBERS_TABLE, prefix=_prefix(scope, stream))]
        if keys:
            self.tables.remove(SUBSCRIBERS_TABLE, keys)

    def enforce(self, scope: str, stream: str) -> dict[int, int] | None:
        """Truncate a stream of CONSUMPTION retention at the lower bound of its subscribers' cuts;
        the cut truncated at, or None when nothing was (another policy, no subscribers, or the head
        is there or past it already, its segments truncated)."""
        with _stream_lock(scope, stream):  # the cuts read are the cuts truncated at: no update in between
            return self._enforce(scope, stream)

    def _enforce(self, scope: str, stream: str) -> dict[int, int] | None:
        info = self.controller.get_stream(scope, stream)
        if info.config.retention.type != RetentionType.CONSUMPTION:
            return None
        cuts = list(self.cuts(scope, stream).values())
        if not cuts:
            return None
        known = {r.segment_id: r for e in self.controller.get_epoch_history(scope, stream)
                 for r in e.ranges(scope, stream)}
        bound = lower_bound(cuts, known)
        if bound is None or (bound == info.truncation and self.controller.truncation_done(scope, stream, bound)):
            return None  # (a recorded cut not known done is truncated at again: a failure may have cut it short)
        try:
            cut: dict[int | str, int] = dict(bound.items())  # segment ids (truncate_stream takes names too)
            self.controller.truncate_stream(scope, stream, cut)
        except InvalidStreamCutError:
            return None  # the head lies past it somewhere (a truncation by hand): nothing to release
        return bound

    def _validated(self, scope: str, stream: str, cut: CutMapping) -> dict[int, int]:
        known = {r.segment_id: r for e in self.controller.get_epoch_history(scope, stream)
                 for r in e.ranges(scope, stream)}
        offsets: dict[int, int] = {}
        for segment, offset in cut.items():
            if isinstance(segment, str) and not segment.isdigit():
                try:
                    found = parse_segment_name(segment)
                except ValueError:
                    raise InvalidStreamCutError(f"not a segment name: {segment!r}") from None
                if found[:2] != (scope, stream):
                    raise InvalidStreamCutError(f"segment {segment} is not in {scope}/{stream}")
                sid = found[2]
            else:
                sid = int(segment)
            if sid not in known or offset < 0:
                raise InvalidStreamCutError(f"{scope}/{stream} has no segment {sid} (offset {offset})")
            offsets[sid] = offset
        if not _covers_once([known[s] for s in offsets]):
            raise InvalidStreamCutError(f"a cut of {scope}/{stream} must cover the key space exactly once: "
                                        f"{sorted(offsets)}")
        return offsets


def _covers_once(ranges: list[SegmentRange]) -> bool:
    position = 0.0
    for r in sorted(ranges, key=lambda r: r.key_start):
        if r.key_start != position:
            return False
        position = r.key_end
    return position == 1.0


def lower_bound(cuts: Sequence[Mapping[int, int]], known: Mapping[int, SegmentRange]) -> dict[int, int] | None:
    """A cut at or before every one of ``cuts``: where their segments overlap, the one created in the
    older epoch wins (the other lies after it), at the lowest offset any cut gives it. None if the
    result does not cover the key space exactly once (cuts too far apart to combine: nothing is
    released then, which is always safe)."""
    offered: dict[int, int] = {}
    for cut in cuts:
        for sid, offset in cut.items():
            if sid not in known:
                return None  # a segment the stream no longer knows: safest to release nothing
            offered[sid] = min(offset, offered.get(sid, offset))
    chosen: dict[int, int] = {}
    for sid in sorted(offered, key=lambda s: (segment_epoch(s), known[s].key_start)):
        if not any(known[sid].overlaps(known[c]) for c in chosen):
            chosen[sid] = offered[sid]
    return chosen if _covers_once([known[s] for s in chosen]) else None
