"""Kafka partitions over stream segments.

Each Kafka record batch is stored as the client sent it (only baseOffset and partitionLeaderEpoch
rewritten; both lie outside the CRC), behind a 10-byte envelope naming its partition, in the open
segment that carries the partition. A segment may carry several partitions, so every partition keeps
an offset index (base offset -> segment, position, length) and a Fetch reads exactly its own batches.

Invariants:
- Offsets are per partition, dense, assigned here in arrival order; the store's conditional append
  (expected_offset = the tail this gateway knows) makes this gateway the segment's only writer.
- The high watermark advances only when the store has made the batch durable, in offset order.
- The index of a segment is also written, in order and after the data is durable, to a companion
  *index segment*; recovery loads it and scans the data segment from where it ends, so a crash loses
  no index entry and a restart does not read the whole topic.

All methods run on the reactor thread unless they say they block.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import struct
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer, reactor
from twisted.python.failure import Failure

from millrace.gateway.futures import to_deferred
from millrace.gateway.kafka.topics import TopicInfo, TopicRegistry
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.records import (
    BATCH_HEADER_SIZE,
    RecordBatchError,
    iter_batches,
    set_base_offset,
    validate_produce_records,
)
from millrace.store.controller import SegmentRange
from millrace.store.errors import SegmentExistsError, StoreError
from millrace.store.segment_store import SegmentStore
from millrace.store.tables import TableStore

log = logging.getLogger(__name__)

# magic 'K', version, partition, batch length
ENVELOPE = struct.Struct(">BBiI")
ENVELOPE_MAGIC = 0x4B
ENVELOPE_VERSION = 1
# partition, base offset, position of the batch in the data segment, batch length, last offset delta,
# max timestamp, producer id, producer epoch, base sequence, batch attributes
INDEX_ENTRY = struct.Struct(">iqqIiqqhih")
INDEX_SUFFIX = "#kafka-index"
LOG_STARTS_TABLE = "_system/_tables/kafka_log_starts"
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_LEADER_EPOCH = struct.Struct(">i")
PRODUCER_WINDOW = 5  # batches remembered per producer for duplicate detection, as Kafka does
INDEX_FLUSH_SECONDS = 0.05
READ_CHUNK = 1 << 20


class PartitionError(Exception):
    """A Kafka error for one partition of a request."""

    def __init__(self, error_code: int, message: str = "") -> None:
        super().__init__(message or ErrorCode(error_code).name)
        self.error_code = error_code


@dataclass
class ProducerState:
    epoch: int
    # (first sequence, last sequence, base offset) of the last few batches, oldest first
    batches: deque = field(default_factory=lambda: deque(maxlen=PRODUCER_WINDOW))
    # base offset -> Deferreds of retries of an append still in flight: they get the original's outcome
    in_flight: dict[int, list[defer.Deferred]] = field(default_factory=dict)


class SegmentWriter:
    """Appends to one data segment and keeps its index segment in step."""

    def __init__(self, store: SegmentStore, name: str, tail: int, index_tail: int) -> None:
        self.store = store
        self.name = name
        self.index_name = name + INDEX_SUFFIX
        self.tail = tail  # accepted length: where the next append must land
        self.index_tail = index_tail
        self._index_pending: list[bytes] = []
        self._index_flush: Any = None
        self.failed: BaseException | None = None

    def index(self, entry: bytes) -> None:
        self._index_pending.append(entry)
        if self._index_flush is None:
            self._index_flush = reactor.callLater(INDEX_FLUSH_SECONDS, self.flush_index)

    def flush_index(self) -> None:
        self._index_flush = None
        if not self._index_pending:
            return
        data = b"".join(self._index_pending)
        self._index_pending = []
        expected = self.index_tail
        self.index_tail += len(data)
        fut = self.store.append(self.index_name, data, expected_offset=expected)
        # A lost index append is repaired by recovery's tail scan; record it and carry on.
        fut.add_done_callback(lambda f: f.exception() and log.warning(
            "index append to %s failed: %r", self.index_name, f.exception()))


class PartitionLog:
    """One partition's offsets, index, producers and waiting fetches."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.segments: list[SegmentWriter] = []  # every segment holding data of this partition
        self.seg_ids: dict[str, int] = {}
        self.base = array("q")
        self.last = array("q")
        self.seg = array("i")
        self.pos = array("q")
        self.length = array("i")
        self.max_ts = array("q")
        self.running_max_ts = array("q")  # max of max_ts over entries [0, i]: searchable
        self.bytes = 0  # total batch bytes indexed
        self.log_start = 0
        self.next_offset = 0
        self.high_watermark = 0
        self.producers: dict[int, ProducerState] = {}
        self.waiters: list[defer.Deferred] = []
        # [last offset, durable?] of appends in offset order: the high watermark passes an append only
        # when it and everything before it is durable, even across segments (a scale switch).
        self.pending: deque[list] = deque()
        self.writer: SegmentWriter | None = None  # the open segment new batches go to

    def segment_index(self, writer: SegmentWriter) -> int:
        idx = self.seg_ids.get(writer.name)
        if idx is None:
            idx = self.seg_ids[writer.name] = len(self.segments)
            self.segments.append(writer)
        return idx

    def add_entry(self, seg: int, base: int, last: int, pos: int, length: int, max_ts: int) -> None:
        self.base.append(base)
        self.last.append(last)
        self.seg.append(seg)
        self.pos.append(pos)
        self.length.append(length)
        self.max_ts.append(max_ts)
        prev = self.running_max_ts[-1] if self.running_max_ts else -1
        self.running_max_ts.append(max(prev, max_ts))
        self.bytes += length

    def drop_entries_below(self, offset: int) -> None:
        """Forget index entries wholly below ``offset`` (after retention or DeleteRecords)."""
        cut = bisect.bisect_right(self.last, offset - 1) if self.last else 0
        if cut:
            self.bytes -= sum(self.length[:cut])
            for arr in (self.base, self.last, self.seg, self.pos, self.length, self.max_ts):
                del arr[:cut]
            # The running maximum must forget the dropped batches' timestamps.
            self.running_max_ts = array("q")
            running = -1
            for ts in self.max_ts:
                running = max(running, ts)
                self.running_max_ts.append(running)

    def durable_entries(self) -> int:
        """How many index entries lie below the high watermark."""
        return bisect.bisect_left(self.base, self.high_watermark)

    def entry_at(self, offset: int) -> int:
        """Index of the batch holding ``offset`` (or the first batch after it)."""
        i = bisect.bisect_right(self.base, offset) - 1
        if i < 0:
            return 0
        return i if self.last[i] >= offset else i + 1

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for d in waiters:
            if not d.called:
                d.callback(None)


class PartitionLogs:
    """The Kafka view of every topic's partitions."""

    def __init__(
        self, store: SegmentStore, topics: TopicRegistry, tables: TableStore,
        blocking: Callable[..., defer.Deferred],
    ) -> None:
        self.store = store
        self.blocking = blocking  # runs a blocking call off the reactor
        self.topics = topics
        self.tables = tables
        self._logs: dict[str, list[PartitionLog]] = {}
        self._writers: dict[str, SegmentWriter] = {}
        self._load_lock = threading.Lock()
        self._reloading: set[str] = set()
        if not tables.exists(LOG_STARTS_TABLE):
            with contextlib.suppress(SegmentExistsError):
                tables.create_table(LOG_STARTS_TABLE)

    # -- recovery (blocking) -------------------------------------------------------------------------
    def load_all(self) -> None:
        """Rebuild every topic's partition logs from its segments (blocking; before serving)."""
        for name in self.topics.names():
            topic = self.topics.get(name)
            if topic is not None:
                self._logs[name] = self._load(topic)

    def _load(self, topic: TopicInfo) -> list[PartitionLog]:
        """Rebuild a topic's partitions from every segment of its stream's history: a partition's
        data runs through sealed predecessors into their successors, oldest epoch first."""
        parts = [PartitionLog(topic.name, p) for p in range(topic.partition_count)]
        segments = self.topics.current_segments(topic.name)
        log_starts = {
            int(e.key.split(b"\0")[1]): int(e.value)
            for e in self.tables.entries(LOG_STARTS_TABLE, topic.name.encode() + b"\0")
        }
        for name in self.topics.segment_history(topic.name):
            if self.store.exists(name):
                self._writers[name] = self._recover_segment(name, parts)
        for p in parts:
            p.writer = self._writers[self.topics.segment_of_partition(topic, p.partition, segments).name]
            p.segment_index(p.writer)
            p.next_offset = p.high_watermark = (p.last[-1] + 1) if p.last else log_starts.get(p.partition, 0)
            p.log_start = max(log_starts.get(p.partition, 0), p.base[0] if p.base else p.next_offset)
            if p.log_start > p.next_offset:
                p.next_offset = p.high_watermark = p.log_start
            p.drop_entries_below(p.log_start)
        return parts

    def _recover_segment(self, name: str, parts: list[PartitionLog]) -> SegmentWriter:
        """Load a segment's index segment, then index whatever the data segment holds past it."""
        index_name = name + INDEX_SUFFIX
        with contextlib.suppress(SegmentExistsError):
            self.store.create_segment(index_name).result(30)
        data_info = self.store.get_info(name)
        index_info = self.store.get_info(index_name)
        raw = self._read_fully(index_name, index_info.start_offset, index_info.length)
        writer = SegmentWriter(self.store, name, data_info.length, index_info.length)
        scan_from = data_info.start_offset
        usable = len(raw) - len(raw) % INDEX_ENTRY.size
        for off in range(0, usable, INDEX_ENTRY.size):
            (partition, base, pos, length, last_delta, max_ts, pid, epoch, seq, _attrs) = INDEX_ENTRY.unpack_from(
                raw, off)
            if pos + length > data_info.length:
                break  # an index entry can never run ahead of durable data; stop trusting it here
            if pos >= data_info.start_offset and partition < len(parts):
                self._recovered_batch(parts[partition], writer, base, base + last_delta, pos, length, max_ts,
                                      pid, epoch, seq)
            scan_from = max(scan_from, pos + length)
        if usable != len(raw) or scan_from < data_info.length:
            # The index lags the data (a crash before it was written): index the tail and persist it.
            missing = self._scan_tail(name, scan_from, data_info.length, writer, parts)
            if usable != len(raw):
                log.warning("index segment %s has a torn tail; rebuilding its end", index_name)
            if missing:
                self.store.append(index_name, b"".join(missing)).result(30)
                writer.index_tail = self.store.get_info(index_name).length
        return writer

    def _scan_tail(self, name: str, start: int, end: int, writer: SegmentWriter,
                   parts: list[PartitionLog]) -> list[bytes]:
        entries = []
        pos = start
        while pos < end:
            head = self._read_fully(name, pos, ENVELOPE.size + BATCH_HEADER_SIZE)
            magic, version, partition, length = ENVELOPE.unpack_from(head)
            if magic != ENVELOPE_MAGIC or version != ENVELOPE_VERSION:
                raise StoreError(f"{name}: no Kafka batch envelope at {pos}")
            h = _BATCH_HEADER.unpack_from(head, ENVELOPE.size)
            base, last_delta, max_ts, pid, epoch, seq, attrs = h[0], h[6], h[8], h[9], h[10], h[11], h[5]
            batch_pos = pos + ENVELOPE.size
            if partition < len(parts):
                self._recovered_batch(parts[partition], writer, base, base + last_delta, batch_pos, length, max_ts,
                                      pid, epoch, seq)
            entries.append(INDEX_ENTRY.pack(partition, base, batch_pos, length, last_delta, max_ts, pid, epoch,
                                            seq, attrs))
            pos = batch_pos + length
        return entries

    @staticmethod
    def _recovered_batch(p: PartitionLog, writer: SegmentWriter, base: int, last: int, pos: int, length: int,
                         max_ts: int, pid: int, epoch: int, seq: int) -> None:
        if p.last and base != p.last[-1] + 1:
            # base <= last: already indexed (an entry repeated by a crash between index appends).
            # base > last + 1: a batch made durable in a successor while an earlier one in the
            # predecessor was not; it was never acknowledged (acks wait for the high watermark), so
            # it is not part of the partition and its offsets are assigned again.
            return
        p.add_entry(p.segment_index(writer), base, last, pos, length, max_ts)
        if pid >= 0:
            state = p.producers.get(pid)
            if state is None or epoch > state.epoch:
                state = p.producers[pid] = ProducerState(epoch)
            if epoch == state.epoch:
                state.batches.append((seq, seq + (last - base), base))

    def _read_fully(self, name: str, offset: int, length: int) -> bytes:
        out = bytearray()
        while len(out) < length:
            r = self.store.read(name, offset + len(out), min(READ_CHUNK, length - len(out))).result(60)
            if not r.data:
                break
            out += r.data
        return bytes(out)

    # -- topic lifecycle -------------------------------------------------------------------------------
    def ensure_topic(self, topic: TopicInfo) -> list[PartitionLog]:
        """The partition logs of ``topic``, loading them (blocking) the first time."""
        parts = self._logs.get(topic.name)
        if parts is not None and len(parts) >= topic.partition_count:
            return parts
        with self._load_lock:
            parts = self._logs.get(topic.name)
            if parts is None:
                parts = self._logs[topic.name] = self._load(topic)
            elif len(parts) < topic.partition_count:
                self._grow(topic, parts)
        return parts

    def _grow(self, topic: TopicInfo, parts: list[PartitionLog]) -> None:
        segments = self.topics.current_segments(topic.name)
        for p in range(len(parts), topic.partition_count):
            log_ = PartitionLog(topic.name, p)
            log_.writer = self._writers[self.topics.segment_of_partition(topic, p, segments).name]
            log_.segment_index(log_.writer)
            parts.append(log_)

    def prepare_successors(self, names: list[str]) -> None:
        """Blocking: make sure each successor segment has its index segment (before the switch)."""
        for name in names:
            with contextlib.suppress(SegmentExistsError):
                self.store.create_segment(name + INDEX_SUFFIX).result(30)

    def switch_segments(self, topic: TopicInfo, successors: list[SegmentRange]) -> int:
        """Point every partition whose slice a successor now owns at that successor. Runs on the
        reactor between creating the successors and sealing the predecessors: appends already handed
        to a predecessor are accepted there before its seal; every later one goes to a successor, so
        per-partition order holds across the switch. Returns how many partitions moved."""
        parts = self._logs.get(topic.name, [])
        moved = 0
        for p in parts:
            start = topic.slices[p.partition][0]
            seg = next((s for s in successors if s.contains(start)), None)
            if seg is None or (p.writer is not None and p.writer.name == seg.name):
                continue
            writer = self._writers.get(seg.name)
            if writer is None:
                writer = self._writers[seg.name] = SegmentWriter(self.store, seg.name, 0, 0)
            p.writer = writer
            p.segment_index(writer)
            moved += 1
        return moved

    def _reload_after_failure(self, topic: str) -> None:
        """After a failed append the partition's offsets and the segment tails this gateway assumed
        are unknown: once in-flight appends settle, rebuild the topic from the store (the truth).
        Produce answers NOT_LEADER_OR_FOLLOWER (retriable) meanwhile; idempotent retries are
        recognised by the rebuilt producer state."""
        if topic in self._reloading:
            return
        self._reloading.add(topic)

        def reload() -> None:
            info = self.topics.get(topic)
            if info is not None:
                with self._load_lock:
                    self._logs[topic] = self._load(info)

        def finished(result: Any) -> Any:
            self._reloading.discard(topic)
            if isinstance(result, Failure):
                log.error("reloading %s failed: %s", topic, result.getErrorMessage())
            return None

        reactor.callLater(0.5, lambda: self.blocking(reload).addBoth(finished))

    def topic_event(self, event: str, topic: TopicInfo) -> None:
        """TopicRegistry listener (called on a worker thread)."""
        if event == "deleted":
            reactor.callFromThread(self._forget, topic.name)
        elif event in ("created", "grown"):
            self.ensure_topic(topic)

    def _forget(self, name: str) -> None:
        parts = self._logs.pop(name, [])
        for p in parts:
            for d in p.waiters:
                if not d.called:
                    d.callback(None)
            p.waiters = []

    def partition(self, topic: str, partition: int) -> PartitionLog:
        parts = self._logs.get(topic)
        if parts is None or not 0 <= partition < len(parts):
            raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{partition}")
        return parts[partition]

    def loaded(self, topic: str) -> bool:
        return topic in self._logs

    def partition_logs(self, topic: str) -> list[PartitionLog]:
        return self._logs.get(topic, [])

    # -- produce -----------------------------------------------------------------------------------------
    def append(self, topic: TopicInfo, partition: int, records: Any, max_message_bytes: int) -> defer.Deferred:
        """Append one produce request's batch; a Deferred of its base offset once durable.
        Raises PartitionError synchronously for a request that can be refused at once."""
        p = self.partition(topic.name, partition)
        try:
            (batch,) = validate_produce_records(records)
        except RecordBatchError as exc:
            raise PartitionError(exc.error_code, str(exc)) from exc
        h = batch.header
        if h.size > max_message_bytes:
            raise PartitionError(ErrorCode.MESSAGE_TOO_LARGE,
                                 f"batch of {h.size} bytes exceeds max.message.bytes={max_message_bytes}")
        if h.is_transactional or h.is_control:
            raise PartitionError(ErrorCode.INVALID_RECORD, "transactional batches are not supported yet")
        writer = p.writer
        if writer is None or writer.failed is not None or topic.name in self._reloading:
            raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic.name}-{partition} is recovering")
        state = None
        if h.producer_id >= 0:
            state, duplicate = self._check_sequence(p, h)
            if duplicate is not None:
                return duplicate
        base = p.next_offset
        last = base + h.last_offset_delta
        p.next_offset = last + 1
        # Only the first 16 bytes change (baseOffset, partitionLeaderEpoch; outside the CRC): copy
        # those, and let the join below be the one copy of the batch.
        head = bytearray(batch.data[:16])
        set_base_offset(head, base, 0)
        _LEADER_EPOCH.pack_into(head, 12, 0)
        envelope = ENVELOPE.pack(ENVELOPE_MAGIC, ENVELOPE_VERSION, partition, h.size)
        data = b"".join((envelope, head, batch.data[16:]))
        expected = writer.tail
        position = expected + ENVELOPE.size
        writer.tail += len(data)
        p.add_entry(p.segment_index(writer), base, last, position, h.size, h.max_timestamp)
        entry = INDEX_ENTRY.pack(partition, base, position, h.size, h.last_offset_delta, h.max_timestamp,
                                 h.producer_id, h.producer_epoch, h.base_sequence, h.attributes)
        retries: list[defer.Deferred] = []  # duplicates of this batch that arrive while it is in flight
        if state is not None:
            state.batches.append((h.base_sequence, h.base_sequence + h.last_offset_delta, base))
            state.in_flight[base] = retries
        acked: defer.Deferred = defer.Deferred()
        # [last offset, durable?, ack]: acknowledged only once the high watermark passes it, i.e. it
        # and every earlier batch of the partition are durable (they may sit in another segment).
        marker = [last, False, acked]
        p.pending.append(marker)

        def durable(_: Any) -> None:
            marker[1] = True
            writer.index(entry)
            passed = []
            while p.pending and p.pending[0][1]:
                done = p.pending.popleft()
                p.high_watermark = done[0] + 1
                passed.append(done[2])
            if passed:
                p.wake()
            for d in passed:
                d.callback(None)

        def failed(failure: Any) -> None:
            log.error("append to %s failed: %s", writer.name, failure.getErrorMessage())
            writer.failed = failure.value
            self._reload_after_failure(p.topic)
            # Nothing after this batch can be acknowledged in order any more: fail those too (they
            # may already be durable in a successor); clients retry and the reload dedupes them.
            doomed = []
            while p.pending and p.pending[-1] is not marker:
                doomed.append(p.pending.pop())
            if p.pending:
                p.pending.pop()
            for m in [marker, *reversed(doomed)]:
                if not m[2].called:
                    m[2].errback(failure)

        def settle(result: Any) -> Any:
            if state is not None:
                state.in_flight.pop(base, None)
            for d in retries:
                if isinstance(result, Failure):
                    d.errback(result)
                else:
                    d.callback(base)
            return result if isinstance(result, Failure) else base

        to_deferred(self.store.append(writer.name, data, expected_offset=expected,
                                      events=h.last_offset_delta + 1)).addCallbacks(durable, failed)
        return acked.addBoth(settle)

    def _check_sequence(self, p: PartitionLog, h: Any) -> tuple[ProducerState, defer.Deferred | None]:
        """Kafka's idempotence rules for one batch: returns the producer state and, for a duplicate,
        a Deferred of the original base offset."""
        state = p.producers.get(h.producer_id)
        first, last = h.base_sequence, h.base_sequence + h.last_offset_delta
        if state is None:
            state = p.producers[h.producer_id] = ProducerState(h.producer_epoch)
            return state, None
        if h.producer_epoch < state.epoch:
            raise PartitionError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                 f"producer {h.producer_id} epoch {h.producer_epoch} is older than {state.epoch}")
        if h.producer_epoch > state.epoch:
            if first != 0:
                raise PartitionError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     f"new epoch {h.producer_epoch} must start at sequence 0, not {first}")
            p.producers[h.producer_id] = state = ProducerState(h.producer_epoch)
            return state, None
        for seq_first, seq_last, base in state.batches:
            if seq_first == first and seq_last == last:
                retries = state.in_flight.get(base)
                if retries is not None:
                    dup: defer.Deferred = defer.Deferred()
                    retries.append(dup)
                    return state, dup
                return state, defer.succeed(base)
        if state.batches:
            expected = (state.batches[-1][1] + 1) & 0x7FFFFFFF
            if first != expected:
                raise PartitionError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     f"producer {h.producer_id}: sequence {first}, expected {expected}")
        return state, None

    # -- fetch -------------------------------------------------------------------------------------------
    def check_fetch_offset(self, p: PartitionLog, offset: int) -> None:
        if offset < p.log_start or offset > p.high_watermark:
            raise PartitionError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"offset {offset} outside [{p.log_start}, {p.high_watermark}] of "
                                 f"{p.topic}-{p.partition}")

    def read(self, p: PartitionLog, offset: int, max_bytes: int, limit: int | None = None) -> defer.Deferred:
        """Durable batches of ``p`` from the one holding ``offset``: whole batches, at least one even if
        larger than ``max_bytes`` (as Kafka does), never past the high watermark (or ``limit``)."""
        end = p.high_watermark if limit is None else min(limit, p.high_watermark)
        i = p.entry_at(offset)
        runs: list[tuple[str, int, int, list[tuple[int, int]]]] = []  # segment, start, end, batch ranges
        total = 0
        while i < len(p.base) and p.base[i] < end:
            length = p.length[i]
            if total and total + length > max_bytes:
                break
            seg = p.segments[p.seg[i]].name
            pos = p.pos[i]
            if runs and runs[-1][0] == seg and runs[-1][2] + ENVELOPE.size == pos and runs[-1][2] - runs[-1][1] < (
                    4 * READ_CHUNK):
                name, start, _, ranges = runs[-1]
                ranges.append((pos - start, length))
                runs[-1] = (name, start, pos + length, ranges)
            else:
                runs.append((seg, pos, pos + length, [(0, length)]))
            total += length
            i += 1
        if not runs:
            return defer.succeed(b"")
        reads = [self._read_range(seg, start, stop - start) for seg, start, stop, _ in runs]

        def assemble(blobs: list[bytes]) -> bytes:
            parts = []
            for (_, _, _, ranges), blob in zip(runs, blobs, strict=True):
                if len(ranges) == 1:
                    parts.append(blob)
                else:
                    view = memoryview(blob)
                    parts.extend(view[off : off + length] for off, length in ranges)
            return b"".join(parts)

        return defer.gatherResults(reads, consumeErrors=True).addCallback(assemble)

    def _read_range(self, segment: str, offset: int, length: int) -> defer.Deferred:
        """All of [offset, offset+length) of a segment (the store may answer in pieces)."""
        pieces: list[bytes] = []
        result: defer.Deferred = defer.Deferred()

        def next_piece(pos: int) -> None:
            remaining = offset + length - pos
            if remaining <= 0:
                result.callback(pieces[0] if len(pieces) == 1 else b"".join(pieces))
                return
            d = to_deferred(self.store.read(segment, pos, min(remaining, 4 * READ_CHUNK)))

            def got(r: Any) -> None:
                if not r.data:
                    result.errback(StoreError(f"{segment}: short read at {pos}"))
                    return
                pieces.append(r.data)
                next_piece(pos + len(r.data))

            d.addCallbacks(got, result.errback)

        next_piece(offset)
        return result

    def wait_for_data(self, parts: list[PartitionLog], timeout: float) -> defer.Deferred:
        """A Deferred that fires when any of ``parts`` gets new durable data, or after ``timeout``."""
        d: defer.Deferred = defer.Deferred()
        for p in parts:
            p.waiters.append(d)
        timer = reactor.callLater(timeout, lambda: d.called or d.callback(None))

        def done(r: Any) -> Any:
            if timer.active():
                timer.cancel()
            for p in parts:
                if d in p.waiters:
                    p.waiters.remove(d)
            return r

        return d.addBoth(done)

    # -- offsets by time -----------------------------------------------------------------------------
    def offset_for_timestamp(self, p: PartitionLog, timestamp: int) -> defer.Deferred:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``, or (-1, -1)."""
        i = max(bisect.bisect_left(p.running_max_ts, timestamp), p.entry_at(p.log_start))
        if i >= len(p.base) or p.base[i] >= p.high_watermark:
            return defer.succeed((-1, -1))
        return self._batch_records(p, i).addCallback(
            lambda recs: next(((r.offset, r.timestamp) for r in recs if r.timestamp >= timestamp
                               and r.offset >= p.log_start), (-1, -1)))

    def offset_of_max_timestamp(self, p: PartitionLog) -> defer.Deferred:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
        end = p.durable_entries()
        if end == 0:
            return defer.succeed((-1, -1))
        target = p.running_max_ts[end - 1]
        best = bisect.bisect_left(p.running_max_ts, target, 0, end)  # the first batch reaching it
        return self._batch_records(p, best).addCallback(
            lambda recs: next(((r.offset, r.timestamp) for r in recs if r.timestamp == target), (-1, -1)))

    def _batch_records(self, p: PartitionLog, i: int) -> defer.Deferred:
        d = self._read_range(p.segments[p.seg[i]].name, p.pos[i], p.length[i])
        return d.addCallback(lambda blob: list(next(iter_batches(blob)).records()))

    # -- retention and DeleteRecords ------------------------------------------------------------------
    def advance_log_start(self, p: PartitionLog, offset: int) -> defer.Deferred:
        """Move ``p``'s log start to ``offset`` (durably), then truncate whatever segment prefix no
        partition needs any more."""
        if offset <= p.log_start:
            return defer.succeed(p.log_start)
        offset = min(offset, p.high_watermark)
        key = p.topic.encode() + b"\0" + str(p.partition).encode()

        def persist() -> None:
            self.tables.put(LOG_STARTS_TABLE, [(key, str(offset).encode())])

        d = self.blocking(persist)

        def applied(_: Any) -> int:
            p.log_start = max(p.log_start, offset)
            p.drop_entries_below(p.log_start)
            self._truncate_segments(p.topic)
            return p.log_start

        return d.addCallback(applied)

    def _truncate_segments(self, topic: str) -> None:
        """Truncate each segment of ``topic`` below the first batch any of its partitions still needs."""
        parts = self._logs.get(topic, [])
        needed: dict[str, int] = {}
        for p in parts:
            for idx, writer in enumerate(p.segments):
                # First live batch of p in this segment (segment indices never decrease along the
                # index), or the segment's tail when p has none there.
                i = bisect.bisect_left(p.seg, idx)
                first = p.pos[i] - ENVELOPE.size if i < len(p.seg) and p.seg[i] == idx else writer.tail
                needed[writer.name] = min(needed.get(writer.name, first), first)
        for name, offset in needed.items():
            if offset > 0:
                self.store.truncate(name, offset).add_done_callback(
                    lambda f, n=name: f.exception() and log.warning("truncating %s failed: %r", n, f.exception()))

    def enforce_retention(self, topic: TopicInfo, now_ms: int | None = None) -> list[defer.Deferred]:
        """Apply retention.ms and retention.bytes to every partition of ``topic``."""
        parts = self._logs.get(topic.name)
        if not parts:
            return []
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        retention_ms = int(topic.config("retention.ms"))
        retention_bytes = int(topic.config("retention.bytes"))
        out = []
        for p in parts:
            new_start = p.log_start
            end = p.durable_entries()
            if retention_ms >= 0:
                for i in range(end):  # stops at the first batch young enough to keep
                    if p.max_ts[i] >= now_ms - retention_ms:
                        break
                    new_start = max(new_start, p.last[i] + 1)
            if retention_bytes >= 0:
                size = p.bytes
                for i in range(end):  # stops as soon as what remains fits
                    if size <= retention_bytes:
                        break
                    size -= p.length[i]
                    new_start = max(new_start, p.last[i] + 1)
            if new_start > p.log_start:
                out.append(self.advance_log_start(p, new_start))
        return out
