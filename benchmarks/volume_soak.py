"""A large volume through long-term storage: does RSS follow the budgets, and can a consumer catch up
from long-term storage while producers keep writing?

One ``millrace serve`` with its long-term storage on the filesystem (``--lts fs``) or on a real S3
server (``--lts s3``: SeaweedFS ``weed mini`` with authentication, as the tests start it). Then:
- ingest: ``--gigabytes`` of 1 KiB records to ``--partitions`` partitions, as fast as
  ``benchmarks/produce_load.c`` goes (acks=all, idempotent, linger 5 ms), the server's RSS sampled every
  second;
- catch-up: a producer paced to ``--tail-mb-s`` writes for ``--catchup-seconds`` while a consumer reads
  the backlog from offset 0 (long gone from the cache, so read from long-term storage). Reported: the
  consumer's MB/s, its ratio to the rate the producer reached, and the producer's latencies then, beside
  the same producer alone before it (does the catch-up slow the tail?);
- restart: SIGKILL, then start on the same data until ready, and the RSS then.

    .venv/bin/python -m benchmarks.volume_soak [--lts s3] [--gigabytes 20] [--partitions 8]
        [--tail-mb-s 10] [--catchup-seconds 60] [--cache-mb 64] [--partition-fetch-bytes 1048576]
        [--consumers 1] [--server-arg=ARG ...]

Never a test: the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.compare import PRODUCER, build_generator
from benchmarks.kafka_bench import RssSampler
from tests.s3server import start_s3_server
from tests.server_process import ServerProcess

RECORD_BYTES = 1024
TOPIC = "volume"


@contextlib.contextmanager
def lts_args(kind: str, scratch: Path) -> Iterator[tuple[tuple[str, ...], dict[str, str] | None]]:
    """The server's long-term storage flags and environment."""
    if kind == "fs":
        yield (), None
        return
    with start_s3_server(scratch / "s3") as s3:  # its bucket is made as it starts
        yield ("--lts", f"s3://{s3.bucket}/soak", "--s3-endpoint", s3.endpoint_url), s3.env()


def produce(generator: Path, bootstrap: str, partitions: int, records: int, rate: float) -> dict:
    command = [str(generator), bootstrap, TOPIC, str(partitions), str(records), str(RECORD_BYTES), str(rate)]
    settings = {**PRODUCER, "linger.ms": "5"}
    done = subprocess.run(command + [a for k, v in settings.items() for a in ("-X", f"{k}={v}")],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def catch_up(bootstrap: str, partitions: int, seconds: float, stop: threading.Event, fetch_bytes: tuple[int, int],
             number: int = 0) -> dict:
    """Read from offset 0 of every partition until ``stop`` (or ``seconds``): bytes and seconds."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"volume-catch-up-{number}",
                         "enable.auto.commit": False,
                         "fetch.max.bytes": fetch_bytes[0], "max.partition.fetch.bytes": fetch_bytes[1]})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    read = 0
    began = time.perf_counter()
    try:
        while not stop.is_set() and time.perf_counter() - began < seconds:
            for msg in consumer.consume(10_000, timeout=0.5):
                if msg.error() is None:
                    read += len(msg.value())
    finally:
        elapsed = time.perf_counter() - began
        consumer.close()
    return {"bytes": read, "seconds": elapsed, "mb_per_s": read / elapsed / 1e6}


def lts_bytes(data_dir: Path, s3_data: Path) -> int:
    """Bytes on disk under long-term storage (the filesystem store, or the S3 server's data)."""
    root = s3_data if s3_data.exists() else data_dir / "lts"
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def run(lts: str, gigabytes: float, partitions: int, tail_mb_s: float, catchup_seconds: float,
        cache_mb: int, fetch_bytes: tuple[int, int], generator: Path, consumers: int = 1,
        server_args: tuple[str, ...] = ()) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="millrace-volume-"))
    data_dir = scratch / "data"
    records = int(gigabytes * 1e9 / RECORD_BYTES)
    tail_rate = tail_mb_s * 1e6 / RECORD_BYTES
    result: dict = {"lts": lts, "gigabytes": gigabytes, "partitions": partitions, "cache_mb": cache_mb,
                    "fetch_max_bytes": fetch_bytes[0], "partition_fetch_bytes": fetch_bytes[1],
                    "consumers": consumers, "server_args": list(server_args)}
    try:
        with lts_args(lts, scratch) as (args, env):
            args = (*args, "--cache-mb", str(cache_mb), *server_args)
            server = ServerProcess(str(data_dir), *args, env=env).start()
            try:
                admin = AdminClient({"bootstrap.servers": server.bootstrap})
                admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
                del admin
                sampler = RssSampler(server.proc.pid, every=1.0)
                sampler.start()
                ingest = produce(generator, server.bootstrap, partitions, records, 0)
                result["ingest"] = {k: ingest[k] for k in ("records", "failed", "seconds", "mb_per_s", "latency_ms")}
                samples = sampler.samples
                result["rss_mb_at_tenths"] = [round(samples[min(len(samples) - 1, len(samples) * q // 10)][1] / 1e6)
                                              for q in range(11)]
                result["rss_mb_peak"] = round(sampler.peak / 1e6)
                tail_records = int(tail_rate * catchup_seconds)
                alone = produce(generator, server.bootstrap, partitions, tail_records // 4, tail_rate)
                result["tail_alone"] = {k: alone[k] for k in ("mb_per_s", "latency_ms")}
                stop = threading.Event()
                readers: list[dict] = [{} for _ in range(consumers)]
                threads = [threading.Thread(target=lambda n=n: readers[n].update(
                    catch_up(server.bootstrap, partitions, catchup_seconds * 2, stop, fetch_bytes, n)))
                    for n in range(consumers)]
                for t in threads:
                    t.start()
                tail = produce(generator, server.bootstrap, partitions, tail_records, tail_rate)
                stop.set()
                for t in threads:
                    t.join()
                result["tail_during_catch_up"] = {k: tail[k] for k in ("mb_per_s", "latency_ms")}
                mb_per_s = sum(r["mb_per_s"] for r in readers)
                result["catch_up"] = {"mb_per_s": mb_per_s, "each_mb_per_s": [r["mb_per_s"] for r in readers],
                                      "ratio_to_tail": mb_per_s / tail["mb_per_s"]}
                sampler.stop.set()
                sampler.join()
                result["rss_mb_peak_with_catch_up"] = round(sampler.peak / 1e6)
                result["lts_bytes"] = lts_bytes(data_dir, scratch / "s3")
                result["log_bytes"] = sum(f.stat().st_size for f in (data_dir / "logs").rglob("*") if f.is_file())
                server.kill()
                began = time.perf_counter()
                server = ServerProcess(str(data_dir), *args, env=env).start(timeout=900)
                result["restart_s"] = time.perf_counter() - began
                result["rss_mb_after_restart"] = round(psutil.Process(server.proc.pid).memory_info().rss / 1e6)
            finally:
                server.kill()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lts", choices=("fs", "s3"), default="s3")
    parser.add_argument("--gigabytes", type=float, default=20.0)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--tail-mb-s", type=float, default=10.0)
    parser.add_argument("--catchup-seconds", type=float, default=60.0)
    parser.add_argument("--cache-mb", type=int, default=64)
    # librdkafka's defaults; larger ones read faster, and the server then holds larger responses.
    parser.add_argument("--fetch-max-bytes", type=int, default=52_428_800)
    parser.add_argument("--partition-fetch-bytes", type=int, default=1_048_576)
    parser.add_argument("--consumers", type=int, default=1, help="catch-up consumers, each in its own group")
    parser.add_argument("--server-arg", action="append", default=[], help="one more `millrace serve` argument "
                        "(repeat; e.g. --server-arg=--fetch-budget-mb --server-arg=1024)")
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/millrace-bench"))
    args = parser.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    result = run(args.lts, args.gigabytes, args.partitions, args.tail_mb_s, args.catchup_seconds, args.cache_mb,
                 (args.fetch_max_bytes, args.partition_fetch_bytes), build_generator(cache), args.consumers,
                 tuple(args.server_arg))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
