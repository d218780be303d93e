"""The console's stream list (``/api/stream-list``) and the overview's busiest streams, against a real server
process: a Kafka producer and a native event writer write while a consumer reads, a byte stream, a
synchronizer, a key-value table and a stream nobody wrote sit beside them; each row's kind, open segments, size, rates in
and out and retention are checked against what was written and configured, and the server-side sort and
cut against the rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.console.test_console_api import get, ok, wait_for
from tests.server_process import ServerProcess

PARTITIONS = 4
VALUE = b"v" * 200
EVENT = b"e" * 300
BYTES_WRITTEN = 12_345

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(str(tmp_path_factory.mktemp("stream-list") / "data")).start()
    yield srv
    srv.kill()


def rows(server: ServerProcess, **query: Any) -> dict[str, dict[str, Any]]:
    listed = ok(server, "/api/stream-list", limit=1000, **query)
    return {f"{r['scope']}/{r['stream']}": r for r in listed["streams"]}


class Traffic:
    """A Kafka producer on ``topic``, a consumer reading it and a native writer on ``scope/stream``, each
    on its own thread until stopped; counts what they wrote."""

    def __init__(self, server: ServerProcess, topic: str, scope: str, stream: str) -> None:
        self.server, self.topic, self.scope, self.stream = server, topic, scope, stream
        self.stop = threading.Event()
        self.produced = self.events = 0
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._produce, self._consume, self._write)]

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.server.bootstrap, "linger.ms": 5})
        while not self.stop.is_set():
            for _ in range(20):
                producer.produce(self.topic, VALUE, key=f"k{self.produced % 16}".encode())
                self.produced += 1
            producer.poll(0)
            time.sleep(0.02)
        assert producer.flush(30) == 0

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.server.bootstrap, "group.id": "meter-readers",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([self.topic])
        while not self.stop.is_set():
            consumer.poll(0.2)
        consumer.close()

    def _write(self) -> None:
        from millrace.client.manager import StreamManager

        with StreamManager(f"tcp://127.0.0.1:{self.server.native_port}") as sm:
            writer = sm.create_writer(self.scope, self.stream)
            while not self.stop.is_set():
                for i in range(10):
                    writer.write_event(EVENT, routing_key=f"r{i}")
                    self.events += 1
                writer.flush()
                time.sleep(0.02)
            writer.close()

    def __enter__(self) -> Traffic:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


def test_stream_list_shows_kind_segments_size_rates_and_retention(server: ServerProcess) -> None:
    from millrace.client.manager import StreamManager
    from millrace.client.streams import RetentionPolicy

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    created = admin.create_topics([
        NewTopic("meters", PARTITIONS, 1, config={"millrace.segments.initial": "2", "retention.ms": "3600000"}),
        NewTopic("profiles", 1, 1, config={"cleanup.policy": "compact"})])
    for future in created.values():
        future.result(30)
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("lab")
        sm.create_stream("lab", "events", initial_segments=3, retention=RetentionPolicy.by_size(50 << 20))
        sm.create_stream("lab", "untouched", initial_segments=2)
        sm.create_byte_stream("lab", "raw")
        with sm.create_byte_writer("lab", "raw") as writer:
            writer.write(b"b" * BYTES_WRITTEN)
            writer.flush()
        sm.create_synchronizer("lab", "settings", initial={"mode": "auto"})
        inventory = sm.create_key_value_table("lab", "inventory", partitions=3)
        for i in range(20):
            inventory.put(f"item-{i}", b"i" * 100)

        with Traffic(server, "meters", "lab", "events") as traffic:
            busy = wait_for(lambda: (r := rows(server)) and r.get("kafka/meters", {}).get("bytes_in_per_s", 0) > 0
                            and r["lab/events"]["bytes_in_per_s"] > 0 and (r["kafka/meters"]["bytes_out_per_s"] or 0) > 0
                            and r, "rates in and out of the busy streams", timeout=60)
            overview = ok(server, "/api/overview")
        produced, events = traffic.produced, traffic.events

    meters, lab_events = busy["kafka/meters"], busy["lab/events"]
    assert meters["kind"] == "kafka-topic" and meters["state"] == "active" and meters["open_segments"] == 2
    assert meters["events_in_per_s"] > 0 and meters["bytes_in_per_s"] > meters["events_in_per_s"]
    assert meters["retention"] == {"policy": "delete", "ms": 3_600_000, "bytes": None}
    assert lab_events["kind"] == "event-stream" and lab_events["open_segments"] == 3
    assert lab_events["events_in_per_s"] > 0
    assert lab_events["retention"] == {"policy": "size", "ms": None, "bytes": 50 << 20}
    assert busy["kafka/profiles"]["kind"] == "kafka-topic"
    assert busy["kafka/profiles"]["retention"] == {"policy": "compact", "ms": None, "bytes": None}

    # Sizes, once everything written is durable and sampled: at least the payload, at most the payload
    # plus each record batch's framing (batches of many records: far below 100 bytes a record).
    def settled() -> dict[str, dict[str, Any]] | None:
        r = rows(server)
        done = (r["kafka/meters"]["size_bytes"] >= produced * len(VALUE)
                and r["lab/events"]["size_bytes"] >= events * len(EVENT))
        return r if done else None

    after = wait_for(settled, "sizes covering what was written", timeout=30)
    assert produced * len(VALUE) <= after["kafka/meters"]["size_bytes"] < produced * (len(VALUE) + 100)
    assert events * len(EVENT) <= after["lab/events"]["size_bytes"] < events * (len(EVENT) + 100)
    raw = after["lab/raw"]
    assert (raw["kind"], raw["open_segments"], raw["size_bytes"]) == ("byte-stream", 1, BYTES_WRITTEN)
    assert raw["retention"] == {"policy": "none", "ms": None, "bytes": None}
    settings = after["lab/settings"]
    assert settings["kind"] == "synchronizer" and settings["open_segments"] == 1 and settings["size_bytes"] > 0
    table = after["lab/inventory"]
    assert (table["kind"], table["open_segments"]) == ("key-value-table", 3)
    assert table["size_bytes"] >= 20 * 100 and table["retention"]["policy"] == "none"
    untouched = after["lab/untouched"]
    assert (untouched["kind"], untouched["open_segments"], untouched["size_bytes"]) == ("unformatted", 2, 0)
    assert untouched["events_in_per_s"] == untouched["bytes_in_per_s"] == untouched["bytes_out_per_s"] == 0

    # The overview: the busiest streams by bytes in, the same rows.
    top = overview["top_streams"]
    assert 2 <= len(top) <= 10
    assert [r["bytes_in_per_s"] for r in top] == sorted((r["bytes_in_per_s"] for r in top), reverse=True)
    assert {f"{r['scope']}/{r['stream']}" for r in top[:2]} == {"kafka/meters", "lab/events"}
    assert set(top[0]) == set(meters)


def test_stream_list_sorts_and_cuts_on_the_server(server: ServerProcess) -> None:
    from millrace.client.manager import StreamManager

    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("sorting")
        for name, size in (("small", 100), ("large", 5000), ("middle", 1000)):
            sm.create_byte_stream("sorting", name)
            with sm.create_byte_writer("sorting", name) as writer:
                writer.write(b"s" * size)
                writer.flush()
    wait_for(lambda: rows(server).get("sorting/middle", {}).get("size_bytes") == 1000, "the new streams sampled")
    listed = ok(server, "/api/stream-list", sort="size_bytes", order="asc")
    sizes = [r["size_bytes"] for r in listed["streams"]]
    assert sizes == sorted(sizes) and listed["sort"] == "size_bytes" and not listed["descending"]
    mine = [r["stream"] for r in listed["streams"] if r["scope"] == "sorting"]
    assert mine == ["small", "middle", "large"]
    by_name = ok(server, "/api/stream-list", sort="stream", order="asc")["streams"]
    assert [r["stream"] for r in by_name] == sorted(r["stream"] for r in by_name)
    first = ok(server, "/api/stream-list", sort="size_bytes", limit=1)
    assert len(first["streams"]) == 1 and first["total"] == first["kept"] == len(listed["streams"]) > 3
    assert first["streams"][0]["size_bytes"] == max(sizes)
    assert first["time_ms"] > 0 and first["sample_seconds"] > 0 and first["kafka_scope"] == "kafka"
    assert get(server, "/api/stream-list", sort="colour")[0] == 400
    assert get(server, "/api/stream-list", order="sideways")[0] == 400
    assert get(server, "/api/stream-list", limit=0)[0] == 400
    assert get(server, "/api/stream-list/more")[0] == 404
