"""Failover times of a ZooKeeper-coordinated cluster, real processes on 127.0.0.1: a standalone ZooKeeper
and three ``millrace logd`` replicas, medians over --runs.

- ``containers``: a node process (tests/cluster/node_child.py) appends to its two containers in a loop,
  a second node in this process joins; measured from the event to the container running (recovered)
  on the other node: a clean handover (the second node joins, the first stops one container), then a
  SIGKILL of the first under load (the container moves once its ZooKeeper session expires, so this is
  about --session-timeout plus fencing and recovery).
- ``kafka``: three ``millrace serve --zookeeper`` nodes; an idempotent acks=all confluent-kafka producer
  writes to an 8-partition topic and a node leading some partitions is SIGKILLed: from the kill to the
  first record acknowledged on one of its partitions elsewhere, and until all of them have acknowledged
  again; every acknowledged record is read back exactly once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import Replicas, Scenario, machine_floors
from millrace.store.cluster.member import connect
from tests.cluster import serve_cluster
from tests.cluster.serve_cluster import Cluster, wait_for
from tests.cluster.test_container_failover import NodeProcess, Nodes
from tests.cluster.test_membership import wait_until
from tests.cluster.test_serve_cluster import IdempotentLoad, agreed_leaders, wire
from tests.cluster.zookeeper_process import ZooKeeperProcess, zookeeper_available

PARTITIONS = 8


def container_failover_once(zookeeper: ZooKeeperProcess, root: Path, run: int, session_timeout: float) -> tuple[float, float, int]:
    """(handover seconds, SIGKILL-to-running seconds, appends acknowledged before the kill)."""
    chroot = f"/bench-{run}"
    client = connect(zookeeper.hosts)
    client.ensure_path(chroot)
    client.stop()
    client.close()
    replicas = Replicas(root / f"replicas-{run}", 3).start()
    nodes = Nodes(zookeeper.hosts + chroot, replicas, root / f"lts-{run}")
    child = NodeProcess(zookeeper.hosts + chroot, "k", replicas, root / f"lts-{run}", session_timeout)
    try:
        wait_until(lambda: child.acked_count(0) >= 50 and child.acked_count(1) >= 50, "k writes to both")
        began = time.monotonic()
        b = nodes.join("b")
        wait_until(lambda: b.running() == {1}, "container 1 handed over")
        handover = time.monotonic() - began
        under_load = child.acked_count(0)
        wait_until(lambda: child.acked_count(0) >= under_load + 100, "k keeps writing")
        began = time.monotonic()
        child.kill()
        wait_until(lambda: b.running() == {0, 1}, "container 0 recovered on b")
        failover = time.monotonic() - began
        return handover, failover, child.acked_count(0)
    finally:
        child.kill()
        nodes.close()
        replicas.close()


def kafka_failover_once(zookeeper: ZooKeeperProcess, root: Path, run: int) -> tuple[float, float, int]:
    """(seconds to the first ack on a moved partition, seconds until all moved partitions acked, acks)."""
    chroot = f"/kafka-failover-{run}"  # a fresh cluster per run
    client = connect(zookeeper.hosts)
    client.ensure_path(chroot)
    client.stop()
    client.close()
    cluster = Cluster(root / f"run-{run}", zookeeper.hosts + chroot)
    try:
        cluster.start()
        topic = f"failover-{run}"
        with wire(cluster.nodes[0]) as c:
            c.create(topic, PARTITIONS)
        leader_of = agreed_leaders(cluster, topic, PARTITIONS)
        victim = next(n for n in cluster.nodes[1:] if n.node_id in leader_of.values())
        moved = {p for p, leader in leader_of.items() if leader == victim.node_id}
        load = IdempotentLoad(cluster, topic)
        wait_for(lambda: len(load.acked) > 500, "acknowledged records before the kill")
        victim.kill()
        killed, at = time.monotonic(), len(load.acked)
        first: list[float] = []
        seen: set[int] = set()

        def progress() -> bool:
            for p in load.acked_partitions[at:]:
                if p in moved and p not in seen:
                    seen.add(p)
                    if not first:
                        first.append(time.monotonic() - killed)
            return seen == moved

        wait_for(progress, "every moved partition acknowledging again", timeout=120)
        everything = time.monotonic() - killed
        load.finish()
        load.check_read_back(cluster.nodes[0].bootstrap)
        return first[0], everything, len(load.acked)
    finally:
        cluster.stop()


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--session-timeout", type=float, default=None,
                        help="the nodes' ZooKeeper session, seconds (default: 4 for containers, the test "
                             "cluster's for kafka)")
    parser.add_argument("--parts", default="containers,kafka", help="of containers,kafka")


def run_cluster(args: argparse.Namespace) -> dict[str, Any]:
    missing = zookeeper_available()
    if missing:
        print(f"cluster: {missing}", file=sys.stderr)
        raise SystemExit(1)
    parts = args.parts.split(",")
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="millrace-failover-") as tmp:
        root = Path(tmp)
        result["floors"] = machine_floors(tmp, loopback=False)
        zookeeper = ZooKeeperProcess(root / "zookeeper").start()
        try:
            if "containers" in parts:
                session = args.session_timeout or 4.0
                runs = [container_failover_once(zookeeper, root, run, session) for run in range(args.runs)]
                handovers, failovers, acked = zip(*runs, strict=True)
                result["containers"] = {"session_timeout_s": session,
                                        "handover_ms": statistics.median(handovers) * 1000,
                                        "sigkill_to_recovered_s": statistics.median(failovers)}
                print(f"containers, {args.runs} runs, session timeout {session:g} s: handover median "
                      f"{statistics.median(handovers) * 1000:.0f} ms (min {min(handovers) * 1000:.0f}, max "
                      f"{max(handovers) * 1000:.0f}); SIGKILL -> recovered elsewhere median "
                      f"{statistics.median(failovers):.2f} s (min {min(failovers):.2f}, max {max(failovers):.2f}); "
                      f"{statistics.median(acked):.0f} appends in the log at the kill (median)", flush=True)
            if "kafka" in parts:
                if args.session_timeout:
                    serve_cluster.SESSION_TIMEOUT = args.session_timeout
                firsts, alls = [], []
                for run in range(args.runs):
                    first, everything, acked = kafka_failover_once(zookeeper, root, run)
                    print(f"kafka run {run}: first ack on a moved partition {first:.2f} s, all moved partitions "
                          f"{everything:.2f} s ({acked} records acknowledged, all read back once)", flush=True)
                    firsts.append(first)
                    alls.append(everything)
                result["kafka"] = {"session_timeout_s": serve_cluster.SESSION_TIMEOUT,
                                   "first_ack_s": statistics.median(firsts), "all_moved_s": statistics.median(alls)}
                print(f"kafka, median over {args.runs} runs (session timeout {serve_cluster.SESSION_TIMEOUT:g} s): "
                      f"first ack on a moved partition {statistics.median(firsts):.2f} s, all moved partitions "
                      f"{statistics.median(alls):.2f} s", flush=True)
        finally:
            zookeeper.stop()
    return result


SCENARIOS = [Scenario("cluster", "a three-node cluster: container handover and SIGKILL failover; Kafka "
                      "partitions moving after a leader's SIGKILL", add_cluster_arguments, run_cluster,
                      __doc__ or "")]
