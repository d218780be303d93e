"""Events as Kafka records (pure, no I/O): the one event format of every stream.

A native writer sends its events as one Kafka RecordBatch v2 per request (magic 2, uncompressed,
CRC-32C), each event a record with key = the routing key's UTF-8 (or null) and value = the event's
bytes, stamped with the writer's producer id, epoch and base sequence. The gateway stores it exactly
as it stores a Kafka producer's batch, so Kafka consumers read native events and native readers read
Kafka records. ``decode_records`` and ``batch_records`` read batches back, compressed ones (a Kafka
producer's) included.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import crc32c

from millrace.protocol import compression

MAGIC = 2
# baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8, crc u32
_PREFIX = struct.Struct(">qiibI")
# attributes i16, lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64, producerId i64,
# producerEpoch i16, baseSequence i32, recordCount i32
_REST = struct.Struct(">hiqqqhii")
_CRC_FROM = _PREFIX.size  # the CRC covers everything after itself
_COMPRESSION_MASK = 0x07
TRANSACTIONAL_ATTRIBUTE = 0x10  # Kafka's isTransactional bit of a batch's attributes
NO_PRODUCER_ID = -1
# The refusal reason (EventsRefusedError.reason) of a batch that does not continue its sequence
OUT_OF_ORDER_SEQUENCE = "out of order sequence"
# A native stream's partition retired by a split inside its slice (streams/topics.py): the writer asks
# for the stream's routing again and sends the batch's events to the partitions that hold their keys now.
PARTITION_RETIRED = "partition retired"


class EventRecord(NamedTuple):
    """One record of a batch: key (None: no routing key), value, absolute offset and timestamp. A
    tuple, since readers make one per event."""

    key: bytes | None
    value: bytes
    offset: int
    timestamp_ms: int


def _varint(value: int, out: bytearray) -> None:
    zigzag = (value << 1) ^ (value >> 63)
    while zigzag & ~0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    _varint(value, out)
    return bytes(out)


# The varints of 0 .. _SMALL - 1, made once: a record's offset delta, key and value lengths and its own
# length are looked up rather than encoded per event (the writer's per-event cost; docs/performance.md).
_SMALL = 1 << 13
_VARINTS = [_varint_bytes(v) for v in range(_SMALL)]
_NULL_KEY = _varint_bytes(-1)


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise ValueError("varint runs past the batch")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def encode_batch(events: Sequence[tuple[bytes | None, bytes] | tuple[Any, ...]], timestamp_ms: int,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1, base_sequence: int = -1,
                 transactional: bool = False) -> bytes:
    """One RecordBatch v2 holding ``events`` (tuples whose first two items are key and value) in order,
    all at ``timestamp_ms``; ``transactional`` sets the batch's transactional bit (its records count
    only once a commit marker follows them)."""
    if not events:
        raise ValueError("a batch holds at least one event")
    # Per event: a record of attributes 0 and timestamp delta 0 (b"\0\0"), offset delta, key, value and
    # no headers (b"\0"), preceded by its length. Small varints come from the table.
    varints, small = _VARINTS, _SMALL
    parts: list[bytes] = []
    add = parts.extend
    for delta, event in enumerate(events):
        key, value = event[0], event[1]
        n = len(value)
        head = varints[delta] if delta < small else _varint_bytes(delta)
        lengths = varints[n] if n < small else _varint_bytes(n)
        if key is None:
            size = 4 + len(head) + len(lengths) + n
            add((varints[size] if size < small else _varint_bytes(size), b"\0\0", head, _NULL_KEY, lengths, value,
                 b"\0"))
        else:
            k = len(key)
            key_length = varints[k] if k < small else _varint_bytes(k)
            size = 3 + len(head) + len(key_length) + k + len(lengths) + n
            add((varints[size] if size < small else _varint_bytes(size), b"\0\0", head, key_length, key, lengths,
                 value, b"\0"))
    records = b"".join(parts)
    attributes = TRANSACTIONAL_ATTRIBUTE if transactional else 0
    rest = _REST.pack(attributes, len(events) - 1, timestamp_ms, timestamp_ms, producer_id, producer_epoch, base_sequence,
                      len(events))
    crc = crc32c.crc32c(records, crc32c.crc32c(rest))
    length = _PREFIX.size - 12 + len(rest) + len(records)
    return b"".join((_PREFIX.pack(0, length, -1, MAGIC, crc), rest, records))


def decode_records(data: bytes | memoryview) -> Iterator[EventRecord]:
    """The records of the whole v2 batches in ``data``, in order, compressed ones decompressed
    (ValueError for bytes that are not whole batches, fail their CRC or do not decompress)."""
    view = memoryview(data)
    pos = 0
    while pos + _PREFIX.size + _REST.size <= len(view):
        length = _PREFIX.unpack_from(view, pos)[1]
        end = pos + 12 + length
        yield from batch_records(view[pos:end])
        pos = end


def batch_records(batch: bytes | memoryview, check_crc: bool = True) -> Iterator[EventRecord]:
    """The records of one RecordBatch v2 (``batch`` is exactly the batch), in order."""
    view = memoryview(batch)
    if len(view) < _PREFIX.size + _REST.size:
        raise ValueError("not a whole v2 batch: shorter than its header")
    base_offset, length, _, magic, crc = _PREFIX.unpack_from(view, 0)
    if magic != MAGIC or 12 + length != len(view):
        raise ValueError("not a whole v2 batch")
    if check_crc and crc32c.crc32c(view[_CRC_FROM:]) != crc:
        raise ValueError(f"batch at offset {base_offset} fails its CRC")
    attributes, _, base_ts, _, _, _, _, count = _REST.unpack_from(view, _CRC_FROM)
    records: memoryview = view[_CRC_FROM + _REST.size :]
    codec = attributes & _COMPRESSION_MASK
    if codec:
        records = memoryview(compression.decompress(codec, records))
    # Per record: the hot loop of every native reader. Varints of one byte (small deltas, short keys)
    # and of two (sizes and value lengths of events of 64 B to 8 KiB, offset deltas past 63 in a large
    # batch, timestamp deltas of a producer's batch) take inline paths; longer ones go through
    # _read_varint. A function call per varint was a tenth of a reader's time.
    at = 0
    n = len(records)
    last = n - 1  # the second byte of a two-byte varint must lie in the records
    for _ in range(count):
        if at >= n:
            raise ValueError("records run past the batch")
        b = records[at]
        if b < 0x80:
            size, at = (b >> 1) ^ -(b & 1), at + 1
        elif at < last and records[at + 1] < 0x80:
            v = (b & 0x7F) | (records[at + 1] << 7)
            size, at = (v >> 1) ^ -(v & 1), at + 2
        else:
            size, at = _read_varint(records, at)
        record_end = at + size
        if record_end > n:
            raise ValueError("a record runs past the batch")
        at += 1  # record attributes
        b = records[at]
        if b < 0x80:
            ts_delta, at = (b >> 1) ^ -(b & 1), at + 1
        elif at < last and records[at + 1] < 0x80:
            v = (b & 0x7F) | (records[at + 1] << 7)
            ts_delta, at = (v >> 1) ^ -(v & 1), at + 2
        else:
            ts_delta, at = _read_varint(records, at)
        b = records[at]
        if b < 0x80:
            offset_delta, at = (b >> 1) ^ -(b & 1), at + 1
        elif at < last and records[at + 1] < 0x80:
            v = (b & 0x7F) | (records[at + 1] << 7)
            offset_delta, at = (v >> 1) ^ -(v & 1), at + 2
        else:
            offset_delta, at = _read_varint(records, at)
        b = records[at]
        if b < 0x80:
            key_len, at = (b >> 1) ^ -(b & 1), at + 1
        else:
            key_len, at = _read_varint(records, at)
        if key_len < 0:
            key = None
        else:
            key = bytes(records[at : at + key_len])
            at += key_len
        b = records[at]
        if b < 0x80:
            value_len, at = (b >> 1) ^ -(b & 1), at + 1
        elif at < last and records[at + 1] < 0x80:
            v = (b & 0x7F) | (records[at + 1] << 7)
            value_len, at = (v >> 1) ^ -(v & 1), at + 2
        else:
            value_len, at = _read_varint(records, at)
        value = bytes(records[at : at + value_len]) if value_len > 0 else b""
        yield EventRecord(key, value, base_offset + offset_delta, base_ts + ts_delta)
        at = record_end  # headers are skipped
