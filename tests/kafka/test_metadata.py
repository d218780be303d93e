"""Metadata over a real server, spoken with our own codec so every version (0..12) is exercised:
brokers, partitions led by this node, all-topics forms, lookups by topic id, authorized operations,
auto-creation (on, refused by the request, off on the server), invalid names, a restart, and the
internal topics with what clients can do with them."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from millrace.gateway.kafka_protocol.codec import request_class
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.protocol.records import NewRecord, build_record_batch
from tests.kafka.wire import KafkaWire, local
from tests.server_process import ServerProcess

METADATA, CREATE_TOPICS = 3, 19
M = request_class(METADATA)
CT = request_class(CREATE_TOPICS)
ZERO = uuid.UUID(int=0)
TOPIC_OPS = 3576  # READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
CLUSTER_OPS = 8096  # CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS IDEMPOTENT_WRITE
NOT_REQUESTED = -(2**31)


def Wire(port: int) -> KafkaWire:  # noqa: N802 - reads as the connection it makes
    return local(port, client_id="admin-test")


def only(response: Any, name: str) -> Any:
    found = [t for t in response.topics if t.name == name]
    assert len(found) == 1, response
    return found[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(str(tmp_path_factory.mktemp("metadata")), "--default-partitions", "3") as s:
        yield s


def test_every_version_describes_the_node_and_its_topics(server, wire):
    created = wire.create("md-all-versions", 4)
    for version in range(13):
        r = wire.metadata(version, ["md-all-versions"])
        assert [(b.node_id, b.host, b.port) for b in r.brokers] == [(0, "127.0.0.1", server.kafka_port)]
        if version >= 1:
            assert r.controller_id == 0
        if version >= 2:
            assert r.cluster_id
        t = only(r, "md-all-versions")
        assert t.error_code == 0 and not t.is_internal
        if version >= 10:
            assert t.topic_id == created.topic_id
        assert [p.partition_index for p in t.partitions] == [0, 1, 2, 3]
        for p in t.partitions:
            assert (p.error_code, p.leader_id, p.replica_nodes, p.isr_nodes) == (0, 0, [0], [0])
            if version >= 7:
                assert p.leader_epoch == 0
        if version >= 8:
            assert t.topic_authorized_operations == NOT_REQUESTED


def test_all_topics_forms(wire):
    wire.create("md-forms-a")
    wire.create("md-forms-b")
    names = {t.name for t in wire.metadata(1, None).topics}  # null list: every topic
    assert {"md-forms-a", "md-forms-b"} <= names
    assert {"md-forms-a", "md-forms-b"} <= {t.name for t in wire.metadata(0, []).topics}  # v0: empty = all
    assert wire.metadata(1, []).topics == []  # v1+: empty = none, just the brokers
    assert wire.metadata(12, []).topics == []
    # A name asked twice is answered once.
    assert [t.name for t in wire.metadata(9, ["md-forms-a", "md-forms-a"]).topics] == ["md-forms-a"]


def test_lookup_by_topic_id(wire):
    created = wire.create("md-by-id", 2)
    r = wire.send(METADATA, 12, M(topics=[M.MetadataRequestTopic(topic_id=created.topic_id, name=None)]))
    t = r.topics[0]
    assert (t.error_code, t.name, t.topic_id, len(t.partitions)) == (0, "md-by-id", created.topic_id, 2)
    unknown = uuid.uuid4()
    r = wire.send(METADATA, 12, M(topics=[M.MetadataRequestTopic(topic_id=unknown, name=None)]))
    assert (r.topics[0].error_code, r.topics[0].name, r.topics[0].topic_id) == (
        ErrorCode.UNKNOWN_TOPIC_ID, None, unknown)
    # Ids in requests begin at v12: before it Kafka refuses the request, every topic INVALID_REQUEST.
    r = wire.send(METADATA, 11, M(topics=[M.MetadataRequestTopic(topic_id=created.topic_id, name="md-by-id"),
                                          M.MetadataRequestTopic(name="md-other")]))
    assert [(t.name, t.error_code) for t in r.topics] == [
        ("md-by-id", ErrorCode.INVALID_REQUEST), ("md-other", ErrorCode.INVALID_REQUEST)]
    assert "md-other" not in {t.name for t in wire.metadata(1, None).topics}  # and created nothing


def test_authorized_operations_when_asked(wire):
    wire.create("md-ops")
    r = wire.metadata(8, ["md-ops"], include_topic_authorized_operations=True,
                      include_cluster_authorized_operations=True)
    assert only(r, "md-ops").topic_authorized_operations == TOPIC_OPS
    assert r.cluster_authorized_operations == CLUSTER_OPS
    r = wire.metadata(12, ["md-ops"], include_topic_authorized_operations=True)
    assert only(r, "md-ops").topic_authorized_operations == TOPIC_OPS


INTERNAL = ["__consumer_offsets", "__transaction_state"]


def test_internal_topics_are_listed_and_described_as_kafka_lists_them(wire):
    """Kafka lists __consumer_offsets and __transaction_state, flagged internal, among every topic and when
    named (consumers with exclude.internal.topics drop them themselves): one partition each here, led by
    the node FindCoordinator names for groups and transactional ids (this one)."""
    for version in (1, 9, 12):
        every = {t.name: t for t in wire.metadata(version, None).topics}
        named = wire.metadata(version, INTERNAL).topics
        assert [t.name for t in named] == INTERNAL
        for t in named:
            assert t.error_code == 0 and t.is_internal and every[t.name].is_internal
            assert [(p.partition_index, p.error_code, p.leader_id, p.replica_nodes) for p in t.partitions] == [
                (0, 0, 0, [0])]
        assert not any(t.is_internal for name, t in every.items() if name not in INTERNAL)
    ids = {t.name: t.topic_id for t in wire.metadata(12, INTERNAL).topics}
    assert ZERO not in ids.values()
    by_id = wire.send(METADATA, 12, M(topics=[M.MetadataRequestTopic(topic_id=ids["__consumer_offsets"], name=None)]))
    assert (by_id.topics[0].name, by_id.topics[0].is_internal) == ("__consumer_offsets", True)
    for key_type in (0, 1):  # the coordinator of every group and transactional id leads partition 0
        found = wire.request(10, 3, key="any", key_type=key_type)
        assert (found.error_code, found.node_id) == (0, 0)
    described = wire.request(75, 0, topics=[request_class(75).TopicRequest(name=n) for n in INTERNAL],
                             response_partition_limit=10, cursor=None)
    assert [(t.name, t.error_code, t.is_internal, t.topic_id, [p.leader_id for p in t.partitions])
            for t in described.topics] == [(n, 0, True, ids[n], [0]) for n in INTERNAL]
    # Asking for them created nothing: CreateTopics finds them existing.
    created = wire.send(CREATE_TOPICS, 7, CT(topics=[CT.CreatableTopic(
        name="__consumer_offsets", num_partitions=1, replication_factor=-1)], timeout_ms=10000))
    assert created.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_internal_topics_read_as_empty_logs_and_refuse_appends(wire):
    for name in INTERNAL:
        assert (wire.list_offset(name, 0, -2).offset, wire.list_offset(name, 0, -1).offset) == (0, 0)
        by_time = wire.list_offset(name, 0, 0)
        assert (by_time.error_code, by_time.offset, by_time.timestamp) == (0, -1, -1)
        assert wire.list_offset(name, 1, -1).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        started = time.monotonic()
        data = wire.fetch(name, 0, 0, max_wait_ms=300)
        assert (data.error_code, data.high_watermark, data.log_start_offset, bytes(data.records or b"")) == (
            0, 0, 0, b"")
        assert time.monotonic() - started >= 0.25  # a long poll, as on any empty partition
        assert wire.fetch(name, 0, 5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        produced = wire.produce(name, 0, build_record_batch([NewRecord(key=b"k", value=b"v")]))
        assert produced.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_auto_creation_answers_leader_not_available_then_the_topic(wire):
    # As Kafka's broker: the round that creates the topic says LEADER_NOT_AVAILABLE, the next has it.
    t = only(wire.metadata(1, ["md-auto-v1"]), "md-auto-v1")  # v<4 cannot refuse auto-creation
    assert (t.error_code, t.partitions) == (ErrorCode.LEADER_NOT_AVAILABLE, [])
    t = only(wire.metadata(1, ["md-auto-v1"]), "md-auto-v1")
    assert t.error_code == 0 and len(t.partitions) == 3  # --default-partitions 3

    t = only(wire.metadata(12, ["md-auto-v12"], allow_auto_topic_creation=True), "md-auto-v12")
    assert t.error_code == ErrorCode.LEADER_NOT_AVAILABLE
    t = only(wire.metadata(12, ["md-auto-v12"]), "md-auto-v12")
    assert t.error_code == 0 and t.topic_id != ZERO and len(t.partitions) == 3


def test_request_refusing_auto_creation(wire):
    for version in (4, 9, 12):
        name = f"md-no-auto-{version}"
        t = only(wire.metadata(version, [name], allow_auto_topic_creation=False), name)
        assert (t.error_code, t.partitions) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
        if version >= 10:
            assert t.topic_id == ZERO
    assert "md-no-auto-4" not in {t.name for t in wire.metadata(1, None).topics}


def test_invalid_names(wire):
    for bad in ("bad name", "x" * 250, "..", "tópico", "a/b"):
        t = only(wire.metadata(9, [bad]), bad)
        assert t.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, bad
    assert not {"bad name", "tópico"} & {t.name for t in wire.metadata(1, None).topics}


def test_several_topics_in_one_request(wire):
    wire.create("md-mixed-known", 2)
    r = wire.metadata(9, ["md-mixed-known", "md-mixed-new", "bad name"])
    assert only(r, "md-mixed-known").error_code == 0
    assert only(r, "md-mixed-new").error_code == ErrorCode.LEADER_NOT_AVAILABLE
    assert only(r, "bad name").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_concurrent_auto_creation_of_one_topic(server):
    # Several connections asking at once: one creates, all answer LEADER_NOT_AVAILABLE, none fails.
    wires = [Wire(server.kafka_port) for _ in range(4)]
    try:
        for w in wires:
            w.submit(METADATA, 9, M(topics=[M.MetadataRequestTopic(name="md-race")]))
        for w in wires:
            t = w.receive().topics[0]
            assert t.error_code in (ErrorCode.LEADER_NOT_AVAILABLE, 0), t
        assert len(only(wires[0].metadata(9, ["md-race"]), "md-race").partitions) == 3
    finally:
        for w in wires:
            w.close()


def test_producers_auto_create_topics(server, wire):
    # Unmodified producers retry through the LEADER_NOT_AVAILABLE round and land in the new topic.
    from confluent_kafka import Producer
    from kafka import KafkaProducer

    delivered: list = []
    producer = Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 30000})
    producer.produce("md-auto-ck", b"value", key=b"key", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0 and delivered == [None]
    kp = KafkaProducer(bootstrap_servers=server.bootstrap)
    try:
        assert kp.send("md-auto-kp", b"value").get(30).offset == 0
    finally:
        kp.close()
    for name in ("md-auto-ck", "md-auto-kp"):
        assert len(only(wire.metadata(12, [name]), name).partitions) == 3


def test_auto_creation_off_on_the_server(tmp_path):
    with ServerProcess(str(tmp_path / "data"), "--no-auto-create-topics") as server:
        wire = Wire(server.kafka_port)
        for version in (0, 3, 4, 12):
            t = only(wire.metadata(version, ["md-off"]), "md-off")
            assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, version
        t = only(wire.metadata(12, ["bad name"]), "bad name")
        assert t.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert [t.name for t in wire.metadata(1, None).topics if not t.is_internal] == []  # no topic made
        from confluent_kafka import KafkaError, Producer

        delivered: list = []
        producer = Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 2000})
        producer.produce("md-off-produce", b"value", on_delivery=lambda err, msg: delivered.append(err))
        producer.flush(30)
        assert [e.code() for e in delivered] in ([KafkaError.UNKNOWN_TOPIC_OR_PART], [KafkaError._MSG_TIMED_OUT])
        assert "md-off-produce" not in {t.name for t in wire.metadata(1, None).topics}
        wire.create("md-explicit", 2)  # explicit creation still works
        assert len(only(wire.metadata(12, ["md-explicit"]), "md-explicit").partitions) == 2
        wire.close()


def test_topics_survive_a_restart(tmp_path):
    data_dir = str(tmp_path / "data")
    with ServerProcess(data_dir) as server:
        wire = Wire(server.kafka_port)
        created = wire.create("md-durable", 5, retention_ms="3600000")
        wire.close()
        assert server.stop() == 0
    with ServerProcess(data_dir) as server:
        wire = Wire(server.kafka_port)
        t = only(wire.metadata(12, ["md-durable"], allow_auto_topic_creation=False), "md-durable")
        assert (t.error_code, t.topic_id, len(t.partitions)) == (0, created.topic_id, 5)
        wire.close()
        server.kill()  # a crash keeps them too: the records were durable when acknowledged
    with ServerProcess(data_dir) as server:
        wire = Wire(server.kafka_port)
        t = only(wire.metadata(12, ["md-durable"], allow_auto_topic_creation=False), "md-durable")
        assert (t.error_code, t.topic_id, len(t.partitions)) == (0, created.topic_id, 5)
        desc = stream_description(server.native_port, "kafka/md-durable")
        assert desc["config"]["retention"]["type"] == "time"
        wire.close()


def stream_description(native_port: int, name: str) -> dict | None:
    """``millrace streams describe NAME --json``; None if the stream does not exist."""
    import json

    out = subprocess.run([sys.executable, "-m", "millrace", "streams", "describe", name, "--json",
                          "--server", f"127.0.0.1:{native_port}"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return None
    return json.loads(out.stdout)


def wait_for(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_a_described_topic_that_grows_or_is_made_again_is_described_anew(server, wire):
    """A topic's entry is built once per topic record: growing the topic, or deleting it and creating it
    again under its name, must show in the next answer, never the entry built before."""
    first = wire.create("md-changes", 2)
    assert len(only(wire.metadata(12, ["md-changes"]), "md-changes").partitions) == 2
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_partitions([NewPartitions("md-changes", 5)])["md-changes"].result(30)
    assert len(only(wire.metadata(12, ["md-changes"]), "md-changes").partitions) == 5
    admin.delete_topics(["md-changes"])["md-changes"].result(30)
    again = wire.create("md-changes", 1)
    t = only(wire.metadata(12, ["md-changes"]), "md-changes")
    assert (t.topic_id, len(t.partitions)) == (again.topic_id, 1) and again.topic_id != first.topic_id
