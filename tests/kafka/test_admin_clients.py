"""Topic administration through unmodified Kafka admin clients (kafka-python's KafkaAdminClient and
confluent-kafka's AdminClient over librdkafka) against a real server: each negotiates its own versions
from ApiVersions, so these exercise what the clients really send."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka import errors as kerrors
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import KafkaAdminClient

from tests.kafka.test_metadata import stream_description, wait_for
from tests.server_process import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(str(tmp_path_factory.mktemp("admin-clients")), "--default-partitions", "2") as s:
        yield s


@pytest.fixture(scope="module")
def kadmin(server):
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    yield client
    client.close()


@pytest.fixture(scope="module")
def cadmin(server):
    return AdminClient({"bootstrap.servers": server.bootstrap})


def kafka_error(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(30)
    return info.value.args[0]


# ---------------------------------------------------------------------------------------- kafka-python

def test_kafka_python_topic_lifecycle(kadmin, server):
    r = kadmin.create_topics({"kp-life": {"num_partitions": 3, "replication_factor": 1,
                                          "configs": {"retention.ms": "600000"}}})
    topic = r["topics"][0]
    assert (topic["error_code"], topic["num_partitions"], topic["replication_factor"]) == (0, 3, 1)
    assert topic["configs"]["retention.ms"]["value"] == "600000"
    assert "kp-life" in kadmin.list_topics()

    described = {t["name"]: t for t in kadmin.describe_topics(["kp-life"])}["kp-life"]
    assert [(p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
            for p in described["partitions"]] == [(i, 0, [0], [0]) for i in range(3)]

    with pytest.raises(kerrors.TopicAlreadyExistsError):
        kadmin.create_topics({"kp-life": {"num_partitions": 1}})
    with pytest.raises(kerrors.InvalidTopicError):
        kadmin.create_topics(["not a name"])
    with pytest.raises(kerrors.InvalidReplicationFactorError):
        kadmin.create_topics({"kp-rf": {"num_partitions": 1, "replication_factor": 3}})
    with pytest.raises(kerrors.InvalidConfigurationError):
        kadmin.create_topics({"kp-cfg": {"configs": {"no.such.config": "1"}}})
    kadmin.create_topics({"kp-dry": {"num_partitions": 2}}, validate_only=True)
    assert not {"kp-rf", "kp-cfg", "kp-dry"} & set(kadmin.list_topics())

    kadmin.create_topics(["kp-defaults"])  # num_partitions -1: the broker's --default-partitions
    assert len({t["name"]: t for t in kadmin.describe_topics(["kp-defaults"])}["kp-defaults"]["partitions"]) == 2

    kadmin.delete_topics(["kp-life"])
    assert "kp-life" not in kadmin.list_topics()
    assert stream_description(server.native_port, "kafka/kp-life") is None
    with pytest.raises(kerrors.UnknownTopicOrPartitionError):
        kadmin.delete_topics(["kp-life"])


def test_kafka_python_partitions_grow(kadmin, server):
    kadmin.create_topics({"kp-grow": {"num_partitions": 2}})
    kadmin.create_partitions({"kp-grow": 5})
    assert len({t["name"]: t for t in kadmin.describe_topics(["kp-grow"])}["kp-grow"]["partitions"]) == 5
    with pytest.raises(kerrors.InvalidPartitionsError):
        kadmin.create_partitions({"kp-grow": 4})
    # The stream keeps its two segments: new partitions split the key-space slices, no data moves.
    desc = stream_description(server.native_port, "kafka/kp-grow")
    assert desc["state"].lower() == "active" and len(desc["segments"]) == 2


def test_kafka_python_configs(kadmin):
    kadmin.create_topics({"kp-cfg-topic": {"num_partitions": 1, "configs": {"retention.bytes": "1048576"}}})
    modified = kadmin.describe_configs([KConfigResource("TOPIC", "kp-cfg-topic")])
    assert modified["topic"]["kp-cfg-topic"] == {"retention.bytes": {
        "value": "1048576", "read_only": False, "config_source": "DYNAMIC_TOPIC_CONFIG", "is_sensitive": False,
        "synonyms": [], "config_type": "LONG", "documentation": None}}
    every = kadmin.describe_configs([KConfigResource("TOPIC", "kp-cfg-topic")], config_filter="all")
    assert every["topic"]["kp-cfg-topic"]["cleanup.policy"]["value"] == "delete"

    result = kadmin.alter_configs([KConfigResource("TOPIC", "kp-cfg-topic", {"retention.ms": "3600000"})])
    assert result == {"topic": {"kp-cfg-topic": "OK"}}
    values = {k: v["value"] for k, v in kadmin.describe_configs(
        [KConfigResource("TOPIC", "kp-cfg-topic")])["topic"]["kp-cfg-topic"].items()}
    assert values == {"retention.ms": "3600000", "retention.bytes": "1048576"}

    # The legacy AlterConfigs (full replace) path: the client re-sends the other modified keys itself.
    result = kadmin.alter_configs([KConfigResource("TOPIC", "kp-cfg-topic", {"retention.ms": "7200000"})],
                                  incremental=False)
    assert result == {"topic": {"kp-cfg-topic": "OK"}}
    values = {k: v["value"] for k, v in kadmin.describe_configs(
        [KConfigResource("TOPIC", "kp-cfg-topic")])["topic"]["kp-cfg-topic"].items()}
    assert values == {"retention.ms": "7200000", "retention.bytes": "1048576"}

    broker = kadmin.describe_configs([KConfigResource("BROKER", "0")], config_filter="all")["broker"]["0"]
    assert broker["num.partitions"]["value"] == "2" and broker["num.partitions"]["read_only"]


def test_kafka_python_describe_cluster(kadmin, server):
    cluster = kadmin.describe_cluster()
    assert cluster["controller_id"] == 0 and cluster["cluster_id"]
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (0, "127.0.0.1", server.kafka_port)]


# ---------------------------------------------------------------------------------------- confluent-kafka

def test_confluent_topic_lifecycle(cadmin, server):
    futures = cadmin.create_topics([
        NewTopic("ck-life", 4, 1, config={"retention.ms": "86400000", "max.message.bytes": "2000000"}),
        NewTopic("ck-default"),  # -1 partitions and replication factor: broker defaults
    ])
    for f in futures.values():
        assert f.result(30) is None
    md = cadmin.list_topics(timeout=30)
    assert len(md.topics["ck-life"].partitions) == 4 and len(md.topics["ck-default"].partitions) == 2
    assert [(b.id, b.host, b.port) for b in md.brokers.values()] == [(0, "127.0.0.1", server.kafka_port)]
    assert md.controller_id == 0 and md.cluster_id
    p = md.topics["ck-life"].partitions[3]
    assert (p.leader, p.replicas, p.isrs) == (0, [0], [0])
    assert stream_description(server.native_port, "kafka/ck-life")["config"]["retention"] == {
        "type": "time", "value": 86400000}

    assert kafka_error(cadmin.create_topics([NewTopic("ck-life", 1)])["ck-life"]).code() == (
        KafkaError.TOPIC_ALREADY_EXISTS)
    assert kafka_error(cadmin.create_topics([NewTopic("ck-rf", 1, 2)])["ck-rf"]).code() == (
        KafkaError.INVALID_REPLICATION_FACTOR)
    assert kafka_error(cadmin.create_topics([NewTopic("ck-bad", 1, config={"cleanup.policy": "shred"})])[
        "ck-bad"]).code() == KafkaError.INVALID_CONFIG
    assert kafka_error(cadmin.create_topics([NewTopic("ck-assign", 2, replica_assignment=[[0], [1]])])[
        "ck-assign"]).code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert cadmin.create_topics([NewTopic("ck-assigned", 3, replica_assignment=[[0], [0], [0]])])[
        "ck-assigned"].result(30) is None
    assert cadmin.create_topics([NewTopic("ck-dry", 3)], validate_only=True)["ck-dry"].result(30) is None
    assert "ck-dry" not in cadmin.list_topics(timeout=30).topics
    assert len(cadmin.list_topics(timeout=30).topics["ck-assigned"].partitions) == 3

    for f in cadmin.delete_topics(["ck-life", "ck-default"], operation_timeout=30).values():
        assert f.result(30) is None
    assert not {"ck-life", "ck-default"} & set(cadmin.list_topics(timeout=30).topics)
    assert stream_description(server.native_port, "kafka/ck-life") is None
    assert kafka_error(cadmin.delete_topics(["ck-life"])["ck-life"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_partitions_grow(cadmin, server):
    cadmin.create_topics([NewTopic("ck-grow", 1)])["ck-grow"].result(30)
    assert cadmin.create_partitions([NewPartitions("ck-grow", 3)])["ck-grow"].result(30) is None
    assert wait_for(lambda: len(cadmin.list_topics("ck-grow", timeout=30).topics["ck-grow"].partitions) == 3)
    assert cadmin.create_partitions([NewPartitions("ck-grow", 4, [[0]])])["ck-grow"].result(30) is None
    assert kafka_error(cadmin.create_partitions([NewPartitions("ck-grow", 2)])["ck-grow"]).code() == (
        KafkaError.INVALID_PARTITIONS)
    assert kafka_error(cadmin.create_partitions([NewPartitions("ck-grow", 6, [[0], [5]])])["ck-grow"]).code() == (
        KafkaError.INVALID_REPLICA_ASSIGNMENT)
    assert cadmin.create_partitions([NewPartitions("ck-grow", 9)], validate_only=True)["ck-grow"].result(30) is None
    desc = cadmin.describe_topics(TopicCollection(["ck-grow"]))["ck-grow"].result(30)
    assert [p.id for p in desc.partitions] == [0, 1, 2, 3]
    assert len(stream_description(server.native_port, "kafka/ck-grow")["segments"]) == 1


def config_values(cadmin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource("topic", name)
    return cadmin.describe_configs([resource])[resource].result(30)


def test_confluent_configs(cadmin, server):
    cadmin.create_topics([NewTopic("ck-cfg", 1, config={"retention.bytes": "5000000"})])["ck-cfg"].result(30)
    entries = config_values(cadmin, "ck-cfg")
    assert entries["retention.bytes"].value == "5000000"
    assert entries["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value and entries["retention.ms"].value == "-1"

    # Legacy AlterConfigs: the given set replaces every explicit config.
    resource = ConfigResource("topic", "ck-cfg", set_config={"retention.ms": "120000"})
    assert cadmin.alter_configs([resource])[resource].result(30) is None
    entries = config_values(cadmin, "ck-cfg")
    assert entries["retention.ms"].value == "120000" and entries["retention.bytes"].value == "-1"
    assert stream_description(server.native_port, "kafka/ck-cfg")["config"]["retention"] == {
        "type": "time", "value": 120000}

    # Incremental: SET and DELETE; APPEND on a non-list is refused.
    resource = ConfigResource("topic", "ck-cfg", incremental_configs=[
        ConfigEntry("retention.bytes", "7777", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    assert cadmin.incremental_alter_configs([resource])[resource].result(30) is None
    entries = config_values(cadmin, "ck-cfg")
    assert (entries["retention.bytes"].value, entries["retention.ms"].value) == ("7777", "-1")
    assert stream_description(server.native_port, "kafka/ck-cfg")["config"]["retention"] == {
        "type": "size", "value": 7777}
    resource = ConfigResource("topic", "ck-cfg", incremental_configs=[
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND)])
    assert kafka_error(cadmin.incremental_alter_configs([resource])[resource]).code() == KafkaError.INVALID_CONFIG

    broker = ConfigResource("broker", "0")
    entries = cadmin.describe_configs([broker])[broker].result(30)
    assert entries["auto.create.topics.enable"].value == "true" and entries["auto.create.topics.enable"].is_read_only
    broker = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("log.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    assert kafka_error(cadmin.incremental_alter_configs([broker])[broker]).code() == KafkaError.INVALID_REQUEST


def test_confluent_describe_cluster_and_topics(cadmin, server):
    cluster = cadmin.describe_cluster(include_authorized_operations=True).result(30)
    assert cluster.cluster_id and cluster.controller.id == 0
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, "127.0.0.1", server.kafka_port)]
    assert {AclOperation.DESCRIBE, AclOperation.ALTER_CONFIGS} <= set(cluster.authorized_operations)

    cadmin.create_topics([NewTopic("ck-desc", 3)])["ck-desc"].result(30)
    desc = cadmin.describe_topics(TopicCollection(["ck-desc"]), include_authorized_operations=True)[
        "ck-desc"].result(30)
    assert desc.name == "ck-desc" and not desc.is_internal and desc.topic_id is not None
    assert [(p.id, p.leader.id, [r.id for r in p.replicas]) for p in desc.partitions] == [
        (i, 0, [0]) for i in range(3)]
    assert {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE} <= set(desc.authorized_operations)
    assert kafka_error(cadmin.describe_topics(TopicCollection(["ck-missing"]))["ck-missing"]).code() == (
        KafkaError.UNKNOWN_TOPIC_OR_PART)
