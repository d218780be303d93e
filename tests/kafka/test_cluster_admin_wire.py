"""The cluster-admin APIs of a single node, spoken with our own codec against a real server, each checked
against the answers Kafka 4.0 gives: DescribeTopicPartitions (KIP-966, with its cursor pagination),
DescribeLogDirs and AlterReplicaLogDirs (the data dir as the one log dir), DescribeProducers, ElectLeaders,
AlterPartitionReassignments and ListPartitionReassignments (one broker), DescribeQuorum (one voter), and
ListOffsets v9-10 (Kafka 4.0's last version, which clients read as "a 4.0 broker")."""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import pytest

from millrace.gateway.kafka_protocol.codec import request_class
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.protocol.records import NewRecord, build_record_batch
from tests.kafka.test_metadata import ZERO, Wire, only
from tests.kafka.wire import local
from tests.server_process import ServerProcess

DESCRIBE_TOPIC_PARTITIONS, DESCRIBE_LOG_DIRS, ALTER_REPLICA_LOG_DIRS = 75, 35, 34
DESCRIBE_PRODUCERS, INIT_PRODUCER_ID = 61, 22
DTP, DLD, ARLD = (request_class(k) for k in (DESCRIBE_TOPIC_PARTITIONS, DESCRIBE_LOG_DIRS, ALTER_REPLICA_LOG_DIRS))
DP = request_class(DESCRIBE_PRODUCERS)
ELECT_LEADERS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS, DESCRIBE_QUORUM = 43, 45, 46, 55
EL, APR, LPR, DQ = (request_class(k) for k in (ELECT_LEADERS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS,
                                               DESCRIBE_QUORUM))
PREFERRED, UNCLEAN = 0, 1
# Every operation a topic supports (READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS),
# as Kafka answers without an authorizer.
TOPIC_OPS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# Topics of the pagination tests: named after every other topic of this module, so that listing every topic
# from the cursor "zz-" sees exactly these.
PAGED = {"zz-a": 3, "zz-b": 2, "zz-c": 1}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with ServerProcess(str(tmp_path_factory.mktemp("cluster-admin"))) as s:
        with local(s.kafka_port) as w:
            for name, partitions in PAGED.items():
                w.create(name, partitions)
        yield s


def describe_partitions(wire: Wire, names: list[str], limit: int = 2000,
                        cursor: tuple[str, int] | None = None) -> Any:
    request = DTP(topics=[DTP.TopicRequest(name=n) for n in names], response_partition_limit=limit,
                  cursor=None if cursor is None else DTP.Cursor(topic_name=cursor[0], partition_index=cursor[1]))
    return wire.send(DESCRIBE_TOPIC_PARTITIONS, 0, request)


def pages(response: Any) -> list[tuple[str, list[int]]]:
    return [(t.name, [p.partition_index for p in t.partitions]) for t in response.topics]


def cursor_of(response: Any) -> tuple[str, int] | None:
    c = response.next_cursor
    return None if c is None else (c.topic_name, c.partition_index)


# ------------------------------------------------------------------------------ DescribeTopicPartitions

def test_describe_topic_partitions_named_topics(wire):
    r = describe_partitions(wire, ["zz-c", "zz-a", "no-such-topic", "bad name", "zz-a"])
    assert r.throttle_time_ms == 0 and r.next_cursor is None
    # Each name once, in name order; missing and illegal names with Kafka's errors and no id.
    assert [(t.name, t.error_code) for t in r.topics] == [
        ("bad name", ErrorCode.INVALID_TOPIC_EXCEPTION), ("no-such-topic", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("zz-a", 0), ("zz-c", 0)]
    bad, missing, a, c = r.topics
    assert (bad.topic_id, bad.partitions, missing.topic_id, missing.partitions) == (ZERO, [], ZERO, [])
    assert all(t.topic_authorized_operations == TOPIC_OPS and not t.is_internal for t in r.topics)
    assert a.topic_id == only(wire.metadata(12, ["zz-a"]), "zz-a").topic_id != ZERO
    assert [(p.partition_index, p.error_code, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes,
             p.eligible_leader_replicas, p.last_known_elr, p.offline_replicas) for p in a.partitions] == [
        (i, 0, 0, 0, [0], [0], [], [], []) for i in range(3)]
    assert [p.partition_index for p in c.partitions] == [0]


def test_describe_topic_partitions_pages_every_topic(wire):
    # Every topic (an empty list) from the cursor "zz-", two partitions a page, as Java's Admin pages.
    first = describe_partitions(wire, [], limit=2, cursor=("zz-", 0))
    assert (pages(first), cursor_of(first)) == ([("zz-a", [0, 1])], ("zz-a", 2))
    second = describe_partitions(wire, [], limit=2, cursor=cursor_of(first))
    assert (pages(second), cursor_of(second)) == ([("zz-a", [2]), ("zz-b", [0])], ("zz-b", 1))
    third = describe_partitions(wire, [], limit=2, cursor=cursor_of(second))
    assert (pages(third), cursor_of(third)) == ([("zz-b", [1]), ("zz-c", [0])], None)
    # The limit reached exactly at a topic's end: the next page starts at the next topic's partition 0.
    exact = describe_partitions(wire, [], limit=3, cursor=("zz-a", 0))
    assert (pages(exact), cursor_of(exact)) == ([("zz-a", [0, 1, 2])], ("zz-b", 0))
    # A limit below 1 is 1; a cursor past a topic's last partition gives it with no partitions.
    assert pages(describe_partitions(wire, ["zz-b"], limit=0)) == [("zz-b", [0])]
    assert pages(describe_partitions(wire, ["zz-b"], limit=-5)) == [("zz-b", [0])]
    past = describe_partitions(wire, ["zz-b", "zz-c"], cursor=("zz-b", 7))
    assert (pages(past), cursor_of(past)) == ([("zz-b", []), ("zz-c", [0])], None)


def test_describe_topic_partitions_named_pages_skip_names_before_the_cursor(wire):
    r = describe_partitions(wire, ["zz-a", "zz-b", "zz-c", "missing"], limit=2, cursor=("zz-b", 1))
    # "zz-a" and "missing" sort before the cursor's topic: not answered at all.
    assert (pages(r), cursor_of(r)) == ([("zz-b", [1]), ("zz-c", [0])], None)
    # An unknown topic on the page counts no partitions: the limit still reaches the next one.
    r = describe_partitions(wire, ["zz-b", "zz-bb", "zz-c"], limit=3)
    assert [(t.name, t.error_code) for t in r.topics] == [
        ("zz-b", 0), ("zz-bb", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), ("zz-c", 0)]
    assert cursor_of(r) is None
    # The limit reached at a topic's end: the cursor names the next name asked for, existing or not.
    r = describe_partitions(wire, ["zz-b", "zz-bb", "zz-c"], limit=2)
    assert (pages(r), cursor_of(r)) == ([("zz-b", [0, 1])], ("zz-bb", 0))


def test_describe_topic_partitions_refusals(wire):
    # A cursor topic not among the named ones, or a negative cursor partition: every requested topic refused.
    for cursor in (("zz-b", 0), ("zz-a", -1)):
        r = describe_partitions(wire, ["zz-c", "zz-a", "zz-c"], cursor=cursor)
        assert [(t.name, t.error_code, t.topic_id, t.partitions) for t in r.topics] == [
            (n, ErrorCode.INVALID_REQUEST, ZERO, []) for n in ("zz-c", "zz-a", "zz-c")]
        assert r.next_cursor is None
    # Listing every topic with a negative cursor partition: refused, and there is no topic to name.
    r = describe_partitions(wire, [], cursor=("zz-a", -1))
    assert (r.topics, r.next_cursor) == ([], None)


# ------------------------------------------------------------------------- DescribeLogDirs, AlterReplicaLogDirs

def batch(*values: bytes) -> bytes:
    return build_record_batch([NewRecord(key=b"k", value=v) for v in values])


def describe_log_dirs(wire: Wire, version: int, topics: dict[str, list[int]] | None) -> Any:
    request = DLD(topics=[DLD.DescribableLogDirTopic(topic=t, partitions=ps) for t, ps in (topics or {}).items()])
    if topics is None:
        request.topics = None  # null = every partition
    return wire.send(DESCRIBE_LOG_DIRS, version, request)


def sizes(result: Any) -> dict[str, dict[int, int]]:
    return {t.name: {p.partition_index: p.partition_size for p in t.partitions} for t in result.topics}


def test_describe_log_dirs_sizes_of_the_data_dir(server, wire):
    wire.create("ld-sizes", 3)
    first, second, third = batch(b"a" * 100), batch(b"b" * 10, b"c" * 20), batch(b"d")
    for partition, data in ((0, first), (0, second), (2, third)):
        assert wire.produce("ld-sizes", partition, data).error_code == 0
    expected = {0: len(first) + len(second), 1: 0, 2: len(third)}

    r = describe_log_dirs(wire, 4, {"ld-sizes": [2, 0, 1, 9], "no-such-topic": [0]})
    assert (r.throttle_time_ms, r.error_code, len(r.results)) == (0, 0, 1)
    (result,) = r.results
    assert (result.error_code, result.log_dir) == (0, os.path.abspath(server.data_dir))
    # Unknown topics and partitions are left out; sizes are the record batches' bytes, as Kafka's log.size.
    assert sizes(result) == {"ld-sizes": expected}
    assert all(not p.is_future_key and p.offset_lag == 0 for t in result.topics for p in t.partitions)
    volume = shutil.disk_usage(server.data_dir)
    assert result.total_bytes == volume.total and 0 < result.usable_bytes <= volume.total

    # null = every partition of every topic; v1 has neither the top-level error nor the volume's bytes.
    every = describe_log_dirs(wire, 1, None).results[0]
    assert sizes(every)["ld-sizes"] == expected and sizes(every)["zz-a"] == {0: 0, 1: 0, 2: 0}
    assert (every.total_bytes, every.usable_bytes) == (-1, -1)
    # A topic with none of its partitions asked for is not listed.
    assert describe_log_dirs(wire, 2, {"ld-sizes": [5]}).results[0].topics == []


def test_alter_replica_log_dirs_to_the_same_or_an_unknown_dir(server, wire):
    wire.create("ld-move", 2)
    here, elsewhere = os.path.abspath(server.data_dir), os.path.abspath(server.data_dir) + "-other"
    long_name = "ld-" + "x" * 240  # a legal topic name whose future log's directory name would not fit
    request = ARLD(dirs=[
        ARLD.AlterReplicaLogDir(path=elsewhere, topics=[ARLD.AlterReplicaLogDirTopic(name="ld-move", partitions=[0, 1])]),
        ARLD.AlterReplicaLogDir(path=here, topics=[
            ARLD.AlterReplicaLogDirTopic(name="ld-move", partitions=[1, 7]),
            ARLD.AlterReplicaLogDirTopic(name="no-such-topic", partitions=[0]),
            ARLD.AlterReplicaLogDirTopic(name=long_name, partitions=[0])]),
    ])
    for version in (1, 2):
        r = wire.send(ALTER_REPLICA_LOG_DIRS, version, request)
        got = {(t.topic_name, p.partition_index): p.error_code for t in r.results for p in t.partitions}
        # The last directory named for a partition wins: ld-move-1 stays where it is (NONE).
        assert got == {("ld-move", 0): ErrorCode.LOG_DIR_NOT_FOUND, ("ld-move", 1): 0,
                       ("ld-move", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       (long_name, 0): ErrorCode.INVALID_TOPIC_EXCEPTION}


# ---------------------------------------------------------------------------------------- DescribeProducers

def describe_producers(wire: Wire, topics: dict[str, list[int]]) -> dict[tuple[str, int], Any]:
    r = wire.send(DESCRIBE_PRODUCERS, 0, DP(topics=[DP.TopicRequest(name=t, partition_indexes=ps)
                                                     for t, ps in topics.items()]))
    assert r.throttle_time_ms == 0
    return {(t.name, p.partition_index): p for t in r.topics for p in t.partitions}


def test_describe_producers_of_idempotent_producers(wire):
    wire.create("dp-idem", 2)
    init = wire.request(INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=60000,
                        producer_id=-1, producer_epoch=-1)
    pid, epoch = init.producer_id, init.producer_epoch
    before = int(time.time() * 1000)
    for sequence, values in ((0, [b"a", b"b"]), (2, [b"c"])):
        data = build_record_batch([NewRecord(key=b"k", value=v) for v in values], producer_id=pid,
                                  producer_epoch=epoch, base_sequence=sequence)
        assert wire.produce("dp-idem", 1, data).error_code == 0
    assert wire.produce("dp-idem", 0, batch(b"plain")).error_code == 0  # no producer id: no state
    after = int(time.time() * 1000)

    got = describe_producers(wire, {"dp-idem": [1, 0, 5], "no-such-topic": [0, 1], "bad name": [3]})
    one = got["dp-idem", 1]
    assert (one.error_code, one.error_message) == (0, None)
    (state,) = one.active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence, state.coordinator_epoch,
            state.current_txn_start_offset) == (pid, epoch, 2, -1, -1)
    assert before <= state.last_timestamp <= after
    assert (got["dp-idem", 0].error_code, got["dp-idem", 0].active_producers) == (0, [])
    # An unknown partition of a known topic: no message; an unknown topic: the error's; an illegal name: Kafka's.
    assert (got["dp-idem", 5].error_code, got["dp-idem", 5].error_message) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                                                 None)
    for p in (0, 1):
        missing = got["no-such-topic", p]
        assert (missing.error_code, missing.error_message) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                               ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.description)
    bad = got["bad name", 3]
    assert bad.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert bad.error_message == ('Topic name "bad name" is illegal, it contains a character other than ASCII '
                                 "alphanumerics, '.', '_' and '-'")


# --------------------------------------------------------------------------------------------- ElectLeaders

def elect(wire: Wire, version: int, election_type: int, topics: dict[str, list[int]] | None) -> Any:
    request = EL(election_type=election_type, timeout_ms=10000,
                 topic_partitions=[EL.TopicPartitions(topic=t, partitions=ps) for t, ps in (topics or {}).items()])
    if topics is None:
        request.topic_partitions = None  # null = every partition
    return wire.send(ELECT_LEADERS, version, request)


def election_results(r: Any) -> dict[tuple[str, int], tuple[int, str | None]]:
    return {(t.topic, p.partition_id): (p.error_code, p.error_message)
            for t in r.replica_election_results for p in t.partition_result}


def test_elect_leaders_is_never_needed_with_one_replica(wire):
    not_needed = (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
    for version, election_type in ((0, PREFERRED), (1, PREFERRED), (2, PREFERRED), (2, UNCLEAN)):
        r = elect(wire, version, election_type, {"zz-a": [0, 2, 3], "no-such-topic": [1]})
        assert r.throttle_time_ms == 0 and (version == 0 or r.error_code == 0)
        assert election_results(r) == {
            ("zz-a", 0): not_needed, ("zz-a", 2): not_needed,
            ("zz-a", 3): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as zz-a-3"),
            ("no-such-topic", 1): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as no-such-topic")}
    # Every partition: every topic listed, none of its partitions (their election is not needed).
    every = elect(wire, 2, PREFERRED, None)
    assert every.error_code == 0
    assert {"zz-a", "zz-b", "zz-c"} <= {t.topic for t in every.replica_election_results}
    assert all(t.partition_result == [] for t in every.replica_election_results)
    # An election type Kafka's controller does not know fails the whole request.
    bad = elect(wire, 2, 7, {"zz-a": [0]})
    assert (bad.error_code, election_results(bad)) == (ErrorCode.UNKNOWN_SERVER_ERROR, {
        ("zz-a", 0): (ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.UNKNOWN_SERVER_ERROR.description)})


# ------------------------------------------------------------------------------- Partition reassignments

def test_partition_reassignments_on_one_broker(wire):
    request = APR(timeout_ms=10000, topics=[
        APR.ReassignableTopic(name="zz-b", partitions=[
            APR.ReassignablePartition(partition_index=0, replicas=[0]),
            APR.ReassignablePartition(partition_index=1, replicas=[1]),
            APR.ReassignablePartition(partition_index=2, replicas=[0])]),
        APR.ReassignableTopic(name="no-such-topic", partitions=[APR.ReassignablePartition(partition_index=0,
                                                                                          replicas=[0])]),
        APR.ReassignableTopic(name="zz-c", partitions=[
            APR.ReassignablePartition(partition_index=0, replicas=None),
            APR.ReassignablePartition(partition_index=0, replicas=[]),
            APR.ReassignablePartition(partition_index=0, replicas=[0, 0]),
            APR.ReassignablePartition(partition_index=0, replicas=[2, 0, 1])]),
    ])
    r = wire.send(ALTER_REASSIGNMENTS, 0, request)
    assert (r.throttle_time_ms, r.error_code, r.error_message) == (0, 0, None)
    assert [(t.name, [(p.partition_index, p.error_code, p.error_message) for p in t.partitions])
            for t in r.responses] == [
        ("zz-b", [(0, 0, None),  # the partition's own replica: a no-op
                  (1, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes broker 1, "
                                                            "but no such broker is registered."),
                  (2, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition zz-b:2.")]),
        ("no-such-topic", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named no-such-topic.")]),
        ("zz-c", [(0, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."),
                  (0, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                   "The manual partition assignment includes an empty replica list."),
                  (0, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                   "The manual partition assignment includes the broker 0 more than once."),
                  # Checked in ascending order: broker 1 is the first unknown one.
                  (0, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes broker 1, "
                                                            "but no such broker is registered.")]),
    ]
    assert only(wire.metadata(12, ["zz-b"]), "zz-b").partitions[0].replica_nodes == [0]

    for topics in (None, [LPR.ListPartitionReassignmentsTopics(name="zz-b", partition_indexes=[0, 1])]):
        listed = wire.send(LIST_REASSIGNMENTS, 0, LPR(timeout_ms=10000, topics=topics))
        assert (listed.error_code, listed.error_message, listed.topics) == (0, None, [])


# ------------------------------------------------------------------------------------------- DescribeQuorum

def describe_quorum(wire: Wire, version: int, topics: dict[str, list[int]]) -> Any:
    return wire.send(DESCRIBE_QUORUM, version, DQ(topics=[
        DQ.TopicData(topic_name=t, partitions=[DQ.PartitionData(partition_index=p) for p in ps])
        for t, ps in topics.items()]))


def test_describe_quorum_one_voter_leads(server, wire):
    for version in (0, 1, 2):
        before = int(time.time() * 1000)
        r = describe_quorum(wire, version, {"__cluster_metadata": [0]})
        assert r.error_code == 0
        (topic,) = r.topics
        (p,) = topic.partitions
        assert (topic.topic_name, p.partition_index, p.error_code, p.leader_id, p.leader_epoch) == (
            "__cluster_metadata", 0, 0, 0, 1)
        assert p.high_watermark > 0 and p.observers == []
        (voter,) = p.current_voters
        assert (voter.replica_id, voter.log_end_offset) == (0, p.high_watermark)
        if version >= 1:
            assert before <= voter.last_fetch_timestamp == voter.last_caught_up_timestamp
        if version >= 2:
            assert voter.replica_directory_id == ZERO and r.error_message is None
            assert [(n.node_id, [(li.name, li.host, li.port) for li in n.listeners]) for n in r.nodes] == [
                (0, [("PLAINTEXT", "127.0.0.1", server.kafka_port)])]
    # The metadata log grows with every controller change: a new topic is a new stream.
    end = describe_quorum(wire, 2, {"__cluster_metadata": [0]}).topics[0].partitions[0].high_watermark
    wire.create("dq-grows")
    assert describe_quorum(wire, 2, {"__cluster_metadata": [0]}).topics[0].partitions[0].high_watermark > end

    # Anything but exactly __cluster_metadata-0: each requested partition UNKNOWN_TOPIC_OR_PARTITION.
    for topics in ({"__cluster_metadata": [1]}, {"__cluster_metadata": [0, 1]}, {"zz-a": [0]}):
        r = describe_quorum(wire, 2, topics)
        assert r.error_code == 0
        assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics] == [
            (t, [(p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in ps]) for t, ps in topics.items()]


# ------------------------------------------------------------------------------------------ ListOffsets v9+

def test_list_offsets_latest_tiered_without_kafka_tiered_storage(wire):
    wire.create("lo-tiered")
    for _ in range(3):
        assert wire.produce("lo-tiered", 0, batch(b"v")).error_code == 0
    for version in (9, 10):
        tiered = wire.list_offset("lo-tiered", 0, -5, version=version)  # LATEST_TIERED_TIMESTAMP
        assert (tiered.error_code, tiered.offset, tiered.timestamp, tiered.leader_epoch) == (0, -1, -1, -1)
        local_start = wire.list_offset("lo-tiered", 0, -4, version=version)  # EARLIEST_LOCAL_TIMESTAMP
        assert (local_start.error_code, local_start.offset, local_start.leader_epoch) == (0, 0, 0)
        latest = wire.list_offset("lo-tiered", 0, -1, version=version)
        assert (latest.error_code, latest.offset, latest.leader_epoch) == (0, 3, 0)
