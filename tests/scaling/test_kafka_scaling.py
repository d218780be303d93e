"""Kafka topics keep working while their streams split and merge: no record lost, duplicated or
reordered per partition, offsets dense and continuing from predecessor into successor."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from millrace.client.segments import SegmentClient
from millrace.store.controller import InvalidScaleError
from tests.server_process import ServerProcess, create_topic


@pytest.fixture
def server(tmp_path):
    srv = ServerProcess(str(tmp_path / "data")).start()
    yield srv
    srv.kill()


class Load:
    """An idempotent producer writing (partition, sequence) values until stopped."""

    def __init__(self, server: ServerProcess, topic: str, partitions: int) -> None:
        self.producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 2, "enable.idempotence": True})
        self.topic = topic
        self.partitions = partitions
        self.sent = {p: 0 for p in range(partitions)}
        self.acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def delivered(self, err, msg) -> None:  # noqa: ANN001 - librdkafka callback
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.partition()].append((msg.offset(), msg.value()))

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            p = i % self.partitions
            self.producer.produce(self.topic, f"{p}:{self.sent[p]}".encode(), partition=p, on_delivery=self.delivered)
            self.sent[p] += 1
            i += 1
            if i % 50 == 0:
                self.producer.poll(0)
                time.sleep(0.005)
        self.producer.flush(30)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def consume_all(server: ServerProcess, topic: str, partitions: int, expected: dict[int, int]) -> dict[int, list]:
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 60
    while any(len(got[p]) < expected[p] for p in got) and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.5):
            assert m.error() is None, m.error()
            got[m.partition()].append((m.offset(), m.value()))
    consumer.close()
    return got


def check_exactly_once(load: Load, got: dict[int, list]) -> None:
    assert not load.errors
    for p, records in got.items():
        assert [o for o, _ in records] == list(range(len(records))), f"offsets of partition {p} not dense"
        assert [v for _, v in records] == [f"{p}:{i}".encode() for i in range(load.sent[p])], f"partition {p}"
        assert sorted(load.acked[p]) == records


def test_manual_splits_and_merges_under_load(server):
    create_topic(server, "elastic", 8, **{"millrace.segments.initial": "1"})
    with SegmentClient("127.0.0.1", server.native_port) as admin, Load(server, "elastic", 8) as load:
        time.sleep(0.5)
        desc = admin.split_segment("kafka", "elastic", 0, pieces=2)
        assert len(desc["segments"]) == 2
        time.sleep(0.3)
        for seg in list(desc["segments"]):
            desc = admin.split_segment("kafka", "elastic", seg["name"], pieces=2)
            time.sleep(0.2)
        assert len(desc["segments"]) == 4
        assert {round(s["key_end"] - s["key_start"], 3) for s in desc["segments"]} == {0.25}
        with pytest.raises(InvalidScaleError):  # a split must fall on a partition boundary
            admin.split_segment("kafka", "elastic", desc["segments"][0]["name"], at=[0.1])
        names = [s["name"] for s in desc["segments"]]
        desc = admin.merge_segments("kafka", "elastic", names[:2])
        time.sleep(0.2)
        desc = admin.merge_segments("kafka", "elastic", [s["name"] for s in desc["segments"]])
        assert len(desc["segments"]) == 1 and desc["epoch"] == 5
        time.sleep(0.5)
    got = consume_all(server, "elastic", 8, load.sent)
    check_exactly_once(load, got)
    assert sum(load.sent.values()) > 500

    # Everything, across five epochs of segments, comes back after a restart.
    assert server.stop() == 0
    srv = ServerProcess(server.data_dir).start()
    try:
        check_exactly_once(load, consume_all(srv, "elastic", 8, load.sent))
    finally:
        srv.kill()


def test_sealed_or_unknown_segments_cannot_scale(server):
    create_topic(server, "sealed-scale", 4, **{"millrace.segments.initial": "1"})
    with SegmentClient("127.0.0.1", server.native_port) as admin:
        old = admin.describe_stream("kafka", "sealed-scale")["segments"][0]["name"]
        desc = admin.split_segment("kafka", "sealed-scale", old, pieces=4)
        assert len(desc["segments"]) == 4
        for bad in (lambda: admin.split_segment("kafka", "sealed-scale", old),
                    lambda: admin.merge_segments("kafka", "sealed-scale", [old, desc["segments"][0]["name"]]),
                    lambda: admin.split_segment("kafka", "sealed-scale", "kafka/other/0.#epoch.0"),
                    lambda: admin.split_segment("kafka", "sealed-scale", 99)):
            with pytest.raises(InvalidScaleError):
                bad()
        with pytest.raises(InvalidScaleError):  # one partition per segment: nothing left to split
            admin.split_segment("kafka", "sealed-scale", desc["segments"][0]["name"])
