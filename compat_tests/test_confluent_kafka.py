"""confluent-kafka 2.x (librdkafka), unmodified, against a real Millrace server: producer with every
codec, plain and idempotent; consumer without a group; consumer groups (commit, resume, rebalance);
AdminClient (topics, partitions, configs, list offsets, delete records, groups)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

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

TIMEOUT = 30.0


def producer(server: ServerProcess, **extra: Any) -> Producer:
    conf = {"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 5,
            "message.max.bytes": MAX_REQUEST_BYTES, "message.timeout.ms": 30000, **extra}
    return Producer(conf)


def consumer(server: ServerProcess, group: str | None = None, **extra: Any) -> Consumer:
    conf: dict[str, Any] = {"bootstrap.servers": server.bootstrap, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "fetch.wait.max.ms": 200,
                            "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000, **extra}
    # confluent-kafka insists on a group.id even for assign(); without ``group`` the consumer uses a
    # fresh one and never commits, i.e. it reads with no group state at all.
    conf["group.id"] = group if group is not None else f"assign-only-{uuid.uuid4().hex}"
    return Consumer(conf)


def admin(server: ServerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap})


def produce(server: ServerProcess, topic: str, recs: list[Rec], **extra: Any) -> dict[int, list[Placed]]:
    p = producer(server, **extra)
    reports: list[tuple[KafkaError | None, Message] | None] = [None] * len(recs)

    def on_delivery(i: int) -> Any:
        def report(err: KafkaError | None, msg: Message) -> None:
            reports[i] = (err, msg)

        return report

    for i, r in enumerate(recs):
        p.produce(topic, key=r.key, value=r.value, headers=list(r.headers) or None, on_delivery=on_delivery(i))
        p.poll(0)
    assert p.flush(TIMEOUT) == 0, "records still undelivered after flush"
    assert all(r is not None for r in reports), "missing delivery reports"
    errors = [r[0] for r in reports if r is not None and r[0] is not None]
    assert not errors, f"delivery failed: {errors[:3]}"
    return expect_dense(recs, [(r[1].partition(), r[1].offset()) for r in reports if r is not None])


def to_placed(msg: Message) -> Placed:
    headers = tuple((k, v) for k, v in (msg.headers() or []))
    return Placed(msg.partition(), msg.offset(), Rec(msg.key(), msg.value(), headers))


def drain(c: Consumer, want: int, timeout: float = TIMEOUT) -> list[Placed]:
    got: list[Placed] = []
    deadline = time.monotonic() + timeout
    extra_until: float | None = None
    while time.monotonic() < deadline:
        for msg in c.consume(num_messages=100, timeout=0.3):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            got.append(to_placed(msg))
        if len(got) >= want:
            extra_until = extra_until or time.monotonic() + 0.5
            if time.monotonic() >= extra_until:
                break
    return got


def partitions_of(server: ServerProcess, topic: str) -> list[int]:
    a = admin(server)

    def ready() -> list[int] | None:
        md = a.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            return None
        return sorted(t.partitions)

    return wait_for(f"metadata of {topic}", ready)


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_roundtrip(server: ServerProcess, topic: str, codec: str, idempotent: bool) -> None:
    recs = sample_records(f"ck-{codec}-{idempotent}", count=24, null_header_values=True)
    expected = produce(server, topic, recs, **{"compression.type": codec, "enable.idempotence": idempotent})
    c = consumer(server)
    try:
        parts = partitions_of(server, topic)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        got = drain(c, len(recs))
    finally:
        c.close()
    check_consumed(expected, got)


def test_group_commit_and_resume(server: ServerProcess, topic: str, group: str) -> None:
    recs = sample_records("ck-group", count=30, big=0)
    expected = produce(server, topic, recs, **{"enable.idempotence": True})
    first = consumer(server, group)
    first.subscribe([topic])
    try:
        got = drain(first, 12)
        assert got, "a subscribed consumer received nothing"
        first.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in first.committed(first.assignment(), timeout=10)}
    finally:
        first.close()
    for partition in expected:
        mine = [p.offset for p in got if p.partition == partition]
        assert mine == list(range(len(mine))), (partition, mine)
        if mine:
            assert committed.get(partition) == len(mine), (partition, committed)
    start = {p: off for p, off in committed.items() if off >= 0}
    second = consumer(server, group)
    second.subscribe([topic])
    try:
        rest = drain(second, placed_count(expected, start))
    finally:
        second.close()
    check_consumed(expected, rest, start=start)


def test_rebalance_when_members_join_and_leave(server: ServerProcess, topic: str, group: str) -> None:
    a = admin(server)
    a.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])[topic].result(TIMEOUT)
    c1, c2 = consumer(server, group), consumer(server, group)
    try:
        c1.subscribe([topic])

        def assigned(*cs: Consumer) -> list[set[int]]:
            for c in cs:
                c.poll(0.1)
            return [{tp.partition for tp in c.assignment()} for c in cs]

        wait_for("first member owns all 4 partitions", lambda: assigned(c1) == [{0, 1, 2, 3}])
        c2.subscribe([topic])

        def split() -> bool:
            s1, s2 = assigned(c1, c2)
            return len(s1) == 2 and len(s2) == 2 and not (s1 & s2)

        wait_for("partitions split between two members", split, timeout=40)
        desc = a.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert len(desc.members) == 2, desc
        c2.close()
        wait_for("remaining member owns all 4 partitions again", lambda: assigned(c1) == [{0, 1, 2, 3}], timeout=40)
    finally:
        c1.close()


def test_admin_topics_and_configs(server: ServerProcess, topic: str) -> None:
    a = admin(server)
    futures = a.create_topics([NewTopic(topic, num_partitions=5, replication_factor=1,
                                        config={"retention.ms": "86400000"})])
    futures[topic].result(TIMEOUT)
    assert partitions_of(server, topic) == [0, 1, 2, 3, 4]
    desc = a.describe_topics(TopicCollection([topic]))[topic].result(TIMEOUT)
    assert desc.name == topic and [p.id for p in desc.partitions] == [0, 1, 2, 3, 4], desc
    # Creating it again is an error the client can recognise.
    with pytest.raises(Exception) as dup:
        a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(TIMEOUT)
    assert dup.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, dup.value

    res = ConfigResource(ResourceType.TOPIC, topic)
    configs = a.describe_configs([res])[res].result(TIMEOUT)
    assert configs["retention.ms"].value == "86400000", configs.get("retention.ms")
    alter = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([alter])[alter].result(TIMEOUT)
    configs = a.describe_configs([res])[res].result(TIMEOUT)
    assert configs["retention.ms"].value == "3600000"

    a.create_partitions([NewPartitions(topic, 7)])[topic].result(TIMEOUT)
    wait_for("7 partitions", lambda: len(partitions_of(server, topic)) == 7)

    a.delete_topics([topic])[topic].result(TIMEOUT)
    wait_for("topic gone", lambda: topic not in a.list_topics(timeout=5).topics)


def test_admin_list_offsets_and_delete_records(server: ServerProcess, topic: str) -> None:
    a = admin(server)
    a.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(TIMEOUT)
    partitions_of(server, topic)
    base_ts = int(time.time() * 1000) - 60_000
    p = producer(server, **{"enable.idempotence": True})
    for i in range(6):
        p.produce(topic, value=f"v{i}".encode(), partition=1, timestamp=base_ts + i * 1000)
    assert p.flush(TIMEOUT) == 0
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    def offsets(spec: dict[TopicPartition, OffsetSpec]) -> dict[tuple[str, int], Any]:
        fs = a.list_offsets(spec, request_timeout=TIMEOUT)
        return {(tp.topic, tp.partition): f.result(TIMEOUT) for tp, f in fs.items()}

    got = offsets({tp0: OffsetSpec.latest(), tp1: OffsetSpec.latest()})
    assert got[(topic, 0)].offset == 0 and got[(topic, 1)].offset == 6, got
    got = offsets({tp1: OffsetSpec.earliest()})
    assert got[(topic, 1)].offset == 0
    got = offsets({tp1: OffsetSpec.for_timestamp(base_ts + 2500)})
    assert got[(topic, 1)].offset == 3 and got[(topic, 1)].timestamp == base_ts + 3000, got
    got = offsets({tp1: OffsetSpec.for_timestamp(base_ts + 60_000)})  # later than everything
    assert got[(topic, 1)].offset == -1, got
    got = offsets({tp1: OffsetSpec.max_timestamp()})
    assert got[(topic, 1)].offset == 5 and got[(topic, 1)].timestamp == base_ts + 5000, got

    deleted = a.delete_records([TopicPartition(topic, 1, 4)], request_timeout=TIMEOUT)
    (result,) = [f.result(TIMEOUT) for f in deleted.values()]
    assert result.low_watermark == 4, result
    got = offsets({tp1: OffsetSpec.earliest()})
    assert got[(topic, 1)].offset == 4
    c = consumer(server)
    try:
        c.assign([TopicPartition(topic, 1, OFFSET_BEGINNING)])
        rest = drain(c, 2)
    finally:
        c.close()
    assert [(x.offset, x.rec.value) for x in rest] == [(4, b"v4"), (5, b"v5")]


def test_admin_groups(server: ServerProcess, topic: str, group: str) -> None:
    produce(server, topic, sample_records("ck-admin-groups", count=9, big=0))
    c = consumer(server, group)
    c.subscribe([topic])
    try:
        drain(c, 9)
        c.commit(asynchronous=False)
        a = admin(server)
        listed = a.list_consumer_groups(request_timeout=TIMEOUT).result(TIMEOUT)
        assert group in {g.group_id for g in listed.valid}, listed
        desc = a.describe_consumer_groups([group], request_timeout=TIMEOUT)[group].result(TIMEOUT)
        assert desc.group_id == group and len(desc.members) == 1, desc
        assert {tp.partition for tp in desc.members[0].assignment.topic_partitions} == set(partitions_of(server, topic))
    finally:
        c.close()
    offsets = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT)
    committed = {tp.partition: tp.offset for tp in offsets.topic_partitions if tp.topic == topic}
    latest = a.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in committed})
    assert committed == {tp.partition: f.result(TIMEOUT).offset for tp, f in latest.items()}
    a.delete_consumer_groups([group])[group].result(TIMEOUT)
    listed = a.list_consumer_groups(request_timeout=TIMEOUT).result(TIMEOUT)
    assert group not in {g.group_id for g in listed.valid}


def test_long_poll_wakes_on_append(server: ServerProcess, topic: str) -> None:
    """A consumer parked at the tail (fetch.wait.max.ms far longer than the test) gets a new record as
    soon as it is appended, not when its long poll expires."""
    # One partition only: librdkafka keeps one Fetch in flight per broker, so a partition whose start
    # offset is still being looked up would join only the next Fetch, after a parked one returns.
    p = producer(server)
    p.produce(topic, key=b"k", value=b"first", partition=0)
    assert p.flush(TIMEOUT) == 0
    c = consumer(server, **{"fetch.wait.max.ms": 20000, "fetch.min.bytes": 1})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert [p.rec.value for p in drain(c, 1, timeout=15)] == [b"first"]
        time.sleep(1.0)  # the consumer's next Fetch is now parked at the tail
        sent_at = time.monotonic()
        p.produce(topic, key=b"k", value=b"second", partition=0)
        assert p.flush(TIMEOUT) == 0
        got: list[Message] = []
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            got = [m for m in c.consume(1, timeout=0.05) if not m.error()]
        latency = time.monotonic() - sent_at
    finally:
        c.close()
    assert got and got[0].value() == b"second", got
    assert latency < 5.0, f"the appended record reached the long-polling consumer only after {latency:.1f}s"


def test_many_batches_with_small_fetch_limits(server: ServerProcess, topic: str) -> None:
    """Thousands of records in many batches, read with fetch limits far smaller than the data, so the
    consumer needs many Fetch rounds and each response is cut at batch boundaries."""
    recs = [Rec(f"key-{i % 50}".encode(), f"value-{i}-".encode() * 8, (("n", str(i).encode()),)) for i in range(5000)]
    expected = produce(server, topic, recs, **{"linger.ms": 1, "batch.num.messages": 50, "compression.type": "lz4"})
    c = consumer(server, **{"max.partition.fetch.bytes": 2048, "fetch.max.bytes": 4096, "message.max.bytes": 4096})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions_of(server, topic)])
        got = drain(c, len(recs), timeout=60)
    finally:
        c.close()
    check_consumed(expected, got)


def test_acks_zero_and_one(server: ServerProcess, topic: str) -> None:
    """acks=0 (no response at all) and acks=1 producers interleaved on one partition: everything lands, in
    order, and the acks=1 reports carry the offsets."""
    p0 = producer(server, **{"acks": 0, "enable.idempotence": False})
    p1 = producer(server, **{"acks": 1, "enable.idempotence": False})
    for i in range(20):
        p0.produce(topic, value=f"zero-{i}".encode(), partition=0)
    assert p0.flush(TIMEOUT) == 0
    offsets: list[int] = []
    for i in range(5):
        p1.produce(topic, value=f"one-{i}".encode(), partition=0,
                   on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset()))
    assert p1.flush(TIMEOUT) == 0
    assert offsets == [20, 21, 22, 23, 24]
    c = consumer(server)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = drain(c, 25)
    finally:
        c.close()
    assert [(p.offset, p.rec.value) for p in got] == (
        [(i, f"zero-{i}".encode()) for i in range(20)] + [(20 + i, f"one-{i}".encode()) for i in range(5)])


def test_concurrent_idempotent_producers(server: ServerProcess, topic: str) -> None:
    """Three idempotent producers appending to the same partitions at once: offsets stay dense, each
    producer's records keep their order within a partition, nothing is lost or doubled."""
    per_producer = 600
    results: dict[int, list[tuple[int, int, bytes]]] = {}

    def run(n: int) -> None:
        p = producer(server, **{"enable.idempotence": True, "linger.ms": 1})
        out: list[tuple[int, int, bytes]] = []
        for i in range(per_producer):
            p.produce(topic, key=f"k{i % 9}".encode(), value=f"p{n}-{i}".encode(),
                      on_delivery=lambda err, msg: out.append((msg.partition(), msg.offset(), msg.value()))
                      if err is None else None)
            p.poll(0)
        assert p.flush(TIMEOUT) == 0
        results[n] = out

    threads = [threading.Thread(target=run, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [0, 1, 2] and all(len(r) == per_producer for r in results.values())
    c = consumer(server)
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions_of(server, topic)])
        got = drain(c, 3 * per_producer)
    finally:
        c.close()
    where = {p.rec.value: (p.partition, p.offset) for p in got}
    assert len(got) == len(where) == 3 * per_producer, "records lost or duplicated"
    for part in {p.partition for p in got}:
        offsets = sorted(p.offset for p in got if p.partition == part)
        assert offsets == list(range(len(offsets))), f"partition {part}: offsets not dense"
    for n, reports in results.items():
        for partition, offset, value in reports:
            assert where[value] == (partition, offset), (n, value, where[value], (partition, offset))
        for part in {r[0] for r in reports}:
            seq = [int(v.decode().split("-")[1]) for pp, _, v in sorted(reports, key=lambda r: r[1]) if pp == part]
            assert seq == sorted(seq), f"producer {n}: partition {part} out of send order"
