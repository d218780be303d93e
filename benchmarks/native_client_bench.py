"""Native event writers beside Kafka producers, on the same server in the same run.

For each case (event size 100 B / 1 KiB, 1 / 16 writers, with / without routing keys) the same number
of events goes to a fresh 8-partition topic twice: through ``EventStreamWriter`` (native protocol,
exactly-once writer ids) and through confluent-kafka producers (idempotent, acks=all, linger 5 ms).
Each writer runs in its own thread with its own connection and writes as fast as it can. Reports
events/s and MB/s, and p50/p99 of the time from the write call to durability as the writer sees it
(under full load, so it includes client-side queueing: a throughput-mode latency, not an idle one).

    .venv/bin/python -m benchmarks.native_client_bench [--events 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from concurrent.futures import Future

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from millrace import StreamManager
from tests.server_process import ServerProcess

PARTITIONS = 8


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


def run_threads(writers: int, work: object) -> float:
    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]  # type: ignore[arg-type]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def native_case(uri: str, topic: str, events: int, size: int, writers: int, keyed: bool) -> dict[str, float]:
    per_writer = events // writers
    payload = os.urandom(size)
    latencies: list[list[float]] = [[] for _ in range(writers)]
    managers = [StreamManager(uri) for _ in range(writers)]
    opened = [m.create_writer("kafka", topic) for m in managers]

    def work(w: int) -> None:
        writer, mine = opened[w], latencies[w]
        for i in range(per_writer):
            sent = time.perf_counter()
            fut = writer.write_event(payload, routing_key=f"key-{w}-{i % 64}" if keyed else None)

            def done(_: Future[object], sent: float = sent) -> None:
                mine.append(time.perf_counter() - sent)

            fut.add_done_callback(done)
        writer.flush()

    elapsed = run_threads(writers, work)
    for m in managers:
        m.close()
    flat = [x for lat in latencies for x in lat]
    return summary(per_writer * writers, size, elapsed, flat)


def kafka_case(bootstrap: str, topic: str, events: int, size: int, writers: int, keyed: bool) -> dict[str, float]:
    per_writer = events // writers
    payload = os.urandom(size)
    latencies: list[list[float]] = [[] for _ in range(writers)]
    producers = [Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                           "linger.ms": 5}) for _ in range(writers)]
    for p in producers:  # connect, fetch metadata and a producer id before the clock starts
        p.produce(topic, b"warm-up")
        p.flush(30)

    def work(w: int) -> None:
        producer, mine = producers[w], latencies[w]
        for i in range(per_writer):
            sent = time.perf_counter()
            while True:
                try:
                    producer.produce(topic, payload, key=f"key-{w}-{i % 64}".encode() if keyed else None,
                                     on_delivery=lambda err, msg, sent=sent: mine.append(time.perf_counter() - sent))
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        producer.flush(120)

    elapsed = run_threads(writers, work)
    flat = [x for lat in latencies for x in lat]
    return summary(per_writer * writers, size, elapsed, flat)


def summary(count: int, size: int, elapsed: float, latencies: list[float]) -> dict[str, float]:
    return {"events_per_s": round(count / elapsed), "mb_per_s": round(count * size / elapsed / 1e6, 2),
            "p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000, help="events per case and path")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as data, ServerProcess(data) as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        uri = f"tcp://127.0.0.1:{server.native_port}"
        case = 0
        for size in (100, 1024):
            for writers in (1, 16):
                for keyed in (True, False):
                    row: dict[str, object] = {"size": size, "writers": writers, "keyed": keyed}
                    for path, run in (("native", native_case), ("kafka", kafka_case)):
                        topic = f"bench-{case}-{path}"
                        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
                        target = uri if path == "native" else server.bootstrap
                        row[path] = run(target, topic, args.events, size, writers, keyed)
                    case += 1
                    results.append(row)
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
