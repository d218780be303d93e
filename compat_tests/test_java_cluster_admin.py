"""The Java Admin client 4.x, unmodified, through the cluster-admin APIs of a one-node Millrace server:
describeTopics (DescribeTopicPartitions, followed page by page through its cursor), describeLogDirs and
alterReplicaLogDirs, describeProducers, electLeaders, alterPartitionReassignments and
listPartitionReassignments, describeMetadataQuorum. Each answer is what a one-broker Kafka 4.0 cluster gives.

compat_tests/java/ClusterAdminClient.java is compiled against the 4.x jars (compat_tests/java_support.py)
and run once with every scenario; its JSON lines are checked here."""

from __future__ import annotations

import os
import uuid

import pytest

from compat_tests.java_support import JavaRun, run_main
from tests.server_process import ServerProcess

RUN_TIMEOUT = 180.0
SCENARIOS = ["describe_topics", "log_dirs", "producers", "elections", "reassignments", "quorum"]

pytestmark = pytest.mark.timeout(int(RUN_TIMEOUT) + 60)


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"jca-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def java(server: ServerProcess, prefix: str) -> JavaRun:
    log_dir = os.path.abspath(server.data_dir)
    return run_main("4.x", "ClusterAdminClient", [server.bootstrap, prefix, log_dir, *SCENARIOS], RUN_TIMEOUT)


def test_describe_topics_pages_through_describe_topic_partitions(java: JavaRun, prefix: str) -> None:
    described = {e["name"]: e for e in java.of("describe_topics", "described")}
    assert set(described) == {f"{prefix}-dtp-a", f"{prefix}-dtp-b"}
    # Two partitions a response: 5 + 3 partitions arrive over four pages, none lost or repeated.
    for name, count in ((f"{prefix}-dtp-a", 5), (f"{prefix}-dtp-b", 3)):
        d = described[name]
        assert d["partitions"] == list(range(count))
        assert (d["leaders"], d["replicas"], d["isr"]) == ([0] * count, [[0]] * count, [[0]] * count)
        assert not d["internal"] and d["topicId"] != "AAAAAAAAAAAAAAAAAAAAAA"
    assert java.of("describe_topics", "missing")[0]["outcome"] == "UnknownTopicOrPartitionException"


def test_log_dirs(java: JavaRun, server: ServerProcess) -> None:
    (log_dir,) = java.of("log_dirs", "log_dir")
    assert (log_dir["broker"], log_dir["path"], log_dir["error"]) == (0, os.path.abspath(server.data_dir), None)
    assert log_dir["totalBytes"] >= log_dir["usableBytes"] > 0
    sizes = log_dir["sizes"]
    assert sizes["0"] == [0, 0, False]
    assert sizes["1"][0] > 1000 and sizes["1"][1:] == [0, False]  # one batch of a 1000-byte record
    (moved,) = java.of("log_dirs", "moved")
    assert (moved["same_dir"], moved["other_dir"]) == ("ok", "LogDirNotFoundException")


def test_describe_producers_during_and_after_a_transaction(java: JavaRun) -> None:
    (ongoing,) = java.of("producers", "ongoing")
    (committed,) = java.of("producers", "committed")
    (during,) = ongoing["producers"]
    (after,) = committed["producers"]
    # Three records in an open transaction from offset 0, no marker yet (no coordinator epoch).
    assert (during["producerEpoch"], during["lastSequence"], during["coordinatorEpoch"],
            during["txnStartOffset"]) == (0, 2, None, 0)
    # The commit marker closed it and carries the coordinator's epoch, 0.
    assert (after["producerId"], after["lastSequence"], after["coordinatorEpoch"], after["txnStartOffset"]) == (
        during["producerId"], 2, 0, None)


def test_elect_leaders_is_not_needed(java: JavaRun, prefix: str) -> None:
    elected = {e["type"]: e["results"] for e in java.of("elections", "elected")}
    expected = {f"{prefix}-elect-0": "ElectionNotNeededException", f"{prefix}-elect-1": "ElectionNotNeededException",
                f"{prefix}-elect-missing-0": "UnknownTopicOrPartitionException"}
    assert elected == {"PREFERRED": expected, "UNCLEAN": expected}


def test_partition_reassignments(java: JavaRun) -> None:
    (altered,) = java.of("reassignments", "altered")
    assert (altered["same_broker"], altered["other_broker"], altered["cancel"]) == (
        "ok", "InvalidReplicaAssignmentException", "NoReassignmentInProgressException")
    assert java.of("reassignments", "listed")[0]["count"] == 0


def test_describe_metadata_quorum(java: JavaRun, server: ServerProcess) -> None:
    (q,) = java.of("quorum", "quorum")
    assert (q["leaderId"], q["leaderEpoch"], q["observers"]) == (0, 1, 0)
    assert q["highWatermark"] > 0 and q["voters"] == [[0, q["highWatermark"]]]
    assert q["nodes"] == {"0": [f"PLAINTEXT://127.0.0.1:{server.kafka_port}"]}
