"""``batch_records``, the reader's decoding loop, against batches built here field by field: every varint
width its inline paths take (one byte, two bytes, longer), negative deltas, null and long keys."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millrace.protocol.events import _PREFIX, _REST, MAGIC, EventRecord, batch_records, encode_batch


def varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag & ~0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def batch(base_offset: int, base_ts: int, records: list[tuple[int, int, bytes | None, bytes]]) -> bytes:
    """A RecordBatch v2 of (timestamp delta, offset delta, key, value) records."""
    body = bytearray()
    for ts_delta, offset_delta, key, value in records:
        record = b"\x00" + varint(ts_delta) + varint(offset_delta)
        record += varint(-1) if key is None else varint(len(key)) + key
        record += varint(len(value)) + value + varint(0)
        body += varint(len(record)) + record
    last = max(r[1] for r in records)
    rest = _REST.pack(0, last, base_ts, base_ts, -1, -1, -1, len(records))
    crc = crc32c.crc32c(bytes(body), crc32c.crc32c(rest))
    return _PREFIX.pack(base_offset, _PREFIX.size - 12 + len(rest) + len(body), -1, MAGIC, crc) + rest + bytes(body)


widths = st.sampled_from([0, 1, 63, 64, 100, 8191, 8192, 20000])  # varint widths change at 64 and 8192
record = st.tuples(
    st.one_of(st.integers(-70, 70), st.integers(-10_000, 10_000), st.integers(-2**40, 2**40)),
    st.one_of(st.integers(0, 70), st.integers(0, 10_000), st.integers(0, 2**31 - 1)),
    st.one_of(st.none(), widths.map(lambda n: b"k" * n)),
    widths.map(lambda n: b"v" * n))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**40), st.integers(0, 2**41), st.lists(record, min_size=1, max_size=8))
def test_records_decode_as_built(base_offset: int, base_ts: int, records: list[tuple[int, int, bytes | None, bytes]]) -> None:
    got = list(batch_records(batch(base_offset, base_ts, records)))
    assert got == [EventRecord(key, value, base_offset + od, base_ts + td) for td, od, key, value in records]


def test_a_large_native_batch_decodes() -> None:
    events = [(None if i % 3 == 0 else f"key-{i}".encode(), bytes([i % 256]) * (i % 300)) for i in range(1000)]
    got = list(batch_records(encode_batch(events, 1_700_000_000_000)))
    assert [(r.key, r.value, r.offset) for r in got] == [(k, v, i) for i, (k, v) in enumerate(events)]


def test_a_varint_cut_at_the_end_is_refused() -> None:
    whole = bytearray(batch(0, 0, [(0, 0, None, b"v" * 100)]))
    # Drop the last record's bytes after its two-byte size's first byte: the second is missing.
    cut = whole[: _PREFIX.size + _REST.size + 1]
    struct.pack_into(">i", cut, 8, len(cut) - 12)
    struct.pack_into(">I", cut, 17, crc32c.crc32c(bytes(cut[_PREFIX.size:])))
    with pytest.raises(ValueError):
        list(batch_records(bytes(cut)))
