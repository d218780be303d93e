"""Segment store append benchmark: throughput and latency with fsync'd durability.

Every append is acknowledged only after group commit has fsync'd it. Runs 100-byte and 1-KiB
appends with 1 and 16 concurrent writers (each writer waits for its ack before the next append,
so latency is the real round trip through validation, the log, fsync and apply), plus a pipelined
mode that keeps many appends in flight per writer. Several runs per case; medians reported, with
the disk's raw sequential write rate and fsync rate measured in the same run for ratios.

    .venv/bin/python -m benchmarks.store_append_bench [--seconds 3] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import tempfile
import threading
import time
from collections import deque

from benchmarks.disk_limits import measure_fsync_rate, measure_sequential_write
from millrace.store.containers.config import ContainerConfig
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.lts.filesystem import FileSystemChunkStorage
from millrace.store.segment_store import SegmentStore


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def run_case(root: str, size: int, writers: int, seconds: float, pipeline: int) -> dict:
    """One run: ``writers`` threads, each on its own segment, ``pipeline`` appends in flight each."""
    work = tempfile.mkdtemp(dir=root)
    store = SegmentStore(
        4,
        lambda cid: FileDurableDataLog(os.path.join(work, "logs", str(cid))),
        FileSystemChunkStorage(os.path.join(work, "lts")),
        ContainerConfig(),
    )
    store.start()
    payload = os.urandom(size)
    latencies: list[list[float]] = [[] for _ in range(writers)]
    counts = [0] * writers
    start_gate = threading.Barrier(writers + 1)
    stop = threading.Event()

    def writer(w: int) -> None:
        name = f"bench/stream/{w}"
        store.create_segment(name).result()
        inflight: deque = deque()
        lat = latencies[w]
        start_gate.wait()
        while not stop.is_set():
            inflight.append((time.perf_counter(), store.append(name, payload)))
            if len(inflight) >= pipeline:
                t0, fut = inflight.popleft()
                fut.result()
                lat.append(time.perf_counter() - t0)
                counts[w] += 1
        while inflight:
            t0, fut = inflight.popleft()
            fut.result()
            lat.append(time.perf_counter() - t0)
            counts[w] += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    start_gate.wait()
    t_start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t_start
    fsyncs = sum(getattr(c._log, "stats").fsyncs for c in store.containers)  # noqa: B009
    store.close()
    shutil.rmtree(work, ignore_errors=True)
    all_lat = sorted(x for lat in latencies for x in lat)
    total = sum(counts)
    return {
        "events_per_s": total / elapsed,
        "mb_per_s": total * size / elapsed / 1e6,
        "p50_ms": percentile(all_lat, 0.50) * 1000,
        "p99_ms": percentile(all_lat, 0.99) * 1000,
        "appends_per_fsync": total / max(fsyncs, 1),
    }


def median_of(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="millrace-bench-", dir=args.dir)
    try:
        seq = measure_sequential_write(root)
        fsync_rate = measure_fsync_rate(root)
        results = []
        cases = [(100, 1, 1), (100, 16, 1), (1024, 1, 1), (1024, 16, 1), (100, 16, 64), (1024, 16, 64)]
        for size, writers, pipeline in cases:
            med = median_of([run_case(root, size, writers, args.seconds, pipeline) for _ in range(args.runs)])
            med.update(size=size, writers=writers, in_flight_per_writer=pipeline)
            med["mb_per_s_vs_disk"] = med["mb_per_s"] / seq["mb_per_s"]
            results.append(med)
        report = {
            "disk": {"sequential_write_mb_per_s": seq["mb_per_s"], "fsyncs_per_s": fsync_rate["fsyncs_per_s"]},
            "cases": results,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "runs_per_case": args.runs,
            "seconds_per_run": args.seconds,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    d = report["disk"]
    print(f"disk: sequential write {d['sequential_write_mb_per_s']:.0f} MB/s, fsync {d['fsyncs_per_s']:.0f}/s")
    print(f"{'size':>6} {'writers':>7} {'inflight':>8} {'events/s':>10} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'appends/fsync':>13} {'vs disk':>8}")
    for r in results:
        print(f"{r['size']:>6} {r['writers']:>7} {r['in_flight_per_writer']:>8} {r['events_per_s']:>10.0f} "
              f"{r['mb_per_s']:>8.2f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['appends_per_fsync']:>13.1f} "
              f"{r['mb_per_s_vs_disk']:>8.3f}")
    print(f"peak RSS {report['peak_rss_mb']:.0f} MB; medians of {args.runs} runs of {args.seconds}s")


if __name__ == "__main__":
    main()
