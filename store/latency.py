"""A latency histogram in plain ints, for hot paths: ``observe`` is a bisect and three additions.

Prometheus' own ``Histogram`` takes a lock and walks its buckets on every observation; the request
paths (a Kafka request, a native command, a replicated log's acknowledgement) pay for that once per
event, while the counts are read only when someone scrapes ``/metrics``. So the writer's thread keeps
cumulative-free bucket counts here and the HTTP side folds them into a Prometheus histogram at scrape
(``gateway/shared/metrics.py``).

Threads: one writer at a time (the reactor for requests, a log's I/O thread for its acks). A reader on
another thread takes ``snapshot``: each count it copies is one the writer wrote, but the copy is not
atomic, so the snapshot derives its total count from the buckets it copied, which keeps a histogram's
``_count`` equal to its ``+Inf`` bucket; only ``sum`` may lag by an observation or two.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

# Upper bounds in seconds: Kafka's request times span sub-millisecond answers to long-polls of a
# fetch's max_wait (500 ms by default) and beyond; the last bucket (+Inf) catches the rest.
LATENCY_BUCKETS: tuple[float, ...] = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                      0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class HistogramSnapshot:
    """Bucket upper bounds, the observations in each bucket (not cumulative, one more than the bounds:
    the last is +Inf), and the sum of the observed values."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float

    @property
    def count(self) -> int:
        return sum(self.counts)


class LatencyHistogram:
    """Observations of durations in seconds, counted per bucket of ``bounds``."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        if list(bounds) != sorted(bounds) or not bounds:
            raise ValueError(f"histogram bounds must be a non-empty ascending sequence, not {bounds}")
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (Prometheus' "le").
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    def snapshot(self) -> HistogramSnapshot:
        return HistogramSnapshot(self.bounds, tuple(self.counts), self.total)
