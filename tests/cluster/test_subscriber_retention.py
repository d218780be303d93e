"""Consumption-based retention on a cluster made by ``millrace cluster up`` (ZooKeeper, 3 logd, 3 nodes),
the stream's segments on more than one node: the elected controller truncates the stream at the lower
bound of its subscriber groups' retention cuts, each segment on the node that owns it, never past a
position a subscriber has not read (its reader goes on without TruncatedDataError and gets every event
it had not read), and, once every subscriber has read and released everything, up to the tail."""

from __future__ import annotations

from pathlib import Path

import pytest

from millrace import (
    RetentionPolicy,
    StreamCut,
    StreamDataRetention,
    StreamManager,
    StringSerializer,
)
from millrace.gateway.commands.local_cluster import zookeeper_missing
from millrace.protocol.names import segment_name
from millrace.store.segment_store import container_index
from tests.client.conftest import drain
from tests.cluster.local_cluster import LocalClusterCli
from tests.cluster.test_local_cluster import CONTAINERS, all_owned, wait_status
from tests.waiting import wait_for

pytestmark = [pytest.mark.skipif(zookeeper_missing() is not None, reason=str(zookeeper_missing())),
              pytest.mark.timeout(300)]

SCOPE = "consume"
SEGMENTS = 4  # a native stream's 16 partitions divide evenly among them


def spread_stream() -> str:
    """A stream name whose first segments live in at least three of the four containers, so on at least
    two of the three nodes whatever the assignment (a node owns at most two containers)."""
    for n in range(100):
        name = f"clicks{n}"
        if len({container_index(segment_name(SCOPE, name, i), CONTAINERS) for i in range(SEGMENTS)}) >= 3:
            return name
    raise AssertionError("no stream name spreads over the containers")


def test_retention_follows_every_subscriber_across_nodes(tmp_path: Path) -> None:
    stream = spread_stream()
    with LocalClusterCli(tmp_path / "cluster", "--nodes", "3", "--log-replicas", "3", "--containers",
                         str(CONTAINERS), "--session-timeout", "3",
                         "--node-arg=--retention-check-seconds=0.2") as cluster:
        status = wait_status(cluster, all_owned, "every container owned")
        owners = {c["id"]: c["owner"] for c in status["containers"]}
        nodes = {owners[container_index(segment_name(SCOPE, stream, i), CONTAINERS)] for i in range(SEGMENTS)}
        assert len(nodes) > 1, f"the stream's segments are all on node {nodes}"
        first, second = cluster.summary["native"][0], cluster.summary["native"][1]
        with StreamManager(first, timeout=30.0) as sm, StreamManager(second, timeout=30.0) as other:
            sm.create_scope(SCOPE)
            sm.create_stream(SCOPE, stream, initial_segments=SEGMENTS, retention=RetentionPolicy.by_consumption())

            def write(phase: str) -> StreamCut:
                with sm.create_writer(SCOPE, stream, StringSerializer()) as writer:
                    for i in range(60):
                        writer.write_event(f"{phase}{i}", routing_key=f"k{i % 16}")
                return sm.tail_cut(SCOPE, stream)

            manual = StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT
            # Two subscribers from the head, one through each of two nodes.
            fast = sm.create_reader_group("fast", SCOPE, stream, serializer=StringSerializer(), retention_type=manual)
            slow = other.create_reader_group("slow", SCOPE, stream, serializer=StringSerializer(),
                                             retention_type=manual)
            # The slow group reads a and releases it; then b comes, which the fast group reads and
            # releases with a, while the slow one has not read it yet.
            first_part = write("a")
            assert len({sid for sid, offset in first_part.positions.items() if offset > 0}) == SEGMENTS
            with slow.create_reader("s") as reader:
                assert sorted(e.data for e in drain(reader)) == sorted(f"a{i}" for i in range(60))
            slow.update_retention_stream_cut(first_part)
            tail = write("b")
            with fast.create_reader("f") as reader:
                assert len(drain(reader)) == 120
            fast.update_retention_stream_cut(tail)

            def starts(manager: StreamManager) -> dict[int, int]:
                return {sid: manager.controller.segment_info(segment_name(SCOPE, stream, sid)).start_offset
                        for sid in first_part.positions}

            # Retention truncates every segment, on its own node, up to the slow group's cut and no further.
            # (The stream's head is recorded first, then each segment truncated: wait for the segments.)
            wait_for(lambda: starts(sm) == first_part.positions, "retention up to the slow group's cut")
            assert sm.head_cut(SCOPE, stream) == first_part
            with slow.create_reader("s") as reader:  # no TruncatedDataError: nothing it had not read is gone
                assert sorted(e.data for e in drain(reader)) == sorted(f"b{i}" for i in range(60))
            assert other.head_cut(SCOPE, stream) == first_part

            # Once every subscriber has read and released everything, retention takes it all.
            slow.update_retention_stream_cut(tail)
            wait_for(lambda: starts(other) == tail.positions, "retention up to the tail")
            assert sm.head_cut(SCOPE, stream) == tail
