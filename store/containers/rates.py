"""Per-segment ingest rates (events/s and bytes/s) over several time windows, measured by the
container that applies the appends, as Pravega's segment store does for its AutoScaleProcessor.

Each window is an exponentially weighted moving average with time constant ``window`` seconds
(Pravega uses 2/5/10/20 minutes; the defaults here are 2/10/30 seconds because a Kafka gateway
reacts faster, and tests set them lower still). The hot path only adds to two counters: the
averages are brought up to date lazily whenever the rates are read, treating what arrived since
the previous read as spread evenly over that interval. Read them at least every ``short window /
2`` (the auto-scaler does) or a burst gets smeared over the long gap.

Warm-up: an average started at zero under-reports until it has seen about one window, so the
reported value is bias-corrected (divided by ``1 - exp(-age / window)``): for a constant rate it
is exact from the first read on. ``age_s`` says how long the segment has been measured, so callers
can refuse to act on a window longer than what was seen (a fresh segment, or one after a restart:
measurements start from zero when a container starts, replayed appends are not counted).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass(frozen=True)
class RateConfig:
    windows: tuple[float, ...] = (2.0, 10.0, 30.0)  # seconds, shortest first

    def __post_init__(self) -> None:
        if not self.windows or any(w <= 0 for w in self.windows) or list(self.windows) != sorted(self.windows):
            raise ValueError(f"rate windows must be positive and ascending, not {self.windows}")


@dataclass(frozen=True)
class SegmentRates:
    """A segment's rates, one value per window (same order as ``windows``)."""

    windows: tuple[float, ...]
    events_per_s: tuple[float, ...]
    bytes_per_s: tuple[float, ...]
    age_s: float  # how long this segment has been measured

    def warm(self, i: int) -> bool:
        """Whether window ``i`` has seen a whole window's worth of time."""
        return self.age_s >= self.windows[i]


class RateTracker:
    """One segment's counters and averages. Not thread-safe: its container's lock guards it."""

    __slots__ = ("events", "bytes", "started", "last", "_events_avg", "_bytes_avg")

    def __init__(self, now: float, windows: int) -> None:
        self.events = 0  # arrived since ``last``, not yet in the averages
        self.bytes = 0
        self.started = now
        self.last = now
        self._events_avg = [0.0] * windows
        self._bytes_avg = [0.0] * windows

    def fold(self, now: float, windows: tuple[float, ...]) -> None:
        """Bring the averages up to ``now``."""
        dt = now - self.last
        if dt <= 0:
            return  # nothing elapsed: keep the counts for the next fold
        ev, by = self.events / dt, self.bytes / dt
        for i, w in enumerate(windows):
            keep = math.exp(-dt / w)
            self._events_avg[i] = self._events_avg[i] * keep + ev * (1.0 - keep)
            self._bytes_avg[i] = self._bytes_avg[i] * keep + by * (1.0 - keep)
        self.events = self.bytes = 0
        self.last = now

    def snapshot(self, windows: tuple[float, ...]) -> SegmentRates:
        # Age up to the last fold: the averages describe exactly that span.
        age = self.last - self.started
        events, nbytes = [], []
        for i, w in enumerate(windows):
            seen = 1.0 - math.exp(-age / w)
            events.append(self._events_avg[i] / seen if seen > 0 else 0.0)
            nbytes.append(self._bytes_avg[i] / seen if seen > 0 else 0.0)
        return SegmentRates(windows, tuple(events), tuple(nbytes), age)


class RateRegistry:
    """The trackers of one container's segments, keyed by the container's segment id. Callers hold
    the container lock around every method."""

    def __init__(self, config: RateConfig | None = None, clock: Clock = time.monotonic) -> None:
        self.config = config or RateConfig()
        self.clock = clock
        self._trackers: dict[int, RateTracker] = {}

    def record(self, key: int, events: int, nbytes: int) -> None:
        """Count an applied append (the hot path: a lookup and two additions)."""
        t = self._trackers.get(key)
        if t is None:
            t = self._trackers[key] = RateTracker(self.clock(), len(self.config.windows))
        t.events += events
        t.bytes += nbytes

    def rates(self, key: int) -> SegmentRates:
        """Current rates; a segment seen for the first time starts being measured now."""
        now = self.clock()
        windows = self.config.windows
        t = self._trackers.get(key)
        if t is None:
            t = self._trackers[key] = RateTracker(now, len(windows))
        t.fold(now, windows)
        return t.snapshot(windows)

    def forget(self, key: int) -> None:
        self._trackers.pop(key, None)

    def __len__(self) -> int:
        return len(self._trackers)
