"""Small batches through the Kafka API: what a request costs and what a catch-up read of small batches
costs, the two figures the offset index's folding (``streams/partitions/offset_index.py``) could move.

- produce: a confluent-kafka producer with linger 0 and one record per batch (acks=all, idempotent)
  sends ``--single`` records of 100 B to one partition: requests/s and the server's CPU per request.
- catch-up: ``--records`` records of 100 B in ~2 KB batches (batch.size 2000), then read back from
  offset 0 with raw Fetch requests of 1 MiB over one connection, ``--reads`` times: seconds and the
  server's CPU per read (a folded partition's reads walk the batch headers of its runs).

Each run starts a fresh server; medians over ``--runs``.

    .venv/bin/python -m benchmarks.small_batches [--single 30000] [--records 600000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from millrace.protocol.records import iter_batches
from tests.kafka.wire import local
from tests.server_process import ServerProcess


def server_cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def produce(bootstrap: str, topic: str, count: int, settings: dict[str, object]) -> float:
    """Seconds from the first produce() to the last acknowledgement."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "queue.buffering.max.messages": 2_000_000, **settings})
    payload = os.urandom(100)
    producer.produce(topic, payload, partition=0)  # connection, metadata, producer id: not the load
    producer.flush(30)
    t0 = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        if not i & 1023:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("records left undelivered")
    return time.perf_counter() - t0


def one_run(single: int, records: int, reads: int) -> dict[str, float]:
    data = tempfile.mkdtemp(prefix="millrace-small-")
    server = ServerProcess(data).start()
    try:
        assert server.proc is not None
        proc = psutil.Process(server.proc.pid)
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        for topic in ("single", "catchup"):
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        cpu0 = server_cpu(proc)
        seconds = produce(server.bootstrap, "single", single, {"linger.ms": 0, "batch.num.messages": 1})
        produce_cpu = server_cpu(proc) - cpu0
        produce(server.bootstrap, "catchup", records, {"linger.ms": 5, "batch.size": 2000})
        wire = local(server.kafka_port)
        read_s, read_cpu = [], []
        for _ in range(reads):
            cpu0, t0 = server_cpu(proc), time.perf_counter()
            offset = 0
            while offset < records + 1:  # the catch-up topic also holds the warm-up record
                data_read = bytes(wire.fetch("catchup", 0, offset, max_bytes=1 << 20).records or b"")
                last = offset - 1
                for batch in iter_batches(data_read):
                    last = batch.header.base_offset + batch.header.last_offset_delta
                offset = last + 1
            read_s.append(time.perf_counter() - t0)
            read_cpu.append(server_cpu(proc) - cpu0)
        wire.close()
        return {"requests_per_s": single / seconds, "server_us_per_request": produce_cpu / single * 1e6,
                "catchup_s": statistics.median(read_s), "catchup_server_cpu_s": statistics.median(read_cpu)}
    finally:
        server.kill()
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--single", type=int, default=30_000, help="single-record batches produced")
    parser.add_argument("--records", type=int, default=600_000, help="records of the catch-up read")
    parser.add_argument("--reads", type=int, default=3, help="catch-up reads per server")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for n in range(args.runs):
        r = one_run(args.single, args.records, args.reads)
        runs.append(r)
        print(f"run {n + 1}: {r['requests_per_s']:,.0f} requests/s, {r['server_us_per_request']:.0f} us server CPU a "
              f"request; catch-up of {args.records:,} records {r['catchup_s']:.2f} s, server CPU "
              f"{r['catchup_server_cpu_s']:.2f} s", flush=True)
    print("medians: " + ", ".join(f"{k} {statistics.median(r[k] for r in runs):,.2f}" for k in runs[0]))


if __name__ == "__main__":
    main()
