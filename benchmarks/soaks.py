"""Long runs of one server: does memory follow the budgets or the traffic, how long does a restart take
over what was written, and can a consumer catch up from long-term storage while producers write?

- ``memory-soak``: ``millrace serve --cache-mb CACHE`` takes --batches single-record batches
  (librdkafka with linger 0 and one record per batch, acks=all, idempotent: an application sending each
  event as it happens) while its RSS is sampled every second; then a restart over the same data. What
  grows with the batches once the read cache is full is state kept per batch, which no budget bounds.
- ``restart``: a data directory filled the same way, then SIGKILL and --starts starts over it, each
  timed to ready and SIGKILLed again: a restart replays the durable logs since their last checkpoint.
- ``volume-soak``: --gigabytes of 1 KiB records through long-term storage on the filesystem or a real S3
  server (SeaweedFS ``weed mini``, as the tests start it), as fast as ``produce_load.c`` goes, RSS
  sampled; then a producer paced to --tail-mb-s while consumers read the backlog from offset 0 (long
  gone from the cache, so from long-term storage): the catch-up's MB/s beside the tail's latencies
  alone and during it; then SIGKILL and a restart.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.harness import (
    RssSampler,
    Scenario,
    ServerProcess,
    create_topics,
    machine_floors,
    produce_all,
    rss_mb,
    server_pid,
)
from benchmarks.produce import PRODUCER, build_generator
from tests.s3server import start_s3_server

RECORD_BYTES = 1024
TOPIC = "volume"
DEFAULT_CACHE = os.path.expanduser("~/.cache/millrace-bench")


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
    produce_all(producer, topic, batches, payload, partitions, on_delivery=delivered)
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


def fill_with_single_record_batches(data_dir: str, server_args: tuple[str, ...], batches: int, partitions: int,
                                    size: int, producers: int, samples_every: float = 1.0
                                    ) -> tuple[ServerProcess, float, int, RssSampler]:
    """A server on ``data_dir`` given ``batches`` single-record batches: the running server, the seconds
    and delivery errors of the produce, and its RSS sampler (stopped)."""
    server = ServerProcess(data_dir, *server_args).start()
    sampler = RssSampler(server_pid(server), every=samples_every)
    create_topics(server.bootstrap, ["soak"], partitions)
    seconds, errors = produce_in_processes(server.bootstrap, "soak", batches, partitions, size, producers)
    time.sleep(2)
    sampler.finish()
    return server, seconds, errors, sampler


def timed_start(data_dir: str, server_args: tuple[str, ...], env: dict[str, str] | None = None
                ) -> tuple[ServerProcess, float]:
    """A server started over existing data, and the seconds until it was ready."""
    began = time.perf_counter()
    server = ServerProcess(data_dir, *server_args, env=env).start(timeout=900)
    return server, time.perf_counter() - began


def directory_bytes(path: str | Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def add_memory_soak_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batches", type=int, default=600_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--cache-mb", type=int, default=64)
    parser.add_argument("--producers", type=int, default=1,
                        help="producer processes side by side, each with its share of the batches")
    parser.add_argument("--samples", help="write every RSS sample (seconds, bytes) here as JSON")


def run_memory_soak(args: argparse.Namespace) -> dict:
    data_dir = tempfile.mkdtemp(prefix="millrace-soak-")
    server_args = ("--cache-mb", str(args.cache_mb))
    floors = machine_floors(data_dir, loopback=False)
    server: ServerProcess | None = None
    try:
        server, seconds, errors, sampler = fill_with_single_record_batches(
            data_dir, server_args, args.batches, args.partitions, args.record_bytes, args.producers)
        server.kill()
        server, restart_s = timed_start(data_dir, server_args)
        restarted_rss = rss_mb(server_pid(server))
    finally:
        if server is not None:
            server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
    if args.samples:
        with open(args.samples, "w") as out:
            json.dump([[round(t, 1), rss] for t, rss in sampler.samples], out)
    quarters = sampler.at_fractions(4)  # bytes
    result = {
        "floors": floors, "batches": args.batches, "partitions": args.partitions, "producers": args.producers,
        "record_bytes": args.record_bytes, "cache_mb": args.cache_mb, "batches_per_s": args.batches / seconds,
        "errors": errors, "rss_mb_at_quarters": [round(q / 1e6) for q in quarters], "rss_mb_peak": round(sampler.peak / 1e6),
        # Growth over the second half of the run, when the cache has long been full: per-batch state.
        "bytes_per_batch_second_half": (quarters[4] - quarters[2]) / (args.batches / 2),
        "restart_s": restart_s, "rss_mb_after_restart": restarted_rss,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "floors"}, indent=1))
    return result


def add_restart_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batches", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--starts", type=int, default=3, help="timed starts over the same data")


def run_restart(args: argparse.Namespace) -> dict:
    data_dir = tempfile.mkdtemp(prefix="millrace-restart-")
    floors = machine_floors(data_dir, loopback=False)
    starts: list[dict[str, float]] = []
    server: ServerProcess | None = None
    try:
        server, seconds, errors, _ = fill_with_single_record_batches(
            data_dir, (), args.batches, args.partitions, 100, args.producers)
        server.kill()
        logs = sorted(round(directory_bytes(d) / 1e6, 1) for d in Path(data_dir, "logs").iterdir() if d.is_dir())
        data_mb = round(directory_bytes(data_dir) / 1e6)
        for n in range(args.starts):
            server, ready_s = timed_start(data_dir, ())
            starts.append({"restart_s": ready_s, "rss_mb": rss_mb(server_pid(server))})
            server.kill()
            print(f"start {n + 1}: ready in {ready_s:.2f} s, RSS {starts[-1]['rss_mb']} MB", flush=True)
    finally:
        if server is not None:
            server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
    result = {"floors": floors, "batches": args.batches, "batches_per_s": args.batches / seconds, "errors": errors,
              "data_dir_mb": data_mb, "durable_logs_mb_at_kill": logs, "starts": starts}
    print(f"{args.batches:,} single-record batches over {args.partitions} partitions: data directory {data_mb} MB, "
          f"durable logs at the kill {' + '.join(map(str, logs))} MB; restarts "
          f"{min(s['restart_s'] for s in starts):.2f}-{max(s['restart_s'] for s in starts):.2f} s")
    return result


@contextlib.contextmanager
def lts_args(kind: str, scratch: Path) -> Iterator[tuple[tuple[str, ...], dict[str, str] | None]]:
    """The server's long-term storage flags and environment."""
    if kind == "fs":
        yield (), None
        return
    with start_s3_server(scratch / "s3") as s3:  # its bucket is made as it starts
        yield ("--lts", f"s3://{s3.bucket}/soak", "--s3-endpoint", s3.endpoint_url), s3.env()


def produce_load(generator: Path, bootstrap: str, partitions: int, records: int, rate: float) -> dict:
    """``produce_load.c``'s figures for ``records`` of 1 KiB, paced to ``rate`` records/s (0: flat out)."""
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
    return directory_bytes(s3_data if s3_data.exists() else data_dir / "lts")


def volume_soak(lts: str, gigabytes: float, partitions: int, tail_mb_s: float, catchup_seconds: float,
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
                create_topics(server.bootstrap, [TOPIC], partitions)
                sampler = RssSampler(server_pid(server), every=1.0)
                ingest = produce_load(generator, server.bootstrap, partitions, records, 0)
                result["ingest"] = {k: ingest[k] for k in ("records", "failed", "seconds", "mb_per_s", "latency_ms")}
                result["rss_mb_at_tenths"] = [round(b / 1e6) for b in sampler.at_fractions(10)]
                result["rss_mb_peak"] = round(sampler.peak / 1e6)
                tail_records = int(tail_rate * catchup_seconds)
                alone = produce_load(generator, server.bootstrap, partitions, tail_records // 4, tail_rate)
                result["tail_alone"] = {k: alone[k] for k in ("mb_per_s", "latency_ms")}
                stop = threading.Event()
                readers: list[dict] = [{} for _ in range(consumers)]
                threads = [threading.Thread(target=lambda n=n: readers[n].update(
                    catch_up(server.bootstrap, partitions, catchup_seconds * 2, stop, fetch_bytes, n)))
                    for n in range(consumers)]
                for t in threads:
                    t.start()
                tail = produce_load(generator, server.bootstrap, partitions, tail_records, tail_rate)
                stop.set()
                for t in threads:
                    t.join()
                result["tail_during_catch_up"] = {k: tail[k] for k in ("mb_per_s", "latency_ms")}
                mb_per_s = sum(r["mb_per_s"] for r in readers)
                result["catch_up"] = {"mb_per_s": mb_per_s, "each_mb_per_s": [r["mb_per_s"] for r in readers],
                                      "ratio_to_tail": mb_per_s / tail["mb_per_s"]}
                sampler.finish()
                result["rss_mb_peak_with_catch_up"] = round(sampler.peak / 1e6)
                result["lts_bytes"] = lts_bytes(data_dir, scratch / "s3")
                result["log_bytes"] = directory_bytes(data_dir / "logs")
                server.kill()
                server, result["restart_s"] = timed_start(str(data_dir), args, env)
                result["rss_mb_after_restart"] = rss_mb(server_pid(server))
            finally:
                server.kill()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return result


def add_volume_soak_arguments(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument("--cache", default=DEFAULT_CACHE)


def run_volume_soak(args: argparse.Namespace) -> dict:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        floors = machine_floors(scratch, loopback=False)
    result = volume_soak(args.lts, args.gigabytes, args.partitions, args.tail_mb_s, args.catchup_seconds,
                         args.cache_mb, (args.fetch_max_bytes, args.partition_fetch_bytes), build_generator(cache),
                         args.consumers, tuple(args.server_arg))
    print(json.dumps(result, indent=1))
    return {"floors": floors, **result}


SCENARIOS = [
    Scenario("memory-soak", "server RSS under single-record batches, then a restart over that data",
             add_memory_soak_arguments, run_memory_soak, __doc__ or ""),
    Scenario("restart", "time to ready over a data directory of single-record batches, several starts",
             add_restart_arguments, run_restart, __doc__ or ""),
    Scenario("volume-soak", "gigabytes through S3 or the filesystem: RSS, a catch-up from long-term storage "
             "under a paced tail, restart", add_volume_soak_arguments, run_volume_soak, __doc__ or ""),
]
