"""DeleteRecords seen at once by the requests after it, and Fetch sizing (KIP-74) across partitions,
over raw sockets and through librdkafka (confluent-kafka and kcat)."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from millrace.gateway.kafka_protocol.codec import request_class
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.protocol.records import NewRecord, build_record_batch, iter_batches
from millrace.streams.partitions.offset_index import DENSE_TAIL
from tests.kafka.wire import FETCH, LIST_OFFSETS, local
from tests.server_process import ServerProcess

F, L, D = (request_class(k) for k in (FETCH, LIST_OFFSETS, 21))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(str(tmp_path_factory.mktemp("log-start-fetch")), "--default-partitions", "1") as s:
        yield s


def batch(values: list[bytes]) -> bytes:
    return build_record_batch([NewRecord(key=b"k", value=v) for v in values])


def offsets_of(records: bytes | memoryview | None) -> list[int]:
    return [r.offset for b in iter_batches(bytes(records or b"")) for r in b.records()]


# ------------------------------------------------------------------------------------------ DeleteRecords

def test_requests_pipelined_behind_delete_records_see_the_new_log_start(server):
    """A client may send ListOffsets and Fetch right behind DeleteRecords without waiting (librdkafka
    pipelines); Kafka handles a connection's requests one at a time, so they see the new log start."""
    c = local(server.kafka_port)
    for i in range(10):
        c.produce("pipelined-trim", 0, batch([f"{i}".encode()]))
    requests = [
        (21, 2, D(timeout_ms=5000, topics=[D.DeleteRecordsTopic(
            name="pipelined-trim", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=7)])])),
        (LIST_OFFSETS, 7, L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(
            name="pipelined-trim", partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-2)])])),
        (FETCH, 12, F(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                      session_epoch=-1, topics=[F.FetchTopic(topic="pipelined-trim", partitions=[
                          F.FetchPartition(partition=0, fetch_offset=3, partition_max_bytes=1 << 20)])])),
    ]
    c.submit_together(requests)
    deleted = c.receive().topics[0].partitions[0]
    earliest = c.receive().topics[0].partitions[0]
    fetched = c.receive().responses[0].partitions[0]
    assert (deleted.error_code, deleted.low_watermark) == (0, 7)
    assert (earliest.error_code, earliest.offset) == (0, 7)
    assert (fetched.error_code, fetched.log_start_offset) == (ErrorCode.OFFSET_OUT_OF_RANGE, 7)
    assert offsets_of(c.fetch("pipelined-trim", 0, 7).records) == [7, 8, 9]
    c.close()


def test_concurrent_log_start_moves_persist_the_highest(tmp_path):
    """Several DeleteRecords in flight at once: the stored log start is the highest answered, also
    after a restart (the table writes of one partition never land out of order)."""
    server = ServerProcess(str(tmp_path / "data")).start()
    c = local(server.kafka_port)
    for i in range(30):
        c.produce("many-trims", 0, batch([f"{i}".encode()]))
    c.submit_together([(21, 2, D(timeout_ms=5000, topics=[D.DeleteRecordsTopic(
        name="many-trims", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=offset)])]))
        for offset in (5, 20, 10, 25, 15)])
    lows = [c.receive().topics[0].partitions[0].low_watermark for _ in range(5)]
    assert lows[-1] == 25 and lows == sorted(lows) and all(low >= offset for low, offset
                                                           in zip(lows, (5, 20, 10, 25, 15), strict=True))
    assert c.list_offset("many-trims", 0, -2).offset == 25
    c.close()
    assert server.stop() == 0
    with ServerProcess(server.data_dir) as again:
        assert local(again.kafka_port).list_offset("many-trims", 0, -2).offset == 25


# ------------------------------------------------------------------------------------ Fetch sizing (KIP-74)

def fetch_partitions(c, topic: str, partitions: list[int], max_bytes: int, partition_max_bytes: int) -> list:
    r = c.send(FETCH, 12, F(max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, isolation_level=0, session_id=0,
                            session_epoch=-1, topics=[F.FetchTopic(topic=topic, partitions=[
                                F.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=partition_max_bytes)
                                for p in partitions])]))
    return r.responses[0].partitions


def test_fetch_limits_hold_across_partitions_with_one_batch_of_progress(server):
    c = local(server.kafka_port)
    c.create("sized", 4)
    sizes = set()
    for p in range(3):  # partition 3 stays empty
        for i in range(4):
            sizes.add(len(one := batch([f"{p}-{i}".encode() * 100])))
            c.produce("sized", p, one)
    (size,) = sizes  # every batch has the same size
    # Two batches fit the response, one a partition: partitions 0 and 1 get one each, 2 nothing.
    got = fetch_partitions(c, "sized", [0, 1, 2, 3], 2 * size + 10, size + 10)
    assert [offsets_of(pd.records) for pd in got] == [[0], [0], [], []]
    assert [pd.error_code for pd in got] == [0, 0, 0, 0] and got[2].high_watermark == 4
    # The request's order decides: the first partition with data goes first.
    got = fetch_partitions(c, "sized", [3, 2, 0], 3 * size, 2 * size)
    assert [offsets_of(pd.records) for pd in got] == [[], [0, 1], [0]]
    # Limits below one batch: only the first partition with data makes progress, with one batch.
    got = fetch_partitions(c, "sized", [3, 1, 0, 2], 10, 10)
    assert [offsets_of(pd.records) for pd in got] == [[], [0], [], []]
    got = fetch_partitions(c, "sized", [0, 1], size // 2, 4 * size)
    assert [offsets_of(pd.records) for pd in got] == [[0], []]
    c.close()


def test_fetches_stay_within_the_servers_fetch_memory_budget(tmp_path):
    """A consumer may ask for 64 MiB, but a server run with --fetch-budget-mb 1 plans at most what is left
    of that budget (Broker.fetch_memory) for a fetch, at least one batch; each fetch gives back what it
    took once its response is sent, or its connection is gone, so fetch after fetch gets the whole
    budget again, also after a client that never read its responses went away."""
    with ServerProcess(str(tmp_path), "--fetch-budget-mb", "1") as srv:
        c = local(srv.kafka_port)
        c.create("budgeted", 1)
        one = batch([bytes(60_000)])
        for _ in range(60):  # 3.6 MB, 60 batches
            assert c.produce("budgeted", 0, one).error_code == 0
        offset, sizes = 0, []
        while offset < 60:
            pd = c.fetch("budgeted", 0, offset, max_bytes=64 << 20)
            got = offsets_of(pd.records)
            assert got and got[0] == offset
            sizes.append(len(pd.records))
            offset = got[-1] + 1
        # 1 MiB holds 17 of these batches: every fetch but the last returns them all, none returns more.
        assert sizes[:-1] == [17 * len(one)] * 3 and 0 < sizes[-1] <= 17 * len(one), sizes
        stalled = local(srv.kafka_port)
        F = request_class(FETCH)  # noqa: N806 - a generated message class
        big = F(max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                topics=[F.FetchTopic(topic="budgeted", partitions=[F.FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=64 << 20)])])
        stalled.submit_together([(FETCH, 12, big)] * 8)  # and never reads the answers
        time.sleep(1)
        stalled.close()
        time.sleep(0.5)
        assert len(c.fetch("budgeted", 0, 0, max_bytes=64 << 20).records) == 17 * len(one)
        c.close()


def test_fetches_and_time_lookups_inside_folded_index_entries(server):
    """Hundreds of single-record batches: beyond the dense tail, durable index entries fold into runs of
    batches (``offset_index``). A fetch from inside a run starts at its offset, the byte budget holds
    batch by batch with one batch of progress at least, and ListOffsets by time finds a record inside a
    run; librdkafka reads the whole partition from the start with a budget below a run."""
    c = local(server.kafka_port)
    c.create("folded", 1)
    total = DENSE_TAIL * 4
    sizes = set()
    for i in range(total):
        one = build_record_batch([NewRecord(key=b"k", value=b"%04d" % i, timestamp=1_000_000 + i)])
        sizes.add(len(one))
        assert c.produce("folded", 0, one).error_code == 0
    (size,) = sizes
    assert offsets_of(c.fetch("folded", 0, 0).records) == list(range(total))
    assert offsets_of(c.fetch("folded", 0, 37).records) == list(range(37, total))
    assert offsets_of(c.fetch("folded", 0, 37, max_bytes=1).records) == [37]
    assert offsets_of(c.fetch("folded", 0, 37, max_bytes=3 * size + 5).records) == [37, 38, 39]
    assert offsets_of(c.fetch("folded", 0, total - 3, max_bytes=1 << 20).records) == [total - 3, total - 2, total - 1]
    found = c.list_offset("folded", 0, 1_000_000 + 50)
    assert (found.error_code, found.offset, found.timestamp) == (0, 50, 1_000_050)
    c.close()
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "folded", "enable.auto.commit": False,
                         "fetch.max.bytes": 1000, "message.max.bytes": 1000, "max.partition.fetch.bytes": 700,
                         "receive.message.max.bytes": 1512, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition("folded", 0, 0)])
        read: list[int] = []
        deadline = time.monotonic() + 60
        while len(read) < total and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                read.append(msg.offset())
        assert read == list(range(total))
    finally:
        consumer.close()


def test_librdkafka_consumer_with_small_fetch_limits_reads_every_partition(server):
    """A librdkafka consumer with small fetch.max.bytes and max.partition.fetch.bytes reads all of
    several partitions: it drops the connection on a response larger than receive.message.max.bytes
    (fetch.max.bytes + 512 at least), so a broker that returned a batch from every partition whatever
    the limits kept it from ever reading; Kafka's rule allows only the first batch past them."""
    from confluent_kafka import Producer

    topic, partitions, per_partition = "small-fetches", 4, 25
    c = local(server.kafka_port)
    c.create(topic, partitions)
    c.close()
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 20, "batch.num.messages": 1})
    expected = set()
    for p in range(partitions):
        for i in range(per_partition):
            value = f"{p}:{i}:".encode() + b"v" * 600
            producer.produce(topic, value, partition=p)
            expected.add(value)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "small-fetches",
                         "auto.offset.reset": "earliest", "fetch.max.bytes": 1000, "message.max.bytes": 1000,
                         "max.partition.fetch.bytes": 700, "receive.message.max.bytes": 1512,
                         "fetch.wait.max.ms": 100})
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    try:
        for _ in range(600):  # polls of up to a second; all the data is there from the start
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            seen.add(message.value())
            if seen == expected:
                break
    finally:
        consumer.close()
    assert seen == expected


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_with_small_fetch_limits_reads_every_partition_to_the_end(server):
    topic, partitions = "kcat-small-fetches", 3
    c = local(server.kafka_port)
    c.create(topic, partitions)
    for p in range(partitions):
        for i in range(8):
            c.produce(topic, p, batch([f"{p}:{i}:".encode() + b"x" * 500]))
    c.close()
    out = subprocess.run(
        ["kcat", "-C", "-b", server.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%p:%o\\n",
         "-X", "fetch.max.bytes=1000", "-X", "message.max.bytes=1000", "-X", "max.partition.fetch.bytes=700",
         "-X", "receive.message.max.bytes=1512"],
        capture_output=True, text=True, timeout=120, check=True)
    assert sorted(out.stdout.split()) == sorted(f"{p}:{o}" for p in range(partitions) for o in range(8))


def test_kafka_python_consumer_with_fetch_limits_below_one_batch(server):
    from kafka import KafkaConsumer, TopicPartition

    topic, partitions = "kp-small-fetches", 3
    c = local(server.kafka_port)
    c.create(topic, partitions)
    for p in range(partitions):
        for i in range(10):
            c.produce(topic, p, batch([f"{p}:{i}:".encode() + b"x" * 600]))
    c.close()
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, fetch_max_bytes=500, max_partition_fetch_bytes=300,
                             auto_offset_reset="earliest", consumer_timeout_ms=30000)
    assigned = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(assigned)
    consumer.seek_to_beginning(*assigned)
    seen: list[tuple[int, int]] = []
    try:
        for message in consumer:  # stops after 30 s without a record
            seen.append((message.partition, message.offset))
            if len(seen) == partitions * 10:
                break
    finally:
        consumer.close()
    assert sorted(seen) == [(p, o) for p in range(partitions) for o in range(10)]
