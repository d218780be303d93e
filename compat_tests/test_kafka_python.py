"""kafka-python 3.x, unmodified, against a real Millrace server: producer with every codec, consumer
without a group, consumer groups (commit, resume, rebalance as members join and leave), admin."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, OffsetSpec

from compat_tests.common import (
    CODECS,
    MAX_REQUEST_BYTES,
    Placed,
    Rec,
    check_consumed,
    expect_dense,
    placed_count,
    sample_records,
    wait_for,
)
from tests.server_process import ServerProcess

pytestmark = pytest.mark.timeout(120)

COMMON: dict[str, Any] = {"request_timeout_ms": 15000}


def producer(server: ServerProcess, **extra: Any) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=server.bootstrap, acks="all", linger_ms=5,
                         max_request_size=MAX_REQUEST_BYTES, max_block_ms=20000, **COMMON, **extra)


def consumer(server: ServerProcess, *topics: str, **extra: Any) -> KafkaConsumer:
    return KafkaConsumer(*topics, bootstrap_servers=server.bootstrap, auto_offset_reset="earliest",
                         enable_auto_commit=False, fetch_max_wait_ms=200, **COMMON, **extra)


@pytest.fixture
def admin(server: ServerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap, **COMMON)
    yield client
    client.close()


def produce(server: ServerProcess, topic: str, recs: list[Rec], **extra: Any) -> dict[int, list[Placed]]:
    p = producer(server, **extra)
    try:
        futures = [p.send(topic, key=r.key, value=r.value, headers=list(r.headers)) for r in recs]
        p.flush(timeout=60)
        metas = [f.get(timeout=30) for f in futures]
    finally:
        p.close(timeout=10)
    for m in metas:
        assert m.topic == topic
    return expect_dense(recs, [(m.partition, m.offset) for m in metas])


def to_placed(msg: Any) -> Placed:
    headers = tuple((k, v) for k, v in (msg.headers or []))
    return Placed(msg.partition, msg.offset, Rec(msg.key, msg.value, headers))


def drain(c: KafkaConsumer, want: int, timeout: float = 30.0) -> list[Placed]:
    """Polls until ``want`` records arrived (then half a second more, to catch extras) or time runs out."""
    got: list[Placed] = []
    deadline = time.monotonic() + timeout
    extra_until: float | None = None
    while time.monotonic() < deadline:
        for msgs in c.poll(timeout_ms=300).values():
            got.extend(to_placed(m) for m in msgs)
        if len(got) >= want:
            extra_until = extra_until or time.monotonic() + 0.5
            if time.monotonic() >= extra_until:
                break
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_roundtrip(server: ServerProcess, topic: str, codec: str) -> None:
    recs = sample_records(f"kp-{codec}", count=24, both_null=False)
    expected = produce(server, topic, recs, compression_type=None if codec == "none" else codec)
    # Without a group: assign every partition and read from the beginning.
    c = consumer(server)
    try:
        partitions = wait_for("partitions in metadata", lambda: c.partitions_for_topic(topic))
        assert partitions == set(range(len(partitions)))
        c.assign([TopicPartition(topic, p) for p in partitions])
        c.seek_to_beginning()
        got = drain(c, len(recs))
    finally:
        c.close()
    check_consumed(expected, got)


def test_idempotent_and_plain_producers(server: ServerProcess, topic: str) -> None:
    """kafka-python 3 enables idempotence by default; an explicit non-idempotent acks=1 producer must
    also work, and both append to the same partitions densely."""
    recs = sample_records("kp-idem", count=10, big=0, both_null=False)
    p1 = producer(server, enable_idempotence=True)
    p2 = KafkaProducer(bootstrap_servers=server.bootstrap, acks=1, enable_idempotence=False, **COMMON)
    try:
        metas = []
        for i, r in enumerate(recs):
            p = p1 if i % 2 == 0 else p2
            metas.append(p.send(topic, key=r.key, value=r.value, headers=list(r.headers), partition=0).get(timeout=30))
    finally:
        p1.close(timeout=10)
        p2.close(timeout=10)
    expected = expect_dense(recs, [(m.partition, m.offset) for m in metas])
    c = consumer(server)
    try:
        c.assign([TopicPartition(topic, 0)])
        c.seek_to_beginning()
        check_consumed(expected, drain(c, len(recs)))
    finally:
        c.close()


def test_group_commit_and_resume(server: ServerProcess, topic: str, group: str) -> None:
    recs = sample_records("kp-group", count=30, big=0, both_null=False)
    expected = produce(server, topic, recs)
    first = consumer(server, topic, group_id=group, session_timeout_ms=10000, heartbeat_interval_ms=1000)
    try:
        got = drain(first, 12, timeout=30)
        assert got, "a subscribed consumer received nothing"
        first.commit()
        committed = {tp.partition: first.committed(tp) for tp in first.assignment()}
    finally:
        first.close(autocommit=False)
    # What was consumed is exactly a prefix of each partition, and the commit is its end.
    for partition in expected:
        mine = [p.offset for p in got if p.partition == partition]
        assert mine == list(range(len(mine)))
        assert committed.get(partition) == len(mine) or (not mine and committed.get(partition) is None), (
            partition, committed, len(mine))
    start = {p: off for p, off in committed.items() if off is not None}
    second = consumer(server, topic, group_id=group, session_timeout_ms=10000, heartbeat_interval_ms=1000)
    try:
        rest = drain(second, placed_count(expected, start), timeout=30)
        second.commit()
    finally:
        second.close(autocommit=False)
    check_consumed(expected, rest, start=start)


class Member(threading.Thread):
    """A group member polling on its own thread (kafka-python consumers are single-threaded), recording
    its assignment after each poll."""

    def __init__(self, server: ServerProcess, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.consumer = consumer(server, topic, group_id=group, session_timeout_ms=10000,
                                 heartbeat_interval_ms=500, max_poll_interval_ms=30000)
        self.assigned: set[int] = set()
        self.stop_flag = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_flag.is_set():
                self.consumer.poll(timeout_ms=200)
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
        except BaseException as e:  # reported by the test thread
            self.error = e
        finally:
            self.consumer.close(autocommit=False)

    def leave(self) -> None:
        self.stop_flag.set()
        self.join(30)


def test_rebalance_when_members_join_and_leave(server: ServerProcess, admin: KafkaAdminClient, topic: str,
                                               group: str) -> None:
    admin.create_topics({topic: {"num_partitions": 4, "replication_factor": 1}})
    admin.wait_for_topics([topic])
    a = Member(server, topic, group)
    a.start()
    try:
        wait_for("first member owns all 4 partitions", lambda: a.assigned == {0, 1, 2, 3}, timeout=30)
        b = Member(server, topic, group)
        b.start()
        try:
            wait_for("partitions split between two members",
                     lambda: len(a.assigned) == 2 and len(b.assigned) == 2 and not (a.assigned & b.assigned),
                     timeout=40)
            described = admin.describe_groups([group])[group]
            assert described.get("group_state") == "Stable", described
            assert len(described["members"]) == 2, described
        finally:
            b.leave()
        assert b.error is None, b.error
        wait_for("remaining member owns all 4 partitions again", lambda: a.assigned == {0, 1, 2, 3}, timeout=40)
    finally:
        a.leave()
    assert a.error is None, a.error


def test_admin(server: ServerProcess, admin: KafkaAdminClient, topic: str, group: str) -> None:
    admin.create_topics({topic: {"num_partitions": 5, "replication_factor": 1, "configs": {"retention.ms": "86400000"}}})
    admin.wait_for_topics([topic])
    assert topic in admin.list_topics()
    (desc,) = admin.describe_topics([topic])
    assert desc["error_code"] == 0 and desc["name"] == topic, desc
    assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1, 2, 3, 4]

    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    flat = str(configs)
    assert "retention.ms" in flat and "86400000" in flat, configs

    # Offsets: empty partition, then after producing with explicit timestamps.
    base_ts = int(time.time() * 1000) - 60_000
    p = producer(server)
    try:
        metas = [p.send(topic, value=f"v{i}".encode(), partition=1, timestamp_ms=base_ts + i * 1000).get(timeout=30)
                 for i in range(6)]
    finally:
        p.close(timeout=10)
    assert [m.offset for m in metas] == list(range(6))
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    offs = admin.list_partition_offsets({tp0: OffsetSpec.LATEST, tp1: OffsetSpec.LATEST})
    assert offs[tp0].offset == 0 and offs[tp1].offset == 6, offs
    offs = admin.list_partition_offsets({tp1: OffsetSpec.EARLIEST})
    assert offs[tp1].offset == 0, offs
    offs = admin.list_partition_offsets({tp1: base_ts + 2500})  # first record with timestamp >= t
    assert offs[tp1].offset == 3 and offs[tp1].timestamp == base_ts + 3000, offs

    # A group with committed offsets is listed, described and its offsets fetched.
    c = consumer(server, topic, group_id=group)
    try:
        drain(c, 6, timeout=20)
        c.commit()
    finally:
        c.close(autocommit=False)
    groups = admin.list_groups()
    assert group in str(groups), groups
    offsets = admin.list_group_offsets({group: None})[group]
    assert offsets[tp1].offset == 6, offsets

    admin.create_partitions({topic: 7})
    wait_for("7 partitions", lambda: len(admin.describe_topics([topic])[0]["partitions"]) == 7, timeout=15)

    admin.delete_topics([topic])
    wait_for("topic gone", lambda: topic not in admin.list_topics(), timeout=15)


def test_small_fetch_limits(server: ServerProcess, topic: str) -> None:
    """Fetch limits far below the batch sizes (and the 1 MiB record): the server must still hand out the
    first batch whole (KIP-74), so the consumer makes progress one batch at a time."""
    recs = sample_records("kp-small-fetch", count=40, both_null=False)
    expected = produce(server, topic, recs, compression_type="gzip", batch_size=512)
    c = consumer(server, max_partition_fetch_bytes=1024, fetch_max_bytes=2048)
    try:
        partitions = wait_for("partitions in metadata", lambda: c.partitions_for_topic(topic))
        c.assign([TopicPartition(topic, p) for p in partitions])
        c.seek_to_beginning()
        got = drain(c, len(recs), timeout=45)
    finally:
        c.close()
    check_consumed(expected, got)
