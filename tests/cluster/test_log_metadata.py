"""ZooKeeperLogMetadataStore against a real ZooKeeper: the FileLogMetadataStore contract, racing owners,
the ownership guard, and a replicated log (real logd processes) whose metadata lives in ZooKeeper."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from millrace.store.cluster.layout import ClusterPaths
from millrace.store.cluster.log_metadata import OwnerGuard, OwnershipLostError, ZooKeeperLogMetadataStore
from millrace.store.cluster.member import connect
from millrace.store.durablelog.metadata import Fragment, LogRecord, MetadataVersionError
from millrace.store.errors import DataLogWriterFencedError
from tests.cluster.proxy import TcpProxy
from tests.cluster.test_membership import wait_until
from tests.cluster.zookeeper_process import ZooKeeperProcess
from tests.durablelog.logd_process import Replicas


def test_records_round_trip_with_versions(zk_client: KazooClient) -> None:
    store = ZooKeeperLogMetadataStore(zk_client)
    assert store.read("container-0") == LogRecord()
    first = store.compare_and_set("container-0", LogRecord(epoch=1), 0)
    assert first.version == 1 and store.read("container-0") == first
    record = LogRecord(epoch=2, truncated=7, fragments=(Fragment(2, 8, ("a:1", "b:2", "c:3")),))
    second = store.compare_and_set("container-0", record, 1)
    assert second == replace(record, version=2)
    assert store.read("container-0") == second
    with pytest.raises(MetadataVersionError):
        store.compare_and_set("container-0", LogRecord(epoch=9), 1)  # stale version
    with pytest.raises(MetadataVersionError):
        store.compare_and_set("container-0", LogRecord(epoch=9), 0)  # "create" of an existing record
    with pytest.raises(MetadataVersionError):
        store.compare_and_set("container-1", LogRecord(epoch=1), 3)  # update of a missing record
    assert store.read("container-0") == second
    with pytest.raises(ValueError):
        store.read("../escape")


def test_records_survive_a_new_session(zk_hosts: str) -> None:
    with_session = connect(zk_hosts)
    ZooKeeperLogMetadataStore(with_session).compare_and_set("log", LogRecord(epoch=4), 0)
    with_session.stop()
    with_session.close()
    later = connect(zk_hosts)
    try:
        assert ZooKeeperLogMetadataStore(later).read("log") == LogRecord(epoch=4, version=1)
    finally:
        later.stop()
        later.close()


@pytest.fixture
def clients(zk_hosts: str) -> Iterator[list[KazooClient]]:
    opened = [connect(zk_hosts) for _ in range(4)]
    try:
        yield opened
    finally:
        for client in opened:
            client.stop()
            client.close()


def test_racing_owners_take_distinct_epochs(clients: list[KazooClient]) -> None:
    """Four would-be owners on four sessions each take epochs the way ReplicatedDurableDataLog.open does
    (read, then compare-and-set epoch + 1): every epoch is won by exactly one of them."""
    stores = [ZooKeeperLogMetadataStore(client) for client in clients]
    won: list[list[int]] = [[] for _ in stores]
    conflicts = [0]
    start = threading.Barrier(len(stores))

    def contend(index: int) -> None:
        store = stores[index]
        start.wait()
        while len(won[index]) < 25:
            current = store.read("contended")
            try:
                record = store.compare_and_set("contended", replace(current, epoch=current.epoch + 1),
                                               current.version)
            except MetadataVersionError:
                conflicts[0] += 1
                continue
            won[index].append(record.epoch)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = sorted(epoch for epochs in won for epoch in epochs)
    assert every == list(range(1, 101))  # no epoch taken twice, none skipped
    assert all(epochs == sorted(epochs) for epochs in won)
    final = stores[0].read("contended")
    assert final.epoch == 100 and final.version == 100
    print(f"racing owners: 100 epochs, {conflicts[0]} refused compare-and-sets")


def test_guard_refuses_changes_once_ownership_moved(zk_client: KazooClient) -> None:
    paths = ClusterPaths()
    zk_client.ensure_path(paths.containers)
    owner_path = paths.container(0)
    zk_client.create(owner_path, b'{"node": "a", "incarnation": 1, "epoch": 1}')
    store = ZooKeeperLogMetadataStore(zk_client, paths)
    term_one = store.guarded(OwnerGuard(owner_path, 0))
    record = term_one.compare_and_set("container-0", LogRecord(epoch=1), 0)
    record = term_one.compare_and_set("container-0", replace(record, epoch=2), record.version)
    zk_client.set(owner_path, b'{"node": "b", "incarnation": 2, "epoch": 2}')  # the assigner moves it
    with pytest.raises(OwnershipLostError):
        term_one.compare_and_set("container-0", replace(record, epoch=3), record.version)
    assert store.read("container-0") == record  # nothing changed
    term_two = store.guarded(OwnerGuard(owner_path, 1))
    assert term_two.compare_and_set("container-0", replace(record, epoch=3), record.version).epoch == 3
    zk_client.delete(owner_path)
    with pytest.raises(OwnershipLostError):
        term_two.compare_and_set("container-0", LogRecord(epoch=4), 3)  # the right version, no owner


def test_replicated_log_owners_fence_each_other_through_zookeeper(clients: list[KazooClient], tmp_path: Path) -> None:
    """Two owners of one replicated log on real logd processes, their metadata in ZooKeeper on two
    sessions: the second open fences the first, whose appends then fail, and nothing it acknowledged
    is lost."""
    replicas = Replicas(tmp_path, 3)
    replicas.metadata = ZooKeeperLogMetadataStore(clients[0])  # type: ignore[assignment]
    replicas.start()
    try:
        first = replicas.opened("zk-log")
        acked = [first.append(f"a{i}".encode()).result(30).sequence for i in range(20)]
        replicas.metadata = ZooKeeperLogMetadataStore(clients[1])  # type: ignore[assignment]
        second = replicas.opened("zk-log")
        assert second.epoch == first.epoch + 1
        with pytest.raises(DataLogWriterFencedError):
            first.append(b"zombie").result(30)
        assert [e.payload for e in second.read_all()] == [f"a{i}".encode() for i in range(20)]
        assert acked == list(range(1, 21))
        assert second.append(b"b0").result(30).sequence == 21
        record = ZooKeeperLogMetadataStore(clients[2]).read("zk-log")
        assert record.epoch == second.epoch and record.fragments[-1].epoch == second.epoch
        first.close()
        second.close()
    finally:
        replicas.close()


def test_a_stale_owner_cannot_open_the_log_of_a_moved_container(clients: list[KazooClient], tmp_path: Path) -> None:
    """Ownership terms guard the log: the owner of term 1 opens the container's replicated log; the
    assigner moves the container; the term-2 owner's open fences term 1 (its appends fail); a late
    open with the term-1 guard (a node that missed the move) is refused without taking an epoch, so it
    cannot fence the rightful owner, whose appends carry on."""
    paths = ClusterPaths()
    clients[0].ensure_path(paths.containers)
    owner_path = paths.container(3)
    clients[0].create(owner_path, b'{"node": "a", "incarnation": 1, "epoch": 1}')
    term_one = ZooKeeperLogMetadataStore(clients[0], paths).guarded(OwnerGuard(owner_path, 0))
    term_two = ZooKeeperLogMetadataStore(clients[1], paths).guarded(OwnerGuard(owner_path, 1))
    replicas = Replicas(tmp_path, 3).start()
    try:
        replicas.metadata = term_one  # type: ignore[assignment]
        old_owner = replicas.opened("container-3")
        assert old_owner.append(b"one").result(30).sequence == 1
        clients[2].set(owner_path, b'{"node": "b", "incarnation": 2, "epoch": 2}')  # the assigner moves it
        replicas.metadata = term_two  # type: ignore[assignment]
        new_owner = replicas.opened("container-3")
        assert [e.payload for e in new_owner.read_all()] == [b"one"]
        with pytest.raises(DataLogWriterFencedError):
            old_owner.append(b"zombie").result(30)
        epoch = ZooKeeperLogMetadataStore(clients[3], paths).read("container-3").epoch
        replicas.metadata = term_one  # type: ignore[assignment]
        with pytest.raises(DataLogWriterFencedError):
            replicas.opened("container-3")  # the stale node tries to take the log back
        assert ZooKeeperLogMetadataStore(clients[3], paths).read("container-3").epoch == epoch
        assert new_owner.append(b"two").result(30).sequence == 2
        old_owner.close()
        new_owner.close()
    finally:
        replicas.close()


def test_a_store_cut_off_from_zookeeper_fails_at_once(zookeeper: ZooKeeperProcess, zk_hosts: str) -> None:
    """While its client cannot reach ZooKeeper (kazoo reconnecting), reads and changes fail at once with
    ConnectionLoss: kazoo would hold them until the link is back, and a container's clean close (its log
    truncation) held a node cut off from ZooKeeper so, SIGTERM'd, past ``cluster down``'s 30 s."""
    host, port = zookeeper.hosts.rsplit(":", 1)
    with TcpProxy((host, int(port))) as proxy:
        client = connect(proxy.address + zk_hosts[len(zookeeper.hosts):], session_timeout=10.0)
        try:
            store = ZooKeeperLogMetadataStore(client).guarded(OwnerGuard(ClusterPaths().logs, 0))
            first = store.compare_and_set("cut", LogRecord(epoch=1), 0)
            proxy.cut(reset=True)
            wait_until(lambda: not client.connected, "kazoo to notice the cut")
            outcomes: list[BaseException] = []

            def change() -> None:
                try:
                    store.compare_and_set("cut", replace(first, epoch=2), first.version)
                except BaseException as exc:  # noqa: BLE001 - the test looks at it
                    outcomes.append(exc)
                try:
                    store.read("cut")
                except BaseException as exc:  # noqa: BLE001 - the test looks at it
                    outcomes.append(exc)

            changing = threading.Thread(target=change, daemon=True)
            changing.start()
            changing.join(5)
            assert not changing.is_alive(), "a metadata change waits for ZooKeeper without bound"
            assert [type(e) for e in outcomes] == [ConnectionLoss, ConnectionLoss]
            proxy.heal()
            wait_until(lambda: client.connected, "connected again", timeout=30)
            assert store.read("cut").epoch == 1  # nothing was sent
        finally:
            client.stop()
            client.close()
