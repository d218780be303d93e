"""Property test: any sequence of splits, merges, interrupted scales and store restarts keeps a
stream's open segments covering [0, 1) exactly once, keeps the predecessor graph consistent, and
the epoch history replays to the current layout."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from millrace.store.controller import (
    Controller,
    ScaleReason,
    SegmentRange,
    StreamConfiguration,
    segment_epoch,
)
from millrace.store.tables import TableStore
from tests.tables.harness import StoreHarness


class Interrupted(Exception):
    pass


class ScalingModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="scalingmodel-"))
        self.harness = StoreHarness(self.dir)
        self.controller = Controller(self.harness.store, TableStore(self.harness.store))
        self.controller.create_scope("sc")
        self.controller.create_stream("sc", "s", StreamConfiguration(initial_segments=2))
        self.model: list[tuple[float, float]] = [(0.0, 0.5), (0.5, 1.0)]  # open ranges, by key
        self.epoch = 0
        self.interrupted: tuple[list[int], list[tuple[float, float]]] | None = None

    def teardown(self) -> None:
        self.harness.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _current(self) -> list[SegmentRange]:
        return self.controller.get_current_segments("sc", "s")

    def _scale(self, seal: list[SegmentRange], ranges: list[tuple[float, float]], reason: str, crash: bool) -> None:
        ids = [r.segment_id for r in seal]
        if crash:
            def boom(_: list[SegmentRange]) -> None:
                raise Interrupted

            try:
                self.controller.scale_stream("sc", "s", ids, ranges, reason, before_seal=boom)
            except Interrupted:
                self.interrupted = (ids, ranges)
                return
            raise AssertionError("before_seal was not called")
        epoch = self.controller.scale_stream("sc", "s", ids, ranges, reason, expected_epoch=self.epoch)
        self._applied(seal, ranges, epoch.epoch)

    def _applied(self, seal: list[SegmentRange], ranges: list[tuple[float, float]], epoch: int) -> None:
        assert epoch == self.epoch + 1
        self.epoch = epoch
        sealed = {(r.key_start, r.key_end) for r in seal}
        self.model = sorted([r for r in self.model if r not in sealed] + ranges)

    @precondition(lambda self: self.interrupted is None)
    @rule(data=st.data(), pieces=st.integers(2, 4), crash=st.booleans())
    def split(self, data, pieces: int, crash: bool) -> None:
        segments = self._current()
        seg = data.draw(st.sampled_from(segments))
        fractions = data.draw(
            st.lists(st.integers(1, 63), min_size=pieces - 1, max_size=pieces - 1, unique=True).map(sorted)
        )
        points = sorted({seg.key_start + (seg.key_end - seg.key_start) * f / 64 for f in fractions})
        points = [p for p in points if seg.key_start < p < seg.key_end]
        if not points:
            return
        bounds = [seg.key_start, *points, seg.key_end]
        self._scale([seg], list(zip(bounds, bounds[1:], strict=False)), ScaleReason.SCALE_UP, crash)

    @precondition(lambda self: self.interrupted is None)
    @rule(data=st.data(), width=st.integers(2, 3), crash=st.booleans())
    def merge(self, data, width: int, crash: bool) -> None:
        segments = self._current()
        if len(segments) < width:
            return
        i = data.draw(st.integers(0, len(segments) - width))
        group = segments[i : i + width]
        self._scale(group, [(group[0].key_start, group[-1].key_end)], ScaleReason.SCALE_DOWN, crash)

    @precondition(lambda self: self.interrupted is not None)
    @rule(how=st.sampled_from(["retry", "complete"]))
    def finish_interrupted(self, how: str) -> None:
        assert self.interrupted is not None
        ids, ranges = self.interrupted
        by_id = {r.segment_id: r for r in self._current()}
        seal = [by_id[sid] for sid in ids]
        if how == "retry":
            epoch = self.controller.scale_stream("sc", "s", ids, ranges)
        else:
            epoch = self.controller.complete_scale("sc", "s")
            assert epoch is not None
        self.interrupted = None
        self._applied(seal, ranges, epoch.epoch)

    @rule()
    def restart(self) -> None:
        store = self.harness.restart()
        self.controller = Controller(store, TableStore(store))

    @invariant()
    def open_segments_cover_key_space_once(self) -> None:
        segments = self._current()
        assert [(r.key_start, r.key_end) for r in segments] == self.model
        position = 0.0
        for r in segments:
            assert r.key_start == position < r.key_end
            position = r.key_end
        assert position == 1.0
        store = self.controller.store
        for r in segments:
            assert not store.get_info(r.name).sealed

    @invariant()
    def history_is_consistent(self) -> None:
        history = self.controller.get_epoch_history("sc", "s")
        assert [e.epoch for e in history] == list(range(self.epoch + 1))
        assert all(a.created_ms <= b.created_ms for a, b in zip(history, history[1:], strict=False))
        layout = {sid: (lo, hi) for sid, lo, hi in history[0].segments}
        for prev, e in zip(history, history[1:], strict=False):
            sealed, created = e.sealed_ids, e.created_ids
            assert sealed and created and all(segment_epoch(s) == e.epoch for s in created)
            assert all(segment_epoch(s) < e.epoch for s in sealed)
            # Replaying the scale on the previous layout gives this epoch's layout.
            assert layout == {sid: (lo, hi) for sid, lo, hi in prev.segments}
            new = {sid: (lo, hi) for sid, lo, hi in e.segments}
            old = dict(layout)
            for sid in sealed:
                # Every sealed segment's range is covered exactly by its successors' union...
                succ = sorted(new[s] for p, s in e.edges if p == sid)
                lo, hi = layout[sid]
                assert succ[0][0] <= lo and hi <= succ[-1][1]
                assert all(a[1] == b[0] for a, b in zip(succ, succ[1:], strict=False))
                del layout[sid]
            for sid in created:
                # ... and every new segment's range by its predecessors'.
                pred = sorted(old[p] for p, s in e.edges if s == sid)
                lo, hi = new[sid]
                assert pred[0][0] <= lo and hi <= pred[-1][1]
                layout[sid] = new[sid]
            assert layout == new
            store = self.controller.store
            for sid in sealed:
                r = SegmentRange("sc", "s", sid, 0.0, 1.0)
                assert store.get_info(r.name).sealed
                assert {x.segment_id for x in self.controller.get_successors("sc", "s", sid)} == {
                    s for p, s in e.edges if p == sid
                }
            for sid in created:
                assert {x.segment_id for x in self.controller.get_predecessors("sc", "s", sid)} == {
                    p for p, s in e.edges if s == sid
                }


ScalingModel.TestCase.settings = settings(max_examples=20, stateful_step_count=15, deadline=None)
test_scaling_against_model = pytest.mark.slow(ScalingModel.TestCase)  # a minute on two cores
