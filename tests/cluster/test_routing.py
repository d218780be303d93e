"""Segment operations routed to the owner of their container (store/cluster/routing.py), with a real
ZooKeeper, real logd replicas, node a in this process and node b in a child process serving its
containers over the native protocol: a call through a on b's segment answers as a local one (values
and typed errors), survives b's SIGKILL once b's containers move to a, and a container with no owner
answers ContainerOfflineError within the bound. A Controller on a node that owns none of the system
tables' containers creates a scope and a stream through the router."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from millrace.protocol.contracts import AttributeUpdate, AttributeUpdateType, SegmentInfo
from millrace.protocol.errors import (
    BadAttributeUpdateError,
    BadOffsetError,
    ContainerOfflineError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentTruncatedError,
    StoreError,
    TableKeyVersionMismatchError,
)
from millrace.protocol.messages import CreateSegment
from millrace.store.cluster.connection import NodeConnection
from millrace.store.cluster.containers import SegmentContainerHost
from millrace.store.cluster.layout import ClusterPaths, NodeInfo
from millrace.store.cluster.member import OwnershipTerm
from millrace.store.cluster.node import ClusterNode, ClusterNodeConfig
from millrace.store.cluster.routing import ClusterSegmentStore, LocalSegments
from millrace.store.contracts import SegmentService
from millrace.store.controller import Controller, StreamConfiguration
from millrace.store.controller.controller import SYSTEM_TABLES
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.lts.filesystem import FileSystemChunkStorage
from millrace.store.segment_store import SegmentStore, container_index
from millrace.store.tables import NOT_EXISTS, TableStore
from tests.cluster.proxy import TcpProxy
from tests.cluster.test_membership import wait_until
from tests.cluster.zookeeper_process import ZooKeeperProcess
from tests.durablelog.logd_process import Replicas
from tests.server_process import REPO_ROOT

# Five containers: a, started first, keeps the lowest three when b joins, and all three system tables
# hash to container 4 (b's), so a owns none of them (test_controller_... checks it).
CONTAINERS = 5
CHILD_SESSION_TIMEOUT = 4.0
A_CONTAINERS, B_CONTAINERS = {0, 1, 2}, {3, 4}


def _conforms(store: type[SegmentService]) -> None:
    """Type-checked: the three stores offer the SegmentService every caller is typed against."""


_conforms(SegmentStore)
_conforms(ClusterSegmentStore)
_conforms(LocalSegments)


class PeerProcess:
    """tests/cluster/routing_node_child.py: a node serving its containers to peers."""

    def __init__(self, hosts: str, node_id: str, replicas: Replicas, lts: Path) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.routing_node_child", hosts, node_id, str(CONTAINERS),
             str(CHILD_SESSION_TIMEOUT), ",".join(replicas.addresses), str(lts)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
        threading.Thread(target=self._pump, daemon=True).start()
        wait_until(lambda: any(line.startswith("ready") for line in self.lines) or self.proc.poll() is not None,
                   f"{node_id} ready")
        assert self.proc.poll() is None, f"{node_id} exited"

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Cluster:
    a: ClusterNode
    router: ClusterSegmentStore
    b: PeerProcess

    def owner_now(self, container_id: int) -> str | None:
        """The owner ZooKeeper names now (not the router's cached one)."""
        self.router.forget_owner(container_id)
        owner = self.router.owner_of(container_id)
        return None if owner is None else owner.node_id

    def running_on_a(self) -> set[int]:
        assert self.a.containers is not None
        return set(self.a.containers.terms())


@contextlib.contextmanager
def running_cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    """Node a in this process, node b in a child, over three logd replicas; b holds containers 3 and 4."""
    replicas = Replicas(tmp_path / "replicas", 3).start()
    lts = tmp_path / "lts"
    a = ClusterNode(ClusterNodeConfig(zk_hosts, NodeInfo("a", "127.0.0.1"), CONTAINERS, replicas.config()),
                    FileSystemChunkStorage(str(lts)))
    b: PeerProcess | None = None
    router: ClusterSegmentStore | None = None
    try:
        a.start()
        assert a.client is not None and a.containers is not None
        router = ClusterSegmentStore(a.client, a.config.paths, "a", LocalSegments(a.containers, CONTAINERS),
                                     retry_bound=60.0)
        group = Cluster(a, router, PeerProcess(zk_hosts, "b", replicas, lts))
        b = group.b
        wait_until(lambda: group.running_on_a() == A_CONTAINERS
                   and all(group.owner_now(cid) == "b" for cid in B_CONTAINERS), "a hands containers 3 and 4 to b")
        yield group
    finally:
        if router is not None:
            router.close()
        if b is not None:
            b.stop()
        a.close()
        replicas.close()


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of the test's own: the test kills a node."""
    with running_cluster(zk_hosts, tmp_path) as running:
        yield running


def segment_in(containers: set[int], stem: str) -> str:
    """A segment name whose container is one of ``containers``."""
    return next(f"{stem}-{i}" for i in range(10_000) if container_index(f"{stem}-{i}", CONTAINERS) in containers)


def exercise(store: ClusterSegmentStore, name: str) -> list[object]:
    """The same sequence of operations on ``name``; what each answered (values, or the error's class and
    the details a caller reads), comparable between a local and a remote segment."""
    outcomes: list[object] = []

    def outcome(call: object) -> None:
        outcomes.append(call)

    def failure(fn: object) -> None:
        try:
            result = fn()  # type: ignore[operator]
            result = result.result(30) if hasattr(result, "result") else result
        except StoreError as exc:
            details = (exc.expected, exc.actual) if isinstance(exc, BadOffsetError) else ()
            # The store refuses a malformed request (merging an unsealed source) with a bare StoreError;
            # the wire answers it INVALID_REQUEST, so it arrives as InvalidRequestError, a StoreError.
            kind = "StoreError" if isinstance(exc, InvalidRequestError) else type(exc).__name__
            outcomes.append((kind, details))
        else:
            outcomes.append(("no error", result))

    failure(lambda: store.get_info(name))
    outcome(store.exists(name))
    store.create_segment(name, {"kind": 7}).result(30)
    outcome(store.exists(name))
    failure(lambda: store.create_segment(name))
    outcome(store.append(name, b"hello ").result(30))
    outcome(store.append(name, b"world", expected_offset=6,
                         attributes=[AttributeUpdate("writer", 1, AttributeUpdateType.REPLACE_IF_EQUALS, None)])
            .result(30))
    failure(lambda: store.append(name, b"late", expected_offset=3))
    failure(lambda: store.append(name, b"x", attributes=[
        AttributeUpdate("writer", 5, AttributeUpdateType.REPLACE_IF_EQUALS, 4)]))
    store.update_attributes(name, [AttributeUpdate("writer", 9, AttributeUpdateType.ACCUMULATE_MAX)]).result(30)
    read = store.read(name, 0, 100).result(30)
    outcome((read.offset, read.data, read.end_of_segment))
    read = store.read(name, 6, 3).result(30)
    outcome((read.offset, read.data, read.end_of_segment))
    failure(lambda: store.read(name, 50, 10))
    waited = store.read(name, 11, 10, wait_timeout=60.0)  # parked at the tail until the next append
    outcome(store.append(name, b"!").result(30))
    read = waited.result(30)
    outcome((read.offset, read.data))
    store.truncate(name, 2).result(30)
    failure(lambda: store.read(name, 0, 10))
    info = store.get_info(name)
    outcome(replace(info, name="", created_ms=0, last_modified_ms=0, storage_length=0))
    transaction = f"{name}#transaction.1"  # always in its parent's container, wherever that is
    store.create_segment(transaction).result(30)
    store.append(transaction, b"txn").result(30)
    failure(lambda: store.merge(name, transaction))  # not sealed yet
    store.seal(transaction).result(30)
    outcome(transaction in store.list_segments())
    outcome(store.merge(name, transaction).result(30))
    outcome(store.exists(transaction))
    outcome(store.seal(name).result(30))
    failure(lambda: store.append(name, b"after seal"))
    read = store.read(name, 2, 100).result(30)
    outcome((read.offset, read.data, read.end_of_segment))
    outcome(name in store.list_segments())
    store.delete(name).result(30)
    outcome(store.exists(name))
    failure(lambda: store.delete(name))
    return outcomes


class TestOnOneCluster:
    """Tests that kill no node and use segments, tables and scopes of their own share one cluster."""

    @pytest.fixture(scope="class")
    @classmethod
    def cluster(cls, class_zk_hosts: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
        with running_cluster(class_zk_hosts, tmp_path_factory.mktemp("cluster")) as running:
            yield running

    def test_a_peer_owned_segment_answers_as_a_local_one(self, cluster: Cluster) -> None:
        local_name, remote_name = segment_in(A_CONTAINERS, "here"), segment_in(B_CONTAINERS, "there")
        assert cluster.owner_now(container_index(remote_name, CONTAINERS)) == "b"
        local, remote = exercise(cluster.router, local_name), exercise(cluster.router, remote_name)
        assert remote == local
        # the sequence met each typed error it meant to (so equal lists are no accident of both failing alike)
        for error in (SegmentNotFoundError, SegmentExistsError, SegmentSealedError, BadAttributeUpdateError,
                      OffsetOutOfRangeError, SegmentTruncatedError):
            assert any(isinstance(o, tuple) and o and o[0] == error.__name__ for o in local), error
        assert ("BadOffsetError", (3, 11)) in local

        # created_ms travels too: the remote info is the owner's, not a default
        cluster.router.create_segment(remote_name).result(30)
        info = cluster.router.get_info(remote_name)
        assert isinstance(info, SegmentInfo) and info.created_ms > 0 and info.name == remote_name

    def test_table_segments_through_a_peer(self, cluster: Cluster) -> None:
        tables = TableStore(cluster.router)
        name = segment_in(B_CONTAINERS, "table")
        tables.create_table(name)
        first = tables.put(name, [(b"k1", b"v1", NOT_EXISTS), (b"k2", b"v2")])
        second = tables.put(name, [(b"k1", b"v1b", first[0])])
        with pytest.raises(TableKeyVersionMismatchError):
            tables.put(name, [(b"k1", b"stale", first[0])])
        tables.remove(name, [b"k2"])
        assert {k: e.value for k, e in tables.get_all(name).items()} == {b"k1": b"v1b"}
        # another TableStore (as another node would have) rebuilds the index from the remote segment
        again = TableStore(cluster.router).get(name, [b"k1", b"k2"])
        assert again[0] is not None and again[0].version == second[0] and again[1] is None

    def test_a_stale_owner_answers_offline_and_the_router_looks_again(self, cluster: Cluster) -> None:
        name = segment_in(A_CONTAINERS, "stale")
        container_id = container_index(name, CONTAINERS)
        b_owner = cluster.router.owner_of(min(B_CONTAINERS))
        assert b_owner is not None and b_owner.node_id == "b"
        # b's listener serves only its own containers: it refuses a's (no forwarding loop, no guessing) ...
        conn = NodeConnection(b_owner.host, b_owner.port)
        try:
            with pytest.raises(ContainerOfflineError):
                conn.request(CreateSegment(segment=name)).result(30)
        finally:
            conn.close()
        # ... so a router that still believes b owns a's container (as after a move it has not seen yet)
        # is refused, looks the owner up again and runs the call where the container is.
        cluster.router._owners[container_id] = b_owner  # noqa: SLF001 - planting the stale belief
        cluster.router.create_segment(name).result(30)
        assert cluster.owner_now(container_id) == "a"
        assert cluster.a.containers is not None and cluster.a.containers.container(container_id).exists(name)

    def test_controller_on_a_node_without_the_system_tables(self, cluster: Cluster) -> None:
        system_containers = {container_index(t, CONTAINERS) for t in SYSTEM_TABLES}
        assert not system_containers & cluster.running_on_a()  # every system table lives on b
        controller = Controller(cluster.router, TableStore(cluster.router))
        assert controller.create_scope("sales")
        controller.create_stream("sales", "orders", StreamConfiguration(initial_segments=4))
        segments = controller.get_current_segments("sales", "orders")
        assert len(segments) == 4
        for segment in segments:  # each stream segment exists on whichever node owns it
            assert cluster.router.get_info(segment.name).length == 0
        # b's tables hold the records: a second controller (another node's) sees them
        assert "orders" in Controller(cluster.router, TableStore(cluster.router)).list_streams("sales")


def test_calls_survive_the_owners_sigkill(cluster: Cluster) -> None:
    name = segment_in(B_CONTAINERS, "moved")
    cluster.router.create_segment(name).result(30)
    for i in range(20):
        cluster.router.append(name, f"{i};".encode()).result(30)
    acknowledged = b"".join(f"{i};".encode() for i in range(20))

    cluster.b.kill()
    # Issued while b is dead and still named owner: answered once a owns the container (b's session
    # expires after 4 s, within the router's 60 s bound); the caller sees only the wait.
    read = cluster.router.read(name, 0, 1000).result(90)
    assert cluster.running_on_a() == A_CONTAINERS | B_CONTAINERS
    assert read.data == acknowledged
    assert cluster.router.append(name, b"after;").result(30) == len(acknowledged)
    assert cluster.router.get_info(name).length == len(acknowledged) + len(b"after;")
    assert cluster.owner_now(container_index(name, CONTAINERS)) == "a"


def test_a_container_with_no_owner_is_offline_within_the_bound(zk_client: KazooClient, tmp_path: Path) -> None:
    host = SegmentContainerHost(FileSystemChunkStorage(str(tmp_path / "lts")), lambda term: None)  # type: ignore[arg-type,return-value]
    router = ClusterSegmentStore(zk_client, ClusterPaths(), "lonely", LocalSegments(host, CONTAINERS),
                                 retry_bound=0.5)
    try:
        with pytest.raises(ContainerOfflineError, match="no owner answered within 0.5 s"):
            router.append("orphan", b"data").result(30)
        with pytest.raises(ContainerOfflineError):
            router.get_info("orphan")
    finally:
        router.close()
        host.close()


def test_closing_the_router_fails_calls_still_waiting_for_an_owner(zk_client: KazooClient, tmp_path: Path) -> None:
    host = SegmentContainerHost(FileSystemChunkStorage(str(tmp_path / "lts")), lambda term: None)  # type: ignore[arg-type,return-value]
    router = ClusterSegmentStore(zk_client, ClusterPaths(), "lonely", LocalSegments(host, CONTAINERS),
                                 retry_bound=600.0)
    try:
        waiting = router.append("orphan", b"data")  # no owner: waits for one, retrying
        assert not waiting.done()
    finally:
        router.close()
        host.close()
    with pytest.raises(ContainerOfflineError, match="stopping"):
        waiting.result(30)


def test_a_stopping_node_waits_for_no_owner(zk_client: KazooClient, tmp_path: Path) -> None:
    """Once the node is stopping (``stop_waiting``, at the reactor's shutdown), a call waiting for an owner
    fails, and so does a new one whose container has none, at its first attempt: nothing retries for
    the bound (600 s here), which would hold the node's stop up."""
    host = SegmentContainerHost(FileSystemChunkStorage(str(tmp_path / "lts")), lambda term: None)  # type: ignore[arg-type,return-value]
    router = ClusterSegmentStore(zk_client, ClusterPaths(), "lonely", LocalSegments(host, CONTAINERS),
                                 retry_bound=600.0)
    try:
        waiting = router.append("orphan", b"data")
        assert not waiting.done()
        router.stop_waiting()
        with pytest.raises(ContainerOfflineError, match="stopping: container"):
            waiting.result(30)
        with pytest.raises(ContainerOfflineError, match="stopping"):
            router.get_info("another orphan").result(30)
    finally:
        router.close()
        host.close()


def test_a_node_cut_off_from_zookeeper_never_holds_the_caller(zookeeper: ZooKeeperProcess, zk_hosts: str,
                                                               tmp_path: Path) -> None:
    """While this node cannot reach ZooKeeper (a partition: kazoo reconnecting), a call whose owner is not
    cached must not wait for ZooKeeper on the caller's thread (the reactor, in a server): kazoo holds a
    read until the connection is back. It returns at once and fails within the bound. (Before, the first
    attempt's owner lookup ran on the caller and held a cut-off node's reactor for the whole partition.)"""
    host, port = zookeeper.hosts.rsplit(":", 1)
    chroot = zk_hosts[len(zookeeper.hosts):]
    storage = SegmentContainerHost(FileSystemChunkStorage(str(tmp_path / "lts")), lambda term: None)  # type: ignore[arg-type,return-value]
    with TcpProxy((host, int(port))) as proxy:
        client = KazooClient(hosts=proxy.address + chroot, timeout=2.0)
        client.start(timeout=30)
        router = ClusterSegmentStore(client, ClusterPaths(), "cut-off", LocalSegments(storage, CONTAINERS),
                                     retry_bound=1.0)
        try:
            proxy.cut()
            wait_until(lambda: not client.connected, "kazoo to notice the partition")
            calls: list[Any] = []
            caller = threading.Thread(target=lambda: calls.append(router.append("orphan", b"data")), daemon=True)
            began = time.monotonic()
            caller.start()
            caller.join(5)
            assert not caller.is_alive(), "the caller is held by a ZooKeeper read"
            assert time.monotonic() - began < 1.0
            with pytest.raises(ContainerOfflineError, match="within 1 s"):
                calls[0].result(10)
        finally:
            proxy.heal()
            router.close()
            client.stop()
            client.close()
            storage.close()


def test_a_node_cut_off_past_its_session_fails_calls_at_once(zk_client: KazooClient, tmp_path: Path) -> None:
    """A node partitioned from ZooKeeper past its session timeout (``ClusterMember.cut_off``) can find no
    owner until the link heals: a call that needs one fails at once, not after the bound (a cut-off
    node held its clients' produces for 30 s, so an idempotent producer stalled those partitions)."""
    storage = SegmentContainerHost(FileSystemChunkStorage(str(tmp_path / "lts")), lambda term: None)  # type: ignore[arg-type,return-value]
    cut_off = threading.Event()
    router = ClusterSegmentStore(zk_client, ClusterPaths(), "cut-off", LocalSegments(storage, CONTAINERS),
                                 retry_bound=600.0, cut_off=cut_off.is_set)
    try:
        waiting = router.append("orphan", b"data")  # no owner yet: waits, retrying
        assert not waiting.done()
        cut_off.set()
        with pytest.raises(ContainerOfflineError, match="cut off from ZooKeeper"):
            router.append("orphan", b"data").result(5)
        with pytest.raises(ContainerOfflineError, match="cut off from ZooKeeper"):
            waiting.result(5)  # at its next retry
    finally:
        router.close()
        storage.close()


def test_a_cluster_node_holds_each_container_it_runs_to_its_byte_budget(tmp_path: Path) -> None:
    """As in one process (``SegmentStore.budgets``): a container a node runs counts what it cannot drop
    against ``--container-budget-mb``, so a flood slows to what its log and long-term storage sustain
    instead of filling the node's memory. Cluster nodes used to run their containers with no budget."""
    host = SegmentContainerHost(FileSystemChunkStorage(str(tmp_path / "lts")),
                                lambda term: FileDurableDataLog(str(tmp_path / f"log-{term.container_id}")),
                                container_budget_bytes=3 << 20)
    try:
        host.start_container(OwnershipTerm(2, 1, None))  # type: ignore[arg-type]
        budget = host.budget(2)
        assert (budget.name, budget.limit) == ("container-2", 3 << 20)
        with pytest.raises(ContainerOfflineError):
            host.budget(0)
        host.stop_container(2)
        with pytest.raises(ContainerOfflineError):
            host.budget(2)
    finally:
        host.close()
