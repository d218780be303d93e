"""Where one single-record produce spends its time on the server: a latency breakdown by stage.

The server runs in a child process of this script (``--serve``), which wraps six functions of the
produce path to time-stamp each call, then runs ``millrace serve`` as the CLI does. A confluent-kafka
producer (acks=all, idempotent, linger 0, one record per batch, as ``benchmarks.compare``'s
single-record row) sends ``--records`` records of 100 B to a one-partition topic, first with one
request in flight (each waited for), then with ``--in-flight`` (librdkafka's at most 5 with
idempotence). Each request's stages are found by walking the stamps in time order (a request's
arrival, the first log append after it, and so on), so the breakdown is exact with one request in
flight and approximate with several:

- recv -> log append: the Kafka handler's Python, up to the durable log's queue;
- writer wakes: until the group commit starts (at the end of the reactor's turn, or on the durable
  log's writer thread when the commit is handed to it: ``turn_commits``);
- write + fdatasync: the commit's write and its fdatasync, until the reactor reaps the sync when the
  kernel ran it (``kernel_sync``);
- back on reactor: until the reactor runs the completion (a loop turn; from a writer thread, a pipe
  wake-up as well);
- to response: the reactor's work until the response is ready to write;
- client turnaround: from one response ready to the next request's arrival (the response's write,
  loopback, librdkafka, and the next request's way in);
- appends per commit: durable-log appends per group commit (fdatasync) over the same seconds.

Medians per stage, in microseconds. A profiler of where the latency goes, not of CPU (see
``docs/performance.md``); the wrapped functions cost a few microseconds each.

    .venv/bin/python -m benchmarks.produce_stages [--records 4000] [--in-flight 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

STAGES = ("recv -> log append", "writer wakes", "write + fdatasync", "back on reactor", "to response",
          "client turnaround", "appends per commit")
MARKS = "ABCDEF"  # arrival, log append, commit start, fdatasync done, completion on the reactor, response


def serve(trace: str, argv: list[str]) -> int:
    """In the child: stamp the produce path, write each whole request's stages to ``trace`` (a JSON line
    per second), run the server."""
    from millrace.gateway.cli import main
    from millrace.gateway.kafka import connection
    from millrace.store.durablelog import local
    from millrace.streams import futures

    stamps: dict[str, list[float]] = {k: [] for k in MARKS}
    now = time.perf_counter

    def stamped(cls: Any, name: str, mark: str, when: Callable[..., bool] = lambda *a: True) -> None:
        original = getattr(cls, name)

        def wrapper(*args: Any) -> Any:
            if when(*args):
                stamps[mark].append(now())
            return original(*args)

        setattr(cls, name, wrapper)

    stamped(connection.KafkaConnection, "stringReceived", "A", lambda _self, frame: int.from_bytes(frame[:2]) == 0)
    stamped(local.FileDurableDataLog, "append_parts", "B")
    stamped(local.FileDurableDataLog, "_write_batch", "C")
    stamped(local.FileDurableDataLog, "_synced", "D")  # the sync is over, on this thread or the kernel's
    stamped(futures._ReactorInbox, "_run", "E")
    stamped(connection.KafkaConnection, "_respond", "F", lambda _self, _response, ctx, _slot: ctx.api_key == 0)
    opened = local.FileDurableDataLog.__init__

    logs: list[Any] = []

    def remembered(self: Any, *args: Any, **kwargs: Any) -> None:
        opened(self, *args, **kwargs)
        logs.append(self)

    local.FileDurableDataLog.__init__ = remembered  # type: ignore[method-assign]

    def report() -> None:
        last_response: float | None = None
        counted = (0, 0)
        while True:
            time.sleep(1)
            appends, commits = sum(log.stats.appends for log in logs), sum(log.stats.batches for log in logs)
            group = (appends - counted[0]) / max(1, commits - counted[1])  # appends per group commit
            counted = (appends, commits)
            events = sorted((t, k) for k, times in list(stamps.items()) for t in times)
            for times in stamps.values():
                times.clear()  # a stamp landing between the two lines is lost: a request not counted
            rows: list[list[float]] = []
            want, seen = 0, {}
            for t, k in events:
                if k != MARKS[want]:
                    continue
                seen[k] = t
                want += 1
                if want == len(MARKS):
                    stages = [seen[b] - seen[a] for a, b in zip(MARKS, MARKS[1:], strict=False)]
                    stages.append(seen["A"] - last_response if last_response is not None else float("nan"))
                    rows.append([*stages, group / 1e6])  # in the units medians() scales by 1e6
                    last_response, want, seen = seen["F"], 0, {}
            if rows:
                with open(trace, "a") as out:
                    out.write(json.dumps(rows) + "\n")

    threading.Thread(target=report, daemon=True).start()
    return main(argv)


def produce(bootstrap: str, records: int, in_flight: int) -> float:
    """Records per second of one producer sending single-record batches."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0,
                         "batch.num.messages": 1, "queue.buffering.max.messages": 1000,
                         "max.in.flight.requests.per.connection": in_flight})
    producer.produce("stages", b"warm-up")
    producer.flush(30)
    payload = os.urandom(100)
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce("stages", payload)
                break
            except BufferError:
                producer.poll(0.001)
        if in_flight == 1:
            producer.flush(30)
        else:
            producer.poll(0)
    producer.flush(60)
    return records / (time.perf_counter() - start)


def medians(trace: str) -> list[float]:
    with open(trace) as lines:
        rows = [row for line in lines for row in json.loads(line)]
    return [statistics.median(r[i] for r in rows if r[i] == r[i]) * 1e6 for i in range(len(STAGES))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--in-flight", type=int, default=5)
    parser.add_argument("--serve", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)  # TRACE ARGS...: the child
    args = parser.parse_args()
    if args.serve:
        raise SystemExit(serve(args.serve[0], args.serve[1:]))

    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory(prefix="millrace-stages-") as work:
        trace = os.path.join(work, "trace.jsonl")
        child = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.produce_stages", "--serve", trace, "serve", "--data-dir",
             os.path.join(work, "data"), "--kafka-port", "0", "--native-port", "0", "--http-port", "0",
             "--log-level", "WARNING"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert child.stdout is not None
            port = None
            for line in child.stdout:
                found = re.search(r"millrace: kafka listening on [\d.]+:(\d+)", line)
                port = int(found.group(1)) if found else port
                if "millrace: ready" in line:
                    break
            if port is None:
                raise SystemExit("the server did not start")
            bootstrap = f"127.0.0.1:{port}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("stages", 1, 1)])["stages"].result(30)
            results = {}
            for in_flight in (1, args.in_flight):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(trace)
                rate = produce(bootstrap, args.records, in_flight)
                time.sleep(2.5)  # the child writes what it stamped every second
                results[in_flight] = (rate, medians(trace))
        finally:
            child.kill()
            child.wait()
    print(f"{'stage (us, medians)':<22}" + "".join(f"{f'{n} in flight':>14}" for n in results))
    for i, stage in enumerate(STAGES):
        print(f"{stage:<22}" + "".join(f"{stages[i]:>14.{1 if i == len(STAGES) - 1 else 0}f}"
                                       for _, stages in results.values()))
    print(f"{'records/s':<22}" + "".join(f"{rate:>14,.0f}" for rate, _ in results.values()))


if __name__ == "__main__":
    main()
