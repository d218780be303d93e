"""The Java kafka-clients (3.9 and 4.x), unmodified, against a three-node Millrace cluster (real
ZooKeeper, three logd replicas, three ``millrace serve --zookeeper`` processes), bootstrapped from one
node: topics auto-created there have partitions led by every node, so the default (idempotent)
producer and the consumers talk to all three, and a consumer group is coordinated by whichever node
owns the groups table's container.

One JVM per client version runs CompatClient's ``bulk`` and ``group`` scenarios (as in
test_java_clients.py, whose checks are reused)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.common import check_consumed, placed_count, records_to_lines, sample_records
from compat_tests.java_support import VERSIONS, JavaRun, placed, run_java
from compat_tests.test_java_clients import produced
from tests.cluster.serve_cluster import Cluster
from tests.cluster.zookeeper_process import ZooKeeperProcess, zookeeper_available

RUN_TIMEOUT = 240.0
BULK = 5000
GROUP_RECORDS = sample_records("java-cluster-group", count=30, big=0)

pytestmark = pytest.mark.timeout(int(RUN_TIMEOUT) + 120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    missing = zookeeper_available()
    if missing:
        pytest.skip(missing)
    root = tmp_path_factory.mktemp("cluster")
    zookeeper = ZooKeeperProcess(root / "zookeeper").start()
    try:
        with Cluster(root, zookeeper.hosts, 3, "--default-partitions", "6") as c:
            yield c
    finally:
        zookeeper.stop()


@pytest.fixture(scope="module", params=VERSIONS)
def java(request: pytest.FixtureRequest, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> JavaRun:
    version: str = request.param
    work: Path = tmp_path_factory.mktemp(f"java-cluster-{version}")
    (work / "group.tsv").write_text(records_to_lines(GROUP_RECORDS))
    prefix = f"javacluster{version.replace('.', '')}-{uuid.uuid4().hex[:8]}"
    return run_java(version, cluster.nodes[1].bootstrap, work, prefix, [f"bulk:{BULK}", "group"], RUN_TIMEOUT)


def test_idempotent_producer_and_reader_across_three_nodes(java: JavaRun) -> None:
    scenario = f"bulk:{BULK}"
    (produced_all,) = java.of(scenario, "produced_all")
    sent: dict[int, list[tuple[int, int]]] = {}
    for i, (p, o) in enumerate(zip(produced_all["partitions"], produced_all["offsets"], strict=True)):
        sent.setdefault(p, []).append((o, i))
    assert len(sent) == 6, sorted(sent)  # keys spread over every partition, so over every node
    for p, pairs in sent.items():
        assert [o for o, _ in pairs] == list(range(len(pairs))), f"partition {p}: offsets not dense in send order"
    (consumed_all,) = java.of(scenario, "consumed_all")
    got: dict[int, list[tuple[int, int]]] = {}
    for p, o, i in zip(consumed_all["partitions"], consumed_all["offsets"], consumed_all["indexes"], strict=True):
        got.setdefault(p, []).append((o, i))
    assert got == sent


def test_group_commit_and_resume_on_the_coordinating_node(java: JavaRun) -> None:
    expected = produced(java, "group", GROUP_RECORDS)
    first = [placed(e) for e in java.of("group", "first")]
    assert first, "the first group member received nothing"
    committed = {e["partition"]: e["offset"] for e in java.of("group", "committed")}
    start = {p: o for p, o in committed.items() if o >= 0}
    second = [placed(e) for e in java.of("group", "second")]
    assert len(second) == placed_count(expected, start)
    check_consumed(expected, second, start=start)
