"""Kafka RecordBatch v2 (magic 2): zero-copy batch framing, CRC-32C, records and compression.

The produce hot path only needs :func:`iter_batches` / :func:`validate_produce_records` (header
parsing on a memoryview, CRC at C speed) and :func:`set_base_offset` (baseOffset lies outside the
CRC, so rewriting it keeps the batch valid). Record decoding, decompression and the builder are
for tests, timestamp lookups, control records and server-generated batches.

Batch layout (61-byte header, big-endian)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records...

``batchLength`` counts from partitionLeaderEpoch to the end; the CRC covers attributes to the end.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

from crc32c import crc32c

from millrace.protocol import compression

__all__ = [
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "BatchView",
    "Compression",
    "ControlRecordType",
    "CorruptRecordError",
    "InvalidRecordError",
    "NewRecord",
    "Record",
    "RecordBatchError",
    "TimestampType",
    "UnsupportedMagicError",
    "build_control_batch",
    "build_record_batch",
    "compress",
    "decompress",
    "iter_batches",
    "parse_control_record",
    "record_outlines",
    "set_base_offset",
    "validate_produce_records",
]

BATCH_HEADER_SIZE = 61
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LOG_OVERHEAD = 12  # baseOffset + batchLength precede what batchLength counts
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTR_OFFSET = 21  # CRC-32C covers from here to the end of the batch
_BASE_OFFSET = struct.Struct(">q")
_CRC = struct.Struct(">I")

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20
_DELETE_HORIZON_BIT = 0x40


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1


class RecordBatchError(ValueError):
    """A record blob cannot be accepted. Every one raised is one of the two kinds below, which a
    protocol adapter answers differently (Kafka: CORRUPT_MESSAGE and INVALID_RECORD)."""


class CorruptRecordError(RecordBatchError):
    """Truncated batch, bad length or CRC mismatch."""


class InvalidRecordError(RecordBatchError):
    """Well-formed bytes that break produce rules (e.g. several batches in one partition)."""


class UnsupportedMagicError(InvalidRecordError):
    """Legacy message format (magic 0/1), which Kafka 4 refuses for produce as well."""

    def __init__(self, magic: int) -> None:
        super().__init__(f"record batch magic {magic} is not supported (only magic 2)")
        self.magic = magic


@dataclass(slots=True)
class BatchHeader:
    """The decoded 61-byte batch header."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + _LOG_OVERHEAD

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & _TIMESTAMP_TYPE_BIT else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _DELETE_HORIZON_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


class Record(NamedTuple):
    """A decoded record with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    attributes: int = 0


class NewRecord(NamedTuple):
    """Builder input; ``timestamp=None`` means now."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int | None = None


@dataclass(slots=True)
class BatchView:
    """One batch inside a larger buffer, without copying it."""

    data: memoryview  # exactly this batch's bytes
    position: int  # where the batch starts in the blob it came from
    header: BatchHeader = field(repr=True)

    def compute_crc(self) -> int:
        return crc32c(self.data[_ATTR_OFFSET:])

    def crc_valid(self) -> bool:
        return self.compute_crc() == self.header.crc

    def validate_crc(self) -> None:
        actual = self.compute_crc()
        if actual != self.header.crc:
            raise CorruptRecordError(
                f"record batch at {self.position} has CRC {self.header.crc:#010x}, computed {actual:#010x}"
            )

    def records_payload(self) -> bytes | memoryview:
        """The (decompressed) record bytes after the header."""
        raw = self.data[BATCH_HEADER_SIZE:]
        c = self.header.attributes & _COMPRESSION_MASK
        return raw if c == 0 else decompress(c, raw)

    def records(self) -> Iterator[Record]:
        """Decode every record (decompressing if needed)."""
        h = self.header
        return _decode_records(self.records_payload(), h.record_count, h.base_offset, h.base_timestamp, h)


def record_outlines(payload: Any, h: BatchHeader) -> Iterator[tuple[int, int, bool]]:
    """(offset, timestamp, whether it has a key) of each record of the batch ``h`` heads, from its
    records section already decompressed: what a partition checks (timestamps, keys on a compacted
    topic), read without copying any key, value or header. Each record's length is checked against
    the section, and the section against the record count (CorruptRecordError)."""
    buf = payload if isinstance(payload, memoryview) else memoryview(payload)
    end = len(buf)
    pos = 0
    log_append = h.attributes & _TIMESTAMP_TYPE_BIT
    base_offset, base_ts = h.base_offset, h.base_timestamp
    try:
        for _ in range(h.record_count):
            length, pos = _read_varint(buf, pos)
            record_end = pos + length
            if length < 0 or record_end > end:
                raise CorruptRecordError(f"record length {length} runs past the batch")
            ts_delta, pos = _read_varint(buf, pos + 1)  # past the record's attributes byte
            offset_delta, pos = _read_varint(buf, pos)
            key_length, pos = _read_varint(buf, pos)
            if pos > record_end or key_length > record_end - pos:
                raise CorruptRecordError("record key runs past the end of the record")
            yield base_offset + offset_delta, h.max_timestamp if log_append else base_ts + ts_delta, key_length >= 0
            pos = record_end
    except IndexError:
        raise CorruptRecordError("truncated record") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes after the last of {h.record_count} records")


def _parse_header(buf: memoryview, pos: int) -> BatchHeader:
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def iter_batches(blob: Any, *, check_magic: bool = True) -> Iterator[BatchView]:
    """Yield the batches of a ``records`` blob, parsing headers only (zero-copy).

    Raises :class:`CorruptRecordError` on truncation/bad lengths and :class:`UnsupportedMagicError`
    for magic 0/1 (``check_magic=False`` only skips that test, legacy batches are still not parsed).
    """
    buf = blob if type(blob) is memoryview else memoryview(blob)
    if buf.format != "B":
        buf = buf.cast("B")
    end = len(buf)
    pos = 0
    while pos < end:
        if end - pos < _LOG_OVERHEAD + 5:
            raise CorruptRecordError(f"truncated record batch at {pos}: {end - pos} bytes left")
        magic = buf[pos + _MAGIC_OFFSET]
        if magic != 2:
            if check_magic:
                raise UnsupportedMagicError(magic if magic < 128 else magic - 256)
            raise CorruptRecordError(f"record batch at {pos} has magic {magic}")
        if end - pos < BATCH_HEADER_SIZE:
            raise CorruptRecordError(f"truncated record batch header at {pos}")
        h = _parse_header(buf, pos)
        size = h.batch_length + _LOG_OVERHEAD
        if h.batch_length < BATCH_HEADER_SIZE - _LOG_OVERHEAD or pos + size > end:
            raise CorruptRecordError(f"record batch at {pos} has invalid length {h.batch_length}")
        yield BatchView(buf[pos : pos + size], pos, h)
        pos += size


def validate_produce_records(blob: Any, *, single_batch: bool = True) -> list[BatchView]:
    """Check a produce ``records`` blob as Kafka does: magic 2, lengths, CRC, and (v3+) one batch.

    Returns the batch views so the caller can rewrite offsets without parsing again.
    """
    if blob is None:
        raise InvalidRecordError("produce request has null records")
    batches = list(iter_batches(blob))
    if not batches:
        raise InvalidRecordError("produce request has no record batch")
    if single_batch and len(batches) != 1:
        raise InvalidRecordError(f"produce request must contain exactly one record batch, got {len(batches)}")
    for b in batches:
        h = b.header
        if h.record_count <= 0 or h.last_offset_delta != h.record_count - 1:
            raise InvalidRecordError(
                f"record batch at {b.position}: record count {h.record_count}, last offset delta {h.last_offset_delta}"
            )
        if h.attributes & _COMPRESSION_MASK > Compression.ZSTD:
            raise InvalidRecordError(f"unknown compression type {h.attributes & _COMPRESSION_MASK}")
        b.validate_crc()
    return batches


def set_base_offset(buf: bytearray | memoryview, base_offset: int, position: int = 0) -> None:
    """Rewrite a batch's baseOffset in place (outside the CRC, so the batch stays valid)."""
    _BASE_OFFSET.pack_into(buf, position, base_offset)


# ---------------------------------------------------------------------------------------------
# varints (zigzag) used inside records


def _read_varint(buf: Any, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")


def _write_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)  # zigzag for 64-bit values
    v &= 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_nullable(buf: Any, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptRecordError("record field runs past the end of the record")
    return bytes(buf[pos : pos + n]), pos + n


def _decode_records(payload: Any, count: int, base_offset: int, base_ts: int, h: BatchHeader) -> Iterator[Record]:
    buf = payload if isinstance(payload, memoryview) else memoryview(payload)
    end = len(buf)
    pos = 0
    log_append = h.attributes & _TIMESTAMP_TYPE_BIT
    try:
        for _ in range(count):
            length, pos = _read_varint(buf, pos)
            rend = pos + length
            if length < 0 or rend > end:
                raise CorruptRecordError(f"record length {length} runs past the batch")
            attrs = buf[pos]
            pos += 1
            ts_delta, pos = _read_varint(buf, pos)
            off_delta, pos = _read_varint(buf, pos)
            key, pos = _read_nullable(buf, pos, rend)
            value, pos = _read_nullable(buf, pos, rend)
            nh, pos = _read_varint(buf, pos)
            if nh < 0 or nh > rend - pos:
                raise CorruptRecordError(f"invalid header count {nh}")
            headers = []
            for _ in range(nh):
                hk, pos = _read_nullable(buf, pos, rend)
                if hk is None:
                    raise CorruptRecordError("null record header key")
                hv, pos = _read_nullable(buf, pos, rend)
                headers.append((hk.decode("utf-8"), hv))
            if pos != rend:
                raise CorruptRecordError(f"record has {rend - pos} unexpected trailing bytes")
            ts = h.max_timestamp if log_append else base_ts + ts_delta
            yield Record(base_offset + off_delta, ts, key, value, headers, attrs)
    except IndexError:
        raise CorruptRecordError("truncated record") from None
    except UnicodeDecodeError as e:
        raise CorruptRecordError(f"record header key is not UTF-8: {e}") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes after the last of {count} records")


def _encode_record(out: bytearray, offset_delta: int, ts_delta: int, r: NewRecord) -> None:
    body = bytearray(b"\x00")  # record attributes: unused
    _write_varint(body, ts_delta)
    _write_varint(body, offset_delta)
    for part in (r.key, r.value):
        if part is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(part))
            body += part
    _write_varint(body, len(r.headers))
    for hk, hv in r.headers:
        kb = hk.encode("utf-8")
        _write_varint(body, len(kb))
        body += kb
        if hv is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(hv))
            body += hv
    _write_varint(out, len(body))
    out += body


# ---------------------------------------------------------------------------------------------
# compression

def decompress(codec: int, data: Any) -> bytes:
    """Decompress a batch's records section (``codec`` is the attributes' compression type)."""
    try:
        return compression.decompress(codec, data)
    except compression.UnknownCodecError as e:
        raise InvalidRecordError(str(e)) from None
    except compression.CompressionError as e:
        raise CorruptRecordError(str(e)) from None


def compress(codec: int, data: bytes) -> bytes:
    """Compress a records section the way the Java client does for each codec."""
    try:
        return compression.compress(codec, data)
    except compression.UnknownCodecError as e:
        raise InvalidRecordError(str(e)) from None


# ---------------------------------------------------------------------------------------------
# builder


def build_record_batch(
    records: Iterable[NewRecord],
    *,
    base_offset: int = 0,
    compression: int = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = TimestampType.CREATE_TIME,
) -> bytes:
    """Encode records (offset deltas 0..n-1) into one CRC-valid batch, compressed if asked."""
    now = int(time.time() * 1000)
    recs = [r if isinstance(r, NewRecord) else NewRecord(*r) for r in records]
    if not recs:
        raise ValueError("a record batch needs at least one record")
    stamps = [now if r.timestamp is None else r.timestamp for r in recs]
    base_ts = stamps[0]
    body = bytearray()
    for i, (r, ts) in enumerate(zip(recs, stamps, strict=True)):
        _encode_record(body, i, ts - base_ts, r)
    payload = compress(compression, bytes(body)) if compression else bytes(body)
    attrs = (int(compression) & _COMPRESSION_MASK) | (_TIMESTAMP_TYPE_BIT if timestamp_type else 0)
    attrs |= (_TRANSACTIONAL_BIT if transactional else 0) | (_CONTROL_BIT if control else 0)
    out = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(
        out,
        0,
        base_offset,
        BATCH_HEADER_SIZE - _LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        2,
        0,
        attrs,
        len(recs) - 1,
        base_ts,
        max(stamps),
        producer_id,
        producer_epoch,
        base_sequence,
        len(recs),
    )
    out += payload
    _CRC.pack_into(out, _CRC_OFFSET, crc32c(memoryview(out)[_ATTR_OFFSET:]))
    return bytes(out)


_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def build_control_batch(
    marker: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    timestamp: int | None = None,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker (COMMIT/ABORT) batch as the transaction coordinator writes it."""
    rec = NewRecord(
        _CONTROL_KEY.pack(0, int(marker)), _CONTROL_VALUE.pack(0, coordinator_epoch), (), timestamp
    )
    return build_record_batch(
        [rec],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def parse_control_record(record: Record) -> tuple[ControlRecordType, int]:
    """(marker type, coordinator epoch) of a record from a control batch."""
    if record.key is None or len(record.key) < 4:
        raise CorruptRecordError("control record key is too short")
    version, kind = _CONTROL_KEY.unpack_from(record.key)
    if version != 0:
        raise InvalidRecordError(f"unknown control record key version {version}")
    epoch = -1
    if record.value is not None and len(record.value) >= 6:
        epoch = _CONTROL_VALUE.unpack_from(record.value)[1]
    try:
        return ControlRecordType(kind), epoch
    except ValueError:
        raise InvalidRecordError(f"unknown control record type {kind}") from None
