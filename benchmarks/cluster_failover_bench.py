"""Container failover times of a ZooKeeper-coordinated cluster (store/cluster/), medians over runs.

Real processes on 127.0.0.1: a standalone ZooKeeper, three ``millrace logd`` replicas, and per run a
node process (tests/cluster/node_child.py) appending to its two containers in a loop, plus a second
node in this process. Measured, each from the event to the container running (recovered) on the
other node:

- handover: the second node joins; the first stops one container cleanly, then it moves;
- SIGKILL: the first node is killed under load; its container moves once its ZooKeeper session
  (``--session-timeout``) expires, so this is about the session timeout plus fencing and recovery.

    .venv/bin/python benchmarks/cluster_failover_bench.py [--runs 5] [--session-timeout 4]
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
from tests.cluster.test_container_failover import NodeProcess, Nodes  # noqa: E402
from tests.cluster.test_membership import wait_until  # noqa: E402
from tests.cluster.zookeeper_process import ZooKeeperProcess, zookeeper_available  # noqa: E402
from tests.durablelog.logd_process import Replicas  # noqa: E402


def one_run(zookeeper: ZooKeeperProcess, root: Path, run: int, session_timeout: float) -> tuple[float, float, int]:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--session-timeout", type=float, default=4.0, help="the killed node's session, seconds")
    args = parser.parse_args()
    missing = zookeeper_available()
    if missing:
        print(f"cluster_failover_bench: {missing}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        zookeeper = ZooKeeperProcess(root / "zookeeper").start()
        try:
            results = [one_run(zookeeper, root, run, args.session_timeout) for run in range(args.runs)]
        finally:
            zookeeper.stop()
    handovers, failovers, acked = zip(*results, strict=True)
    print(f"runs {args.runs}, session timeout {args.session_timeout:g} s")
    print(f"handover (clean stop, then start elsewhere): median {statistics.median(handovers) * 1000:.0f} ms "
          f"(min {min(handovers) * 1000:.0f}, max {max(handovers) * 1000:.0f})")
    print(f"SIGKILL -> recovered elsewhere: median {statistics.median(failovers):.2f} s "
          f"(min {min(failovers):.2f}, max {max(failovers):.2f}); of which the session timeout "
          f"{args.session_timeout:g} s; {statistics.median(acked):.0f} appends in the log at the kill (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
