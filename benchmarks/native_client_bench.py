"""Native event writers beside Kafka producers, on the same server in the same run.

For each case (event size 100 B / 1 KiB, 1 / 16 writers, with / without routing keys) the same number
of events goes to a fresh 8-partition topic twice: through ``EventStreamWriter`` (native protocol,
exactly-once writer ids) and through confluent-kafka producers (idempotent, acks=all, linger 5 ms).
Each writer runs in its own thread with its own connection and writes as fast as it can. Reports
events/s and MB/s, and p50/p99 of the time from the write call to durability as the writer sees it
(under full load, so it includes client-side queueing: a throughput-mode latency, not an idle one).

Transactional cases (100 B events, 1 / 16 writers, 10 / 1000 events per transaction): each writer
begins a transaction, writes its events with routing keys, commits, and starts the next, through
``TransactionalEventStreamWriter`` and through confluent-kafka transactional producers (one
transactional id per writer thread). Reports events/s and p50/p99 of the commit call (flush, then for
Kafka the markers durable in every partition the transaction wrote, for native the transaction
segments' batches appended to the partitions and COMMITTED recorded).

    .venv/bin/python -m benchmarks.native_client_bench [--events 20000] [--runs 3] [--cases all|plain|txn]

With ``--runs N`` each case runs N times per path (a fresh topic each time) and the medians are
reported; the disk's sequential write rate and fsync rate, measured first in the same run, bound
what any durable write path can reach here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.disk_limits import fsync_rate, sequential_write_mb_s
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


def native_case(uri: str, topic: str, events: int, size: int, writers: int, keyed: bool,
                manager_options: dict[str, object] | None = None) -> dict[str, float]:
    """``manager_options``: more StreamManager arguments (TLS, credentials: benchmarks.native_tls_bench)."""
    per_writer = events // writers
    payload = os.urandom(size)
    latencies: list[list[float]] = [[] for _ in range(writers)]
    managers = [StreamManager(uri, **(manager_options or {})) for _ in range(writers)]  # type: ignore[arg-type]
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


def native_txn_case(uri: str, topic: str, events: int, per_txn: int, writers: int) -> dict[str, float]:
    txns_per_writer = max(1, events // writers // per_txn)
    payload = os.urandom(100)
    commits: list[list[float]] = [[] for _ in range(writers)]
    managers = [StreamManager(uri) for _ in range(writers)]
    opened = [m.create_transaction_writer("kafka", topic, writer_id=f"bench-{w}") for w, m in enumerate(managers)]
    for txw in opened:  # connect and load the topic's partitions before the clock starts
        with txw.begin_txn() as warm_up:
            for _ in range(PARTITIONS):
                warm_up.write_event(b"warm-up")

    def work(w: int) -> None:
        txw, mine = opened[w], commits[w]
        for t in range(txns_per_writer):
            txn = txw.begin_txn()
            for i in range(per_txn):
                txn.write_event(payload, routing_key=f"key-{w}-{(t + i) % 64}")
            started = time.perf_counter()
            txn.commit()
            mine.append(time.perf_counter() - started)

    elapsed = run_threads(writers, work)
    for m in managers:
        m.close()
    return txn_summary(txns_per_writer * per_txn * writers, elapsed, [x for c in commits for x in c])


def kafka_txn_case(bootstrap: str, topic: str, events: int, per_txn: int, writers: int) -> dict[str, float]:
    txns_per_writer = max(1, events // writers // per_txn)
    payload = os.urandom(100)
    commits: list[list[float]] = [[] for _ in range(writers)]
    producers = [Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-{w}", "linger.ms": 5})
                 for w in range(writers)]
    for p in producers:  # producer ids, metadata and a first transaction before the clock starts
        p.init_transactions(30)
        p.begin_transaction()
        for partition in range(PARTITIONS):
            p.produce(topic, b"warm-up", partition=partition)
        p.commit_transaction(60)

    def work(w: int) -> None:
        producer, mine = producers[w], commits[w]
        for t in range(txns_per_writer):
            producer.begin_transaction()
            for i in range(per_txn):
                while True:
                    try:
                        producer.produce(topic, payload, key=f"key-{w}-{(t + i) % 64}".encode())
                        break
                    except BufferError:
                        producer.poll(0.01)
                producer.poll(0)
            started = time.perf_counter()
            producer.commit_transaction(60)
            mine.append(time.perf_counter() - started)

    elapsed = run_threads(writers, work)
    return txn_summary(txns_per_writer * per_txn * writers, elapsed, [x for c in commits for x in c])


def txn_summary(count: int, elapsed: float, commits: list[float]) -> dict[str, float]:
    return {"events_per_s": round(count / elapsed), "txns": len(commits),
            "commit_p50_ms": round(percentile(commits, 0.5) * 1000, 2),
            "commit_p99_ms": round(percentile(commits, 0.99) * 1000, 2)}


def summary(count: int, size: int, elapsed: float, latencies: list[float]) -> dict[str, float]:
    return {"events_per_s": round(count / elapsed), "mb_per_s": round(count * size / elapsed / 1e6, 2),
            "p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 2)}


def median_of(runs: list[dict[str, object]]) -> dict[str, object]:
    """Each figure's median over the runs of one case and path."""
    return {key: statistics.median(float(r[key]) for r in runs) for key in runs[0]}  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000, help="events per case and path")
    parser.add_argument("--runs", type=int, default=1, help="runs per case and path; medians are reported")
    parser.add_argument("--cases", choices=("all", "plain", "txn"), default="all",
                        help="plain writers, transactions, or both")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data, ServerProcess(data) as server:
        # What bounds a durable write here, measured beside the server in the same run.
        limits = {"disk_sequential_write_mb_s": round(sequential_write_mb_s(data), 1),
                  "disk_fsyncs_per_s": round(fsync_rate(data))}
        print(json.dumps({"machine_limits": limits}), flush=True)
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        uri = f"tcp://127.0.0.1:{server.native_port}"
        case = 0

        def measured(path: str, run: Callable[..., dict[str, object]], *params: object) -> dict[str, object]:
            """``run`` --runs times on fresh topics; the medians."""
            nonlocal case
            target = uri if path == "native" else server.bootstrap
            runs = []
            for _ in range(args.runs):
                runs.append(run(target, fresh_topic(path), args.events, *params))
                case += 1
            return median_of(runs)

        def fresh_topic(path: str) -> str:
            topic = f"bench-{case}-{path}"
            admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
            return topic

        for size in ((100, 1024) if args.cases != "txn" else ()):
            for writers in (1, 16):
                for keyed in (True, False):
                    row: dict[str, object] = {"size": size, "writers": writers, "keyed": keyed}
                    for path, plain in (("native", native_case), ("kafka", kafka_case)):
                        row[path] = measured(path, plain, size, writers, keyed)
                    print(json.dumps(row), flush=True)
        for per_txn in ((10, 1000) if args.cases != "plain" else ()):
            for writers in (1, 16):
                row = {"transactional": True, "size": 100, "events_per_txn": per_txn, "writers": writers}
                for path, txn_run in (("native", native_txn_case), ("kafka", kafka_txn_case)):
                    row[path] = measured(path, txn_run, per_txn, writers)
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
