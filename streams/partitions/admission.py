"""What a partition makes of a produce request's batch before it stores it: one function, one walk.

``admit_batch`` is the only code of the produce path that reads a batch's records. Kafka's LogValidator
rules, applied in its order, and the topic's rewrites:

- the blob is one RecordBatch v2 whose lengths, record count, codec and CRC hold (``protocol.records``);
- a producer may not send a LogAppendTime batch; on a CreateTime topic every record's timestamp lies
  within ``message.timestamp.before.max.ms`` / ``after.max.ms`` of the broker's clock;
- on a compacted topic every record has a key;
- a topic whose ``compression.type`` names a codec stores its batches in that codec (recompressed);
- a LogAppendTime topic stamps the batch: the timestamp-type attribute and maxTimestamp the broker's
  clock.

The header settles most batches: records are decompressed once, and decoded once, only for a check the
header cannot settle (a compacted topic, a timestamp the header does not vouch for) or a recompression,
and then only their lengths, timestamps and key lengths are read: no key, value or header is copied.
A rewritten batch is copied once and its CRC computed once, after every change. Batches that need
nothing (compression.type=producer, CreateTime, not compacted) are the client's bytes, uncopied.
"""

from __future__ import annotations

from typing import Any

from crc32c import crc32c

from millrace.protocol import compression
from millrace.protocol.compression import CompressionError
from millrace.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    BatchView,
    RecordBatchError,
    TimestampType,
    iter_batches,
    record_outlines,
    validate_produce_records,
)
from millrace.streams.errors import PartitionError, Reason, batch_refusal
from millrace.streams.partitions.formats import (
    ATTRIBUTES,
    ATTRIBUTES_AT,
    BATCH_LENGTH,
    CODEC_MASK,
    CRC,
    CRC_AT,
    LOG_APPEND_TIME_ATTRIBUTE,
    MAX_TIMESTAMP,
    MAX_TIMESTAMP_AT,
)
from millrace.streams.topics import TopicInfo

TOPIC_CODECS = {"uncompressed": compression.NONE, "gzip": compression.GZIP, "snappy": compression.SNAPPY,
                "lz4": compression.LZ4, "zstd": compression.ZSTD}


def admit_batch(topic: TopicInfo, partition: int, records: Any, now_ms: int) -> BatchView:
    """The batch of ``records`` as ``topic`` stores it in ``partition`` (the module's rules), or
    PartitionError with Kafka's reason and, where Kafka gives them, an error per record. ``now_ms``:
    the broker's clock."""
    try:
        (batch,) = validate_produce_records(records)
    except RecordBatchError as exc:
        raise batch_refusal(exc) from exc
    h = batch.header
    rules = topic.append_rules
    if h.timestamp_type is TimestampType.LOG_APPEND_TIME:
        reason = "Invalid timestamp type in message: producer should not set timestamp type to LogAppendTime."
        raise PartitionError(Reason.INVALID_TIMESTAMP, "One or more records have been rejected due to invalid "
                             "timestamp", tuple((i, reason) for i in range(h.record_count)))
    before, after = rules.timestamp_before_max_ms, rules.timestamp_after_max_ms
    # The header vouches for every timestamp when the latest is not too late and no timestamp since the
    # epoch can be too early.
    check_timestamps = not rules.log_append_time and not (h.max_timestamp <= now_ms + after and before >= now_ms)
    check_keys = rules.compacted and not h.is_control
    codec = TOPIC_CODECS.get(rules.compression)
    recompress_to = codec if codec is not None and h.compression != codec else None
    if not (check_timestamps or check_keys or recompress_to is not None or rules.log_append_time):
        return batch

    payload: Any = None
    if check_timestamps or check_keys or recompress_to is not None:
        try:
            payload = batch.records_payload()  # decompressed once, for the checks and the new codec alike
        except CompressionError as exc:
            raise PartitionError(Reason.CORRUPT_RECORD, str(exc)) from exc
    if check_timestamps or check_keys:
        _check_records(payload, h, f"{topic.name}-{partition}", now_ms, before if check_timestamps else None,
                       after, check_keys)
    if recompress_to is None and not rules.log_append_time:
        return batch
    return _rewritten(batch, recompress_to, _codec_level(topic, recompress_to), payload,
                      now_ms if rules.log_append_time else None)


def _check_records(payload: Any, h: BatchHeader, partition: str, now_ms: int, before: int | None, after: int,
                   keys: bool) -> None:
    """One decoding of the records for the checks the header could not settle: timestamps (``before``
    not None) within [now - before, now + after], and (``keys``) a key on each. Timestamp errors come
    first, as Kafka's LogValidator raises them first."""
    late_or_early: list[tuple[int, str]] = []
    keyless: list[int] = []
    try:
        for i, (offset, timestamp, has_key) in enumerate(record_outlines(payload, h)):
            if before is not None and timestamp != -1 and (now_ms - timestamp > before or timestamp - now_ms > after):
                late_or_early.append((i, f"Timestamp {timestamp} of message with offset {offset} is out of range. "
                                         f"The timestamp should be within [{now_ms - before}, {now_ms + after}]"))
            if keys and not has_key:
                keyless.append(i)
    except RecordBatchError as exc:
        raise batch_refusal(exc) from exc
    if late_or_early:
        raise PartitionError(Reason.INVALID_TIMESTAMP,
                             "One or more records have been rejected due to invalid timestamp", tuple(late_or_early))
    if keyless:
        reason = f"Compacted topic cannot accept message without key in topic partition {partition}."
        raise PartitionError(Reason.INVALID_RECORD, reason, tuple((i, reason) for i in keyless))


def _codec_level(topic: TopicInfo, codec: int | None) -> int | None:
    """The topic's ``compression.<codec>.level`` (None for codecs without one)."""
    name = {compression.GZIP: "gzip", compression.LZ4: "lz4", compression.ZSTD: "zstd"}.get(codec or 0)
    return None if name is None else int(topic.config(f"compression.{name}.level"))


def _rewritten(batch: BatchView, codec: int | None, level: int | None, payload: Any,
               append_time_ms: int | None) -> BatchView:
    """One copy of ``batch`` with its records in ``codec`` (None: as they are) and, with
    ``append_time_ms``, stamped LogAppendTime (Kafka's ``DefaultRecordBatch.setMaxTimestamp``; records
    keep their own timestamps, consumers read maxTimestamp for each), its CRC computed once."""
    data = batch.data
    (attributes,) = ATTRIBUTES.unpack_from(data, ATTRIBUTES_AT)
    if codec is None:
        out = bytearray(data)
    else:
        out = bytearray(data[:BATCH_HEADER_SIZE])
        try:
            out += compression.compress(codec, payload if isinstance(payload, bytes) else bytes(payload), level)
        except CompressionError as exc:
            raise PartitionError(Reason.CORRUPT_RECORD, str(exc)) from exc
        BATCH_LENGTH.pack_into(out, 8, len(out) - 12)
        attributes = (attributes & ~CODEC_MASK) | codec
    if append_time_ms is not None:
        attributes |= LOG_APPEND_TIME_ATTRIBUTE
        MAX_TIMESTAMP.pack_into(out, MAX_TIMESTAMP_AT, append_time_ms)
    ATTRIBUTES.pack_into(out, ATTRIBUTES_AT, attributes)
    CRC.pack_into(out, CRC_AT, crc32c(memoryview(out)[ATTRIBUTES_AT:]))
    return next(iter_batches(out))
