"""The consumer group protocol (KIP-848, ``group.protocol=consumer``) with unmodified clients: Java
kafka-clients 4.x consumers and Admin (compat_tests/java/ConsumerGroupProtocolClient.java) and
librdkafka (confluent-kafka) consumers, both server-side assignors, members joining and leaving while a
producer writes, ConsumerGroupDescribe through the Java Admin's describeConsumerGroups, and the upgrade
of a classic group to the consumer protocol.

Delivery rule checked: every member commits synchronously after each batch it processed, and every
member change here is graceful (close() leaves the group after its revocation), so a partition's new
owner starts exactly at the old owner's next record: each produced record is consumed exactly once per
group, and per partition the records arrive in offset order across owners (an overlap of two owners
would show as a repeated or backward offset). At-least-once would allow repeats only after a member is
fenced or crashes, which these tests do not do."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.java_support import run_main
from tests.kafka.wire import KafkaWire
from tests.server_process import ServerProcess

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 6


def create_topic(server: ServerProcess, partitions: int = PARTITIONS) -> str:
    name = f"kip848-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)
    return name


class BackgroundProducer:
    """librdkafka producer writing ``total`` keyed records at ``rate``/s; ``placed`` are the delivery
    reports' (partition, offset)."""

    def __init__(self, server: ServerProcess, topic: str, total: int, rate: float) -> None:
        self.topic, self.total, self.rate = topic, total, rate
        self.producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
        self.placed: list[tuple[int, int]] = []
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.placed.append((msg.partition(), msg.offset()))

    def _run(self) -> None:
        start = time.monotonic()
        for i in range(self.total):
            delay = start + i / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.producer.produce(self.topic, key=f"k{i}".encode(), value=f"v{i}".encode(), on_delivery=self._report)
            self.producer.poll(0)
        self.producer.flush(30)

    def __enter__(self) -> BackgroundProducer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.thread.join(120)
        assert not self.errors, self.errors[:5]
        assert len(self.placed) == self.total


def check_once_in_order(placed: list[tuple[int, int]], consumed: list[tuple[str, int, int]]) -> None:
    """``consumed``: (member, partition, offset) in the order the consumers reported them."""
    counts = Counter((p, o) for _, p, o in consumed)
    missing = sorted(set(placed) - set(counts))
    assert not missing, f"{len(missing)} records never consumed, e.g. {missing[:10]}"
    repeated = {k: c for k, c in counts.items() if c > 1}
    assert not repeated, f"records consumed more than once: {sorted(repeated.items())[:10]}"
    last: dict[int, tuple[str, int]] = {}
    for member, p, o in consumed:
        if p in last:
            assert o > last[p][1], f"partition {p}: {member} read offset {o} after {last[p]}"
        last[p] = (member, o)


# -- Java kafka-clients 4.x --------------------------------------------------------------------------

@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_java_consumers_join_and_leave_under_a_producer(server: ServerProcess, assignor: str) -> None:
    topic = create_topic(server)
    group = f"java-{assignor}-{uuid.uuid4().hex[:8]}"
    total = 2400
    with BackgroundProducer(server, topic, total, rate=120) as producer:
        run = run_main("4.x", "ConsumerGroupProtocolClient", [server.bootstrap, "churn", topic, group, assignor,
                                                              str(total)], timeout=200)
    events = run.scenario("churn")
    consumed = [(e["member"], e["partition"], e["offset"]) for e in events if e["event"] == "record"]
    check_once_in_order(producer.placed, consumed)
    # Every member got partitions at some point. Assignments, not records, show it: the last to join
    # ("d") may be assigned only once the others read everything produced, when the machine is busy.
    assigned = {e["member"] for e in run.of("churn", "assigned") if e["partitions"]}
    assert assigned == {"a", "b", "c", "s", "d"}, Counter(m for m, _, _ in consumed)
    (busy,) = run.of("churn", "describe_busy")
    assert (busy["type"], busy["assignor"]) == ("Consumer", assignor)
    assert busy["state"] in ("Stable", "Reconciling")
    assert len(busy["members"]) == 4
    assert sum(m["instanceId"] == "static-s" for m in busy["members"]) == 1
    targets = [p for m in busy["members"] for p in m["targetAssignment"]]
    assert sorted(targets) == sorted(f"{topic}-{p}" for p in range(PARTITIONS))
    owned = [p for m in busy["members"] for p in m["assignment"]]
    assert len(owned) == len(set(owned))
    assert all(m["memberEpoch"] is not None and m["memberEpoch"] <= busy["groupEpoch"] for m in busy["members"])
    sizes = sorted((len(m["targetAssignment"]) for m in busy["members"]), reverse=True)
    # 6 partitions over 4 members: quotas of 2, 2, 1, 1 for both (range: per topic, uniform: overall).
    assert sizes == [2, 2, 1, 1], busy["members"]
    (end,) = run.of("churn", "describe_end")
    assert len(end["members"]) == 3
    # Dynamic members left for good; the static one left with epoch -2 and keeps its place (and its
    # partitions) until its session times out or its instance id rejoins, as in Kafka.
    (after,) = run.of("churn", "describe_empty")
    assert [(m["instanceId"], m["memberEpoch"]) for m in after["members"]] == [("static-s", -2)]


def test_java_classic_group_upgrades_to_the_consumer_protocol(server: ServerProcess) -> None:
    topic = create_topic(server, partitions=3)
    group = f"upgrade-{uuid.uuid4().hex[:8]}"
    total = 900
    with BackgroundProducer(server, topic, total, rate=2000) as producer:
        pass
    run = run_main("4.x", "ConsumerGroupProtocolClient", [server.bootstrap, "upgrade", topic, group, "300",
                                                          str(total)], timeout=200)
    events = run.scenario("upgrade")
    consumed = [(e["member"], e["partition"], e["offset"]) for e in events if e["event"] == "record"]
    check_once_in_order(producer.placed, consumed)
    phases = Counter(m for m, _, _ in consumed)
    assert phases["classic"] >= 300 and phases["consumer"] >= 1, phases
    (classic,) = run.of("upgrade", "describe_classic")
    assert (classic["type"], classic["state"], len(classic["members"])) == ("Classic", "Stable", 1)
    (modern,) = run.of("upgrade", "describe_consumer")
    assert (modern["type"], modern["state"], modern["assignor"]) == ("Consumer", "Stable", "range")
    assert modern["members"][0]["assignment"] == [f"{topic}-{p}" for p in range(3)]
    listed = [{g["group"]: g for g in e["groups"]}[group] for e in run.of("upgrade", "list")]
    assert [(g["type"], g["protocol"]) for g in listed] == [("Classic", "consumer"), ("Consumer", "consumer")]
    lists = run.of("upgrade", "list")
    assert group not in lists[0]["consumerGroups"] and group in lists[1]["consumerGroups"]


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_java_live_classic_group_upgrades_online(server: ServerProcess, strategy: str) -> None:
    topic = create_topic(server)
    group = f"online-{strategy}-{uuid.uuid4().hex[:8]}"
    total = 2000
    with BackgroundProducer(server, topic, total, rate=100) as producer:
        run = run_main("4.x", "ConsumerGroupProtocolClient", [server.bootstrap, "online_upgrade", topic, group,
                                                              str(total), strategy], timeout=220)
    events = run.scenario("online_upgrade")
    consumed = [(e["member"], e["partition"], e["offset"]) for e in events if e["event"] == "record"]
    check_once_in_order(producer.placed, consumed)
    (before,) = run.of("online_upgrade", "describe_classic")
    assert (before["type"], before["state"]) == ("Classic", "Stable")
    (mixed,) = run.of("online_upgrade", "describe_mixed")
    assert (mixed["type"], len(mixed["members"])) == ("Consumer", 2)
    # Both members share the partitions once the classic member rejoined.
    shares = {m["clientId"]: m["assignment"] for m in mixed["members"]}
    assert all(shares.values()) and sorted(p for a in shares.values() for p in a) == sorted(
        f"{topic}-{p}" for p in range(PARTITIONS)), mixed
    # Records after the upgrade came from both members.
    firsts = {m: min(i for i, c in enumerate(consumed) if c[0] == m) for m in ("classic", "consumer")}
    assert any(c[0] == "classic" for c in consumed[firsts["consumer"]:]), "the classic member stopped at the upgrade"
    (after,) = run.of("online_upgrade", "describe_consumer")
    assert (after["type"], after["state"], len(after["members"])) == ("Consumer", "Stable", 1)


def test_java_group_goes_back_to_classic_when_the_consumer_member_leaves(server: ServerProcess) -> None:
    topic = create_topic(server)
    group = f"roundtrip-{uuid.uuid4().hex[:8]}"
    total = 2000
    with BackgroundProducer(server, topic, total, rate=100) as producer:
        run = run_main("4.x", "ConsumerGroupProtocolClient", [server.bootstrap, "online_roundtrip", topic, group,
                                                              str(total)], timeout=220)
    events = run.scenario("online_roundtrip")
    consumed = [(e["member"], e["partition"], e["offset"]) for e in events if e["event"] == "record"]
    check_once_in_order(producer.placed, consumed)
    assert Counter(m for m, _, _ in consumed).keys() == {"classic", "consumer"}
    (mixed,) = run.of("online_roundtrip", "describe_mixed")
    assert (mixed["type"], len(mixed["members"])) == ("Consumer", 2)
    (after,) = run.of("online_roundtrip", "describe_classic")
    assert (after["type"], after["state"], len(after["members"])) == ("Classic", "Stable", 1)
    assert after["members"][0]["assignment"] == sorted(f"{topic}-{p}" for p in range(PARTITIONS))


def make_regex_topics(server: ServerProcess) -> tuple[str, set[tuple[str, int, int]]]:
    """Topics PREFIX-a (2 partitions) and PREFIX-b (1) with 30 records each, and one that does not match;
    returns the prefix and the (topic, partition, offset) of the matching records."""
    prefix = f"rx{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    names = {f"{prefix}-a": 2, f"{prefix}-b": 1, f"other{prefix}-a": 1}
    for f in admin.create_topics([NewTopic(n, c, 1) for n, c in names.items()]).values():
        f.result(30)
    placed: set[tuple[str, int, int]] = set()
    producer = Producer({"bootstrap.servers": server.bootstrap})
    for name in names:
        for i in range(30):
            producer.produce(name, value=f"{name}-{i}".encode(), partition=i % names[name], on_delivery=lambda err, m: (
                placed.add((m.topic(), m.partition(), m.offset())) if err is None else None))
    producer.flush(30)
    return prefix, {p for p in placed if p[0].startswith(prefix)}


def test_java_regex_subscription_is_resolved_by_the_broker(server: ServerProcess) -> None:
    prefix, placed = make_regex_topics(server)
    run = run_main("4.x", "ConsumerGroupProtocolClient", [server.bootstrap, "regex", prefix, f"rx-{prefix}",
                                                          str(len(placed))], timeout=150)
    records = [(e["topic"], e["partition"], e["offset"]) for e in run.of("regex", "record")]
    assert len(records) == len(set(records))
    assert placed <= set(records)
    late = {r for r in records if r[0] == f"{prefix}-late"}
    assert len(late) == 20  # a topic created after the join that matches is assigned (a new group epoch)
    assert set(records) == placed | late  # nothing from the topic that does not match
    (assignment,) = run.of("regex", "assignment")
    assert assignment["partitions"] == sorted([f"{prefix}-a-0", f"{prefix}-a-1", f"{prefix}-b-0", f"{prefix}-late-0"])


# -- librdkafka (confluent-kafka) --------------------------------------------------------------------

def librdkafka_supports_consumer_protocol() -> bool:
    import confluent_kafka

    major, minor = (int(x) for x in confluent_kafka.libversion()[0].split(".")[:2])
    return (major, minor) >= (2, 6)  # KIP-848 consumer is GA in librdkafka 2.6+ (preview since 2.4)


class RdMember:
    """A librdkafka consumer with group.protocol=consumer in a thread, committing after each message."""

    def __init__(self, server: ServerProcess, name: str, topic: str, group: str, assignor: str,
                 consumed: list[tuple[str, int, int]], lock: threading.Lock) -> None:
        self.name = name
        self.consumer = Consumer({
            "bootstrap.servers": server.bootstrap, "group.id": group, "group.protocol": "consumer",
            "group.remote.assignor": assignor, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.assigned: set[int] = set()  # every partition it was ever assigned
        self.consumer.subscribe([topic], on_assign=lambda _, parts: self.assigned.update(p.partition for p in parts))
        self.consumed, self.lock = consumed, lock
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                msg = self.consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    self.errors.append(str(msg.error()))
                    continue
                with self.lock:
                    self.consumed.append((self.name, msg.partition(), msg.offset()))
                try:
                    self.consumer.commit(offsets=[TopicPartition(msg.topic(), msg.partition(), msg.offset() + 1)],
                                         asynchronous=False)
                except KafkaException as exc:  # e.g. the server is down: the record may come again
                    self.errors.append(f"commit: {exc}")
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(exc))
        finally:
            self.consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()


@pytest.mark.skipif(not librdkafka_supports_consumer_protocol(), reason="librdkafka older than 2.6")
@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_librdkafka_consumers_join_and_leave_under_a_producer(server: ServerProcess, assignor: str) -> None:
    topic = create_topic(server)
    group = f"rdk-{assignor}-{uuid.uuid4().hex[:8]}"
    consumed: list[tuple[str, int, int]] = []
    lock = threading.Lock()
    total = 1500

    def wait_for(count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len({(p, o) for _, p, o in consumed}) < count and time.monotonic() < deadline:
            time.sleep(0.05)

    members: dict[str, RdMember] = {}
    with BackgroundProducer(server, topic, total, rate=100) as producer:
        members["a"] = RdMember(server, "a", topic, group, assignor, consumed, lock)
        wait_for(150)
        members["b"] = RdMember(server, "b", topic, group, assignor, consumed, lock)
        members["c"] = RdMember(server, "c", topic, group, assignor, consumed, lock)
        wait_for(500)
        members["a"].close()
        wait_for(800)
        members["d"] = RdMember(server, "d", topic, group, assignor, consumed, lock)
        # d's partitions come once their owners have revoked them, a heartbeat interval or two later
        # (5 s, Kafka's default): b leaves only after that, so its partitions move within a group of 2.
        deadline = time.monotonic() + 60
        while not members["d"].assigned and time.monotonic() < deadline:
            time.sleep(0.1)
        members["b"].close()
    wait_for(total)
    admin_view = describe_with_rdkafka(server, group)
    for m in members.values():
        m.close()
    errors = {n: m.errors for n, m in members.items() if m.errors}
    assert not errors, errors
    check_once_in_order(producer.placed, consumed)
    # Every member was given partitions (d may find nothing left to read once the producer is done).
    assert {n for n, m in members.items() if m.assigned} == {"a", "b", "c", "d"}
    assert {"a", "b", "c"} <= {m for m, _, _ in consumed}
    assert admin_view["type"] == "consumer" and admin_view["members"] == 2, admin_view


def describe_with_rdkafka(server: ServerProcess, group: str) -> dict[str, Any]:
    """librdkafka's Admin describe_consumer_groups (ConsumerGroupDescribe for a consumer group)."""
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    desc = admin.describe_consumer_groups([group])[group].result(30)
    return {"type": str(getattr(desc, "type", "")).rsplit(".", 1)[-1].lower(), "members": len(desc.members),
            "state": str(desc.state)}



@pytest.mark.skipif(not librdkafka_supports_consumer_protocol(), reason="librdkafka older than 2.6")
def test_librdkafka_regex_subscription(server: ServerProcess) -> None:
    prefix, placed = make_regex_topics(server)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"rx-{prefix}",
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    consumer.subscribe([f"^{prefix}-.*"])  # librdkafka sends the regex to the broker, as "(^...)"
    seen: set[tuple[str, int, int]] = set()
    deadline = time.monotonic() + 60
    try:
        while not placed <= seen and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                seen.add((msg.topic(), msg.partition(), msg.offset()))
        with KafkaWire.connect(server.bootstrap) as wire:
            described = wire.request(69, 0, group_ids=[f"rx-{prefix}"], include_authorized_operations=False)
    finally:
        consumer.close()
    assert seen == placed
    (member,) = described.groups[0].members
    assert (member.subscribed_topic_regex, member.subscribed_topic_names) == (f"(^{prefix}-.*)", [])


@pytest.mark.skipif(not librdkafka_supports_consumer_protocol(), reason="librdkafka older than 2.6")
def test_librdkafka_group_survives_a_server_sigkill(tmp_path: Any) -> None:
    """Two consumer-protocol members keep their membership across a SIGKILL and restart of the server (the
    group, its epochs and assignment come back from the table): no record is lost, and a record is seen
    twice only if it was consumed but its synchronous commit had not completed when the server died (at
    most one per partition)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = ServerProcess(str(tmp_path / "data"), "--kafka-port", str(port)).start()
    topic, group = create_topic(srv), f"crash-{uuid.uuid4().hex[:8]}"
    consumed: list[tuple[str, int, int]] = []
    lock = threading.Lock()
    members: list[RdMember] = []
    try:
        with BackgroundProducer(srv, topic, 300, rate=1000) as before:
            pass
        members = [RdMember(srv, n, topic, group, "uniform", consumed, lock) for n in ("a", "b")]
        deadline = time.monotonic() + 60
        while len(consumed) < 300 and time.monotonic() < deadline:
            time.sleep(0.05)
        with KafkaWire.connect(srv.bootstrap) as wire:
            ids = {m.member_id for m in wire.request(69, 0, group_ids=[group],
                                                      include_authorized_operations=False).groups[0].members}
        assert len(ids) == 2
        srv.kill()
        srv.start()
        with BackgroundProducer(srv, topic, 300, rate=1000) as after:
            pass
        deadline = time.monotonic() + 90
        while len({(p, o) for _, p, o in consumed}) < 600 and time.monotonic() < deadline:
            time.sleep(0.05)
        with KafkaWire.connect(srv.bootstrap) as wire:
            described = wire.request(69, 0, group_ids=[group], include_authorized_operations=False).groups[0]
        assert all(m.thread.is_alive() for m in members), {m.name: m.errors for m in members}
    finally:
        for m in members:
            m.close()
        srv.stop()
    counts = Counter((p, o) for _, p, o in consumed)
    missing = (set(before.placed) | set(after.placed)) - set(counts)
    assert not missing, sorted(missing)[:10]
    twice = Counter(p for (p, _), c in counts.items() if c > 1)
    assert all(c <= 1 for c in twice.values()), twice
    assert {m.member_id for m in described.members} == ids  # the same members carried on
