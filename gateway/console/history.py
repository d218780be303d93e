"""The console's memory of the recent past: samples taken every few seconds while the console is in use,
a fixed number of them kept (``ConsoleHistory``).

Nothing else in the server keeps rates over time: a segment's rates (``store.containers.rates``) are
moving averages of now, and the epoch history says when segments were created and sealed but not how
busy they were. So each sample holds, per stream, every open segment's measured rate (its shortest
window), the node's bytes in and out per second (from the containers' counters), and each consumer
group's total lag. The heat map colours a segment's band by these samples; the overview and the group
pages draw them as lines.

Sampling starts with the first console request and stops once no console request came for
``idle_seconds``, so a server nobody watches does no work for the console (as ``/metrics`` computes
its series only when scraped). Threads: the samples and the loop live on the reactor thread; the
segment rates need controller calls (table reads) and are read on the controller pool, one read at a
time (a tick that finds the previous read still running skips it).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twisted.internet import task
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from millrace.gateway.metrics import live_streams
from millrace.store.errors import SegmentNotFoundError

if TYPE_CHECKING:
    from millrace.gateway.http import NodeView, StreamViews

log = logging.getLogger(__name__)

SAMPLE_SECONDS = 5.0
SAMPLES_KEPT = 360  # half an hour at 5 s
IDLE_SECONDS = 600.0

# (events/s, bytes/s) of each open segment of each stream, by "scope/stream" and segment id
StreamRates = dict[str, dict[int, tuple[float, float]]]


@dataclass
class Sample:
    """One moment: when (ms since the epoch) and what was measured then."""

    time_ms: int
    bytes_in_per_s: float | None = None  # None on the first sample: no earlier counters to compare with
    bytes_out_per_s: float | None = None
    group_lag: dict[str, int] = field(default_factory=dict)
    streams: StreamRates = field(default_factory=dict)


def stream_rates(views: StreamViews, store: NodeView) -> StreamRates:
    """Every open segment's rate over the shortest window (blocking: controller and store calls)."""
    out: StreamRates = {}
    for info, segments in live_streams(views.controller):
        rates: dict[int, tuple[float, float]] = {}
        for seg in segments:
            try:
                r = store.segment_rates(seg.name)
            except SegmentNotFoundError:
                continue
            rates[seg.segment_id] = (r.events_per_s[0], r.bytes_per_s[0])
        out[f"{info.scope}/{info.stream}"] = rates
    return out


class ConsoleHistory:
    """The bounded samples, and the loop that takes them while the console is used (reactor thread)."""

    def __init__(self, views: StreamViews, store: NodeView, lags: Callable[[], dict[str, int]],
                 clock: IReactorTime | None = None, interval: float = SAMPLE_SECONDS,
                 kept: int = SAMPLES_KEPT, idle_seconds: float = IDLE_SECONDS) -> None:
        if clock is None:
            from twisted.internet import reactor

            clock = IReactorTime(reactor)
        self.views = views
        self.store = store
        self.lags = lags
        self.clock = clock
        self.interval = interval
        self.idle_seconds = idle_seconds
        self.samples: deque[Sample] = deque(maxlen=kept)
        self._loop: task.LoopingCall | None = None
        self._last_used = 0.0
        self._reading = False
        self._counters: tuple[float, int, int] | None = None  # (monotonic time, bytes in, bytes out)

    @property
    def running(self) -> bool:
        return self._loop is not None and self._loop.running

    def touch(self) -> None:
        """A console request came: keep sampling (start now if idle)."""
        self._last_used = self.clock.seconds()
        if not self.running:
            loop = self._loop = task.LoopingCall(self._tick)
            loop.clock = self.clock
            loop.start(self.interval, now=True).addErrback(self._loop_failed)

    def stop(self) -> None:
        if self.running:
            assert self._loop is not None
            self._loop.stop()
        self._counters = None  # rates across an idle gap would be averages over it, not "now"

    def _loop_failed(self, failure: Failure) -> None:
        log.error("console sampling stopped: %s", failure.getTraceback())

    def _node_counters(self) -> tuple[int, int]:
        appended = read = 0
        for c in self.store.containers:
            appended += c.stats["append_bytes"]
            read += c.stats["read_bytes"]
        return appended, read

    def _tick(self) -> None:
        if self.clock.seconds() - self._last_used > self.idle_seconds:
            self.stop()
            return
        sample = Sample(int(time.time() * 1000))
        now = time.monotonic()
        appended, read = self._node_counters()
        if self._counters is not None:
            then, appended_then, read_then = self._counters
            elapsed = max(now - then, 1e-3)
            sample.bytes_in_per_s = max(0, appended - appended_then) / elapsed
            sample.bytes_out_per_s = max(0, read - read_then) / elapsed
        self._counters = (now, appended, read)
        try:
            sample.group_lag = self.lags()
        except Exception:  # noqa: BLE001 - a sample without lags is still a sample; say why once per tick
            log.warning("console: group lag not sampled", exc_info=True)
        self.samples.append(sample)
        if self._reading:
            return  # the previous stream read is still running: this sample keeps no stream rates
        self._reading = True

        def got(rates: StreamRates) -> None:
            sample.streams = rates

        def failed(failure: Failure) -> None:
            log.warning("console: stream rates not sampled: %s", failure.getErrorMessage())

        def done(_: Any) -> None:
            self._reading = False

        self.views.blocking(stream_rates, self.views, self.store).addCallbacks(got, failed).addBoth(done)

    # -- views of the samples (reactor thread) ---------------------------------------------------------
    def throughput(self) -> list[dict[str, Any]]:
        return [{"time_ms": s.time_ms, "bytes_in_per_s": s.bytes_in_per_s, "bytes_out_per_s": s.bytes_out_per_s}
                for s in self.samples if s.bytes_in_per_s is not None]

    def group_lag(self, group_id: str) -> list[dict[str, Any]]:
        return [{"time_ms": s.time_ms, "lag": s.group_lag[group_id]} for s in self.samples if group_id in s.group_lag]

    def segment_rates(self, scope: str, stream: str) -> list[dict[str, Any]]:
        """[{time_ms, segments: {segment id: {events_per_s, bytes_per_s}}}] of the samples holding the stream."""
        key = f"{scope}/{stream}"
        return [{"time_ms": s.time_ms, "segments": {str(sid): {"events_per_s": ev, "bytes_per_s": by}
                                                    for sid, (ev, by) in s.streams[key].items()}}
                for s in self.samples if key in s.streams]
