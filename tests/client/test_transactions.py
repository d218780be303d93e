"""Native transactions against a real server: a commit is visible all at once and an abort never (to
read_committed Kafka consumers and to native segment readers), a lease that runs out aborts, commits
and aborts survive a concurrent scale, a server SIGKILL (with transactions open and with a commit in
flight) and a SIGKILL of the writing process (another process resumes its transaction with get_txn)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from millrace import (
    ConnectionLostError,
    EventsRefusedError,
    StreamManager,
    StringSerializer,
    Transaction,
    TxnFailedError,
    TxnNotFoundError,
    TxnStatus,
)
from millrace.client.segment_reader import SegmentEvent, read_segment_events
from millrace.client.segments import SegmentClient
from millrace.protocol.errors import InvalidRequestError, StreamNotFoundError
from millrace.protocol.events import encode_batch
from millrace.protocol.messages import EndTxn, ListSegments, SegmentsReply
from millrace.protocol.wire import Command
from tests.ports import free_port
from tests.server_process import ServerProcess, create_topic
from tests.waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = [f"k{n}" for n in range(8)]


def kafka_values(server: ServerProcess, topic: str, partitions: int, isolation: str = "read_committed") -> list[str]:
    """Every value of ``topic`` at ``isolation``, in (partition, offset) order, read to each partition's end
    (the last stable offset at read_committed). Call it once every transaction of interest has ended."""
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"check-{uuid.uuid4().hex}",
                  "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[tuple[int, int, str]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{topic} not read to its end ({len(got)} records read)"
            for m in c.consume(500, 0.5):
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    at_end.add(m.partition())
                else:
                    at_end.discard(m.partition())
                    got.append((m.partition(), m.offset(), m.value().decode()))
        return [v for _, _, v in sorted(got)]
    finally:
        c.close()


def stream_events(sm: StreamManager, scope: str, stream: str) -> list[SegmentEvent]:
    """The committed events of every segment the stream ever had, read natively, in (partition, Kafka
    offset) order. Call it once every transaction of interest has ended."""
    events: list[SegmentEvent] = []
    for epoch in sm.describe_stream(scope, stream).history:
        for segment in epoch.created:
            offset = 0
            while True:
                read = read_segment_events(sm.controller, scope, stream, segment.segment_id, offset)
                events += read.events
                if read.end_of_segment or read.next_offset == offset:
                    break
                offset = read.next_offset
    return sorted(events, key=lambda e: (e.partition, e.kafka_offset))


def write_all(txn: Transaction[str], tag: str, count: int) -> list[str]:
    values = [f"{tag}:{i}" for i in range(count)]
    for i, value in enumerate(values):
        txn.write_event(value, routing_key=KEYS[i % len(KEYS)])
    return values


def in_key_order(stored: list[str], tag: str) -> bool:
    """Whether ``tag``'s events of each key are stored in write order (``stored`` in partition order)."""
    numbers = [int(v.split(":")[1]) for v in stored if v.split(":")[0] == tag]
    return all(
        [n for n in numbers if n % len(KEYS) == k] == sorted(n for n in numbers if n % len(KEYS) == k)
        for k in range(len(KEYS)))




def test_commit_is_visible_at_once_and_abort_never_to_kafka_consumers(server: ServerProcess, uri: str) -> None:
    create_topic(server, "txn-kafka", 4)
    with StreamManager(uri) as sm:
        txw = sm.create_transaction_writer("kafka", "txn-kafka", writer_id="loader", serializer=StringSerializer())
        committed, aborted, marker = txw.begin_txn(), txw.begin_txn(), txw.begin_txn()
        assert len({committed.txn_id, aborted.txn_id, marker.txn_id}) == 3  # several open at once
        mine = write_all(committed, "c", 200)
        write_all(aborted, "a", 100)
        committed.flush()
        aborted.flush()
        assert committed.check_status() == TxnStatus.OPEN
        # Another transaction commits while both are open: a read_committed consumer reads up to the
        # oldest open transaction only, so none of their events shows yet.
        write_all(marker, "m", 8)
        marker.commit()
        assert not [v for v in kafka_values(server, "txn-kafka", 4) if v[0] in "ca"]
        aborted.abort()
        assert aborted.check_status() == TxnStatus.ABORTED
        committed.commit()
        assert committed.check_status() == TxnStatus.COMMITTED
        stored = kafka_values(server, "txn-kafka", 4)
        assert sorted(v for v in stored if v.startswith("c:")) == sorted(mine)  # each once
        assert not [v for v in stored if v.startswith("a:")]
        assert in_key_order(stored, "c")
        # Never in the stream at all: a read_uncommitted consumer does not see them either.
        uncommitted = kafka_values(server, "txn-kafka", 4, "read_uncommitted")
        assert not [v for v in uncommitted if v.startswith("a:")]
        assert sorted(v for v in uncommitted if v.startswith("c:")) == sorted(mine)
        with pytest.raises(TxnFailedError):
            committed.write_event("late", routing_key="k0")
        with pytest.raises(TxnFailedError):
            aborted.commit()


def test_commit_and_abort_read_natively_on_a_stream_of_any_scope(server: ServerProcess, uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("iot")
        sm.create_stream("iot", "txn-readings", initial_segments=2)
        txw = sm.create_transaction_writer("iot", "txn-readings", serializer=StringSerializer())
        with txw.begin_txn() as committed:  # commits on a clean exit
            mine = write_all(committed, "c", 120)
        with pytest.raises(KeyError), txw.begin_txn() as aborted:  # aborts on an exception
            write_all(aborted, "a", 50)
            aborted.flush()
            raise KeyError("changed my mind")
        assert committed.check_status() == TxnStatus.COMMITTED
        assert aborted.check_status() == TxnStatus.ABORTED
        events = stream_events(sm, "iot", "txn-readings")
        values = [e.data.decode() for e in events]
        assert sorted(values) == sorted(mine)
        assert in_key_order(values, "c")
        assert all(e.routing_key == KEYS[int(e.data.decode().split(":")[1]) % len(KEYS)] for e in events)


def test_a_transaction_whose_lease_runs_out_aborts_itself(server: ServerProcess, uri: str) -> None:
    create_topic(server, "txn-lease", 2)
    with StreamManager(uri) as sm:
        txw = sm.create_transaction_writer("kafka", "txn-lease", serializer=StringSerializer(), lease_ms=1500)
        pinged = txw.begin_txn()
        txn = txw.begin_txn()
        write_all(txn, "t", 20)
        txn.flush()
        wait_for(lambda: txn.check_status() == TxnStatus.ABORTED, "the lease to abort the transaction")
        with pytest.raises(TxnFailedError):
            txn.commit()
        txn.abort()  # aborting what is aborted already answers the same
        with pytest.raises(TxnFailedError):
            pinged.ping()  # aborted too: nobody pinged it in time
        assert not kafka_values(server, "txn-lease", 2)


def test_ping_keeps_a_transaction_open_past_its_lease(server: ServerProcess, uri: str) -> None:
    create_topic(server, "txn-ping", 1)
    with StreamManager(uri) as sm:
        txw = sm.create_transaction_writer("kafka", "txn-ping", serializer=StringSerializer(), lease_ms=2000)
        txn = txw.begin_txn()
        other = txw.begin_txn()  # never pinged: its abort shows that the lease did run out meanwhile
        while other.check_status() != TxnStatus.ABORTED:
            txn.ping()
            time.sleep(0.2)
        assert txn.check_status() == TxnStatus.OPEN
        write_all(txn, "p", 5)
        txn.commit()
        assert kafka_values(server, "txn-ping", 1) == [f"p:{i}" for i in range(5)]


def test_commit_abort_and_timeout_under_a_concurrent_scale(server: ServerProcess, uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("iot")
        sm.create_stream("iot", "txn-scaling", initial_segments=1)
        txw = sm.create_transaction_writer("iot", "txn-scaling", serializer=StringSerializer())
        committed, aborted = txw.begin_txn(), txw.begin_txn()
        short = sm.create_transaction_writer("iot", "txn-scaling", serializer=StringSerializer(), lease_ms=2000)
        expiring = short.begin_txn()
        write_all(expiring, "e", 100)  # then left alone: its lease ends during or after the scales
        written: dict[str, list[str]] = {"c": [], "a": []}
        stop = threading.Event()

        def write() -> None:
            i = 0
            while not stop.is_set() or i < 400:
                for tag, txn in (("c", committed), ("a", aborted)):
                    value = f"{tag}:{i}"
                    txn.write_event(value, routing_key=KEYS[i % len(KEYS)])
                    written[tag].append(value)
                i += 1
                if i % 20 == 0:
                    time.sleep(0.005)

        writer = threading.Thread(target=write)
        writer.start()
        time.sleep(0.3)
        (only,) = sm.describe_stream("iot", "txn-scaling").segments
        sm.split_segment("iot", "txn-scaling", only.segment)
        time.sleep(0.3)
        sm.merge_segments("iot", "txn-scaling", [s.segment for s in sm.describe_stream("iot", "txn-scaling").segments])
        stop.set()
        writer.join(60)
        assert len(sm.describe_stream("iot", "txn-scaling").history) == 3  # two scales while both were open
        committed.commit()
        aborted.abort()
        wait_for(lambda: expiring.check_status() == TxnStatus.ABORTED, "the short lease to run out")
        values = [e.data.decode() for e in stream_events(sm, "iot", "txn-scaling")]
        assert Counter(values) == Counter(written["c"])  # every committed event once, no aborted one
        assert in_key_order(values, "c")


def transaction_segments(sm: StreamManager, txn: Transaction[Any]) -> list[str]:
    """The store's segments of ``txn`` (``<parent>#transaction.<uuid hex>``)."""
    segments = sm.controller.ask(ListSegments(), SegmentsReply).segments
    return [s for s in segments if s.endswith(f"#transaction.{txn.txn_id.hex}")]


def test_an_open_transaction_holds_back_no_reader(server: ServerProcess, uri: str) -> None:
    """Events written after an open transaction's are read at once, by read_committed Kafka consumers and
    native readers alike: the transaction's events are not in the stream, so nothing waits for them."""
    create_topic(server, "txn-open", 4)
    with StreamManager(uri) as sm:
        txw = sm.create_transaction_writer("kafka", "txn-open", serializer=StringSerializer())
        txn = txw.begin_txn()
        held = write_all(txn, "o", 80)  # every partition
        txn.flush()
        writer = sm.create_writer("kafka", "txn-open", serializer=StringSerializer())
        plain = [f"p:{i}" for i in range(40)]
        for i, value in enumerate(plain):
            writer.write_event(value, routing_key=KEYS[i % len(KEYS)])
        writer.flush()
        assert txn.check_status() == TxnStatus.OPEN
        assert sorted(kafka_values(server, "txn-open", 4)) == sorted(plain)
        assert sorted(e.data.decode() for e in stream_events(sm, "kafka", "txn-open")) == sorted(plain)
        txn.commit()
        assert sorted(kafka_values(server, "txn-open", 4)) == sorted(plain + held)
        writer.close()


def test_transaction_segments_hold_the_events_until_the_end_and_go(server: ServerProcess, uri: str) -> None:
    """A transaction's events live in its transaction segments, which commit, abort and a lease that ran
    out delete."""
    with StreamManager(uri) as sm:
        sm.create_scope("iot")
        sm.create_stream("iot", "txn-segments", initial_segments=3)
        txw = sm.create_transaction_writer("iot", "txn-segments", serializer=StringSerializer())
        short = sm.create_transaction_writer("iot", "txn-segments", serializer=StringSerializer(), lease_ms=1500)
        committed, aborted, expiring = txw.begin_txn(), txw.begin_txn(), short.begin_txn()
        for txn, tag in ((committed, "c"), (aborted, "a"), (expiring, "e")):
            write_all(txn, tag, 30)
            txn.flush()
            parents = {s.rsplit("#transaction.", 1)[0] for s in transaction_segments(sm, txn)}
            assert len(parents) == 3  # one per segment of the stream, named after it
        wait_for(lambda: expiring.check_status() == TxnStatus.ABORTED, "the lease to run out")
        assert transaction_segments(sm, expiring) == []
        aborted.abort()
        assert transaction_segments(sm, aborted) == []
        committed.commit()
        wait_for(lambda: transaction_segments(sm, committed) == [], "the committed segments to be deleted")
        assert sorted(e.data.decode() for e in stream_events(sm, "iot", "txn-segments")) == sorted(
            f"c:{i}" for i in range(30))
        # The merge's writer numbers go too: a commit leaves no attribute behind in the data segments.
        wait_for(lambda: merge_writer_attributes(sm, "iot", "txn-segments") == [], "the merge's numbers to go")


def merge_writer_attributes(sm: StreamManager, scope: str, stream: str) -> list[str]:
    """The ``writer:txn:...`` attributes of the stream's data segments."""
    endpoint = sm.controller.endpoint
    with SegmentClient(endpoint.host, endpoint.port) as segments:
        return [key for s in sm.describe_stream(scope, stream).segments
                for key in segments.get_info(s.segment.name).attributes if key.startswith("writer:txn:")]


def test_malformed_transaction_requests_get_error_statuses(server: ServerProcess, uri: str) -> None:
    create_topic(server, "txn-garbage", 1)
    with StreamManager(uri) as sm:
        conn = sm.controller.pool.get(sm.controller.endpoint)

        def call(command: Command, header: dict[str, object], payload: bytes = b"") -> object:
            return conn.send_frame(command, header, payload).result(30)

        base = {"scope": "kafka", "stream": "txn-garbage"}
        with pytest.raises(InvalidRequestError):
            call(Command.BEGIN_TXN, {**base, "txn_id": "not-a-uuid", "lease_ms": 1000})
        with pytest.raises(InvalidRequestError):
            call(Command.BEGIN_TXN, {**base, "txn_id": str(uuid.uuid4()), "lease_ms": 0})
        with pytest.raises(InvalidRequestError):
            call(Command.BEGIN_TXN, {**base, "lease_ms": 1000})
        txw = sm.create_transaction_writer("kafka", "txn-garbage")
        txn = txw.begin_txn()
        ids = {**base, "txn_id": str(txn.txn_id), "partition": 0, "first_event": 0, "last_event": 0}
        with pytest.raises(EventsRefusedError):
            call(Command.APPEND_TXN_EVENTS, ids, b"short")
        with pytest.raises(InvalidRequestError):  # transactional: a transaction's batches are plain
            call(Command.APPEND_TXN_EVENTS, ids, encode_batch([(None, b"x")], 0, 12345, 0, 0, transactional=True))
        with pytest.raises(InvalidRequestError):  # a producer's batch
            call(Command.APPEND_TXN_EVENTS, ids, encode_batch([(None, b"x")], 0, 12345, 0, 0))
        with pytest.raises(InvalidRequestError):  # numbers that do not count the batch's events
            call(Command.APPEND_TXN_EVENTS, {**ids, "last_event": 3}, encode_batch([(None, b"x")], 0))
        with pytest.raises(StreamNotFoundError):
            call(Command.APPEND_TXN_EVENTS, {**ids, "partition": 1}, encode_batch([(None, b"x")], 0))
        with pytest.raises(TxnNotFoundError):
            call(Command.END_TXN, {**base, "txn_id": str(uuid.uuid4()), "commit": True})
        with pytest.raises(TxnNotFoundError):
            txw.get_txn(uuid.uuid4())
        assert txw.txn_status(uuid.uuid4()) == TxnStatus.UNKNOWN
        txn.write_event(b"fine")
        txn.commit()
        assert kafka_values(server, "txn-garbage", 1) == ["fine"]


def test_a_killed_writer_process_leaves_its_transactions_to_its_lease_or_to_another_process(
        server: ServerProcess, uri: str) -> None:
    create_topic(server, "txn-crash", 4)
    child = subprocess.Popen([sys.executable, "-m", "tests.client.txn_process", uri, "kafka", "txn-crash", "10000", "2",
                              "300"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert child.stdout is not None
    opened = [uuid.UUID(child.stdout.readline().split()[1]) for _ in range(2)]
    child.send_signal(signal.SIGKILL)  # mid-transaction: both open, written, neither ended
    child.wait(30)
    with StreamManager(uri) as sm:
        txw = sm.create_transaction_writer("kafka", "txn-crash", serializer=StringSerializer())
        resumed, abandoned = txw.get_txn(opened[0]), txw.get_txn(opened[1])
        assert resumed.check_status() == abandoned.check_status() == TxnStatus.OPEN
        resumed.ping()  # the lease counts from now: time to finish it here
        more = [f"0:{i}" for i in range(300, 340)]
        for i, value in zip(range(300, 340), more, strict=True):
            resumed.write_event(value, routing_key=KEYS[i % len(KEYS)])  # continues the child's sequences
        resumed.commit()
        wait_for(lambda: abandoned.check_status() == TxnStatus.ABORTED, "the dead process's lease to run out")
        stored = kafka_values(server, "txn-crash", 4)
        assert sorted(stored) == sorted([f"0:{i}" for i in range(300)] + more)
        assert in_key_order(stored, "0")



@pytest.fixture
def own_server(tmp_path) -> Iterator[tuple[str, tuple[str, ...]]]:
    """A data dir and fixed ports for a server a test kills and restarts itself."""
    yield str(tmp_path / "data"), ("--native-port", str(free_port()), "--kafka-port", str(free_port()))


@pytest.mark.slow
def test_transactions_across_a_server_sigkill(own_server: tuple[str, tuple[str, ...]]) -> None:
    """Open transactions abort after their lease; a committed one, one whose commit was in flight at the
    kill, and one being written across the kill (its batches resent) are complete exactly once after the
    restart."""
    data, args = own_server
    server = ServerProcess(data, *args).start()
    try:
        create_topic(server, "txn-server-crash", 4)
        sm = StreamManager(f"tcp://127.0.0.1:{server.native_port}", reconnect_timeout=120.0)
        txw = sm.create_transaction_writer("kafka", "txn-server-crash", serializer=StringSerializer(),
                                           lease_ms=15000)
        done, committing, left_open, streaming = (txw.begin_txn() for _ in range(4))
        expected = write_all(done, "d", 200)
        done.commit()
        expected += write_all(committing, "c", 200)
        write_all(left_open, "o", 200)
        committing.flush()
        left_open.flush()
        streamed: list[str] = []
        restarted = threading.Event()

        def stream() -> None:  # writes on while the server dies and comes back
            i = 0
            while not restarted.is_set() or i < 2000:
                value = f"s:{i}"
                streaming.write_event(value, routing_key=KEYS[i % len(KEYS)])
                streamed.append(value)
                i += 1
                if i % 50 == 0:
                    time.sleep(0.005)

        writer = threading.Thread(target=stream)
        writer.start()
        while len(streamed) < 1000:
            time.sleep(0.01)
        # The commit request is on the wire when the server dies: it may or may not have been prepared.
        sm.controller.pool.request(sm.controller.endpoint, EndTxn(scope=committing.scope, stream=committing.stream,
                                                                  txn_id=committing.txn_id, commit=True))
        server.kill()
        server = ServerProcess(data, *args).start()
        restarted.set()
        writer.join(60)
        committing.commit()  # resent: completes (or finds completed) the same commit
        assert committing.check_status() == TxnStatus.COMMITTED
        streaming.commit()
        assert streaming.resent_batches > 0  # the kill cost batches in flight, which were sent again
        expected += streamed
        wait_for(lambda: left_open.check_status() == TxnStatus.ABORTED, "the open transaction's lease to end")
        with pytest.raises(TxnFailedError):
            left_open.commit()
        stored = kafka_values(server, "txn-server-crash", 4)
        assert sorted(stored) == sorted(expected)  # each once
        assert in_key_order(stored, "c") and in_key_order(stored, "s")
        sm.close()
    finally:
        server.kill()


def test_a_writer_gives_up_when_its_server_stays_away_and_records_expire(
        own_server: tuple[str, tuple[str, ...]]) -> None:
    data, args = own_server
    server = ServerProcess(data, *args, "--native-txn-retention-ms", "1000").start()
    try:
        create_topic(server, "txn-expiry", 2)
        sm = StreamManager(f"tcp://127.0.0.1:{server.native_port}", reconnect_timeout=2.0)
        txw = sm.create_transaction_writer("kafka", "txn-expiry")
        txn = txw.begin_txn()
        txn.write_event(b"x", routing_key="k")
        txn.commit()
        # Complete records of native transactions are forgotten after the retention.
        wait_for(lambda: txn.check_status() == TxnStatus.UNKNOWN, "the committed record to expire")
        writer = sm.create_writer("kafka", "txn-expiry")
        writer.write_event(b"before", routing_key="k").result(30)
        server.kill()
        lost = writer.write_event(b"after", routing_key="k")
        with pytest.raises(ConnectionLostError):
            writer.flush()
        assert isinstance(lost.exception(), ConnectionLostError)
        sm.close()
    finally:
        server.kill()


@pytest.mark.slow
def test_a_server_sigkill_in_the_middle_of_a_commit_lands_every_event_once(
        own_server: tuple[str, tuple[str, ...]]) -> None:
    """The server dies while it appends a committing transaction's batches to the partitions (some have
    landed, some not): at the restart it finishes the commit, and the batches that had landed answer as
    written instead of landing twice."""
    data, args = own_server
    server = ServerProcess(data, *args, "--log-level", "INFO").start()
    try:
        create_topic(server, "txn-mid-commit", 16)
        sm = StreamManager(f"tcp://127.0.0.1:{server.native_port}", reconnect_timeout=120.0)
        txw = sm.create_transaction_writer("kafka", "txn-mid-commit", serializer=StringSerializer(),
                                           lease_ms=120_000)
        txn = txw.begin_txn()
        keys = [f"key-{n}" for n in range(64)]
        expected: list[str] = []
        for r in range(150):  # a flush per round: about one batch per partition per round
            for n, key in enumerate(keys):
                value = f"{r}:{n}"
                txn.write_event(value, routing_key=key)
                expected.append(value)
            txn.flush()
        probe = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "probe"})
        first = TopicPartition("txn-mid-commit", 0)
        assert probe.get_watermark_offsets(first, 5, False) == (0, 0)  # connected before the clock matters
        sm.controller.pool.request(sm.controller.endpoint, EndTxn(scope=txn.scope, stream=txn.stream,
                                                                  txn_id=txn.txn_id, commit=True))
        deadline = time.monotonic() + 60
        while probe.get_watermark_offsets(first, 5, False)[1] == 0:  # a commit appends a window at a time
            assert time.monotonic() < deadline, "the commit never began appending"
        server.kill()  # the merge is under way
        probe.close()
        server = ServerProcess(data, *args, "--log-level", "INFO").start()
        wait_for(lambda: txn.check_status() == TxnStatus.COMMITTED, "the resumed commit")
        txn.commit()  # the client's own commit finds it committed
        for isolation in ("read_committed", "read_uncommitted"):
            stored = kafka_values(server, "txn-mid-commit", 16, isolation)
            assert Counter(stored) == Counter(expected)  # each once
        resumed = [line for line in server.output if f"transaction {txn.txn_id}: commit resumed" in line]
        assert resumed, "the restarted server had nothing left to append: the kill came after the merge"
        landed, total = (int(n) for n in re.search(r"(\d+) of its (\d+) batches", resumed[0]).groups())
        assert 0 < landed < total  # killed mid-merge: some had landed, some not
        sm.close()
    finally:
        server.kill()
