"""What the console's always-on history costs (``gateway/console/history.py``): sampling every 5 s and
saving the ring every 10 s, on a server with many topics, consumer groups and native reader groups.

One `millrace serve` process (fresh data directory) with ``--topics`` one-partition topics (each with a
few records), as many consumer groups (one committed offset each: a lag to sample) and ``--reader-groups``
native reader groups on one stream each. Nobody opens the console or scrapes anything. Reported: the
server's CPU use over ``--seconds`` of that idle time (all of it is the sampler, its saves and the
server's own timers) and what it saved; then, in this process, with samples like this server's newest:
the time one save takes (two samples appended: what 10 s of sampling adds; it runs on a reactor worker
thread, never on the reactor) and the files' size once a full ring and more were written (at most two
files of 360 samples).

    .venv/bin/python -m benchmarks.console_history_cost [--topics 100] [--reader-groups 20] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millrace.client.manager import StreamManager
from millrace.gateway.console import HISTORY_DIR
from millrace.gateway.console.history import FILES, SAMPLES_KEPT, HistoryFiles, read_saved
from tests.server_process import ServerProcess


def populate(server: ServerProcess, topics: int, reader_groups: int) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    names = [f"t{i:04}" for i in range(topics)]
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    for n in names:
        for j in range(10):
            producer.produce(n, b"x" * 100, partition=0, key=str(j).encode())
    assert producer.flush(60) == 0
    for n in names:
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"g-{n}", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(n, 0, 3)], asynchronous=False)
        consumer.close()
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("bench")
        for i in range(reader_groups):
            sm.create_stream("bench", f"s{i}", initial_segments=2)
            with sm.create_writer("bench", f"s{i}") as writer:
                for j in range(10):
                    writer.write_event(b"e" * 100, routing_key=str(j)).result()
            sm.create_reader_group(f"rg{i}", "bench", f"s{i}").close()


def run(topics: int, reader_groups: int, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data:
        server = ServerProcess(os.path.join(data, "data")).start()
        try:
            populate(server, topics, reader_groups)
            assert server.proc is not None
            proc = psutil.Process(server.proc.pid)
            time.sleep(10)  # the set-up's own work settles, and a first save happens
            before = proc.cpu_times()
            time.sleep(seconds)
            after = proc.cpu_times()
            cpu_s = (after.user + after.system) - (before.user + before.system)
            directory = os.path.join(server.data_dir, HISTORY_DIR)
            samples = read_saved(directory)
            size = sum(os.path.getsize(os.path.join(directory, n)) for n in FILES
                       if os.path.exists(os.path.join(directory, n)))
        finally:
            server.kill()
        newest = samples[-1]
        files = HistoryFiles(os.path.join(data, "ring"))
        times = []
        for _ in range(SAMPLES_KEPT + 50):  # past a full ring: the files switch once
            start = time.perf_counter()
            files.append([newest, newest])
            times.append(time.perf_counter() - start)
        ring_bytes = sum(os.path.getsize(files.path(i)) for i in range(len(FILES)))
        return {"topics": topics, "consumer_groups": topics, "reader_groups": reader_groups, "idle_seconds": seconds,
                "server_cpu_percent": round(100 * cpu_s / seconds, 2), "samples_saved": len(samples),
                "saved_bytes": size, "sample_bytes": len(json.dumps(newest.to_json(), separators=(",", ":"))),
                "groups_in_newest_sample": len(newest.group_lag),
                "reader_groups_in_newest_sample": len(newest.reader_group_unread),
                "save_ms_median": round(1000 * statistics.median(times), 2),
                "save_ms_max": round(1000 * max(times), 2), "files_bytes_after_full_rings": ring_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--reader-groups", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    print(json.dumps(run(args.topics, args.reader_groups, args.seconds), indent=2))


if __name__ == "__main__":
    main()
