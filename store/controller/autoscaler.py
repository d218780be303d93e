"""Automatic scaling of streams by ingest rate (Pravega's AutoScaleProcessor + scale requests).

Every ``interval`` the auto-scaler reads each open segment's rates (measured by its container, see
``store.containers.rates``) for every stream whose ScalingPolicy is BY_RATE_IN_EVENTS_PER_SEC or
BY_RATE_IN_KBYTES_PER_SEC, and makes at most one scale per stream per round:

- **Scale up** a segment that is *bursting* (short window over ``burst_factor`` x target, once the
  segment has been measured for a short window) or *sustained hot* (long window over target, once
  measured for a long window): split it into ``scale_factor`` pieces (at least 2), hottest first.
- **Scale down** two adjacent segments when both are *cold*: every window below ``cold_fraction``
  x target (so the merged segment starts below target) and measured for a long window; never below
  the policy's ``min_segments``; the coldest pair first.
- **Resume**: with the default executor, a scale stuck in SCALING for ``resume_after`` seconds
  (its caller died) is rolled forward with ``Controller.complete_scale``.
- **Cooldown**: a segment a scale created (and one the auto-scaler could not split) is left alone
  for ``cooldown`` seconds. Windows restart at zero for new segments, so the warm-up rules above
  add their own delay on top.

Split points are equal splits of the key range unless a ``boundaries(scope, stream, segment)``
callback restricts them: it returns the allowed interior points (for a Kafka topic: the starts of
the partition slices inside the segment); the points nearest the equal split are taken, and no
point at all means the segment cannot split (one partition left). For such a segment under
sustained load the optional ``grow_partitions(scope, stream, segment, rates)`` callback is called
(the Kafka gateway may add partitions; off by default). The scale itself goes through
``executor(scope, stream, seal_ids, new_ranges, reason)``, by default ``Controller.scale_stream``;
the Kafka gateway passes its own to choose when predecessors are sealed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from millrace.store.containers.rates import SegmentRates
from millrace.store.controller.errors import ScaleConflictError, StreamSealedError
from millrace.store.controller.records import ScaleReason, ScalingType, SegmentRange, StreamState
from millrace.store.controller.scaling import equal_split_points
from millrace.store.errors import SegmentNotFoundError, StreamNotFoundError

if TYPE_CHECKING:
    from twisted.internet.task import LoopingCall

    from millrace.store.contracts import SegmentService
    from millrace.store.controller.controller import Controller

log = logging.getLogger(__name__)

Boundaries = Callable[[str, str, SegmentRange], list[float]]
Executor = Callable[[str, str, list[int], list[tuple[float, float]], str], Any]
GrowPartitions = Callable[[str, str, SegmentRange, SegmentRates], None]

RATE_POLICIES = (ScalingType.BY_RATE_IN_EVENTS_PER_SEC, ScalingType.BY_RATE_IN_KBYTES_PER_SEC)
# Losing a race or a stream going away while we decide is normal: just decide again next round.
_EXPECTED = (ScaleConflictError, StreamSealedError, StreamNotFoundError, SegmentNotFoundError)


@dataclass(frozen=True)
class AutoScalerConfig:
    interval: float = 1.0  # seconds between rounds; keep it at most half the shortest rate window
    burst_factor: float = 5.0  # short window over this many times the target: scale up at once
    cold_fraction: float = 0.5  # every window under this share of the target: cold
    cooldown: float = 10.0  # seconds a segment made by a scale (or found unsplittable) is left alone
    # With the default executor: a scale left SCALING this long (wall clock; its caller crashed or
    # its before_seal failed) is rolled forward. A custom executor's owner resumes its own.
    resume_after: float = 30.0

    def __post_init__(self) -> None:
        if (
            self.interval <= 0
            or self.burst_factor < 1
            or not 0 < self.cold_fraction <= 1
            or self.cooldown < 0
            or self.resume_after < 0
        ):
            raise ValueError(f"invalid auto-scaler configuration {self}")


@dataclass(frozen=True)
class ScaleAction:
    """What one round did to one stream."""

    scope: str
    stream: str
    reason: str  # the scale's ScaleReason, or GROW_PARTITIONS, or RESUMED (a stuck scale finished)
    segments: tuple[int, ...]  # sealed (or, for grow-partitions, the hot one)
    new_ranges: tuple[tuple[float, float], ...]  # empty for grow-partitions


GROW_PARTITIONS = "grow-partitions"
RESUMED = "resumed"


class AutoScaler:
    def __init__(
        self,
        controller: Controller,
        store: SegmentService,
        clock: Callable[[], float] = time.monotonic,
        config: AutoScalerConfig | None = None,
        boundaries: Boundaries | None = None,
        executor: Executor | None = None,
        grow_partitions: GrowPartitions | None = None,
    ) -> None:
        self.controller = controller
        self.store = store
        self.clock = clock
        self.config = config or AutoScalerConfig()
        self.boundaries = boundaries
        self._own_executor = executor is None
        self.executor: Executor = executor or self._scale_with_controller
        self.grow_partitions = grow_partitions
        self._cooling: dict[tuple[str, str, int], float] = {}  # segment -> when its cooldown began
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: LoopingCall | None = None

    # -- one round ---------------------------------------------------------------------------------
    def evaluate_once(self) -> list[ScaleAction]:
        """Look at every rate-scaled stream once; returns what was done."""
        now = self.clock()
        cutoff = now - self.config.cooldown
        self._cooling = {k: t for k, t in self._cooling.items() if t > cutoff}
        actions: list[ScaleAction] = []
        for scope in self.controller.list_scopes():
            try:
                streams = self.controller.list_streams(scope)
            except _EXPECTED:
                continue
            for stream in streams:
                try:
                    action = self._evaluate_stream(scope, stream, now)
                except _EXPECTED as exc:
                    log.info("auto-scaling %s/%s skipped this round: %s", scope, stream, exc)
                    continue
                except Exception:
                    log.exception("auto-scaling %s/%s failed", scope, stream)
                    continue
                if action is not None:
                    actions.append(action)
        return actions

    def _evaluate_stream(self, scope: str, stream: str, now: float) -> ScaleAction | None:
        info = self.controller.get_stream(scope, stream)
        policy = info.config.scaling
        pending = info.pending_scale
        if info.state == StreamState.SCALING and pending is not None and self._own_executor:
            if time.time() * 1000 - pending.created_ms >= self.config.resume_after * 1000:
                log.warning("auto-scaling %s/%s: rolling forward scale to epoch %d", scope, stream, pending.epoch)
                self.controller.complete_scale(scope, stream)
                for sid, _, _ in pending.successors:
                    self._cooling[(scope, stream, sid)] = now
                return ScaleAction(scope, stream, RESUMED, pending.sealed, tuple(pending.new_ranges()))
            return None
        if info.state != StreamState.ACTIVE or policy.type not in RATE_POLICIES or policy.target_rate <= 0:
            return None
        target = float(policy.target_rate)
        kib = policy.type == ScalingType.BY_RATE_IN_KBYTES_PER_SEC
        segments = self.controller.get_current_segments(scope, stream)
        rates = [self.store.segment_rates(s.name) for s in segments]
        metric = [tuple(b / 1024 for b in r.bytes_per_s) if kib else r.events_per_s for r in rates]
        cooling = [(scope, stream, s.segment_id) in self._cooling for s in segments]

        hot: list[tuple[float, int, bool]] = []  # (how far over target, index, sustained)
        for i, (r, m) in enumerate(zip(rates, metric, strict=True)):
            if cooling[i]:
                continue
            burst = r.warm(0) and m[0] > self.config.burst_factor * target
            sustained = r.warm(len(m) - 1) and m[-1] > target
            if burst or sustained:
                hot.append((max(m[0] / self.config.burst_factor, m[-1]) / target, i, sustained))
        for _, i, sustained in sorted(hot, reverse=True):
            action = self._scale_up(scope, stream, segments, i, policy.scale_factor, sustained, rates[i], now)
            if action is not None:
                return action

        if len(segments) <= max(1, policy.min_segments):
            return None
        limit = self.config.cold_fraction * target
        cold = [
            not cooling[i] and r.warm(len(m) - 1) and all(v < limit for v in m)
            for i, (r, m) in enumerate(zip(rates, metric, strict=True))
        ]
        pairs = [i for i in range(len(segments) - 1) if cold[i] and cold[i + 1]]
        if not pairs:
            return None
        i = min(pairs, key=lambda j: metric[j][-1] + metric[j + 1][-1])
        a, b = segments[i], segments[i + 1]
        return self._execute(scope, stream, segments, [a, b], [(a.key_start, b.key_end)], ScaleReason.SCALE_DOWN, now)

    def _scale_up(
        self,
        scope: str,
        stream: str,
        segments: list[SegmentRange],
        i: int,
        scale_factor: int,
        sustained: bool,
        rates: SegmentRates,
        now: float,
    ) -> ScaleAction | None:
        seg = segments[i]
        points = self._split_points(scope, stream, seg, max(2, scale_factor))
        if not points:
            # Cannot split: cool it so we neither retry nor ask to grow partitions every round.
            self._cooling[(scope, stream, seg.segment_id)] = now
            if self.grow_partitions is None or not sustained:
                return None
            self.grow_partitions(scope, stream, seg, rates)
            return ScaleAction(scope, stream, GROW_PARTITIONS, (seg.segment_id,), ())
        bounds = [seg.key_start, *points, seg.key_end]
        ranges = list(zip(bounds, bounds[1:], strict=False))
        return self._execute(scope, stream, segments, [seg], ranges, ScaleReason.SCALE_UP, now)

    def _split_points(self, scope: str, stream: str, seg: SegmentRange, pieces: int) -> list[float]:
        ideal = equal_split_points(seg.key_start, seg.key_end, pieces)
        if self.boundaries is None:
            return ideal
        allowed = sorted({p for p in self.boundaries(scope, stream, seg) if seg.key_start < p < seg.key_end})
        if not allowed:
            return []
        def nearest(x: float) -> float:
            return min(allowed, key=lambda p: (abs(p - x), p))

        # The allowed point nearest each ideal one; several ideals may share a point (fewer pieces).
        return sorted({nearest(x) for x in ideal})

    def _execute(
        self,
        scope: str,
        stream: str,
        segments: list[SegmentRange],
        seal: list[SegmentRange],
        ranges: list[tuple[float, float]],
        reason: str,
        now: float,
    ) -> ScaleAction:
        ids = [s.segment_id for s in seal]
        log.info("auto-scaling %s/%s: %s, sealing %s into %s", scope, stream, reason, ids, ranges)
        self.executor(scope, stream, ids, ranges, reason)
        before = {s.segment_id for s in segments}
        for s in self.controller.get_current_segments(scope, stream):
            if s.segment_id not in before:
                self._cooling[(scope, stream, s.segment_id)] = now
        return ScaleAction(scope, stream, reason, tuple(ids), tuple(ranges))

    def _scale_with_controller(
        self, scope: str, stream: str, seal: list[int], ranges: list[tuple[float, float]], reason: str
    ) -> None:
        self.controller.scale_stream(scope, stream, seal, ranges, reason)

    # -- periodic driver ---------------------------------------------------------------------------
    def start(self, reactor: Any = None) -> None:
        """Run ``evaluate_once`` every ``interval``: on a daemon thread, or, given a Twisted
        reactor, from a LoopingCall that runs each round on the reactor's thread pool (the
        controller blocks) and never overlaps rounds."""
        if self._thread is not None or self._loop is not None:
            raise RuntimeError("auto-scaler already started")
        if reactor is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="autoscaler", daemon=True)
            self._thread.start()
            return
        from twisted.internet import task, threads

        def tick() -> Any:
            return threads.deferToThreadPool(reactor, reactor.getThreadPool(), self._round)

        self._loop = task.LoopingCall(tick)
        self._loop.clock = reactor
        self._loop.start(self.config.interval, now=False)

    def stop(self) -> None:
        if self._loop is not None:
            if self._loop.running:
                self._loop.stop()
            self._loop = None
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.config.interval):
            self._round()

    def _round(self) -> None:
        try:
            self.evaluate_once()
        except Exception:  # noqa: BLE001 - the driver must outlive one bad round
            log.exception("auto-scaler round failed")


__all__ = ["GROW_PARTITIONS", "RESUMED", "AutoScaler", "AutoScalerConfig", "ScaleAction"]
