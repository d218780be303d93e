"""``millrace serve --zookeeper``: three real node processes over a real ZooKeeper, three logd replicas
and one shared long-term storage directory (tests/cluster/serve_cluster.py).

- Native clients reach every segment through any node (the router), and a node's peer listener serves
  only its own containers (CONTAINER_OFFLINE for the others: a forwarded request is never forwarded).
- Kafka: every node's Metadata lists the three nodes and the same leader for each partition (the owner
  of its open segment's container); the leader takes produce and fetch, the others answer
  NOT_LEADER_OR_FOLLOWER; FindCoordinator names the groups table's owner on every node and the others
  answer NOT_COORDINATOR; kafka-python produces through one node and a consumer group reads through
  another.
- A SIGKILLed node under an idempotent acks=all confluent-kafka producer: its partitions move to the
  others, the producer carries on, and every acknowledged record is read back exactly once.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace.client.segments import SegmentClient
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.find_coordinator import FindCoordinatorRequest
from millrace.gateway.kafka_protocol.messages.join_group import JoinGroupRequest
from millrace.protocol.errors import ContainerOfflineError
from millrace.protocol.messages import GetSegmentInfo
from millrace.protocol.records import NewRecord, build_record_batch
from millrace.store.cluster.connection import NodeConnection
from millrace.store.segment_store import container_index
from tests.cluster.faults import librdkafka_trace
from tests.cluster.serve_cluster import CONTAINERS, Cluster, NodeProcess, wait_for
from tests.kafka.wire import KafkaWire
from tests.server_process import ServerProcess
from tests.test_metrics import check_agreement, requests, scrape

FIND_COORDINATOR, JOIN_GROUP = FindCoordinatorRequest.API_KEY, JoinGroupRequest.API_KEY
NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, zk_hosts) as c:
        yield c


def wire(node: NodeProcess) -> KafkaWire:
    return KafkaWire.connect(node.bootstrap)


def leaders(node: NodeProcess, topic: str) -> dict[int, int]:
    """partition -> leader id in ``node``'s Metadata (-1 while it has none)."""
    with wire(node) as c:
        answer = c.metadata(12, [topic])
    return {p.partition_index: p.leader_id for p in answer.topics[0].partitions}


def agreed_leaders(cluster: Cluster, topic: str, partitions: int) -> dict[int, int]:
    """Wait until every node names a live leader for every partition, the same one."""
    seen: list[dict[int, int]] = []

    def agreed() -> bool:
        seen[:] = [leaders(n, topic) for n in cluster.nodes if n.proc is not None and n.proc.poll() is None]
        first = seen[0]
        return (len(first) == partitions and all(v >= 0 for v in first.values())
                and all(s == first for s in seen))

    wait_for(agreed, f"agreed leaders of {topic}: {seen}")
    return seen[0]


def batch(values: list[bytes], **kw: Any) -> bytes:
    return build_record_batch([NewRecord(key=b"k", value=v) for v in values], **kw)


class TestOnOneCluster:
    """Tests that kill, pause or restart no node and use topics, groups and segments of their own share one
    cluster (three nodes and three replicas take seconds to start on two cores)."""

    @pytest.fixture(scope="class")
    @classmethod
    def cluster(cls, class_zk_hosts: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
        with Cluster(tmp_path_factory.mktemp("cluster"), class_zk_hosts) as c:
            yield c

    def test_native_segments_through_any_node_and_peers_serve_only_their_own(self, cluster: Cluster) -> None:
        first, second, third = cluster.nodes
        names = [f"scope/s/{i}" for i in range(8)]  # spread over the four containers
        assert len({container_index(n, CONTAINERS) for n in names}) > 1
        with SegmentClient("127.0.0.1", second.native_port) as writer:
            for i, name in enumerate(names):
                writer.create_segment(name)
                assert writer.append(name, f"event {i}".encode()) == 0
        with SegmentClient("127.0.0.1", third.native_port) as reader:
            for i, name in enumerate(names):
                assert reader.read(name, 0).data == f"event {i}".encode()
                assert reader.get_info(name).length == len(f"event {i}")  # answered from the owner, off the reactor
            assert set(names) <= set(reader.list_segments())
        # Each segment is served by exactly one peer listener: its container's owner.
        served: Counter[str] = Counter()
        for node in cluster.nodes:
            conn = NodeConnection("127.0.0.1", node.ports["peer"])
            try:
                for name in names:
                    try:
                        conn.request(GetSegmentInfo(segment=name)).result(10)
                        served[name] += 1
                    except ContainerOfflineError:
                        pass
            finally:
                conn.close()
        assert served == Counter({name: 1 for name in names})
        # GET_SEGMENT_OWNER (Pravega's getURI), asked of any node, names the node whose peer listener
        # served the segment above, with that node's native listener.
        for name in names:
            server_of = next(n for n in cluster.nodes if _serves(n, name))
            for node in cluster.nodes:
                with SegmentClient("127.0.0.1", node.native_port) as client:
                    owner = client.segment_owner(name)
                assert owner == {"container": container_index(name, CONTAINERS), "node": str(server_of.node_id),
                                 "native": f"127.0.0.1:{server_of.native_port}"}, (name, node.node_id, owner)
        # HTTP on each node: health and /api/segments of its own containers, which together are all of them.
        containers: list[str] = []
        listed: list[str] = []
        for node in cluster.nodes:
            health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/health", timeout=10).read())
            assert health["healthy"] is True, health
            containers.extend(health["containers"])
            segments = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/api/segments",
                                                         timeout=10).read())["segments"]
            listed.extend(s["name"] for s in segments if s["name"] in names)
        assert sorted(containers, key=int) == [str(c) for c in range(CONTAINERS)]
        assert sorted(listed) == sorted(names)

    def test_kafka_leaders_not_leader_and_coordinator_across_nodes(self, cluster: Cluster) -> None:
        topic, partitions = "spread", 8
        with wire(cluster.nodes[0]) as c:
            c.create(topic, partitions)
            brokers = c.metadata(12, None).brokers
        assert sorted(b.node_id for b in brokers) == [1, 2, 3]
        assert {(b.host, b.port) for b in brokers} == {("127.0.0.1", n.kafka_port) for n in cluster.nodes}
        leader_of = agreed_leaders(cluster, topic, partitions)
        assert len(set(leader_of.values())) > 1, leader_of  # four containers over three nodes
        by_id = {n.node_id: n for n in cluster.nodes}
        for p, leader in leader_of.items():
            with wire(by_id[leader]) as c:
                answer = c.produce(topic, p, batch([f"p{p}".encode()]))
                assert answer.error_code == 0 and answer.base_offset == 0, answer
                assert c.fetch(topic, p, 0).high_watermark == 1
            for other in cluster.nodes:
                if other.node_id != leader:
                    with wire(other) as c:
                        assert c.produce(topic, p, batch([b"no"])).error_code == NOT_LEADER
                        assert c.fetch(topic, p, 0).error_code == NOT_LEADER
        # One group coordinator, named alike by every node; the others refuse group requests.
        named = set()
        for node in cluster.nodes:
            with wire(node) as c:
                answer = c.send(FIND_COORDINATOR, 3, FindCoordinatorRequest(key="g", key_type=0))
            assert answer.error_code == 0, answer
            named.add(answer.node_id)
        (coordinator,) = named
        for node in cluster.nodes:
            with wire(node) as c:
                answer = c.send(JOIN_GROUP, 5, JoinGroupRequest(
                    group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                    protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]))
            expected = ErrorCode.MEMBER_ID_REQUIRED if node.node_id == coordinator else ErrorCode.NOT_COORDINATOR
            assert answer.error_code == int(expected), (node.node_id, answer)

    def test_kafka_python_produces_through_one_node_and_a_group_consumes_through_another(self, cluster: Cluster) -> None:
        from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

        first, second, third = cluster.nodes
        with wire(first) as c:
            c.create("clients", 6)
        agreed_leaders(cluster, "clients", 6)
        admin = KafkaAdminClient(bootstrap_servers=third.bootstrap)
        assert sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"]) == [1, 2, 3]
        admin.close()
        producer = KafkaProducer(bootstrap_servers=second.bootstrap, acks="all")
        for i in range(300):
            producer.send("clients", key=str(i).encode(), value=str(i).encode())
        producer.flush(60)
        producer.close()
        consumer = KafkaConsumer("clients", bootstrap_servers=third.bootstrap, group_id="readers",
                                 auto_offset_reset="earliest")
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < 300 and time.monotonic() < deadline:
            values.extend(r.value for records in consumer.poll(1000).values() for r in records)
        values.extend(r.value for records in consumer.poll(1000).values() for r in records)  # no more comes
        consumer.commit()
        consumer.close()
        assert sorted(values, key=int) == [str(i).encode() for i in range(300)]

    def test_a_split_made_through_a_node_that_leads_none_of_its_partitions(self, cluster: Cluster) -> None:
        """The splitting node's copy of the partitions is stale: it must not move it onto the successors
        (and serve them from it); every node reloads the topic once the predecessor is sealed."""
        topic = "splitme"
        with wire(cluster.nodes[0]) as c:
            c.create(topic, 4, millrace_segments_initial="2")  # segment 0: partitions 0 and 1
        leader_of = agreed_leaders(cluster, topic, 4)
        assert leader_of[0] == leader_of[1]
        splitter = next(n for n in cluster.nodes if n.node_id not in (leader_of[0], leader_of[2]))
        load = IdempotentLoad(cluster, topic)
        wait_for(lambda: len(load.acked) > 300, "acknowledged records before the split")
        with SegmentClient("127.0.0.1", splitter.native_port) as client:
            client.split_segment("kafka", topic, 0, 2)
        split_at = len(load.acked)
        wait_for(lambda: sum(1 for p in load.acked_partitions[split_at:] if p in (0, 1)) > 300,
                 "records acknowledged in the split partitions after the split")
        load.finish()
        agreed_leaders(cluster, topic, 4)
        load.check_read_back(cluster.nodes[0].bootstrap)
        with wire(cluster.nodes[0]) as c:
            for p in range(4):
                offsets = c.list_offset(topic, p, -1)
                if offsets.error_code == 0:
                    assert offsets.offset == load.acked_partitions.count(p), (p, offsets, leaders(cluster.nodes[0], topic))

    def test_metrics_of_each_node(self, cluster: Cluster) -> None:
        """Each node's /metrics, parsed: its ZooKeeper session, the containers it took, its replicated
        logs' health and acknowledgement latency, its Kafka requests; and the cluster's series as
        docs/metrics.md documents them."""
        names = [f"metrics/s/{i}" for i in range(8)]  # spread over the four containers
        with SegmentClient("127.0.0.1", cluster.nodes[0].native_port) as client:
            for name in names:
                client.create_segment(name)
                client.append(name, b"m" * 100)
        with wire(cluster.nodes[1]) as c:
            c.metadata(12, None)
        acquired = 0
        running: list[str] = []
        for node in cluster.nodes:
            page = scrape(node)
            check_agreement(page, {"replicated", "cluster"})
            assert page.value("millrace_zookeeper_session_state", state="CONNECTED") == 1
            assert page.value("millrace_zookeeper_session_state", state="LOST") == 0
            acquired += int(page.value("millrace_container_ownership_changes_total", change="acquired"))
            containers = [s.labels["container"] for s in page.samples["millrace_log_under_replicated_fragments"]]
            running += containers
            for container in containers:  # every replica is up: nothing to re-replicate
                assert page.value("millrace_log_under_replicated_fragments", container=container) == 0
                assert page.value("millrace_log_ack_latency_seconds_count", container=container) > 0
                lags = [s for s in page.samples["millrace_log_replica_lag_entries"] if s.labels["container"] == container]
                assert len(lags) >= 2 and all(s.value >= 0 for s in lags)  # a series per ensemble member
            assert page.value("millrace_connections", listener="NATIVE") >= 0
        assert requests(scrape(cluster.nodes[1]), "Metadata") >= 1
        assert sorted(running, key=int) == [str(c) for c in range(CONTAINERS)]  # each on one node
        assert acquired >= CONTAINERS


def _serves(node: NodeProcess, name: str) -> bool:
    conn = NodeConnection("127.0.0.1", node.ports["peer"])
    try:
        conn.request(GetSegmentInfo(segment=name)).result(10)
        return True
    except ContainerOfflineError:
        return False
    finally:
        conn.close()


def test_a_single_server_names_itself_as_every_segments_owner(tmp_path: Path) -> None:
    with ServerProcess(str(tmp_path / "data"), "--containers", "4") as server, \
            SegmentClient("127.0.0.1", server.native_port) as client:
        for name in ("a/b/0", "a/b/1", "x/y/2"):
            assert client.segment_owner(name) == {"container": container_index(name, 4), "node": None,
                                                  "native": None}


def test_nodes_started_together_serve(zk_hosts: str, tmp_path: Path) -> None:
    """Each node reads the Kafka tables while it builds, some on containers the others own: their peer
    listeners answer during the build, so three nodes started at once all come up."""
    from kafka import KafkaConsumer, KafkaProducer  # type: ignore[import-untyped]

    cluster = Cluster(tmp_path, zk_hosts, 3)
    try:
        cluster.start(together=True)
        with wire(cluster.nodes[0]) as c:
            c.create("together", 3)
        agreed_leaders(cluster, "together", 3)
        producer = KafkaProducer(bootstrap_servers=cluster.nodes[1].bootstrap, acks="all")
        for i in range(30):
            producer.send("together", value=str(i).encode())
        producer.flush(60)
        producer.close()
        consumer = KafkaConsumer("together", bootstrap_servers=cluster.nodes[2].bootstrap,
                                 auto_offset_reset="earliest")
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < 30 and time.monotonic() < deadline:
            values.extend(r.value for records in consumer.poll(1000).values() for r in records)
        consumer.close()
        assert sorted(values, key=int) == [str(i).encode() for i in range(30)]
        # SIGTERM: each node stops its containers cleanly (leaving the cluster) and exits 0.
        for node in cluster.nodes:
            assert node.stop(timeout=60) == 0, "".join(node.output[-20:])
            assert any("millrace: stopped cleanly" in line for line in node.output)
    finally:
        cluster.stop()


def test_a_new_leader_serves_what_the_dead_one_acknowledged(cluster: Cluster) -> None:
    """The node taking over a partition loaded it before (at the topic's creation, with nothing in it):
    it must serve the partition from state read in its own term, not from that."""
    topic, partitions = "takeover", 8
    with wire(cluster.nodes[0]) as c:
        c.create(topic, partitions)
    leader_of = agreed_leaders(cluster, topic, partitions)
    by_id = {n.node_id: n for n in cluster.nodes}
    for p, leader in leader_of.items():
        with wire(by_id[leader]) as c:
            assert c.produce(topic, p, batch([f"{p}-{i}".encode() for i in range(5)])).error_code == 0
    victim = next(n for n in cluster.nodes[1:] if n.node_id in leader_of.values())
    victim.kill()
    moved = [p for p, leader in leader_of.items() if leader == victim.node_id]
    wait_for(lambda: all(leaders(cluster.nodes[0], topic)[p] not in (-1, victim.node_id) for p in moved),
             "new leaders for the dead node's partitions")
    after = agreed_leaders(cluster, topic, partitions)
    for p in moved:
        with wire(by_id[after[p]]) as c:
            wait_for(lambda c=c, p=p: c.list_offset(topic, p, -1).error_code != NOT_LEADER,
                     f"partition {p} served by its new leader")
            assert c.list_offset(topic, p, -1).offset == 5
            fetched = c.fetch(topic, p, 0)
            assert fetched.error_code == 0 and fetched.high_watermark == 5
            assert c.produce(topic, p, batch([b"next"])).base_offset == 5


def test_a_group_resumes_at_its_commits_after_its_coordinator_dies(cluster: Cluster) -> None:
    """The node that takes over the groups table's container loaded the groups at its start (before
    these commits): it must serve them from state read in its own term."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaConnectionError

    with wire(cluster.nodes[0]) as c:
        c.create("resume", 3)
    agreed_leaders(cluster, "resume", 3)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(60):
        producer.send("resume", value=str(i).encode())
    producer.flush(60)
    producer.close()
    consumer = KafkaConsumer("resume", bootstrap_servers=cluster.bootstrap, group_id="resumers",
                             auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=10)
    first: list[bytes] = []
    while len(first) < 30:
        for records in consumer.poll(1000).values():
            first.extend(r.value for r in records)
    consumer.commit()
    consumer.close()
    with wire(cluster.nodes[0]) as c:
        coordinator = c.send(FIND_COORDINATOR, 3, FindCoordinatorRequest(key="resumers", key_type=0)).node_id
    victim = next(n for n in cluster.nodes if n.node_id == coordinator)
    victim.kill()
    second = KafkaConsumer("resume", bootstrap_servers=cluster.bootstrap, group_id="resumers",
                           auto_offset_reset="earliest", enable_auto_commit=False)
    rest: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(first) + len(rest) < 60 and time.monotonic() < deadline:
        try:
            polled = second.poll(1000)
        except KafkaConnectionError:
            # kafka-python 3.0.12: a FindCoordinator sent to the killed node fails with KafkaConnectionError
            # (an InvalidMetadataError), so the consumer refreshes metadata, and when that refresh also picks
            # the killed node (listed until its session expires) the error escapes poll() instead of being
            # retried (ensure_coordinator_ready_async catches only KafkaTimeoutError there). It is retriable:
            # poll again, as an application would.
            continue
        for records in polled.values():
            rest.extend(r.value for r in records)
    rest.extend(r.value for records in second.poll(2000).values() for r in records)  # nothing more comes
    second.close()
    assert sorted(first + rest, key=int) == [str(i).encode() for i in range(60)]


class IdempotentLoad:
    """A confluent-kafka idempotent acks=all producer writing numbered records in a thread."""

    def __init__(self, cluster: Cluster, topic: str, **config: Any) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.acked: list[bytes] = []
        self.acked_partitions: list[int] = []
        self.acked_at: dict[bytes, tuple[int, int]] = {}
        self.errors: list[str] = []
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 5, "message.timeout.ms": 120000,
                                  "metadata.max.age.ms": 1000, **librdkafka_trace(), **config})
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append(msg.value())
            self.acked_partitions.append(msg.partition())
            self.acked_at[msg.value()] = (msg.partition(), msg.offset())
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            self.producer.produce(self.topic, key=str(i).encode(), value=str(i).encode(), on_delivery=self._delivered)
            self.producer.poll(0)
            i += 1
            time.sleep(0.002)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert self.producer.flush(120) == 0

    def check_read_back(self, bootstrap: str) -> None:
        """Every acknowledged record read back exactly once (counts printed)."""
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{self.topic}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([self.topic])
        read: list[bytes] = []
        positions: dict[bytes, list[tuple[int, int]]] = {}
        wanted = set(self.acked)

        def take(msg: Any) -> None:
            if msg is not None and msg.error() is None and msg.value() is not None:
                read.append(msg.value())
                positions.setdefault(msg.value(), []).append((msg.partition(), msg.offset()))

        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not wanted <= set(read):
            take(consumer.poll(1.0))
        for _ in range(3):  # anything more than the acknowledged records (a duplicate) comes now
            take(consumer.poll(1.0))
        consumer.close()
        counts = Counter(read)
        lost = len(wanted - set(read))
        duplicated = sum(1 for v in wanted if counts[v] > 1)
        print(f"{self.topic}: acknowledged {len(self.acked)}, read {len(read)}, lost {lost}, "
              f"duplicated {duplicated}, delivery errors {len(self.errors)}")
        for value in [v for v in wanted if counts[v] > 1][:10]:
            print(f"  {value!r} acknowledged at {self.acked_at.get(value)}, read at {positions[value]}")
        assert self.errors == []
        assert lost == 0 and duplicated == 0


def test_the_elected_node_alone_auto_scales_a_topic_led_by_others(zk_hosts: str, tmp_path: Path) -> None:
    """The auto-scaler runs on the elected assigner only (so a scale is decided once), measuring the
    rates of segments other nodes' containers hold over SEGMENT_RATES; the topic's leaders follow its
    new segments and every acknowledged record is read back once."""
    topic = "autoscaled"
    with Cluster(tmp_path, zk_hosts, 3, "--scale-windows", "1,2", "--scale-interval-seconds", "0.5",
                 "--scale-cooldown-seconds", "2", "--log-level", "INFO") as cluster:
        with wire(cluster.nodes[0]) as c:
            c.create(topic, 4, millrace_segments_initial="1", millrace_scaling_type="by_event_rate",
                     millrace_scaling_target="50", millrace_scaling_factor="2")
        agreed_leaders(cluster, topic, 4)
        load = IdempotentLoad(cluster, topic)
        with SegmentClient("127.0.0.1", cluster.nodes[2].native_port) as native:
            wait_for(lambda: len(native.describe_stream("kafka", topic)["segments"]) >= 4, "a scale-up to 4 segments")
            wait_for(lambda: len(load.acked) > 2000, "the producer carrying on after the scales")
        load.finish()
        leaders_after = agreed_leaders(cluster, topic, 4)
        load.check_read_back(cluster.nodes[0].bootstrap)
        scaling = {n.node_id: [line for line in n.output if f"auto-scaling kafka/{topic}:" in line]
                   for n in cluster.nodes}
        print({node: len(lines) for node, lines in scaling.items()}, "leaders after:", leaders_after)
        assert sum(1 for lines in scaling.values() if lines) == 1, scaling


def test_a_node_paused_past_its_session_comes_back_as_a_zombie_and_is_fenced(cluster: Cluster) -> None:
    """SIGSTOP a leader past its ZooKeeper session under an idempotent producer: its partitions move,
    and on SIGCONT it stops its containers and rejoins in new terms (reloading before it serves): no
    acknowledged record is lost or duplicated."""
    topic = "zombie"
    with wire(cluster.nodes[0]) as c:
        c.create(topic, 8)
    leader_of = agreed_leaders(cluster, topic, 8)
    victim = next(n for n in cluster.nodes[1:] if n.node_id in leader_of.values())
    moved = {p for p, leader in leader_of.items() if leader == victim.node_id}
    # A paused broker does not refuse connections: time its requests out soon so the producer asks again.
    load = IdempotentLoad(cluster, topic, **{"request.timeout.ms": 3000, "socket.timeout.ms": 3000})
    wait_for(lambda: len(load.acked) > 300, "acknowledged records before the pause")
    victim.pause()
    paused_at = len(load.acked)
    wait_for(lambda: sum(1 for p in load.acked_partitions[paused_at:] if p in moved) > 100,
             "the paused node's partitions written on their new leaders", timeout=90)
    victim.resume()
    resumed_at = len(load.acked)
    wait_for(lambda: len(load.acked) > resumed_at + 1000, "the producer carrying on after the resume", timeout=90)
    load.finish()
    agreed_leaders(cluster, topic, 8)
    load.check_read_back(cluster.nodes[0].bootstrap)


def test_a_restarted_node_takes_partitions_back_by_clean_handovers_under_load(cluster: Cluster) -> None:
    """A node SIGKILLed and started again (same id, new ports) rejoins: the assigner hands containers
    back to it from live owners (each stops its container cleanly first), so partitions move between
    live gateways under an idempotent producer; nothing acknowledged is lost or duplicated."""
    topic = "rejoin"
    with wire(cluster.nodes[0]) as c:
        c.create(topic, 8)
    agreed_leaders(cluster, topic, 8)
    victim = cluster.nodes[2]
    load = IdempotentLoad(cluster, topic)
    wait_for(lambda: len(load.acked) > 300, "acknowledged records before the kill")
    victim.kill()
    wait_for(lambda: victim.node_id not in leaders(cluster.nodes[0], topic).values()
             and -1 not in leaders(cluster.nodes[0], topic).values(), "the dead node's partitions moved")
    moved_at = len(load.acked)
    wait_for(lambda: len(load.acked) > moved_at + 500, "the producer carrying on without the node")
    victim.start(timeout=120)
    wait_for(lambda: victim.node_id in agreed_leaders(cluster, topic, 8).values(), "partitions handed back")
    back_at = len(load.acked)
    wait_for(lambda: len(load.acked) > back_at + 1000, "the producer carrying on after the handovers")
    load.finish()
    with wire(cluster.nodes[0]) as c:
        brokers = {b.node_id: b.port for b in c.metadata(12, None).brokers}
    assert brokers[victim.node_id] == victim.kafka_port  # its new port is what clients are told
    load.check_read_back(victim.bootstrap)


@pytest.mark.slow
def test_sigkill_a_node_under_an_idempotent_producer_loses_and_duplicates_nothing(cluster: Cluster) -> None:
    from confluent_kafka import Consumer, Producer

    topic, partitions = "survive", 8
    with wire(cluster.nodes[0]) as c:
        c.create(topic, partitions)
    leader_of = agreed_leaders(cluster, topic, partitions)
    # The victim leads some partitions and is not the one node the consumer below reads through.
    victim = next(n for n in cluster.nodes[1:] if n.node_id in leader_of.values())
    acked: list[bytes] = []
    acked_partitions: list[int] = []
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 120000, "metadata.max.age.ms": 1000})

    def delivered(err, msg) -> None:  # noqa: ANN001 - confluent-kafka's callback
        if err is None:
            acked.append(msg.value())
            acked_partitions.append(msg.partition())
        else:
            errors.append(str(err))

    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            producer.produce(topic, key=str(i).encode(), value=str(i).encode(), on_delivery=delivered)
            producer.poll(0)
            i += 1
            time.sleep(0.002)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    wait_for(lambda: len(acked) > 300, "acknowledged records before the kill")
    victim.kill()
    killed_at = len(acked)
    wait_for(lambda: len(acked) > killed_at + 1000, "the producer carrying on after the kill", timeout=90)
    stop.set()
    thread.join(10)
    assert producer.flush(120) == 0
    moved = {p for p, leader in leader_of.items() if leader == victim.node_id}
    assert any(p in moved for p in acked_partitions[killed_at:]), "no record acknowledged by a new leader"
    consumer = Consumer({"bootstrap.servers": cluster.nodes[0].bootstrap, "group.id": "check",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    read: list[bytes] = []
    wanted = set(acked)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not wanted <= set(read):
        msg = consumer.poll(1.0)
        value = msg.value() if msg is not None and msg.error() is None else None
        if value is not None:
            read.append(value)
    consumer.close()
    counts = Counter(read)
    lost = len(wanted - set(read))
    duplicated = sum(1 for v in wanted if counts[v] > 1)
    print(f"acknowledged {len(acked)}, read {len(read)}, lost {lost}, duplicated {duplicated}, "
          f"delivery errors {len(errors)}")
    assert errors == []
    assert lost == 0 and duplicated == 0
