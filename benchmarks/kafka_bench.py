"""Kafka produce and consume through Millrace with librdkafka (confluent-kafka).

Starts a fresh `millrace serve` process per case, produces N messages as fast as the client can with
acks=all (idempotent, as modern clients default to) to a topic of 1 or 8 partitions, then consumes
them all back. Then, separately, produces at a fixed moderate rate (--latency-rate msgs/s, linger 0)
to measure p50/p99 produce latency (produce() call to delivery report) without client-side queueing.
Reports msgs/s and MB/s, consume msgs/s, the server's CPU seconds and peak RSS; each case runs
several times and the medians are reported, next to the disk's raw sequential write and fsync
rates measured in the same run.

    .venv/bin/python -m benchmarks.kafka_bench [--messages 200000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.disk_limits import measure_fsync_rate, measure_sequential_write
from tests.server_process import ServerProcess


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


class RssSampler(threading.Thread):
    """A process's RSS every ``every`` seconds: its peak, and (seconds since start, bytes) samples."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.every = every
        self.peak = 0
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.began = time.monotonic()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                rss = self.proc.memory_info().rss
            except psutil.Error:
                return
            self.peak = max(self.peak, rss)
            self.samples.append((time.monotonic() - self.began, rss))
            self.stop.wait(self.every)


def measure_latency(bootstrap: str, topic: str, size: int, partitions: int, rate: int, seconds: float) -> list[float]:
    """Delivery latencies of messages produced at a fixed ``rate``, each sent at once (linger 0)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0})
    payload = os.urandom(size)
    # Warm up first: the first messages wait for bootstrap, metadata and InitProducerId, which is
    # client start-up, not produce latency.
    for p in range(partitions):
        producer.produce(topic, payload, partition=p)
    producer.flush(30)
    latencies: list[float] = []
    interval = 1.0 / rate
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        due = start + i * interval
        while (now := time.perf_counter()) < due:
            producer.poll(min(due - now, 0.001))
        producer.produce(topic, payload, partition=i % partitions,
                         on_delivery=lambda e, m, s=now: e is None and latencies.append(time.perf_counter() - s))
        producer.poll(0)
    producer.flush(30)
    return sorted(latencies)


def produce_then_consume(server: ServerProcess, conf: dict, topic: str, messages: int, size: int, partitions: int,
                         compression: str = "none") -> dict:
    """Produce ``messages`` of ``size`` bytes round-robin over the topic's partitions as fast as librdkafka
    can (acks=all, idempotent, linger 5 ms), then consume them all back; rates and the server's CPU
    seconds per million messages of each phase. ``conf`` is the clients' connection settings."""
    admin = AdminClient(conf)  # held: a collected client ends its requests unanswered
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({
        **conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 1 << 20,
        "compression.type": compression, "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1 << 20,
    })
    payload = os.urandom(size)
    errors = [0]

    def delivered(err, msg) -> None:  # noqa: ANN001 - librdkafka callback
        if err is not None:
            errors[0] += 1

    cpu0 = sum(server_cpu(server))
    t0 = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, payload, key=str(i).encode(), partition=i % partitions,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    produce_s = time.perf_counter() - t0
    produce_cpu = sum(server_cpu(server)) - cpu0

    consumer = Consumer({**conf, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                         "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 10 << 20})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    cpu1 = sum(server_cpu(server))
    t1 = time.perf_counter()
    while got < messages and time.perf_counter() - t1 < 120:
        for m in consumer.consume(10000, 1.0):
            if m.error() is None:
                got += 1
    consume_s = time.perf_counter() - t1
    consume_cpu = sum(server_cpu(server)) - cpu1
    consumer.close()
    return {
        "produce_msgs_per_s": messages / produce_s,
        "produce_mb_per_s": messages * size / produce_s / 1e6,
        "server_cpu_s_per_million": produce_cpu / messages * 1e6,
        "consume_msgs_per_s": got / consume_s,
        "consume_mb_per_s": got * size / consume_s / 1e6,
        "consume_cpu_s_per_million": consume_cpu / max(got, 1) * 1e6,
        "consumed": got,
        "errors": errors[0],
    }


def run_case(size: int, partitions: int, messages: int, compression: str, latency_rate: int) -> dict:
    data_dir = tempfile.mkdtemp(prefix="millrace-kbench-")
    server = ServerProcess(data_dir).start()
    sampler = RssSampler(server.proc.pid)
    sampler.start()
    try:
        topic = f"bench-{size}-{partitions}"
        result = produce_then_consume(server, {"bootstrap.servers": server.bootstrap}, topic, messages, size,
                                      partitions, compression)
        latencies = measure_latency(server.bootstrap, topic, size, partitions, latency_rate, 3.0)
        del result["consume_mb_per_s"]
        return {**result, "p50_ms": percentile(latencies, 0.5) * 1000, "p99_ms": percentile(latencies, 0.99) * 1000,
                "server_peak_rss_mb": sampler.peak / 1e6}
    finally:
        sampler.stop.set()
        server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


def run_kcat_case(size: int, partitions: int, messages: int) -> dict:
    """The same produce with kcat (librdkafka driven from C), so the client is not the bottleneck:
    messages are the lines of a file, produced with acks=all and idempotence, then consumed back."""
    data_dir = tempfile.mkdtemp(prefix="millrace-kbench-")
    lines = os.path.join(data_dir, "messages.txt")
    with open(lines, "wb") as f:
        f.write((b"x" * (size - 1) + b"\n") * messages)
    server = ServerProcess(os.path.join(data_dir, "server")).start()
    try:
        topic = f"kcat-{size}-{partitions}"
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
        cpu0 = sum(server_cpu(server))
        t0 = time.perf_counter()
        subprocess.run(["kcat", "-P", "-b", server.bootstrap, "-t", topic, "-l", "-X", "acks=all",
                        "-X", "enable.idempotence=true", "-X", "linger.ms=20", "-X", "batch.size=1000000",
                        "-X", "queue.buffering.max.messages=2000000", "-X", "queue.buffering.max.kbytes=2000000",
                        lines], check=True, stderr=subprocess.DEVNULL, timeout=600)
        produce_s = time.perf_counter() - t0
        cpu = sum(server_cpu(server)) - cpu0
        cpu1 = sum(server_cpu(server))
        t1 = time.perf_counter()
        out = subprocess.run(["kcat", "-C", "-b", server.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
                              "-f", "%o\n"], capture_output=True, check=True, timeout=600).stdout
        consume_s = time.perf_counter() - t1
        consume_cpu = sum(server_cpu(server)) - cpu1
        return {
            "produce_msgs_per_s": messages / produce_s,
            "produce_mb_per_s": messages * size / produce_s / 1e6,
            "server_cpu_s_per_million": cpu / messages * 1e6,
            "consume_msgs_per_s": out.count(b"\n") / consume_s,
            "consume_cpu_s_per_million": consume_cpu / max(out.count(b"\n"), 1) * 1e6,
            "consumed": out.count(b"\n"),
            "server_rss_mb": psutil.Process(server.proc.pid).memory_info().rss / 1e6,
        }
    finally:
        server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


def server_cpu(server: ServerProcess) -> tuple[float, float]:
    times = psutil.Process(server.proc.pid).cpu_times()
    return times.user, times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compression", default="none")
    parser.add_argument("--latency-rate", type=int, default=2000, help="msgs/s for the latency phase")
    parser.add_argument("--kcat-messages", type=int, default=1_000_000,
                        help="messages for the kcat (C client) cases; 0 skips them")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="millrace-disk-")
    try:
        disk = {"sequential_write_mb_per_s": measure_sequential_write(scratch)["mb_per_s"],
                "fsyncs_per_s": measure_fsync_rate(scratch)["fsyncs_per_s"]}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results = []
    for size, partitions in [(100, 1), (100, 8), (1024, 1), (1024, 8)]:
        runs = [run_case(size, partitions, args.messages, args.compression, args.latency_rate)
                for _ in range(args.runs)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        med.update(size=size, partitions=partitions,
                   produce_vs_disk=med["produce_mb_per_s"] / disk["sequential_write_mb_per_s"])
        results.append(med)
    kcat_results = []
    if args.kcat_messages and shutil.which("kcat"):
        for size, partitions in [(100, 1), (100, 8), (1024, 8)]:
            runs = [run_kcat_case(size, partitions, args.kcat_messages) for _ in range(args.runs)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            med.update(size=size, partitions=partitions,
                       produce_vs_disk=med["produce_mb_per_s"] / disk["sequential_write_mb_per_s"])
            kcat_results.append(med)
    if args.json:
        print(json.dumps({"disk": disk, "cases": results, "kcat_cases": kcat_results}, indent=2))
        return
    print(f"disk: sequential write {disk['sequential_write_mb_per_s']:.0f} MB/s, fsync {disk['fsyncs_per_s']:.0f}/s")
    print(f"{'size':>5} {'parts':>5} {'prod msg/s':>11} {'MB/s':>7} {'cpu s/M':>8} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'cons msg/s':>11} {'cons cpu':>8} {'RSS MB':>7} {'vs disk':>7} {'errors':>6}")
    for r in results:
        print(f"{r['size']:>5} {r['partitions']:>5} {r['produce_msgs_per_s']:>11.0f} {r['produce_mb_per_s']:>7.1f} "
              f"{r['server_cpu_s_per_million']:>8.2f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} "
              f"{r['consume_msgs_per_s']:>11.0f} {r['consume_cpu_s_per_million']:>8.2f} "
              f"{r['server_peak_rss_mb']:>7.0f} {r['produce_vs_disk']:>7.3f} "
              f"{r['errors']:>6.0f}")
    if kcat_results:
        print(f"\nkcat (C client) load generator, {args.kcat_messages} messages, acks=all, idempotent:")
        print(f"{'size':>5} {'parts':>5} {'prod msg/s':>11} {'MB/s':>7} {'cpu s/M':>8} {'cons msg/s':>11} "
              f"{'cons cpu':>8} {'consumed':>9} {'RSS MB':>7} {'vs disk':>7}")
        for r in kcat_results:
            print(f"{r['size']:>5} {r['partitions']:>5} {r['produce_msgs_per_s']:>11.0f} {r['produce_mb_per_s']:>7.1f} "
                  f"{r['server_cpu_s_per_million']:>8.2f} {r['consume_msgs_per_s']:>11.0f} "
                  f"{r['consume_cpu_s_per_million']:>8.2f} {r['consumed']:>9.0f} "
                  f"{r['server_rss_mb']:>7.0f} {r['produce_vs_disk']:>7.3f}")
    print(f"medians of {args.runs} runs of {args.messages} messages, compression={args.compression}, acks=all; "
          f"latency at {args.latency_rate} msgs/s with linger.ms=0; cpu s/M = server CPU seconds per million "
          f"messages produced, cons cpu = per million consumed")


if __name__ == "__main__":
    main()
