"""A small Jepsen-style nemesis: while idempotent acks=all Kafka producers write, log replicas and nodes of a
cluster started with ``millrace cluster up`` are SIGKILLed and started again, or paused (SIGSTOP) and
resumed (SIGCONT) at random for a bounded time; a node paused past its ZooKeeper session comes back as a
zombie whose containers were given to others; or a node's link to ZooKeeper is cut (a ``TcpProxy`` per
node) while it runs on, its containers moving past a session while it still serves clients. Then
everything is healed and a checker reads all partitions back: every acknowledged record exactly once, at
the offset it was acknowledged at, each producer's records in order in each partition.

At most one logd and one node are down at a time (three replicas with ack quorum 2 and three nodes stay
available through one failure of each; more is unavailability, not a safety question). The history and
the seed are printed; ``MILLRACE_NEMESIS_SEED`` replays a schedule. The short run takes about a minute
in CI; the long one (``long_faults`` marker) runs only with ``MILLRACE_LONG_FAULTS=1``::

    MILLRACE_LONG_FAULTS=1 .venv/bin/python -m pytest -q -s -m long_faults tests/cluster/test_nemesis.py

The short run keeps pauses below the session timeout and the logd request timeout. It found, with seed
389350885 (node-3 killed twice, logd pauses of 0.6-3.8 s, a logd killed, nodes paused 0.8-1.1 s), 882 of
7483 acknowledged records unreadable after healing, all in partition 5: its data segment held 946
batches with contiguous offsets 0..1205 in order, but its index segment had entries 322, 324, 323, 326
(two batches indexed out of offset order), and a reload of the partition trusts the index up to the
disorder, so every node served a high watermark of 324 (still so after a restart of the whole cluster).
Index entries were queued as batches' appends completed on the reactor, and a completion can arrive
before an earlier one's (``to_deferred`` fires at once for a future already complete); ``SegmentWriter.
index`` now writes them in segment order (tests/kafka/test_index_resync.py). The same run's producers
died of a fatal OUT_OF_ORDER_SEQUENCE, which such a reload explains (its producer state stops at the
disorder too). Six short runs after the fix, that seed among them, passed (a step now also heals a
pause on time: two back-to-back pauses of one node had added up to a session and made a zombie).

The long run (seed 694352182, 40 s) then found an index with a gap: partition 3's entries went from
offset 283 (ending at 14650) straight to offset 789 (at 25327), over a whole data segment of offsets
0..1536, so reloads stopped at 284: 1987 of 8403 acknowledged records unreadable. Segment recovery
(``recover_segment``) now trusts index entries only while they are contiguous in segment order and scans
the data past the first one that is not; the same cluster started again with it served all 8403. (Who
wrote the gap is not traced: a zombie's writer resyncing its index end after its data appends were
refused is a candidate.)

Before these fixes the long run also found two faults (3 s sessions; the first in two runs of seed
694352182 and one of 345576845, whose replay passed; the second in the second run of 694352182, in a 90
s run and in the 40 s runs above); the first is probably the index faults above, the second is left open
in the cluster member code:
- after a failover involving a zombie, both producers died of librdkafka's *fatal* OUT_OF_ORDER_SEQUENCE
  from the new leader when retrying a batch that a previous leader had refused with NOT_LEADER
  (MsgNotPersisted), e.g. "ProduceRequest for nemesis [4] with 230 message(s) failed due to sequence
  desynchronization with broker 3 (PID{Id:1000,Epoch:0}, base seq 501 ... last partition error
  NOT_LEADER_FOR_PARTITION (actions Refresh,MsgNotPersisted, base seq 501..730))": the new leader's
  producer state does not match what the client was told was (not) persisted;
- a node paused 7.7 s (logd-1 paused, then SIGKILLed, node-2 SIGKILLed meanwhile) resumed, saw its
  session expired and its two containers' logs fail ("container 0 (epoch 1) failed; restarting it"), and
  then never registered again (over 120 s; its log stops there), so the healed cluster ran on two nodes.
  A 90 s long run (MILLRACE_NEMESIS_SECONDS=90, seed 838414416) left two of three nodes so: each time
  the node's log shows, on resuming, "container N failed: DataLogWriterFencedError(...)", "container N
  (epoch E) failed; restarting it", then kazoo's "Session has expired", and nothing from the member after
  (the restart of a container whose term ended seems to hold the member's loop, so it never registers a
  new session); the same run had both producers die of the fatal OUT_OF_ORDER_SEQUENCE above.
  Found (a thread dump by ``kill -USR1``): closing the failed container joined its storage writer while
  holding the container lock the writer, mid-flush, was waiting for. ``SegmentContainer.close`` now
  releases the lock first; seeds 694352182 (40 s), 838414416 and 24046098 (90 s) then passed, except one
  90 s run of 838414416 that read one of 57,772 records at another offset than acknowledged (misplaced 1,
  not traced; the tally now names such records).

Partitions from ZooKeeper joined the menu later (every node restarted through its own ``TcpProxy`` first,
about 2 s more per run; the fault menu's draws changed, so older seeds replay other schedules). Three
short runs then passed (seeds 202013287, 778021850, 599015964: partitions of 1.7-5.7 s, 20,489-22,150
records acknowledged and read, 0 lost, duplicated, misplaced or out of order, no client error; 43-46 s).

``test_nemesis_short_secured`` runs the same schedule for 20 s on a ``cluster up --secure`` cluster (the
producers and the checker over SASL_SSL, nodes through their proxies to ZooKeeper's TLS port, logds over
CURVE); ``test_nemesis_long_secured`` is its long run. Its first runs (seeds 580795511, 238620356 and
1098, the last with node-3 and node-2 cut off from ZooKeeper for 5.7 and 3.9 s) acknowledged and read
14,224, 14,639 and 15,681 records, nothing lost, duplicated, misplaced or out of order, no client error
(32-35 s each).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from millrace.gateway.commands.local_cluster import zookeeper_missing
from tests.cluster.faults import KafkaLoad
from tests.cluster.local_cluster import LocalClusterCli
from tests.cluster.proxy import TcpProxy
from tests.cluster.test_local_cluster import all_owned, create_topic, wait_status

pytestmark = pytest.mark.skipif(zookeeper_missing() is not None, reason=str(zookeeper_missing()))

PARTITIONS = 6
SESSION_TIMEOUT = 3.0


@dataclass
class Fault:
    name: str
    kind: str  # "killed" or "paused"
    until: float  # monotonic time to heal it
    starting: threading.Thread | None = None  # a killed process being started again
    failures: list[str] = field(default_factory=list)


@dataclass
class Nemesis:
    cluster: LocalClusterCli
    rng: random.Random
    began: float = field(default_factory=time.monotonic)
    faults: dict[str, Fault] = field(default_factory=dict)  # role -> its one current fault
    history: list[str] = field(default_factory=list)
    # Longest pause per role: past SESSION_TIMEOUT a node comes back as a zombie; past the replicated log's
    # 5 s request timeout a logd is replaced in its ensembles.
    longest_pause: dict[str, float] = field(default_factory=lambda: {"node": 8.0, "logd": 8.0})
    # Each node's link to ZooKeeper (a TcpProxy), cut to partition the node from ZooKeeper while it runs
    # on; past SESSION_TIMEOUT its containers move while it still serves clients and reaches the logds.
    proxies: dict[str, TcpProxy] = field(default_factory=dict)
    longest_partition: float = 8.0

    def note(self, what: str) -> None:
        line = f"{time.monotonic() - self.began:6.1f}s {what}"
        self.history.append(line)
        print(f"nemesis {line}", flush=True)

    def step(self) -> None:
        """Heal what is due, then maybe break one more thing of a role that has nothing broken."""
        self.heal_due()
        free = [role for role in ("logd", "node") if role not in self.faults]
        if free and self.rng.random() < 0.6:
            role = self.rng.choice(free)
            name = self.rng.choice(self.cluster.names(role))
            kind = self.rng.choice(["killed", "paused"] + (["partitioned"] if role == "node" and self.proxies else []))
            longest = {"killed": 8.0, "partitioned": self.longest_partition}.get(kind, self.longest_pause[role])
            hold = self.rng.uniform(0.5, longest)
            if kind == "partitioned":
                self.proxies[name].cut()
                pid = self.cluster.pid(name)
            else:
                pid = self.cluster.kill(name, signal.SIGKILL if kind == "killed" else signal.SIGSTOP)
            self.faults[role] = Fault(name, kind, time.monotonic() + hold)
            self.note(f"{name} (pid {pid}) {kind} for {hold:.1f} s")

    def pause_until_next(self) -> float:
        """A random gap before the next step, cut short when a fault is due to heal before it (a pause
        must not outlast what it was drawn to be: past a session it would make a zombie)."""
        gap = self.rng.uniform(0.5, 2.0)
        due = [f.until for f in self.faults.values() if f.starting is None]
        if due:
            gap = max(0.0, min(gap, min(due) - time.monotonic()))
        return gap

    def heal_due(self, everything: bool = False) -> None:
        """Resume paused processes whose time is up; start killed ones in the background (a node may not
        come up while a logd it needs is still paused, so no start may hold up the other heals)."""
        now = time.monotonic()
        for role, fault in list(self.faults.items()):
            if not everything and now < fault.until:
                continue
            if fault.kind == "paused":
                os.kill(self.cluster.pid(fault.name), signal.SIGCONT)
                del self.faults[role]
                self.note(f"{fault.name} resumed")
            elif fault.kind == "partitioned":
                self.proxies[fault.name].heal()
                del self.faults[role]
                self.note(f"{fault.name} reaches ZooKeeper again")
            elif fault.starting is None:
                fault.starting = threading.Thread(target=self._start, args=(fault,), daemon=True)
                fault.starting.start()
            elif not fault.starting.is_alive():
                if fault.failures:  # it exited while starting (say, a log it needed had no quorum): again
                    self.note(f"{fault.name} did not start: {fault.failures[-1].splitlines()[-1][:200]}")
                    fault.failures.clear()
                    fault.starting = None
                else:
                    del self.faults[role]

    def _start(self, fault: Fault) -> None:
        try:
            if fault.name in self.proxies:  # through its own link again, so that it can be partitioned
                self.cluster.restart_nodes_through({fault.name: self.proxies[fault.name].address})
                self.note(f"{fault.name} started again (pid {self.cluster.pid(fault.name)})")
            else:
                started = self.cluster.start(fault.name)
                self.note(f"{fault.name} started again (pid {started['pid']})")
        except Exception as exc:  # noqa: BLE001 - ClusterError or AssertionError: noted, started again later
            fault.failures.append(str(exc))

    def heal_all(self, timeout: float = 240.0) -> None:
        deadline = time.monotonic() + timeout
        while self.faults:
            if time.monotonic() > deadline:
                raise AssertionError(f"could not heal {self.faults}:\n" + "\n".join(self.history))
            self.heal_due(everything=True)
            time.sleep(0.2)


def run_nemesis(tmp_path: Path, seconds: float, longest_pause: dict[str, float], longest_partition: float,
                secure: bool = False) -> None:
    """``secure``: on a ``cluster up --secure`` cluster (the producers and the checker in over SASL_SSL, the
    nodes reaching ZooKeeper's TLS port through their proxies, the logds over CURVE)."""
    seed = int(os.environ.get("MILLRACE_NEMESIS_SEED", random.randrange(1 << 30)))
    print(f"nemesis seed {seed} (MILLRACE_NEMESIS_SEED={seed} replays the schedule), {seconds:g} s of faults"
          f"{', security on' if secure else ''}")
    cluster = LocalClusterCli(tmp_path / "cluster", *(["--secure"] if secure else []), "--nodes", "3",
                              "--log-replicas", "3", "--write-quorum", "3", "--ack-quorum", "2", "--containers", "4",
                              "--session-timeout", str(SESSION_TIMEOUT))
    # The links close after the cluster is down (a node cut off from ZooKeeper cannot close its
    # containers cleanly: truncating their logs is a ZooKeeper write).
    with contextlib.ExitStack() as links, cluster:
        host, port = cluster.summary["zookeeper"].rsplit(":", 1)
        proxies = {name: links.enter_context(TcpProxy((host, int(port)))) for name in cluster.names("node")}
        cluster.restart_nodes_through({name: proxy.address for name, proxy in proxies.items()})
        client = cluster.client_settings()
        create_topic(cluster.bootstrap, "nemesis", PARTITIONS, client)
        load = KafkaLoad(cluster.bootstrap, "nemesis", client=client)
        nemesis = Nemesis(cluster, random.Random(seed), longest_pause=longest_pause, proxies=proxies,
                          longest_partition=longest_partition)
        try:
            load.wait_for(300)
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                nemesis.step()
                time.sleep(nemesis.pause_until_next())
            nemesis.heal_all()
            try:
                wait_status(cluster, lambda s: all_owned(s) and all(n["registered"] for n in s["nodes"]),
                            "the healed cluster to own every container with every node", timeout=120)
            except AssertionError as exc:  # a liveness failure: still check what was acknowledged first
                unhealed = str(exc).splitlines()[0]
            else:
                unhealed = ""
                if not load.errors:  # producers dead of a fatal error take no more writes
                    load.wait_for(300, timeout=120)  # the healed cluster takes writes again
        finally:
            nemesis.heal_all()
            load.finish(timeout=120)
        result = load.check(cluster.bootstrap, PARTITIONS, logs=cluster.directory)
        print(result.line())
        for error in result.errors[:10]:
            print(f"  client error: {error}")
        # Errors are allowed under this nemesis (a record may time out while both a node and a logd are
        # down); what was acknowledged must be there exactly once, where it was acknowledged, in order.
        assert result.ok, "\n".join(nemesis.history)
        assert result.read >= result.acknowledged
        assert not unhealed, unhealed + "\n" + "\n".join(nemesis.history)


@pytest.mark.timeout(300)
def test_nemesis_short(tmp_path: Path) -> None:
    """CI's run: kills of any length, pauses shorter than a session (no zombies) and than a logd's
    request timeout (no ensemble change by a pause), nodes partitioned from ZooKeeper for up to 6 s (past
    a session: their containers move while they run on)."""
    run_nemesis(tmp_path, float(os.environ.get("MILLRACE_NEMESIS_SECONDS", "30")), {"node": 2.0, "logd": 4.0}, 6.0)


@pytest.mark.timeout(300)
def test_nemesis_short_secured(tmp_path: Path) -> None:
    """The short run on a ``cluster up --secure`` cluster, 20 s of faults (MILLRACE_NEMESIS_SECONDS
    overrides): killed processes come back over TLS, SASL, CURVE and ZooKeeper's TLS port, paused and
    partitioned nodes renew or lose their ZooKeeper sessions over TLS."""
    run_nemesis(tmp_path, float(os.environ.get("MILLRACE_NEMESIS_SECONDS", "20")), {"node": 2.0, "logd": 4.0}, 6.0,
                secure=True)


@pytest.mark.long_faults
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not os.environ.get("MILLRACE_LONG_FAULTS"), reason="the long nemesis run: MILLRACE_LONG_FAULTS=1")
def test_nemesis_long(tmp_path: Path) -> None:
    """Ten minutes, pauses up to 8 s: zombie nodes and logds replaced by a pause too (see the module
    docstring for what this run has found)."""
    run_nemesis(tmp_path, float(os.environ.get("MILLRACE_NEMESIS_SECONDS", "600")), {"node": 8.0, "logd": 8.0}, 8.0)


@pytest.mark.long_faults
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not os.environ.get("MILLRACE_LONG_FAULTS"), reason="the long nemesis run: MILLRACE_LONG_FAULTS=1")
def test_nemesis_long_secured(tmp_path: Path) -> None:
    """The long run with security on."""
    run_nemesis(tmp_path, float(os.environ.get("MILLRACE_NEMESIS_SECONDS", "600")), {"node": 8.0, "logd": 8.0}, 8.0,
                secure=True)
