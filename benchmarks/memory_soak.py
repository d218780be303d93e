"""Server memory under a stream of small requests: does RSS follow the budgets or the traffic?

Starts ``millrace serve --cache-mb CACHE`` and produces BATCHES single-record batches (librdkafka with
linger 0 and batch.num.messages 1, acks=all, idempotent: the request pattern of an application that
sends each event as it happens), sampling the server's RSS every second. Then restarts the server over
the same data and reports how long it took to be ready and its RSS then. What grows with the number of
batches after the read cache has filled is state the server keeps per batch, which no budget bounds.

    .venv/bin/python -m benchmarks.memory_soak [--batches 600000] [--partitions 1] [--cache-mb 64]
        [--producers 1] [--samples FILE]

``--producers`` runs that many producer processes side by side, each with its share of the batches (a
long soak then takes less time; each is its own connection with its own requests in flight). ``--samples``
writes every RSS sample (seconds, bytes) as JSON.

Never a test: the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import tempfile
import time

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.kafka_bench import RssSampler
from tests.server_process import ServerProcess


def produce_single_record_batches(bootstrap: str, topic: str, batches: int, partitions: int,
                                  size: int) -> tuple[float, int]:
    """Seconds taken and delivery errors."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0, "batch.num.messages": 1, "queue.buffering.max.messages": 100_000})
    payload = os.urandom(size)
    errors = [0]

    def delivered(err: object, _: object) -> None:
        if err is not None:
            errors[0] += 1

    began = time.perf_counter()
    for i in range(batches):
        while True:
            try:
                producer.produce(topic, payload, partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(300)
    return time.perf_counter() - began, errors[0] + left


def produce_in_processes(bootstrap: str, topic: str, batches: int, partitions: int, size: int,
                         producers: int) -> tuple[float, int]:
    """``produce_single_record_batches`` split over ``producers`` processes: seconds for all, errors."""
    if producers == 1:
        return produce_single_record_batches(bootstrap, topic, batches, partitions, size)
    shares = [batches // producers + (1 if i < batches % producers else 0) for i in range(producers)]
    began = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(producers) as pool:
        results = pool.starmap(produce_single_record_batches,
                               [(bootstrap, topic, share, partitions, size) for share in shares])
    return time.perf_counter() - began, sum(errors for _, errors in results)


def run(batches: int, partitions: int, size: int, cache_mb: int, producers: int = 1,
        samples_path: str | None = None) -> dict:
    data_dir = tempfile.mkdtemp(prefix="millrace-soak-")
    args = ("--cache-mb", str(cache_mb))
    server = ServerProcess(data_dir, *args).start()
    try:
        trace = RssSampler(server.proc.pid, every=1.0)
        trace.start()
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        admin.create_topics([NewTopic("soak", partitions, 1)])["soak"].result(30)
        seconds, errors = produce_in_processes(server.bootstrap, "soak", batches, partitions, size, producers)
        time.sleep(2)
        trace.stop.set()
        trace.join()
        server.kill()
        restart_began = time.perf_counter()
        server = ServerProcess(data_dir, *args).start(timeout=600)
        restart_s = time.perf_counter() - restart_began
        restarted_rss = psutil.Process(server.proc.pid).memory_info().rss
    finally:
        server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
    samples = trace.samples
    if samples_path:
        with open(samples_path, "w") as out:
            json.dump([[round(t, 1), rss] for t, rss in samples], out)
    quarter = [samples[min(len(samples) - 1, len(samples) * q // 4)][1] for q in range(5)]
    return {
        "batches": batches, "partitions": partitions, "producers": producers, "record_bytes": size, "cache_mb": cache_mb,
        "batches_per_s": batches / seconds, "errors": errors,
        "rss_mb_at_quarters": [round(r / 1e6) for r in quarter],
        "rss_mb_peak": round(max(r for _, r in samples) / 1e6),
        # Growth over the second half of the run, when the cache has long been full: per-batch state.
        "bytes_per_batch_second_half": (quarter[4] - quarter[2]) / (batches / 2),
        "restart_s": restart_s, "rss_mb_after_restart": round(restarted_rss / 1e6),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=600_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--cache-mb", type=int, default=64)
    parser.add_argument("--producers", type=int, default=1)
    parser.add_argument("--samples", help="write every RSS sample here as JSON")
    args = parser.parse_args()
    result = run(args.batches, args.partitions, args.record_bytes, args.cache_mb, args.producers, args.samples)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
