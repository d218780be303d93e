"""What the Kafka layer stores in segments: the batch envelope in data segments and the entries of
index segments. Pure formats, no I/O; any thread may use them.

A data segment is a sequence of ``envelope + record batch``; the batch is the client's RecordBatch v2
as sent, with only baseOffset and partitionLeaderEpoch rewritten (both outside the CRC). An index
segment (``<data segment>#kafka-index``) is a sequence of fixed-size ``IndexEntry`` records, one per
batch, in the data segment's order.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, NamedTuple

from millrace.protocol.records import BatchHeader

# magic 'K', version, partition, batch length
ENVELOPE = struct.Struct(">BBiI")
ENVELOPE_MAGIC = 0x4B
ENVELOPE_VERSION = 1
INDEX_SUFFIX = "#kafka-index"
# partition, base offset, position of the batch in the data segment, batch length, last offset delta,
# max timestamp, producer id, producer epoch, base sequence, batch attributes
_INDEX_ENTRY = struct.Struct(">iqqIiqqhih")
INDEX_ENTRY_SIZE = _INDEX_ENTRY.size
# The RecordBatch v2 header: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_LEADER_EPOCH = struct.Struct(">i")
# Batch attribute bits an index entry keeps: a transactional batch, a control batch (a marker)
TRANSACTIONAL_ATTRIBUTE = 0x10
CONTROL_ATTRIBUTE = 0x20


LOG_APPEND_TIME_ATTRIBUTE = 0x08  # the timestamp-type bit
CODEC_MASK = 0x07  # the attributes' compression bits
# Where a RecordBatch v2 header keeps what a partition rewrites; the CRC covers the batch from ATTRIBUTES_AT on
BATCH_LENGTH = struct.Struct(">i")  # at 8: it counts from partitionLeaderEpoch on
ATTRIBUTES = struct.Struct(">h")
MAX_TIMESTAMP = struct.Struct(">q")
CRC = struct.Struct(">I")
CRC_AT, ATTRIBUTES_AT, MAX_TIMESTAMP_AT = 17, 21, 35
_RECORDS_AT = 61  # the RecordBatch v2 header's size: the records section starts here


def envelope(partition: int, batch_size: int) -> bytes:
    """The envelope stored in front of one batch of ``partition``."""
    return ENVELOPE.pack(ENVELOPE_MAGIC, ENVELOPE_VERSION, partition, batch_size)


_BASE_OFFSET = struct.Struct(">q")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_BATCH_OVERHEAD = 12  # baseOffset and batchLength: batchLength counts the bytes after them


def batches_in_span(span: memoryview) -> Iterator[tuple[int, int, memoryview]]:
    """(base offset, last offset, batch) of each batch in ``span``: bytes of a data segment that start at
    a batch (after its envelope) and run on through ``envelope + batch`` pairs of the same partition, as
    a folded offset-index entry covers them. A span cut short ends at its last whole batch."""
    at, end = 0, len(span)
    while at + _RECORDS_AT <= end:
        (length,) = BATCH_LENGTH.unpack_from(span, at + 8)
        size = length + _BATCH_OVERHEAD
        if at + size > end:
            return
        (base,) = _BASE_OFFSET.unpack_from(span, at)
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(span, at + _LAST_OFFSET_DELTA_AT)
        yield base, base + delta, span[at : at + size]
        at += size + ENVELOPE.size


_BASE_AND_LENGTH = struct.Struct(">qi")


def take_batches(span: memoryview, offset: int, end: int, budget: int, first_free: bool, parts: list[Any]) -> int:
    """Append to ``parts`` the batches of ``span`` (laid out as for ``batches_in_span``) that end at or
    past ``offset`` and start below ``end``, while their sizes fit ``budget`` (``first_free``: the first
    batch taken goes whatever its size, KIP-74's one batch of progress); the bytes taken, or -1 - (bytes
    taken) once a batch at or past ``end`` or over the budget ended the taking. One loop over the
    headers, two unpacks a batch: a catch-up read of small batches runs it for every batch."""
    unpack_head, unpack_delta = _BASE_AND_LENGTH.unpack_from, _LAST_OFFSET_DELTA.unpack_from
    append = parts.append
    taken, at, stop, envelope_size = 0, 0, len(span), ENVELOPE.size
    while at + _RECORDS_AT <= stop:
        base, length = unpack_head(span, at)
        size = length + _BATCH_OVERHEAD
        if at + size > stop:
            break
        if base < offset and base + unpack_delta(span, at + _LAST_OFFSET_DELTA_AT)[0] < offset:
            at += size + envelope_size
            continue
        if base >= end or (taken + size > budget and (taken or not first_free)):
            return -1 - taken
        append(span[at : at + size])
        taken += size
        at += size + envelope_size
    return taken


def set_leader_epoch(head: bytearray, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in the first 16 bytes of a batch (outside the CRC)."""
    _LEADER_EPOCH.pack_into(head, 12, epoch)


class IndexEntry(NamedTuple):
    """One batch as the offset index and the index segment know it."""

    partition: int
    base_offset: int
    position: int  # of the batch (after its envelope) in the data segment
    length: int  # of the batch
    last_offset_delta: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    attributes: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def end(self) -> int:
        """Where the batch ends in the data segment."""
        return self.position + self.length

    def pack(self) -> bytes:
        return _INDEX_ENTRY.pack(*self)

    @classmethod
    def unpack_from(cls, buffer: bytes, offset: int) -> IndexEntry:
        return cls._make(_INDEX_ENTRY.unpack_from(buffer, offset))

    @classmethod
    def of_batch(cls, partition: int, base_offset: int, position: int, header: BatchHeader) -> IndexEntry:
        return cls(partition, base_offset, position, header.size, header.last_offset_delta, header.max_timestamp,
                   header.producer_id, header.producer_epoch, header.base_sequence, header.attributes)

    @classmethod
    def of_stored(cls, partition: int, position: int, length: int, head: bytes, at: int) -> IndexEntry:
        """The entry of a stored batch whose header starts at ``head[at:]`` (recovery's tail scan)."""
        (base, _, _, _, _, attrs, last_delta, _, max_ts, pid, epoch, seq, _) = _BATCH_HEADER.unpack_from(head, at)
        return cls(partition, base, position, length, last_delta, max_ts, pid, epoch, seq, attrs)
