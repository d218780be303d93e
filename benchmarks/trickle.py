"""Many partitions each receiving a trickle, the load a fleet of devices puts on a server: what it costs
the server while nothing is big, with its flush age to long-term storage as given.

A segment's new data goes to long-term storage once it reaches 8 MiB or once its oldest byte is
``--flush-age-seconds`` old; under a trickle only the age ever fires, and each flush costs a chunk
write, its fsync and a StorageFlushed operation in the durable log per segment. One confluent-kafka
producer (acks=all, idempotent, linger 5 ms) sends ``--rate`` records/s of 100 B round-robin over
``--topics`` one-partition topics for ``--seconds``; the server's user and system CPU over that window
and its chunk files are reported, per age, for ``--runs`` runs alternating the ages (medians).

    .venv/bin/python -m benchmarks.trickle [--topics 500] [--rate 2000] [--seconds 30] [--ages 2,30] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server_process import ServerProcess


def chunk_files(lts: str) -> int:
    return sum(len(files) for _, _, files in os.walk(lts))


def one_run(topics: int, rate: int, seconds: float, age: float) -> dict[str, float]:
    data_dir = tempfile.mkdtemp(prefix="millrace-trickle-")
    server = ServerProcess(data_dir, "--flush-age-seconds", str(age)).start()
    try:
        assert server.proc is not None
        names = [f"t{i:04d}" for i in range(topics)]
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        for future in admin.create_topics([NewTopic(n, 1, 1) for n in names], operation_timeout=60).values():
            future.result(60)
        producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5})
        value = os.urandom(100)
        for name in names:  # every partition loaded and the producer's metadata warm before measuring
            producer.produce(name, value)
        producer.flush(60)
        chunks_before = chunk_files(os.path.join(data_dir, "lts"))
        proc = psutil.Process(server.proc.pid)
        before = proc.cpu_times()
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
        after = proc.cpu_times()
        return {"user_s": after.user - before.user, "system_s": after.system - before.system,
                "records": sent, "chunk_files_added": chunk_files(os.path.join(data_dir, "lts")) - chunks_before}
    finally:
        server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--rate", type=int, default=2000, help="records/s over all topics")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--ages", default="2,30", help="flush ages to compare, seconds")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    ages = [float(a) for a in args.ages.split(",")]
    results: dict[float, list[dict[str, float]]] = {age: [] for age in ages}
    for _ in range(args.runs):
        for age in ages:  # alternating, so drifting load on the machine hits every age alike
            results[age].append(one_run(args.topics, args.rate, args.seconds, age))
            print(json.dumps({"age_s": age, **results[age][-1]}), flush=True)
    summary = {str(age): {key: statistics.median(r[key] for r in runs) for key in runs[0]}
               for age, runs in results.items()}
    print(json.dumps({"topics": args.topics, "rate": args.rate, "seconds": args.seconds, "runs": args.runs,
                      "median": summary}, indent=1))


if __name__ == "__main__":
    main()
