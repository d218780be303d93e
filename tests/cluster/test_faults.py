"""Faults under continuous load, on a cluster started with ``millrace cluster up`` (ZooKeeper, 3 logd with
write quorum 3 / ack quorum 2, 3 nodes): idempotent acks=all confluent-kafka producers keep writing while
a logd is SIGKILLed, while a node is SIGKILLed, and across a SIGKILL of every process followed by
``cluster up``. Each test prints acknowledged / read / lost / duplicated counts; nothing acknowledged
may be lost, doubled, moved to another offset or reordered.

Native writers (writer ids) given one node's endpoint follow each segment's owner across a node's SIGKILL
(``test_native_writers_through_one_node_survive_a_node_sigkill``); a native reader group reads a stream
across one (``test_native_reader_group_reads_across_a_node_sigkill``).

A node partitioned from ZooKeeper while it keeps running (every node reaching ZooKeeper through a
``TcpProxy`` of its own, one link blackholed past the session timeout) loses its containers to the
others, is fenced, steps down by its own clock and registers again after the heal
(``test_a_node_cut_off_from_zookeeper_keeps_running_and_acknowledges_nothing_it_loses``).

With security on (``cluster up --secure``: producers and checker in over SASL_SSL as ``admin``, the
nodes on ZooKeeper's TLS port, the logds over CURVE) the same load and checker run: CI runs the logd
SIGKILL, the node SIGKILL and the SIGKILL of everything followed by ``cluster up`` one after another on
one secured cluster (``test_a_secured_cluster_loses_nothing_across_...``, about 25 s); each of the three
on a secured cluster of its own is the ``[secure]`` parameter of its test, a ``long_faults`` run
(MILLRACE_LONG_FAULTS=1, about 17 s each). First runs: 11,044 and 11,662 records through the combined
run, 4214, 5185 and 6316 through the three, all read back once, at their offsets, in order; no client
error.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from millrace.gateway.commands.local_cluster import zookeeper_missing
from millrace.protocol.messages import AppendEvents, GetSegmentOwner, ReadEvents
from tests.cluster.faults import KafkaLoad, NativeLoad, read_partitions, tally
from tests.cluster.local_cluster import LocalClusterCli, pid_alive
from tests.cluster.proxy import TcpProxy
from tests.cluster.test_local_cluster import all_owned, create_topic, wait_status

pytestmark = [pytest.mark.skipif(zookeeper_missing() is not None, reason=str(zookeeper_missing())),
              pytest.mark.timeout(400)]

PARTITIONS = 6
SESSION_TIMEOUT = "3"


# The scenarios parametrised by security: CI runs them on a plain cluster (and one secured cluster goes
# through all three in ``test_a_secured_cluster_...`` below); each on a cluster of its own with security
# on is a full-length run (``long_faults``, MILLRACE_LONG_FAULTS=1).
LONG = [pytest.mark.long_faults,
        pytest.mark.skipif(not os.environ.get("MILLRACE_LONG_FAULTS"), reason="secured variant: MILLRACE_LONG_FAULTS=1")]
SECURITY = pytest.mark.parametrize("secure", [pytest.param(False, id="plain"), pytest.param(True, id="secure", marks=LONG)])


def new_cluster(tmp_path: Path, secure: bool = False) -> LocalClusterCli:
    """Three nodes, three logd (write quorum 3, ack quorum 2); ``secure``: ``cluster up --secure`` (every
    link secured, Kafka clients in over SASL_SSL with ``client_settings()``)."""
    return LocalClusterCli(tmp_path / "cluster", *(["--secure"] if secure else []), "--nodes", "3",
                           "--log-replicas", "3", "--write-quorum", "3", "--ack-quorum", "2", "--containers", "4",
                           "--session-timeout", SESSION_TIMEOUT)


def segments_owner(cluster: LocalClusterCli, scope: str, stream: str) -> tuple[str, str, str]:
    """(the node owning the most of the stream's current segments, its native endpoint, that of another
    node),
    asked as the client asks (GET_SEGMENT_OWNER), once every container is owned: killing that node
    moves segments the clients given that endpoint read or write."""
    from millrace.client.manager import StreamManager

    wait_status(cluster, all_owned, "every container owned")
    with StreamManager(cluster.summary["native"][0]) as manager:
        owners = Counter(str(manager.controller.call(GetSegmentOwner(segment=s.segment.name))[0]["native"])
                         for s in manager.controller.describe_stream(scope, stream).segments)
    busiest = owners.most_common(1)[0][0]
    nodes = [p for p in cluster.summary["processes"] if p["role"] == "node"]
    victim = next(p["name"] for p in nodes if busiest.endswith(f":{p['ports']['native']}"))
    return victim, busiest, next(e for e in cluster.summary["native"] if e != busiest)


@SECURITY
def test_sigkill_one_logd_under_load_loses_nothing_and_clients_see_no_error(tmp_path: Path, secure: bool) -> None:
    with new_cluster(tmp_path, secure) as cluster:
        client = cluster.client_settings()
        create_topic(cluster.bootstrap, "logdfault", PARTITIONS, client)
        load = KafkaLoad(cluster.bootstrap, "logdfault", client=client)
        try:
            load.wait_for(500)
            dead = cluster.summary["log_replicas"][1]
            cluster.kill("logd-2")
            at_kill = load.count
            load.wait_for(1500, timeout=90)  # two replicas still make the ack quorum
            # A log with appends finds logd-2 silent and goes on without it (no spare: its ensemble shrinks).
            wait_status(cluster, lambda s: any(dead not in log["ensemble"] for log in s["logs"]),
                        "an ensemble that dropped the dead logd", timeout=30)
        finally:
            load.finish()
        result = load.check(cluster.bootstrap, PARTITIONS, logs=cluster.directory)
        print(f"{result.line()} ({load.count - at_kill} acknowledged after the SIGKILL)")
        assert result.errors == []
        assert result.ok and result.read == result.acknowledged
        # Status shows the dead replica: gone from the ensembles that replaced it (no spare: they shrank
        # to two), not answering in the others.
        status = cluster.status()
        print(f"  logd-2 ({dead}) dead:")
        assert not next(p for p in status["processes"] if p["name"] == "logd-2")["running"]
        for log in status["logs"]:
            print(f"  {log['name']}: epoch {log['epoch']}, ensemble {log['ensemble']}, "
                  f"under-replicated fragments {log['under_replicated']} of {log['fragments']}")
            assert all(not r["answered"] for r in log["replicas"] if r["address"] == dead)
            assert sum(r["answered"] for r in log["replicas"]) >= 2
        # The logd comes back: every ensemble that shrank grows back to three, and what was written on
        # two replicas meanwhile is copied to the third (no fragment left under-replicated).
        cluster.start("logd-2")
        began = time.monotonic()
        wait_status(cluster, lambda s: all(
            len(log["ensemble"]) == 3 and all(r["answered"] for r in log["replicas"]) and not log["under_replicated"]
            for log in s["logs"]), "every log back on three replicas", timeout=60)
        print(f"  every log back on three replicas {time.monotonic() - began:.1f} s after logd-2 restarted")


@SECURITY
def test_sigkill_a_node_under_load_loses_and_duplicates_nothing(tmp_path: Path, secure: bool) -> None:
    with new_cluster(tmp_path, secure) as cluster:
        client = cluster.client_settings()
        create_topic(cluster.bootstrap, "nodefault", PARTITIONS, client)
        load = KafkaLoad(cluster.bootstrap, "nodefault", client=client)
        try:
            load.wait_for(500)
            status = wait_status(cluster, all_owned, "every container owned")
            victim = max(status["nodes"], key=lambda n: len(n["containers"]))
            killed_at = time.monotonic()
            cluster.kill(victim["name"])
            wait_status(cluster, lambda s: all_owned(s) and not any(
                c["owner"] == victim["id"] for c in s["containers"]), f"{victim['name']}'s containers to move")
            moved_after = time.monotonic() - killed_at
            at_move = load.count
            load.wait_for(1500, timeout=90)
        finally:
            load.finish()
        result = load.check(cluster.bootstrap, PARTITIONS, logs=cluster.directory)
        print(f"{result.line()}; {victim['name']} (containers {victim['containers']}) SIGKILLed, its containers "
              f"owned elsewhere after {moved_after:.1f} s (session timeout {SESSION_TIMEOUT} s), "
              f"{load.count - at_move} acknowledged since")
        assert result.errors == []
        assert result.ok and result.read == result.acknowledged


@SECURITY
def test_sigkill_every_process_then_cluster_up_keeps_everything_acknowledged(tmp_path: Path, secure: bool) -> None:
    with new_cluster(tmp_path, secure) as cluster:
        client = cluster.client_settings()
        create_topic(cluster.bootstrap, "wholefault", PARTITIONS, client)
        load = KafkaLoad(cluster.bootstrap, "wholefault", client=client)
        try:
            load.wait_for(1000)
            pids = [cluster.kill(name) for name in ("node-1", "node-2", "node-3", "logd-1", "logd-2", "logd-3",
                                                    "zookeeper-1")]
            assert not any(pid_alive(pid) for pid in pids)
            before = load.count
            time.sleep(1.0)
            restarted = cluster.up()  # every process again, on the ports the producers know
            assert restarted["bootstrap"] == cluster.bootstrap
            load.wait_for(1000, timeout=120)  # the same producers carry on
        finally:
            load.finish()
        result = load.check(cluster.bootstrap, PARTITIONS, logs=cluster.directory)
        print(f"{result.line()} ({before} acknowledged before the SIGKILL of every process)")
        assert result.ok and result.read >= result.acknowledged
        assert result.errors == []


def test_a_secured_cluster_loses_nothing_across_a_logd_a_node_and_then_every_process_sigkilled(tmp_path: Path) -> None:
    """CI's secured run of the three scenarios above, one after another on one ``cluster up --secure``
    cluster under one load (idempotent acks=all producers over SASL_SSL): a logd SIGKILLed (and started
    again), then the node owning the most containers SIGKILLed (its containers move, it is started again and
    registers over ZooKeeper's TLS port), then every process SIGKILLed and ``cluster up``. The same producers
    log in again after each restart; every node registers again; the checker (a new SASL_SSL login) reads
    every acknowledged record once, at its offset, in order."""
    began = time.monotonic()
    phases: dict[str, float] = {}
    with new_cluster(tmp_path, secure=True) as cluster:
        phases["up"] = time.monotonic() - began
        client = cluster.client_settings()
        assert client["security.protocol"] == "SASL_SSL" and client["sasl.password"] == cluster.summary["admin"]["password"]
        create_topic(cluster.bootstrap, "securefault", PARTITIONS, client)
        load = KafkaLoad(cluster.bootstrap, "securefault", client=client)
        counts: dict[str, int] = {}
        try:
            load.wait_for(500)
            counts["before"] = load.count
            phases["load flowing"] = time.monotonic() - began
            cluster.kill("logd-2")
            load.wait_for(500, timeout=90)  # two replicas make the ack quorum
            cluster.start("logd-2")  # back over CURVE
            counts["logd-2 SIGKILLed"] = load.count - counts["before"]
            phases["logd-2 killed and started"] = time.monotonic() - began

            status = wait_status(cluster, all_owned, "every container owned")
            victim = max(status["nodes"], key=lambda n: len(n["containers"]))
            at_kill = load.count
            cluster.kill(victim["name"])
            wait_status(cluster, lambda s: all_owned(s) and not any(
                c["owner"] == victim["id"] for c in s["containers"]), f"{victim['name']}'s containers to move")
            load.wait_for(500, timeout=90)
            cluster.start(victim["name"])
            wait_status(cluster, lambda s: all_owned(s) and all(n["registered"] for n in s["nodes"]),
                        f"{victim['name']} registered again", timeout=60)
            counts[f"{victim['name']} SIGKILLed"] = load.count - at_kill
            phases[f"{victim['name']} killed, moved and started"] = time.monotonic() - began

            at_kill = load.count
            pids = [cluster.kill(name) for name in (*cluster.names("node"), *cluster.names("logd"), "zookeeper-1")]
            assert not any(pid_alive(pid) for pid in pids)
            time.sleep(1.0)
            restarted = cluster.up()  # every process again, on the ports the producers know, no password shown
            assert restarted["bootstrap"] == cluster.bootstrap and "admin" not in restarted
            assert cluster.client_settings() == client
            load.wait_for(1000, timeout=120)  # the same producers log in again and carry on
            wait_status(cluster, lambda s: all_owned(s) and all(n["registered"] for n in s["nodes"]),
                        "every node registered after `cluster up`", timeout=60)
            counts["everything SIGKILLed"] = load.count - at_kill
            phases["everything killed and up"] = time.monotonic() - began
        finally:
            load.finish()
        result = load.check(cluster.bootstrap, PARTITIONS, logs=cluster.directory)
        phases["checked"] = time.monotonic() - began
        print(f"{result.line()}; acknowledged {counts}; phases {({k: round(v, 1) for k, v in phases.items()})}")
        assert result.errors == []
        assert result.ok and result.read == result.acknowledged


def test_native_writers_through_one_node_survive_a_node_sigkill(tmp_path: Path) -> None:
    """Native writers given one node's endpoint send each partition's batches to its segment's owner
    (GET_SEGMENT_OWNER; WRONG_HOST from others) and, when that owner is SIGKILLed, find the new one and
    resend: nothing acknowledged lost or doubled, per-key order kept. A client given only the killed
    node's endpoint, which has made controller calls only (no owner learned), goes on with the others:
    that node's HELLO named them."""
    from millrace.client.manager import StreamManager

    with new_cluster(tmp_path) as cluster:
        create_topic(cluster.bootstrap, "nativefault", PARTITIONS)
        victim, victims_endpoint, endpoint = segments_owner(cluster, "kafka", "nativefault")
        load = NativeLoad(endpoint, "nativefault")
        controller_only = StreamManager(victims_endpoint, timeout=30.0, reconnect_timeout=30.0)
        try:
            assert "kafka" in controller_only.list_scopes()
            load.wait_for(500, timeout=30)
            at_kill = load.count
            cluster.kill(victim)
            assert controller_only.create_scope("after-the-kill")
            load.wait_for(1000, timeout=90)
        finally:
            load.finish(timeout=20)  # every event of a healthy cluster is acknowledged well within this
            controller_only.close()
        result = load.check(cluster.bootstrap)
        resent = sum(w.resent_batches for w in load.writers)
        print(f"{result.line()}; {victim}, owner of most of the topic's segments, SIGKILLed after {at_kill} "
              f"acknowledged (writers given {endpoint}); {resent} batches resent")
        for error in result.errors[:5]:
            print(f"  client error: {error}")
        assert result.errors == []
        assert result.ok and result.read == result.acknowledged


def check_wrong_host(manager: Any, slices: list[tuple[float, float]], natives: list[str]) -> None:
    """A node that does not serve a segment answers WRONG_HOST at once, naming the segment: to a read
    that would otherwise wait (wait_ms) on its stale copy of the partitions, and to an append."""
    from millrace.client.connection import Connection, Endpoint
    from millrace.protocol.errors import WrongHostError

    segment = manager.controller.describe_stream("rg", "failover").segments[0].segment
    owner = str(manager.controller.call(GetSegmentOwner(segment=segment.name))[0]["native"])
    partition = next(n for n, (lo, _) in enumerate(slices) if segment.key_start <= lo < segment.key_end)
    other = Connection(Endpoint.parse(next(e for e in natives if e != owner)))
    try:
        began = time.monotonic()
        with pytest.raises(WrongHostError) as refused:
            other.request(ReadEvents(scope="rg", stream="failover", segment_id=segment.segment_id, offset=0,
                                     max_bytes=1 << 16, wait_ms=5000)).result(10)
        assert refused.value.segment == segment.name and time.monotonic() - began < 2
        with pytest.raises(WrongHostError) as refused:
            other.request(AppendEvents(scope="rg", stream="failover", partition=partition),
                          b"not looked at").result(10)
        assert refused.value.segment == segment.name
    finally:
        other.close()


def test_native_reader_group_reads_across_a_node_sigkill(tmp_path: Path) -> None:
    """A native reader group reads each segment from its owner; when an owner is SIGKILLed mid-stream its
    reader finds the new owner and goes on from its position: every event written (before and after the
    kill) is read exactly once, in order per routing key. The clients were given the killed node first
    in their list of endpoints, so the reader group's state calls move to another node too."""
    from millrace.client.manager import StreamManager

    with new_cluster(tmp_path) as cluster:
        with StreamManager(cluster.summary["native"][0]) as setup:
            setup.create_scope("rg")
            setup.create_stream("rg", "failover", initial_segments=4)  # spread over the containers
        victim, first, other = segments_owner(cluster, "rg", "failover")
        with StreamManager(f"{first},{other}", timeout=30.0, reconnect_timeout=60.0) as manager:
            writer = manager.create_writer("rg", "failover", writer_id="w")
            written: list[bytes] = []

            def write(count: int) -> None:
                futures = []
                for _ in range(count):
                    value = f"k{len(written) % 8}:{len(written)}".encode()
                    futures.append(writer.write_event(value, routing_key=value.split(b":")[0].decode()))
                    written.append(value)
                deadline = time.monotonic() + 60
                for f in futures:  # bounded, unlike flush(): a writer stuck on a wrong node fails the test
                    f.result(max(0.0, deadline - time.monotonic()))

            write(400)
            check_wrong_host(manager, writer.slices, cluster.summary["native"])
            reader = manager.create_reader_group("g", "rg", "failover").create_reader("r")
            read: list[bytes] = []

            def read_until(count: int, timeout: float) -> None:
                deadline = time.monotonic() + timeout
                while len(read) < count and time.monotonic() < deadline:
                    got = reader.read_next_event(timeout=1.0)
                    if got is not None and got.data is not None:  # not a checkpoint
                        read.append(got.data)

            read_until(200, 60)
            cluster.kill(victim)
            killed_at = time.monotonic()
            write(200)  # the writer follows the partitions' new owners too
            read_until(len(written), 90)
            took = time.monotonic() - killed_at
            reader.close()
            writer.close()
        counts = Counter(read)
        lost = [v for v in written if counts[v] == 0]
        duplicated = [v for v, n in counts.items() if n > 1]
        last: dict[bytes, int] = {}
        out_of_order = 0
        for value in read:
            key, _, number = value.partition(b":")
            out_of_order += int(number) < last.get(key, -1)
            last[key] = int(number)
        print(f"native reader group: written {len(written)}, read {len(read)}, lost {len(lost)}, duplicated "
              f"{len(duplicated)}, out of order {out_of_order}; {victim}, owner of most of its segments, "
              f"SIGKILLed after 200 read, all read {took:.1f} s later")
        assert not lost and not duplicated and out_of_order == 0 and len(read) == len(written)


def test_a_node_joining_under_load_takes_over_containers_without_loss(tmp_path: Path) -> None:
    """Containers handed over between live nodes (a node stopped cleanly and started again) under load."""
    with new_cluster(tmp_path) as cluster:
        create_topic(cluster.bootstrap, "joinfault", PARTITIONS)
        load = KafkaLoad(cluster.bootstrap, "joinfault")
        try:
            load.wait_for(500)
            cluster.kill("node-3", signal.SIGTERM)  # a clean stop: its containers move to the others
            wait_status(cluster, lambda s: all_owned(s) and not next(
                n for n in s["nodes"] if n["id"] == "3")["registered"], "node-3 gone, its containers moved")
            load.wait_for(500, timeout=90)
            cluster.start("node-3")  # the assigner hands containers over to it from the live nodes
            wait_status(cluster, lambda s: all_owned(s) and all(n["containers"] for n in s["nodes"]),
                        "node-3 given containers again")
            at_join = load.count
            load.wait_for(1500, timeout=90)
        finally:
            load.finish(timeout=60)
        result = load.check(cluster.bootstrap, PARTITIONS, logs=cluster.directory)
        print(f"{result.line()} ({load.count - at_join} acknowledged after node-3 had containers again)")
        assert result.errors == []
        assert result.ok and result.read == result.acknowledged


def test_a_zombie_node_rejoins_after_its_logs_lost_a_replica(tmp_path: Path) -> None:
    """A node paused past its session while a logd of its containers' ensembles is paused too (and then
    dies): when the node resumes, its old containers' logs fail (fenced by the new owners, a replica gone)
    and it must still register again and take containers in new terms."""
    with new_cluster(tmp_path) as cluster:
        create_topic(cluster.bootstrap, "zombiefault", PARTITIONS)
        load = KafkaLoad(cluster.bootstrap, "zombiefault")
        try:
            load.wait_for(500)
            status = wait_status(cluster, all_owned, "every container owned")
            victim = max(status["nodes"], key=lambda n: len(n["containers"]))
            cluster.kill("logd-1", signal.SIGSTOP)
            cluster.kill(victim["name"], signal.SIGSTOP)
            wait_status(cluster, lambda s: all_owned(s) and not any(
                c["owner"] == victim["id"] for c in s["containers"]), f"{victim['name']}'s containers to move")
            cluster.kill("logd-1", signal.SIGKILL)
            os.kill(cluster.pid(victim["name"]), signal.SIGCONT)
            back = wait_status(cluster, lambda s: next(n for n in s["nodes"] if n["id"] == victim["id"])["registered"],
                               f"{victim['name']} registered again", timeout=60)
            print(f"{victim['name']} registered again; containers {[n['containers'] for n in back['nodes']]}")
            load.wait_for(500, timeout=90)
        finally:
            load.finish(timeout=60)
        result = load.check(cluster.bootstrap, PARTITIONS, logs=cluster.directory)
        print(result.line())
        assert result.ok and result.read == result.acknowledged


class _Probe:
    """Produces one record at a time straight to ``port`` (a raw connection that learns no other node) to
    each of ``partitions``, recording every answer: (seconds since ``began``, partition, value, error
    code, offset). What a client that still reaches a partitioned node gets from it."""

    def __init__(self, port: int, topic: str, partitions: list[int], began: float) -> None:
        self.port, self.topic, self.partitions, self.began = port, topic, partitions, began
        self.answers: list[tuple[float, int, bytes, int, int]] = []
        self.unanswered = 0  # produces that timed out (held by the node) or whose connection closed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from millrace.protocol.records import NewRecord, build_record_batch
        from tests.kafka.wire import KafkaWire

        n = 0
        wire = None
        while not self._stop.is_set():
            for partition in self.partitions:
                value = f"probe:{n}".encode()
                n += 1
                try:
                    if wire is None:
                        # A short timeout: a produce held by the node counts as unanswered (its outcome
                        # unknown, never as acknowledged) and the probe goes on with a new connection.
                        wire = KafkaWire("127.0.0.1", self.port, timeout=2.0)
                    answer = wire.produce(self.topic, partition, build_record_batch([NewRecord(key=value, value=value)]))
                    self.answers.append((time.monotonic() - self.began, partition, value, answer.error_code,
                                         answer.base_offset))
                except OSError:  # a produce timed out or the connection closed: a new one next time
                    self.unanswered += 1
                    if wire is not None:
                        wire.close()
                    wire = None
            self._stop.wait(0.05)
        if wire is not None:
            wire.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)  # a produce in flight times out within 2 s

    def acknowledged(self) -> dict[bytes, tuple[int, int]]:
        return {value: (p, offset) for _, p, value, error, offset in self.answers if error == 0}


def partition_leaders(bootstrap: str, topic: str, client: dict[str, Any] | None = None) -> dict[int, int]:
    """partition -> leader node id, as Kafka Metadata names them (``client``: librdkafka settings, e.g. a
    secured cluster's login)."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap, **(client or {})}).list_topics(topic, timeout=10)
    return {p: m.leader for p, m in metadata.topics[topic].partitions.items()}


def test_a_node_cut_off_from_zookeeper_keeps_running_and_acknowledges_nothing_it_loses(tmp_path: Path) -> None:
    """A network partition between one node and ZooKeeper, the node running on and still reached by
    clients and the logds: its session expires, its containers move and the new owners fence their logs
    while it still holds them by its own reckoning. It must step down by its own clock, answer every
    produce after the fencing with an error, and register again once the link heals; every record
    acknowledged (by any node, before or during the cut) is read back once, where it was acknowledged."""
    began = time.monotonic()
    phases: dict[str, float] = {}
    # The proxies close after the cluster is down: a node cut off from ZooKeeper cannot close its
    # containers cleanly (truncating their logs is a ZooKeeper write).
    with contextlib.ExitStack() as links, new_cluster(tmp_path) as cluster:
        phases["up"] = time.monotonic() - began
        host, port = cluster.summary["zookeeper"].rsplit(":", 1)
        proxies = {name: links.enter_context(TcpProxy((host, int(port)))) for name in cluster.names("node")}
        # Every node reaches ZooKeeper through a link of its own (cutting one must not cut the others).
        cluster.restart_nodes_through({name: proxy.address for name, proxy in proxies.items()})
        wait_status(cluster, lambda s: all_owned(s) and all(n["containers"] for n in s["nodes"]),
                    "every node owning containers")
        create_topic(cluster.bootstrap, "partitionfault", PARTITIONS)
        load = KafkaLoad(cluster.bootstrap, "partitionfault")
        probe: _Probe | None = None
        try:
            load.wait_for(500)
            phases["load flowing"] = time.monotonic() - began
            leaders = partition_leaders(cluster.bootstrap, "partitionfault")
            victim_id = Counter(leaders.values()).most_common(1)[0][0]
            victim = f"node-{victim_id}"
            led = sorted(p for p, leader in leaders.items() if leader == victim_id)
            before = wait_status(cluster, all_owned, "every container owned")
            terms = {c["id"]: c["epoch"] for c in before["containers"] if c["owner"] == str(victim_id)}
            kafka_port = next(p["ports"]["kafka"] for p in cluster.summary["processes"] if p["name"] == victim)
            at_cut = load.count
            cut_at = time.monotonic()
            proxies[victim].cut()
            probe = _Probe(kafka_port, "partitionfault", led, cut_at)
            moved = wait_status(cluster, lambda s: all_owned(s) and not any(
                c["owner"] == str(victim_id) for c in s["containers"]), f"{victim}'s containers to move")
            moved_after = time.monotonic() - cut_at
            # Still cut off: it must give up its containers on its own (its session timeout passed by
            # its clock) while it keeps serving clients.
            down = wait_status(cluster, lambda s: (next(n for n in s["nodes"] if n["name"] == victim)
                               .get("health") or {}).get("containers") == {}, f"{victim} to stop its containers",
                               timeout=30)
            stepped_down_after = time.monotonic() - cut_at
            assert proxies[victim].is_cut and next(n for n in down["nodes"] if n["name"] == victim)["running"]
            time.sleep(max(0.0, 1.0 - (time.monotonic() - cut_at - stepped_down_after)))
            during = load.count - at_cut
            probe.stop()
            healed_at = time.monotonic()
            proxies[victim].heal()
            back = wait_status(cluster, lambda s: all_owned(s) and all(n["containers"] for n in s["nodes"]),
                               f"{victim} registered again with containers", timeout=60)
            rejoined_after = time.monotonic() - healed_at
            load.wait_for(500, timeout=60)
            after = time.monotonic() - healed_at
            phases["after the heal"] = time.monotonic() - began
        finally:
            if probe is not None:
                probe.stop()
            load.finish(timeout=60)
        phases["finished"] = time.monotonic() - began
        read = read_partitions(cluster.bootstrap, "partitionfault", PARTITIONS, 120)
        phases["read"] = time.monotonic() - began
        probes = {p: [(o, v) for o, v in records if v.startswith(b"probe:")] for p, records in read.items()}
        result = tally("partitionfault", load.acked, {p: [r for r in records if not r[1].startswith(b"probe:")]
                                                      for p, records in read.items()}, list(load.errors))
        # What the probe's produces straight to the cut-off node got: acknowledged only before the new
        # owners fenced it (then they must be in the log, where it said), refused after.
        acked_probes = probe.acknowledged()
        probed = tally("probe", acked_probes, probes, [])
        refusals = Counter(error for at, _, _, error, _ in probe.answers if at >= moved_after and error != 0)
        late = [a for a in probe.answers if a[0] >= moved_after and a[3] == 0]
        new_terms = {c["id"]: c["epoch"] for c in moved["containers"] if c["id"] in terms}
        print(f"{result.line()}; {victim} (leading partitions {led}, containers {terms}) cut off from ZooKeeper: "
              f"its containers owned elsewhere after {moved_after:.1f} s (epochs {new_terms}), it stopped them "
              f"itself after {stepped_down_after:.1f} s (session timeout {SESSION_TIMEOUT} s), registered again "
              f"{rejoined_after:.1f} s after the heal (incarnation {next(n for n in back['nodes'] if n['name'] == victim).get('incarnation')}); "
              f"{during} acknowledged during the cut, 500 more {after:.1f} s after the heal")
        print(f"  phases: {phases}")
        print(f"  produces straight to {victim} during the cut: {len(probe.answers)} answered, "
              f"{probe.unanswered} unanswered within 2 s, {len(acked_probes)} acknowledged (the last {max((a[0] for a in probe.answers if a[3] == 0), default=0):.1f} s "
              f"after the cut), {sum(refusals.values())} refused after the move {dict(refusals)}; {probed.line()}")
        assert all(new_terms[c] > e for c, e in terms.items())
        incarnations = [next(n for n in s["nodes"] if n["name"] == victim).get("incarnation") for s in (before, back)]
        assert None not in incarnations and incarnations[0] != incarnations[1]  # a new registration, new terms
        assert not late, f"{victim} acknowledged after its containers moved: {late[:5]}"
        assert sum(refusals.values()) > 0  # it went on answering clients, with errors
        assert probed.lost == 0 and probed.misplaced == 0 and probed.duplicated == 0
        assert result.errors == []
        assert result.ok and result.read == result.acknowledged
