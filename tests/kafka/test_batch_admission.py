"""``admit_batch``: Kafka's LogValidator rules and the topic's rewrites in one walk of a batch. Every
combination of the topic's rules (compaction, LogAppendTime, a codec) and the batch's (codec, keys,
timestamps) either comes out as a CRC-valid batch whose records are the ones sent, or is refused with
Kafka's reason and an error per bad record; the records are decompressed and decoded at most once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from millrace.protocol import records as records_module
from millrace.protocol.records import Compression, NewRecord, TimestampType, build_record_batch, iter_batches
from millrace.streams.errors import PartitionError, Reason
from millrace.streams.partitions import admission
from millrace.streams.partitions.admission import admit_batch
from millrace.streams.topics import TopicInfo

NOW = 1_700_000_000_000
HOUR = 3_600_000
CODECS = {"producer": None, "uncompressed": Compression.NONE, "gzip": Compression.GZIP,
          "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


def topic(compression: str = "producer", compacted: bool = False, log_append_time: bool = False) -> TopicInfo:
    configs = {"compression.type": compression, "message.timestamp.before.max.ms": str(HOUR),
               "message.timestamp.after.max.ms": str(HOUR)}
    if compacted:
        configs["cleanup.policy"] = "compact"
    if log_append_time:
        configs["message.timestamp.type"] = "LogAppendTime"
    return TopicInfo("t", uuid.uuid4(), ((0.0, 1.0),), configs)


records_strategy = st.lists(st.tuples(st.one_of(st.none(), st.binary(min_size=1, max_size=8)),
                                      st.binary(max_size=64),
                                      st.sampled_from([NOW, NOW - 10, NOW - 2 * HOUR, NOW + 2 * HOUR])),
                            min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(sent=records_strategy, batch_codec=st.sampled_from(list(Compression)),
       topic_codec=st.sampled_from(list(CODECS)), compacted=st.booleans(), log_append_time=st.booleans())
def test_every_combination_is_stored_right_or_refused_with_kafkas_reason(
        sent: list[tuple[bytes | None, bytes, int]], batch_codec: Compression, topic_codec: str, compacted: bool,
        log_append_time: bool) -> None:
    rules = topic(topic_codec, compacted, log_append_time)
    blob = build_record_batch([NewRecord(k, v, (), ts) for k, v, ts in sent], compression=batch_codec)
    out_of_range = [i for i, (_, _, ts) in enumerate(sent) if abs(ts - NOW) > HOUR]
    keyless = [i for i, (k, _, _) in enumerate(sent) if k is None]
    if out_of_range and not log_append_time:
        with pytest.raises(PartitionError) as refused:
            admit_batch(rules, 0, blob, NOW)
        assert refused.value.reason is Reason.INVALID_TIMESTAMP
        assert [i for i, _ in refused.value.record_errors] == out_of_range
        return
    if keyless and compacted:
        with pytest.raises(PartitionError) as refused:
            admit_batch(rules, 0, blob, NOW)
        assert refused.value.reason is Reason.INVALID_RECORD
        assert [i for i, _ in refused.value.record_errors] == keyless
        return
    batch = admit_batch(rules, 0, blob, NOW)
    (stored,) = list(iter_batches(bytes(batch.data)))
    stored.validate_crc()
    h = stored.header
    assert h.compression == (CODECS[topic_codec] if CODECS[topic_codec] is not None else batch_codec)
    assert [(r.key, r.value) for r in stored.records()] == [(k, v) for k, v, _ in sent]
    if log_append_time:
        assert h.timestamp_type is TimestampType.LOG_APPEND_TIME and h.max_timestamp == NOW
    else:
        assert h.timestamp_type is TimestampType.CREATE_TIME
        assert [r.timestamp for r in stored.records()] == [ts for _, _, ts in sent]
    if CODECS[topic_codec] in (None, batch_codec) and not log_append_time:
        assert batch.data.obj is blob  # the client's bytes, not copied


def test_the_records_are_decompressed_and_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worst case (a compacted LogAppendTime topic recompressing to zstd a gzip batch whose
    timestamps the header cannot vouch for) still reads the records once."""
    calls = {"decompress": 0, "decode": 0}
    decompress, decode = records_module.decompress, admission.record_outlines

    def counted_decompress(*args: Any) -> Any:
        calls["decompress"] += 1
        return decompress(*args)

    def counted_decode(*args: Any) -> Any:
        calls["decode"] += 1
        return decode(*args)

    monkeypatch.setattr(records_module, "decompress", counted_decompress)
    monkeypatch.setattr(admission, "record_outlines", counted_decode)
    rules = TopicInfo("t", uuid.uuid4(), ((0.0, 1.0),), {
        "compression.type": "zstd", "cleanup.policy": "compact", "message.timestamp.type": "CreateTime",
        "message.timestamp.before.max.ms": "0"})  # no timestamp before now: the header cannot vouch
    blob = build_record_batch([NewRecord(b"k", b"v" * 100, (), NOW)], compression=Compression.GZIP)
    batch = admit_batch(rules, 0, blob, NOW)
    assert calls == {"decompress": 1, "decode": 1}
    assert batch.header.compression == Compression.ZSTD


def test_records_that_run_past_their_batch_are_refused_as_corrupt() -> None:
    """A batch whose CRC holds but whose first record claims more bytes than the batch has: refused on
    a compacted topic, where its records are read (elsewhere the bytes are stored as sent, as Kafka)."""
    blob = bytearray(build_record_batch([NewRecord(b"k", b"value", (), NOW)]))
    blob[61] = 0x7E  # the first record's length varint: 63 bytes, past the batch's end
    blob[17:21] = crc32c(bytes(blob[21:])).to_bytes(4, "big")
    with pytest.raises(PartitionError) as refused:
        admit_batch(topic(compacted=True), 0, bytes(blob), NOW)
    assert refused.value.reason is Reason.CORRUPT_RECORD
