"""A cluster of real processes on 127.0.0.1 for the tests: 3 ``millrace logd`` replicas and N
``millrace serve --zookeeper ... --node-id N`` nodes sharing one long-term storage directory (the
ZooKeeper server is the test module's fixture)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Self

from tests.durablelog.logd_process import Replicas
from tests.server_process import ServerProcess
from tests.waiting import wait_for  # noqa: F401 - the cluster tests' wait, kept importable from here

CONTAINERS = 4
SESSION_TIMEOUT = 3.0  # seconds: a SIGKILLed node's containers move this long after its death


class NodeProcess(ServerProcess):
    """One cluster node: ``millrace serve --zookeeper``; ports (kafka, native, peer) are chosen free."""

    name = "node"

    def __init__(self, root: Path, node_id: int, zookeeper: str, replicas: tuple[str, ...], *extra: str) -> None:
        super().__init__(str(root / f"node-{node_id}"), "--zookeeper", zookeeper, "--node-id", str(node_id),
                         "--peer-port", "0", "--log-replicas", ",".join(replicas), "--lts", str(root / "lts"),
                         "--containers", str(CONTAINERS), "--session-timeout", str(SESSION_TIMEOUT), *extra)
        self.node_id = node_id


class Cluster:
    """Replicas and nodes; ``bootstrap`` lists every node's Kafka listener."""

    def __init__(self, root: Path, zookeeper: str, nodes: int = 3, *extra: str) -> None:
        self.root = root
        self.zookeeper = zookeeper
        self.replicas = Replicas(root / "replicas", 3)
        self.count = nodes
        self.extra = extra
        self.nodes: list[NodeProcess] = []

    def start(self, together: bool = False) -> Self:
        """Start the replicas, then the nodes: one after the other, or ``together`` (all at once, each
        reading tables on the others' containers while it builds)."""
        self.replicas.start()
        self.nodes = [NodeProcess(self.root, i + 1, self.zookeeper, self.replicas.addresses, *self.extra)
                      for i in range(self.count)]
        if not together:
            for node in self.nodes:
                node.start(timeout=120)
            return self
        failures: list[BaseException] = []

        def start(node: NodeProcess) -> None:
            try:
                node.start(timeout=120)
            except BaseException as exc:  # noqa: BLE001 - reported below, after every node tried
                failures.append(exc)

        starting = [threading.Thread(target=start, args=(node,)) for node in self.nodes]
        for thread in starting:
            thread.start()
        for thread in starting:
            thread.join()
        if failures:
            raise failures[0]
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes if n.proc is not None and n.proc.poll() is None)

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()
        for logd in self.replicas.logds:
            logd.kill()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


