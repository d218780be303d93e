"""Membership, election and container ownership (store/cluster/member.py) on a real ZooKeeper: members
join and share containers evenly; when a member's session ends (closed client, SIGKILLed process,
a paused process past its session) its containers move with higher epochs; a new assigner is elected
when the elected one dies."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from millrace.store.cluster.assignment import Assignment
from millrace.store.cluster.layout import ClusterPaths, NodeInfo
from millrace.store.cluster.member import (
    ClusterMember,
    OwnershipTerm,
    connect,
    elected_leader,
    live_nodes,
    read_assignments,
)
from tests.cluster.proxy import TcpProxy
from tests.cluster.zookeeper_process import ZooKeeperProcess
from tests.server_process import REPO_ROOT

CONTAINERS = 8
# Sessions of the members SIGKILLed or paused: short so the tests are quick, long enough that a loaded
# machine does not expire them early.
CHILD_SESSION_TIMEOUT = 4.0


def wait_until(condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    """Wait for a state the system must reach; the bound only keeps a broken build from hanging."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.05)


@dataclass
class Everywhere:
    """Which node runs each container across the whole in-process cluster, and every time two ran one."""

    running: dict[int, str] = field(default_factory=dict)
    overlaps: list[tuple[int, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class RecordingHost:
    node_id: str
    everywhere: Everywhere
    events: list[tuple[str, int, int]] = field(default_factory=list)
    running: dict[int, int] = field(default_factory=dict)
    broken: set[int] = field(default_factory=set)  # running containers that "failed on their own"
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start_container(self, term: OwnershipTerm) -> None:
        with self.everywhere.lock:
            other = self.everywhere.running.get(term.container_id)
            if other is not None:
                self.everywhere.overlaps.append((term.container_id, other, self.node_id))
            self.everywhere.running[term.container_id] = self.node_id
        with self.lock:
            assert term.container_id not in self.running, "started twice without a stop"
            self.running[term.container_id] = term.epoch
            self.events.append(("start", term.container_id, term.epoch))

    def stop_container(self, container_id: int) -> None:
        with self.everywhere.lock:
            if self.everywhere.running.get(container_id) == self.node_id:
                del self.everywhere.running[container_id]
        with self.lock:
            epoch = self.running.pop(container_id)
            self.events.append(("stop", container_id, epoch))
            self.broken.discard(container_id)

    def failed_containers(self) -> set[int]:
        with self.lock:
            return self.broken & set(self.running)


@dataclass
class SlowHost(RecordingHost):
    """Starting a container in ``slow`` waits for ``proceed`` (a long log recovery)."""

    slow: set[int] = field(default_factory=set)
    proceed: threading.Event = field(default_factory=threading.Event)

    def start_container(self, term: OwnershipTerm) -> None:
        if term.container_id in self.slow:
            assert self.proceed.wait(120), "the test never let the slow start proceed"
        super().start_container(term)


@dataclass
class FlakyHost(RecordingHost):
    """Starting a container in ``failures`` fails that many times first (replicas briefly unreachable)."""

    failures: dict[int, int] = field(default_factory=dict)
    failed: list[int] = field(default_factory=list)

    def start_container(self, term: OwnershipTerm) -> None:
        if self.failures.get(term.container_id, 0) > 0:
            self.failures[term.container_id] -= 1
            self.failed.append(term.container_id)
            raise RuntimeError(f"container {term.container_id}: log replicas unreachable")
        super().start_container(term)


@dataclass
class Node:
    node_id: str
    client: KazooClient
    host: RecordingHost
    member: ClusterMember


class Cluster:
    """In-process members, each on a session of its own."""

    def __init__(self, hosts: str) -> None:
        self.hosts = hosts
        self.nodes: dict[str, Node] = {}
        self.everywhere = Everywhere()
        self.observer = connect(hosts)

    def join(self, node_id: str, session_timeout: float = 10.0, host: RecordingHost | None = None) -> Node:
        client = connect(self.hosts, session_timeout=session_timeout)
        host = host or RecordingHost(node_id, self.everywhere)
        info = NodeInfo(node_id, "127.0.0.1", {"kafka": 9092}, {"kafka": f"{node_id}.example:9092"})
        member = ClusterMember(client, info, CONTAINERS, host, session_timeout=session_timeout).start()
        node = Node(node_id, client, host, member)
        self.nodes[node_id] = node
        return node

    def assignments(self) -> dict[int, Assignment]:
        return {cid: a for cid, (a, _) in read_assignments(self.observer, ClusterPaths(), CONTAINERS).items()}

    def settled(self, node_ids: list[str]) -> bool:
        """Every container assigned to one of ``node_ids``, evenly, and running exactly there."""
        assignments = self.assignments()
        if any(a.node not in node_ids for a in assignments.values()):
            return False
        for node_id in node_ids:
            node = self.nodes[node_id]
            wanted = {cid: a.epoch for cid, a in assignments.items() if a.node == node_id}
            with node.host.lock:
                if node.host.running != wanted:
                    return False
        loads = [sum(1 for a in assignments.values() if a.node == n) for n in node_ids]
        return max(loads) - min(loads) <= 1

    def close(self) -> None:
        for node in self.nodes.values():
            node.member.close()
            node.client.stop()
            node.client.close()
        self.observer.stop()
        self.observer.close()


@pytest.fixture
def cluster(zk_hosts: str) -> Iterator[Cluster]:
    group = Cluster(zk_hosts)
    try:
        yield group
    finally:
        group.close()


def test_three_members_share_containers_evenly(cluster: Cluster) -> None:
    for node_id in ("a", "b", "c"):
        cluster.join(node_id)
    wait_until(lambda: cluster.settled(["a", "b", "c"]), "8 containers over a, b, c")
    loads = sorted(len(node.host.running) for node in cluster.nodes.values())
    assert loads == [2, 3, 3]
    leaders = [node.node_id for node in cluster.nodes.values() if node.member.is_leader]
    assert leaders == ["a"] and elected_leader(cluster.observer, ClusterPaths()) == "a"
    registered = live_nodes(cluster.observer, ClusterPaths())
    assert sorted(registered) == ["a", "b", "c"]
    assert registered["b"][0].advertised == {"kafka": "b.example:9092"}
    # a joined alone and took everything (epoch 1) and kept what it still runs; every move since (to b when
    # it joined, to b or c when c did) raised that container's epoch
    assignments = cluster.assignments()
    assert {cid for cid, a in assignments.items() if a.epoch == 1} == set(cluster.nodes["a"].host.running)
    assert all(a.epoch >= 2 for a in assignments.values() if a.node != "a")
    # Containers left a live node only through handovers: it stopped them before anyone started them.
    assert cluster.everywhere.overlaps == []


def test_a_dead_session_moves_its_containers_with_higher_epochs(cluster: Cluster) -> None:
    for node_id in ("a", "b", "c"):
        cluster.join(node_id)
    wait_until(lambda: cluster.settled(["a", "b", "c"]), "8 containers over a, b, c")
    before = cluster.assignments()
    victim = cluster.nodes["c"]
    victim_containers = set(victim.host.running)
    victim.client.stop()  # its session ends: its ephemeral znodes go at once
    wait_until(lambda: cluster.settled(["a", "b"]), "c's containers on a and b")
    after = cluster.assignments()
    for cid in range(CONTAINERS):
        if cid in victim_containers:
            assert after[cid].node in ("a", "b") and after[cid].epoch == before[cid].epoch + 1
        else:
            assert after[cid] == before[cid]  # nobody else's container moved
    # The victim's member saw its session end and stopped everything it ran.
    wait_until(lambda: not victim.host.running, "c stops its containers")
    assert sorted(cid for kind, cid, _ in victim.host.events if kind == "stop") == sorted(victim_containers)


def test_a_new_leader_is_elected_and_reassigns_the_old_leaders_containers(cluster: Cluster) -> None:
    for node_id in ("a", "b", "c"):
        cluster.join(node_id)
    wait_until(lambda: cluster.settled(["a", "b", "c"]), "8 containers over a, b, c")
    assert cluster.nodes["a"].member.is_leader
    cluster.nodes["a"].client.stop()
    wait_until(lambda: cluster.nodes["b"].member.is_leader, "b elected")
    assert not cluster.nodes["c"].member.is_leader
    assert elected_leader(cluster.observer, ClusterPaths()) == "b"
    wait_until(lambda: cluster.settled(["b", "c"]), "a's containers on b and c")
    cluster.join("d")  # the new assigner balances a newcomer in too
    wait_until(lambda: cluster.settled(["b", "c", "d"]), "8 containers over b, c, d")


def test_a_clean_leave_hands_containers_over(cluster: Cluster) -> None:
    for node_id in ("a", "b"):
        cluster.join(node_id)
    wait_until(lambda: cluster.settled(["a", "b"]), "8 containers over a and b")
    leaving = cluster.nodes.pop("b")
    leaving.member.close()
    assert not leaving.host.running  # stopped before leaving
    wait_until(lambda: cluster.settled(["a"]), "all containers on a")
    cluster.join("c")  # half of a's containers are handed over to the newcomer
    wait_until(lambda: cluster.settled(["a", "c"]), "8 containers over a and c")
    assert cluster.everywhere.overlaps == []
    leaving.client.stop()
    leaving.client.close()


def test_a_slow_container_start_holds_up_neither_other_containers_nor_the_assigner(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(ClusterMember, "slow_transition_seconds", 0.3)
    caplog.set_level(logging.WARNING, "millrace.store.cluster.member")
    slow = SlowHost("a", cluster.everywhere, slow={0})
    a = cluster.join("a", host=slow)
    wait_until(lambda: set(slow.running) == set(range(1, CONTAINERS)), "a runs all but the slow container")
    cluster.join("b")  # a, elected and still starting container 0, hands half over to b
    half = set(range(CONTAINERS // 2, CONTAINERS))
    wait_until(lambda: set(cluster.nodes["b"].host.running) == half, "b runs the upper half")
    assert 0 not in slow.running and not slow.proceed.is_set()
    assert a.member.is_leader
    # The stuck start says so, with where it is stuck, and keeps saying so.
    wait_until(lambda: sum("start of container 0: still running" in r.getMessage() for r in caplog.records) >= 2,
               "the slow start reported twice")
    assert any("self.proceed.wait" in r.getMessage() for r in caplog.records)
    slow.proceed.set()
    wait_until(lambda: cluster.settled(["a", "b"]), "a runs the lower half, container 0 included")
    assert cluster.everywhere.overlaps == []


def test_a_failed_container_start_is_tried_again(cluster: Cluster) -> None:
    flaky = FlakyHost("a", cluster.everywhere, failures={3: 2, 5: 1})
    cluster.join("a", host=flaky)
    wait_until(lambda: cluster.settled(["a"]), "a runs every container, 3 and 5 after failed starts")
    assert sorted(flaky.failed) == [3, 3, 5]
    assert all(a.epoch == 1 for a in cluster.assignments().values())  # the same terms, tried again


def test_a_container_that_fails_on_its_own_is_restarted_in_its_term(cluster: Cluster) -> None:
    a = cluster.join("a")
    wait_until(lambda: cluster.settled(["a"]), "a runs every container")
    with a.host.lock:
        a.host.broken.add(2)  # e.g. its log lost its ack quorum
    wait_until(lambda: a.host.events.count(("start", 2, 1)) == 2 and 2 in a.host.running, "2 restarted")
    assert ("stop", 2, 1) in a.host.events
    assert cluster.assignments()[2].epoch == 1 and cluster.settled(["a"])


class ChildMember:
    """A member in its own process (tests/cluster/member_child.py) whose output is collected."""

    def __init__(self, hosts: str, node_id: str, session_timeout: float) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.member_child", hosts, node_id, str(CONTAINERS),
             str(session_timeout)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
        threading.Thread(target=self._pump, daemon=True).start()
        wait_until(lambda: "ready" in self.lines or self.proc.poll() is not None, f"{node_id} ready")
        assert self.proc.poll() is None, f"{node_id} exited"

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def running(self) -> set[int]:
        running: set[int] = set()
        for line in list(self.lines):
            kind, _, rest = line.partition(" ")
            if kind == "start":
                running.add(int(rest.split()[0]))
            elif kind == "stop":
                running.discard(int(rest))
        return running

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def test_a_sigkilled_member_loses_its_containers_after_its_session_expires(cluster: Cluster) -> None:
    cluster.join("a")
    child = ChildMember(cluster.hosts, "k", session_timeout=CHILD_SESSION_TIMEOUT)
    try:
        wait_until(lambda: len(child.running()) == CONTAINERS // 2, "k runs half the containers")
        owned_by_child = child.running()
        before = cluster.assignments()
        assert {cid for cid, a in before.items() if a.node == "k"} == owned_by_child
        child.kill()
        wait_until(lambda: cluster.settled(["a"]), "k's containers on a once its session expired")
        after = cluster.assignments()
        assert all(after[cid].epoch == before[cid].epoch + 1 for cid in owned_by_child)
        assert "k" not in live_nodes(cluster.observer, ClusterPaths())
    finally:
        child.kill()


def test_a_paused_member_comes_back_as_a_new_incarnation_and_stops_first(cluster: Cluster) -> None:
    """SIGSTOP past the session timeout, then SIGCONT: the zombie learns its session is gone and stops
    every container before it registers again and is given containers in new, higher epochs."""
    cluster.join("a")
    child = ChildMember(cluster.hosts, "z", session_timeout=CHILD_SESSION_TIMEOUT)
    try:
        wait_until(lambda: len(child.running()) == CONTAINERS // 2, "z runs half the containers")
        first_term = {cid: a.epoch for cid, a in cluster.assignments().items() if a.node == "z"}
        child.proc.send_signal(19)  # SIGSTOP
        wait_until(lambda: cluster.settled(["a"]), "z's containers on a")
        lines_before_resume = len(child.lines)
        child.proc.send_signal(18)  # SIGCONT
        wait_until(lambda: cluster.settled(["a"]) is False and len(child.running()) == CONTAINERS // 2
                   and len(child.lines) > lines_before_resume + CONTAINERS // 2, "z rejoins with new terms")
        resumed = child.lines[lines_before_resume:]
        stops = [i for i, line in enumerate(resumed) if line.startswith("stop")]
        starts = [i for i, line in enumerate(resumed) if line.startswith("start")]
        assert len(stops) == len(first_term) and max(stops) < min(starts)  # all stops come first
        for line in resumed:
            if line.startswith("start"):
                _, cid, epoch = line.split()
                assert int(epoch) > first_term.get(int(cid), 0)
    finally:
        child.kill()


def test_a_node_reconnects_soon_after_a_long_cut_from_zookeeper(zookeeper: ZooKeeperProcess, zk_hosts: str) -> None:
    """A node's ZooKeeper client refused for a while (ZooKeeper down, a partition answered with resets)
    tries again within about a second once it can: kazoo's default back-off doubles up to an hour, and
    after 8 s of refusals its next try came about 5 s after the link was back."""
    host, port = zookeeper.hosts.rsplit(":", 1)
    with TcpProxy((host, int(port))) as proxy:
        client = connect(proxy.address + zk_hosts[len(zookeeper.hosts):], session_timeout=2.0)
        try:
            proxy.cut(reset=True)
            wait_until(lambda: not client.connected, "kazoo to notice the cut")
            time.sleep(8)
            proxy.heal()
            healed = time.monotonic()
            wait_until(lambda: client.connected, "kazoo connected again", timeout=30)
            took = time.monotonic() - healed
            assert took < 2.0, f"connected again {took:.1f} s after the link healed"
        finally:
            client.stop()
            client.close()


def test_kazoos_own_retries_of_a_watchs_read_wait_at_most_about_a_second(zk_hosts: str) -> None:
    """A DataWatch or ChildrenWatch reads its znode again with the client's command retry, on kazoo's event
    thread. kazoo's default doubles the wait up to an hour: after half a minute of failures a watch would
    sleep as long again, every other watch waiting behind it. Ours waits at most a second (plus jitter)."""
    client = connect(zk_hosts, session_timeout=2.0)
    try:
        retry = client._retry.copy()  # what client.retry(...) runs each call with
        sleeps: list[float] = []
        retry.sleep_func = sleeps.append
        failures = iter(range(20))

        def read() -> str:
            if next(failures, None) is not None:
                raise ConnectionLoss()
            return "read"

        assert retry(read) == "read"
        assert len(sleeps) == 20 and max(sleeps) <= 1.0 * (1 + retry.max_jitter)
    finally:
        client.stop()
        client.close()


def test_a_member_cut_off_from_zookeeper_says_so_once_its_session_is_over(zookeeper: ZooKeeperProcess,
                                                                         zk_hosts: str) -> None:
    """Blackholed from ZooKeeper (a partition), a member is ``cut_off`` once its session timeout has
    passed by its own clock (its containers stopped by then), not before, and no longer once the link
    is back (the router fails calls needing an owner at once only meanwhile)."""
    host, port = zookeeper.hosts.rsplit(":", 1)
    with TcpProxy((host, int(port))) as proxy:
        client = connect(proxy.address + zk_hosts[len(zookeeper.hosts):], session_timeout=2.0)
        recording = RecordingHost("x", Everywhere())
        member = ClusterMember(client, NodeInfo("x", "127.0.0.1"), CONTAINERS, recording, ClusterPaths(),
                               session_timeout=2.0).start()
        try:
            wait_until(lambda: len(recording.running) == CONTAINERS, "x running every container")
            proxy.cut()
            cut_at = time.monotonic()
            wait_until(lambda: not client.connected, "kazoo to notice the partition")
            assert not member.cut_off()  # suspended, but its session may still be alive
            wait_until(member.cut_off, "cut off", timeout=10)
            assert time.monotonic() - cut_at >= 2.0
            wait_until(lambda: not recording.running, "every container stopped")
            assert member.cut_off()
            proxy.heal()
            wait_until(lambda: not member.cut_off(), "connected again", timeout=10)
            wait_until(lambda: len(recording.running) == CONTAINERS, "x running every container again")
        finally:
            member.close()
            client.stop()
            client.close()
