"""Kafka topics are elastic streams: merging and splitting the segments under a topic while unmodified
clients produce and consume must go unnoticed by them. An idempotent confluent-kafka producer and a
kafka-python group consumer run throughout while `millrace streams merge/split` rescale the topic's stream
from one segment per partition down to one segment and back; afterwards offsets are dense, every
acknowledged record sits at its reported offset, the live consumer saw each record once, in order, and a
fresh reader reads the whole history across the sealed segments."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from compat_tests.common import wait_for
from tests.server_process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

PARTITIONS = 4
AFTER = 500  # records produced once the rescaling is over
LIMIT = 100_000  # bound on the producer loop


def millrace(server: ServerProcess, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "millrace", "streams", *args, "--server", f"127.0.0.1:{server.native_port}",
           "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{' '.join(args)} failed: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def open_segments(desc: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((s for s in desc["segments"] if not s["sealed"]), key=lambda s: s["key_start"])


def test_merge_and_split_under_live_clients(server: ServerProcess, topic: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    stream = f"kafka/{topic}"
    start = open_segments(millrace(server, "describe", stream))
    assert [s["partitions"] for s in start] == [[p] for p in range(PARTITIONS)], start

    acked: dict[bytes, tuple[int, int]] = {}
    failed: list[str] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            failed.append(str(err))

    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 2, "message.timeout.ms": 60000})
    produced_all = threading.Event()
    rescaled = threading.Event()
    sent = [0]

    def produce() -> None:
        # Keep producing until the rescaling is over, then AFTER more records on the final layout.
        after = 0
        while after < AFTER and sent[0] < LIMIT:
            producer.produce(topic, key=f"k{sent[0] % 23}".encode(), value=f"v{sent[0]}".encode(),
                             on_delivery=report)
            producer.poll(0)
            sent[0] += 1
            after += rescaled.is_set()
            time.sleep(0.002)
        producer.flush(60)
        produced_all.set()

    seen: list[tuple[int, int, bytes]] = []
    stop = threading.Event()
    consumer_error: list[BaseException] = []

    def consume() -> None:
        c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group, auto_offset_reset="earliest",
                          enable_auto_commit=False, fetch_max_wait_ms=200)
        # The topic's metadata first: a kafka-python 3.0.12 leader that joins without it assigns nothing and
        # rejoins at once, and if a poll's timeout ends while that second join is in flight, the client
        # drops the assignment it brings (join_group_async finds need_rejoin false and never completes the
        # join), so the consumer would sit with no partitions.
        c.partitions_for_topic(topic)
        c.subscribe([topic])
        try:
            while not stop.is_set():
                for msgs in c.poll(timeout_ms=200).values():
                    seen.extend((m.partition, m.offset, m.value) for m in msgs)
                    c.commit()
        except BaseException as e:
            consumer_error.append(e)
        finally:
            c.close(autocommit=False)

    threads = [threading.Thread(target=produce, daemon=True), threading.Thread(target=consume, daemon=True)]
    for t in threads:
        t.start()
    try:
        wait_for("records flowing", lambda: len(acked) > 200 and len(seen) > 100, timeout=30, interval=0.05)
    except AssertionError as e:
        raise AssertionError(f"{e}: sent {sent[0]}, acked {len(acked)}, failed {failed[:3]}, consumed {len(seen)}, "
                             f"consumer errors {consumer_error}") from None

    # Rescale underneath: 4 segments -> [0-1] 2 3 -> [0-1] [2-3] -> [0-3] -> split back into 4.
    millrace(server, "merge", stream, str(start[0]["number"]), str(start[1]["number"]))
    time.sleep(0.3)
    millrace(server, "merge", stream, str(start[2]["number"]), str(start[3]["number"]))
    time.sleep(0.3)
    halves = open_segments(millrace(server, "describe", stream))
    assert [s["partitions"] for s in halves] == [[0, 1], [2, 3]], halves
    millrace(server, "merge", stream, *(str(s["number"]) for s in halves))
    time.sleep(0.3)
    (whole,) = open_segments(millrace(server, "describe", stream))
    assert whole["partitions"] == [0, 1, 2, 3], whole
    millrace(server, "split", stream, str(whole["number"]), "--pieces", "4")
    final = open_segments(millrace(server, "describe", stream))
    assert [s["partitions"] for s in final] == [[p] for p in range(PARTITIONS)], final
    rescaled.set()

    assert produced_all.wait(90), "producer did not finish"
    total = sent[0]
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:3]}"
    assert len(acked) == total and total < LIMIT
    wait_for("live consumer caught up", lambda: len({v for _, _, v in seen}) >= total, timeout=60)
    stop.set()
    threads[1].join(30)
    assert not consumer_error, consumer_error

    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset in acked.values():
        by_partition[partition].append(offset)
    for partition, offsets in by_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {partition}: acked offsets not dense"
    live: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for partition, offset, value in seen:
        live[partition].append((offset, value))
    for partition, recs in live.items():
        offsets = [o for o, _ in recs]
        assert offsets == list(range(len(offsets))), (
            f"partition {partition}: the live consumer saw offsets out of order, repeated or skipped")
        for offset, value in recs:
            assert acked[value] == (partition, offset), (value, acked[value], (partition, offset))

    # A fresh reader from the beginning walks the predecessors (now sealed) into the successors.
    reader = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"{group}-reader",
                       "enable.auto.commit": False})
    try:
        reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        again: dict[bytes, tuple[int, int]] = {}
        deadline = time.monotonic() + 60
        while len(again) < total and time.monotonic() < deadline:
            for m in reader.consume(500, timeout=0.3):
                if not m.error():
                    assert m.value() not in again, f"{m.value()!r} read twice"
                    again[m.value()] = (m.partition(), m.offset())
    finally:
        reader.close()
    assert again == acked
