"""Auto-scaler decisions on real stores and a fake clock: load is simulated per key range, appended
to whatever segments own it each simulated second, and the auto-scaler runs once per second."""

from __future__ import annotations

import os
import threading
import time

import pytest

from millrace.store.containers.rates import RateConfig, SegmentRates
from millrace.store.controller import (
    Controller,
    ScaleReason,
    ScalingPolicy,
    SegmentRange,
    StreamConfiguration,
)
from millrace.store.controller.autoscaler import (
    GROW_PARTITIONS,
    RESUMED,
    AutoScaler,
    AutoScalerConfig,
    ScaleAction,
)
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.lts.filesystem import FileSystemChunkStorage
from millrace.store.segment_store import SegmentStore
from millrace.store.tables import TableStore
from tests.storehelpers import TEST_CONFIG

WINDOWS = (1.0, 2.0, 4.0)
TARGET = 100


class FakeClock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


class Sim:
    """A store, controller and auto-scaler sharing one fake clock."""

    def __init__(self, root: str, **scaler_options) -> None:
        self.clock = FakeClock()
        self.store = SegmentStore(
            2,
            lambda cid: FileDurableDataLog(os.path.join(root, "logs", f"c{cid}")),
            FileSystemChunkStorage(os.path.join(root, "lts")),
            TEST_CONFIG,
            RateConfig(WINDOWS),
            self.clock,
        )
        self.store.start()
        self.controller = Controller(self.store, TableStore(self.store))
        self.controller.create_scope("sc")
        config = scaler_options.pop("config", AutoScalerConfig(cooldown=3.0))
        self.scaler = AutoScaler(self.controller, self.store, self.clock, config, **scaler_options)
        self.log: list[tuple[float, ScaleAction]] = []

    def stream(self, segments: int, policy: ScalingPolicy, name: str = "s") -> None:
        self.controller.create_stream("sc", name, StreamConfiguration(initial_segments=segments, scaling=policy))

    def segments(self, name: str = "s") -> list[SegmentRange]:
        return self.controller.get_current_segments("sc", name)

    def run(self, seconds: int, load: list[tuple[float, float, float]], name: str = "s", event_bytes: int = 10) -> list:
        """``load``: (key_start, key_end, events/s spread evenly over that key range)."""
        actions = []
        for _ in range(seconds):
            for seg in self.segments(name):
                rate = sum(
                    r * max(0.0, min(hi, seg.key_end) - max(lo, seg.key_start)) / (hi - lo) for lo, hi, r in load
                )
                events = round(rate)
                if events:
                    self.store.append(seg.name, b"x" * (events * event_bytes), events=events).result()
            self.clock.now += 1.0
            for action in self.scaler.evaluate_once():
                actions.append(action)
                self.log.append((self.clock.now, action))
        return actions

    def rates(self, name: str = "s") -> list[SegmentRates]:
        return [self.store.segment_rates(s.name) for s in self.segments(name)]

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def sim(tmp_path):
    made: list[Sim] = []

    def make(**options) -> Sim:
        s = Sim(str(tmp_path / f"sim{len(made)}"), **options)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_scale_up_on_sustained_load(sim) -> None:
    s = sim()
    s.stream(1, ScalingPolicy.by_event_rate(TARGET, scale_factor=2))
    start = s.clock.now
    actions = s.run(10, [(0.0, 1.0, 150)])  # 1.5x target: never a burst
    assert actions[0] == ScaleAction("sc", "s", ScaleReason.SCALE_UP, (0,), ((0.0, 0.5), (0.5, 1.0)))
    when = s.log[0][0] - start
    assert when >= WINDOWS[-1]  # only once the long window is warm
    assert [(r.key_start, r.key_end) for r in s.segments()] == [(0.0, 0.5), (0.5, 1.0)]
    history = s.controller.get_epoch_history("sc", "s")
    assert [e.reason for e in history] == [ScaleReason.CREATE, ScaleReason.SCALE_UP]
    # 75/s per successor is below target and above target/2: stable from here on.
    assert s.run(20, [(0.0, 1.0, 150)]) == []


def test_scale_up_on_a_burst_before_the_long_window(sim) -> None:
    s = sim()
    s.stream(1, ScalingPolicy.by_event_rate(TARGET, scale_factor=4))
    actions = s.run(1, [(0.0, 1.0, 20 * TARGET)])
    assert [a.reason for a in actions] == [ScaleReason.SCALE_UP]
    assert actions[0].new_ranges == ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0))
    # No scale below a burst: 4x target on a fresh segment waits for the long window.
    t = sim()
    t.stream(1, ScalingPolicy.by_event_rate(TARGET))
    assert t.run(3, [(0.0, 1.0, 4 * TARGET)]) == []
    assert [a.reason for a in t.run(2, [(0.0, 1.0, 4 * TARGET)])] == [ScaleReason.SCALE_UP]


def test_kbytes_policy_uses_byte_rate(sim) -> None:
    s = sim()
    s.stream(1, ScalingPolicy.by_kbytes_rate(8))  # 8 KiB/s per segment
    # 100 events/s of 100 bytes = 9.8 KiB/s: over target in bytes, far under any event target.
    actions = s.run(6, [(0.0, 1.0, 100)], event_bytes=100)
    assert [a.reason for a in actions] == [ScaleReason.SCALE_UP]


def test_cooldown_holds_successors(sim) -> None:
    s = sim(config=AutoScalerConfig(cooldown=3.0))
    s.stream(1, ScalingPolicy.by_event_rate(TARGET, scale_factor=2))
    s.run(8, [(0.0, 1.0, 40 * TARGET)])  # every segment stays far over burst level
    ups = [(t, a) for t, a in s.log if a.reason == ScaleReason.SCALE_UP]
    assert len(ups) >= 3
    created_at: dict[int, float] = {}
    for t, a in ups:
        for sid in a.segments:
            # A successor of one scale is only split again once its cooldown passed.
            assert t - created_at.get(sid, t - 99) >= 3.0
        created_at.update((sid, t) for sid in _created_by(s, a))
    assert any(sid in created_at for _, a in ups for sid in a.segments)


def _created_by(s: Sim, action: ScaleAction) -> list[int]:
    for e in s.controller.get_epoch_history("sc", "s"):
        if e.sealed_ids == sorted(action.segments):
            return e.created_ids
    raise AssertionError(action)


def test_no_scale_down_while_any_window_is_warm(sim) -> None:
    s = sim()
    s.stream(4, ScalingPolicy.by_event_rate(TARGET, min_segments=1))
    assert s.run(10, [(0.0, 1.0, 4 * 80)]) == []  # 80/s each: under target, not cold
    stop = s.clock.now
    actions = s.run(12, [])
    downs = [(t, a) for t, a in s.log if a.reason == ScaleReason.SCALE_DOWN]
    assert downs and all(a.reason == ScaleReason.SCALE_DOWN for a in actions)
    # The long window starts at 80/s and falls below 50/s only after 4 * ln(80/50) = 1.9 s.
    assert downs[0][0] - stop >= 2.0
    # Each merge combined two adjacent segments.
    for _, a in downs:
        assert len(a.segments) == 2 and len(a.new_ranges) == 1


def test_min_segments_respected(sim) -> None:
    s = sim(config=AutoScalerConfig(cooldown=0.0))
    s.stream(4, ScalingPolicy.by_event_rate(TARGET, min_segments=2))
    s.run(30, [])
    assert len(s.segments()) == 2
    assert [e.reason for e in s.controller.get_epoch_history("sc", "s")] == [
        ScaleReason.CREATE,
        ScaleReason.SCALE_DOWN,
        ScaleReason.SCALE_DOWN,
    ]
    assert s.run(10, []) == []


def test_warm_neighbour_blocks_merge(sim) -> None:
    s = sim(config=AutoScalerConfig(cooldown=0.0))
    s.stream(3, ScalingPolicy.by_event_rate(TARGET, min_segments=1))
    # Segment 1 (the middle) carries 60/s: above target/2, so neither pair may merge.
    third = 1 / 3
    assert s.run(15, [(third, 2 * third, 60)]) == []
    assert len(s.segments()) == 3


def test_fixed_policy_and_sealed_streams_are_left_alone(sim) -> None:
    s = sim()
    s.stream(1, ScalingPolicy(), name="fixed")
    s.stream(1, ScalingPolicy.by_event_rate(TARGET), name="sealed")
    s.controller.seal_stream("sc", "sealed")
    assert s.run(6, [(0.0, 1.0, 50 * TARGET)], name="fixed") == []


def test_boundaries_restrict_split_points_and_single_partitions_grow(sim) -> None:
    partitions = 4
    starts = [p / partitions for p in range(partitions)]
    asked: list[tuple[str, str, SegmentRange]] = []
    grown: list[tuple[SegmentRange, SegmentRates]] = []
    executed: list[tuple[list[int], list[tuple[float, float]], str]] = []
    switched: list[list[int]] = []

    def boundaries(scope: str, stream: str, seg: SegmentRange) -> list[float]:
        asked.append((scope, stream, seg))
        return [p for p in starts if seg.key_start < p < seg.key_end]

    def grow(scope: str, stream: str, seg: SegmentRange, rates: SegmentRates) -> None:
        grown.append((seg, rates))

    def executor(scope: str, stream: str, seal: list[int], ranges: list[tuple[float, float]], reason: str) -> None:
        executed.append((seal, ranges, reason))
        s.controller.scale_stream(
            scope, stream, seal, ranges, reason, before_seal=lambda succ: switched.append([r.segment_id for r in succ])
        )

    s = sim(boundaries=boundaries, executor=executor, grow_partitions=grow)
    s.stream(1, ScalingPolicy.by_event_rate(TARGET, scale_factor=3, min_segments=3))
    # All load on partition 0's slice, 1.5x target: sustained, never a burst.
    s.run(5, [(0.0, 0.25, 150)])
    # Three ideal pieces (1/3, 2/3) snap to the nearest partition starts: 0.25 and 0.75.
    assert executed == [([0], [(0.0, 0.25), (0.25, 0.75), (0.75, 1.0)], ScaleReason.SCALE_UP)]
    assert len(switched) == 1 and len(switched[0]) == 3
    assert asked[0][2].key_start == 0.0 and asked[0][2].key_end == 1.0
    # Segment [0, 0.25) holds one partition and stays hot: it cannot split, so grow is asked,
    # once per cooldown and only on sustained load.
    s.run(12, [(0.0, 0.25, 150)])
    assert len(executed) == 1
    assert len(grown) >= 2
    seg, rates = grown[0]
    assert (seg.key_start, seg.key_end) == (0.0, 0.25) and rates.events_per_s[-1] > TARGET
    grows = [t for t, a in s.log if a.reason == GROW_PARTITIONS]
    assert all(b - a >= 3.0 for a, b in zip(grows, grows[1:], strict=False))
    assert [e.epoch for e in s.controller.get_epoch_history("sc", "s")] == [0, 1]


def test_unsplittable_without_grow_callback_does_nothing(sim) -> None:
    s = sim(boundaries=lambda scope, stream, seg: [])
    s.stream(1, ScalingPolicy.by_event_rate(TARGET))
    assert s.run(8, [(0.0, 1.0, 50 * TARGET)]) == []


def test_executor_conflict_is_skipped(sim) -> None:
    from millrace.store.controller import ScaleConflictError

    calls = []

    def executor(*args) -> None:
        calls.append(args)
        raise ScaleConflictError("someone else scaled")

    s = sim(executor=executor)
    s.stream(1, ScalingPolicy.by_event_rate(TARGET))
    s.run(3, [(0.0, 1.0, 50 * TARGET)])
    assert len(calls) >= 2 and s.log == []


class _Interrupted(Exception):
    pass


def _interrupt(_: list[SegmentRange]) -> None:
    raise _Interrupted


@pytest.mark.parametrize("own_executor", [True, False])
def test_stuck_scale_is_rolled_forward_only_with_the_default_executor(sim, own_executor: bool) -> None:
    options = {} if own_executor else {"executor": lambda *args: None}
    s = sim(config=AutoScalerConfig(resume_after=0.0), **options)
    s.stream(1, ScalingPolicy.by_event_rate(TARGET))
    (seg,) = s.segments()
    with pytest.raises(_Interrupted):
        s.controller.split_segment("sc", "s", seg.segment_id, [0.5], before_seal=_interrupt)
    actions = s.run(2, [(0.0, 1.0, 50 * TARGET)])
    if own_executor:
        assert actions[0] == ScaleAction("sc", "s", RESUMED, (seg.segment_id,), ((0.0, 0.5), (0.5, 1.0)))
        assert len(s.segments()) == 2
    else:
        assert actions == [] and s.controller.get_stream("sc", "s").pending_scale is not None


def test_thread_driver_runs_rounds(sim) -> None:
    s = sim(config=AutoScalerConfig(interval=0.01, cooldown=0.0))
    s.stream(1, ScalingPolicy.by_event_rate(TARGET))
    (seg,) = s.segments()
    s.store.append(seg.name, b"x" * 10, events=50 * TARGET).result()
    s.clock.now += 1.0
    s.scaler.start()
    try:
        with pytest.raises(RuntimeError):
            s.scaler.start()
        deadline = time.monotonic() + 10
        while len(s.segments()) == 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        s.scaler.stop()
    assert len(s.segments()) == 2


class _SyncPool:
    def callInThreadWithCallback(self, on_result, f, *args, **kwargs) -> None:  # noqa: N802 - Twisted's name
        on_result(True, f(*args, **kwargs))


def test_reactor_driver_uses_looping_call(sim) -> None:
    from twisted.internet.task import Clock

    class Reactor(Clock):
        def getThreadPool(self) -> _SyncPool:  # noqa: N802 - Twisted's name
            return _SyncPool()

        def callFromThread(self, f, *args, **kwargs) -> None:  # noqa: N802 - Twisted's name
            f(*args, **kwargs)

    rounds = threading.Semaphore(0)
    s = sim(config=AutoScalerConfig(interval=0.5))
    s.scaler.evaluate_once = lambda: rounds.release()  # type: ignore[method-assign]
    reactor = Reactor()
    s.scaler.start(reactor)
    reactor.advance(0.5)
    reactor.advance(0.5)
    s.scaler.stop()
    reactor.advance(5)
    assert rounds.acquire(blocking=False) and rounds.acquire(blocking=False)
    assert not rounds.acquire(blocking=False)
