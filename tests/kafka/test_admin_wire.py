"""Topic administration over a real server at the protocol's edge versions, spoken with our own codec:
CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
and DescribeCluster, including the refusals Kafka's broker gives."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from millrace.gateway.kafka_protocol.codec import request_class
from millrace.gateway.kafka_protocol.errors import ErrorCode
from tests.kafka.test_metadata import CLUSTER_OPS, NOT_REQUESTED, ZERO, Wire, only, stream_description
from tests.server_process import ServerProcess

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 32, 33, 44, 60
CT, DT, CP = (request_class(k) for k in (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS))
DC, AC, IAC, CL = (request_class(k) for k in (DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS,
                                              DESCRIBE_CLUSTER))
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(str(tmp_path_factory.mktemp("admin-wire")), "--default-partitions", "2") as s:
        yield s


def creatable(name: str, partitions: int = 1, rf: int = -1, assignments: dict[int, list[int]] | None = None,
              **configs: str | None) -> Any:
    return CT.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf,
        assignments=[CT.CreatableReplicaAssignment(partition_index=p, broker_ids=b)
                     for p, b in (assignments or {}).items()],
        configs=[CT.CreatableTopicConfig(name=k.replace("_", "."), value=v) for k, v in configs.items()])


def create(wire: Wire, version: int, *topics: Any, validate_only: bool = False) -> dict[str, Any]:
    r = wire.send(CREATE_TOPICS, version, CT(topics=list(topics), timeout_ms=10000, validate_only=validate_only))
    return {t.name: t for t in r.topics}


def partitions_of(wire: Wire, name: str) -> int | None:
    t = only(wire.metadata(9, [name], allow_auto_topic_creation=False), name)
    return len(t.partitions) if t.error_code == 0 else None


def describe(wire: Wire, version: int, rtype: int, name: str, keys: list[str] | None = None,
             synonyms: bool = False, docs: bool = False) -> Any:
    resource = DC.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=keys or [])
    if keys is None:
        resource.configuration_keys = None  # null = every key (the constructor would make it [])
    r = wire.send(DESCRIBE_CONFIGS, version, DC(resources=[resource], include_synonyms=synonyms,
                                                  include_documentation=docs))
    return r.results[0]


def configs_of(result: Any) -> dict[str, Any]:
    return {c.name: c for c in result.configs}


# ---------------------------------------------------------------------------------------- CreateTopics

def test_create_topics_v0_and_v7(wire):
    r = create(wire, 0, creatable("cw-v0", 3))
    assert r["cw-v0"].error_code == 0
    assert partitions_of(wire, "cw-v0") == 3

    r = create(wire, 7, creatable("cw-v7", -1, retention_ms="60000"))["cw-v7"]  # -1 = --default-partitions
    assert (r.error_code, r.error_message, r.num_partitions, r.replication_factor) == (0, None, 2, 1)
    assert r.topic_id != ZERO
    assert only(wire.metadata(12, ["cw-v7"]), "cw-v7").topic_id == r.topic_id
    configs = {c.name: c for c in r.configs}
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("60000", TOPIC_CONFIG)
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].config_source) == ("delete", DEFAULT_CONFIG)
    assert configs["millrace.segments.initial"].read_only and not configs["retention.ms"].read_only


def test_create_topics_refusals(wire):
    create(wire, 5, creatable("cw-exists"))
    r = create(wire, 5, creatable("cw-exists"), creatable("bad name"), creatable("cw-zero", 0),
               creatable("cw-rf3", 1, rf=3), creatable("cw-rf0", 1, rf=0), creatable("cw-cfg", 1, **{"no.such": "1"}),
               creatable("cw-policy", 1, cleanup_policy="shred"), creatable("cw-null", 1, retention_ms=None),
               creatable("cw-both", 2, assignments={0: [0]}), creatable("cw-rf-assign", -1, 1, assignments={0: [0]}),
               creatable("cw-node", -1, assignments={0: [1]}),
               creatable("cw-gap", -1, assignments={0: [0], 2: [0]}), creatable("cw-twice", -1, assignments={0: [0, 0]}),
               creatable("cw-seg", 4, millrace_segments_initial="3"))
    expected = {
        "cw-exists": ErrorCode.TOPIC_ALREADY_EXISTS, "bad name": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "cw-zero": ErrorCode.INVALID_PARTITIONS, "cw-rf3": ErrorCode.INVALID_REPLICATION_FACTOR,
        "cw-rf0": ErrorCode.INVALID_REPLICATION_FACTOR, "cw-cfg": ErrorCode.INVALID_CONFIG,
        "cw-policy": ErrorCode.INVALID_CONFIG, "cw-null": ErrorCode.INVALID_CONFIG,
        "cw-both": ErrorCode.INVALID_REQUEST, "cw-rf-assign": ErrorCode.INVALID_REPLICATION_FACTOR,
        "cw-node": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "cw-gap": ErrorCode.INVALID_REPLICA_ASSIGNMENT, "cw-twice": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "cw-seg": ErrorCode.INVALID_CONFIG,
    }
    assert {name: t.error_code for name, t in r.items()} == expected
    assert all(t.error_message for t in r.values())
    for name in expected:
        if name not in ("cw-exists", "bad name"):
            assert partitions_of(wire, name) is None, name


def test_create_topics_duplicates_and_manual_assignment(wire):
    r = wire.send(CREATE_TOPICS, 4, CT(topics=[creatable("cw-dup"), creatable("cw-dup", 2), creatable("cw-ok")],
                                       timeout_ms=10000))
    assert [(t.name, t.error_code) for t in r.topics] == [("cw-dup", ErrorCode.INVALID_REQUEST), ("cw-ok", 0)]
    assert partitions_of(wire, "cw-dup") is None

    r = create(wire, 7, creatable("cw-manual", -1, assignments={0: [0], 1: [0], 2: [0]}))["cw-manual"]
    assert (r.error_code, r.num_partitions) == (0, 3)
    assert partitions_of(wire, "cw-manual") == 3


def test_create_topics_validate_only(wire):
    r = create(wire, 7, creatable("cw-dry", 4, retention_bytes="1000"), validate_only=True)["cw-dry"]
    assert (r.error_code, r.num_partitions) == (0, 4)
    assert partitions_of(wire, "cw-dry") is None
    r = create(wire, 1, creatable("cw-dry", 1, rf=2), validate_only=True)["cw-dry"]
    assert r.error_code == ErrorCode.INVALID_REPLICATION_FACTOR


# ---------------------------------------------------------------------------------------- DeleteTopics

def test_delete_topics_by_name_v0_and_by_id_v6(wire, server):
    create(wire, 7, creatable("dw-name"))
    r = wire.send(DELETE_TOPICS, 0, DT(topic_names=["dw-name", "dw-missing"], timeout_ms=10000))
    assert [(t.name, t.error_code) for t in r.responses] == [
        ("dw-name", 0), ("dw-missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert partitions_of(wire, "dw-name") is None
    assert stream_description(server.native_port, "kafka/dw-name") is None  # the stream went with it

    topic_id = create(wire, 7, creatable("dw-id", 2))["dw-id"].topic_id
    unknown = uuid.uuid4()
    r = wire.send(DELETE_TOPICS, 6, DT(topics=[DT.DeleteTopicState(name=None, topic_id=topic_id),
                                               DT.DeleteTopicState(name=None, topic_id=unknown)], timeout_ms=10000))
    assert [(t.name, t.topic_id, t.error_code) for t in r.responses] == [
        ("dw-id", topic_id, 0), (None, unknown, ErrorCode.UNKNOWN_TOPIC_ID)]
    assert partitions_of(wire, "dw-id") is None

    create(wire, 7, creatable("dw-both"))
    r = wire.send(DELETE_TOPICS, 6, DT(topics=[DT.DeleteTopicState(name="dw-both", topic_id=uuid.uuid4()),
                                               DT.DeleteTopicState(name=None, topic_id=ZERO)], timeout_ms=10000))
    assert [t.error_code for t in r.responses] == [ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    assert partitions_of(wire, "dw-both") == 1


def test_recreate_after_delete_is_a_new_topic(wire):
    first = create(wire, 7, creatable("dw-again", 3))["dw-again"].topic_id
    assert wire.send(DELETE_TOPICS, 4, DT(topic_names=["dw-again"], timeout_ms=10000)).responses[0].error_code == 0
    second = create(wire, 7, creatable("dw-again", 1))["dw-again"]
    assert second.error_code == 0 and second.topic_id != first
    assert partitions_of(wire, "dw-again") == 1


# ---------------------------------------------------------------------------------------- CreatePartitions

def grow(wire: Wire, version: int, name: str, count: int, assignments: list[list[int]] | None = None,
         validate_only: bool = False) -> Any:
    topic = CP.CreatePartitionsTopic(name=name, count=count,
                                     assignments=[CP.CreatePartitionsAssignment(broker_ids=b) for b in assignments or []])
    if assignments is None:
        topic.assignments = None
    r = wire.send(CREATE_PARTITIONS, version, CP(topics=[topic], timeout_ms=10000, validate_only=validate_only))
    return r.results[0]


def test_create_partitions(wire):
    create(wire, 7, creatable("pw", 2))
    assert grow(wire, 0, "pw", 3).error_code == 0
    assert partitions_of(wire, "pw") == 3
    assert grow(wire, 3, "pw", 5, assignments=[[0], [0]]).error_code == 0
    assert partitions_of(wire, "pw") == 5
    dry = grow(wire, 3, "pw", 8, validate_only=True)
    assert dry.error_code == 0 and partitions_of(wire, "pw") == 5
    for count, assignments, error in [
        (5, None, ErrorCode.INVALID_PARTITIONS), (4, None, ErrorCode.INVALID_PARTITIONS),
        (7, [[0]], ErrorCode.INVALID_REPLICA_ASSIGNMENT), (6, [[1]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (6, [[]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ]:
        result = grow(wire, 2, "pw", count, assignments)
        assert result.error_code == error and result.error_message, (count, assignments)
    assert grow(wire, 1, "pw-missing", 3).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert partitions_of(wire, "pw") == 5


# ---------------------------------------------------------------------------------------- configs

def test_describe_topic_configs_v0_and_v4(wire):
    create(wire, 7, creatable("cfg-d", 1, retention_ms="5000"))
    v0 = configs_of(describe(wire, 0, TOPIC, "cfg-d"))
    assert (v0["retention.ms"].value, v0["retention.ms"].is_default) == ("5000", False)
    assert (v0["retention.bytes"].value, v0["retention.bytes"].is_default) == ("-1", True)

    r = describe(wire, 4, TOPIC, "cfg-d", synonyms=True, docs=True)
    assert (r.error_code, r.error_message) == (0, None)
    c = configs_of(r)
    assert set(c) >= {"cleanup.policy", "retention.ms", "retention.bytes", "max.message.bytes"}
    ms = c["retention.ms"]
    assert (ms.config_source, ms.read_only, ms.is_sensitive, ms.config_type) == (TOPIC_CONFIG, False, False, 5)
    assert [(s.name, s.value, s.source) for s in ms.synonyms] == [
        ("retention.ms", "5000", TOPIC_CONFIG), ("log.retention.ms", "-1", DEFAULT_CONFIG)]
    assert ms.documentation
    assert c["cleanup.policy"].config_type == 7  # LIST

    plain = configs_of(describe(wire, 4, TOPIC, "cfg-d"))
    assert plain["retention.ms"].synonyms == [] and plain["retention.ms"].documentation is None

    only_two = describe(wire, 2, TOPIC, "cfg-d", keys=["retention.ms", "cleanup.policy", "no.such"])
    assert sorted(configs_of(only_two)) == ["cleanup.policy", "retention.ms"]
    assert configs_of(describe(wire, 2, TOPIC, "cfg-d", keys=[])).keys() == c.keys()  # empty = all

    assert describe(wire, 1, TOPIC, "cfg-missing").error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert describe(wire, 1, TOPIC, "bad name").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert describe(wire, 1, 32, "some-group").error_code == ErrorCode.INVALID_REQUEST


def test_describe_broker_configs(wire):
    r = describe(wire, 4, BROKER, "0", synonyms=True)
    assert r.error_code == 0
    c = configs_of(r)
    assert (c["num.partitions"].value, c["num.partitions"].config_source) == ("2", STATIC_BROKER_CONFIG)
    assert (c["auto.create.topics.enable"].value, c["auto.create.topics.enable"].config_source) == (
        "true", DEFAULT_CONFIG)
    for key in ("log.retention.ms", "default.replication.factor", "message.max.bytes"):
        assert key in c and c[key].read_only, key
    assert c["default.replication.factor"].value == "1"
    assert describe(wire, 4, BROKER, "").configs == []  # no cluster-wide dynamic defaults
    assert describe(wire, 4, BROKER, "7").error_code == ErrorCode.INVALID_REQUEST


def alter(wire: Wire, version: int, rtype: int, name: str, configs: dict[str, str | None],
          validate_only: bool = False) -> Any:
    r = wire.send(ALTER_CONFIGS, version, AC(resources=[AC.AlterConfigsResource(
        resource_type=rtype, resource_name=name,
        configs=[AC.AlterableConfig(name=k, value=v) for k, v in configs.items()])], validate_only=validate_only))
    return r.responses[0]


def incremental(wire: Wire, version: int, rtype: int, name: str, ops: list[tuple[str, int, str | None]],
                validate_only: bool = False) -> Any:
    r = wire.send(INCREMENTAL_ALTER_CONFIGS, version, IAC(resources=[IAC.AlterConfigsResource(
        resource_type=rtype, resource_name=name,
        configs=[IAC.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])],
        validate_only=validate_only))
    return r.responses[0]


def explicit(wire: Wire, name: str) -> dict[str, str]:
    return {k: c.value for k, c in configs_of(describe(wire, 4, TOPIC, name)).items()
            if c.config_source == TOPIC_CONFIG}


def test_alter_configs_replaces_the_whole_set(wire, server):
    create(wire, 7, creatable("cfg-a", 1, retention_ms="5000", max_message_bytes="1000000"))
    r = alter(wire, 0, TOPIC, "cfg-a", {"retention.bytes": "123456"})
    assert (r.error_code, r.resource_type, r.resource_name) == (0, TOPIC, "cfg-a")
    assert explicit(wire, "cfg-a") == {"retention.bytes": "123456"}  # the others reverted to defaults
    desc = stream_description(server.native_port, "kafka/cfg-a")
    assert desc["config"]["retention"] == {"type": "size", "value": 123456}

    assert alter(wire, 2, TOPIC, "cfg-a", {"retention.ms": "1"}, validate_only=True).error_code == 0
    assert explicit(wire, "cfg-a") == {"retention.bytes": "123456"}

    assert alter(wire, 2, TOPIC, "cfg-a", {"no.such": "1"}).error_code == ErrorCode.INVALID_CONFIG
    assert alter(wire, 2, TOPIC, "cfg-a", {"retention.ms": "soon"}).error_code == ErrorCode.INVALID_CONFIG
    assert alter(wire, 2, TOPIC, "cfg-a", {"retention.ms": None}).error_code == ErrorCode.INVALID_REQUEST
    assert alter(wire, 2, TOPIC, "cfg-a", {"millrace.segments.initial": "1"}).error_code == ErrorCode.INVALID_CONFIG
    assert alter(wire, 2, TOPIC, "cfg-missing", {"retention.ms": "1"}).error_code == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert explicit(wire, "cfg-a") == {"retention.bytes": "123456"}

    broker = alter(wire, 1, BROKER, "0", {"num.partitions": "5"})
    assert broker.error_code == ErrorCode.INVALID_REQUEST and "num.partitions" in broker.error_message


def test_incremental_alter_configs(wire, server):
    create(wire, 7, creatable("cfg-i", 1, retention_bytes="1000"))
    r = incremental(wire, 0, TOPIC, "cfg-i", [("retention.ms", SET, "86400000")])
    assert r.error_code == 0
    assert explicit(wire, "cfg-i") == {"retention.bytes": "1000", "retention.ms": "86400000"}
    desc = stream_description(server.native_port, "kafka/cfg-i")
    assert desc["config"]["retention"] == {"type": "time", "value": 86400000}

    assert incremental(wire, 1, TOPIC, "cfg-i", [("retention.ms", DELETE, None)]).error_code == 0
    assert explicit(wire, "cfg-i") == {"retention.bytes": "1000"}
    assert stream_description(server.native_port, "kafka/cfg-i")["config"]["retention"] == {
        "type": "size", "value": 1000}

    # Lists: appending what is there is a no-op; an unknown policy is refused; non-lists refuse.
    assert incremental(wire, 1, TOPIC, "cfg-i", [("cleanup.policy", APPEND, "delete")]).error_code == 0
    assert explicit(wire, "cfg-i")["cleanup.policy"] == "delete"
    assert incremental(wire, 1, TOPIC, "cfg-i", [("cleanup.policy", APPEND, "shred")]).error_code == (
        ErrorCode.INVALID_CONFIG)
    assert incremental(wire, 1, TOPIC, "cfg-i", [("cleanup.policy", APPEND, "compact")]).error_code == 0
    assert explicit(wire, "cfg-i")["cleanup.policy"] == "delete,compact"
    assert incremental(wire, 1, TOPIC, "cfg-i", [("cleanup.policy", SUBTRACT, "compact")]).error_code == 0
    assert explicit(wire, "cfg-i")["cleanup.policy"] == "delete"
    # An empty cleanup.policy is valid in Kafka 4.0 and keeps everything: no stream retention.
    assert incremental(wire, 1, TOPIC, "cfg-i", [("cleanup.policy", SUBTRACT, "delete")]).error_code == 0
    assert explicit(wire, "cfg-i")["cleanup.policy"] == ""
    assert stream_description(server.native_port, "kafka/cfg-i")["config"]["retention"]["type"] == "none"
    assert incremental(wire, 1, TOPIC, "cfg-i", [("cleanup.policy", APPEND, "delete")]).error_code == 0
    assert incremental(wire, 1, TOPIC, "cfg-i", [("retention.ms", APPEND, "5")]).error_code == ErrorCode.INVALID_CONFIG
    assert incremental(wire, 1, TOPIC, "cfg-i", [("retention.ms", 9, "5")]).error_code == ErrorCode.INVALID_REQUEST
    assert incremental(wire, 1, TOPIC, "cfg-i", [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)]
                       ).error_code == ErrorCode.INVALID_REQUEST
    assert incremental(wire, 1, TOPIC, "cfg-i", [("retention.ms", SET, "7")], validate_only=True).error_code == 0
    assert explicit(wire, "cfg-i") == {"retention.bytes": "1000", "cleanup.policy": "delete"}

    broker = incremental(wire, 1, BROKER, "0", [("log.retention.ms", SET, "1000")])
    assert broker.error_code == ErrorCode.INVALID_REQUEST
    assert incremental(wire, 1, BROKER, "0", []).error_code == 0  # nothing to change


def test_configs_survive_a_restart(tmp_path):
    data_dir = str(tmp_path / "data")
    with ServerProcess(data_dir) as server:
        wire = Wire(server.kafka_port)
        create(wire, 7, creatable("cfg-durable", 2, retention_ms="5000"))
        assert incremental(wire, 1, TOPIC, "cfg-durable", [("max.message.bytes", SET, "2000000")]).error_code == 0
        wire.close()
        server.kill()
    with ServerProcess(data_dir) as server:
        wire = Wire(server.kafka_port)
        assert explicit(wire, "cfg-durable") == {"retention.ms": "5000", "max.message.bytes": "2000000"}
        wire.close()


# ---------------------------------------------------------------------------------------- DescribeCluster

def test_describe_cluster(wire, server):
    r0 = wire.send(DESCRIBE_CLUSTER, 0, CL(include_cluster_authorized_operations=False))
    assert (r0.error_code, r0.controller_id, r0.cluster_authorized_operations) == (0, 0, NOT_REQUESTED)
    assert [(b.broker_id, b.host, b.port, b.rack) for b in r0.brokers] == [(0, "127.0.0.1", server.kafka_port, None)]
    assert r0.cluster_id == wire.metadata(2, []).cluster_id

    r1 = wire.send(DESCRIBE_CLUSTER, 1, CL(include_cluster_authorized_operations=True, endpoint_type=1))
    assert (r1.error_code, r1.endpoint_type, r1.cluster_authorized_operations) == (0, 1, CLUSTER_OPS)
    r2 = wire.send(DESCRIBE_CLUSTER, 1, CL(include_cluster_authorized_operations=False, endpoint_type=2))
    assert (r2.error_code, r2.brokers, r2.cluster_id) == (ErrorCode.MISMATCHED_ENDPOINT_TYPE, [], "")
    r3 = wire.send(DESCRIBE_CLUSTER, 1, CL(include_cluster_authorized_operations=False, endpoint_type=7))
    assert (r3.error_code, r3.error_message) == (ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, "Unsupported endpoint type 7")
