"""The cluster-admin APIs through unmodified clients against a real server: kafka-python's KafkaAdminClient
(describe_log_dirs, alter_replica_log_dirs, describe_producers, elect_leaders, partition reassignments,
describe_metadata_quorum, and its broker-version inference) beside a confluent-kafka transactional producer,
and confluent-kafka's elect_leaders (librdkafka has no DescribeTopicPartitions: its describe_topics uses
Metadata), each client negotiating its own versions from ApiVersions."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import ElectionType, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition
from kafka import errors as kerrors
from kafka.admin import KafkaAdminClient

from tests.server_process import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with ServerProcess(str(tmp_path_factory.mktemp("cluster-admin-clients"))) as s:
        yield s


@pytest.fixture(scope="module")
def kadmin(server: ServerProcess):
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    yield client
    client.close()


def test_kafka_python_log_dirs(kadmin: KafkaAdminClient, server: ServerProcess) -> None:
    kadmin.create_topics({"kp-dirs": {"num_partitions": 2, "replication_factor": 1}})
    producer = Producer({"bootstrap.servers": server.bootstrap})
    producer.produce("kp-dirs", b"x" * 1000, partition=1)
    assert producer.flush(30) == 0

    (broker,) = kadmin.describe_log_dirs({"kp-dirs": [0, 1]})
    assert broker["broker"] == 0
    (log_dir,) = broker["log_dirs"]
    assert (log_dir["error_code"], log_dir["log_dir"]) == (0, os.path.abspath(server.data_dir))
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    (topic,) = log_dir["topics"]
    sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
    assert sizes[0] == 0 and sizes[1] > 1000  # one batch: its record and the batch's own headers

    here, other = os.path.abspath(server.data_dir), "/nonexistent/kafka-logs"
    assert kadmin.alter_replica_log_dirs({("kp-dirs", 0, 0): here, ("kp-dirs", 1, 0): other}) == {
        ("kp-dirs", 0, 0): kerrors.NoError, ("kp-dirs", 1, 0): kerrors.LogDirNotFoundError}


def test_kafka_python_describe_producers_of_a_transaction(kadmin: KafkaAdminClient, server: ServerProcess) -> None:
    kadmin.create_topics({"kp-producers": {"num_partitions": 2, "replication_factor": 1}})
    producer = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "kp-producers-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for _ in range(3):
        producer.produce("kp-producers", b"v", partition=1)
    assert producer.flush(30) == 0
    p0, p1 = TopicPartition("kp-producers", 0), TopicPartition("kp-producers", 1)

    ongoing = kadmin.describe_producers([p0, p1])
    assert ongoing[p0].active_producers == []
    (state,) = ongoing[p1].active_producers
    # Open transaction from offset 0, no marker yet (coordinator epoch -1), three records: sequences 0..2.
    assert (state.producer_epoch, state.last_sequence, state.coordinator_epoch,
            state.current_transaction_start_offset) == (0, 2, -1, 0)

    producer.commit_transaction(30)
    (committed,) = kadmin.describe_producers([p1])[p1].active_producers
    # The marker closed the transaction and carries the coordinator's epoch (0: it never moves).
    assert (committed.producer_id, committed.last_sequence, committed.coordinator_epoch,
            committed.current_transaction_start_offset) == (state.producer_id, 2, 0, -1)
    assert committed.last_timestamp >= state.last_timestamp

    with pytest.raises(kerrors.UnknownTopicOrPartitionError):
        kadmin.describe_producers([TopicPartition("no-such-topic", 0)])


def test_kafka_python_elections_reassignments_and_quorum(kadmin: KafkaAdminClient, server: ServerProcess) -> None:
    kadmin.create_topics({"kp-elect": {"num_partitions": 2, "replication_factor": 1}})
    preferred, unclean = 0, 1
    for election_type in (preferred, unclean):
        r = kadmin.elect_leaders(election_type, {"kp-elect": [0, 1]}, raise_errors=False)
        assert [(t.topic, [(p.partition_id, p.error_code) for p in t.partition_result])
                for t in r.replica_election_results] == [("kp-elect", [(0, 84), (1, 84)])]  # ELECTION_NOT_NEEDED
    # ELECTION_NOT_NEEDED is what kafka-python expects of a leader already preferred: not raised.
    kadmin.elect_leaders(preferred, {"kp-elect": [0]})

    p0, p1 = TopicPartition("kp-elect", 0), TopicPartition("kp-elect", 1)
    assert kadmin.alter_partition_reassignments({p0: [0]}) == {p0: None}
    assert kadmin.alter_partition_reassignments({p1: [1]}) == {p1: kerrors.InvalidReplicationAssignmentError}
    assert kadmin.alter_partition_reassignments({p1: None}) == {p1: kerrors.NoReassignmentInProgressError}
    assert kadmin.list_partition_reassignments() == {}

    quorum = kadmin.describe_metadata_quorum()
    (topic,) = quorum["topics"]
    (partition,) = topic["partitions"]
    assert (topic["topic_name"], partition["leader_id"], partition["error"], partition["observers"]) == (
        "__cluster_metadata", 0, None, [])
    (voter,) = partition["current_voters"]
    assert (voter["replica_id"], voter["log_end_offset"]) == (0, partition["high_watermark"])
    assert quorum["nodes"] == [{"node_id": 0, "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1",
                                                             "port": server.kafka_port}]}]


def test_kafka_python_infers_a_kafka_4_0_broker(kadmin: KafkaAdminClient) -> None:
    # kafka-python infers the version from the API set: ListOffsets v10 marks 4.0 (Produce v13 would be 4.1).
    assert kadmin._client.check_version() == (4, 0)


def test_confluent_kafka_elect_leaders(server: ServerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("ck-elect", 2, 1)])["ck-elect"].result(30)
    wanted = [CTopicPartition("ck-elect", 0), CTopicPartition("ck-elect", 1), CTopicPartition("no-such-topic", 0)]
    for election_type in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        results = admin.elect_leaders(election_type, wanted).result(30)
        assert {(tp.topic, tp.partition): error.code() for tp, error in results.items()} == {
            ("ck-elect", 0): 84, ("ck-elect", 1): 84, ("no-such-topic", 0): 3}  # ELECTION_NOT_NEEDED, UNKNOWN
    # Every partition: none whose election is needed, so none listed.
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(30) == {}
