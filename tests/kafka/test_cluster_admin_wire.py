"""The cluster-admin APIs of a single node, spoken with our own codec against a real server, each checked
against the answers Kafka 4.0 gives: DescribeTopicPartitions (KIP-966, with its cursor pagination)."""

from __future__ import annotations

from typing import Any

import pytest

from millrace.gateway.kafka_protocol.codec import request_class
from millrace.gateway.kafka_protocol.errors import ErrorCode
from tests.kafka.test_metadata import ZERO, Wire, only
from tests.kafka.wire import local
from tests.server_process import ServerProcess

DESCRIBE_TOPIC_PARTITIONS = 75
DTP = request_class(DESCRIBE_TOPIC_PARTITIONS)
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
