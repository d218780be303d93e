"""What scaling costs a Kafka producer, and how fast auto-scaling reacts.

(a) **Produce throughput across a scale event.** A fresh `millrace serve`, an 8-partition topic in
one segment (fixed policy, so only we scale it), and a librdkafka producer (confluent-kafka,
idempotent, acks=all) writing as fast as the server acknowledges. Throughput is counted from the
delivery reports: over a steady window, then over a window that starts with a manual split of the
busy segment (1 -> 2 segments), and one that starts with the merge back (2 -> 1). Also reported per
window: the slowest 100 ms bucket and the longest gap between two delivery reports (a stall), and
how long the split/merge call took.

(b) **Auto-scaling reaction time.** A fresh server with fast auto-scaling (rate windows
--scale-windows, a round every --scale-interval, cooldown --scale-cooldown), an 8-partition topic in
one segment with by_event_rate at --target events/s per segment. The producer runs at 0.3 x target
long enough to warm every rate window, then steps to a rate over the target; the step is the moment
the load crosses the threshold. describe_stream is polled every 20 ms: *scaled* is when the stream
first has more than one segment, *traffic* when every new segment's length has grown. Two steps:
*burst* (8 x target, over the 5 x burst factor: split on the short window) and *sustained*
(2 x target: split once the long window's average passes the target).

Every case runs --runs times on a fresh server; medians are reported.

    .venv/bin/python -m benchmarks.scaling_bench [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from millrace.client.segments import SegmentClient
from tests.server_process import ServerProcess

PARTITIONS = 8


def create_topic(server: ServerProcess, topic: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={"millrace.segments.initial": "1", **config})]
                        )[topic].result(30)


# -- (a) throughput across a manual scale event ----------------------------------------------------

class FloodProducer(threading.Thread):
    """Produces as fast as the server acknowledges, timestamping every delivery report."""

    def __init__(self, bootstrap: str, topic: str, size: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "batch.size": 1 << 20, "queue.buffering.max.messages": 200_000, "queue.buffering.max.kbytes": 1 << 19,
        })
        self.topic = topic
        self.payload = os.urandom(size)
        self.delivered: list[float] = []
        self.errors = 0
        self.stop = threading.Event()

    def _cb(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered.append(time.perf_counter())
        else:
            self.errors += 1

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.producer.produce(self.topic, self.payload, key=str(i).encode(), partition=i % PARTITIONS,
                                      on_delivery=self._cb)
                i += 1
            except BufferError:
                self.producer.poll(0.005)
                continue
            if i % 500 == 0:
                self.producer.poll(0)
        self.producer.flush(60)


def window_stats(times: list[float], start: float, end: float, bucket: float = 0.1) -> dict[str, float]:
    inside = [t for t in times if start <= t < end]
    buckets = [0] * max(1, int(round((end - start) / bucket)))
    for t in inside:
        buckets[min(len(buckets) - 1, int((t - start) / bucket))] += 1
    edges = [start, *inside, end]
    return {
        "msgs_per_s": len(inside) / (end - start),
        "min_bucket_msgs_per_s": min(buckets) / bucket,
        "max_gap_ms": max(b - a for a, b in zip(edges, edges[1:], strict=False)) * 1000,
    }


def run_scale_event_case(size: int, warmup: float, steady: float, window: float) -> dict[str, float]:
    data_dir = tempfile.mkdtemp(prefix="millrace-sbench-")
    server = ServerProcess(data_dir).start()
    try:
        topic = "flood"
        create_topic(server, topic)
        flood = FloodProducer(server.bootstrap, topic, size)
        with SegmentClient("127.0.0.1", server.native_port) as native:
            flood.start()
            time.sleep(warmup)  # connections, producer id, metadata, the queue filling up
            steady_start = time.perf_counter()
            time.sleep(steady)
            split_start = time.perf_counter()
            desc = native.split_segment("kafka", topic, 0, pieces=2)
            split_s = time.perf_counter() - split_start
            assert len(desc["segments"]) == 2, desc
            time.sleep(max(0.0, window - (time.perf_counter() - split_start)) + 0.5)
            merge_start = time.perf_counter()
            desc = native.merge_segments("kafka", topic, [s["name"] for s in desc["segments"]])
            merge_s = time.perf_counter() - merge_start
            assert len(desc["segments"]) == 1, desc
            time.sleep(max(0.0, window - (time.perf_counter() - merge_start)) + 0.5)
            flood.stop.set()
            flood.join(90)
        times = flood.delivered
        out: dict[str, float] = {"errors": flood.errors, "split_call_ms": split_s * 1000,
                                 "merge_call_ms": merge_s * 1000}
        for label, start, end in [("steady", steady_start, split_start), ("split", split_start, split_start + window),
                                  ("merge", merge_start, merge_start + window)]:
            for k, v in window_stats(times, start, end).items():
                out[f"{label}_{k}"] = v
        return out
    finally:
        server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


# -- (b) auto-scaling reaction time ----------------------------------------------------------------

class PacedProducer(threading.Thread):
    """Produces at ``rate`` msgs/s (changeable while running), spread over all partitions."""

    def __init__(self, bootstrap: str, topic: str, size: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5})
        self.topic = topic
        self.payload = os.urandom(size)
        self.rate = rate
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        last = time.perf_counter()
        owed = 0.0
        while not self.stop.is_set():
            time.sleep(0.005)
            now = time.perf_counter()
            owed += (now - last) * self.rate
            last = now
            while owed >= 1:
                self.producer.produce(self.topic, self.payload, key=str(self.sent).encode(),
                                      partition=self.sent % PARTITIONS)
                self.sent += 1
                owed -= 1
            self.producer.poll(0)
        self.producer.flush(30)


def run_autoscale_case(size: int, target: int, step_factor: float, args: argparse.Namespace) -> dict[str, float]:
    data_dir = tempfile.mkdtemp(prefix="millrace-sbench-")
    server = ServerProcess(data_dir, "--scale-windows", args.scale_windows, "--scale-interval-seconds",
                           str(args.scale_interval), "--scale-cooldown-seconds", str(args.scale_cooldown)).start()
    longest_window = max(float(w) for w in args.scale_windows.split(","))
    try:
        topic = "autoscale"
        create_topic(server, topic, **{"millrace.scaling.type": "by_event_rate", "millrace.scaling.target": str(target),
                                       "millrace.scaling.factor": "2", "millrace.scaling.min.segments": "1"})
        producer = PacedProducer(server.bootstrap, topic, size, 0.3 * target)
        with SegmentClient("127.0.0.1", server.native_port) as native:
            producer.start()
            time.sleep(longest_window + 1.0)  # every window warm, at 0.3 x target
            before = native.describe_stream("kafka", topic)["segments"]
            assert len(before) == 1, before
            producer.rate = step_factor * target
            t0 = time.perf_counter()
            scaled = traffic = None
            first_lengths: dict[str, int] = {}
            deadline = t0 + args.reaction_timeout
            while time.perf_counter() < deadline and traffic is None:
                segs = native.describe_stream("kafka", topic)["segments"]
                now = time.perf_counter()
                if len(segs) > 1:
                    if scaled is None:
                        scaled = now - t0
                        first_lengths = {s["name"]: s.get("length", 0) for s in segs}
                    elif all(s.get("length", 0) > first_lengths.get(s["name"], 0) for s in segs):
                        traffic = now - t0
                time.sleep(0.02)
            producer.stop.set()
            producer.join(60)
        return {"scaled_s": scaled if scaled is not None else float("nan"),
                "traffic_s": traffic if traffic is not None else float("nan"),
                "sent_rate": step_factor * target}
    finally:
        server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size", type=int, default=100, help="message value bytes")
    parser.add_argument("--warmup-seconds", type=float, default=2.0)
    parser.add_argument("--steady-seconds", type=float, default=4.0)
    parser.add_argument("--window-seconds", type=float, default=3.0, help="length of each scale-event window")
    parser.add_argument("--target", type=int, default=250, help="auto-scaling target, events/s per segment")
    parser.add_argument("--scale-windows", default="1,2,4")
    parser.add_argument("--scale-interval", type=float, default=0.5)
    parser.add_argument("--scale-cooldown", type=float, default=2.0)
    parser.add_argument("--reaction-timeout", type=float, default=30.0)
    parser.add_argument("--cases", default="throughput,autoscale")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    report: dict[str, Any] = {"args": vars(args)}
    if "throughput" in cases:
        runs = [run_scale_event_case(args.size, args.warmup_seconds, args.steady_seconds, args.window_seconds) for _ in range(args.runs)]
        report["throughput_runs"] = runs
        report["throughput"] = medians(runs)
    if "autoscale" in cases:
        for label, factor in [("burst", 8.0), ("sustained", 2.0)]:
            runs = [run_autoscale_case(args.size, args.target, factor, args) for _ in range(args.runs)]
            report[f"autoscale_{label}_runs"] = runs
            report[f"autoscale_{label}"] = medians(runs)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    if "throughput" in report:
        t = report["throughput"]
        print(f"(a) produce throughput, {PARTITIONS} partitions, {args.size} B values, acks=all idempotent, "
              f"medians of {args.runs} runs")
        print(f"{'window':>8} {'msgs/s':>9} {'min 100ms msgs/s':>17} {'max gap ms':>11} {'call ms':>8}")
        for label, call in [("steady", None), ("split", "split_call_ms"), ("merge", "merge_call_ms")]:
            print(f"{label:>8} {t[label + '_msgs_per_s']:>9.0f} {t[label + '_min_bucket_msgs_per_s']:>17.0f} "
                  f"{t[label + '_max_gap_ms']:>11.1f} {t[call] if call else float('nan'):>8.1f}")
        print(f"  split window / steady = {t['split_msgs_per_s'] / t['steady_msgs_per_s']:.2f}, merge window / "
              f"steady = {t['merge_msgs_per_s'] / t['steady_msgs_per_s']:.2f}; failed deliveries {t['errors']:.0f}; "
              f"windows: steady {args.steady_seconds} s, scale events {args.window_seconds} s from the call")
    for label in ("burst", "sustained"):
        if f"autoscale_{label}" in report:
            a = report[f"autoscale_{label}"]
            each = ", ".join("{:.2f}/{:.2f}".format(r["scaled_s"], r["traffic_s"])
                             for r in report[f"autoscale_{label}_runs"])
            print(f"(b) {label}: load stepped from {0.3 * args.target:.0f} to {a['sent_rate']:.0f} msgs/s "
                  f"(target {args.target}/segment): scaled after {a['scaled_s']:.2f} s, new segments taking traffic "
                  f"after {a['traffic_s']:.2f} s (median; scaled/traffic per run: {each})")
    print(f"auto-scaling: windows {args.scale_windows} s, interval {args.scale_interval} s, "
          f"cooldown {args.scale_cooldown} s")


if __name__ == "__main__":
    main()
