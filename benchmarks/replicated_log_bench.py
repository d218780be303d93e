"""Append throughput and latency of the replicated log (3 local ``millrace logd`` processes, write
quorum 3, ack quorum 2) next to the local file log, in the same run, on the same disk; and the same
replicated log over CURVE (3 more logds with the cluster's keys: encryption and authentication on every
replica link), so what CURVE costs is read off one table.

Each appender keeps up to ``window`` appends in flight; latency is append() to future completion.
Every scenario runs ``--runs`` times per log, alternating the logs, and the table shows medians.

    python benchmarks/replicated_log_bench.py [--seconds 3] [--runs 3] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from millrace.store.durablelog.curve import CurveClientKeys, create_cluster_keys  # noqa: E402
from millrace.store.durablelog.interface import DurableDataLog, LogAddress  # noqa: E402
from millrace.store.durablelog.local import FileDurableDataLog  # noqa: E402
from tests.durablelog.logd_process import Replicas  # noqa: E402


@dataclass(frozen=True)
class Run:
    appends_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float


def measure(log: DurableDataLog, entry_bytes: int, appenders: int, window: int, seconds: float) -> Run:
    payload = os.urandom(entry_bytes)
    latencies: list[list[float]] = [[] for _ in range(appenders)]
    counts = [0] * appenders
    barrier = threading.Barrier(appenders + 1)
    stop_at = [0.0]
    clock = time.perf_counter

    def appender(index: int) -> None:
        mine = latencies[index]
        inflight: list[tuple[float, Future[LogAddress]]] = []
        barrier.wait()
        while clock() < stop_at[0]:
            inflight.append((clock(), log.append(payload)))
            if len(inflight) >= window:
                started, future = inflight.pop(0)
                future.result(60)
                mine.append(clock() - started)
                counts[index] += 1
        for started, future in inflight:
            future.result(60)
            mine.append(clock() - started)
            counts[index] += 1

    threads = [threading.Thread(target=appender, args=(i,)) for i in range(appenders)]
    for t in threads:
        t.start()
    began = clock()
    stop_at[0] = began + seconds
    barrier.wait()
    for t in threads:
        t.join()
    elapsed = clock() - began
    flat = sorted(x for xs in latencies for x in xs)
    total = sum(counts)
    return Run(total / elapsed, total * entry_bytes / elapsed / 1e6,
               flat[len(flat) // 2] * 1000, flat[min(len(flat) - 1, int(0.99 * len(flat)))] * 1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the logs and journals go (default: a temp dir)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="replicated-bench-", dir=args.dir))
    replicas = Replicas(root / "replicas", 3).start()
    keys = create_cluster_keys(root / "keys")
    curve = CurveClientKeys.load(keys["node_secret"], keys["logd_public"])
    curve_replicas = Replicas(root / "curve-replicas", 3, "--curve-secret-key", str(keys["logd_secret"]),
                              "--curve-authorized-keys", str(keys["node_public"].parent)).start()
    scenarios = [(1024, 1, 1), (1024, 4, 16), (65536, 4, 4)]
    opened: dict[str, Callable[[str], DurableDataLog]] = {
        "file": lambda name: FileDurableDataLog(str(root / "file" / name)),
        "replicated 3/3/2": lambda name: replicas.log(name),
        "CURVE 3/3/2": lambda name: curve_replicas.log(name, curve=curve),
    }
    try:
        print(f"{'log':<18}{'entry':>7}{'thr':>5}{'win':>5}{'appends/s':>12}{'MB/s':>9}{'p50 ms':>9}{'p99 ms':>9}")
        for entry_bytes, appenders, window in scenarios:
            results: dict[str, list[Run]] = {kind: [] for kind in opened}
            for run in range(args.runs):
                for kind, make in opened.items():
                    log = make(f"{kind.split()[0]}-{entry_bytes}-{appenders}-{window}-{run}")
                    log.open()
                    try:
                        results[kind].append(measure(log, entry_bytes, appenders, window, args.seconds))
                    finally:
                        log.close()
            for kind, runs in results.items():
                def median(pick: Callable[[Run], float], runs: list[Run] = runs) -> float:
                    return statistics.median(pick(r) for r in runs)

                print(f"{kind:<18}{entry_bytes:>7}{appenders:>5}{window:>5}{median(lambda r: r.appends_per_s):>12.0f}"
                      f"{median(lambda r: r.mb_per_s):>9.1f}{median(lambda r: r.p50_ms):>9.2f}"
                      f"{median(lambda r: r.p99_ms):>9.2f}")
    finally:
        replicas.close()
        curve_replicas.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
