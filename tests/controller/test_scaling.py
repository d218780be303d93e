"""Stream scaling in the controller: split/merge semantics, the epoch history, crash safety
(interrupted scales roll forward) and concurrent scales."""

from __future__ import annotations

import threading

import pytest

from millrace.store.controller import (
    Controller,
    EpochRecord,
    InvalidScaleError,
    ScaleConflictError,
    ScaleReason,
    SegmentRange,
    StreamConfiguration,
    StreamSealedError,
    StreamState,
    segment_id,
)
from millrace.store.controller.records import PendingScale, StreamRecord
from millrace.store.errors import SegmentNotFoundError, SegmentSealedError
from millrace.store.tables import TableStore
from tests.tables.harness import StoreHarness


def _stream(controller: Controller, segments: int = 1, name: str = "s") -> None:
    if not controller.scope_exists("sc"):
        controller.create_scope("sc")
    controller.create_stream("sc", name, StreamConfiguration(initial_segments=segments))


def _layout(controller: Controller, stream: str = "s") -> list[tuple[int, float, float]]:
    return [(r.segment_id, r.key_start, r.key_end) for r in controller.get_current_segments("sc", stream)]


def test_split_seals_predecessor_and_creates_successors(harness: StoreHarness, controller: Controller) -> None:
    _stream(controller, 1)
    (s0,) = controller.get_current_segments("sc", "s")
    harness.store.append(s0.name, b"before").result()
    epoch = controller.split_segment("sc", "s", s0.segment_id, [0.25, 0.5], ScaleReason.SCALE_UP)
    assert epoch.epoch == 1 and epoch.reason == ScaleReason.SCALE_UP
    # Numbered on from the stream's next number, named with the new epoch.
    assert [sid for sid, _, _ in epoch.segments] == [segment_id(n, 1) for n in (1, 2, 3)]
    assert _layout(controller) == [
        (segment_id(1, 1), 0.0, 0.25),
        (segment_id(2, 1), 0.25, 0.5),
        (segment_id(3, 1), 0.5, 1.0),
    ]
    assert harness.store.get_info(s0.name).sealed
    with pytest.raises(SegmentSealedError):
        harness.store.append(s0.name, b"late").result()
    for r in controller.get_current_segments("sc", "s"):
        assert r.name == f"sc/s/{r.number}.#epoch.1"
        assert not harness.store.get_info(r.name).sealed
    info = controller.get_stream("sc", "s")
    assert (info.state, info.current_epoch, info.pending_scale) == (StreamState.ACTIVE, 1, None)
    assert epoch.edges == tuple((s0.segment_id, segment_id(n, 1)) for n in (1, 2, 3))
    assert [r.segment_id for r in controller.get_successors("sc", "s", s0.segment_id)] == [
        segment_id(n, 1) for n in (1, 2, 3)
    ]
    assert controller.get_predecessors("sc", "s", segment_id(2, 1)) == [s0]
    assert controller.get_predecessors("sc", "s", s0.segment_id) == []
    assert controller.get_successors("sc", "s", segment_id(2, 1)) == []


def test_merge_and_mixed_history(controller: Controller) -> None:
    _stream(controller, 4)
    a, b, c, d = controller.get_current_segments("sc", "s")
    e1 = controller.merge_segments("sc", "s", [c.segment_id, b.segment_id], ScaleReason.SCALE_DOWN)
    merged = segment_id(4, 1)
    assert _layout(controller) == [(a.segment_id, 0.0, 0.25), (merged, 0.25, 0.75), (d.segment_id, 0.75, 1.0)]
    assert e1.edges == ((b.segment_id, merged), (c.segment_id, merged))
    # Merge then re-split differently in one scale: seal two, create three.
    e2 = controller.scale_stream(
        "sc", "s", [merged, d.segment_id], [(0.25, 0.5), (0.5, 0.875), (0.875, 1.0)], ScaleReason.MANUAL
    )
    new = [segment_id(n, 2) for n in (5, 6, 7)]
    assert [sid for sid, _, _ in e2.segments] == [a.segment_id, *new]
    # Edges follow overlap: the merged segment [0.25, .75) feeds the first two, d feeds the last two.
    assert set(e2.edges) == {(merged, new[0]), (merged, new[1]), (d.segment_id, new[1]), (d.segment_id, new[2])}
    assert [r.segment_id for r in controller.get_predecessors("sc", "s", new[1])] == [merged, d.segment_id]
    assert [r.segment_id for r in controller.get_successors("sc", "s", d.segment_id)] == new[1:]
    history = controller.get_epoch_history("sc", "s")
    assert [(e.epoch, e.reason) for e in history] == [
        (0, ScaleReason.CREATE),
        (1, ScaleReason.SCALE_DOWN),
        (2, ScaleReason.MANUAL),
    ]
    assert history[0].created_ms <= history[1].created_ms <= history[2].created_ms
    assert history[2].sealed_ids == sorted([merged, d.segment_id]) and history[2].created_ids == new
    with pytest.raises(SegmentNotFoundError):
        controller.get_successors("sc", "s", segment_id(99, 1))


@pytest.mark.parametrize(
    ("seal", "ranges", "why"),
    [
        ([0], [(0.0, 0.5), (0.5, 1.0)], "not open"),  # ids of segments 0 and 1 are (0 << 32) | n
        ([], [(0.0, 0.5)], "at least one segment"),
        ("ac", [(0.0, 0.25), (0.5, 0.75)], "not adjacent"),
        ("a", [(0.0, 0.1), (0.1, 0.2)], "cover"),
        ("a", [(0.0, 0.1), (0.11, 0.25)], "gap"),
        ("a", [(0.0, 0.15), (0.1, 0.25)], "overlap"),
        ("a", [(0.0, 0.25)], "changes nothing"),
        ("a", [(0.0, 0.0), (0.0, 0.25)], "empty"),
        ("a", [(-0.5, 0.25)], "outside"),
        ("aa", [(0.0, 0.25)], "twice"),
        ("bc", [(0.25, 0.5), (0.5000000000000001, 0.75)], "gap"),  # exact floats, no tolerance
    ],
)
def test_invalid_scales_are_refused(controller: Controller, seal, ranges, why: str) -> None:
    _stream(controller, 4)
    ids = {k: r.segment_id for k, r in zip("abcd", controller.get_current_segments("sc", "s"), strict=True)}
    if seal == [0]:
        controller.split_segment("sc", "s", ids["a"], [0.125])
        seal = [ids["a"], 999]
        why = "no segments"
    elif isinstance(seal, str):
        seal = [ids[k] for k in seal]
    before = controller.get_stream("sc", "s")
    with pytest.raises(InvalidScaleError, match=why):
        controller.scale_stream("sc", "s", seal, ranges)
    after = controller.get_stream("sc", "s")
    assert (after.state, after.current_epoch, after.version) == (before.state, before.current_epoch, before.version)


def test_split_and_merge_argument_checks(controller: Controller) -> None:
    _stream(controller, 2)
    a, b = controller.get_current_segments("sc", "s")
    for at in ([], [0.5], [0.0], [0.25, 0.25], [0.7]):
        with pytest.raises(InvalidScaleError):
            controller.split_segment("sc", "s", a.segment_id, at)
    with pytest.raises(InvalidScaleError):
        controller.merge_segments("sc", "s", [a.segment_id])
    with pytest.raises(InvalidScaleError):
        controller.split_segment("sc", "s", 12345, [0.1])
    with pytest.raises(InvalidScaleError):
        controller.scale_stream("sc", "s", [a.segment_id], [(0.0, 0.1), (0.1, 0.5)], reason="")
    controller.seal_stream("sc", "s")
    with pytest.raises(StreamSealedError):
        controller.split_segment("sc", "s", a.segment_id, [0.25])


def test_retry_of_a_completed_scale_returns_its_epoch(controller: Controller) -> None:
    _stream(controller, 2)
    a, b = controller.get_current_segments("sc", "s")
    first = controller.split_segment("sc", "s", a.segment_id, [0.25], expected_epoch=0)
    assert controller.split_segment("sc", "s", a.segment_id, [0.25], expected_epoch=0) == first
    assert controller.split_segment("sc", "s", a.segment_id, [0.25]) == first
    assert controller.get_stream("sc", "s").current_epoch == 1
    # The same segments sealed into different ranges is a conflict, not a retry.
    with pytest.raises(ScaleConflictError, match="already sealed"):
        controller.split_segment("sc", "s", a.segment_id, [0.125])
    # A stale expected epoch is a conflict even for segments still open.
    with pytest.raises(ScaleConflictError, match="expected 0"):
        controller.split_segment("sc", "s", b.segment_id, [0.75], expected_epoch=0)
    assert controller.split_segment("sc", "s", b.segment_id, [0.75], expected_epoch=1).epoch == 2


class Boom(Exception):
    pass


def _explode(_: list[SegmentRange]) -> None:
    raise Boom


def test_interrupted_scale_is_rolled_forward_by_a_retry(harness: StoreHarness, controller: Controller) -> None:
    _stream(controller, 2)
    a, b = controller.get_current_segments("sc", "s")
    with pytest.raises(Boom):
        controller.split_segment("sc", "s", a.segment_id, [0.25], ScaleReason.SCALE_UP, before_seal=_explode)
    info = controller.get_stream("sc", "s")
    assert info.state == StreamState.SCALING and info.current_epoch == 0
    pending = info.pending_scale
    assert pending is not None and pending.sealed == (a.segment_id,) and pending.epoch == 1
    assert pending.new_ranges() == [(0.0, 0.25), (0.25, 0.5)]
    # Successors exist, the predecessor still takes writes, readers still see epoch 0.
    successors = [segment_id(n, 1) for n in (2, 3)]
    for sid in successors:
        assert harness.store.exists(f"sc/s/{sid & 0xFFFFFFFF}.#epoch.1")
    harness.store.append(a.name, b"still open").result()
    assert _layout(controller) == [(a.segment_id, 0.0, 0.5), (b.segment_id, 0.5, 1.0)]
    assert [e.epoch for e in controller.get_epoch_history("sc", "s")] == [0]
    assert controller.get_successors("sc", "s", a.segment_id) == []
    # Any other scale conflicts until this one is done, including one of another segment.
    with pytest.raises(ScaleConflictError, match="is scaling"):
        controller.split_segment("sc", "s", b.segment_id, [0.75])
    with pytest.raises(ScaleConflictError):
        controller.split_segment("sc", "s", a.segment_id, [0.125])
    seen: list[list[SegmentRange]] = []
    epoch = controller.split_segment("sc", "s", a.segment_id, [0.25], ScaleReason.SCALE_UP, before_seal=seen.append)
    assert [r.segment_id for r in seen[0]] == successors
    assert epoch.epoch == 1 and epoch.reason == ScaleReason.SCALE_UP
    assert _layout(controller) == [(successors[0], 0.0, 0.25), (successors[1], 0.25, 0.5), (b.segment_id, 0.5, 1.0)]
    assert harness.store.get_info(a.name).sealed
    assert controller.complete_scale("sc", "s") is None


def test_interrupted_scale_survives_a_restart_and_completes(harness: StoreHarness, controller: Controller) -> None:
    _stream(controller, 1)
    (s0,) = controller.get_current_segments("sc", "s")
    with pytest.raises(Boom):
        controller.split_segment("sc", "s", s0.segment_id, [0.5], before_seal=_explode)
    store = harness.restart()
    fresh = Controller(store, TableStore(store))
    assert fresh.get_stream("sc", "s").state == StreamState.SCALING
    epoch = fresh.complete_scale("sc", "s")
    assert epoch is not None and epoch.epoch == 1
    assert [(lo, hi) for _, lo, hi in epoch.segments] == [(0.0, 0.5), (0.5, 1.0)]
    assert store.get_info(s0.name).sealed
    assert fresh.get_stream("sc", "s").state == StreamState.ACTIVE


class _SealFails:
    """A segment store whose seal of ``name`` fails once, after really sealing (a crash between
    sealing and committing the new epoch)."""

    def __init__(self, store, name: str) -> None:
        self._store, self._name, self.armed = store, name, True

    def __getattr__(self, attr: str):
        return getattr(self._store, attr)

    def seal(self, name: str):
        fut = self._store.seal(name)
        if name == self._name and self.armed:
            self.armed = False
            fut.result()
            raise Boom
        return fut


def test_crash_after_sealing_rolls_forward(harness: StoreHarness, controller: Controller) -> None:
    _stream(controller, 2)
    a, b = controller.get_current_segments("sc", "s")
    faulty = Controller(_SealFails(harness.store, b.name), controller.tables)
    with pytest.raises(Boom):
        faulty.merge_segments("sc", "s", [a.segment_id, b.segment_id], ScaleReason.SCALE_DOWN)
    # Both predecessors sealed, epoch not yet advanced: the stream takes no writes anywhere until
    # the scale is finished, and seal_stream finishes it first.
    assert harness.store.get_info(a.name).sealed and harness.store.get_info(b.name).sealed
    assert controller.get_stream("sc", "s").current_epoch == 0
    controller.seal_stream("sc", "s")
    info = controller.get_stream("sc", "s")
    assert (info.state, info.current_epoch) == (StreamState.SEALED, 1)
    (merged,) = controller.get_current_segments("sc", "s")
    assert harness.store.get_info(merged.name).sealed
    assert controller.get_epoch_history("sc", "s")[1].reason == ScaleReason.SCALE_DOWN
    controller.delete_stream("sc", "s")
    assert not any(n.startswith("sc/s/") for n in harness.store.list_segments())


def test_delete_after_interrupted_scale_removes_successors(harness: StoreHarness, controller: Controller) -> None:
    _stream(controller, 1)
    (s0,) = controller.get_current_segments("sc", "s")
    with pytest.raises(Boom):
        controller.split_segment("sc", "s", s0.segment_id, [0.5], before_seal=_explode)
    controller.seal_stream("sc", "s")
    controller.delete_stream("sc", "s")
    assert not any(n.startswith("sc/s/") for n in harness.store.list_segments())


def test_concurrent_scales_one_wins(controller: Controller) -> None:
    _stream(controller, 2)
    a, b = controller.get_current_segments("sc", "s")
    requests = [
        (a.segment_id, [0.25]),
        (a.segment_id, [0.125]),
        (b.segment_id, [0.75]),
        (a.segment_id, [0.375]),
        (b.segment_id, [0.625]),
        (b.segment_id, [0.875]),
    ]
    gate = threading.Barrier(len(requests))
    outcomes: list[object] = [None] * len(requests)

    def run(i: int) -> None:
        sid, at = requests[i]
        gate.wait()
        try:
            outcomes[i] = controller.split_segment("sc", "s", sid, at, expected_epoch=0)
        except ScaleConflictError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if isinstance(o, EpochRecord)]
    assert len(winners) == 1, outcomes
    assert all(isinstance(o, ScaleConflictError) for o in outcomes if o is not winners[0])
    assert controller.get_stream("sc", "s").current_epoch == 1
    assert len(controller.get_current_segments("sc", "s")) == 3


def test_concurrent_identical_scales_both_return_the_same_epoch(controller: Controller) -> None:
    _stream(controller, 1)
    (s0,) = controller.get_current_segments("sc", "s")
    gate = threading.Barrier(4)
    results: list[object] = []

    def run() -> None:
        gate.wait()
        results.append(controller.split_segment("sc", "s", s0.segment_id, [0.5]))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(r == results[0] for r in results)
    assert controller.get_stream("sc", "s").current_epoch == 1


def test_old_records_decode_and_new_fields_round_trip() -> None:
    # Bytes as the pre-scaling code wrote them: no reason, no edges, no pending scale.
    from millrace.store.controller.records import _CUT, _SEGMENT, _U8, _U32, _U64, _fields

    old_epoch = _fields([(1, _U32.pack(0)), (2, _U64.pack(5)), (3, _SEGMENT.pack(7, 0.0, 1.0))])
    e = EpochRecord.decode(old_epoch)
    assert e == EpochRecord(0, 5, ((7, 0.0, 1.0),)) and e.reason == ScaleReason.CREATE and e.edges == ()
    assert e.encode() == old_epoch  # unchanged records encode exactly as before
    old_stream = _fields(
        [
            (1, _U8.pack(StreamState.ACTIVE)),
            (2, StreamConfiguration().encode()),
            (3, _U64.pack(9)),
            (4, _U32.pack(0)),
            (5, _U32.pack(1)),
            (6, _CUT.pack(7, 3)),
        ]
    )
    r = StreamRecord.decode(old_stream)
    assert r.scale is None and r.truncation == {7: 3} and r.encode() == old_stream
    pending = PendingScale(3, 11, (5, 6), ((segment_id(9, 3), 0.25, 0.5),), ScaleReason.SCALE_DOWN)
    scaling = StreamRecord(StreamState.SCALING, StreamConfiguration(), 9, 2, 10, {}, pending)
    assert StreamRecord.decode(scaling.encode()) == scaling
    rich = EpochRecord(3, 11, ((1, 0.0, 0.25), (segment_id(9, 3), 0.25, 1.0)), ScaleReason.SCALE_DOWN, ((5, 9),))
    assert EpochRecord.decode(rich.encode()) == rich
    # Unknown tags (from a newer writer) are skipped.
    assert EpochRecord.decode(rich.encode() + _fields([(99, b"future")])) == rich
