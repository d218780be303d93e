"""Kafka transactions on a cluster of real processes (``millrace cluster up``: ZooKeeper, 3 logd, 3 nodes):
a confluent-kafka transactional producer given one node only finds its transaction coordinator on
whichever node owns the transactions table's container, writes to partitions led by every node, and
commits and aborts; a read_committed consumer reads exactly the committed records. Then the
coordinator's node is SIGKILLed in the middle of a run of transactions: the producer carries on with
the new coordinator (re-initialised after a fatal error, as the confluent-kafka docs say), and every
transaction is read all-or-nothing: each committed one exactly once, no aborted one, none in part.
Also: consume-transform-produce with the group and transaction coordinators on two nodes, the Java
kafka-clients 4.x against the cluster, and (one process) a repeated WriteTxnMarkers writing one marker.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from millrace.gateway.commands.local_cluster import zookeeper_missing
from millrace.gateway.kafka_protocol.codec import decode_response, encode_request, request_class
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.describe_transactions import DescribeTransactionsRequest
from millrace.gateway.kafka_protocol.messages.find_coordinator import FindCoordinatorRequest
from millrace.gateway.kafka_protocol.messages.write_txn_markers import WriteTxnMarkersRequest
from millrace.protocol.records import build_record_batch
from tests.cluster.local_cluster import LocalClusterCli
from tests.cluster.test_local_cluster import create_topic
from tests.kafka.wire import KafkaWire
from tests.server_process import ServerProcess

pytestmark = pytest.mark.timeout(300)
needs_zookeeper = pytest.mark.skipif(zookeeper_missing() is not None, reason=str(zookeeper_missing()))

PARTITIONS = 6
SESSION_TIMEOUT = "3"


def new_cluster(tmp_path: Path) -> LocalClusterCli:
    return LocalClusterCli(tmp_path / "cluster", "--nodes", "3", "--log-replicas", "3", "--write-quorum", "3",
                           "--ack-quorum", "2", "--containers", "4", "--session-timeout", SESSION_TIMEOUT)


def send(address: str, request: Any, version: int) -> Any:
    """One request to the node at ``address``, with our codec; its response."""
    host, _, port = address.rpartition(":")
    frame = encode_request(request.API_KEY, version, 1, request, client_id="test")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame)
        size = struct.unpack(">i", _read(sock, 4))[0]
        return decode_response(request.API_KEY, version, _read(sock, size))[1]


def find_transaction_coordinator(address: str, transactional_id: str) -> tuple[int, int, int]:
    """(error code, node id, port) of FindCoordinator(key_type=1) asked of the node at ``address``."""
    r = send(address, FindCoordinatorRequest(key=transactional_id, key_type=1), 3)
    return r.error_code, r.node_id, r.port


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def coordinator_name(cluster: LocalClusterCli, ask: str, transactional_id: str, timeout: float = 60.0) -> str:
    """The process name (node-N) of the transaction coordinator, as the node at ``ask`` names it."""
    deadline = time.monotonic() + timeout
    while True:
        error, _, port = find_transaction_coordinator(ask, transactional_id)
        if error == 0:
            return next(p["name"] for p in cluster.summary["processes"]
                        if p["role"] == "node" and p["ports"]["kafka"] == port)
        assert time.monotonic() < deadline, f"no transaction coordinator: error {error}"
        time.sleep(0.5)


def kafka_address(cluster: LocalClusterCli, name: str) -> str:
    port = next(p["ports"]["kafka"] for p in cluster.summary["processes"] if p["name"] == name)
    return f"127.0.0.1:{port}"


def broker_ids(cluster: LocalClusterCli) -> dict[str, int]:
    """Process name -> Kafka broker id, from Metadata's brokers (matched by port)."""
    from confluent_kafka.admin import AdminClient

    brokers = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10).brokers
    by_port = {b.port: b.id for b in brokers.values()}
    return {p["name"]: by_port[p["ports"]["kafka"]] for p in cluster.summary["processes"] if p["role"] == "node"}


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + 30
    while True:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
        found = {p: part.leader for p, part in md.topics[topic].partitions.items()}
        if len(found) == PARTITIONS and all(v >= 0 for v in found.values()):
            return found
        assert time.monotonic() < deadline, f"partitions without a leader: {found}"
        time.sleep(0.5)


def read_committed(bootstrap: str, topic: str, expected: set[bytes], timeout: float = 60.0,
                   settle: float = 3.0, partitions: int = PARTITIONS) -> list[bytes]:
    """Every value a read_committed consumer reads from the start: until ``expected`` are all read and
    nothing more comes for ``settle`` seconds (anything aborted or doubled would come meanwhile)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{topic}-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    read: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_since = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                read.append(msg.value() or b"")
                quiet_since = None
                continue
            if expected <= set(read):
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= settle:
                    break
        return read
    finally:
        consumer.close()


def new_producer(address: str, transactional_id: str) -> Any:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": address, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 20000, "message.timeout.ms": 20000})
    producer.init_transactions(60)
    return producer


def values(txn: int) -> list[bytes]:
    return [f"txn{txn}-p{p}".encode() for p in range(PARTITIONS)]


def produce_transaction(producer: Any, topic: str, txn: int, commit: bool) -> None:
    producer.begin_transaction()
    for p, value in enumerate(values(txn)):
        producer.produce(topic, value=value, partition=p)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)
        producer.abort_transaction(30)


@needs_zookeeper
def test_transactions_through_one_node_commit_and_abort_across_leaders(tmp_path: Path) -> None:
    with new_cluster(tmp_path) as cluster:
        create_topic(cluster.bootstrap, "txns", PARTITIONS)
        by_partition = leaders(cluster.bootstrap, "txns")
        assert len(set(by_partition.values())) >= 2, f"partitions led by one node only: {by_partition}"
        # The producer knows one node: not the coordinator, so FindCoordinator must send it elsewhere.
        nodes = cluster.names("node")
        coordinator = coordinator_name(cluster, kafka_address(cluster, nodes[0]), "tx-a")
        entry = next(n for n in nodes if n != coordinator)
        assert coordinator_name(cluster, kafka_address(cluster, entry), "tx-a") == coordinator
        producer = new_producer(kafka_address(cluster, entry), "tx-a")
        committed: list[int] = []
        aborted: list[int] = []
        for txn in range(8):
            commit = txn % 3 != 1
            produce_transaction(producer, "txns", txn, commit)
            (committed if commit else aborted).append(txn)
        producer.flush(10)
        expected = {v for t in committed for v in values(t)}
        read = read_committed(cluster.bootstrap, "txns", expected)
        print(f"coordinator {coordinator}, producer through {entry}, leaders {by_partition}: "
              f"committed {len(committed)}, aborted {len(aborted)}, read {len(read)} records")
        assert sorted(read) == sorted(expected)  # each committed record once, no aborted one

        # A partition leader that does not coordinate transactions admits a transactional batch only once
        # the coordinator confirmed its partition is in the producer's ongoing transaction (KIP-890).
        # A batch under a real producer id of its transactional id, whose partition was never added,
        # would otherwise stay open there for ever: read_committed consumers would stop at it.
        ids = broker_ids(cluster)
        partition = next(p for p, leader in by_partition.items() if leader != ids[coordinator])
        leader = next(name for name, node_id in ids.items() if node_id == by_partition[partition])
        with KafkaWire.connect(kafka_address(cluster, coordinator)) as wire:
            init = wire.request(22, 4, transactional_id="tx-forged", transaction_timeout_ms=20000,
                                producer_id=-1, producer_epoch=-1)
        assert init.error_code == 0, init
        forged = build_record_batch([(None, b"forged")], producer_id=init.producer_id,
                                    producer_epoch=init.producer_epoch, base_sequence=0, transactional=True)
        P = request_class(0)  # noqa: N806 - a generated message class
        with KafkaWire.connect(kafka_address(cluster, leader)) as wire:
            answer = wire.send(0, 9, P(transactional_id="tx-forged", acks=-1, timeout_ms=10000, topic_data=[
                P.TopicProduceData(name="txns", partition_data=[P.PartitionProduceData(index=partition,
                                                                                       records=forged)])]))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_TXN_STATE
        produce_transaction(producer, "txns", 8, commit=True)
        expected |= set(values(8))
        assert sorted(read_committed(cluster.bootstrap, "txns", expected)) == sorted(expected)
        producer.flush(10)


@needs_zookeeper
def test_sigkill_the_transaction_coordinator_in_a_run_of_transactions(tmp_path: Path) -> None:
    from confluent_kafka import KafkaException

    with new_cluster(tmp_path) as cluster:
        create_topic(cluster.bootstrap, "txkill", PARTITIONS)
        leaders(cluster.bootstrap, "txkill")
        nodes = cluster.names("node")
        victim = coordinator_name(cluster, kafka_address(cluster, nodes[0]), "tx-k")
        entry = next(n for n in nodes if n != victim)
        address = kafka_address(cluster, entry)
        committed: list[int] = []
        aborted: list[int] = []
        unknown: list[int] = []  # a fatal error in commit: the coordinator may have decided either way
        errors: list[str] = []
        stop = threading.Event()

        def run() -> None:
            producer = new_producer(address, "tx-k")
            txn = 0
            while not stop.is_set():
                commit = txn % 4 != 3
                try:
                    produce_transaction(producer, "txkill", txn, commit)
                    (committed if commit else aborted).append(txn)
                except KafkaException as exc:
                    err = exc.args[0]
                    errors.append(str(err))
                    if err.txn_requires_abort():
                        producer.abort_transaction(60)
                        aborted.append(txn)
                    elif err.fatal():
                        unknown.append(txn)
                        producer = new_producer(address, "tx-k")  # fences the old one, ends its transaction
                    else:  # retriable: the outcome of this transaction is not known either
                        unknown.append(txn)
                        try:
                            producer.abort_transaction(60)
                        except KafkaException:
                            producer = new_producer(address, "tx-k")
                txn += 1

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        try:
            deadline = time.monotonic() + 60
            while len(committed) < 5:
                assert time.monotonic() < deadline and worker.is_alive(), f"no progress: {errors}"
                time.sleep(0.1)
            cluster.kill(victim)
            at_kill = len(committed)
            deadline = time.monotonic() + 90
            while len(committed) < at_kill + 5:
                assert time.monotonic() < deadline and worker.is_alive(), \
                    f"no commits after the coordinator's SIGKILL: {errors[-5:]}"
                time.sleep(0.1)
        finally:
            stop.set()
            worker.join(120)
        assert not worker.is_alive()
        moved_to = coordinator_name(cluster, address, "tx-k")
        assert moved_to != victim
        expected = {v for t in committed for v in values(t)}
        bootstrap = ",".join(kafka_address(cluster, n) for n in nodes if n != victim)
        read = read_committed(bootstrap, "txkill", expected)
        by_txn: dict[int, list[bytes]] = {}
        for value in read:
            by_txn.setdefault(int(value.split(b"-")[0][3:]), []).append(value)
        doubled = len(read) - len(set(read))
        partial = sorted(t for t, vs in by_txn.items() if sorted(set(vs)) != sorted(values(t)))
        read_aborted = sorted(set(by_txn) & set(aborted))
        print(f"coordinator {victim} SIGKILLed ({at_kill} committed before), now {moved_to}: "
              f"committed {len(committed)}, aborted {len(aborted)}, unknown {len(unknown)}, "
              f"read {len(by_txn)} transactions / {len(read)} records, doubled {doubled}, "
              f"partial {partial}, aborted read {read_aborted}; client errors {len(errors)}")
        assert doubled == 0 and not partial and not read_aborted
        assert set(committed) <= set(by_txn)
        assert set(by_txn) <= set(committed) | set(unknown)


def test_native_writer_ids_are_the_ones_the_coordinator_leaves_to_every_node() -> None:
    from millrace.gateway.kafka.transactions.coordinator import NATIVE_WRITER_PREFIX, coordinated
    from millrace.gateway.native.event_commands import WRITER_ID_PREFIX

    assert NATIVE_WRITER_PREFIX == WRITER_ID_PREFIX
    assert not coordinated(WRITER_ID_PREFIX + "w1") and coordinated("tx-a")


@needs_zookeeper
def test_a_new_coordinator_completes_a_commit_its_predecessor_prepared(tmp_path: Path) -> None:
    """Kafka's recovery: the coordinator is SIGKILLed while a commit is PrepareCommit (one partition's
    leader is paused, so its marker cannot be written), and the node that takes the transactions table
    over finds it prepared and completes it, writing the markers again (the ones already written are
    not written twice); the producer's retried EndTxn then succeeds."""
    import signal

    from confluent_kafka import KafkaException

    with new_cluster(tmp_path) as cluster:
        create_topic(cluster.bootstrap, "txrec", PARTITIONS)
        by_partition = leaders(cluster.bootstrap, "txrec")
        nodes = cluster.names("node")
        coordinator = coordinator_name(cluster, kafka_address(cluster, nodes[0]), "tx-r")
        ids = broker_ids(cluster)
        paused = next((n for n in nodes if n != coordinator and ids[n] in by_partition.values()), None)
        if paused is None:
            pytest.skip(f"every partition is led by the coordinator's node: {by_partition}")
        entry = next(n for n in nodes if n not in (coordinator, paused))
        address = kafka_address(cluster, entry)
        producer = new_producer(address, "tx-r")
        produce_transaction(producer, "txrec", 0, commit=True)
        producer.begin_transaction()
        for p, value in enumerate(values(1)):
            producer.produce("txrec", value=value, partition=p)
        producer.flush(30)
        cluster.kill(paused, signal.SIGSTOP)
        outcome: list[str] = []

        def commit() -> None:
            for _ in range(10):
                try:
                    producer.commit_transaction(20)
                    outcome.append("committed")
                    return
                except KafkaException as exc:
                    err = exc.args[0]
                    outcome.append(str(err))
                    if not err.retriable():
                        return

        worker = threading.Thread(target=commit, daemon=True)
        worker.start()
        try:
            deadline = time.monotonic() + 30
            while True:
                state = send(kafka_address(cluster, coordinator), DescribeTransactionsRequest(
                    transactional_ids=["tx-r"]), 0).transaction_states[0].transaction_state
                if state == "PrepareCommit":
                    break
                assert time.monotonic() < deadline, f"the commit never stayed prepared: {state}"
                time.sleep(0.1)
            cluster.kill(coordinator)
        finally:
            time.sleep(float(SESSION_TIMEOUT) + 2)  # past the paused node's session: its containers move
            os.kill(cluster.pid(paused), signal.SIGCONT)
        worker.join(200)
        assert outcome and outcome[-1] == "committed", outcome
        moved_to = coordinator_name(cluster, address, "tx-r")
        expected = set(values(0)) | set(values(1))
        read = read_committed(address, "txrec", expected)
        print(f"coordinator {coordinator} SIGKILLed with the commit PrepareCommit ({paused} paused, leading "
              f"{sorted(p for p, n in by_partition.items() if n == ids[paused])}), coordinator now {moved_to}: "
              f"commit attempts {outcome}, read {len(read)} records")
        assert moved_to != coordinator
        assert sorted(read) == sorted(expected)


def find_group_coordinator_port(address: str, group: str) -> int:
    r = send(address, FindCoordinatorRequest(key=group, key_type=0), 3)
    return int(r.port) if r.error_code == 0 else -1


@needs_zookeeper
def test_consume_transform_produce_with_group_and_transaction_coordinators_on_two_nodes(tmp_path: Path) -> None:
    """sendOffsetsToTransaction on a cluster: TxnOffsetCommit goes to the group coordinator, which passes
    it to the transaction coordinator on another node; the commit puts the offsets in the group."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    # 3 containers on 3 nodes: the groups table (container 0) and the transactions table (container 1)
    # are on two nodes once the containers are balanced.
    cluster = LocalClusterCli(tmp_path / "cluster", "--nodes", "3", "--log-replicas", "3", "--containers", "3",
                              "--session-timeout", SESSION_TIMEOUT)
    with cluster:
        create_topic(cluster.bootstrap, "src", 3)
        create_topic(cluster.bootstrap, "dst", PARTITIONS)
        nodes = cluster.names("node")
        ask = kafka_address(cluster, nodes[0])
        deadline = time.monotonic() + 60
        while True:
            txn_node = coordinator_name(cluster, ask, "tx-c")
            group_port = find_group_coordinator_port(ask, "ctp")
            if group_port > 0 and kafka_address(cluster, txn_node) != f"127.0.0.1:{group_port}":
                break
            assert time.monotonic() < deadline, "the group and transaction coordinators stay on one node"
            time.sleep(0.5)
        source = Producer({"bootstrap.servers": cluster.bootstrap})
        for i in range(30):
            source.produce("src", value=f"in{i}".encode(), partition=i % 3)
        source.flush(30)
        entry = next(n for n in nodes if n != txn_node)
        address = kafka_address(cluster, entry)
        consumer = Consumer({"bootstrap.servers": address, "group.id": "ctp", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        consumer.subscribe(["src"])
        producer = new_producer(address, "tx-c")
        done: list[bytes] = []
        deadline = time.monotonic() + 90
        try:
            while len(done) < 30:
                assert time.monotonic() < deadline, f"transformed {len(done)} of 30"
                batch = [m for m in consumer.consume(10, 1.0) if m.error() is None]
                if not batch:
                    continue
                producer.begin_transaction()
                for m in batch:
                    producer.produce("dst", value=b"out-" + (m.value() or b""), partition=len(done) % PARTITIONS)
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                     consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(30)
                done.extend(m.value() or b"" for m in batch)
            committed = consumer.committed([TopicPartition("src", p) for p in range(3)], timeout=30)
        finally:
            consumer.close()
        offsets = {tp.partition: tp.offset for tp in committed}
        expected = {b"out-" + f"in{i}".encode() for i in range(30)}
        read = read_committed(cluster.bootstrap, "dst", expected)
        print(f"transaction coordinator {txn_node}, group coordinator port {group_port}, producer through "
              f"{entry}: committed offsets {offsets}, read {len(read)} records")
        assert offsets == {0: 10, 1: 10, 2: 10}
        assert sorted(read) == sorted(expected)


def test_a_repeated_marker_is_not_written_twice(tmp_path: Path) -> None:
    """A coordinator that repeats WriteTxnMarkers (its answer lost, or a new term completing a prepared
    transaction) writes one marker: the repeat, and the coordinator's own marker at EndTxn, find the
    transaction closed already."""
    from confluent_kafka import Consumer, TopicPartition

    with ServerProcess(str(tmp_path / "data")) as server:
        address = f"127.0.0.1:{server.ports['kafka']}"
        create_topic(address, "idem", 1)
        producer = new_producer(address, "tx-i")
        producer.begin_transaction()
        for i in range(3):
            producer.produce("idem", value=f"a{i}".encode(), partition=0)
        producer.flush(30)
        state = send(address, DescribeTransactionsRequest(transactional_ids=["tx-i"]), 0).transaction_states[0]
        marker = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=state.producer_id, producer_epoch=state.producer_epoch, transaction_result=True,
            topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name="idem", partition_indexes=[0])],
            coordinator_epoch=0)])
        consumer = Consumer({"bootstrap.servers": address, "group.id": "idem", "isolation.level": "read_committed"})
        try:
            ends = []
            for _ in range(2):
                answer = send(address, marker, 1)
                assert answer.markers[0].topics[0].partitions[0].error_code == 0
                ends.append(consumer.get_watermark_offsets(TopicPartition("idem", 0), timeout=10)[1])
            producer.commit_transaction(30)  # the coordinator's own marker: nothing open any more
            after_commit = consumer.get_watermark_offsets(TopicPartition("idem", 0), timeout=10)[1]
            producer.begin_transaction()  # the producer's next transaction runs as usual
            producer.produce("idem", value=b"b0", partition=0)
            producer.commit_transaction(30)
            next_end = consumer.get_watermark_offsets(TopicPartition("idem", 0), timeout=10)[1]
            print(f"high watermark after each marker {ends}, after EndTxn {after_commit}, "
                  f"after the next transaction {next_end}")
            assert ends == [4, 4] and after_commit == 4 and next_end == 6
            expected = {b"a0", b"a1", b"a2", b"b0"}
            assert sorted(read_committed(address, "idem", expected, partitions=1)) == sorted(expected)
        finally:
            consumer.close()


@needs_zookeeper
def test_java_kafka_clients_4_transactions_against_the_cluster(tmp_path: Path) -> None:
    """compat_tests/java/TxnClient.java on kafka-clients 4.x, bootstrapped from one node: commit and abort
    at both isolation levels, zombie fencing, consume-transform-produce with sendOffsetsToTransaction;
    its topics are auto-created with 3 partitions (what TxnClient reads)."""
    from compat_tests.java_support import classpath, run_main
    from compat_tests.test_transactions_java import check_txn_client_run

    classpath("4.x", "TxnClient")  # skips without the jars or a JDK
    cluster = LocalClusterCli(tmp_path / "cluster", "--nodes", "3", "--log-replicas", "3", "--containers", "3",
                              "--session-timeout", SESSION_TIMEOUT, "--node-arg=--default-partitions",
                              "--node-arg=3")  # TxnClient reads partitions 0-2
    with cluster:
        entry = kafka_address(cluster, cluster.names("node")[0])
        run = run_main("4.x", "TxnClient", [entry, "javatx", "commit-abort", "fencing", "ctp"], timeout=180)
        check_txn_client_run(run)
        (zombie,), (moved,) = run.of("fencing", "zombie"), run.of("ctp", "moved")
        print(f"Java 4.x through {entry}: read_committed 20 of 40, zombie {zombie['exception']}, "
              f"consume-transform-produce moved {moved['count']} records once each")
