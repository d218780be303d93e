"""Kafka failover on a three-node cluster (``millrace serve --zookeeper``), medians over runs.

Real processes on 127.0.0.1: a standalone ZooKeeper, three ``millrace logd`` replicas, three nodes
(tests/cluster/serve_cluster.py). An idempotent acks=all confluent-kafka producer writes to an
8-partition topic; a node leading some partitions is SIGKILLed. Measured per run:

- failover: from the SIGKILL to the first record acknowledged on one of the dead node's partitions
  (session timeout, container recovery on another node, the topic's reload there, the client's
  metadata refresh and retry);
- all moved: until every one of the dead node's partitions has acknowledged a record again;
- and that every acknowledged record is read back exactly once.

    .venv/bin/python benchmarks/kafka_cluster_failover_bench.py [--runs 3] [--session-timeout 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from millrace.store.cluster.member import connect  # noqa: E402
from tests.cluster import serve_cluster  # noqa: E402
from tests.cluster.serve_cluster import Cluster, wait_for  # noqa: E402
from tests.cluster.test_serve_cluster import IdempotentLoad, agreed_leaders, wire  # noqa: E402
from tests.cluster.zookeeper_process import ZooKeeperProcess, zookeeper_available  # noqa: E402

PARTITIONS = 8


def one_run(zookeeper: ZooKeeperProcess, root: Path, run: int) -> tuple[float, float, int]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--session-timeout", type=float, default=serve_cluster.SESSION_TIMEOUT)
    args = parser.parse_args()
    missing = zookeeper_available()
    if missing:
        raise SystemExit(missing)
    serve_cluster.SESSION_TIMEOUT = args.session_timeout
    with tempfile.TemporaryDirectory(prefix="kafka-failover-") as tmp:
        root = Path(tmp)
        zookeeper = ZooKeeperProcess(root / "zookeeper").start()
        try:
            firsts, alls = [], []
            for run in range(args.runs):
                first, everything, acked = one_run(zookeeper, root, run)
                print(f"run {run}: first ack on a moved partition {first:.2f} s, all moved partitions "
                      f"{everything:.2f} s ({acked} records acknowledged, all read back once)", flush=True)
                firsts.append(first)
                alls.append(everything)
        finally:
            zookeeper.stop()
    print(f"median over {args.runs} runs (session timeout {args.session_timeout:g} s): first ack on a moved "
          f"partition {statistics.median(firsts):.2f} s, all moved partitions {statistics.median(alls):.2f} s")


if __name__ == "__main__":
    main()
