"""The web console's API on a cluster: every node describes the cluster as ZooKeeper has it (nodes,
container owners and epochs, its own containers' replicated logs), any node draws a stream's heat map,
and any node shows a native reader group (its state segment read through the node owning it), while the
consumer groups and a partition's records are answered by the node coordinating or leading them, the
others naming it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.serve_cluster import CONTAINERS, Cluster, NodeProcess

pytestmark = pytest.mark.timeout(240)


def get(node: NodeProcess, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}{path}", timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_console_api_on_each_node(zk_hosts: str, tmp_path: Path) -> None:
    with Cluster(tmp_path, zk_hosts, 2) as cluster:
        for node in cluster.nodes:
            status, described = get(node, "/api/cluster")
            assert status == 200, described
            assert described["mode"] == "cluster" and described["this_node"] == str(node.node_id)
            assert sorted(n["id"] for n in described["nodes"]) == [1, 2]
            owners = {c["id"]: c["owner"] for c in described["containers"]}
            assert sorted(owners) == list(range(CONTAINERS)) and set(owners.values()) <= {"1", "2"}
            assert all(c["epoch"] >= 1 and c["state"] == "owned" for c in described["containers"])
            held = sorted(c for n in described["nodes"] for c in n["containers"])
            assert held == list(range(CONTAINERS))
            # This node's containers' replicated logs: each on the three replicas, nothing to mend.
            mine = [c["id"] for c in described["containers"] if c["owner"] == str(node.node_id)]
            assert sorted(log["container"] for log in described["log_replicas"]) == sorted(mine)
            assert all(len(log["ensemble"]) == 3 and log["under_replicated_fragments"] == 0
                       and sorted(log["replica_lag"]) == sorted(log["ensemble"])
                       and all(behind >= 0 for behind in log["replica_lag"].values())
                       for log in described["log_replicas"])

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("spread", 4, 1, config={"millrace.segments.initial": "1"})])["spread"].result(60)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "watchers",
                             "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("spread", 0, 0)], asynchronous=False)
        consumer.close()

        answers = {node.node_id: get(node, "/api/groups") for node in cluster.nodes}
        coordinators = [n for n in cluster.nodes if answers[n.node_id][0] == 200]
        assert len(coordinators) == 1, answers
        (coordinator,) = coordinators
        assert "watchers" in [g["group_id"] for g in answers[coordinator.node_id][1]["groups"]]
        (other,) = [n for n in cluster.nodes if n is not coordinator]
        status, refused = answers[other.node_id]
        assert status == 503
        assert f"node {coordinator.node_id} does, HTTP API at 127.0.0.1:{coordinator.http_port}" in refused["error"]

        for node in cluster.nodes:
            status, heat = get(node, "/api/heatmap/kafka/spread")
            assert status == 200, heat
            assert [(s["key_start"], s["key_end"]) for s in heat["segments"]] == [(0.0, 1.0)]

        # A native reader group: every node folds its state segment (wherever its container runs) alike.
        from millrace.client.manager import StreamManager

        first = cluster.nodes[0]
        with StreamManager(f"tcp://127.0.0.1:{first.native_port}") as sm:
            sm.create_scope("plant")
            sm.create_stream("plant", "meters", initial_segments=2)
            with sm.create_writer("plant", "meters") as writer:
                for i in range(10):
                    writer.write_event(b"m" * 100, routing_key=f"meter-{i}").result()
            sm.create_reader_group("floor", "plant", "meters").close()
        shown = {node.node_id: get(node, "/api/reader-groups/plant/floor") for node in cluster.nodes}
        assert all(status == 200 for status, _ in shown.values()), shown
        unread = {body["unread_bytes"] for _, body in shown.values()}
        assert len(unread) == 1 and unread.pop() > 1000  # nothing read yet: all ten events
        assert all(len(body["segments"]) == 2 and all(s["state"] == "unassigned" for s in body["segments"])
                   for _, body in shown.values())

        # A partition's records come from the node leading it; the other names that node.
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        producer.produce("spread", b"found on the leader", partition=2)
        assert producer.flush(30) == 0
        browsed = {node.node_id: get(node, "/api/topics/spread/messages?partition=2&offset=0")
                   for node in cluster.nodes}
        leaders = [n for n in cluster.nodes if browsed[n.node_id][0] == 200]
        assert len(leaders) == 1, browsed
        (leader,) = leaders
        assert [r["value"] for r in browsed[leader.node_id][1]["records"]] == ["found on the leader"]
        (follower,) = [n for n in cluster.nodes if n is not leader]
        status, refused = browsed[follower.node_id]
        assert status == 503, refused
        assert f"node {leader.node_id} does, HTTP API at 127.0.0.1:{leader.http_port}" in refused["error"]
