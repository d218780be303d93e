"""Segment containers that move between nodes (store/cluster/containers.py) with real ZooKeeper and real
logd replicas: a clean handover when a node joins; a node whose session dies while its container
keeps running (a zombie) -- the new owner recovers every acknowledged append and the zombie can append
nothing more; a node process SIGKILLed under load -- no acknowledged append lost or duplicated."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from millrace.store.cluster.containers import SegmentContainerHost
from millrace.store.cluster.layout import NodeInfo
from millrace.store.cluster.node import ClusterNode, ClusterNodeConfig
from millrace.store.containers.container import SegmentContainer
from millrace.store.errors import StoreError
from millrace.store.lts.filesystem import FileSystemChunkStorage
from tests.cluster.test_membership import wait_until
from tests.durablelog.logd_process import Replicas
from tests.server_process import REPO_ROOT

CONTAINERS = 2
# The killed node's session: short so the test is quick, long enough that a loaded machine does not
# expire it before the kill.
CHILD_SESSION_TIMEOUT = 4.0


class ZombieCapableHost(SegmentContainerHost):
    """With ``deaf`` set, ``stop_container`` is never heard: the container keeps running, as on a node
    that is paused or partitioned while its term ends."""

    deaf = False

    def stop_container(self, container_id: int) -> None:
        if not self.deaf:
            super().stop_container(container_id)


@dataclass
class Node:
    node: ClusterNode

    @property
    def host(self) -> ZombieCapableHost:
        assert isinstance(self.node.containers, ZombieCapableHost)
        return self.node.containers

    @property
    def client(self) -> KazooClient:
        assert self.node.client is not None
        return self.node.client

    def running(self) -> set[int]:
        return set(self.host.terms())


class Nodes:
    def __init__(self, hosts: str, replicas: Replicas, lts: Path) -> None:
        self.hosts = hosts
        self.replicas = replicas
        self.lts = lts
        self.started: list[Node] = []

    def join(self, node_id: str) -> Node:
        config = ClusterNodeConfig(self.hosts, NodeInfo(node_id, "127.0.0.1"), CONTAINERS, self.replicas.config())
        node = Node(ClusterNode(config, FileSystemChunkStorage(str(self.lts)), host_factory=ZombieCapableHost).start())
        self.started.append(node)
        return node

    def close(self) -> None:
        for node in self.started:
            if node.node.containers is not None:
                node.host.deaf = False  # so closing stops the zombie's container too
            node.node.close()


@pytest.fixture
def nodes(zk_hosts: str, tmp_path: Path) -> Iterator[Nodes]:
    replicas = Replicas(tmp_path / "replicas", 3).start()
    group = Nodes(zk_hosts, replicas, tmp_path / "lts")
    try:
        yield group
    finally:
        group.close()
        replicas.close()


def read_segment(container: SegmentContainer, name: str) -> bytes:
    """Everything the segment holds, read in as many calls as the container answers with."""
    length = container.get_info(name).length
    data = b""
    while len(data) < length:
        data += container.read(name, len(data), length - len(data)).result(30).data
    return data


def test_containers_move_with_their_data_and_a_zombie_owner_is_fenced(nodes: Nodes) -> None:
    a = nodes.join("a")
    wait_until(lambda: a.running() == {0, 1}, "a runs both containers")
    moved = a.host.container(1)
    moved.create_segment("seg-1", {}).result(30)
    for i in range(50):
        moved.append("seg-1", f"one-{i};".encode(), None, []).result(30)

    b = nodes.join("b")  # a keeps container 0 and hands container 1 over cleanly
    wait_until(lambda: a.running() == {0} and b.running() == {1}, "a runs 0, b runs 1")
    assert b.host.terms()[1].epoch == 2
    assert moved.state == "closed"  # handed over: closed cleanly before b opened its log
    assert read_segment(b.host.container(1), "seg-1") == b"".join(f"one-{i};".encode() for i in range(50))

    kept = a.host.container(0)
    kept.create_segment("seg-0", {}).result(30)
    acknowledged = b"".join(f"zero-{i};".encode() for i in range(50))
    for i in range(50):
        kept.append("seg-0", f"zero-{i};".encode(), None, []).result(30)
    a.host.deaf = True
    a.client.stop()  # a's session ends; its container 0 never hears it and runs on as a zombie
    wait_until(lambda: b.running() == {0, 1}, "b runs both containers")
    assert b.host.terms()[0].epoch == 2
    taken = b.host.container(0)
    assert read_segment(taken, "seg-0") == acknowledged  # every acknowledged append, recovered
    with pytest.raises(StoreError) as refused:
        kept.append("seg-0", b"zombie;", None, []).result(30)  # fenced on the replicas
    assert "DataLogWriterFencedError" in str(refused.value)  # the container failed on its fenced log
    assert taken.epoch > kept.epoch
    taken.append("seg-0", b"after;", None, []).result(30)
    assert read_segment(taken, "seg-0") == acknowledged + b"after;"
    kept.close()


class NodeProcess:
    """tests/cluster/node_child.py: a node that writes numbered records to every container it runs."""

    def __init__(self, hosts: str, node_id: str, replicas: Replicas, lts: Path,
                 session_timeout: float = CHILD_SESSION_TIMEOUT) -> None:
        self.lines: list[str] = []
        self.acked: dict[int, list[int]] = {}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.node_child", hosts, node_id, str(CONTAINERS), str(session_timeout),
             ",".join(replicas.addresses), str(lts)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
        threading.Thread(target=self._pump, daemon=True).start()
        wait_until(lambda: "ready" in self.lines or self.proc.poll() is not None, f"{node_id} ready")
        assert self.proc.poll() is None, f"{node_id} exited"

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("acked "):
                _, cid, n = line.split()
                self.acked.setdefault(int(cid), []).append(int(n))
            else:
                self.lines.append(line)

    def acked_count(self, container_id: int) -> int:
        return len(self.acked.get(container_id, []))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def records_of(container: SegmentContainer, container_id: int) -> list[int]:
    """The record numbers of ``seg-<id>`` in segment order."""
    numbers = []
    for record in read_segment(container, f"seg-{container_id}").split(b";"):
        if record:
            cid, n = record.decode().split(":")
            assert int(cid) == container_id
            numbers.append(int(n))
    return numbers


def test_a_sigkilled_node_under_load_loses_no_acknowledged_append(nodes: Nodes, zk_hosts: str) -> None:
    child = NodeProcess(zk_hosts, "k", nodes.replicas, nodes.lts)
    try:
        wait_until(lambda: child.acked_count(0) >= 50 and child.acked_count(1) >= 50, "k writes to both")
        b = nodes.join("b")  # container 1 is handed over under load
        wait_until(lambda: b.running() == {1}, "b runs container 1")
        under_load = child.acked_count(0)
        wait_until(lambda: child.acked_count(0) >= under_load + 200, "k keeps writing to container 0")
        child.kill()
        wait_until(lambda: b.running() == {0, 1}, "b runs container 0 once k's session expired")
        for cid in (0, 1):
            acked = child.acked[cid]
            assert acked == list(range(len(acked)))
            records = records_of(b.host.container(cid), cid)
            # In order, each once, none missing; anything past the last acknowledgement is a write that
            # reached a quorum before the kill but whose acknowledgement was never printed.
            assert records == list(range(len(records)))
            assert len(records) >= len(acked)
            print(f"container {cid}: acknowledged {len(acked)}, read {len(records)}, lost 0, duplicated 0, "
                  f"unacknowledged but kept {len(records) - len(acked)}")
    finally:
        child.kill()
