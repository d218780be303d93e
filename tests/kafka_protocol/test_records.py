"""RecordBatch v2: framing, CRC, offset rewrite, records, compression, kafka-python interop."""

from __future__ import annotations

import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode, is_retriable
from millrace.protocol import records as R
from millrace.streams.errors import batch_refusal

CODECS = list(R.Compression)


def _kafka_python_batch(codec: int, n: int = 40) -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=0, producer_id=77, producer_epoch=3,
        base_sequence=10, batch_size=1 << 20,
    )  # fmt: skip
    for i in range(n):
        b.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i if i % 3 else None,
                 value=b"value-%d-" % i * 20, headers=[("h", b"x"), ("n", None)] if i % 2 else [])  # fmt: skip
    return bytes(b.build())


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_decode_kafka_python_batch(codec: R.Compression) -> None:
    data = _kafka_python_batch(codec)
    [batch] = R.validate_produce_records(data)
    h = batch.header
    assert (h.magic, h.compression, h.record_count, h.last_offset_delta) == (2, codec, 40, 39)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 3, 10)
    assert len(batch.data) == h.size == len(data)
    recs = list(batch.records())
    assert [r.offset for r in recs] == list(range(40))
    assert recs[0].key is None and recs[1].key == b"k1"
    assert recs[5].value == b"value-5-" * 20 and recs[5].headers == [("h", b"x"), ("n", None)]
    assert recs[39].timestamp == 1_700_000_000_039 == h.max_timestamp


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_our_batches_read_by_kafka_python(codec: R.Compression) -> None:
    recs = [R.NewRecord(b"key%d" % i, b"v" * i, [("a", b"1")], 1000 + i) for i in range(25)]
    data = R.build_record_batch(recs, base_offset=500, compression=codec, producer_id=9, producer_epoch=1)
    kb = DefaultRecordBatch(data)
    assert kb.validate_crc() and kb.compression_type == codec
    got = list(kb)
    assert [(m.offset, m.key, m.value, m.timestamp) for m in got] == [
        (500 + i, b"key%d" % i, b"v" * i, 1000 + i) for i in range(25)
    ]
    assert got[0].headers == [("a", b"1")]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=40),
            st.none() | st.binary(max_size=300),
            st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
            st.integers(0, 2**41),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_build_decode_round_trip(codec: R.Compression, recs: list) -> None:
    data = R.build_record_batch([R.NewRecord(*r) for r in recs], base_offset=7, compression=codec)
    [b] = R.validate_produce_records(data)
    got = list(b.records())
    assert [(g.offset, g.key, g.value, g.headers, g.timestamp) for g in got] == [
        (7 + i, k, v, list(h), ts) for i, (k, v, h, ts) in enumerate(recs)
    ]


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name)
def test_compression_round_trip(codec: R.Compression) -> None:
    data = bytes(range(256)) * 1000 + b"tail"
    packed = R.compress(codec, data)
    assert len(packed) < len(data)
    assert R.decompress(codec, packed) == data
    assert R.decompress(codec, memoryview(packed)) == data


def test_snappy_raw_and_xerial() -> None:
    data = b"abc" * 50_000
    assert R.compress(R.Compression.SNAPPY, data).startswith(b"\x82SNAPPY\x00")
    raw = bytes(cramjam.snappy.compress_raw(data))  # librdkafka style
    assert R.decompress(R.Compression.SNAPPY, raw) == data


def test_crc_detects_corruption_and_header_positions() -> None:
    data = bytearray(_kafka_python_batch(R.Compression.NONE, 5))
    [b] = R.iter_batches(data)
    assert b.crc_valid()
    data[100] ^= 0x01
    [b] = R.iter_batches(data)
    assert not b.crc_valid()
    with pytest.raises(R.CorruptRecordError) as ei:
        R.validate_produce_records(data)
    assert error_code(batch_refusal(ei.value)) == ErrorCode.CORRUPT_MESSAGE


def test_base_offset_rewrite_keeps_crc() -> None:
    one = R.build_record_batch([R.NewRecord(b"k", b"v", (), 1)] * 3)
    two = R.build_record_batch([R.NewRecord(None, b"w", (), 2)])
    blob = bytearray(one + two)
    batches = list(R.iter_batches(blob))
    next_offset = 1_000_000
    for b in batches:
        R.set_base_offset(blob, next_offset, b.position)
        next_offset += b.header.record_count
    after = list(R.iter_batches(blob))
    assert [b.header.base_offset for b in after] == [1_000_000, 1_000_003]
    assert all(b.crc_valid() for b in after)
    assert [r.offset for r in after[0].records()] == [1_000_000, 1_000_001, 1_000_002]
    assert DefaultRecordBatch(bytes(after[1].data)).validate_crc()


def test_iter_batches_is_zero_copy() -> None:
    blob = bytearray(R.build_record_batch([R.NewRecord(b"k", b"v", (), 1)]) * 2)
    views = list(R.iter_batches(memoryview(blob)))
    assert [v.position for v in views] == [0, len(blob) // 2]
    R.set_base_offset(views[1].data, 42)  # writes through the view into blob
    assert struct.unpack_from(">q", blob, len(blob) // 2)[0] == 42


def test_produce_rules() -> None:
    batch = R.build_record_batch([R.NewRecord(b"k", b"v", (), 1)])
    with pytest.raises(R.InvalidRecordError, match="exactly one"):
        R.validate_produce_records(batch + batch)
    assert len(R.validate_produce_records(batch + batch, single_batch=False)) == 2
    with pytest.raises(R.InvalidRecordError):
        R.validate_produce_records(b"")
    with pytest.raises(R.InvalidRecordError):
        R.validate_produce_records(None)
    for cut in range(1, len(batch)):
        with pytest.raises(R.CorruptRecordError):
            R.validate_produce_records(batch[:cut])


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_rejected(magic: int) -> None:
    # legacy message set: offset, size, crc, magic, attributes, [timestamp], key, value
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", 0) if magic else b"") + struct.pack(">ii", -1, 1) + b"v"
    msg = struct.pack(">I", 0) + body
    blob = struct.pack(">qi", 0, len(msg)) + msg
    with pytest.raises(R.UnsupportedMagicError) as ei:
        R.validate_produce_records(blob)
    assert ei.value.magic == magic and error_code(batch_refusal(ei.value)) == ErrorCode.INVALID_RECORD


def test_control_batch() -> None:
    data = R.build_control_batch(R.ControlRecordType.COMMIT, producer_id=5, producer_epoch=2, coordinator_epoch=9)
    [b] = R.validate_produce_records(data)
    assert b.header.is_control and b.header.is_transactional
    [rec] = b.records()
    assert R.parse_control_record(rec) == (R.ControlRecordType.COMMIT, 9)
    [k] = list(DefaultRecordBatch(data))
    assert k.type == 1  # kafka-python's ControlRecord: COMMIT


def test_corrupt_compressed_payload() -> None:
    data = bytearray(R.build_record_batch([R.NewRecord(b"k", b"v" * 500, (), 1)], compression=R.Compression.ZSTD))
    data[70:80] = b"\x00" * 10
    [b] = R.iter_batches(data)
    with pytest.raises(R.CorruptRecordError):
        list(b.records())


def test_error_codes_table() -> None:
    codes = [int(e) for e in ErrorCode]
    assert codes == list(range(-1, 128))
    assert ErrorCode(6).name == "NOT_LEADER_OR_FOLLOWER" and ErrorCode(6).retriable
    assert ErrorCode.UNSUPPORTED_VERSION == 35 and not ErrorCode.UNSUPPORTED_VERSION.retriable
    assert is_retriable(ErrorCode.NOT_COORDINATOR) and not is_retriable(12345)
