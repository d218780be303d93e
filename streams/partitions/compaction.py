"""Log compaction of a Kafka partition (``cleanup.policy=compact``), in the manner of Kafka's LogCleaner.

A round cleans a partition's prefix ``[log start, end)`` into a new *compacted segment*, private to the
partition (``<scope>/<stream>/kafka-compacted.<partition>.<generation>``, with its own
``#kafka-index``), whose batches keep their original offsets: records are removed from batches, never
renumbered. The cleaning point ``end`` is the smallest of the last stable offset, the base offset of the
partition's last batch (never cleaned, as Kafka never cleans the active segment, so the log's end stays
readable) and the first batch younger than ``min.compaction.lag.ms``.

Rules (Kafka's): a keyed record is kept when it is the latest record of its key in the cleaned range
(Kafka's offset map over the dirty section); a tombstone (null value) is removed once older than
``delete.retention.ms`` (by its timestamp); records without a key are removed; records of aborted
transactions are removed; a transaction marker is removed once no batch of its transaction is left
and it is older than ``delete.retention.ms``; a batch left without records is dropped unless it is
the last batch of a producer whose state the partition still keeps (then it stays, empty, so
idempotence survives a reload). A batch that keeps all its records is copied byte for byte; one that
loses some is rebuilt with its original base offset, lastOffsetDelta, base timestamp, producer fields
and codec, each kept record with its original offset and timestamp deltas, and a new CRC.

Invariants (relied on by ``storage.SegmentPartitionStorage`` and ``loading``):
- A generation is complete (data, index, sealed) before the compactions table names it, and the
  table names exactly one generation per partition: a crash before the table write leaves only an
  orphan that the next load deletes; after it, the previous generation is the orphan.
- Offsets never change; the index of a compacted partition may have gaps (removed batches), and the
  table's ``end`` is where its uncompacted data resumes, so a load knows the gap before ``end`` is not a
  lost append.

``plan`` runs on the reactor (a snapshot of reactor-owned state); ``clean`` and ``write_generation``
block and run on the compaction thread; the result is installed on the reactor.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from crc32c import crc32c
from twisted.internet.interfaces import IReactorTime

from millrace.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchView,
    Record,
    compress,
    iter_batches,
)
from millrace.store.contracts import SegmentService
from millrace.store.tables import TableStore
from millrace.streams.partitions.formats import (
    CONTROL_ATTRIBUTE,
    ENVELOPE,
    INDEX_SUFFIX,
    IndexEntry,
    batches_in_span,
    envelope,
)
from millrace.streams.partitions.partition import PartitionLog
from millrace.streams.partitions.segments import (
    BLOCKING_TIMEOUT,
    SegmentWriter,
    read_fully,
    recover_segment,
)
from millrace.streams.partitions.transactions import ProducerAborts

COMPACTIONS_TABLE = "_system/_tables/kafka_compactions"
COMPACTED_INFIX = "kafka-compacted."
READ_RUN = 4 << 20
MAX_MAP_KEYS = 1_000_000  # dirty keys one round maps (a dict entry each), Kafka's dedupe buffer in spirit
APPEND_CHUNK = 1 << 20

_HEADER = struct.Struct(">qiibIhiqqqhii")  # the RecordBatch v2 header
_CRC_AT, _ATTRIBUTES_AT = 17, 21
_COMPRESSION_MASK = 0x07
_LOG_APPEND_TIME = 0x08


def compacted_segment_name(scope: str, stream: str, partition: int, generation: int) -> str:
    return f"{scope}/{stream}/{COMPACTED_INFIX}{partition}.{generation}"


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """What the compactions table keeps per partition: the current generation, its segment, and the
    offset where the partition's uncompacted data resumes."""

    generation: int
    segment: str
    end: int
    log_start: int  # the partition's log start when it was cleaned (compaction never moves it)

    def encode(self) -> bytes:
        return json.dumps({"generation": self.generation, "segment": self.segment, "end": self.end,
                           "log_start": self.log_start}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> CompactionRecord:
        d = json.loads(raw)
        return cls(int(d["generation"]), str(d["segment"]), int(d["end"]), int(d["log_start"]))


@dataclass(frozen=True, slots=True)
class SourceBatch:
    segment: str
    position: int  # of the batch (after its envelope)
    length: int
    base: int
    last: int


@dataclass(slots=True)
class CleaningPlan:
    """A snapshot (taken on the reactor) of what one round cleans."""

    topic: str
    partition: int
    generation: int  # of the segment this round writes
    segment: str
    end: int
    batches: list[SourceBatch]
    aborted: list[tuple[int, int, int]]  # (producer id, first offset, marker offset) of aborted transactions
    active_producers: frozenset[int]
    now_ms: int
    delete_retention_ms: int
    # Where the dirty part starts: below it is the previous generation, where each key is at most once,
    # so the key map needs only the dirty part's keys (Kafka's cleaner maps only the dirty section).
    dirty_start: int = 0


@dataclass(slots=True)
class CleanedBatch:
    data: bytes
    entry_fields: tuple[int, int, int, int, int, int, int]  # base, last delta, max ts, pid, epoch, seq, attrs


@dataclass(slots=True)
class CleaningResult:
    plan: CleaningPlan
    entries: list[IndexEntry] = field(default_factory=list)
    tail: int = 0
    removed_markers: set[int] = field(default_factory=set)  # offsets of markers no longer stored
    end: int = 0  # what this round cleaned below: the plan's end, or less when the key map filled
    records_in: int = 0
    records_out: int = 0


def cleaning_point(p: PartitionLog, now_ms: int, min_lag_ms: int) -> int:
    """The offset below which ``p`` may be cleaned now (see the module's rules)."""
    index = p.index
    durable = index.entries_below(p.high_watermark)
    if durable == 0:
        return p.log_start
    end = min(p.txns.last_stable(p.high_watermark), index.base[durable - 1])
    for i in range(index.entry_at(p.log_start), durable):
        if index.base[i] >= end:
            break
        if index.max_ts[i] > now_ms - min_lag_ms:
            return max(p.log_start, index.base[i])
    return max(p.log_start, end)


def needs_cleaning(p: PartitionLog, cleaned_end: int, end: int, now_ms: int, dirty_ratio: float,
                   max_lag_ms: int) -> bool:
    """Kafka's trigger: the dirty part (past what was cleaned last, below ``end``) is at least
    ``min.cleanable.dirty.ratio`` of the partition, or holds a batch older than ``max.compaction.lag.ms``."""
    index = p.index
    first_dirty = index.entry_at(max(cleaned_end, p.log_start))
    stop = index.entry_at(end)
    if stop <= first_dirty:
        return False
    dirty = sum(index.length[first_dirty:stop])
    if index.bytes and dirty / index.bytes >= dirty_ratio:
        return True
    return min(index.max_ts[first_dirty:stop]) < now_ms - max_lag_ms


def plan(p: PartitionLog, scope: str, stream: str, generation: int, end: int, now_ms: int,
         delete_retention_ms: int) -> CleaningPlan:
    """Snapshot the batches of ``[log start, end)`` (reactor thread)."""
    index = p.index
    stop = index.entries_below(end)
    if stop and index.last[stop - 1] >= end and index.count[stop - 1] > 1:
        # A folded entry (from before the topic compacted) straddles the end: clean up to its start.
        stop -= 1
        end = max(p.log_start, index.base[stop])
    batches = [
        SourceBatch(p.segments[index.seg[i]].name, index.pos[i], index.length[i], index.base[i], index.last[i])
        for i in range(index.entry_at(p.log_start), stop)
    ]
    aborted = [(a.producer_id, a.first_offset, a.last_offset) for a in p.txns.aborted if a.first_offset < end]
    dirty_start = p.compaction.end if p.compaction is not None else p.log_start
    return CleaningPlan(p.topic, p.partition, generation, compacted_segment_name(scope, stream, p.partition, generation),
                        end, batches, aborted, frozenset(pid for pid, _ in p.producers.states()), now_ms,
                        delete_retention_ms, dirty_start)


# -- the cleaning itself (pure over batch bytes) -----------------------------------------------------------

@dataclass(slots=True)
class OffsetMap:
    """What pass 1 learns: each key's latest record that counts, and each producer's last data batch."""

    latest: dict[bytes, int] = field(default_factory=dict)
    last_batch_of: dict[int, int] = field(default_factory=dict)  # producer id -> base offset
    end: int | None = None  # where pass 1 stopped because the map was full (None: it did not)


def latest_offsets(batches: Iterable[BatchView], plan: CleaningPlan, max_keys: int = MAX_MAP_KEYS) -> OffsetMap:
    """Pass 1 (Kafka's offset map): the offset of each dirty key's latest record that counts (not in an
    aborted transaction), and the base offset of each producer's last data batch. Once the map holds
    ``max_keys`` keys it stops at the next dirty batch, and the round cleans only below it, as Kafka's
    cleaner does when its dedupe buffer fills."""
    found = OffsetMap()
    aborted = ProducerAborts(sorted(plan.aborted, key=lambda a: a[2]))
    latest = found.latest
    for batch in batches:
        h = batch.header
        dirty = h.base_offset >= plan.dirty_start
        if dirty and len(latest) >= max_keys:
            found.end = h.base_offset
            break
        if h.is_control:
            continue
        if h.producer_id >= 0:
            found.last_batch_of[h.producer_id] = h.base_offset
        if not dirty or (h.is_transactional and aborted.holds(h.producer_id, h.base_offset)):
            continue
        for r in batch.records():
            if r.key is not None:
                latest[r.key] = r.offset
    return found


def clean_batches(batches: Iterable[BatchView], offsets: OffsetMap, plan: CleaningPlan,
                  result: CleaningResult) -> Iterator[CleanedBatch]:
    """Pass 2: the batches as the compacted segment stores them (see the module's rules), one at a time
    (the source is read again, not held: a partition may be far larger than memory)."""
    latest, last_batch_of = offsets.latest, offsets.last_batch_of
    aborted = ProducerAborts(sorted(plan.aborted, key=lambda a: a[2]))
    survivors: dict[int, int] = {}  # producer id -> batches of its current transaction kept
    horizon = plan.now_ms - plan.delete_retention_ms
    for batch in batches:
        h = batch.header
        if h.is_control:
            kept_txn = survivors.pop(h.producer_id, 0)
            if kept_txn or h.max_timestamp >= horizon:
                yield CleanedBatch(bytes(batch.data), _fields(h.base_offset, h.last_offset_delta, h.max_timestamp,
                                                               h.producer_id, h.producer_epoch, h.base_sequence,
                                                               h.attributes))
            else:
                result.removed_markers.add(h.base_offset)
            continue
        records = list(batch.records())
        result.records_in += len(records)
        if h.is_transactional and aborted.holds(h.producer_id, h.base_offset):
            kept: list[Record] = []
        else:
            # A dirty key's latest record; a clean record unless its key came again in the dirty part.
            kept = [r for r in records if r.key is not None and latest.get(r.key, r.offset) == r.offset
                    and not (r.value is None and r.timestamp < horizon)]
        result.records_out += len(kept)
        if len(kept) == len(records):
            out = bytes(batch.data)
        elif kept:
            out = rebuild(batch, kept)
        elif (h.producer_id >= 0 and last_batch_of.get(h.producer_id) == h.base_offset
              and h.producer_id in plan.active_producers):
            out = empty_batch(batch)
        else:
            continue
        if h.is_transactional:
            survivors[h.producer_id] = survivors.get(h.producer_id, 0) + 1
        ch = next(iter_batches(out)).header
        yield CleanedBatch(out, _fields(ch.base_offset, ch.last_offset_delta, ch.max_timestamp, ch.producer_id,
                                        ch.producer_epoch, ch.base_sequence, ch.attributes))


def _fields(*values: int) -> tuple[int, int, int, int, int, int, int]:
    return values  # type: ignore[return-value]


def _varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _bytes_field(out: bytearray, value: bytes | None) -> None:
    if value is None:
        _varint(out, -1)
    else:
        _varint(out, len(value))
        out += value


def _encode_record(r: Record, base_offset: int, base_ts: int, log_append: bool) -> bytes:
    body = bytearray([r.attributes])
    # A LogAppendTime batch's records keep whatever delta they had; readers use the batch's maxTimestamp.
    _varint(body, 0 if log_append else r.timestamp - base_ts)
    _varint(body, r.offset - base_offset)
    _bytes_field(body, r.key)
    _bytes_field(body, r.value)
    _varint(body, len(r.headers))
    for hk, hv in r.headers:
        _bytes_field(body, hk.encode("utf-8"))
        _bytes_field(body, hv)
    out = bytearray()
    _varint(out, len(body))
    return bytes(out + body)


def rebuild(batch: BatchView, kept: list[Record]) -> bytes:
    """``batch`` with only ``kept`` (a non-empty subset of its records): same base offset,
    lastOffsetDelta, base timestamp, producer fields, attributes and codec; new count, maxTimestamp,
    length and CRC (Kafka's cleaner keeps the base and last offsets so offsets never change)."""
    h = batch.header
    log_append = bool(h.attributes & _LOG_APPEND_TIME)
    payload = b"".join(_encode_record(r, h.base_offset, h.base_timestamp, log_append) for r in kept)
    codec = h.attributes & _COMPRESSION_MASK
    if codec:
        payload = compress(codec, payload)
    max_ts = h.max_timestamp if log_append else max(r.timestamp for r in kept)
    out = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(out, 0, h.base_offset, BATCH_HEADER_SIZE - 12 + len(payload), h.partition_leader_epoch, 2, 0,
                      h.attributes, h.last_offset_delta, h.base_timestamp, max_ts, h.producer_id, h.producer_epoch,
                      h.base_sequence, len(kept))
    out += payload
    struct.pack_into(">I", out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return bytes(out)


def empty_batch(batch: BatchView) -> bytes:
    """The header-only batch Kafka's cleaner leaves for a producer's last batch (``writeEmptyHeader``):
    no records, no compression, base and max timestamp the batch's maxTimestamp."""
    h = batch.header
    attributes = h.attributes & ~_COMPRESSION_MASK
    out = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(out, 0, h.base_offset, BATCH_HEADER_SIZE - 12, h.partition_leader_epoch, 2, 0, attributes,
                      h.last_offset_delta, h.max_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch,
                      h.base_sequence, 0)
    struct.pack_into(">I", out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return bytes(out)


# -- blocking: reading the source and writing a generation (compaction thread) -------------------------------

class CleaningStoppedError(Exception):
    """The cleaner is shutting down: the round gives up (what it wrote is an orphan the next load deletes)."""


def _read_source(store: SegmentService, batches: list[SourceBatch],
                 stopping: Callable[[], bool] = lambda: False) -> Iterator[BatchView]:
    """The planned batches in order, read in runs of adjacent batches of one segment."""
    i = 0
    while i < len(batches):
        if stopping():
            raise CleaningStoppedError("the log cleaner is stopping")
        first = batches[i]
        j = i + 1
        end = first.position + first.length
        while (j < len(batches) and batches[j].segment == first.segment and batches[j].position >= end
               and batches[j].position + batches[j].length - first.position <= READ_RUN
               and batches[j].position - end <= 64):
            end = batches[j].position + batches[j].length
            j += 1
        blob = memoryview(read_fully(store, first.segment, first.position, end - first.position))
        n = 0
        for b in batches[i:j]:
            at = b.position - first.position
            for _, _, batch in batches_in_span(blob[at : at + b.length]):  # a folded entry holds several
                yield next(iter_batches(batch))
                n += 1
                if n % 16 == 0:
                    time.sleep(0.001)  # let the reactor and the store's threads have the GIL: produce must not stall
        i = j


def clean(store: SegmentService, plan: CleaningPlan, stopping: Callable[[], bool] = lambda: False) -> CleaningResult:
    """Blocking: clean the planned range into generation ``plan.generation`` (created here, complete,
    index included, and sealed when this returns; the caller makes it current). Raises
    CleaningStoppedError soon after ``stopping()`` turns true."""
    result = CleaningResult(plan)
    offsets = latest_offsets(_read_source(store, plan.batches, stopping), plan)
    result.end = plan.end if offsets.end is None else offsets.end
    batches = [b for b in plan.batches if b.base < result.end]
    for name in (plan.segment, plan.segment + INDEX_SUFFIX):
        delete_if_exists(store, name)  # an orphan of a round a crash interrupted
        store.create_segment(name).result(BLOCKING_TIMEOUT)
    pending: list[bytes] = []
    pending_size = 0
    position = 0
    for cleaned in clean_batches(_read_source(store, batches, stopping), offsets, plan, result):
        base, last_delta, max_ts, pid, epoch, seq, attrs = cleaned.entry_fields
        position += ENVELOPE.size
        result.entries.append(IndexEntry(plan.partition, base, position, len(cleaned.data), last_delta, max_ts,
                                         pid, epoch, seq, attrs))
        pending += [envelope(plan.partition, len(cleaned.data)), cleaned.data]
        pending_size += len(pending[-2]) + len(cleaned.data)
        position += len(cleaned.data)
        if pending_size >= APPEND_CHUNK:
            store.append(plan.segment, b"".join(pending)).result(BLOCKING_TIMEOUT)
            pending, pending_size = [], 0
    if pending:
        store.append(plan.segment, b"".join(pending)).result(BLOCKING_TIMEOUT)
    if result.entries:
        store.append(plan.segment + INDEX_SUFFIX, b"".join(e.pack() for e in result.entries)).result(BLOCKING_TIMEOUT)
    store.seal(plan.segment).result(BLOCKING_TIMEOUT)
    result.tail = position
    return result


def delete_if_exists(store: SegmentService, name: str) -> None:
    if store.exists(name):
        store.delete(name).result(BLOCKING_TIMEOUT)


def delete_generation(store: SegmentService, name: str) -> None:
    """Blocking: a generation's data and index segments, if they exist."""
    for segment in (name, name + INDEX_SUFFIX):
        delete_if_exists(store, segment)


def load_compacted(store: SegmentService, clock: IReactorTime, tables: TableStore, topic: str, scope: str, stream: str,
                   parts: list[PartitionLog], marker_is_commit: Callable[[SegmentService, str, IndexEntry], bool]) -> None:
    """Blocking (a topic's load, before any data segment is recovered): give each compacted partition
    its compacted segment's batches, and delete the generations a crash left behind (the one before
    the table's, whose deletion was still delayed, and the one after it, whose round never finished)."""
    for e in tables.entries(COMPACTIONS_TABLE, topic.encode() + b"\0"):
        number = int(e.key.split(b"\0")[1])
        record = CompactionRecord.decode(e.value)
        for orphan in (record.generation - 1, record.generation + 1):
            delete_generation(store, compacted_segment_name(scope, stream, number, orphan))
        if number >= len(parts):
            continue
        found = recover_segment(store, record.segment)
        writer = SegmentWriter(store, clock, record.segment, found.tail, found.index_tail)
        commits = [marker_is_commit(store, record.segment, entry) if entry.attributes & CONTROL_ATTRIBUTE else None
                   for entry in found.entries]
        parts[number].recovered_compacted(writer, found.entries, commits, record, e.version)


def forget_topic(store: SegmentService, tables: TableStore, topic: str) -> None:
    """Blocking (a deleted topic): its compacted segments and compactions records."""
    records = list(tables.entries(COMPACTIONS_TABLE, topic.encode() + b"\0"))
    for e in records:
        record = CompactionRecord.decode(e.value)
        prefix = record.segment.rsplit(".", 1)[0]  # <scope>/<stream>/kafka-compacted.<partition>
        for g in (record.generation - 1, record.generation, record.generation + 1):
            delete_generation(store, f"{prefix}.{g}")
    if records:
        tables.remove(COMPACTIONS_TABLE, [e.key for e in records])
