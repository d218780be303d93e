"""Catch-up reads: the native segment reader beside a Kafka consumer, on the same server in the same run.

For each event size (100 B, 1 KiB) two 8-partition topics are written before any clock starts: one by a
native ``EventStreamWriter`` (routing keys), one by a confluent-kafka producer (keys, linger 5 ms). Then
each topic is read from the beginning to its end, several times, by:

- ``native``: ``read_segment_events`` over every segment, one thread (and connection) per segment;
- ``native_2p``: the same in two worker processes, each taking ranges as it finishes others;
- ``batch``: ``BatchClient.read_segment`` the same way (adds its own per-event object);
- ``kafka``: one confluent-kafka consumer assigned every partition from offset 0 (librdkafka, C);
- ``group``: a reader group of one reader, when the client has reader groups.

Beside them, what bounds the native reader: ``raw`` reads the same segments' stored bytes through the
native READ command (the server and the wire, nothing decoded), and ``decode`` turns those bytes, already
in memory, into events in one thread (the client's Python work alone, no server). Every reader's
connections are open before its clock starts. Reports events/s and MB/s of event payload (medians;
``raw`` counts stored bytes), the server's CPU seconds per million events read, and the machine's raw
limits measured in the same run: a page-cache read and a loopback TCP stream of 256 MiB.

    .venv/bin/python -m benchmarks.native_reader_bench [--events 300000] [--events-1k 100000] [--runs 3] [--json]

About 2.5 minutes with the defaults on a 2-core machine. The machine is shared with the server: every
reader here is a client on the same cores.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millrace import StreamManager
from millrace.client.batch import SegmentRange
from millrace.client.segment_reader import SegmentEvent, read_segment_events
from millrace.protocol.events import batch_records
from millrace.protocol.messages import ReadSegment
from millrace.streams.partitions.formats import ENVELOPE
from tests.server_process import ServerProcess

PARTITIONS = 8
MIB = 1 << 20
LIMIT_BYTES = 256 * MIB


# -- the machine's raw limits ---------------------------------------------------------------------------

def page_cache_read_mb_s(size_bytes: int) -> float:
    """MB/s of reading a file of ``size_bytes`` in 1 MiB blocks once it is in the page cache."""
    block = os.urandom(MIB)
    with tempfile.NamedTemporaryFile(prefix="readlimit-") as f:
        for _ in range(max(1, size_bytes // MIB)):
            f.write(block)
        f.flush()
        buf = bytearray(MIB)
        best = 0.0
        for _ in range(3):  # the first pass may still meet the disk; keep the fastest
            with open(f.name, "rb", buffering=0) as r:
                read = 0
                start = time.perf_counter()
                while n := r.readinto(buf):
                    read += n
                best = max(best, read / (time.perf_counter() - start) / 1e6)
    return best


def loopback_tcp_mb_s(size_bytes: int) -> float:
    """MB/s of one TCP stream over 127.0.0.1 (1 MiB sends, receives into a reused buffer), the best
    of three (the machine is shared: the best is the closest to its limit)."""
    return max(_loopback_once(size_bytes) for _ in range(3))


def _loopback_once(size_bytes: int) -> float:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    block = os.urandom(MIB)
    total = max(1, size_bytes // MIB) * MIB

    def send() -> None:
        conn, _ = listener.accept()
        with conn:
            for _ in range(total // MIB):
                conn.sendall(block)

    sender = threading.Thread(target=send)
    sender.start()
    buf = bytearray(MIB)
    with socket.create_connection(("127.0.0.1", port)) as receiver:
        start = time.perf_counter()
        got = 0
        while got < total:
            got += receiver.recv_into(buf)
        elapsed = time.perf_counter() - start
    sender.join()
    listener.close()
    return got / elapsed / 1e6


# -- writing (not timed) --------------------------------------------------------------------------------

def write_native(uri: str, topic: str, events: int, size: int) -> None:
    payload = os.urandom(size)
    with StreamManager(uri) as sm, sm.create_writer("kafka", topic) as writer:
        for i in range(events):
            writer.write_event(payload, routing_key=f"key-{i % 256}")


def write_kafka(bootstrap: str, topic: str, events: int, size: int) -> None:
    payload = os.urandom(size)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    for i in range(events):
        while True:
            try:
                producer.produce(topic, payload, key=f"key-{i % 256}".encode())
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


# -- reading (timed) ------------------------------------------------------------------------------------

class Readers:
    """The ways to read a topic, each timed once its connections are open: ``prepare`` (untimed)
    returns the function that reads and answers (events, payload bytes)."""

    def __init__(self, uri: str, bootstrap: str, topic: str, ranges: list[SegmentRange], events: int) -> None:
        self.uri, self.bootstrap, self.topic, self.ranges, self.events = uri, bootstrap, topic, ranges, events

    def _per_range(self, read_range: Callable[[StreamManager, SegmentRange], tuple[int, int]]
                   ) -> Callable[[], tuple[int, int]]:
        """One thread and one connection per range, connected before the clock."""
        managers = [StreamManager(self.uri) for _ in self.ranges]

        def run() -> tuple[int, int]:
            with ThreadPoolExecutor(len(self.ranges)) as pool:
                results = list(pool.map(read_range, managers, self.ranges))
            for m in managers:
                m.close()
            return sum(c for c, _ in results), sum(s for _, s in results)

        return run

    def native(self) -> Callable[[], tuple[int, int]]:
        """read_segment_events, range by range."""
        return self._per_range(_read_range)

    def native_2p(self) -> Callable[[], tuple[int, int]]:
        """read_segment_events in two worker processes (spawned and connected before the clock), the
        ranges shared out between them: the way past one interpreter's GIL."""
        pool = ProcessPoolExecutor(2, multiprocessing.get_context("spawn"), _open_worker, (self.uri,))
        started = {pool.submit(_worker_pid) for _ in range(8)}
        assert len({f.result(60) for f in started}) == 2, "both workers up before the clock"

        def run() -> tuple[int, int]:
            results = list(pool.map(_read_range_in_worker, self.ranges))
            pool.shutdown(wait=False)  # the workers exit on their own, off the clock
            return sum(c for c, _ in results), sum(s for _, s in results)

        return run

    def batch(self) -> Callable[[], tuple[int, int]]:
        """BatchClient.read_segment (bytes events with their positions)."""
        def one(sm: StreamManager, r: SegmentRange) -> tuple[int, int]:
            count = size = 0
            for event in sm.create_batch_client().read_segment(r):
                count += 1
                size += len(event.data)
            return count, size

        return self._per_range(one)

    def raw(self) -> Callable[[], tuple[int, int]]:
        """The stored bytes through the native READ command: (events, stored bytes)."""
        per_range = self._per_range(lambda sm, r: (0, len(read_raw(sm, r))))

        def run() -> tuple[int, int]:
            return self.events, per_range()[1]

        return run

    def decode(self) -> Callable[[], tuple[int, int]]:
        """The stored bytes, already in memory, turned into events as read_segment_events does."""
        with StreamManager(self.uri) as sm:
            stored = [(r, read_raw(sm, r)) for r in self.ranges]

        def run() -> tuple[int, int]:
            count = size = 0
            for r, data in stored:
                for event in decode_segment(r.segment_id, r.start_offset, data):
                    count += 1
                    size += len(event.data)
            return count, size

        return run

    def kafka(self) -> Callable[[], tuple[int, int]]:
        """One confluent-kafka consumer, every partition from offset 0."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"bench-{time.monotonic_ns()}",
                             "enable.auto.commit": False, "fetch.max.bytes": 50 << 20,
                             "max.partition.fetch.bytes": 10 << 20})
        consumer.list_topics(self.topic, timeout=30)  # bootstrap and metadata before the clock

        def run() -> tuple[int, int]:
            consumer.assign([TopicPartition(self.topic, p, 0) for p in range(PARTITIONS)])
            count = size = 0
            deadline = time.monotonic() + 300
            while count < self.events and time.monotonic() < deadline:
                for m in consumer.consume(10000, 1.0):
                    if m.error() is None:
                        count += 1
                        size += len(m.value())
            consumer.close()
            return count, size

        return run

    def group(self) -> Callable[[], tuple[int, int]]:
        """A reader group of one reader from the head of the topic's stream (the group's own state
        lives in another scope: the Kafka scope holds topics)."""
        sm = StreamManager(self.uri)
        sm.create_scope("reader-bench")
        group = sm.create_reader_group(f"g{time.monotonic_ns()}", "reader-bench", f"kafka/{self.topic}")
        reader = group.create_reader("reader-1")

        def run() -> tuple[int, int]:
            count = size = 0
            while count < self.events:
                event = reader.read_next_event(timeout=30.0)
                if event is None:
                    break
                count += 1
                size += len(event.data or b"")
            reader.close()
            sm.close()
            return count, size

        return run


_worker_manager: StreamManager | None = None  # a worker process's own connection


def _open_worker(uri: str) -> None:
    global _worker_manager
    _worker_manager = StreamManager(uri)


def _worker_pid() -> int:
    time.sleep(0.2)  # keep this worker busy so the other one takes a task too
    return os.getpid()


def _read_range_in_worker(r: SegmentRange) -> tuple[int, int]:
    assert _worker_manager is not None
    return _read_range(_worker_manager, r)


def _read_range(sm: StreamManager, r: SegmentRange) -> tuple[int, int]:
    """(events, payload bytes) of a range through read_segment_events."""
    count = size = 0
    offset = r.start_offset
    while offset < r.end_offset:
        got = read_segment_events(sm.controller, r.scope, r.stream, r.segment_id, offset, wait_ms=100,
                                  end_offset=r.end_offset)
        count += len(got.events)
        size += sum(len(e.data) for e in got.events)
        offset = got.next_offset
        if got.end_of_segment:
            break
    return count, size


def read_raw(sm: StreamManager, r: SegmentRange) -> bytes:
    """A range's stored bytes (envelopes and record batches), read as they are."""
    chunks = []
    offset = r.start_offset
    while offset < r.end_offset:
        header, payload = sm.controller.call(ReadSegment(segment=r.segment_name, offset=offset,
                                                         max_length=min(MIB, r.end_offset - offset)))
        chunks.append(payload)
        offset += len(payload)
    return b"".join(chunks)


def decode_segment(segment_id: int, start: int, data: bytes) -> list[SegmentEvent]:
    """What read_segment_events does with an answer, on bytes already here (no transactions to skip)."""
    events = []
    view = memoryview(data)
    at = 0
    while at < len(view):
        _, _, partition, size = ENVELOPE.unpack_from(view, at)
        batch = view[at + ENVELOPE.size : at + ENVELOPE.size + size]
        for index, record in enumerate(batch_records(batch)):
            events.append(SegmentEvent(record.value, record.key, partition, record.offset, record.timestamp_ms,
                                       segment_id, start + at, index))
        at += ENVELOPE.size + size
    return events


def timed(prepare: Callable[[], Callable[[], tuple[int, int]]], events: int, server: psutil.Process,
          name: str) -> dict[str, float]:
    run = prepare()
    cpu0 = sum(server.cpu_times()[:2])
    start = time.perf_counter()
    count, size = run()
    elapsed = time.perf_counter() - start
    cpu = sum(server.cpu_times()[:2]) - cpu0
    if count != events:
        raise RuntimeError(f"{name} read {count} of {events} events")
    return {"events_per_s": count / elapsed, "mb_per_s": size / elapsed / 1e6,
            "server_cpu_s_per_million": cpu / count * 1e6}


READERS = ("native", "native_2p", "batch", "kafka", "group", "raw", "decode")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=300_000, help="events per 100 B topic")
    parser.add_argument("--events-1k", type=int, default=100_000, help="events per 1 KiB topic")
    parser.add_argument("--runs", type=int, default=3, help="reads of each topic by each reader")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    have_groups = hasattr(StreamManager, "create_reader_group")
    names = [n for n in READERS if n != "group" or have_groups]
    limits = {"page_cache_read_mb_per_s": page_cache_read_mb_s(LIMIT_BYTES),
              "loopback_tcp_mb_per_s": loopback_tcp_mb_s(LIMIT_BYTES)}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as data, ServerProcess(data) as server:
        uri = f"tcp://127.0.0.1:{server.native_port}"
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        process = psutil.Process(server.proc.pid)
        for size, events in ((100, args.events), (1024, args.events_1k)):
            for writer in ("native", "kafka"):
                topic = f"read-{size}-{writer}"
                admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
                write_start = time.perf_counter()
                if writer == "native":
                    write_native(uri, topic, events, size)
                else:
                    write_kafka(server.bootstrap, topic, events, size)
                write_s = time.perf_counter() - write_start
                with StreamManager(uri) as sm:
                    ranges = sm.create_batch_client().list_segments("kafka", topic)
                readers = Readers(uri, server.bootstrap, topic, ranges, events)
                row: dict[str, Any] = {"size": size, "events": events, "written_by": writer,
                                       "segments": len(ranges), "stored_mb": sum(r.length for r in ranges) / 1e6,
                                       "write_events_per_s": events / write_s}
                for name in names:
                    runs = [timed(getattr(readers, name), events, process, f"{name} on {topic}")
                            for _ in range(args.runs)]
                    row[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                rows.append(row)
    if args.json:
        print(json.dumps({"limits": limits, "cases": rows, "reader_groups": have_groups}, indent=2))
        return
    print(f"8-partition topics (one segment per partition), medians of {args.runs} reads from the beginning; "
          f"MB/s = event payload (raw: stored bytes); cpu = server CPU s per million events")
    print(f"machine: page-cache read {limits['page_cache_read_mb_per_s']:.0f} MB/s, "
          f"loopback TCP {limits['loopback_tcp_mb_per_s']:.0f} MB/s")
    print(f"{'size':>5} {'events':>7} {'writer':>6} {'reader':>9} {'events/s':>10} {'MB/s':>7} {'cpu':>6} "
          f"{'vs kafka':>8} {'vs TCP':>7}")
    for row in rows:
        kafka_rate = row["kafka"]["events_per_s"]
        for name in names:
            r = row[name]
            print(f"{row['size']:>5} {row['events']:>7} {row['written_by']:>6} {name:>9} {r['events_per_s']:>10.0f} "
                  f"{r['mb_per_s']:>7.1f} {r['server_cpu_s_per_million']:>6.1f} "
                  f"{r['events_per_s'] / kafka_rate:>8.2f} {r['mb_per_s'] / limits['loopback_tcp_mb_per_s']:>7.3f}")
    if not have_groups:
        print("reader groups (client/reader_group.py) are not in this client yet: no group row")


if __name__ == "__main__":
    main()
