"""Kafka 4.0's topic configs over a real server: every standard config accepted, validated with
Kafka's messages, stored and described with its source and synonyms, altered incrementally (SET,
DELETE, APPEND, SUBTRACT), and the ones that change behaviour doing so (LogAppendTime, the timestamp
bounds, min.insync.replicas), through our own codec and through confluent-kafka and kafka-python."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import KafkaAdminClient, NewTopic

from millrace.gateway.kafka_protocol.codec import request_class
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.protocol.records import (
    Compression,
    NewRecord,
    TimestampType,
    build_record_batch,
    iter_batches,
)
from tests.kafka.test_admin_wire import (
    APPEND,
    DEFAULT_CONFIG,
    DELETE,
    SET,
    SUBTRACT,
    TOPIC,
    TOPIC_CONFIG,
    configs_of,
    creatable,
    create,
    describe,
    explicit,
    incremental,
)
from tests.kafka.wire import PRODUCE, local
from tests.server_process import ServerProcess

P = request_class(PRODUCE)

# Kafka 4.0's topic configs (TopicConfig / LogConfig) with a valid value other than the default.
KAFKA_40_TOPIC_CONFIGS = {
    "cleanup.policy": "delete", "compression.gzip.level": "5", "compression.lz4.level": "10",
    "compression.type": "producer", "compression.zstd.level": "-5", "delete.retention.ms": "1000",
    "file.delete.delay.ms": "0", "flush.messages": "1000", "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:0", "index.interval.bytes": "100",
    "leader.replication.throttled.replicas": "*", "local.retention.bytes": "-2", "local.retention.ms": "1000",
    "max.compaction.lag.ms": "100000", "max.message.bytes": "100000", "message.timestamp.after.max.ms": "5000",
    "message.timestamp.before.max.ms": "5000000", "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.25", "min.compaction.lag.ms": "10", "min.insync.replicas": "1",
    "preallocate": "true", "remote.log.copy.disable": "true", "remote.log.delete.on.disable": "true",
    "remote.storage.enable": "false", "retention.bytes": "1000000", "retention.ms": "86400000",
    "segment.bytes": "1048576", "segment.index.bytes": "4096", "segment.jitter.ms": "10", "segment.ms": "1000",
    "unclean.leader.election.enable": "true",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(str(tmp_path_factory.mktemp("topic-configs"))) as s:
        yield s


def refusal(wire, name: str, **configs: str) -> tuple[int, str]:
    r = create(wire, 7, creatable(name, 1, **configs))[name]
    return r.error_code, r.error_message


def batch_at(*stamps: int, **kw) -> bytes:
    return build_record_batch([NewRecord(key=b"k", value=b"v", timestamp=t) for t in stamps], **kw)


def produce(wire, topic: str, batches: dict[int, bytes], acks: int = -1) -> list:
    r = wire.send(PRODUCE, 9, P(acks=acks, timeout_ms=10000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.PartitionProduceData(index=i, records=b) for i, b in batches.items()])]))
    return sorted(r.responses[0].partition_responses, key=lambda pr: pr.index)


# ------------------------------------------------------------------------------------ accepted and described

def test_every_kafka_40_topic_config_is_accepted_stored_and_described(wire):
    r = create(wire, 7, creatable("all-configs", 1, **{k.replace(".", "_"): v for k, v in
                                                       KAFKA_40_TOPIC_CONFIGS.items()}))["all-configs"]
    assert (r.error_code, r.error_message) == (0, None)
    assert {c.name: c.value for c in r.configs}.items() >= KAFKA_40_TOPIC_CONFIGS.items()
    assert explicit(wire, "all-configs") == KAFKA_40_TOPIC_CONFIGS
    described = configs_of(describe(wire, 4, TOPIC, "all-configs", synonyms=True))
    assert described["retention.ms"].config_source == TOPIC_CONFIG
    assert [(s.name, s.value, s.source) for s in described["retention.ms"].synonyms] == [
        ("retention.ms", "86400000", TOPIC_CONFIG), ("log.retention.ms", "-1", DEFAULT_CONFIG)]
    assert (described["min.cleanable.dirty.ratio"].config_type, described["preallocate"].config_type) == (6, 1)
    assert described["leader.replication.throttled.replicas"].config_type == 7  # LIST


def test_unset_configs_are_defaults_with_their_broker_synonym(wire):
    create(wire, 7, creatable("plain-configs", 1))
    described = configs_of(describe(wire, 4, TOPIC, "plain-configs", synonyms=True))
    assert set(described) >= set(KAFKA_40_TOPIC_CONFIGS)
    expected = {"file.delete.delay.ms": ("60000", "log.segment.delete.delay.ms"),
                "segment.ms": ("604800000", "log.roll.ms"),
                "message.timestamp.after.max.ms": ("3600000", "log.message.timestamp.after.max.ms"),
                "flush.messages": ("9223372036854775807", "log.flush.interval.messages"),
                "min.cleanable.dirty.ratio": ("0.5", "log.cleaner.min.cleanable.ratio")}
    for name, (value, synonym) in expected.items():
        c = described[name]
        assert (c.value, c.config_source, c.read_only) == (value, DEFAULT_CONFIG, False), name
        assert [(s.name, s.value, s.source) for s in c.synonyms] == [(synonym, value, DEFAULT_CONFIG)], name
    assert described["leader.replication.throttled.replicas"].synonyms == []  # Kafka has no broker synonym


@pytest.mark.parametrize(("configs", "message"), [
    ({"file_delete_delay_ms": "-1"}, "Invalid value -1 for configuration file.delete.delay.ms: Value must be at "
                                     "least 0"),
    ({"preallocate": "yes"}, "Invalid value yes for configuration preallocate: Expected value to be either true or "
                             "false"),
    ({"min_cleanable_dirty_ratio": "2"}, "Invalid value 2 for configuration min.cleanable.dirty.ratio: Value must be "
                                         "no more than 1"),
    ({"segment_bytes": "1000"}, "Invalid value 1000 for configuration segment.bytes: Value must be at least "
                                "1048576"),
    ({"segment_ms": "soon"}, "Invalid value soon for configuration segment.ms: Not a number of type LONG"),
    ({"index_interval_bytes": "4294967296"}, "Invalid value 4294967296 for configuration index.interval.bytes: Not "
                                             "a number of type INT"),
    ({"message_timestamp_type": "Now"}, "Invalid value Now for configuration message.timestamp.type: String must "
                                        "be one of: CreateTime, LogAppendTime"),
    ({"compression_type": "brotli"}, "Invalid value brotli for configuration compression.type: String must be one "
                                     "of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ({"cleanup_policy": "delete,shred"}, "Invalid value shred for configuration cleanup.policy: String must be one "
                                         "of: compact, delete"),
    ({"compression_gzip_level": "0"}, "Invalid value 0 for configuration compression.gzip.level: Value must be "
                                      "between 1 and 9, or -1"),
    ({"min_compaction_lag_ms": "10", "max_compaction_lag_ms": "5"},
     "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
    ({"no_such_config": "1"}, "Unknown topic config name: no.such.config"),
    ({"message_downconversion_enable": "true"}, "Unknown topic config name: message.downconversion.enable"),
])
def test_invalid_values_get_kafkas_message(wire, configs, message):
    assert refusal(wire, "refused-config", **configs) == (ErrorCode.INVALID_CONFIG, message)


def test_throttled_replicas_refused_and_compaction_accepted(wire):
    code, message = refusal(wire, "refused-throttle", leader_replication_throttled_replicas="0:1,x:2")
    assert code == ErrorCode.INVALID_CONFIG and "must be the literal '*' or a list of replicas" in message
    create(wire, 7, creatable("compacted-topic", 1, cleanup_policy="compact,delete"))
    assert explicit(wire, "compacted-topic")["cleanup.policy"] == "compact,delete"


def test_incremental_alter_configs_on_lists_and_scalars(wire):
    create(wire, 7, creatable("inc-lists", 1))
    name = "leader.replication.throttled.replicas"
    assert incremental(wire, 1, TOPIC, "inc-lists", [(name, APPEND, "0:0,1:0")]).error_code == 0
    assert incremental(wire, 1, TOPIC, "inc-lists", [(name, APPEND, "1:0,2:0")]).error_code == 0
    assert explicit(wire, "inc-lists")[name] == "0:0,1:0,2:0"
    assert incremental(wire, 1, TOPIC, "inc-lists", [(name, SUBTRACT, "1:0")]).error_code == 0
    assert explicit(wire, "inc-lists")[name] == "0:0,2:0"
    bad = incremental(wire, 1, TOPIC, "inc-lists", [(name, APPEND, "oops")])
    assert bad.error_code == ErrorCode.INVALID_CONFIG
    scalar = incremental(wire, 1, TOPIC, "inc-lists", [("segment.ms", APPEND, "5")])
    assert (scalar.error_code, scalar.error_message) == (
        ErrorCode.INVALID_CONFIG, "Can't APPEND to key segment.ms because its type is not LIST.")
    scalar = incremental(wire, 1, TOPIC, "inc-lists", [("preallocate", SUBTRACT, "true")])
    assert (scalar.error_code, scalar.error_message) == (
        ErrorCode.INVALID_CONFIG, "Can't SUBTRACT to key preallocate because its type is not LIST.")
    assert incremental(wire, 1, TOPIC, "inc-lists", [("segment.ms", SET, "60000"),
                                                      ("flush.ms", SET, "5")]).error_code == 0
    assert incremental(wire, 1, TOPIC, "inc-lists", [("flush.ms", DELETE, None)]).error_code == 0
    assert explicit(wire, "inc-lists") == {name: "0:0,2:0", "segment.ms": "60000"}
    unknown = incremental(wire, 1, TOPIC, "inc-lists", [("segment.nope", SET, "1")])
    assert (unknown.error_code, unknown.error_message) == (ErrorCode.INVALID_CONFIG,
                                                           "Unknown topic config name: segment.nope")
    # Cross-config rule on the result: min above the (now set) max is refused and changes nothing.
    assert incremental(wire, 1, TOPIC, "inc-lists", [("max.compaction.lag.ms", SET, "100")]).error_code == 0
    assert incremental(wire, 1, TOPIC, "inc-lists", [("min.compaction.lag.ms", SET, "200")]).error_code == (
        ErrorCode.INVALID_CONFIG)
    assert "min.compaction.lag.ms" not in explicit(wire, "inc-lists")


# -------------------------------------------------------------------------------------------- behaviour

def test_log_append_time_stamps_the_batch_and_keeps_its_crc_valid(wire):
    create(wire, 7, creatable("append-time", 1, message_timestamp_type="LogAppendTime"))
    old = int(time.time() * 1000) - 10 * 86_400_000
    before = int(time.time() * 1000)
    (pr,) = produce(wire, "append-time", {0: batch_at(old, old + 1)})
    after = int(time.time() * 1000)
    assert pr.error_code == 0 and before <= pr.log_append_time_ms <= after
    (stored,) = list(iter_batches(bytes(wire.fetch("append-time", 0, 0).records)))
    assert stored.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert stored.header.max_timestamp == pr.log_append_time_ms
    assert stored.crc_valid()
    # Offsets by time follow the append time, not the producer's timestamps.
    found = wire.list_offset("append-time", 0, pr.log_append_time_ms)
    assert (found.offset, found.timestamp) == (0, pr.log_append_time_ms)
    assert wire.list_offset("append-time", 0, pr.log_append_time_ms + 1).offset == -1
    # A CreateTime topic keeps the producer's timestamps and reports no append time.
    create(wire, 7, creatable("create-time", 1))
    (pr,) = produce(wire, "create-time", {0: batch_at(old)})
    assert (pr.error_code, pr.log_append_time_ms) == (0, -1)
    (stored,) = list(iter_batches(bytes(wire.fetch("create-time", 0, 0).records)))
    assert (stored.header.timestamp_type, stored.header.max_timestamp) == (TimestampType.CREATE_TIME, old)


@pytest.mark.parametrize("target", ["gzip", "snappy", "lz4", "zstd", "uncompressed"])
def test_compression_type_recompresses_batches_of_other_codecs(wire, server, target):
    """A topic whose compression.type names a codec stores every batch with it, as Kafka's broker does:
    the same records (keys, values, headers, timestamps, offsets), the producer's fields kept, the CRC
    valid; a batch already in that codec is stored as sent; real consumers read the records back."""
    codec = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
             "lz4": Compression.LZ4, "zstd": Compression.ZSTD}[target]
    name = f"codec-{target}"
    create(wire, 7, creatable(name, 1, compression_type=target))
    now = int(time.time() * 1000)
    records = [NewRecord(key=f"k{i}".encode(), value=b"v" * 200 + bytes([i]), timestamp=now + i,
                         headers=[("h", f"{i}".encode())]) for i in range(20)]
    sent = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)
    producer_id = wire.producer_id()
    for i, producer_codec in enumerate(sent):  # one idempotent producer's batches, in every codec
        batch = build_record_batch(records, compression=producer_codec, producer_id=producer_id, producer_epoch=0,
                                   base_sequence=20 * i)
        (pr,) = produce(wire, name, {0: batch})
        assert (pr.error_code, pr.base_offset) == (0, 20 * i)
    stored = list(iter_batches(bytes(wire.fetch(name, 0, 0, max_bytes=1 << 20).records)))
    assert len(stored) == len(sent)
    for i, batch in enumerate(stored):
        h = batch.header
        assert h.compression == codec and batch.crc_valid()
        assert (h.base_offset, h.producer_id, h.base_sequence, h.record_count) == (20 * i, producer_id, 20 * i, 20)
        got = list(batch.records())
        assert [(r.key, r.value, r.timestamp, r.offset) for r in got] == [
            (r.key, r.value, r.timestamp, 20 * i + n) for n, r in enumerate(records)]
        assert [list(r.headers) for r in got] == [[("h", f"{n}".encode())] for n in range(20)]
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"read-{name}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 100 and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
    consumer.close()
    assert values == [r.value for _ in sent for r in records]


def test_timestamps_out_of_range_fail_their_batch_only_with_record_errors(wire):
    create(wire, 7, creatable("bounded-times", 2, message_timestamp_before_max_ms="60000"))
    now = int(time.time() * 1000)
    bad, good = produce(wire, "bounded-times", {0: batch_at(now, now - 3_600_000, now), 1: batch_at(now)})
    assert bad.error_code == ErrorCode.INVALID_TIMESTAMP
    assert bad.error_message == "One or more records have been rejected due to invalid timestamp"
    assert [e.batch_index for e in bad.record_errors] == [1]
    assert bad.record_errors[0].batch_index_error_message.startswith(
        f"Timestamp {now - 3_600_000} of message with offset 1 is out of range. The timestamp should be within [")
    assert (good.error_code, good.base_offset) == (0, 0)
    assert wire.list_offset("bounded-times", 0, -1).offset == 0  # nothing of the refused batch was appended
    # message.timestamp.after.max.ms defaults to an hour in Kafka 4.0.
    (late,) = produce(wire, "bounded-times", {0: batch_at(now, now + 2 * 3_600_000)})
    assert late.error_code == ErrorCode.INVALID_TIMESTAMP and [e.batch_index for e in late.record_errors] == [1]
    # A producer may not claim LogAppendTime itself.
    (claimed,) = produce(wire, "bounded-times", {0: batch_at(now, timestamp_type=TimestampType.LOG_APPEND_TIME)})
    assert claimed.error_code == ErrorCode.INVALID_TIMESTAMP and len(claimed.record_errors) == 1
    (fine,) = produce(wire, "bounded-times", {0: batch_at(now - 1000, now)})
    assert (fine.error_code, fine.base_offset) == (0, 0)


def test_min_insync_replicas_above_one_refuses_acks_all(wire):
    create(wire, 7, creatable("min-isr", 1, min_insync_replicas="2"))
    now = int(time.time() * 1000)
    (refused,) = produce(wire, "min-isr", {0: batch_at(now)}, acks=-1)
    assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert "min.isr requirement of 2 for partition min-isr-0" in refused.error_message
    (leader_only,) = produce(wire, "min-isr", {0: batch_at(now)}, acks=1)
    assert (leader_only.error_code, leader_only.base_offset) == (0, 0)
    assert incremental(wire, 1, TOPIC, "min-isr", [("min.insync.replicas", DELETE, None)]).error_code == 0
    (accepted,) = produce(wire, "min-isr", {0: batch_at(now)}, acks=-1)
    assert (accepted.error_code, accepted.base_offset) == (0, 1)


# ---------------------------------------------------------------------------------------------- clients

def test_confluent_admin_describe_and_incremental_alter(server):
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    wire = local(server.kafka_port)
    create(wire, 7, creatable("ck-topic-configs", 1))
    resource = ConfigResource(ConfigResource.Type.TOPIC, "ck-topic-configs", incremental_configs=[
        ConfigEntry("file.delete.delay.ms", "1000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("follower.replication.throttled.replicas", "0:0",
                    incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("segment.jitter.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    assert admin.incremental_alter_configs([resource])[resource].result(30) is None
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "ck-topic-configs")])
    (entries,) = [f.result(30) for f in described.values()]
    delay = entries["file.delete.delay.ms"]
    assert (delay.value, delay.source) == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert [(s.name, s.value) for s in delay.synonyms.values()] == [
        ("file.delete.delay.ms", "1000"), ("log.segment.delete.delay.ms", "60000")]
    assert entries["follower.replication.throttled.replicas"].value == "0:0"
    assert (entries["segment.jitter.ms"].value, entries["segment.jitter.ms"].source) == (
        "0", ConfigSource.DEFAULT_CONFIG.value)
    bad = ConfigResource(ConfigResource.Type.TOPIC, "ck-topic-configs", incremental_configs=[
        ConfigEntry("segment.ms", "1", incremental_operation=AlterConfigOpType.APPEND)])
    with pytest.raises(Exception, match="because its type is not LIST"):
        admin.incremental_alter_configs([bad])[bad].result(30)
    wire.close()


def test_confluent_consumer_reads_log_append_time(server):
    wire = local(server.kafka_port)
    create(wire, 7, creatable("ck-append-time", 1, message_timestamp_type="LogAppendTime"))
    wire.close()
    producer = Producer({"bootstrap.servers": server.bootstrap})
    sent_before = int(time.time() * 1000)
    producer.produce("ck-append-time", b"stamped", timestamp=1_000)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "ck-append-time",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["ck-append-time"])
    try:
        message = None
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None:
                break
        assert message is not None and message.error() is None
        kind, stamp = message.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and stamp >= sent_before
    finally:
        consumer.close()


def test_kafka_python_admin_creates_and_describes_new_configs(server):
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("kp-topic-configs", 1, 1, topic_configs={
            "segment.index.bytes": "8192", "unclean.leader.election.enable": "true"})])
        described = admin.describe_configs([KConfigResource("TOPIC", "kp-topic-configs")], include_synonyms=True,
                                           config_filter="all")["topic"]["kp-topic-configs"]
        assert (described["segment.index.bytes"]["value"], described["segment.index.bytes"]["config_source"]) == (
            "8192", "DYNAMIC_TOPIC_CONFIG")
        assert described["unclean.leader.election.enable"]["config_type"] == "BOOLEAN"
        flush = described["flush.ms"]
        assert (flush["value"], flush["config_source"]) == ("9223372036854775807", "DEFAULT_CONFIG")
        assert [s["name"] for s in flush["synonyms"]] == ["log.flush.interval.ms"]
        refused = admin.alter_configs([KConfigResource("TOPIC", "kp-topic-configs", {"flush.ms": "-5"})])
        assert refused == {"topic": {"kp-topic-configs": "[Error 40] InvalidConfigurationError: Invalid value -5 "
                                                         "for configuration flush.ms: Value must be at least 0"}}
    finally:
        admin.close()


def test_created_config_kept_across_restart(tmp_path):
    with ServerProcess(str(tmp_path / "data")) as srv:
        wire = local(srv.kafka_port)
        create(wire, 7, creatable("kept-configs", 1, segment_jitter_ms="77", preallocate="true"))
        wire.close()
        assert srv.stop() == 0
    with ServerProcess(str(tmp_path / "data")) as again:
        wire = local(again.kafka_port)
        assert explicit(wire, "kept-configs") == {"segment.jitter.ms": "77", "preallocate": "true"}
        wire.close()



# ------------------------------------------------------------------------------------------ invalid records

def test_a_corrupt_batch_fails_alone(wire):
    create(wire, 7, creatable("corrupt-one", 2))
    now = int(time.time() * 1000)
    broken = bytearray(batch_at(now))
    broken[-1] ^= 0xFF  # the CRC no longer matches
    bad, good = produce(wire, "corrupt-one", {0: bytes(broken), 1: batch_at(now)})
    assert (bad.error_code, bad.record_errors) == (ErrorCode.CORRUPT_MESSAGE, [])
    assert (good.error_code, good.base_offset) == (0, 0)
    assert wire.list_offset("corrupt-one", 0, -1).offset == 0


def test_idempotent_librdkafka_producer_keeps_going_after_a_refused_batch(server):
    """A batch refused for its timestamp fails alone: the idempotent producer's later batches land,
    in order, with no gap in offsets."""
    wire = local(server.kafka_port)
    create(wire, 7, creatable("idempotent-refusal", 1))
    wire.close()
    producer = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    outcomes: list[tuple[bytes, int | None]] = []
    now = int(time.time() * 1000)
    for i, stamp in enumerate([now, now + 2 * 3_600_000, now, now]):
        producer.produce("idempotent-refusal", f"m{i}".encode(), timestamp=stamp,
                         on_delivery=lambda err, msg: outcomes.append((msg.value(), err and err.code())))
        assert producer.flush(30) == 0
    assert outcomes == [(b"m0", None), (b"m1", 32), (b"m2", None), (b"m3", None)]  # 32: INVALID_TIMESTAMP
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "idempotent-refusal",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["idempotent-refusal"])
    got: list[tuple[int, bytes]] = []
    try:
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append((message.offset(), message.value()))
            if len(got) == 3:
                break
    finally:
        consumer.close()
    assert got == [(0, b"m0"), (1, b"m2"), (2, b"m3")]
