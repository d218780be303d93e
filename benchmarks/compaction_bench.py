"""Log compaction: how long a round takes and what it costs produce latency while it runs.

Per run, a fresh `millrace serve` (INFO logs, cleaner checked every second) gets a one-partition topic
with cleanup.policy=delete, loaded with --records records (100-byte values, batches of 100) over --keys
keys. Produce latency of single-record batches (acks=all, one at a time, 5 ms apart) is measured for a
few seconds, then cleanup.policy becomes compact: the first round cleans everything and later rounds
(every second, min.cleanable.dirty.ratio=0.01) clean the probes; latency is measured again while they
run. Reports, as medians over --runs: the first round's seconds and records/s, and p50/p99/max produce
latency before and during compaction.

    .venv/bin/python -m benchmarks.compaction_bench [--records 200000] [--keys 5000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from typing import Any

from millrace.protocol.records import NewRecord, build_record_batch
from tests.kafka.test_admin_wire import SET, TOPIC, incremental
from tests.kafka.wire import KafkaWire, local
from tests.server_process import ServerProcess

_ROUND = re.compile(r"compacted .* below offset (\d+): (\d+) of (\d+) records kept in ([\d.]+) s")


class _InfoServer(ServerProcess):
    def command(self) -> list[str]:
        return [a if a != "WARNING" else "INFO" for a in super().command()]


def _latencies(w: KafkaWire, seconds: float) -> list[float]:
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        w.produce("bench", 0, build_record_batch([NewRecord(b"probe", b"y")]))
        out.append((time.perf_counter() - started) * 1000)
        time.sleep(0.005)
    return sorted(out)


def _summary(lat: list[float]) -> dict[str, float]:
    return {"p50_ms": lat[len(lat) // 2], "p99_ms": lat[int(len(lat) * 0.99)], "max_ms": lat[-1]}


def run_once(records: int, keys: int, measure_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data:
        server = _InfoServer(data, "--retention-check-seconds", "1").start()
        try:
            w = local(server.kafka_port)
            w.create("bench", 1, cleanup_policy="delete", min_cleanable_dirty_ratio="0.01",
                     file_delete_delay_ms="1000")
            for i in range(0, records, 100):
                w.produce("bench", 0, build_record_batch(
                    [NewRecord(f"key{(i + j) % keys}".encode(), b"x" * 100) for j in range(100)]))
            idle = _latencies(w, measure_s)
            assert incremental(w, 1, TOPIC, "bench", [("cleanup.policy", SET, "compact")]).error_code == 0
            during = _latencies(w, measure_s * 3)
            deadline = time.monotonic() + 60
            first = None
            while first is None and time.monotonic() < deadline:
                first = next((m for m in map(_ROUND.search, server.output) if m and int(m.group(3)) >= records),
                             None)
                time.sleep(0.2)
            assert first is not None, "the first round did not finish"
            seconds = float(first.group(4))
            return {"round_s": seconds, "round_records_per_s": int(first.group(3)) / seconds,
                    "kept": int(first.group(2)), "idle": _summary(idle), "during": _summary(during)}
        finally:
            server.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--measure-seconds", type=float, default=4.0)
    args = parser.parse_args()
    runs = [run_once(args.records, args.keys, args.measure_seconds) for _ in range(args.runs)]

    def median(path: tuple[str, ...]) -> float:
        values = []
        for r in runs:
            v: Any = r
            for part in path:
                v = v[part]
            values.append(v)
        return round(statistics.median(values), 2)

    print(json.dumps({
        "records": args.records, "keys": args.keys, "runs": args.runs,
        "first_round_s": median(("round_s",)), "first_round_records_per_s": median(("round_records_per_s",)),
        "produce_idle": {k: median(("idle", k)) for k in ("p50_ms", "p99_ms", "max_ms")},
        "produce_during_compaction": {k: median(("during", k)) for k in ("p50_ms", "p99_ms", "max_ms")},
    }, indent=2))


if __name__ == "__main__":
    main()
