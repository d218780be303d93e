"""``millrace cluster up/status/start/down``: a whole cluster (ZooKeeper, 3 logd, 3 nodes) started in the
background by one command, used through the bootstrap list it prints, a node SIGKILLed by its pid and
started again by name, and everything stopped with nothing left behind."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from millrace.gateway.commands.local_cluster import zookeeper_missing
from tests.cluster.local_cluster import LocalClusterCli, millrace, pid_alive

pytestmark = pytest.mark.skipif(zookeeper_missing() is not None, reason=str(zookeeper_missing()))

CONTAINERS = 4


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", retries=10)
    for v in values:
        producer.send(topic, key=v, value=v)
    producer.flush(60)
    producer.close()


def consume(bootstrap: str, topic: str, count: int, group: str) -> list[bytes]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","), group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=30000)
    got: list[bytes] = []
    for message in consumer:
        got.append(message.value)
        if len(got) >= count:
            break
    consumer.close()
    return got


def create_topic(bootstrap: str, topic: str, partitions: int, client: dict[str, Any] | None = None) -> None:
    """``client``: librdkafka settings (a secured cluster's login, ``LocalClusterCli.client_settings``);
    the topic is then made with confluent-kafka's AdminClient."""
    if client:
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.admin import NewTopic as ConfluentNewTopic

        confluent = AdminClient({"bootstrap.servers": bootstrap, **client})  # kept until the answer comes
        confluent.create_topics([ConfluentNewTopic(topic, partitions, 1)])[topic].result(30)
        return
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
    admin.create_topics([NewTopic(topic, partitions, 1)])
    admin.close()


def wait_status(cluster: LocalClusterCli, check: Any, what: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status = cluster.status()
        if check(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last status:\n{json.dumps(status, indent=1)}")
        time.sleep(0.5)


def all_owned(status: dict[str, Any]) -> bool:
    return len(status["containers"]) == CONTAINERS and all(c["owner_live"] for c in status["containers"])


def test_up_use_kill_a_node_start_it_again_and_down(tmp_path: Path) -> None:
    cluster = LocalClusterCli(tmp_path / "c", "--nodes", "3", "--log-replicas", "3",
                              "--containers", str(CONTAINERS), "--session-timeout", "3")
    with cluster:
        up = cluster.summary
        assert sorted(p["role"] for p in up["processes"]) == ["logd"] * 3 + ["node"] * 3 + ["zookeeper"]
        assert [p["name"] for p in up["processes"] if p["role"] == "node"] == ["node-1", "node-2", "node-3"]
        assert len(up["bootstrap"].split(",")) == 3 and len(up["native"]) == 3
        assert all(pid_alive(p["pid"]) for p in up["processes"])
        assert set(up["processes"][4]["ports"]) == {"kafka", "native", "peer", "http"}

        # Kafka clients through the printed bootstrap list.
        values = [str(i).encode() for i in range(200)]
        create_topic(cluster.bootstrap, "local", 6)
        produce(cluster.bootstrap, "local", values)
        assert sorted(consume(cluster.bootstrap, "local", 200, "g1"), key=int) == values

        status = wait_status(cluster, all_owned, "every container owned")
        assert [n["id"] for n in status["nodes"] if n["registered"] and n["running"]] == ["1", "2", "3"]
        assert all(n["serving"] == {"kafka": True, "native": True, "peer": True, "http": True} for n in status["nodes"])
        assert status["controller"] in ("1", "2", "3")
        assert all(n["health"]["healthy"] for n in status["nodes"])  # from each node's HTTP /health
        assert all(c["log_bytes"] >= 0 for c in status["containers"])  # from its owner's /metrics
        assert sorted(len(n["containers"]) for n in status["nodes"]) == [1, 1, 2]  # balanced
        assert {log["name"] for log in status["logs"]} >= {f"container-{c}" for c in range(CONTAINERS)}
        for log in status["logs"]:
            assert sorted(log["ensemble"]) == sorted(up["log_replicas"])
            assert all(r["answered"] and r["lag"] >= 0 for r in log["replicas"])

        # SIGKILL a node that owns containers: they move to the other two, with a new epoch each.
        victim = next(n for n in status["nodes"] if n["containers"])
        moved = {c["id"]: c["epoch"] for c in status["containers"] if c["owner"] == victim["id"]}
        cluster.kill(victim["name"])
        after = wait_status(cluster, lambda s: all_owned(s) and not any(
            c["owner"] == victim["id"] for c in s["containers"]), f"{victim['name']}'s containers to move")
        node = next(n for n in after["nodes"] if n["id"] == victim["id"])
        assert not node["running"] and not node["registered"] and node["containers"] == []
        for c in after["containers"]:
            if c["id"] in moved:
                assert c["epoch"] > moved[c["id"]]
        assert sorted(consume(cluster.bootstrap, "local", 200, "g2"), key=int) == values

        # `cluster start` brings it back on its old ports; it joins and is given containers again.
        old_pid = cluster.pid(victim["name"])
        started = cluster.start(victim["name"])
        assert started["pid"] != old_pid and pid_alive(started["pid"])
        assert started["ports"] == next(p for p in up["processes"] if p["name"] == victim["name"])["ports"]
        back = wait_status(cluster, lambda s: all_owned(s) and all(
            n["registered"] and n["containers"] for n in s["nodes"]), "the node back with containers")
        assert sorted(len(n["containers"]) for n in back["nodes"]) == [1, 1, 2]
        produce(cluster.bootstrap, "local", [b"200"])
        assert sorted(consume(cluster.bootstrap, "local", 201, "g3"), key=int) == [*values, b"200"]

        # A process already running is not started twice.
        again = millrace("cluster", "start", "--dir", str(cluster.directory), "--process", "logd-1")
        assert again.returncode == 1 and "running already" in again.stderr

        pids = cluster.all_pids()
        done = cluster.down()
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == 7 and all(" stopped in " in line for line in lines), done.stdout
        assert not [pid for pid in pids if pid_alive(pid)]
        stopped = cluster.status()
        assert not any(p["running"] for p in stopped["processes"])
        assert "error" in stopped  # no ZooKeeper to ask


def test_commands_on_a_directory_without_a_cluster(tmp_path: Path) -> None:
    done = millrace("cluster", "status", "--dir", str(tmp_path))
    assert done.returncode == 1 and "no cluster in" in done.stderr
    done = millrace("cluster", "down", "--dir", str(tmp_path))
    assert done.returncode == 1 and "no cluster in" in done.stderr


def test_down_does_not_wait_for_a_container_no_node_will_take(tmp_path: Path) -> None:
    """A node stops at once even while its workers wait for a container whose owner died: in ``cluster
    down`` every node closes together, so nobody would take it over; the node must not wait for that.
    (CI once saw ``down`` SIGKILL nodes that had not stopped in 30 s; a worker waiting so holds a node.)"""
    from millrace import StreamManager

    # Two nodes, a session (the local cluster's longest) that outlives down's patience here: node-2's
    # containers stay ownerless until node-1 stops, or is SIGKILLed.
    cluster = LocalClusterCli(tmp_path / "c", "--nodes", "2", "--log-replicas", "3",
                              "--containers", str(CONTAINERS), "--session-timeout", "20",
                              "--node-arg=--retry-bound", "--node-arg=300")
    with cluster:
        with StreamManager(",".join(cluster.summary["native"])) as sm:
            sm.create_scope("s")
            for i in range(8):
                sm.create_stream("s", f"st{i}")
        owners = {c["id"]: c["owner"] for c in wait_status(cluster, all_owned, "every container owned")["containers"]}
        http = next(p["ports"]["http"] for p in cluster.summary["processes"] if p["name"] == "node-1")

        def describe(stream: str) -> dict[str, Any]:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/api/streams/s/{stream}", timeout=600) as r:
                return dict(json.loads(r.read()))

        # A stream whose only segment node-2 holds: describing it on node-1 needs node-2's container.
        stream = next(f"st{i}" for i in range(8) if owners[describe(f"st{i}")["segments"][0]["container"]] == "2")
        cluster.kill("node-2")
        answers: list[object] = []

        def ask() -> None:
            try:
                answers.append(describe(stream))
            except OSError as exc:  # the node stopped under the request
                answers.append(exc)

        asked = threading.Thread(target=ask, daemon=True)
        asked.start()
        asked.join(2.0)  # a worker on node-1 now waits for an owner of node-2's container
        assert not answers, f"node-1 answered for a container nobody owns: {answers}"

        done = millrace("cluster", "down", "--dir", str(cluster.directory), "--timeout", "10")
        lines = done.stdout.splitlines()
        assert done.returncode == 0 and "node-2 " in lines[1] and "not running" in lines[1], done.stdout
        assert "node-1 " in lines[0] and " stopped in " in lines[0] and "not cleanly" not in lines[0], done.stdout
        asked.join(30)
        assert answers and isinstance(answers[0], OSError), answers
