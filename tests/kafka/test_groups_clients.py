"""Consumer groups with real clients: kafka-python consumers sharing partitions, rebalancing when one
leaves, and resuming from committed offsets."""

from __future__ import annotations

import threading
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.server_process import ServerProcess

TOPIC = "orders"
PARTITIONS = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    proc = ServerProcess(str(tmp_path_factory.mktemp("group-clients"))).start()
    admin = KafkaAdminClient(bootstrap_servers=proc.bootstrap)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=proc.bootstrap)
    for i in range(200):
        producer.send(TOPIC, key=str(i).encode(), value=f"v{i}".encode(), partition=i % PARTITIONS)
    producer.flush()
    producer.close()
    yield proc
    proc.kill()


def consumer(server: ServerProcess, group: str, **kw) -> KafkaConsumer:
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                      max_poll_interval_ms=10000, **kw)
    # kafka-python's leader assigns from its metadata cache; without the topic in it the assignment
    # is empty until the next metadata refresh (5 minutes by default).
    assert c.partitions_for_topic(TOPIC) == set(range(PARTITIONS))
    return c


def poll_until(consumers: list[KafkaConsumer], done, timeout: float = 30.0) -> dict[int, list]:
    got: dict[int, list] = {i: [] for i in range(len(consumers))}
    deadline = time.time() + timeout
    while not done(consumers, got):
        assert time.time() < deadline, f"timed out; assignments {[c.assignment() for c in consumers]}"
        for i, c in enumerate(consumers):
            for records in c.poll(timeout_ms=100).values():
                got[i].extend(records)
    return got


class Poller:
    """Polls one consumer on its own thread, as an application does: a JoinGroup parked during a
    rebalance must not stop the other members from polling (and so rejoining)."""

    def __init__(self, c: KafkaConsumer) -> None:
        self.consumer = c
        self.records: list = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for records in self.consumer.poll(timeout_ms=100).values():
                self.records.extend(records)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.consumer.close()


def wait_for(condition, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_two_consumers_share_partitions_and_rebalance_on_leave(server: ServerProcess) -> None:
    group = "kp-group"
    a, b = consumer(server, group), consumer(server, group)
    a.subscribe([TOPIC])
    b.subscribe([TOPIC])
    pa, pb = Poller(a), Poller(b)
    try:
        def split() -> bool:
            sa, sb = a.assignment(), b.assignment()
            return bool(sa) and bool(sb) and len(sa) + len(sb) == PARTITIONS and not (sa & sb)

        wait_for(split, what="the partitions to be split between both consumers")
        assert {tp.partition for tp in a.assignment() | b.assignment()} == set(range(PARTITIONS))
        # B leaves: A takes every partition in the next generation and reads everything.
        pb.close()
        wait_for(lambda: len(a.assignment()) == PARTITIONS, what="A to own every partition")
        wait_for(lambda: all(a.position(TopicPartition(TOPIC, p)) == 50 for p in range(PARTITIONS)),
                 what="A to reach the end of every partition")
        pa.stop.set()
        pa.thread.join(30)
        a.commit()
        for p in range(PARTITIONS):
            assert a.committed(TopicPartition(TOPIC, p)) == 50
    finally:
        pa.close()
        pb.close()


def test_committed_offsets_are_where_a_new_member_resumes(server: ServerProcess) -> None:
    group = "kp-resume"
    first = consumer(server, group)
    first.subscribe([TOPIC])
    got = poll_until([first], lambda cs, g: len(g[0]) >= 200)
    assert sorted(r.value for r in got[0]) == sorted(f"v{i}".encode() for i in range(200))
    # Commit half-way on every partition, then a fresh member of the group resumes there.
    first.commit({TopicPartition(TOPIC, p): _offset_and_metadata(25) for p in range(PARTITIONS)})
    first.close()
    second = consumer(server, group)
    try:
        second.subscribe([TOPIC])
        got = poll_until([second], lambda cs, g: len(g[0]) >= 100)
        assert len(got[0]) == 100 and all(r.offset >= 25 for r in got[0])
    finally:
        second.close()


def test_standalone_consumer_commits_with_assign(server: ServerProcess) -> None:
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="kp-standalone", enable_auto_commit=False)
    try:
        tp = TopicPartition(TOPIC, 1)
        c.assign([tp])
        c.seek(tp, 10)
        c.commit({tp: _offset_and_metadata(17)})
        assert c.committed(tp) == 17
    finally:
        c.close()


def test_confluent_consumers_rebalance(server: ServerProcess) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    conf = {"bootstrap.servers": server.bootstrap, "group.id": "ck-group", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    a, b = Consumer(conf), Consumer(conf)
    try:
        a.subscribe([TOPIC])
        b.subscribe([TOPIC])
        seen: dict[int, list] = {0: [], 1: []}
        deadline = time.time() + 30
        while not (a.assignment() and b.assignment() and len(a.assignment()) + len(b.assignment()) == PARTITIONS):
            assert time.time() < deadline
            for i, c in enumerate((a, b)):
                msg = c.poll(0.1)
                if msg is not None and msg.error() is None:
                    seen[i].append(msg)
        assert {tp.partition for tp in a.assignment() + b.assignment()} == set(range(PARTITIONS))
        b.close()
        deadline = time.time() + 30
        while len(a.assignment()) != PARTITIONS:
            assert time.time() < deadline
            a.poll(0.1)
        a.commit(offsets=[CTopicPartition(TOPIC, p, 33) for p in range(PARTITIONS)], asynchronous=False)
        committed = a.committed([CTopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
        assert [tp.offset for tp in committed] == [33] * PARTITIONS
    finally:
        a.close()


def _offset_and_metadata(offset: int):
    from kafka.structs import OffsetAndMetadata

    try:
        return OffsetAndMetadata(offset, "", -1)
    except TypeError:  # kafka-python before 2.1 has no leader epoch field
        return OffsetAndMetadata(offset, "")
