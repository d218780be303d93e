"""Throughput and latency of FileDurableDataLog alone, against the raw disk limits of the same run.

Each appender keeps up to ``window`` appends in flight (window 1 = wait for every ack before the next
append). Latency is append() to future completion, sampled on every 8th append via a done callback.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.disk_limits import DiskLimits, measure  # noqa: E402
from millrace.store.durablelog.interface import LogAddress  # noqa: E402
from millrace.store.durablelog.local import FileDurableDataLog  # noqa: E402

_SAMPLE_EVERY = 8


@dataclass(frozen=True)
class Result:
    entry_bytes: int
    appenders: int
    window: int
    appends_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    fsyncs_per_s: float
    entries_per_batch: float


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def run_scenario(directory: str, entry_bytes: int, appenders: int, window: int, duration_s: float) -> Result:
    log_dir = tempfile.mkdtemp(prefix="durablelog-bench-", dir=directory)
    log = FileDurableDataLog(log_dir)
    log.open()
    payload = os.urandom(entry_bytes)
    latencies: list[float] = []
    counts = [0] * appenders
    clock = time.perf_counter
    start_barrier = threading.Barrier(appenders + 1)
    stop_at = [0.0]

    def record_latency(t0: float) -> Callable[[Future[LogAddress]], None]:
        return lambda _future: latencies.append(clock() - t0)

    def appender(index: int) -> None:
        append = log.append
        inflight: deque = deque()
        n = 0
        start_barrier.wait()
        end = stop_at[0]
        while clock() < end:
            if len(inflight) >= window:
                inflight.popleft().result()
            future = append(payload)
            if n % _SAMPLE_EVERY == 0:
                future.add_done_callback(record_latency(clock()))
            inflight.append(future)
            n += 1
        for future in inflight:
            future.result()
        counts[index] = n

    threads = [threading.Thread(target=appender, args=(i,)) for i in range(appenders)]
    for t in threads:
        t.start()
    stats_before = (log.stats.fsyncs, log.stats.appends)
    started = clock()
    stop_at[0] = started + duration_s
    start_barrier.wait()
    for t in threads:
        t.join()
    elapsed = clock() - started  # includes draining the last in-flight appends
    fsyncs = log.stats.fsyncs - stats_before[0]
    appended = log.stats.appends - stats_before[1]
    log.close()
    shutil.rmtree(log_dir, ignore_errors=True)
    assert appended == sum(counts)
    latencies.sort()
    return Result(
        entry_bytes=entry_bytes,
        appenders=appenders,
        window=window,
        appends_per_s=appended / elapsed,
        mb_per_s=appended * entry_bytes / elapsed / 1e6,
        p50_ms=_percentile(latencies, 0.50) * 1e3,
        p99_ms=_percentile(latencies, 0.99) * 1e3,
        fsyncs_per_s=fsyncs / elapsed,
        entries_per_batch=appended / max(fsyncs, 1),
    )


def print_report(limits: DiskLimits, results: list[Result]) -> None:
    print(f"disk: sequential write {limits.sequential_write_mb_s:.1f} MB/s, "
          f"fsync rate {limits.fsyncs_per_s:.0f}/s (100-byte appending writes)")
    print(f"{'entry':>6} {'thr':>4} {'win':>4} {'appends/s':>11} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'fsync/s':>8} {'ent/batch':>9} {'MB/s vs disk':>12} {'fsync/s vs disk':>15}")
    for r in results:
        print(f"{r.entry_bytes:>6} {r.appenders:>4} {r.window:>4} {r.appends_per_s:>11.0f} {r.mb_per_s:>8.2f} "
              f"{r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {r.fsyncs_per_s:>8.0f} {r.entries_per_batch:>9.1f} "
              f"{r.mb_per_s / limits.sequential_write_mb_s:>12.1%} {r.fsyncs_per_s / limits.fsyncs_per_s:>15.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="directory on the disk under test")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per scenario")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1024])
    parser.add_argument("--appenders", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--windows", type=int, nargs="+", default=[1, 64], help="in-flight appends per appender")
    args = parser.parse_args()

    limits = measure(args.dir)
    results = [
        run_scenario(args.dir, size, appenders, window, args.duration)
        for size in args.sizes
        for appenders in args.appenders
        for window in args.windows
    ]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, dir {args.dir}")
    print_report(limits, results)


if __name__ == "__main__":
    main()
