"""Log compaction on a real server: keyless records refused on a compacted topic, the cleaner keeping
the latest record per key with stable offsets (tombstones and min.compaction.lag.ms honoured), through
DeleteRecords and restarts, read from the start by kafka-python and confluent-kafka, and no
acknowledged record lost when the server is SIGKILLed while it compacts."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.protocol.records import Compression, NewRecord, build_record_batch, iter_batches
from tests.kafka.wire import local
from tests.server_process import ServerProcess

COMPACTED = {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": "0.01", "file_delete_delay_ms": "200",
             "delete_retention_ms": "60000"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(str(tmp_path_factory.mktemp("compaction")), "--retention-check-seconds", "0.2") as s:
        yield s


def records_of(w: Any, topic: str, start: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record from ``start`` to the high watermark: (offset, key, value)."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = start
    while True:
        f = w.fetch(topic, 0, offset)
        assert f.error_code == 0, f
        batches = list(iter_batches(bytes(f.records or b"")))
        if not batches:
            return out
        for b in batches:
            assert b.crc_valid()
            out += [(r.offset, r.key, r.value) for r in b.records() if r.offset >= start]  # as clients skip
            offset = b.header.last_offset + 1
        if offset >= f.high_watermark:
            return out


def eventually(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def test_keyless_records_are_refused_with_record_errors(server):
    w = local(server.kafka_port)
    w.create("compact-keys", 1, **COMPACTED)
    r = w.produce("compact-keys", 0, build_record_batch([NewRecord(b"k", b"1"), NewRecord(None, b"2"),
                                                          NewRecord(None, b"3")]))
    assert r.error_code == ErrorCode.INVALID_RECORD
    reason = "Compacted topic cannot accept message without key in topic partition compact-keys-0."
    assert [(e.batch_index, e.batch_index_error_message) for e in r.record_errors] == [(1, reason), (2, reason)]
    assert w.produce("compact-keys", 0, build_record_batch([NewRecord(b"k", b"4")])).error_code == 0
    assert records_of(w, "compact-keys") == [(0, b"k", b"4")]  # the refused batch took no offsets
    w.close()


def test_latest_per_key_kept_offsets_stable_across_delete_records_and_restart(server):
    w = local(server.kafka_port)
    now = int(time.time() * 1000)
    old, young = now - 10 * 60_000, now
    w.create("compact-model", 1, **{**COMPACTED, "min_compaction_lag_ms": "120000"})
    sent: list[tuple[int, bytes, bytes | None, int]] = []
    rng = random.Random(7)
    for i in range(60):  # old records: cleanable; "tomb" keys end in tombstones older than delete.retention.ms
        batch = [(f"k{rng.randrange(8)}".encode(), f"v{i}-{j}".encode(), old) for j in range(rng.randrange(1, 4))]
        if i % 10 == 9:
            batch.append((b"tomb", None, old - 120_000))
        elif i % 10 == 0:
            batch.append((b"tomb", b"alive", old))
        codec = Compression.GZIP if i % 3 == 0 else Compression.NONE
        r = w.produce("compact-model", 0, build_record_batch([NewRecord(k, v, (), ts) for k, v, ts in batch],
                                                             compression=codec))
        assert r.error_code == 0
        sent += [(r.base_offset + n, k, v, ts) for n, (k, v, ts) in enumerate(batch)]
    for i in range(5):  # young records (within min.compaction.lag.ms): never cleaned, duplicates and all
        r = w.produce("compact-model", 0, build_record_batch([NewRecord(b"k0", f"young{i}".encode(), (), young)]))
        sent.append((r.base_offset, b"k0", f"young{i}".encode(), young))
    hw = sent[-1][0] + 1
    young_from = hw - 5
    last_old = {k: o for o, k, _, _ in sent if o < young_from}
    expected = [(o, k, v) for o, k, v, ts in sent
                if o >= young_from or (last_old[k] == o and not (v is None and ts < now - 60_000))]
    assert len(expected) < len(sent) / 3
    eventually(lambda: records_of(w, "compact-model") == expected)
    assert w.list_offset("compact-model", 0, -2).offset == 0  # compaction never moves the log start
    assert w.list_offset("compact-model", 0, -1).offset == hw
    # A fetch from an offset the cleaner removed starts at the next record kept.
    middle = expected[len(expected) // 2][0]
    assert records_of(w, "compact-model", middle - 1)[0][0] in (middle - 1, middle)

    # The cleaned layout survives a crash; then DeleteRecords moves the log start through it.
    server.kill()
    server.start()
    w = local(server.kafka_port)
    assert records_of(w, "compact-model") == expected
    cut = expected[3][0]
    from tests.kafka.test_log_start_and_fetch_sizing import D  # DeleteRecords' request class

    deleted = w.send(21, 2, D(timeout_ms=5000, topics=[D.DeleteRecordsTopic(
        name="compact-model", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=cut)])]))
    assert deleted.topics[0].partitions[0].low_watermark == cut
    assert records_of(w, "compact-model", cut) == expected[3:]
    r = w.produce("compact-model", 0, build_record_batch([NewRecord(b"k1", b"after", (), now)]))
    assert r.base_offset == hw  # offsets continue where they were
    eventually(lambda: records_of(w, "compact-model", cut)[-1] == (hw, b"k1", b"after"))
    w.close()


def test_kafka_python_and_confluent_kafka_read_a_compacted_topic_from_the_start(server):
    from confluent_kafka import Consumer
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=server.bootstrap)
    for i in range(300):
        producer.send("compact-clients", key=f"key{i % 20}".encode(), value=f"value{i}".encode())
        if i % 10 == 9:
            producer.flush()  # many batches: the cleaner never cleans the last one
    producer.close()
    w = local(server.kafka_port)
    eventually(lambda: len(records_of(w, "compact-clients")) < 60)
    w.close()
    latest = {f"key{i % 20}".encode(): f"value{i}".encode() for i in range(300)}

    kp = KafkaConsumer("compact-clients", bootstrap_servers=server.bootstrap, auto_offset_reset="earliest",
                       enable_auto_commit=False, consumer_timeout_ms=5000)
    seen = {m.key: m.value for m in kp}
    kp.close()
    assert seen == latest

    cc = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "compact-readers",
                   "auto.offset.reset": "earliest", "enable.auto.commit": False})
    cc.subscribe(["compact-clients"])
    got: dict[bytes, bytes] = {}
    offsets: list[int] = []
    deadline = time.monotonic() + 30
    while len(offsets) == 0 or offsets[-1] < 299:
        assert time.monotonic() < deadline, offsets
        m = cc.poll(0.5)
        if m is not None and m.error() is None:
            got[m.key()] = m.value()
            offsets.append(m.offset())
    cc.close()
    assert got == latest and offsets == sorted(offsets) and len(offsets) < 300


@pytest.fixture(scope="module", autouse=True)
def _compacted_default_topic(server):
    """``compact-clients`` is made by the test through auto-creation's defaults plus these configs."""
    w = local(server.kafka_port)
    w.create("compact-clients", 1, **COMPACTED)
    w.close()


@pytest.mark.slow
def test_sigkill_while_compacting_loses_no_acknowledged_record(tmp_path):
    """A producer keeps overwriting keys while the cleaner runs every 0.2 s; the server is SIGKILLed
    three times at random moments. Afterwards every key reads its latest acknowledged value (or a
    later one), and every record read before a crash is still at its offset or cleaned away by a
    newer record of its key."""
    s = ServerProcess(str(tmp_path), "--retention-check-seconds", "0.1")
    s.start()
    try:
        w = local(s.kafka_port)
        w.create("compact-crash", 1, **{**COMPACTED, "file_delete_delay_ms": "0"})
        acked: dict[bytes, tuple[int, bytes]] = {}  # key -> (offset, value) of its latest acknowledged record
        counter = 0
        rng = random.Random(3)
        for _ in range(3):
            stop = threading.Event()

            def produce(port: int = s.kafka_port, stop: threading.Event = stop) -> None:
                nonlocal counter
                pw = local(port)
                try:
                    while not stop.is_set():
                        counter += 1
                        key, value = f"k{counter % 13}".encode(), f"v{counter}".encode()
                        r = pw.produce("compact-crash", 0, build_record_batch([NewRecord(key, value)]))
                        if r.error_code == 0:
                            acked[key] = (r.base_offset, value)
                except (OSError, ConnectionError, AssertionError):
                    return  # the server died under us: this one was never acknowledged

            t = threading.Thread(target=produce)
            t.start()
            time.sleep(rng.uniform(1.0, 2.5))
            s.kill()
            stop.set()
            t.join(10)
            s.start()
            w = local(s.kafka_port)
            stored = records_of(w, "compact-crash")
            latest = {k: (o, v) for o, k, v in stored}
            for key, (offset, value) in acked.items():
                assert latest[key][0] >= offset, (key, offset, value, latest[key])
                if latest[key][0] == offset:
                    assert latest[key][1] == value
            offsets = [o for o, _, _ in stored]
            assert offsets == sorted(set(offsets))
        assert len(stored) < counter  # the cleaner did run
        w.close()
    finally:
        s.kill()


def test_transactions_on_a_compacted_topic(server):
    """Aborted records are removed, a marker goes once its transaction has no batch left and
    delete.retention.ms has passed (with its aborted-index entry), and read_committed consumers read
    exactly the committed latest values from the start."""
    from confluent_kafka import Consumer, Producer

    w = local(server.kafka_port)
    w.create("compact-txn", 1, **{**COMPACTED, "delete_retention_ms": "0"})
    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "compact-txn-producer"})
    p.init_transactions(30)
    for round_ in range(6):
        p.begin_transaction()
        for key in (b"a", b"b", b"c"):
            p.produce("compact-txn", key=key, value=f"{key.decode()}{round_}".encode(), partition=0)
        p.flush()
        if round_ % 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    p.begin_transaction()
    p.produce("compact-txn", key=b"z", value=b"last", partition=0)
    p.commit_transaction(30)

    def stored() -> list[tuple[int, bool, bytes | None, bytes | None]]:
        f = w.fetch("compact-txn", 0, 0)
        return [(b.header.base_offset, b.header.is_control, r.key, r.value)
                for b in iter_batches(bytes(f.records or b"")) for r in b.records()]

    # Kept: a4 b4 c4 (round 4, the last committed one), z; no aborted data; round 4's commit marker
    # stays while its data does, the emptied transactions' markers are gone.
    def cleaned() -> bool:
        data = [(k, v) for _, control, k, v in stored() if not control]
        return data == [(b"a", b"a4"), (b"b", b"b4"), (b"c", b"c4"), (b"z", b"last")]

    eventually(cleaned)
    markers = [o for o, control, _, _ in stored() if control]
    assert len(markers) <= 3  # round 4's, the last transaction's, and at most one not yet emptied
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "compact-txn-readers",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    c.subscribe(["compact-txn"])
    got: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 30
    while (b"z", b"last") not in got:
        assert time.monotonic() < deadline, got
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.key(), m.value()))
    c.close()
    assert got == [(b"a", b"a4"), (b"b", b"b4"), (b"c", b"c4"), (b"z", b"last")]
    w.close()


def test_compact_delete_applies_retention_and_compaction(server):
    """cleanup.policy=compact,delete: retention.ms drops old batches (the log start moves) and the
    cleaner keeps the latest record per key of what remains."""
    w = local(server.kafka_port)
    w.create("compact-delete", 1, **{**COMPACTED, "cleanup_policy": "compact,delete", "retention_ms": "60000"})
    now = int(time.time() * 1000)
    for i in range(10):  # old: past retention.ms
        w.produce("compact-delete", 0, build_record_batch([NewRecord(b"old", f"o{i}".encode(), (), now - 600_000)]))
    for i in range(10):
        w.produce("compact-delete", 0, build_record_batch([NewRecord(f"k{i % 2}".encode(), f"n{i}".encode(), (),
                                                                     now)]))
    eventually(lambda: w.list_offset("compact-delete", 0, -2).offset == 10)
    # The last batch is never cleaned (as Kafka's active segment): k1's n7 stays beside n9 until more comes.
    eventually(lambda: records_of(w, "compact-delete", 10) == [(17, b"k1", b"n7"), (18, b"k0", b"n8"),
                                                               (19, b"k1", b"n9")])
    w.close()


def test_partitions_sharing_a_segment_compact_apart_and_a_recreated_topic_starts_empty(server):
    """Two partitions in one data segment: each is cleaned into its own compacted segment and the shared
    segment is truncated only below what both still need, across a restart; deleting the topic drops its
    compacted segments and records, so a topic created again under the name starts empty at offset 0."""
    w = local(server.kafka_port)
    w.create("compact-shared", 2, **{**COMPACTED, "millrace_segments_initial": "1"})
    expected: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {0: [], 1: []}
    for i in range(40):
        partition = i % 3 % 2  # uneven: partition 0 gets two of every three batches
        key, value = f"p{partition}k{i % 4}".encode(), f"v{i}".encode()
        r = w.produce("compact-shared", partition, build_record_batch([NewRecord(key, value)]))
        expected[partition].append((r.base_offset, key, value))

    def model(records: list[tuple[int, bytes | None, bytes | None]]) -> list[tuple[int, bytes | None, bytes | None]]:
        last = {k: o for o, k, _ in records[:-1]}  # the last batch is never cleaned
        return [r for r in records[:-1] if last[r[1]] == r[0]] + records[-1:]

    def partition_records(partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
        f = w.fetch("compact-shared", partition, 0)
        return [(r.offset, r.key, r.value) for b in iter_batches(bytes(f.records or b"")) for r in b.records()]

    eventually(lambda: all(partition_records(p) == model(expected[p]) for p in (0, 1)))
    server.kill()
    server.start()
    w = local(server.kafka_port)
    assert all(partition_records(p) == model(expected[p]) for p in (0, 1))

    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.delete_topics(["compact-shared"])["compact-shared"].result(30)
    eventually(lambda: not any(t.name == "compact-shared" for t in w.metadata(9, None).topics))
    w.create("compact-shared", 2, **COMPACTED)
    assert w.fetch("compact-shared", 0, 0).high_watermark == 0
    assert w.produce("compact-shared", 0, build_record_batch([NewRecord(b"k", b"new")])).base_offset == 0
    assert partition_records(0) == [(0, b"k", b"new")]
    w.close()


def test_list_offsets_by_time_looks_past_a_batch_the_cleaner_emptied(server):
    """An idempotent producer's last batch stays, emptied, with its maxTimestamp: ListOffsets by time
    that lands on it answers the next record at or after the time, not -1."""
    w = local(server.kafka_port)
    w.create("compact-times", 1, **COMPACTED)
    now = int(time.time() * 1000)
    first = w.produce("compact-times", 0, build_record_batch([NewRecord(b"a", b"1", (), now - 5000)],
                                                             producer_id=w.producer_id(), producer_epoch=0,
                                                             base_sequence=0))
    assert first.error_code == 0, first
    w.produce("compact-times", 0, build_record_batch([NewRecord(b"a", b"2", (), now - 4000)]))
    w.produce("compact-times", 0, build_record_batch([NewRecord(b"b", b"3", (), now - 3000)]))

    def emptied() -> bool:
        f = w.fetch("compact-times", 0, 0)
        return [b.header.record_count for b in iter_batches(bytes(f.records or b""))] == [0, 1, 1]

    eventually(emptied)
    found = w.list_offset("compact-times", 0, now - 5000)
    assert (found.offset, found.timestamp) == (1, now - 4000)
    w.close()

    # Clients step over the empty batch (Kafka's cleaner leaves them too).
    from confluent_kafka import Consumer
    from kafka import KafkaConsumer

    kp = KafkaConsumer("compact-times", bootstrap_servers=server.bootstrap, auto_offset_reset="earliest",
                       enable_auto_commit=False, consumer_timeout_ms=3000)
    assert [(m.offset, m.key, m.value) for m in kp] == [(1, b"a", b"2"), (2, b"b", b"3")]
    kp.close()
    cc = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "compact-times-readers",
                   "auto.offset.reset": "earliest", "enable.auto.commit": False})
    cc.subscribe(["compact-times"])
    got: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 20
    while len(got) < 2:
        assert time.monotonic() < deadline, got
        m = cc.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.offset(), m.key(), m.value()))
    cc.close()
    assert got == [(1, b"a", b"2"), (2, b"b", b"3")]


def test_generations_left_by_a_crash_either_side_of_the_switch_are_deleted(server):
    """A crash after a round wrote its generation but before the table named it leaves the next
    generation as an orphan; one after the switch but before the delayed deletion leaves the previous
    one. A restart deletes both and serves the generation the table names; the next round goes on."""
    from millrace.client.segments import SegmentClient

    prefix = "kafka/compact-orphans/kafka-compacted.0."

    def generations() -> list[int]:
        with SegmentClient("127.0.0.1", server.native_port) as raw:
            return sorted(int(n[len(prefix):]) for n in raw.list_segments() if n.startswith(prefix) and "#" not in n)

    w = local(server.kafka_port)
    w.create("compact-orphans", 1, **COMPACTED)
    for i in range(20):
        w.produce("compact-orphans", 0, build_record_batch([NewRecord(f"k{i % 3}".encode(), f"v{i}".encode())]))
    # Cleaned up to the last batch (3 keys + the last batch), and the previous generations deleted (once
    # cleaned that far, no round starts again until more data comes).
    eventually(lambda: len(records_of(w, "compact-orphans")) == 4 and len(generations()) == 1)
    before = records_of(w, "compact-orphans")
    (current,) = generations()
    with SegmentClient("127.0.0.1", server.native_port) as raw:
        for orphan in (f"{prefix}{current - 1}", f"{prefix}{current + 1}"):
            raw.create_segment(orphan)
            raw.append(orphan, b"half-written generation")
    server.kill()
    server.start()
    w = local(server.kafka_port)
    assert records_of(w, "compact-orphans") == before
    assert generations() == [current]
    for i in range(20, 40):
        w.produce("compact-orphans", 0, build_record_batch([NewRecord(f"k{i % 3}".encode(), f"v{i}".encode())]))
    eventually(lambda: len(records_of(w, "compact-orphans")) == 4 and len(generations()) == 1
               and generations()[0] > current)
    w.close()


def test_a_compacted_topic_splits_and_keeps_compacting(server):
    """A compacted topic whose segment splits: each partition's cleaned prefix, the sealed predecessor
    and its successor hold its data in turn; rounds after the split clean across all three, and a
    restart reads the same."""
    from millrace.client.segments import SegmentClient

    w = local(server.kafka_port)
    w.create("compact-split", 2, **{**COMPACTED, "millrace_segments_initial": "1"})
    sent: dict[int, list[tuple[int, bytes, bytes]]] = {0: [], 1: []}

    def produce(start: int, end: int) -> None:
        for i in range(start, end):
            partition, key = i % 2, f"k{i % 5}".encode()
            r = w.produce("compact-split", partition, build_record_batch([NewRecord(key, f"v{i}".encode())]))
            assert r.error_code == 0
            sent[partition].append((r.base_offset, key, f"v{i}".encode()))

    def model(partition: int) -> list[tuple[int, bytes, bytes]]:
        records = sent[partition]
        last = {k: o for o, k, _ in records[:-1]}
        return [r for r in records[:-1] if last[r[1]] == r[0]] + records[-1:]

    def partition_records(partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
        f = w.fetch("compact-split", partition, 0)
        return [(r.offset, r.key, r.value) for b in iter_batches(bytes(f.records or b"")) for r in b.records()]

    produce(0, 40)
    eventually(lambda: all(partition_records(p) == model(p) for p in (0, 1)))
    with SegmentClient("127.0.0.1", server.native_port) as admin:
        assert len(admin.split_segment("kafka", "compact-split", 0, pieces=2)["segments"]) == 2
    produce(40, 80)
    eventually(lambda: all(partition_records(p) == model(p) for p in (0, 1)))
    server.kill()
    server.start()
    w = local(server.kafka_port)
    assert all(partition_records(p) == model(p) for p in (0, 1))
    produce(80, 100)
    eventually(lambda: all(partition_records(p) == model(p) for p in (0, 1)))
    w.close()


def test_sigterm_during_a_round_stops_cleanly_and_the_next_start_finishes_the_work(tmp_path):
    """A clean shutdown while the cleaner works: the round gives up at its next batch before the store
    closes, the server exits 0, and the next start deletes the half-written generation and compacts."""
    from tests.kafka.test_admin_wire import SET, TOPIC, incremental

    s = ServerProcess(str(tmp_path), "--retention-check-seconds", "0.2")
    s.start()
    try:
        w = local(s.kafka_port)
        w.create("compact-stop", 1, cleanup_policy="delete", min_cleanable_dirty_ratio="0.01")
        for i in range(0, 100_000, 100):
            w.produce("compact-stop", 0, build_record_batch([NewRecord(f"k{(i + j) % 50}".encode(), b"x" * 50)
                                                             for j in range(100)]))
        assert incremental(w, 1, TOPIC, "compact-stop", [("cleanup.policy", SET, "compact")]).error_code == 0
        time.sleep(0.5)  # the first round (100,000 records) is under way
        started = time.monotonic()
        assert s.stop(timeout=30) == 0
        assert time.monotonic() - started < 10
        assert any("stopped cleanly" in line for line in s.output)
        assert not [line for line in s.output if "compacting" in line or "Traceback" in line]
        s.start()
        w = local(s.kafka_port)
        eventually(lambda: len(records_of(w, "compact-stop")) <= 150)  # 50 keys + the last batch
        assert {k for _, k, _ in records_of(w, "compact-stop")} == {f"k{n}".encode() for n in range(50)}
        w.close()
    finally:
        s.kill()
