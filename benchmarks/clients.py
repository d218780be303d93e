"""The native Python client beside confluent-kafka, client for client, on one server in one run.

Each round writes to a fresh 4-partition Kafka-scope topic (one stream both clients reach) and reads it:

- ``sync``: events written one at a time, each waited for: ``write_event(...).result()`` beside
  confluent-kafka's ``produce()`` then ``flush()`` (idempotent, acks=all, so both wait for durability).
  Reports microseconds per event.
- ``pipelined``: events written without waiting, then one flush: ``write_event`` beside ``produce()``
  (linger 5 ms), ``millrace.aio``'s ``send`` from one coroutine, and kafka-python's ``send()``, a Kafka
  client in pure Python as the native one is. Reports events/s and the client process's CPU per event
  (all its threads; librdkafka's too), which keeps its meaning on a busy machine.
- ``read``: the topic read from its start to its end: a reader group of one reader
  (``read_next_event``) beside one confluent-kafka consumer assigned every partition. Reports events/s.
- ``txn``: transactions of 100 B events (10 and 1,000 a transaction, 1 and 16 writers) through
  ``TransactionalEventStreamWriter`` beside confluent-kafka transactional producers: events/s and the
  commit call's p50/p99.

Figures are medians over --rounds. The server runs in another process, so a profile of this one
(``py-spy record -- python -m benchmarks clients --parts sync``) is the client's cost alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaProducer

from benchmarks.harness import Scenario, ServerProcess, create_topics, machine_floors, median_of, percentile
from millrace import StreamManager
from millrace.aio import AsyncStreamManager

PARTITIONS = 4
SIZE = 100


def kafka_producer(bootstrap: str, topic: str, linger_ms: int) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": linger_ms})
    producer.produce(topic, b"warm-up")  # connection, metadata and producer id before the clock
    producer.flush(30)
    return producer


def native_sync(uri: str, topic: str, events: int) -> float:
    """Microseconds per event, one at a time."""
    payload = os.urandom(SIZE)
    with StreamManager(uri) as sm, sm.create_writer("kafka", topic) as writer:
        writer.write_event(b"warm-up").result()
        start = time.perf_counter()
        for i in range(events):
            writer.write_event(payload, routing_key=f"key-{i % 64}").result()
        return (time.perf_counter() - start) / events * 1e6


def kafka_sync(bootstrap: str, topic: str, events: int) -> float:
    payload = os.urandom(SIZE)
    producer = kafka_producer(bootstrap, topic, 0)
    start = time.perf_counter()
    for i in range(events):
        producer.produce(topic, payload, key=f"key-{i % 64}".encode())
        producer.flush(30)
    return (time.perf_counter() - start) / events * 1e6


def native_pipelined(uri: str, topic: str, events: int) -> tuple[float, float]:
    """Events per second, written without waiting, then flushed; and this process's CPU per event
    in microseconds (every thread: the client's whole cost, the server being another process)."""
    payload = os.urandom(SIZE)
    with StreamManager(uri) as sm, sm.create_writer("kafka", topic) as writer:
        writer.write_event(b"warm-up").result()
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(events):
            writer.write_event(payload, routing_key=f"key-{i % 64}")
        writer.flush()
        return rate_and_cpu(events, start, cpu)


def rate_and_cpu(events: int, start: float, cpu: float) -> tuple[float, float]:
    """Events per second since ``start`` (perf_counter) and CPU microseconds per event since ``cpu``
    (process_time)."""
    return events / (time.perf_counter() - start), (time.process_time() - cpu) / events * 1e6


def aio_pipelined(uri: str, topic: str, events: int) -> tuple[float, float]:
    payload = os.urandom(SIZE)

    async def run() -> tuple[float, float]:
        async with AsyncStreamManager(uri) as sm, await sm.create_writer("kafka", topic) as writer:
            await writer.write_event(b"warm-up")
            start, cpu = time.perf_counter(), time.process_time()
            for i in range(events):
                await writer.send(payload, routing_key=f"key-{i % 64}")
            await writer.flush()
            return rate_and_cpu(events, start, cpu)

    return asyncio.run(run())


def kafka_python_pipelined(bootstrap: str, topic: str, events: int) -> tuple[float, float]:
    """kafka-python's producer (pure Python, as the native client is), configured as confluent-kafka's."""
    payload = os.urandom(SIZE)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5)
    producer.send(topic, b"warm-up").get(30)
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(events):
        producer.send(topic, payload, key=f"key-{i % 64}".encode())
    producer.flush(120)
    measured = rate_and_cpu(events, start, cpu)
    producer.close()
    return measured


def kafka_pipelined(bootstrap: str, topic: str, events: int) -> tuple[float, float]:
    payload = os.urandom(SIZE)
    producer = kafka_producer(bootstrap, topic, 5)
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(events):
        while True:
            try:
                producer.produce(topic, payload, key=f"key-{i % 64}".encode())
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)  # each time, as an application's loop would: part of the client's cost per event
    producer.flush(120)
    return rate_and_cpu(events, start, cpu)


def native_read(uri: str, topic: str, events: int) -> float:
    """Events per second of a reader group of one reader, from the stream's head to ``events``."""
    with StreamManager(uri) as sm:
        sm.create_scope("client-bench")
        group = sm.create_reader_group(f"g{time.monotonic_ns()}", "client-bench", f"kafka/{topic}")
        reader = group.create_reader("reader-1")
        count = 0
        start = time.perf_counter()
        deadline = time.monotonic() + 300
        while count < events and time.monotonic() < deadline:
            if reader.read_next_event(timeout=1.0) is not None:
                count += 1
        elapsed = time.perf_counter() - start
        reader.close()
        group.close()
        return count / elapsed


def kafka_read(bootstrap: str, topic: str, events: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.monotonic_ns()}",
                         "enable.auto.commit": False})
    consumer.list_topics(topic, timeout=30)  # bootstrap and metadata before the clock
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 300
    while count < events and time.monotonic() < deadline:
        count += sum(1 for m in consumer.consume(10000, 1.0) if m.error() is None)
    elapsed = time.perf_counter() - start
    consumer.close()
    return count / elapsed


def run_threads(writers: int, work: Callable[[int], None]) -> float:
    """Seconds for ``writers`` threads each running ``work(index)``."""
    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def native_case(uri: str, topic: str, events: int, size: int, writers: int, keyed: bool,
                manager_options: dict[str, object] | None = None) -> dict[str, float]:
    """``manager_options``: more StreamManager arguments (TLS, credentials: the security scenario)."""
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


def summary(count: int, size: int, elapsed: float, latencies: list[float]) -> dict[str, float]:
    return {"events_per_s": round(count / elapsed), "mb_per_s": round(count * size / elapsed / 1e6, 2),
            "p50_ms": round(percentile(sorted(latencies), 0.5) * 1000, 2),
            "p99_ms": round(percentile(sorted(latencies), 0.99) * 1000, 2)}


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
            "commit_p50_ms": round(percentile(sorted(commits), 0.5) * 1000, 2),
            "commit_p99_ms": round(percentile(sorted(commits), 0.99) * 1000, 2)}


def add_clients_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sync-events", type=int, default=2000, help="events per round, one at a time")
    parser.add_argument("--events", type=int, default=100_000, help="events per round, pipelined, read and txn")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are reported")
    parser.add_argument("--parts", default="sync,pipelined,read,txn", help="of sync,pipelined,read,txn")


def run_clients(args: argparse.Namespace) -> dict[str, Any]:
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory() as data, ServerProcess(data) as server:
        results: dict[str, Any] = {"floors": machine_floors(data), "rounds": args.rounds, "event_bytes": SIZE}
        uri = f"tcp://127.0.0.1:{server.native_port}"
        topics = iter(range(1_000_000))

        def fresh() -> str:
            topic = f"client-bench-{next(topics)}"
            create_topics(server.bootstrap, [topic], PARTITIONS)
            return topic

        def median(run: Callable[[str, str, int], float], target: str, events: int,
                   topic_of: Callable[[], str] = fresh) -> float:
            return round(statistics.median(run(target, topic_of(), events) for _ in range(args.rounds)), 1)

        if "sync" in parts:
            results["sync_us_per_event"] = {
                "events": args.sync_events,
                "native": median(native_sync, uri, args.sync_events),
                "kafka": median(kafka_sync, server.bootstrap, args.sync_events)}
            print("sync, us per event:", json.dumps(results["sync_us_per_event"]), flush=True)
        if "pipelined" in parts:
            rates: dict[str, float] = {}
            cpus: dict[str, float] = {}
            for name, pipelined, target in (("native", native_pipelined, uri), ("aio", aio_pipelined, uri),
                                            ("kafka", kafka_pipelined, server.bootstrap),
                                            ("kafka_python", kafka_python_pipelined, server.bootstrap)):
                rounds = [pipelined(target, fresh(), args.events) for _ in range(args.rounds)]
                rates[name] = round(statistics.median(r for r, _ in rounds), 1)
                cpus[name] = round(statistics.median(c for _, c in rounds), 2)
            results["pipelined_events_per_s"] = rates
            results["pipelined_client_cpu_us_per_event"] = cpus
            print("pipelined, events/s:", json.dumps(rates), flush=True)
            print("pipelined, client CPU us per event:", json.dumps(cpus), flush=True)
        if "read" in parts:
            # One topic written once (by Kafka's producer, fast: its events and a warm-up event), read by
            # each client every round.
            source = fresh()
            kafka_pipelined(server.bootstrap, source, args.events)
            results["read_events_per_s"] = {
                "native": median(native_read, uri, args.events + 1, lambda: source),
                "kafka": median(kafka_read, server.bootstrap, args.events + 1, lambda: source)}
            print("read, events/s:", json.dumps(results["read_events_per_s"]), flush=True)
        if "txn" in parts:
            table: dict[str, dict[str, Any]] = {}
            for per_txn in (10, 1000):
                for writers in (1, 16):
                    row: dict[str, Any] = {}
                    for path, txn_case, target in (("native", native_txn_case, uri),
                                                   ("kafka", kafka_txn_case, server.bootstrap)):
                        row[path] = median_of([txn_case(target, fresh(), args.events, per_txn, writers)
                                               for _ in range(args.rounds)])
                    table[f"{per_txn} a transaction, {writers} writer(s)"] = row
                    print(f"transactions of {per_txn}, {writers} writer(s):", json.dumps(row), flush=True)
            results["transactions"] = table
    return results


# Pravega's official client (``pravega`` 0.3.8, the Rust client's binding) beside Millrace's own.

PRAVEGA_SEGMENTS = 4
PRAVEGA_KEYS = 64
# Pravega writes awaited at once: its writer batches what it holds, as a producer's linger would.
PRAVEGA_IN_FLIGHT = 1000


def pravega_write(manager: Any, stream: str, payload: bytes, events: int) -> float:
    writer = manager.create_writer("bench", stream)
    text = payload.decode("latin-1")  # write_event_async takes a str; latin-1 keeps one byte per character

    async def write() -> None:
        pending = []
        for i in range(events):
            pending.append(writer.write_event_async(text, f"key-{i % PRAVEGA_KEYS}"))
            if len(pending) >= PRAVEGA_IN_FLIGHT:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)

    start = time.perf_counter()
    asyncio.run(write())
    writer.flush()
    return time.perf_counter() - start


def pravega_read(manager: Any, stream: str, events: int) -> tuple[float, int]:
    reader = manager.create_reader_group(f"g-{stream}", "bench", stream).create_reader("r1")

    async def read() -> int:
        count = 0
        while count < events:
            piece = await asyncio.wait_for(reader.get_segment_slice_async(), 60)
            count += sum(1 for _ in piece)
            reader.release_segment(piece)
        return count

    start = time.perf_counter()
    count = asyncio.run(read())
    elapsed = time.perf_counter() - start
    reader.reader_offline()
    return elapsed, count


def millrace_write(manager: StreamManager, stream: str, payload: bytes, events: int) -> float:
    with manager.create_writer("bench", stream) as writer:
        start = time.perf_counter()
        for i in range(events):
            writer.write_event(payload, routing_key=f"key-{i % PRAVEGA_KEYS}")
        writer.flush()
        return time.perf_counter() - start


def millrace_read(manager: StreamManager, stream: str, events: int) -> tuple[float, int]:
    reader = manager.create_reader_group(f"g-{stream}", "bench", stream).create_reader("r1")
    start = time.perf_counter()
    count = 0
    while count < events:
        if reader.read_next_event(timeout=30.0) is None:
            break
        count += 1
    elapsed = time.perf_counter() - start
    reader.close()
    return elapsed, count


def _rates(events: int, size: int, seconds: float) -> dict[str, float]:
    return {"events_per_s": round(events / seconds), "mb_per_s": round(events * size / seconds / 1e6, 2)}


def add_pravega_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--sizes", default="100,1000", help="event sizes in bytes, comma-separated")


def run_pravega(args: argparse.Namespace) -> dict:
    import pravega_client  # a test dependency: only this scenario needs it

    with tempfile.TemporaryDirectory() as scratch:
        floors = machine_floors(scratch)
    results = []
    with tempfile.TemporaryDirectory() as home, ServerProcess(
            os.path.join(home, "data"), "--pravega-controller-port", "0", "--pravega-segment-port", "0") as server:
        pravega = pravega_client.StreamManager(f"tcp://127.0.0.1:{server.pravega_controller_port}")
        pravega.create_scope("bench")
        with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as millrace:
            for size in (int(s) for s in args.sizes.split(",")):
                payload = (bytes(range(97, 123)) * (size // 26 + 1))[:size]
                for client in ("pravega", "millrace"):
                    stream = f"{client}-{size}"
                    pravega.create_stream("bench", stream, PRAVEGA_SEGMENTS)
                    if client == "pravega":
                        wrote = pravega_write(pravega, stream, payload, args.events)
                        read, count = pravega_read(pravega, stream, args.events)
                    else:
                        wrote = millrace_write(millrace, stream, payload, args.events)
                        read, count = millrace_read(millrace, stream, args.events)
                    result = {"client": client, "event_bytes": size, "events": args.events,
                              "write": _rates(args.events, size, wrote), "read": _rates(count, size, read),
                              "read_events": count}
                    print(json.dumps(result), flush=True)
                    results.append(result)
    return {"floors": floors, "results": results}


SCENARIOS = [
    Scenario("clients", "the native Python client beside confluent-kafka: one at a time, pipelined, "
             "reads, transactions", add_clients_arguments, run_clients, __doc__ or ""),
    Scenario("pravega-clients", "Pravega's official client beside Millrace's on one server: writes and reads",
             add_pravega_arguments, run_pravega,
             """Pravega's official client (pip pravega 0.3.8) beside Millrace's own, on the same server in the
same run. For each event size, --events events with routing keys over 64 keys go to a fresh stream of 4
fixed segments: through Pravega's write_event_async (1,000 awaited at a time; the Pravega segment store
listener, events in Pravega's framing) and through Millrace's EventStreamWriter (the native listener),
flushed; then a reader group of one reader of each client reads its stream from the head."""),
]
