"""Many topics and partitions on one embedded server.

- ``scale``: --topics topics of --partitions partitions each, then, timed: their creation through the
  Admin API (--per-request topics a CreateTopics request); a Metadata request for every topic and for
  one (medians of 5); one 100 B record to every partition from --producers confluent-kafka producers
  (acks=all, idempotent; one librdkafka client tracking tens of thousands of partitions sets the pace
  itself, so the topics are dealt out); a restart (SIGTERM, then to ready, then until the server logs
  that its background load of every topic is done); the Metadata and produce rounds again. Also the
  segments the store holds (``GET /api/segments``) and the server's RSS after each phase.
- ``trickle``: many one-partition topics each receiving a trickle, the load a fleet of devices puts on
  a server. Under a trickle only a segment's flush age sends its data to long-term storage, each flush a
  chunk write, its fsync and a logged operation per segment; the server's CPU and its chunk files over
  --seconds, per flush age (--ages, alternating over --runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import urllib.request

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.harness import (
    Scenario,
    ServerProcess,
    create_topics,
    fresh_server,
    machine_floors,
    rss_mb,
    server_pid,
)


def server_cpu(server: ServerProcess) -> tuple[float, float]:
    """The server process's (user, system) CPU seconds so far."""
    times = psutil.Process(server_pid(server)).cpu_times()
    return times.user, times.system


def segment_count(server: ServerProcess) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.ports['http']}/api/segments", timeout=120) as reply:
        body = json.load(reply)
    return len(body["segments"] if isinstance(body, dict) else body)


def create(admin: AdminClient, names: list[str], partitions: int, per_request: int) -> float:
    began = time.perf_counter()
    for i in range(0, len(names), per_request):
        futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names[i:i + per_request]],
                                      request_timeout=300)
        for future in futures.values():
            future.result(300)
    return time.perf_counter() - began


def metadata_seconds(admin: AdminClient, topic: str | None, expected: int) -> float:
    """Median of 5 Metadata round trips (all topics, or one), each checked for its topic count."""
    times = []
    for _ in range(5):
        began = time.perf_counter()
        found = admin.list_topics(topic=topic, timeout=120)
        times.append(time.perf_counter() - began)
        assert len([t for t in found.topics if not t.startswith("__")]) >= expected, len(found.topics)
    return statistics.median(times)


def produce_everywhere(bootstrap: str, names: list[str], partitions: int, producers: int = 1) -> float:
    """One record to every partition, the topics dealt out to ``producers`` producers (one librdkafka
    client tracks every partition it writes to: past some thousands that client, not the server, sets
    the pace); seconds until the last is acknowledged."""
    clients = [Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 300_000}) for _ in range(producers)]
    failed: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    began = time.perf_counter()
    for i, name in enumerate(names):
        producer = clients[i % producers]
        for p in range(partitions):
            producer.produce(name, b"x" * 100, partition=p, on_delivery=delivered)
        producer.poll(0)
    deadline = time.monotonic() + 300
    left = sum(len(c) for c in clients)
    while left and time.monotonic() < deadline:
        for c in clients:
            c.poll(0.05)
        left = sum(len(c) for c in clients)
    seconds = time.perf_counter() - began
    if left or failed:
        raise RuntimeError(f"{left} records unacknowledged, {len(failed)} failed: {failed[:3]}")
    return seconds


def topics_loaded(server: ServerProcess, timeout: float = 600) -> float:
    """``time.perf_counter()`` when the server logged that its background load of every topic after the
    start was done (the start itself does not wait for it)."""
    deadline = time.monotonic() + timeout
    while not any("topics in the" in line for line in server.output):
        if time.monotonic() > deadline:
            raise RuntimeError("the server never logged the end of its topics' load")
        time.sleep(0.05)
    return time.perf_counter()


def scale(topics: int, partitions: int, per_request: int, producers: int = 1,
        server_args: tuple[str, ...] = ()) -> dict:
    data_dir = tempfile.mkdtemp(prefix="millrace-metadata-")
    names = [f"topic-{i:05d}" for i in range(topics)]
    result: dict = {"topics": topics, "partitions_per_topic": partitions, "partitions": topics * partitions}
    server = ServerProcess(data_dir, *server_args).start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        result["create_s"] = create(admin, names, partitions, per_request)
        result["rss_mb_after_create"] = rss_mb(server_pid(server))
        result["metadata_all_s"] = metadata_seconds(admin, None, topics)
        result["metadata_one_s"] = metadata_seconds(admin, names[-1], 1)
        cpu_before = server_cpu(server)
        result["produce_s"] = produce_everywhere(server.bootstrap, names, partitions, producers)
        result["server_cpu_s_during_produce"] = [round(after - before, 2) for before, after in
                                                 zip(cpu_before, server_cpu(server), strict=True)]  # user, system
        result["segments"] = segment_count(server)
        result["rss_mb_after_produce"] = rss_mb(server_pid(server))
        del admin  # closed, so it does not retry the stopped server's address
        server.stop()
        began = time.perf_counter()
        server = ServerProcess(data_dir, "--log-level", "INFO", *server_args).start(timeout=600)
        result["restart_s"] = time.perf_counter() - began
        result["rss_mb_after_restart"] = rss_mb(server_pid(server))
        result["topics_loaded_after_restart_s"] = topics_loaded(server) - began
        result["rss_mb_after_topics_loaded"] = rss_mb(server_pid(server))
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        result["metadata_all_after_restart_s"] = metadata_seconds(admin, None, topics)
        result["produce_after_restart_s"] = produce_everywhere(server.bootstrap, names, partitions, producers)
        result["rss_mb_at_end"] = rss_mb(server_pid(server))
    finally:
        server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
    return result


def chunk_files(lts: str) -> int:
    return sum(len(files) for _, _, files in os.walk(lts))


def trickle_once(topics: int, rate: int, seconds: float, age: float) -> dict[str, float]:
    with fresh_server("--flush-age-seconds", str(age), prefix="millrace-trickle-") as server:
        names = [f"t{i:04d}" for i in range(topics)]
        create_topics(server.bootstrap, names, 1)
        producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5})
        value = os.urandom(100)
        for name in names:  # every partition loaded and the producer's metadata warm before measuring
            producer.produce(name, value)
        producer.flush(60)
        lts = os.path.join(server.data_dir, "lts")
        chunks_before = chunk_files(lts)
        before = server_cpu(server)
        start = time.monotonic()
        sent = 0
        while (elapsed := time.monotonic() - start) < seconds:
            due = int(elapsed * rate)
            while sent < due:
                producer.produce(names[sent % topics], value)
                sent += 1
            producer.poll(0)
            time.sleep(0.005)
        producer.flush(60)
        after = server_cpu(server)
        return {"user_s": after[0] - before[0], "system_s": after[1] - before[1], "records": sent,
                "chunk_files_added": chunk_files(lts) - chunks_before}


def add_scale_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--per-request", type=int, default=50)
    parser.add_argument("--producers", type=int, default=1, help="producers the produce rounds deal the topics to")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="an argument for the server (repeat; e.g. --server-arg=--flush-age-seconds=2)")


def run_scale(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        floors = machine_floors(scratch, loopback=False)
    result = scale(args.topics, args.partitions, args.per_request, args.producers, tuple(args.server_arg))
    print(json.dumps(result, indent=1))
    return {"floors": floors, **result}


def add_trickle_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--rate", type=int, default=2000, help="records/s over all topics")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--ages", default="2,30", help="flush ages to compare, seconds")
    parser.add_argument("--runs", type=int, default=2)


def run_trickle(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        floors = machine_floors(scratch, loopback=False)
    ages = [float(a) for a in args.ages.split(",")]
    results: dict[float, list[dict[str, float]]] = {age: [] for age in ages}
    for _ in range(args.runs):
        for age in ages:  # alternating, so drifting load on the machine hits every age alike
            results[age].append(trickle_once(args.topics, args.rate, args.seconds, age))
            print(json.dumps({"age_s": age, **results[age][-1]}), flush=True)
    medians = {str(age): {key: statistics.median(r[key] for r in runs) for key in runs[0]}
               for age, runs in results.items()}
    print(json.dumps({"topics": args.topics, "rate": args.rate, "seconds": args.seconds, "runs": args.runs,
                      "median": medians}, indent=1))
    return {"floors": floors, "medians": medians}


SCENARIOS = [
    Scenario("scale", "thousands of topics and partitions: create, Metadata, produce to each, restart, RSS",
             add_scale_arguments, run_scale, __doc__ or ""),
    Scenario("trickle", "a trickle over many partitions: server CPU and chunk files per flush age",
             add_trickle_arguments, run_trickle, __doc__ or ""),
]
