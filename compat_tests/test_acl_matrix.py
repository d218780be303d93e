"""The ACL matrix: every Kafka API the server serves, each asked by a principal that Kafka would let
through, one that is refused, and one that may not even DESCRIBE the resource, and answered as Kafka 4.x
answers (``KafkaApis``, ``ControllerApis``, ``AuthHelper``; the operation and resource are the ones Kafka
checks, the error the one it gives per resource, existence hidden where Kafka hides it, lists filtered
where Kafka filters them, authorized operations the principal's actual ones).

One server (SASL_PLAINTEXT, PLAIN; ``StandardAuthorizer``; ``allow.everyone.if.no.acl.found=false``;
admin a super user). Each row of ``ROWS`` names the API, the ACL Kafka requires (``operation`` on
``resource``) and any other ACLs it needs (``also``, granted in every case), how to ask, what to read
from the answer and the three expected outcomes:

- allowed: the principal holds exactly the required ACLs;
- denied: it may DESCRIBE the resource (so Kafka does not hide it) but a DENY of the operation wins
  (when the operation is DESCRIBE itself, a DENY of DESCRIBE wins over an ALLOW of ALL);
- hidden ("not described"): no ACL on the resource at all.

Every (row, case) has its own principal (``<row>_<case>``), so one row's ACLs, the cluster's included,
cannot let another row through. Resources are named after the row and case (``mx-<row>-<case>``).
The requests go over raw sockets with the server's own codec (every API, including those no Python
client exposes); ``test_real_clients_*`` drive the same checks through confluent-kafka and kafka-python.

Not in the matrix: SaslHandshake, SaslAuthenticate and ApiVersions, which Kafka serves before and
without authorization (the hostile-client tests cover them)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compat_tests.raw_kafka import KafkaSocket
from millrace.gateway.kafka.registry import load_handlers
from millrace.gateway.kafka_protocol import codec
from millrace.gateway.kafka_protocol.errors import ErrorCode as E
from tests.server_process import ServerProcess, config_args

pytestmark = pytest.mark.timeout(240)

ADMIN, ALICE, BOB = "admin", "alice", "bob"
ALLOWED, DENIED, HIDDEN = "allowed", "denied", "hidden"
CASES = (ALLOWED, DENIED, HIDDEN)
UNAUTHORIZED_APIS = {"SaslHandshake", "SaslAuthenticate", "ApiVersions"}  # served before authentication
CLUSTER = "kafka-cluster"
ZERO_UUID = uuid.UUID(int=0)
OMITTED = -(2**31)  # authorized operations not asked for (Kafka's Integer.MIN_VALUE)
AUTHORIZATION_FAILURES = {E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED,
                          E.CLUSTER_AUTHORIZATION_FAILED, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
# AclOperation codes, for authorized-operation bit fields
OPERATION_CODES = {"READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8,
                   "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12}
RESOURCE_CODES = {"TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
ALLOW, DENY = 3, 2


def ops(*names: str) -> int:
    """The authorized-operations bit field of these operations."""
    return sum(1 << OPERATION_CODES[n] for n in names)


class Passed:
    """An expected outcome: any answer but an authorization failure (the request got past the ACLs and
    failed, if at all, for what it asked: an unknown member, a made-up producer id...)."""

    def __eq__(self, other: object) -> bool:
        codes = other if isinstance(other, tuple) else (other,)
        return not any(c in AUTHORIZATION_FAILURES for c in codes if isinstance(c, int))

    def __repr__(self) -> str:
        return "PASSED"


PASSED = Passed()


@dataclass(frozen=True)
class Names:
    """The resources one (row, case) asks about."""

    row: str
    case: str

    @property
    def topic(self) -> str:
        return f"mx-{self.row}-{self.case}"

    @property
    def group(self) -> str:
        return f"mg-{self.row}-{self.case}"

    @property
    def txn(self) -> str:
        return f"mt-{self.row}-{self.case}"

    @property
    def principal(self) -> str:
        return f"{self.row}_{self.case}"

    def resource(self, resource_type: str) -> str:
        return {"TOPIC": self.topic, "GROUP": self.group, "TRANSACTIONAL_ID": self.txn, "CLUSTER": CLUSTER}[
            resource_type]


def R(api: str) -> Any:
    """The generated request class of ``api``."""
    return codec.request_class(API_KEYS[api])


def nulled(request: Any, *fields: str) -> Any:
    """``request`` with ``fields`` null (the generated constructors make a None list empty, and a null
    list often means "all": every topic, every user...)."""
    for name in fields:
        setattr(request, name, None)
    return request


API_KEYS = {h.name: h.api_key for h in load_handlers().values()}


def _records() -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, timestamp=int(time.time() * 1000), key=None, value=b"matrix", headers=[])
    return bytes(builder.build())


# Request builders: (request, version) for one (row, case).

def produce(n: Names, transactional: bool = False) -> tuple[Any, int]:
    rq = R("Produce")
    return rq(transactional_id=n.txn if transactional else None, acks=1, timeout_ms=10000, topic_data=[
        rq.TopicProduceData(name=n.topic, partition_data=[rq.PartitionProduceData(index=0, records=_records())])]), 9


def fetch(n: Names) -> tuple[Any, int]:
    rq = R("Fetch")
    return rq(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0, session_epoch=-1,
              topics=[rq.FetchTopic(topic=n.topic, partitions=[rq.FetchPartition(
                  partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                  partition_max_bytes=1 << 20)])]), 12


def list_offsets(n: Names) -> tuple[Any, int]:
    rq = R("ListOffsets")
    return rq(replica_id=-1, topics=[rq.ListOffsetsTopic(name=n.topic, partitions=[
        rq.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])]), 7


def metadata(n: Names, auto_create: bool = False) -> tuple[Any, int]:
    rq = R("Metadata")
    return rq(topics=[rq.MetadataRequestTopic(name=n.topic, topic_id=ZERO_UUID)],
              allow_auto_topic_creation=auto_create, include_topic_authorized_operations=True), 12


def offset_commit(n: Names) -> tuple[Any, int]:
    rq = R("OffsetCommit")
    return rq(group_id=n.group, generation_id_or_member_epoch=-1, member_id="", topics=[rq.OffsetCommitRequestTopic(
        name=n.topic, partitions=[rq.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)])]), 8


def offset_fetch(n: Names) -> tuple[Any, int]:
    rq = R("OffsetFetch")
    return rq(groups=[rq.OffsetFetchRequestGroup(group_id=n.group, topics=[
        rq.OffsetFetchRequestTopics(name=n.topic, partition_indexes=[0])])]), 8


def find_coordinator(key_type: int) -> Callable[[Names], tuple[Any, int]]:
    return lambda n: (R("FindCoordinator")(key_type=key_type, coordinator_keys=[n.group if key_type == 0 else n.txn]), 4)


def join_group(n: Names) -> tuple[Any, int]:
    rq = R("JoinGroup")
    return rq(group_id=n.group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
              protocol_type="consumer", protocols=[rq.JoinGroupRequestProtocol(name="range", metadata=b"")]), 9


def txn_offset_commit(n: Names) -> tuple[Any, int]:
    rq = R("TxnOffsetCommit")
    return rq(transactional_id=n.txn, group_id=n.group, producer_id=12345, producer_epoch=0, generation_id=-1,
              member_id="", topics=[rq.TxnOffsetCommitRequestTopic(name=n.topic, partitions=[
                  rq.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=0)])]), 4


def add_partitions_to_txn(n: Names) -> tuple[Any, int]:
    rq = R("AddPartitionsToTxn")
    return rq(v3_and_below_transactional_id=n.txn, v3_and_below_producer_id=12345, v3_and_below_producer_epoch=0,
              v3_and_below_topics=[rq.AddPartitionsToTxnTopic(name=n.topic, partitions=[0])]), 3


def describe_configs(resource_type: int, n: Names) -> tuple[Any, int]:
    rq = R("DescribeConfigs")
    name = n.topic if resource_type == 2 else "0"  # a topic, or broker 0
    return rq(resources=[rq.DescribeConfigsResource(resource_type=resource_type, resource_name=name,
                                                    configuration_keys=None)]), 4


def alter_configs(resource_type: int, n: Names) -> tuple[Any, int]:
    rq = R("AlterConfigs")
    name, key = (n.topic, "retention.ms") if resource_type == 2 else ("0", "log.cleaner.threads")
    return rq(validate_only=True, resources=[rq.AlterConfigsResource(
        resource_type=resource_type, resource_name=name, configs=[rq.AlterableConfig(name=key, value="2")])]), 2


def incremental_alter_configs(resource_type: int, n: Names) -> tuple[Any, int]:
    rq = R("IncrementalAlterConfigs")
    name, key = (n.topic, "retention.ms") if resource_type == 2 else ("0", "log.cleaner.threads")
    return rq(validate_only=True, resources=[rq.AlterConfigsResource(
        resource_type=resource_type, resource_name=name,
        configs=[rq.AlterableConfig(name=key, config_operation=0, value="2")])]), 1


def offset_delete(n: Names) -> tuple[Any, int]:
    rq = R("OffsetDelete")
    return rq(group_id=n.group, topics=[rq.OffsetDeleteRequestTopic(
        name=n.topic, partitions=[rq.OffsetDeleteRequestPartition(partition_index=0)])]), 0


def acl_filter(rq: Any) -> dict[str, Any]:
    """A filter matching only ACLs of a principal nobody has (so allowed deletions delete nothing)."""
    return {"resource_type_filter": 2, "resource_name_filter": "nothing", "pattern_type_filter": 3,
            "principal_filter": "User:nobody", "host_filter": "*", "operation": 2, "permission_type": ALLOW}


def first(items: list[Any]) -> Any:
    assert len(items) == 1, items
    return items[0]


# Setup steps some rows need, run by the admin before the matrix: a group that exists (an offset
# committed to it), a transactional id that exists (InitProducerId).

def make_group(admin: KafkaSocket, n: Names) -> None:
    request, version = offset_commit(n)
    assert first(first(admin.call(request, version).topics).partitions).error_code == 0


def make_txn(admin: KafkaSocket, n: Names) -> None:
    answer = admin.call(R("InitProducerId")(transactional_id=n.txn, transaction_timeout_ms=60000,
                                             producer_id=-1, producer_epoch=-1), 5)
    assert answer.error_code == 0, answer


TAF, GAF = E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED
CAF, XAF = E.CLUSTER_AUTHORIZATION_FAILED, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@dataclass(frozen=True)
class Row:
    id: str  # names the row's principals and resources
    api: str  # the API's name in the registry
    operation: str  # the ACL Kafka requires: this operation...
    resource: str  # ...on this resource type
    request: Callable[[Names], tuple[Any, int]]
    outcome: Callable[[Any, Names], Any]  # what the answer says, compared with ``expect``
    expect: tuple[Any, Any, Any]  # (allowed, denied, hidden)
    also: tuple[tuple[str, str], ...] = ()  # other (operation, resource type) Kafka requires, always granted
    topic_exists: bool = True  # whether the row's topics are created before the matrix
    setup: Callable[[KafkaSocket, Names], None] | None = None


def partition_error(path: Callable[[Any], list[Any]]) -> Callable[[Any, Names], Any]:
    """The one partition's error code, found by ``path`` in the response."""
    return lambda r, _n: first(path(r)).error_code


ROWS: tuple[Row, ...] = (
    # Produce: WRITE on each topic; with a transactional id, WRITE on it first.
    Row("produce", "Produce", "WRITE", "TOPIC", produce,
        partition_error(lambda r: first(r.responses).partition_responses), (0, TAF, TAF)),
    Row("produce_txn", "Produce", "WRITE", "TRANSACTIONAL_ID", lambda n: produce(n, transactional=True),
        partition_error(lambda r: first(r.responses).partition_responses), (PASSED, XAF, XAF),
        also=(("WRITE", "TOPIC"),)),
    Row("fetch", "Fetch", "READ", "TOPIC", fetch,
        partition_error(lambda r: first(r.responses).partitions), (0, TAF, TAF)),
    Row("list_offsets", "ListOffsets", "DESCRIBE", "TOPIC", list_offsets,
        partition_error(lambda r: first(r.topics).partitions), (0, TAF, TAF)),
    # Metadata: a topic the principal may not describe is refused by name, its existence not told, and
    # its authorized operations (Kafka's bit field) are those the principal holds.
    Row("metadata", "Metadata", "DESCRIBE", "TOPIC", metadata,
        lambda r, _n: (first(r.topics).error_code, first(r.topics).topic_authorized_operations),
        ((0, ops("DESCRIBE")), (TAF, OMITTED), (TAF, OMITTED))),
    Row("metadata_missing", "Metadata", "DESCRIBE", "TOPIC", metadata,
        lambda r, _n: (first(r.topics).error_code, first(r.topics).topic_authorized_operations),
        ((E.UNKNOWN_TOPIC_OR_PARTITION, ops("DESCRIBE")), (TAF, OMITTED), (TAF, OMITTED)), topic_exists=False),
    Row("metadata_all", "Metadata", "DESCRIBE", "TOPIC", lambda n: (nulled(R("Metadata")(), "topics"), 12),
        lambda r, n: n.topic in {t.name for t in r.topics}, (True, False, False)),
    Row("metadata_create", "Metadata", "CREATE", "TOPIC", lambda n: metadata(n, auto_create=True),
        lambda r, _n: first(r.topics).error_code, (PASSED, TAF, TAF), also=(("DESCRIBE", "TOPIC"),),
        topic_exists=False),
    Row("metadata_cluster", "Metadata", "DESCRIBE", "CLUSTER",
        lambda n: (R("Metadata")(topics=[], include_cluster_authorized_operations=True), 10),
        lambda r, _n: r.cluster_authorized_operations, (ops("DESCRIBE"), 0, 0)),
    Row("offset_commit", "OffsetCommit", "READ", "GROUP", offset_commit,
        partition_error(lambda r: first(r.topics).partitions), (0, GAF, GAF), also=(("READ", "TOPIC"),)),
    Row("offset_commit_topic", "OffsetCommit", "READ", "TOPIC", offset_commit,
        partition_error(lambda r: first(r.topics).partitions), (0, TAF, TAF), also=(("READ", "GROUP"),)),
    Row("offset_fetch", "OffsetFetch", "DESCRIBE", "GROUP", offset_fetch,
        lambda r, _n: first(r.groups).error_code, (0, GAF, GAF), also=(("DESCRIBE", "TOPIC"),)),
    Row("offset_fetch_topic", "OffsetFetch", "DESCRIBE", "TOPIC", offset_fetch,
        partition_error(lambda r: first(first(r.groups).topics).partitions), (0, TAF, TAF),
        also=(("DESCRIBE", "GROUP"),)),
    Row("find_group", "FindCoordinator", "DESCRIBE", "GROUP", find_coordinator(0),
        lambda r, _n: first(r.coordinators).error_code, (0, GAF, GAF)),
    Row("find_txn", "FindCoordinator", "DESCRIBE", "TRANSACTIONAL_ID", find_coordinator(1),
        lambda r, _n: first(r.coordinators).error_code, (0, XAF, XAF)),
    Row("join_group", "JoinGroup", "READ", "GROUP", join_group,
        lambda r, _n: r.error_code, (E.MEMBER_ID_REQUIRED, GAF, GAF)),
    Row("heartbeat", "Heartbeat", "READ", "GROUP",
        lambda n: (R("Heartbeat")(group_id=n.group, generation_id=1, member_id="m"), 4),
        lambda r, _n: r.error_code, (PASSED, GAF, GAF)),
    Row("leave_group", "LeaveGroup", "READ", "GROUP",
        lambda n: (R("LeaveGroup")(group_id=n.group, members=[R("LeaveGroup").MemberIdentity(member_id="m")]), 5),
        lambda r, _n: r.error_code, (PASSED, GAF, GAF)),
    Row("sync_group", "SyncGroup", "READ", "GROUP",
        lambda n: (R("SyncGroup")(group_id=n.group, generation_id=1, member_id="m", protocol_type="consumer",
                                  protocol_name="range", assignments=[]), 5),
        lambda r, _n: r.error_code, (PASSED, GAF, GAF)),
    Row("describe_groups", "DescribeGroups", "DESCRIBE", "GROUP",
        lambda n: (R("DescribeGroups")(groups=[n.group], include_authorized_operations=True), 5),
        lambda r, _n: (first(r.groups).error_code, first(r.groups).authorized_operations),
        ((0, ops("DESCRIBE")), (GAF, OMITTED), (GAF, OMITTED))),
    # ListGroups: everything with DESCRIBE on the cluster, else the groups the principal may describe.
    Row("list_groups", "ListGroups", "DESCRIBE", "GROUP", lambda n: (R("ListGroups")(), 5),
        lambda r, n: n.group in {g.group_id for g in r.groups}, (True, False, False), setup=make_group),
    Row("list_groups_cluster", "ListGroups", "DESCRIBE", "CLUSTER", lambda n: (R("ListGroups")(), 5),
        lambda r, n: n.group in {g.group_id for g in r.groups}, (True, False, False), setup=make_group),
    # CreateTopics: CREATE on the topic (or the cluster); the new topic's configs only with
    # DESCRIBE_CONFIGS on it (else topic_config_error_code says TOPIC_AUTHORIZATION_FAILED).
    Row("create_topics", "CreateTopics", "CREATE", "TOPIC",
        lambda n: (R("CreateTopics")(timeout_ms=10000, topics=[R("CreateTopics").CreatableTopic(
            name=n.topic, num_partitions=1, replication_factor=1)]), 7),
        lambda r, _n: (first(r.topics).error_code, first(r.topics).topic_config_error_code),
        ((0, TAF), (TAF, 0), (TAF, 0)), topic_exists=False),
    Row("create_topics_cluster", "CreateTopics", "CREATE", "CLUSTER",
        lambda n: (R("CreateTopics")(timeout_ms=10000, topics=[R("CreateTopics").CreatableTopic(
            name=n.topic, num_partitions=1, replication_factor=1)]), 7),
        lambda r, _n: (first(r.topics).error_code, first(r.topics).topic_config_error_code),
        ((0, 0), (TAF, 0), (TAF, 0)), also=(("DESCRIBE_CONFIGS", "TOPIC"),), topic_exists=False),
    Row("delete_topics", "DeleteTopics", "DELETE", "TOPIC",
        lambda n: (R("DeleteTopics")(timeout_ms=10000, topics=[R("DeleteTopics").DeleteTopicState(name=n.topic)]), 6),
        lambda r, _n: first(r.responses).error_code, (0, TAF, TAF)),
    # A topic that does not exist: one the principal may describe is said to be unknown, else refused.
    Row("delete_topics_missing", "DeleteTopics", "DELETE", "TOPIC",
        lambda n: (R("DeleteTopics")(timeout_ms=10000, topics=[R("DeleteTopics").DeleteTopicState(name=n.topic)]), 6),
        lambda r, _n: first(r.responses).error_code,
        (E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION, TAF), topic_exists=False),
    Row("delete_records", "DeleteRecords", "DELETE", "TOPIC",
        lambda n: (R("DeleteRecords")(timeout_ms=10000, topics=[R("DeleteRecords").DeleteRecordsTopic(
            name=n.topic, partitions=[R("DeleteRecords").DeleteRecordsPartition(partition_index=0, offset=0)])]), 2),
        partition_error(lambda r: first(r.topics).partitions), (0, TAF, TAF)),
    Row("init_producer_id_txn", "InitProducerId", "WRITE", "TRANSACTIONAL_ID",
        lambda n: (R("InitProducerId")(transactional_id=n.txn, transaction_timeout_ms=60000, producer_id=-1,
                                       producer_epoch=-1), 5),
        lambda r, _n: r.error_code, (0, XAF, XAF)),
    Row("init_producer_id", "InitProducerId", "IDEMPOTENT_WRITE", "CLUSTER",
        lambda n: (R("InitProducerId")(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                       producer_epoch=-1), 5),
        lambda r, _n: r.error_code, (0, CAF, CAF)),
    # ...or, since Kafka 3.0, WRITE on any topic.
    Row("init_producer_id_topic", "InitProducerId", "WRITE", "TOPIC",
        lambda n: (R("InitProducerId")(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                       producer_epoch=-1), 5),
        lambda r, _n: r.error_code, (0, CAF, CAF)),
    Row("offset_for_leader_epoch", "OffsetForLeaderEpoch", "DESCRIBE", "TOPIC",
        lambda n: (R("OffsetForLeaderEpoch")(replica_id=-1, topics=[R("OffsetForLeaderEpoch").OffsetForLeaderTopic(
            topic=n.topic, partitions=[R("OffsetForLeaderEpoch").OffsetForLeaderPartition(
                partition=0, current_leader_epoch=-1, leader_epoch=0)])]), 4),
        partition_error(lambda r: first(r.topics).partitions), (0, TAF, TAF)),
    Row("add_partitions_to_txn", "AddPartitionsToTxn", "WRITE", "TRANSACTIONAL_ID", add_partitions_to_txn,
        lambda r, _n: first(first(r.results_by_topic_v3_and_below).results_by_partition).partition_error_code,
        (PASSED, XAF, XAF), also=(("WRITE", "TOPIC"),)),
    Row("add_partitions_to_txn_topic", "AddPartitionsToTxn", "WRITE", "TOPIC", add_partitions_to_txn,
        lambda r, _n: first(first(r.results_by_topic_v3_and_below).results_by_partition).partition_error_code,
        (PASSED, TAF, TAF), also=(("WRITE", "TRANSACTIONAL_ID"),)),
    Row("add_offsets_to_txn", "AddOffsetsToTxn", "WRITE", "TRANSACTIONAL_ID",
        lambda n: (R("AddOffsetsToTxn")(transactional_id=n.txn, producer_id=12345, producer_epoch=0,
                                        group_id=n.group), 4),
        lambda r, _n: r.error_code, (PASSED, XAF, XAF), also=(("READ", "GROUP"),)),
    Row("add_offsets_to_txn_group", "AddOffsetsToTxn", "READ", "GROUP",
        lambda n: (R("AddOffsetsToTxn")(transactional_id=n.txn, producer_id=12345, producer_epoch=0,
                                        group_id=n.group), 4),
        lambda r, _n: r.error_code, (PASSED, GAF, GAF), also=(("WRITE", "TRANSACTIONAL_ID"),)),
    Row("end_txn", "EndTxn", "WRITE", "TRANSACTIONAL_ID",
        lambda n: (R("EndTxn")(transactional_id=n.txn, producer_id=12345, producer_epoch=0, committed=False), 4),
        lambda r, _n: r.error_code, (PASSED, XAF, XAF)),
    Row("write_txn_markers", "WriteTxnMarkers", "CLUSTER_ACTION", "CLUSTER",
        lambda n: (R("WriteTxnMarkers")(markers=[R("WriteTxnMarkers").WritableTxnMarker(
            producer_id=12345, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
            topics=[R("WriteTxnMarkers").WritableTxnMarkerTopic(name=n.topic, partition_indexes=[0])])]), 1),
        partition_error(lambda r: first(first(r.markers).topics).partitions), (PASSED, CAF, CAF)),
    Row("txn_offset_commit", "TxnOffsetCommit", "WRITE", "TRANSACTIONAL_ID", txn_offset_commit,
        partition_error(lambda r: first(r.topics).partitions), (PASSED, XAF, XAF),
        also=(("READ", "GROUP"), ("READ", "TOPIC"))),
    Row("txn_offset_commit_group", "TxnOffsetCommit", "READ", "GROUP", txn_offset_commit,
        partition_error(lambda r: first(r.topics).partitions), (PASSED, GAF, GAF),
        also=(("WRITE", "TRANSACTIONAL_ID"), ("READ", "TOPIC"))),
    Row("txn_offset_commit_topic", "TxnOffsetCommit", "READ", "TOPIC", txn_offset_commit,
        partition_error(lambda r: first(r.topics).partitions), (PASSED, TAF, TAF),
        also=(("WRITE", "TRANSACTIONAL_ID"), ("READ", "GROUP"))),
    Row("describe_acls", "DescribeAcls", "DESCRIBE", "CLUSTER",
        lambda n: (R("DescribeAcls")(**{**acl_filter(None), "resource_type_filter": 1, "pattern_type_filter": 1,
                                         "operation": 1, "permission_type": 1}), 3),
        lambda r, _n: r.error_code, (0, CAF, CAF)),
    Row("create_acls", "CreateAcls", "ALTER", "CLUSTER",
        lambda n: (R("CreateAcls")(creations=[R("CreateAcls").AclCreation(
            resource_type=2, resource_name="nothing", resource_pattern_type=3, principal="User:nobody", host="*",
            operation=3, permission_type=ALLOW)]), 3),
        lambda r, _n: first(r.results).error_code, (0, CAF, CAF)),
    Row("delete_acls", "DeleteAcls", "ALTER", "CLUSTER",
        lambda n: (R("DeleteAcls")(filters=[R("DeleteAcls").DeleteAclsFilter(**acl_filter(None))]), 3),
        lambda r, _n: first(r.filter_results).error_code, (0, CAF, CAF)),
    Row("describe_configs_topic", "DescribeConfigs", "DESCRIBE_CONFIGS", "TOPIC", lambda n: describe_configs(2, n),
        lambda r, _n: first(r.results).error_code, (0, TAF, TAF)),
    Row("describe_configs_broker", "DescribeConfigs", "DESCRIBE_CONFIGS", "CLUSTER", lambda n: describe_configs(4, n),
        lambda r, _n: first(r.results).error_code, (0, CAF, CAF)),
    Row("alter_configs_topic", "AlterConfigs", "ALTER_CONFIGS", "TOPIC", lambda n: alter_configs(2, n),
        lambda r, _n: first(r.responses).error_code, (PASSED, TAF, TAF)),
    Row("alter_configs_broker", "AlterConfigs", "ALTER_CONFIGS", "CLUSTER", lambda n: alter_configs(4, n),
        lambda r, _n: first(r.responses).error_code, (PASSED, CAF, CAF)),
    Row("incremental_alter_configs_topic", "IncrementalAlterConfigs", "ALTER_CONFIGS", "TOPIC",
        lambda n: incremental_alter_configs(2, n), lambda r, _n: first(r.responses).error_code, (PASSED, TAF, TAF)),
    Row("incremental_alter_configs_broker", "IncrementalAlterConfigs", "ALTER_CONFIGS", "CLUSTER",
        lambda n: incremental_alter_configs(4, n), lambda r, _n: first(r.responses).error_code, (PASSED, CAF, CAF)),
    Row("alter_replica_log_dirs", "AlterReplicaLogDirs", "ALTER", "CLUSTER",
        lambda n: (R("AlterReplicaLogDirs")(dirs=[R("AlterReplicaLogDirs").AlterReplicaLogDir(
            path="/nowhere", topics=[R("AlterReplicaLogDirs").AlterReplicaLogDirTopic(name=n.topic, partitions=[0])])]),
            2),
        partition_error(lambda r: first(r.results).partitions), (PASSED, CAF, CAF)),
    Row("describe_log_dirs", "DescribeLogDirs", "DESCRIBE", "CLUSTER",
        lambda n: (nulled(R("DescribeLogDirs")(), "topics"), 4), lambda r, _n: r.error_code, (0, CAF, CAF)),
    Row("create_partitions", "CreatePartitions", "ALTER", "TOPIC",
        lambda n: (R("CreatePartitions")(timeout_ms=10000, topics=[nulled(R("CreatePartitions").CreatePartitionsTopic(
            name=n.topic, count=2), "assignments")]), 3),
        lambda r, _n: first(r.results).error_code, (0, TAF, TAF)),
    Row("delete_groups", "DeleteGroups", "DELETE", "GROUP",
        lambda n: (R("DeleteGroups")(groups_names=[n.group]), 2),
        lambda r, _n: first(r.results).error_code, (0, GAF, GAF), setup=make_group),
    Row("elect_leaders", "ElectLeaders", "ALTER", "CLUSTER",
        lambda n: (nulled(R("ElectLeaders")(election_type=0, timeout_ms=10000), "topic_partitions"), 2),
        lambda r, _n: r.error_code, (0, CAF, CAF)),
    Row("alter_partition_reassignments", "AlterPartitionReassignments", "ALTER", "CLUSTER",
        lambda n: (R("AlterPartitionReassignments")(timeout_ms=10000, topics=[]), 0),
        lambda r, _n: r.error_code, (0, CAF, CAF)),
    Row("list_partition_reassignments", "ListPartitionReassignments", "DESCRIBE", "CLUSTER",
        lambda n: (R("ListPartitionReassignments")(timeout_ms=10000, topics=None), 0),
        lambda r, _n: r.error_code, (0, CAF, CAF)),
    Row("offset_delete", "OffsetDelete", "DELETE", "GROUP", offset_delete,
        lambda r, _n: r.error_code, (0, GAF, GAF), also=(("READ", "TOPIC"),), setup=make_group),
    Row("offset_delete_topic", "OffsetDelete", "READ", "TOPIC", offset_delete,
        partition_error(lambda r: first(r.topics).partitions), (0, TAF, TAF), also=(("DELETE", "GROUP"),),
        setup=make_group),
    Row("describe_client_quotas", "DescribeClientQuotas", "DESCRIBE_CONFIGS", "CLUSTER",
        lambda n: (R("DescribeClientQuotas")(components=[], strict=False), 1), lambda r, _n: r.error_code,
        (0, CAF, CAF)),
    Row("alter_client_quotas", "AlterClientQuotas", "ALTER_CONFIGS", "CLUSTER",
        lambda n: (R("AlterClientQuotas")(validate_only=True, entries=[R("AlterClientQuotas").EntryData(
            entity=[R("AlterClientQuotas").EntityData(entity_type="user", entity_name=n.principal)],
            ops=[R("AlterClientQuotas").OpData(key="producer_byte_rate", value=1024.0, remove=False)])]), 1),
        lambda r, _n: first(r.entries).error_code, (0, CAF, CAF)),
    Row("describe_user_scram_credentials", "DescribeUserScramCredentials", "DESCRIBE", "CLUSTER",
        lambda n: (nulled(R("DescribeUserScramCredentials")(), "users"), 0), lambda r, _n: r.error_code, (0, CAF, CAF)),
    Row("alter_user_scram_credentials", "AlterUserScramCredentials", "ALTER", "CLUSTER",
        lambda n: (R("AlterUserScramCredentials")(upsertions=[], deletions=[
            R("AlterUserScramCredentials").ScramCredentialDeletion(name="nobody", mechanism=1)]), 0),
        lambda r, _n: first(r.results).error_code, (E.RESOURCE_NOT_FOUND, CAF, CAF)),
    Row("describe_quorum", "DescribeQuorum", "DESCRIBE", "CLUSTER",
        lambda n: (R("DescribeQuorum")(topics=[R("DescribeQuorum").TopicData(
            topic_name="__cluster_metadata", partitions=[R("DescribeQuorum").PartitionData(partition_index=0)])]), 2),
        lambda r, _n: r.error_code, (0, CAF, CAF)),
    # DescribeCluster needs no ACL; its cluster operations are the principal's, 0 without DESCRIBE.
    Row("describe_cluster", "DescribeCluster", "DESCRIBE", "CLUSTER",
        lambda n: (R("DescribeCluster")(include_cluster_authorized_operations=True, endpoint_type=1), 1),
        lambda r, _n: (r.error_code, r.cluster_authorized_operations), ((0, ops("DESCRIBE")), (0, 0), (0, 0))),
    Row("describe_producers", "DescribeProducers", "READ", "TOPIC",
        lambda n: (R("DescribeProducers")(topics=[R("DescribeProducers").TopicRequest(name=n.topic,
                                                                                    partition_indexes=[0])]), 0),
        partition_error(lambda r: first(r.topics).partitions), (0, TAF, TAF)),
    Row("describe_transactions", "DescribeTransactions", "DESCRIBE", "TRANSACTIONAL_ID",
        lambda n: (R("DescribeTransactions")(transactional_ids=[n.txn]), 0),
        lambda r, _n: first(r.transaction_states).error_code, (0, XAF, XAF), setup=make_txn),
    Row("list_transactions", "ListTransactions", "DESCRIBE", "TRANSACTIONAL_ID",
        lambda n: (R("ListTransactions")(state_filters=[], producer_id_filters=[]), 1),
        lambda r, n: n.txn in {t.transactional_id for t in r.transaction_states}, (True, False, False),
        setup=make_txn),
    Row("consumer_group_heartbeat", "ConsumerGroupHeartbeat", "READ", "GROUP",
        lambda n: (R("ConsumerGroupHeartbeat")(group_id=n.group, member_id=uuid.uuid4().hex[:22], member_epoch=0,
                                               rebalance_timeout_ms=10000, subscribed_topic_names=[n.topic],
                                               topic_partitions=[]), 0),
        lambda r, _n: r.error_code, (0, GAF, GAF), also=(("DESCRIBE", "TOPIC"),)),
    Row("consumer_group_heartbeat_topic", "ConsumerGroupHeartbeat", "DESCRIBE", "TOPIC",
        lambda n: (R("ConsumerGroupHeartbeat")(group_id=n.group, member_id=uuid.uuid4().hex[:22], member_epoch=0,
                                               rebalance_timeout_ms=10000, subscribed_topic_names=[n.topic],
                                               topic_partitions=[]), 0),
        lambda r, _n: r.error_code, (0, TAF, TAF), also=(("READ", "GROUP"),)),
    Row("consumer_group_describe", "ConsumerGroupDescribe", "DESCRIBE", "GROUP",
        lambda n: (R("ConsumerGroupDescribe")(group_ids=[n.group], include_authorized_operations=True), 0),
        lambda r, _n: (first(r.groups).error_code, first(r.groups).authorized_operations),
        ((E.GROUP_ID_NOT_FOUND, OMITTED), (GAF, OMITTED), (GAF, OMITTED))),
    Row("describe_topic_partitions", "DescribeTopicPartitions", "DESCRIBE", "TOPIC",
        lambda n: (R("DescribeTopicPartitions")(topics=[R("DescribeTopicPartitions").TopicRequest(name=n.topic)],
                                                response_partition_limit=100), 0),
        lambda r, _n: (first(r.topics).error_code, first(r.topics).topic_authorized_operations),
        ((0, ops("DESCRIBE")), (TAF, OMITTED), (TAF, OMITTED))),
)


def grants(row: Row, case: str) -> list[tuple[str, str, str, int]]:
    """The ACLs of ``row``'s principal in ``case``: (resource type, operation, resource name, permission)."""
    n = Names(row.id, case)
    acls = [(resource, op, n.resource(resource), ALLOW) for op, resource in row.also]
    main = n.resource(row.resource)
    if case == ALLOWED:
        acls.append((row.resource, row.operation, main, ALLOW))
    elif case == DENIED:
        # Visible but refused: DESCRIBE (or, when DESCRIBE is what is refused, ALL) allowed, the operation denied.
        acls.append((row.resource, "ALL" if row.operation == "DESCRIBE" else "DESCRIBE", main, ALLOW))
        acls.append((row.resource, row.operation, main, DENY))
    return acls


PASSWORDS = {ADMIN: "admin-secret", ALICE: "alice-secret", BOB: "bob-secret",
             **{Names(row.id, case).principal: f"{row.id}-{case}-secret" for row in ROWS for case in CASES}}


class Matrix:
    """The running server, its port and an authenticated admin connection."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.port = server.ports["kafka"]
        self.admin = self.connect(ADMIN)

    def connect(self, user: str) -> KafkaSocket:
        return KafkaSocket(self.port).authenticate_plain(user, PASSWORDS[user])

    def conf(self, user: str) -> dict[str, Any]:
        return {"bootstrap.servers": f"127.0.0.1:{self.port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user]}


def _prepare(matrix: Matrix) -> None:
    """As the admin: create every row's topics, set up what rows need, and grant every ACL of the matrix."""
    ct = R("CreateTopics")
    topics = [Names(row.id, case).topic for row in ROWS if row.topic_exists for case in CASES]
    created = matrix.admin.call(ct(timeout_ms=30000, topics=[
        ct.CreatableTopic(name=t, num_partitions=1, replication_factor=1) for t in topics]), 7)
    assert all(t.error_code == 0 for t in created.topics), [t for t in created.topics if t.error_code]
    for row in ROWS:
        if row.setup is not None:
            for case in CASES:
                row.setup(matrix.admin, Names(row.id, case))
    ca = R("CreateAcls")
    creations = [ca.AclCreation(resource_type=RESOURCE_CODES[resource], resource_name=name, resource_pattern_type=3,
                                principal=f"User:{Names(row.id, case).principal}", host="*",
                                operation=2 if op == "ALL" else OPERATION_CODES[op], permission_type=permission)
                 for row in ROWS for case in CASES for resource, op, name, permission in grants(row, case)]
    answer = matrix.admin.call(ca(creations=creations), 3)
    assert all(r.error_code == 0 for r in answer.results), [r for r in answer.results if r.error_code][:3]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    home: Path = tmp_path_factory.mktemp("acl-matrix")
    users = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    jaas = f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
    server = ServerProcess(str(home / "data"), "--override", "listeners=SASL_PLAINTEXT://127.0.0.1:0",
                           "--override", "sasl.enabled.mechanisms=PLAIN",
                           *config_args(home, f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}"),
                           "--override",
                           "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                           "--override", f"super.users=User:{ADMIN}", "--override",
                           "allow.everyone.if.no.acl.found=false").start()
    try:
        m = Matrix(server)
        _prepare(m)
        yield m
        assert server.proc is not None and server.proc.poll() is None, "".join(server.output[-100:])
        m.admin.close()
        assert server.stop(timeout=30) == 0
    finally:
        server.kill()


def test_every_api_the_server_serves_has_a_row() -> None:
    """A new API in the registry must come with its ACL rows (or a reason it has none)."""
    served = {h.name for h in load_handlers().values()}
    assert served - UNAUTHORIZED_APIS - {row.api for row in ROWS} == set()
    assert {row.api for row in ROWS} <= served
    assert len({row.id for row in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_acl_matrix(matrix: Matrix, row: Row) -> None:
    """One API × {allowed, denied, hidden}: Kafka's answer in each case."""
    seen = {}
    for case in CASES:
        n = Names(row.id, case)
        with matrix.connect(n.principal) as client:
            request, version = row.request(n)
            seen[case] = row.outcome(client.call(request, version), n)
    expected = dict(zip(CASES, row.expect, strict=True))
    assert seen == expected, f"{row.api}: {row.operation} on {row.resource}"


# The same decisions through the real clients (librdkafka's AdminClient, producer and consumer;
# kafka-python's KafkaAdminClient): alice holds some ACLs on "alice-" resources, bob none.

def _acl(resource: str, name: str, user: str, operation: str, pattern: str = "PREFIXED") -> Any:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBinding(ResourceType[resource], name, ResourcePatternType[pattern], f"User:{user}", "*",
                      AclOperation[operation], AclPermissionType.ALLOW)


def test_real_clients_see_authorized_operations_and_refusals(matrix: Matrix) -> None:
    from confluent_kafka import KafkaError, KafkaException, TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient, ConfigResource, NewTopic, ResourceType

    suffix = uuid.uuid4().hex[:6]
    topic, group = f"alice-clients-{suffix}", f"alice-group-{suffix}"
    admin = AdminClient(matrix.conf(ADMIN))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    for future in admin.create_acls([_acl("TOPIC", "alice-", ALICE, "READ"), _acl("TOPIC", "alice-", ALICE, "WRITE"),
                                     _acl("GROUP", "alice-", ALICE, "READ"),
                                     _acl("BROKER", CLUSTER, ALICE, "DESCRIBE", "LITERAL")]).values():
        future.result(30)

    alice = AdminClient(matrix.conf(ALICE))
    described = alice.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
    assert set(described.authorized_operations) == {AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE}
    cluster = alice.describe_cluster(include_authorized_operations=True).result(30)
    assert set(cluster.authorized_operations) == {AclOperation.DESCRIBE}
    admin_cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert len(admin_cluster.authorized_operations) == 7  # a super user: every cluster operation

    bob = AdminClient(matrix.conf(BOB))
    with pytest.raises(KafkaException) as refused:
        bob.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        bob.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])[
            ConfigResource(ResourceType.TOPIC, topic)].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        next(iter(bob.delete_acls([_filter_everything()]).values())).result(30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    # The group alice commits to is hers to list and describe; bob sees neither it nor its offsets.
    from confluent_kafka import Consumer, Producer

    producer = Producer({**matrix.conf(ALICE), "enable.idempotence": True})
    producer.produce(topic, b"x")
    assert producer.flush(15) == 0
    consumer = Consumer({**matrix.conf(ALICE), "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 15
    while (msg := consumer.poll(0.5)) is None and time.monotonic() < deadline:
        pass
    assert msg is not None and msg.error() is None
    consumer.commit(asynchronous=False)
    consumer.close()
    listed = {g.group_id for g in alice.list_consumer_groups().result(30).valid}
    assert group in listed
    assert group not in {g.group_id for g in bob.list_consumer_groups().result(30).valid}
    described_group = alice.describe_consumer_groups([group], include_authorized_operations=True)[group].result(30)
    assert set(described_group.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}


def _filter_everything() -> Any:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                            AclPermissionType.ANY)


def test_kafka_python_admin_is_refused_as_kafka_refuses_it(matrix: Matrix) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAuthorizationFailedError

    def client(user: str) -> Any:
        return KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{matrix.port}", security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism="PLAIN", sasl_plain_username=user, sasl_plain_password=PASSWORDS[user],
                                request_timeout_ms=20000)

    admin, bob = client(ADMIN), client(BOB)
    try:
        topic = f"bob-py-{uuid.uuid4().hex[:6]}"
        with pytest.raises(TopicAuthorizationFailedError):
            bob.create_topics([NewTopic(topic, 1, 1)])
        admin.create_topics([NewTopic(topic, 1, 1)])
        with pytest.raises(TopicAuthorizationFailedError):
            bob.delete_topics([topic])
        assert topic not in bob.list_topics()
        assert topic in admin.list_topics()
        assert not bob.list_groups()  # without DESCRIBE on the cluster or a group: none shown
    finally:
        admin.close()
        bob.close()
