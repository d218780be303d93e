"""Segment rate tracking: the windowed averages' math on a fake clock, and the container hook
(counted when durable, by event count; not counted on replay; forgotten on delete)."""

from __future__ import annotations

import math
import os
from dataclasses import replace

import pytest

from millrace.store.containers.rates import RateConfig, RateRegistry, SegmentRates
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.errors import SegmentNotFoundError, StoreError
from millrace.store.lts.filesystem import FileSystemChunkStorage
from millrace.store.segment_store import SegmentStore
from tests.storehelpers import TEST_CONFIG

WINDOWS = (2.0, 10.0, 30.0)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def ewma(segments: list[tuple[float, float]], w: float) -> float:
    """Closed form of the bias-corrected average after piecewise-constant (rate, seconds)."""
    value, age = 0.0, 0.0
    for rate, dt in segments:
        keep = math.exp(-dt / w)
        value = value * keep + rate * (1 - keep)
        age += dt
    return value / (1 - math.exp(-age / w))


def test_constant_rate_is_exact_in_every_window_from_the_first_read() -> None:
    clock = FakeClock()
    reg = RateRegistry(RateConfig(WINDOWS), clock)
    assert reg.rates(1) == SegmentRates(WINDOWS, (0.0,) * 3, (0.0,) * 3, 0.0)
    for second in range(1, 41):
        reg.record(1, 100, 5000)
        clock.advance(1.0)
        if second in (1, 5, 40):
            r = reg.rates(1)
            assert r.age_s == second
            assert r.events_per_s == pytest.approx((100.0,) * 3)
            assert r.bytes_per_s == pytest.approx((5000.0,) * 3)
            assert [r.warm(i) for i in range(3)] == [second >= 2, second >= 10, second >= 30]


def test_lazy_folding_spreads_counts_over_the_interval() -> None:
    clock = FakeClock()
    reg = RateRegistry(RateConfig(WINDOWS), clock)
    reg.rates(7)  # measuring starts now
    for _ in range(10):
        reg.record(7, 30, 300)
    clock.advance(3.0)  # 300 events over 3 s, read once: 100/s in every window
    assert reg.rates(7).events_per_s == pytest.approx((100.0,) * 3)
    # Reading twice at the same instant changes nothing (no division by a zero interval).
    reg.record(7, 50, 0)
    assert reg.rates(7).events_per_s == pytest.approx((100.0,) * 3)
    clock.advance(1.0)
    assert reg.rates(7).events_per_s == pytest.approx(tuple(ewma([(100, 3), (50, 1)], w) for w in WINDOWS))


def test_burst_then_silence_decays_short_window_first() -> None:
    clock = FakeClock()
    reg = RateRegistry(RateConfig(WINDOWS), clock)
    reg.rates(1)
    for _ in range(10):
        reg.record(1, 1000, 1_000_000)
        clock.advance(1.0)
        reg.rates(1)
    for _ in range(6):
        clock.advance(1.0)
        reg.rates(1)
    r = reg.rates(1)
    expected = [ewma([(1000, 10), (0, 6)], w) for w in WINDOWS]
    assert r.events_per_s == pytest.approx(tuple(expected))
    assert r.bytes_per_s == pytest.approx(tuple(e * 1000 for e in expected))
    short, medium, long = r.events_per_s
    assert short < 50 < medium < long < 1000  # the short window forgets first


def test_step_up_shows_in_short_window_first() -> None:
    clock = FakeClock()
    reg = RateRegistry(RateConfig(WINDOWS), clock)
    reg.rates(1)
    for rate, seconds in ((10, 30), (1000, 4)):
        for _ in range(seconds):
            reg.record(1, rate, rate)
            clock.advance(1.0)
            reg.rates(1)
    short, medium, long = reg.rates(1).events_per_s
    assert short == pytest.approx(ewma([(10, 30), (1000, 4)], 2.0))
    assert short > 800 and long < 200 and short > medium > long


def test_registry_forgets_and_config_is_checked() -> None:
    clock = FakeClock()
    reg = RateRegistry(RateConfig((1.0,)), clock)
    reg.record(3, 1, 1)
    assert len(reg) == 1
    reg.forget(3)
    reg.forget(3)
    assert len(reg) == 0
    for bad in [(), (0.0, 1.0), (2.0, 1.0), (-1.0,)]:
        with pytest.raises(ValueError):
            RateConfig(bad)


# -- the container hook ------------------------------------------------------------------------------
def _store(root: str, clock: FakeClock) -> SegmentStore:
    store = SegmentStore(
        2,
        lambda cid: FileDurableDataLog(os.path.join(root, "logs", f"container-{cid}")),
        FileSystemChunkStorage(os.path.join(root, "lts")),
        replace(TEST_CONFIG),
        RateConfig((1.0, 4.0)),
        clock,
    )
    store.start()
    return store


def test_store_counts_durable_appends_by_event_count(tmp_path) -> None:
    clock = FakeClock()
    store = _store(str(tmp_path), clock)
    try:
        store.create_segment("sc/s/0.#epoch.0").result()
        store.create_segment("sc/s/1.#epoch.0").result()
        # Measuring starts at the first append or read, whichever comes first.
        assert store.segment_rates("sc/s/0.#epoch.0").age_s == 0.0
        assert store.segment_rates("sc/s/1.#epoch.0").age_s == 0.0
        for _ in range(4):
            store.append("sc/s/0.#epoch.0", b"x" * 100, events=25).result()  # a batch of 25 records
            store.append("sc/s/0.#epoch.0", b"y" * 50).result()  # one event by default
            clock.advance(1.0)
            r = store.segment_rates("sc/s/0.#epoch.0")
        assert r.events_per_s == pytest.approx((26.0, 26.0)) and r.bytes_per_s == pytest.approx((150.0, 150.0))
        assert r.age_s == 4.0 and r.warm(1)
        other = store.segment_rates("sc/s/1.#epoch.0")
        assert other.events_per_s == (0.0, 0.0) and other.age_s == 4.0
        # Refused appends count nothing.
        with pytest.raises(StoreError):
            store.append("sc/s/0.#epoch.0", b"z", expected_offset=0, events=1000).result()
        with pytest.raises(StoreError):
            store.append("sc/s/0.#epoch.0", b"z", events=-1).result()
        store.append("sc/s/0.#epoch.0", b"", events=0).result()
        clock.advance(1.0)
        assert store.segment_rates("sc/s/0.#epoch.0").events_per_s[1] < 26.0
        with pytest.raises(SegmentNotFoundError):
            store.segment_rates("sc/s/9.#epoch.0")
        store.delete("sc/s/1.#epoch.0").result()
        with pytest.raises(SegmentNotFoundError):
            store.segment_rates("sc/s/1.#epoch.0")
        assert sum(len(c.rates) for c in store.containers) == 1
    finally:
        store.close()


def test_replayed_appends_are_not_load(tmp_path) -> None:
    clock = FakeClock()
    store = _store(str(tmp_path), clock)
    store.create_segment("seg").result()
    for _ in range(50):
        store.append("seg", b"x" * 10, events=10).result()
    # Crash-like stop: the log keeps the appends, recovery replays them.
    for c in store.containers:
        c._shutdown_threads()
    store._read_pool.shutdown()
    store.scheduler.stop()
    clock.advance(5.0)
    store = _store(str(tmp_path), clock)
    try:
        assert store.get_info("seg").length == 500
        assert sum(len(c.rates) for c in store.containers) == 0
        assert store.segment_rates("seg") == SegmentRates((1.0, 4.0), (0.0, 0.0), (0.0, 0.0), 0.0)
        clock.advance(1.0)
        store.append("seg", b"x" * 10, events=3).result()
        clock.advance(1.0)
        r = store.segment_rates("seg")
        assert r.events_per_s == pytest.approx((1.5, 1.5)) and r.age_s == 2.0
    finally:
        store.close()


def test_containers_count_bytes_read_by_segment(tmp_path) -> None:
    """The console's rate out: every read's bytes, from the cache or long-term storage, on the segment read;
    segments never read are left out, and a deleted segment's counter goes with it."""
    store = _store(str(tmp_path), FakeClock())
    try:
        for name in ("sc/s/0.#epoch.0", "sc/s/1.#epoch.0", "sc/s/2.#epoch.0"):
            store.create_segment(name).result()
            store.append(name, b"x" * 300).result()

        def counted() -> dict[str, int]:
            out: dict[str, int] = {}
            for c in store.containers:
                out.update(c.read_bytes_by_segment())
            return out

        assert counted() == {}
        assert len(store.read("sc/s/0.#epoch.0", 0, 100).result().data) == 100
        assert len(store.read("sc/s/0.#epoch.0", 100, 1000).result().data) == 200  # to the end only
        assert len(store.read("sc/s/1.#epoch.0", 250, 1000).result().data) == 50
        assert store.read("sc/s/1.#epoch.0", 300, 1000).result().data == b""  # at the tail: nothing read
        assert counted() == {"sc/s/0.#epoch.0": 300, "sc/s/1.#epoch.0": 50}
        store.delete("sc/s/0.#epoch.0").result()
        assert counted() == {"sc/s/1.#epoch.0": 50}
    finally:
        store.close()
