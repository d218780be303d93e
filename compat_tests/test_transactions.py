"""Kafka transactions with real clients (confluent-kafka, kafka-python): commit and abort as
read_committed and read_uncommitted consumers see them, the last stable offset in ListOffsets, zombie
fencing, the server's timeout of an abandoned transaction (and `serve --transaction-check-seconds`), the
coordinator's state across a server SIGKILL, and a consume-transform-produce loop (sendOffsetsToTransaction)
that stays exactly-once while its worker (txn_worker.py: confluent-kafka, txn_worker_kafka_python.py:
kafka-python; test_transactions_java.py runs it with the Java client), or the server, is SIGKILLed at
random points."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer

from compat_tests.conftest import DEFAULT_PARTITIONS, start_server
from compat_tests.test_crash_kafka import free_port
from millrace.gateway.kafka.transactions import TRANSACTIONS_TABLE, TransactionMetadata, TxnState
from millrace.gateway.shared.assembly import build_store
from millrace.gateway.shared.options import ServerOptions
from millrace.store.tables import TableStore
from tests.kafka.wire import local
from tests.server_process import ServerProcess

pytestmark = [pytest.mark.timeout(300)]

DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def txn_producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 2,
                  "transaction.timeout.ms": 20000, **extra})
    p.init_transactions(30)
    return p


def read_values(bootstrap: str, topic: str, isolation: str, partitions: int = DEFAULT_PARTITIONS,
                settle: float = 1.5, timeout: float = 30.0) -> list[bytes]:
    """Every value of ``topic`` visible at ``isolation``, read until each partition hit its end and nothing
    new arrived for ``settle`` seconds."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("reader"), "isolation.level": isolation,
                  "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[bytes] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        quiet = time.monotonic()
        while time.monotonic() < deadline:
            msgs = c.consume(500, timeout=0.2)
            for m in msgs:
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                        continue
                    raise AssertionError(f"consumer error: {m.error()}")
                out.append(m.value())
                quiet = time.monotonic()
            if len(eof) == partitions and time.monotonic() - quiet > settle:
                return out
        raise AssertionError(f"{topic} not read to its end at {isolation} within {timeout}s ({len(out)} read)")
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str, partition: int, isolation: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("wm"), "isolation.level": isolation})
    try:
        return tuple(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False))  # type: ignore[return-value]
    finally:
        c.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(str(tmp_path_factory.mktemp("millrace-txn")))
    try:
        yield srv
    finally:
        srv.stop(timeout=30)


# -- confluent-kafka -----------------------------------------------------------------------------------

def test_commit_and_abort_as_each_isolation_level_sees_them(server: ServerProcess) -> None:
    topic = _name("txn")
    p = txn_producer(server.bootstrap, _name("tx"))
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, key=str(i).encode(), value=f"committed-{i}".encode())
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, key=str(i).encode(), value=f"aborted-{i}".encode())
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, key=str(i).encode(), value=f"later-{i}".encode())
    p.commit_transaction(30)
    committed = sorted(read_values(server.bootstrap, topic, "read_committed"))
    assert committed == sorted([f"committed-{i}".encode() for i in range(30)] +
                               [f"later-{i}".encode() for i in range(10)])
    everything = read_values(server.bootstrap, topic, "read_uncommitted")
    assert Counter(everything) == Counter(committed + [f"aborted-{i}".encode() for i in range(30)])


def test_open_transaction_holds_back_the_last_stable_offset(server: ServerProcess) -> None:
    topic = _name("lso")
    plain = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True})
    plain.produce(topic, value=b"before", partition=0)
    assert plain.flush(30) == 0
    p = txn_producer(server.bootstrap, _name("tx"))
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=f"open-{i}".encode(), partition=0)
    p.flush(30)
    plain.produce(topic, value=b"after", partition=0)  # behind the open transaction
    assert plain.flush(30) == 0
    assert watermarks(server.bootstrap, topic, 0, "read_uncommitted")[1] == 7
    assert watermarks(server.bootstrap, topic, 0, "read_committed")[1] == 1  # stops at the open transaction
    assert read_values(server.bootstrap, topic, "read_committed") == [b"before"]
    p.commit_transaction(30)
    assert watermarks(server.bootstrap, topic, 0, "read_committed")[1] == 8  # past the marker
    assert read_values(server.bootstrap, topic, "read_committed") == \
        [b"before"] + [f"open-{i}".encode() for i in range(5)] + [b"after"]


def test_zombie_is_fenced_and_its_transaction_aborted(server: ServerProcess) -> None:
    topic = _name("fence")
    transactional_id = _name("tx")
    zombie = txn_producer(server.bootstrap, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(30)
    successor = txn_producer(server.bootstrap, transactional_id)  # fences the zombie, aborts its transaction
    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, value=b"zombie-again")
        zombie.commit_transaction(30)
    assert raised.value.args[0].fatal() or raised.value.args[0].code() in (
        KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    successor.begin_transaction()
    successor.produce(topic, value=b"successor")
    successor.commit_transaction(30)
    assert read_values(server.bootstrap, topic, "read_committed") == [b"successor"]
    with local(server.kafka_port) as wire:
        described = wire.request(DESCRIBE_TRANSACTIONS, 0, transactional_ids=[transactional_id, "nobody"])
        state, missing = described.transaction_states
        assert (state.error_code, state.transaction_state, state.producer_epoch) == (0, "CompleteCommit", 2)
        assert missing.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
        listed = wire.request(LIST_TRANSACTIONS, 1, state_filters=["CompleteCommit"], producer_id_filters=[],
                              duration_filter=-1)
        assert transactional_id in {t.transactional_id for t in listed.transaction_states}


def test_abandoned_transaction_times_out_and_consumers_move_on(server: ServerProcess) -> None:
    topic = _name("timeout")
    transactional_id = _name("tx")
    abandoned = txn_producer(server.bootstrap, transactional_id, **{"transaction.timeout.ms": 2000})
    abandoned.begin_transaction()
    abandoned.produce(topic, value=b"abandoned", partition=0)
    abandoned.flush(30)
    plain = Producer({"bootstrap.servers": server.bootstrap})
    plain.produce(topic, value=b"after", partition=0)
    assert plain.flush(30) == 0
    assert watermarks(server.bootstrap, topic, 0, "read_committed")[1] == 0
    # The server aborts it (no client action): the last stable offset passes the abort marker.
    deadline = time.monotonic() + 20
    while watermarks(server.bootstrap, topic, 0, "read_committed")[1] != 3:
        assert time.monotonic() < deadline, "the abandoned transaction was not aborted"
        time.sleep(0.3)
    assert read_values(server.bootstrap, topic, "read_committed") == [b"after"]
    with local(server.kafka_port) as wire:
        (state,) = wire.request(DESCRIBE_TRANSACTIONS, 0, transactional_ids=[transactional_id]).transaction_states
        assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", 1)  # bumped: fenced
    with pytest.raises(KafkaException):
        abandoned.commit_transaction(15)


def test_serve_flag_sets_how_often_timeouts_are_checked(tmp_path: Any) -> None:
    """`millrace serve --transaction-check-seconds`: with an hour between checks, a transaction well past its
    timeout is still open (with the default second it is aborted within about two, as the test above shows)."""
    srv = start_server(str(tmp_path / "data"), "--transaction-check-seconds", "3600")
    transactional_id = _name("tx")
    try:
        p = txn_producer(srv.bootstrap, transactional_id, **{"transaction.timeout.ms": 1000})
        p.begin_transaction()
        p.produce(_name("unchecked"), value=b"open", partition=0)
        p.flush(30)
        time.sleep(5)
        with local(srv.kafka_port) as wire:
            (state,) = wire.request(DESCRIBE_TRANSACTIONS, 0, transactional_ids=[transactional_id]).transaction_states
            assert (state.transaction_state, state.producer_epoch) == ("Ongoing", 0)
    finally:
        srv.stop(timeout=30)


# -- kafka-python ----------------------------------------------------------------------------------------

def test_kafka_python_commit_abort_and_read_committed(server: ServerProcess) -> None:
    topic = _name("kp")
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id=_name("kp-tx"))
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(20):
        producer.send(topic, value=f"kept-{i}".encode())
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(20):
        producer.send(topic, value=f"dropped-{i}".encode())
    producer.flush()
    producer.abort_transaction()
    producer.close()

    def consume(isolation: str) -> list[bytes]:
        c = KafkaConsumer(topic, bootstrap_servers=server.bootstrap, group_id=_name("kpc"),
                          isolation_level=isolation, auto_offset_reset="earliest", consumer_timeout_ms=4000,
                          enable_auto_commit=False)
        try:
            return [m.value for m in c]
        finally:
            c.close()

    assert sorted(consume("read_committed")) == sorted(f"kept-{i}".encode() for i in range(20))
    assert len(consume("read_uncommitted")) == 40
    # confluent-kafka's read_committed view agrees
    assert len(read_values(server.bootstrap, topic, "read_committed")) == 20


def test_kafka_python_zombie_fenced(server: ServerProcess) -> None:
    topic = _name("kpf")
    transactional_id = _name("kp-tx")
    zombie = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id=transactional_id)
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send(topic, value=b"zombie")
    zombie.flush()
    successor = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id=transactional_id)
    successor.init_transactions()
    with pytest.raises(Exception) as raised:
        zombie.commit_transaction()
    assert "fenced" in repr(raised.value).lower() or "epoch" in repr(raised.value).lower()
    successor.begin_transaction()
    successor.send(topic, value=b"successor")
    successor.commit_transaction()
    successor.close()
    zombie.close(timeout=5)
    assert read_values(server.bootstrap, topic, "read_committed") == [b"successor"]


# -- crashes --------------------------------------------------------------------------------------------

def test_coordinator_state_survives_a_server_sigkill(tmp_path: Any) -> None:
    port = free_port()
    data_dir = str(tmp_path / "data")
    srv = start_server(data_dir, "--kafka-port", str(port))
    topic = _name("crash")
    try:
        done = txn_producer(srv.bootstrap, _name("tx"))
        done.begin_transaction()
        done.produce(topic, value=b"committed", partition=0)
        done.commit_transaction(30)
        done.begin_transaction()
        done.produce(topic, value=b"aborted", partition=0)
        done.flush(30)
        done.abort_transaction(30)
        stuck = txn_producer(srv.bootstrap, _name("tx"), **{"transaction.timeout.ms": 3000})
        stuck.begin_transaction()
        stuck.produce(topic, value=b"in-flight", partition=1)
        stuck.flush(30)
        srv.kill()
        srv = start_server(data_dir, "--kafka-port", str(port))
        # Committed and aborted transactions read back the same (markers and the aborted index were
        # rebuilt); the one left open is aborted by its timeout after the restart.
        deadline = time.monotonic() + 30
        while watermarks(srv.bootstrap, topic, 1, "read_committed")[1] < 2:
            assert time.monotonic() < deadline, "the transaction open at the crash was never aborted"
            time.sleep(0.3)
        assert read_values(srv.bootstrap, topic, "read_committed") == [b"committed"]
        assert sorted(read_values(srv.bootstrap, topic, "read_uncommitted")) == [b"aborted", b"committed",
                                                                                 b"in-flight"]
    finally:
        srv.stop(timeout=30)


Worker = Callable[[str, str, str, str, str], list[str]]
"""The command that runs a consume-transform-produce worker: (bootstrap, input, output, transactional id,
group) -> argv. The worker moves every input record upper-cased to the output in transactions that also
commit its input offsets (sendOffsetsToTransaction), and exits on any error; the loop restarts it."""


def python_worker(module: str) -> Worker:
    """A worker module of compat_tests (txn_worker: confluent-kafka; txn_worker_kafka_python: kafka-python)."""
    def command(bootstrap: str, source: str, sink: str, transactional_id: str, group: str) -> list[str]:
        return [sys.executable, "-m", f"compat_tests.{module}", bootstrap, source, sink, transactional_id, group,
                str(DEFAULT_PARTITIONS), "0.05"]
    return command


def run_exactly_once_loop(tmp_path: Any, kill_server: bool, worker_command: Worker) -> None:
    """Moves 5000 records through ``worker_command``'s worker while the worker (or the server) is SIGKILLed
    four times mid-work and restarted; the output must hold every input record exactly once."""
    port = free_port()
    data_dir = str(tmp_path / "data")
    srv = start_server(data_dir, "--kafka-port", str(port))
    source, sink, group, transactional_id = _name("in"), _name("out"), _name("eos"), _name("eos-tx")
    total = 5000
    rng = random.Random()
    worker: subprocess.Popen[str] | None = None
    # The workers' output goes to a file: librdkafka logs every failed reconnect while the server is down,
    # and an unread pipe would fill up and stall the worker.
    log = open(tmp_path / "workers.log", "w")  # noqa: SIM115 - closed in the finally below
    try:
        feeder = Producer({"bootstrap.servers": srv.bootstrap, "enable.idempotence": True})
        for i in range(total):
            feeder.produce(source, key=str(i % 17).encode(), value=f"r{i}".encode())
        assert feeder.flush(60) == 0
        kills = 0
        progress: list[int] = []  # the output's log end (records and markers) after each kill
        deadline = time.monotonic() + 200
        next_kill = time.monotonic() + rng.uniform(0.5, 2.0)
        while time.monotonic() < deadline:
            if worker is None or worker.poll() is not None:
                worker = subprocess.Popen(worker_command(srv.bootstrap, source, sink, transactional_id, group),
                                          stdout=log, stderr=subprocess.STDOUT, text=True)
            # Each kill waits until the loop has moved on since the last one (the first until it wrote anything:
            # a JVM worker may still be starting), so every kill lands mid-work.
            if kills < 4 and time.monotonic() >= next_kill and \
                    _log_end(srv.bootstrap, sink) > (progress[-1] if progress else 0):
                kills += 1
                if kill_server:
                    srv.kill()
                    srv = start_server(data_dir, "--kafka-port", str(port))
                else:
                    worker.kill()
                    worker.wait()
                progress.append(_log_end(srv.bootstrap, sink))
                next_kill = time.monotonic() + rng.uniform(0.5, 2.0)
                continue
            if kills >= 4:
                if _committed_count(srv.bootstrap, sink) >= total:
                    break
                time.sleep(2.0)
            time.sleep(0.5)
        # The kills must land while the loop still had work: otherwise they prove nothing.
        end = _log_end(srv.bootstrap, sink)
        assert sum(1 for n in progress if n < end) >= 3, f"kills came after the work was done: {progress} of {end}"
        print("output log end at each kill:", progress, "finally", end)
        values = read_values(srv.bootstrap, sink, "read_committed")
        counts = Counter(values)
        assert not [v for v, n in counts.items() if n > 1], "records written twice"
        assert set(counts) == {f"R{i}".encode() for i in range(total)}
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        log.close()
        srv.stop(timeout=30)


def _log_end(bootstrap: str, topic: str) -> int:
    """The sum of the output partitions' high watermarks: a cheap measure of the loop's progress."""
    try:
        return sum(watermarks(bootstrap, topic, p, "read_uncommitted")[1] for p in range(DEFAULT_PARTITIONS))
    except KafkaException:
        return 0


def _committed_count(bootstrap: str, topic: str) -> int:
    """How many distinct records the output topic holds read_committed (0 before it exists)."""
    try:
        return len(set(read_values(bootstrap, topic, "read_committed", settle=0.3)))
    except (AssertionError, KafkaException):
        return 0


PYTHON_WORKERS = [pytest.param("txn_worker", id="confluent-kafka"),
                  pytest.param("txn_worker_kafka_python", id="kafka-python")]


@pytest.mark.slow
@pytest.mark.parametrize("module", PYTHON_WORKERS)
def test_consume_transform_produce_exactly_once_when_the_worker_is_sigkilled(tmp_path: Any, module: str) -> None:
    run_exactly_once_loop(tmp_path, kill_server=False, worker_command=python_worker(module))


@pytest.mark.slow
@pytest.mark.parametrize("module", PYTHON_WORKERS)
def test_consume_transform_produce_exactly_once_when_the_server_is_sigkilled(tmp_path: Any, module: str) -> None:
    run_exactly_once_loop(tmp_path, kill_server=True, worker_command=python_worker(module))


# -- elastic topics --------------------------------------------------------------------------------------

def _streams(server: ServerProcess, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "millrace", "streams", *args, "--server", f"127.0.0.1:{server.native_port}",
           "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{' '.join(args)} failed: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def _open_segments(server: ServerProcess, stream: str) -> list[dict[str, Any]]:
    desc = _streams(server, "describe", stream)
    return sorted((s for s in desc["segments"] if not s["sealed"]), key=lambda s: s["key_start"])


def test_transactions_across_segment_merges_and_splits(tmp_path: Any) -> None:
    port = free_port()
    data_dir = str(tmp_path / "data")
    srv = start_server(data_dir, "--kafka-port", str(port))
    topic = _name("elastic")
    stream = f"kafka/{topic}"
    partitions = 4
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
        p = txn_producer(srv.bootstrap, _name("tx"))

        def batch(tag: str) -> list[bytes]:
            values = []
            for part in range(partitions):
                for i in range(10):
                    values.append(f"{tag}:{part}:{i}".encode())
                    p.produce(topic, value=values[-1], partition=part)
            p.flush(30)
            return values

        # Committed transaction: its partitions move into a merged segment halfway through.
        p.begin_transaction()
        kept = batch("kept-a")
        first = _open_segments(srv, stream)
        _streams(srv, "merge", stream, str(first[0]["number"]), str(first[1]["number"]))
        kept += batch("kept-b")
        p.commit_transaction(30)
        # Aborted transaction: the merged segment splits again halfway through.
        p.begin_transaction()
        dropped = batch("dropped-a")
        merged = _open_segments(srv, stream)[0]
        assert merged["partitions"] == [0, 1], merged
        _streams(srv, "split", stream, str(merged["number"]), "--pieces", "2")
        dropped += batch("dropped-b")
        p.abort_transaction(30)
        for restarted in (False, True):
            if restarted:  # the markers and the aborted index come back from the index across segments
                srv.kill()
                srv = start_server(data_dir, "--kafka-port", str(port))
            assert sorted(read_values(srv.bootstrap, topic, "read_committed", partitions)) == sorted(kept)
            assert sorted(read_values(srv.bootstrap, topic, "read_uncommitted", partitions)) == sorted(kept + dropped)
            for part in range(partitions):  # nothing open: the last stable offset is the high watermark
                assert watermarks(srv.bootstrap, topic, part, "read_committed") == \
                    watermarks(srv.bootstrap, topic, part, "read_uncommitted")
    finally:
        srv.stop(timeout=30)


@pytest.mark.parametrize("outcome", [TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT])
def test_a_crash_after_prepare_completes_the_same_outcome(tmp_path: Any, outcome: TxnState) -> None:
    """A crash between the durable Prepare record and the markers: the restarted coordinator writes the
    markers and, for a commit, the transaction's group offsets. (The crash is made by SIGKILLing an
    Ongoing transaction and setting its record to Prepare* offline, which is exactly what the coordinator
    writes before its first marker.)"""
    port = free_port()
    data_dir = str(tmp_path / "data")
    srv = start_server(data_dir, "--kafka-port", str(port))
    topic, group, transactional_id = _name("prep"), _name("prep-group"), _name("tx")
    try:
        p = txn_producer(srv.bootstrap, transactional_id)
        p.begin_transaction()
        for part in range(DEFAULT_PARTITIONS):
            p.produce(topic, value=f"v{part}".encode(), partition=part)
        p.flush(30)
        meta = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": group})
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], meta.consumer_group_metadata(), 30)
        meta.close()
        srv.kill()
        store = build_store(ServerOptions(data_dir=data_dir))
        store.start()
        try:
            tables = TableStore(store)
            (entry,) = tables.get(TRANSACTIONS_TABLE, [transactional_id.encode()])
            assert entry is not None
            record = TransactionMetadata.decode(transactional_id, entry.value)
            assert record.state == TxnState.ONGOING and record.offsets[group][(topic, 0)].offset == 1
            record.state = outcome
            tables.put(TRANSACTIONS_TABLE, [(transactional_id.encode(), record.encode())])
        finally:
            store.close()
        srv = start_server(data_dir, "--kafka-port", str(port))
        committed = outcome == TxnState.PREPARE_COMMIT
        expected = sorted(f"v{part}".encode() for part in range(DEFAULT_PARTITIONS)) if committed else []
        assert sorted(read_values(srv.bootstrap, topic, "read_committed")) == expected
        with local(srv.kafka_port) as wire:
            (state,) = wire.request(DESCRIBE_TRANSACTIONS, 0, transactional_ids=[transactional_id]).transaction_states
            assert state.transaction_state == ("CompleteCommit" if committed else "CompleteAbort")
        reader = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": group})
        (offset,) = reader.committed([TopicPartition(topic, 0)], timeout=10)
        reader.close()
        assert offset.offset == (1 if committed else OFFSET_INVALID)
    finally:
        srv.stop(timeout=30)
