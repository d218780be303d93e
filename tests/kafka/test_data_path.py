"""The Kafka data path over a real server: produce, fetch, offsets, idempotence, recovery, retention,
and refusal of bad input, spoken with our own codec over raw sockets."""

from __future__ import annotations

import time

import pytest

from millrace.gateway.kafka_protocol.codec import encode_request, request_class
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.protocol.records import NewRecord, build_record_batch, iter_batches
from tests.kafka.wire import KafkaWire, local
from tests.server_process import ServerProcess

P, F, L, D, INIT = (request_class(k) for k in (0, 1, 2, 21, 22))


def records_of(pd) -> list:
    return [r for b in iter_batches(bytes(pd.records)) for r in b.records()]


def batch(values: list[bytes], key: bytes | None = b"k", **kw) -> bytes:
    return build_record_batch([NewRecord(key=key, value=v) for v in values], **kw)


@pytest.fixture
def server(tmp_path):
    """A server of the test's own: the test stops, kills or restarts it."""
    srv = ServerProcess(str(tmp_path / "data"), "--default-partitions", "2").start()
    yield srv
    srv.kill()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """One server for the tests that only talk to it, each on topics of its own (a start costs seconds)."""
    srv = ServerProcess(str(tmp_path_factory.mktemp("data")), "--default-partitions", "2").start()
    yield srv
    srv.kill()


def test_produce_fetch_dense_offsets_and_restart(server, tmp_path):
    c = local(server.kafka_port)
    expected = []
    for i in range(20):
        values = [f"{i}-{j}".encode() for j in range(i % 4 + 1)]
        assert c.produce("dense", 1, batch(values)).base_offset == len(expected)
        expected += values
    got = records_of(c.fetch("dense", 1, 0))
    assert [r.offset for r in got] == list(range(len(expected)))
    assert [r.value for r in got] == expected
    # A fetch from the middle of a batch returns that whole batch (the consumer skips).
    mid = records_of(c.fetch("dense", 1, 3))
    assert mid[0].offset <= 3 and mid[-1].offset == len(expected) - 1
    assert server.stop() == 0

    srv = ServerProcess(server.data_dir).start()
    try:
        c = local(srv.kafka_port)
        assert [r.value for r in records_of(c.fetch("dense", 1, 0))] == expected
        assert c.produce("dense", 1, batch([b"after"])).base_offset == len(expected)
        assert c.list_offset("dense", 1, -1).offset == len(expected) + 1
    finally:
        srv.kill()


def test_sigkill_before_the_index_is_written_loses_nothing(server):
    c = local(server.kafka_port)
    offsets = [c.produce("crashy", 0, batch([f"v{i}".encode()])).base_offset for i in range(50)]
    server.kill()  # immediately: the index segment lags the data segment
    srv = ServerProcess(server.data_dir).start()
    try:
        c = local(srv.kafka_port)
        got = records_of(c.fetch("crashy", 0, 0))
        assert [r.offset for r in got] == offsets == list(range(50))
        assert c.produce("crashy", 0, batch([b"next"])).base_offset == 50
    finally:
        srv.kill()


def test_long_poll_waits_for_data_and_times_out(shared_server):
    c = local(shared_server.kafka_port)
    c.produce("poll", 0, batch([b"a"]))
    started = time.monotonic()
    empty = c.fetch("poll", 0, 1, max_wait_ms=400)
    assert empty.error_code == 0 and len(empty.records) == 0
    assert time.monotonic() - started >= 0.35
    other = local(shared_server.kafka_port)
    import threading

    produced = []
    producer = threading.Timer(0.2, lambda: produced.append(other.produce("poll", 0, batch([b"b"]))))
    producer.start()
    started = time.monotonic()
    woken = c.fetch("poll", 0, 1, max_wait_ms=10000)
    assert [r.value for r in records_of(woken)] == [b"b"]
    assert time.monotonic() - started < 5
    # The fetch may be answered before the producer reads its acknowledgement: wait for it, so the
    # server outlives the produce.
    producer.join(10)
    assert [r.base_offset for r in produced] == [1]


def test_list_offsets_by_time(shared_server):
    c = local(shared_server.kafka_port)
    base = int(time.time() * 1000) - 100_000
    for i in range(5):
        records = [NewRecord(key=None, value=f"{i}-{j}".encode(), timestamp=base + i * 1000 + j) for j in range(3)]
        c.produce("times", 0, build_record_batch(records))
    assert c.list_offset("times", 0, -2).offset == 0
    assert c.list_offset("times", 0, -1).offset == 15
    hit = c.list_offset("times", 0, base + 2001)
    assert (hit.offset, hit.timestamp) == (7, base + 2001)
    assert c.list_offset("times", 0, base + 10**7).offset == -1
    newest = c.list_offset("times", 0, -3)
    assert (newest.offset, newest.timestamp) == (14, base + 4002)


def test_idempotent_producer_dedupes_and_orders(server):
    c = local(server.kafka_port)
    pid = c.send(22, 4, INIT(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))
    assert pid.error_code == 0 and pid.producer_id >= 0

    def idem(seq: int, values: list[bytes], epoch: int = 0) -> bytes:
        return batch(values, producer_id=pid.producer_id, producer_epoch=epoch, base_sequence=seq)

    assert c.produce("idem", 0, idem(0, [b"a", b"b"])).base_offset == 0
    assert c.produce("idem", 0, idem(2, [b"c"])).base_offset == 2
    dup = c.produce("idem", 0, idem(0, [b"a", b"b"]))  # a retry of the first batch
    assert (dup.error_code, dup.base_offset) == (0, 0)
    assert c.produce("idem", 0, idem(5, [b"x"])).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert [r.value for r in records_of(c.fetch("idem", 0, 0))] == [b"a", b"b", b"c"]
    assert c.produce("idem", 0, idem(0, [b"new"], epoch=1)).base_offset == 3
    assert c.produce("idem", 0, idem(3, [b"old"], epoch=0)).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    second = c.send(22, 4, INIT(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))
    assert second.producer_id != pid.producer_id
    server.kill()
    srv = ServerProcess(server.data_dir).start()
    try:
        c = local(srv.kafka_port)
        # Producer state is rebuilt from the log: the retry is still recognised after a crash.
        again = c.produce("idem", 0, idem(0, [b"new"], epoch=1))
        assert (again.error_code, again.base_offset) == (0, 3)
        third = c.send(22, 4, INIT(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                 producer_epoch=-1))
        assert third.producer_id not in (pid.producer_id, second.producer_id)
    finally:
        srv.kill()


def test_delete_records_moves_the_log_start(server):
    c = local(server.kafka_port)
    for i in range(10):
        c.produce("trim", 0, batch([f"{i}".encode()]))
    r = c.send(21, 2, D(timeout_ms=5000, topics=[D.DeleteRecordsTopic(
        name="trim", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=6)])]))
    assert (r.topics[0].partitions[0].error_code, r.topics[0].partitions[0].low_watermark) == (0, 6)
    assert c.fetch("trim", 0, 5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert [r.value for r in records_of(c.fetch("trim", 0, 6))] == [b"6", b"7", b"8", b"9"]
    assert c.list_offset("trim", 0, -2).offset == 6
    r = c.send(21, 2, D(timeout_ms=5000, topics=[D.DeleteRecordsTopic(
        name="trim", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=99)])]))
    assert r.topics[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert server.stop() == 0
    srv = ServerProcess(server.data_dir).start()
    try:
        assert local(srv.kafka_port).list_offset("trim", 0, -2).offset == 6
    finally:
        srv.kill()


def test_a_topic_re_created_after_delete_records_starts_at_offset_0(server):
    """Deleting a topic drops its stored log starts and index segments: the new topic of the same
    name (same segment names) starts at offset 0, also after a restart."""
    c = local(server.kafka_port)
    for i in range(10):
        c.produce("again", 0, batch([f"{i}".encode()]))
    r = c.send(21, 2, D(timeout_ms=5000, topics=[D.DeleteRecordsTopic(
        name="again", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=6)])]))
    assert r.topics[0].partitions[0].low_watermark == 6
    deleted = c.send(20, 4, request_class(20)(topic_names=["again"], timeout_ms=10000))
    assert deleted.responses[0].error_code == 0
    c.create("again", 2)  # asserts success
    assert c.produce("again", 0, batch([b"new"])).base_offset == 0
    assert c.list_offset("again", 0, -2).offset == 0
    assert [r.value for r in records_of(c.fetch("again", 0, 0))] == [b"new"]
    assert server.stop() == 0
    srv = ServerProcess(server.data_dir).start()
    try:
        after = local(srv.kafka_port)
        assert after.list_offset("again", 0, -2).offset == 0
        assert after.produce("again", 0, batch([b"newer"])).base_offset == 1
    finally:
        srv.kill()


def test_bad_batches_get_kafka_errors(shared_server):
    c = local(shared_server.kafka_port)
    good = bytearray(batch([b"payload"]))
    good[-1] ^= 0xFF  # breaks the CRC
    assert c.produce("bad", 0, bytes(good)).error_code == ErrorCode.CORRUPT_MESSAGE
    assert c.produce("bad", 7, batch([b"x"])).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    big = batch([b"z" * (9 * 1024 * 1024)])
    assert c.produce("bad", 0, big).error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert c.fetch("bad", 0, 5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    # nothing was appended by the refusals
    assert c.list_offset("bad", 0, -1).offset == 0
    assert c.produce("bad", 0, batch([b"fine"])).base_offset == 0


def test_acks_zero_gets_no_response_but_is_stored(shared_server):
    c = local(shared_server.kafka_port)
    c.sock.sendall(encode_request(0, 9, 999, P(acks=0, timeout_ms=1000, topic_data=[P.TopicProduceData(
        name="fire", partition_data=[P.PartitionProduceData(index=0, records=batch([b"f"]))])])))
    # The next response on the connection answers the next request, not the acks=0 one.
    deadline = time.monotonic() + 5
    while c.list_offset("fire", 0, -1).offset < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r.value for r in records_of(c.fetch("fire", 0, 0))] == [b"f"]


def _an_expired_record_then_a_live_one(c: KafkaWire, topic: str) -> None:
    """Partition 0 of ``topic``: a record an hour old, then one of now; then retention.ms of a minute."""
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    c.produce(topic, 0, build_record_batch([NewRecord(key=None, value=b"old", timestamp=an_hour_ago)]))
    c.produce(topic, 0, batch([b"new"]))
    inc = request_class(44)  # IncrementalAlterConfigs
    r = c.send(44, 1, inc(resources=[inc.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
        inc.AlterableConfig(name="retention.ms", config_operation=0, value="60000")])], validate_only=False))
    assert r.responses[0].error_code == 0


def test_retention_ms_truncates_old_data(tmp_path):
    srv = ServerProcess(str(tmp_path / "data"), "--retention-check-seconds", "0.3").start()
    try:
        c = local(srv.kafka_port)
        _an_expired_record_then_a_live_one(c, "ret")
        deadline = time.monotonic() + 10
        while c.list_offset("ret", 0, -2).offset < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert c.list_offset("ret", 0, -2).offset == 1
        assert [r.value for r in records_of(c.fetch("ret", 0, 1))] == [b"new"]
    finally:
        srv.kill()


def test_retention_reaches_a_topic_no_client_touches_after_a_restart(tmp_path):
    """A start does not wait for the topics' partitions to load; they load in the background, so the
    periodic work (here retention) still reaches a topic that no request loads after the restart."""
    import json
    import urllib.request

    data = str(tmp_path / "data")
    srv = ServerProcess(data, "--retention-check-seconds", "3600").start()  # no round before the restart
    try:
        c = local(srv.kafka_port)
        _an_expired_record_then_a_live_one(c, "cold")
        assert c.list_offset("cold", 0, -2).offset == 0
    finally:
        assert srv.stop() == 0
    srv = ServerProcess(data, "--retention-check-seconds", "0.3").start()
    try:
        def data_start() -> int:
            with urllib.request.urlopen(f"http://127.0.0.1:{srv.http_port}/api/segments", timeout=10) as answer:
                segments = json.loads(answer.read())["segments"]
            return max(s["start_offset"] for s in segments if s["name"].startswith("kafka/cold/"))

        deadline = time.monotonic() + 30
        while data_start() == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert data_start() > 0, "retention never reached the untouched topic"
        assert local(srv.kafka_port).list_offset("cold", 0, -2).offset == 1
    finally:
        srv.kill()


def test_partitions_sharing_one_segment(server):
    """Four partitions in one segment (millrace.segments.initial=1): each partition's offsets stay
    dense and a fetch returns only its own batches, before and after a restart."""
    import json
    import subprocess
    import sys

    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("shared", 4, 1, config={"millrace.segments.initial": "1"})])["shared"].result(30)
    c = local(server.kafka_port)
    sent: dict[int, list[bytes]] = {p: [] for p in range(4)}
    for i in range(40):
        p = (i * 7) % 4
        value = f"p{p}-{len(sent[p])}".encode()
        assert c.produce("shared", p, batch([value])).base_offset == len(sent[p])
        sent[p].append(value)

    def check(conn: KafkaWire) -> None:
        for p in range(4):
            got = records_of(conn.fetch("shared", p, 0))
            assert [r.value for r in got] == sent[p]
            assert [r.offset for r in got] == list(range(len(sent[p])))

    check(c)
    out = subprocess.run([sys.executable, "-m", "millrace", "streams", "describe", "kafka/shared", "--json",
                          "--server", f"127.0.0.1:{server.native_port}"], capture_output=True, text=True, timeout=60)
    assert len(json.loads(out.stdout)["segments"]) == 1
    assert server.stop() == 0
    srv = ServerProcess(server.data_dir).start()
    try:
        check(local(srv.kafka_port))
    finally:
        srv.kill()


def test_every_advertised_version_of_the_data_path(shared_server):
    """Each version in the registry's range answers: Produce, Fetch (names and, v13+, topic ids),
    ListOffsets, OffsetForLeaderEpoch, DeleteRecords, InitProducerId."""
    from millrace.gateway.kafka.registry import REGISTRY, load_handlers

    load_handlers()
    c = local(shared_server.kafka_port)
    c.produce("sweep", 0, batch([b"seed"]))
    M = request_class(3)
    meta = c.send(3, 12, M(topics=[M.MetadataRequestTopic(name="sweep")], allow_auto_topic_creation=False))
    topic_id = meta.topics[0].topic_id
    lo, hi = REGISTRY[0].min_version, REGISTRY[0].max_version
    for v in range(lo, hi + 1):
        r = c.send(0, v, P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
            name="sweep", partition_data=[P.PartitionProduceData(index=0, records=batch([f"v{v}".encode()]))])]))
        assert r.responses[0].partition_responses[0].error_code == 0, v
    for v in range(REGISTRY[1].min_version, REGISTRY[1].max_version + 1):
        part = F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
        ft = F.FetchTopic(topic_id=topic_id, partitions=[part]) if v >= 13 else F.FetchTopic(topic="sweep",
                                                                                           partitions=[part])
        r = c.send(1, v, F(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                           session_epoch=-1, topics=[ft]))
        got = r.responses[0].partitions[0]
        assert got.error_code == 0 and records_of(got)[0].value == b"seed", v
    for v in range(REGISTRY[2].min_version, REGISTRY[2].max_version + 1):
        r = c.send(2, v, L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(
            name="sweep", partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
        assert (r.topics[0].partitions[0].error_code, r.topics[0].partitions[0].offset) == (0, hi - lo + 2), v
    OFLE = request_class(23)
    for v in range(REGISTRY[23].min_version, REGISTRY[23].max_version + 1):
        r = c.send(23, v, OFLE(replica_id=-1, topics=[OFLE.OffsetForLeaderTopic(topic="sweep", partitions=[
            OFLE.OffsetForLeaderPartition(partition=0, current_leader_epoch=0, leader_epoch=0)])]))
        assert (r.topics[0].partitions[0].error_code, r.topics[0].partitions[0].end_offset) == (0, hi - lo + 2), v
    for v in range(REGISTRY[21].min_version, REGISTRY[21].max_version + 1):
        r = c.send(21, v, D(timeout_ms=1000, topics=[D.DeleteRecordsTopic(
            name="sweep", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=v)])]))
        assert r.topics[0].partitions[0].error_code == 0, v
    for v in range(REGISTRY[22].min_version, REGISTRY[22].max_version + 1):
        r = c.send(22, v, INIT(transactional_id=None, transaction_timeout_ms=1000, producer_id=-1, producer_epoch=-1))
        assert r.error_code == 0 and r.producer_id >= 0, v


def test_cluster_id_survives_restarts(server):
    M = request_class(3)
    first = local(server.kafka_port).send(3, 12, M(topics=[])).cluster_id
    assert first and server.stop() == 0
    srv = ServerProcess(server.data_dir).start()
    try:
        assert local(srv.kafka_port).send(3, 12, M(topics=[])).cluster_id == first
    finally:
        srv.kill()


def test_a_batch_appended_behind_the_gateways_back_is_taken_in_at_the_next_load(server, tmp_path):
    """Another writer of the store (a zombie node's stream layer, here the store opened while the server
    is down; no client command can append to a topic's segment: streams/segment_gate.py) appends a
    whole batch to a topic's segment beyond its index: the next load scans it, the foreign batch becomes
    part of the partition at its offset, and producing continues after it."""
    from millrace.protocol.records import set_base_offset
    from millrace.streams.partitions.formats import ENVELOPE, ENVELOPE_MAGIC, ENVELOPE_VERSION
    from tests.storehelpers import open_store

    c = local(server.kafka_port)
    assert c.produce("fenced", 0, batch([b"one"])).base_offset == 0
    segment = "kafka/fenced/0.#epoch.0"
    c.close()
    assert server.stop() == 0
    store = open_store(server.data_dir)
    try:
        foreign = bytearray(batch([b"foreign"]))
        set_base_offset(foreign, 1, 0)
        end = store.get_info(segment).length
        store.append(segment, ENVELOPE.pack(ENVELOPE_MAGIC, ENVELOPE_VERSION, 0, len(foreign)) + bytes(foreign),
                     expected_offset=end).result(10)
    finally:
        store.close()
    server.start()
    c = local(server.kafka_port)
    r = c.produce("fenced", 0, batch([b"two"]))
    assert r.error_code == 0 and r.base_offset == 2
    assert [x.value for x in records_of(c.fetch("fenced", 0, 0))] == [b"one", b"foreign", b"two"]
