"""Metadata at scale: many topics and partitions on one embedded server (issue 20's last target).

One fresh ``millrace serve``; then, timed:
- create: ``--topics`` topics of ``--partitions`` partitions each through the Admin API, ``--per-request``
  topics a CreateTopics request;
- metadata: a Metadata request for every topic (``list_topics``), median of 5, and for one topic;
- produce: one 100 B record to every partition from ``--producers`` confluent-kafka producers (acks=all,
  idempotent; the topics dealt out among them), until the last is acknowledged;
- restart: SIGTERM, then start on the same data directory until ready (the listeners open before the
  topics' partitions are loaded), then until the server logs that its background load of every topic
  is done; then the same Metadata request and produce round again.
Also the segments the store holds (``GET /api/segments``) and the server's RSS after each phase.

    .venv/bin/python -m benchmarks.metadata_scale [--topics 1000] [--partitions 10] [--per-request 50] [--producers 1]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import urllib.request

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server_process import ServerProcess


def server_cpu(server: ServerProcess) -> tuple[float, float]:
    """The server process's (user, system) CPU seconds so far."""
    assert server.proc is not None
    times = psutil.Process(server.proc.pid).cpu_times()
    return times.user, times.system


def rss_mb(server: ServerProcess) -> int:
    return round(psutil.Process(server.proc.pid).memory_info().rss / 1e6)


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


def run(topics: int, partitions: int, per_request: int, producers: int = 1,
        server_args: tuple[str, ...] = ()) -> dict:
    data_dir = tempfile.mkdtemp(prefix="millrace-metadata-")
    names = [f"topic-{i:05d}" for i in range(topics)]
    result: dict = {"topics": topics, "partitions_per_topic": partitions, "partitions": topics * partitions}
    server = ServerProcess(data_dir, *server_args).start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        result["create_s"] = create(admin, names, partitions, per_request)
        result["rss_mb_after_create"] = rss_mb(server)
        result["metadata_all_s"] = metadata_seconds(admin, None, topics)
        result["metadata_one_s"] = metadata_seconds(admin, names[-1], 1)
        cpu_before = server_cpu(server)
        result["produce_s"] = produce_everywhere(server.bootstrap, names, partitions, producers)
        result["server_cpu_s_during_produce"] = [round(after - before, 2) for before, after in
                                                 zip(cpu_before, server_cpu(server), strict=True)]  # user, system
        result["segments"] = segment_count(server)
        result["rss_mb_after_produce"] = rss_mb(server)
        del admin  # closed, so it does not retry the stopped server's address
        server.stop()
        began = time.perf_counter()
        server = ServerProcess(data_dir, "--log-level", "INFO", *server_args).start(timeout=600)
        result["restart_s"] = time.perf_counter() - began
        result["rss_mb_after_restart"] = rss_mb(server)
        result["topics_loaded_after_restart_s"] = topics_loaded(server) - began
        result["rss_mb_after_topics_loaded"] = rss_mb(server)
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        result["metadata_all_after_restart_s"] = metadata_seconds(admin, None, topics)
        result["produce_after_restart_s"] = produce_everywhere(server.bootstrap, names, partitions, producers)
        result["rss_mb_at_end"] = rss_mb(server)
    finally:
        server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--per-request", type=int, default=50)
    parser.add_argument("--producers", type=int, default=1, help="producers the produce rounds deal the topics to")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="an argument for the server (repeat; e.g. --server-arg=--flush-age-seconds=2)")
    args = parser.parse_args()
    print(json.dumps(run(args.topics, args.partitions, args.per_request, args.producers, tuple(args.server_arg)),
                     indent=1))


if __name__ == "__main__":
    main()
