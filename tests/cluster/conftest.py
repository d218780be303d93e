"""Fixtures of the cluster tests: one real ZooKeeper for the whole run, a fresh chroot per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from tests.cluster.zookeeper_process import ZooKeeperProcess, zookeeper_available

_chroots = itertools.count(1)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    """A standalone ZooKeeper shared by every cluster test (a JVM start costs seconds on two cores). Tests
    cannot see each other's znodes (``zk_hosts`` gives each a chroot), and none stops or pauses this server:
    the tests that cut a client off from ZooKeeper do it in a TCP proxy of their own."""
    missing = zookeeper_available()
    if missing:
        pytest.skip(missing)
    server = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server
    finally:
        server.stop()


def fresh_chroot(zookeeper: ZooKeeperProcess) -> str:
    """A connect string with a chroot nobody else uses, so tests never see each other's znodes."""
    chroot = f"/test-{next(_chroots)}"
    client = KazooClient(hosts=zookeeper.hosts)
    client.start(timeout=30)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
    return zookeeper.hosts + chroot


@pytest.fixture
def zk_hosts(zookeeper: ZooKeeperProcess) -> str:
    """A connect string with a chroot of this test's own."""
    return fresh_chroot(zookeeper)


@pytest.fixture(scope="class")
def class_zk_hosts(zookeeper: ZooKeeperProcess) -> str:
    """A connect string with a chroot of one test class's own, for a cluster its tests share."""
    return fresh_chroot(zookeeper)


@pytest.fixture
def zk_client(zk_hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()
