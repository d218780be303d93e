"""Transactional produce throughput next to idempotent produce, in the same run (librdkafka).

One fresh `millrace serve` process; for each case a new topic of --partitions partitions gets
--messages records of --size bytes from one confluent-kafka producer: idempotent (acks=all, no
transaction), then transactional with a commit every 100 and every 10,000 records. Each case runs
--runs times and the median records/s is reported, with the transactions per second of the
transactional cases. Every transactional run is checked: a read_committed count of the topic must
equal what was sent.

    .venv/bin/python -m benchmarks.txn_bench [--messages 100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.server_process import ServerProcess


def produce(bootstrap: str, topic: str, messages: int, size: int, per_txn: int | None) -> float:
    """Seconds to produce ``messages`` records (committed, or acknowledged when not transactional)."""
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10000,
              "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True}
    if per_txn is not None:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    p = Producer(config)
    value = b"x" * size
    if per_txn is not None:
        p.init_transactions(30)
    start = time.perf_counter()
    sent = 0
    while sent < messages:
        chunk = min(per_txn or messages, messages - sent)
        if per_txn is not None:
            p.begin_transaction()
        for i in range(chunk):
            while True:
                try:
                    p.produce(topic, value=value, key=str(i % 64).encode())
                    break
                except BufferError:
                    p.poll(0.01)
        sent += chunk
        if per_txn is not None:
            p.commit_transaction(60)
    remaining = p.flush(120)
    elapsed = time.perf_counter() - start
    if remaining:
        raise RuntimeError(f"{remaining} records not delivered")
    return elapsed


def committed_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records a read_committed consumer sees (markers excluded), counted by reading them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed", "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count, eof = 0, set()
    deadline = time.monotonic() + 120
    while len(eof) < partitions and time.monotonic() < deadline:
        for m in c.consume(10000, timeout=0.5):
            if m.error():
                eof.add(m.partition())
            else:
                count += 1
    c.close()
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100, help="record value bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as data_dir:
        srv = ServerProcess(data_dir, "--default-partitions", str(args.partitions)).start()
        try:
            for name, per_txn in (("idempotent", None), ("txn-100", 100), ("txn-10000", 10_000)):
                rates = []
                for _ in range(args.runs):
                    topic = f"bench-{name}-{uuid.uuid4().hex[:6]}"
                    seconds = produce(srv.bootstrap, topic, args.messages, args.size, per_txn)
                    rates.append(args.messages / seconds)
                    if per_txn is not None:
                        seen = committed_records(srv.bootstrap, topic, args.partitions)
                        if seen != args.messages:
                            raise RuntimeError(f"{name}: read_committed saw {seen} of {args.messages} records")
                rate = statistics.median(rates)
                results[name] = {"records_per_s": rate}
                if per_txn is not None:
                    results[name]["txns_per_s"] = rate / per_txn
        finally:
            srv.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.messages} records of {args.size} B, {args.partitions} partitions, median of {args.runs} runs")
    for name, r in results.items():
        extra = f"  ({r['txns_per_s']:.1f} txn/s)" if "txns_per_s" in r else ""
        print(f"  {name:<11} {r['records_per_s']:>10.0f} records/s{extra}")


if __name__ == "__main__":
    main()
