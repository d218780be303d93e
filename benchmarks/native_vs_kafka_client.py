"""The native Python client beside confluent-kafka, client for client, on one server in one run.

Each round writes to a fresh 4-partition Kafka-scope topic (one stream both clients reach) and reads it:

- ``sync``: events written one at a time, each waited for: ``write_event(...).result()`` beside
  confluent-kafka's ``produce()`` then ``flush()`` (idempotent, acks=all, so both wait for durability).
  Reports microseconds per event.
- ``pipelined``: events written without waiting, then one flush: ``write_event`` beside ``produce()``
  (linger 5 ms), and ``millrace.aio``'s ``send`` from one coroutine; kafka-python's ``send()`` too, a
  Kafka client in pure Python as the native one is. Reports events/s and the client process's CPU per
  event (all its threads; librdkafka's too), which stays meaningful on a busy machine.
- ``read``: the topic read from its start to its end: a reader group of one reader
  (``read_next_event``) beside one confluent-kafka consumer assigned every partition. Reports events/s.

Figures are medians over ``--rounds`` rounds (3 by default). ``--only sync|pipelined|read`` runs one part,
for a profiler (``py-spy record -o out.txt --format raw -- .venv/bin/python -m
benchmarks.native_vs_kafka_client --only sync``): the server runs in another process, so a profile of
this one is the client's cost alone.

    .venv/bin/python -m benchmarks.native_vs_kafka_client [--sync-events 2000] [--events 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from millrace import StreamManager
from millrace.aio import AsyncStreamManager
from tests.server_process import ServerProcess

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
        producer.poll(0)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sync-events", type=int, default=2000, help="events per round, one at a time")
    parser.add_argument("--events", type=int, default=100_000, help="events per round, pipelined and read")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are reported")
    parser.add_argument("--only", choices=("sync", "pipelined", "read"), help="run one part (for a profiler)")
    args = parser.parse_args()
    parts = [args.only] if args.only else ["sync", "pipelined", "read"]
    with tempfile.TemporaryDirectory() as data, ServerProcess(data) as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        uri = f"tcp://127.0.0.1:{server.native_port}"
        topics = iter(range(1_000_000))

        def fresh() -> str:
            topic = f"client-bench-{next(topics)}"
            admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
            return topic

        def median(run: Callable[[str, str, int], float], target: str, events: int,
                   topic_of: Callable[[], str] = fresh) -> float:
            return round(statistics.median(run(target, topic_of(), events) for _ in range(args.rounds)), 1)

        results: dict[str, object] = {"rounds": args.rounds, "event_bytes": SIZE}
        if "sync" in parts:
            results["sync_us_per_event"] = {
                "events": args.sync_events,
                "native": median(native_sync, uri, args.sync_events),
                "kafka": median(kafka_sync, server.bootstrap, args.sync_events)}
            print(json.dumps(results["sync_us_per_event"]), flush=True)
        if "pipelined" in parts:
            rates: dict[str, object] = {"events": args.events}
            cpus: dict[str, object] = {}
            for name, run, target in (("native", native_pipelined, uri), ("aio", aio_pipelined, uri),
                                      ("kafka", kafka_pipelined, server.bootstrap),
                                      ("kafka_python", kafka_python_pipelined, server.bootstrap)):
                rounds = [run(target, fresh(), args.events) for _ in range(args.rounds)]
                rates[name] = round(statistics.median(r for r, _ in rounds), 1)
                cpus[name] = round(statistics.median(c for _, c in rounds), 2)
            results["pipelined_events_per_s"] = rates
            results["pipelined_client_cpu_us_per_event"] = cpus
            print(json.dumps(rates), json.dumps(cpus), flush=True)
        if "read" in parts:
            # One topic written once (by Kafka's producer, fast: its events and a warm-up event), read by
            # each client every round.
            source = fresh()
            kafka_pipelined(server.bootstrap, source, args.events)
            results["read_events_per_s"] = {
                "events": args.events,
                "native": median(native_read, uri, args.events + 1, lambda: source),
                "kafka": median(kafka_read, server.bootstrap, args.events + 1, lambda: source)}
            print(json.dumps(results["read_events_per_s"]), flush=True)
        print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
