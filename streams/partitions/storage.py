"""The Kafka-level storage boundary between the handlers and the segment store.

``PartitionStorage`` is what handlers may call (in the manner of tansu's ``Storage``): open a topic's
partitions, append, fetch, long-poll, report offsets, list offsets, and move a log start. Every method
runs on the reactor thread and answers at once or with a Deferred; refusals that need no I/O raise
``PartitionError`` synchronously. ``SegmentPartitionStorage`` implements it over the segment store and
also serves the gateway's own callers: loading at start, topic events, scaling switches, retention.

All partition state is owned by the reactor thread. Loads and reloads read the store on the worker
pool (``blocking``) and build fresh partitions there, which the reactor installs; store futures come
back through ``to_deferred``. Transactions: ``append`` admits a transactional batch only while its
partition is in the producer's ongoing transaction (``transaction_check``), ``write_marker`` appends
the coordinator's commit/abort markers, and read_committed fetches and list-offsets stop at the last
stable offset (``transactions.PartitionTransactions``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from millrace.protocol.records import (
    BatchHeader,
    ControlRecordType,
    build_control_batch,
    iter_batches,
    set_base_offset,
)
from millrace.store.contracts import AttributeUpdate, AttributeUpdateType, SegmentService
from millrace.store.controller import SegmentRange
from millrace.store.errors import SegmentExistsError, SegmentNotFoundError
from millrace.store.tables import TableStore
from millrace.streams.errors import PartitionError, Reason, store_failure
from millrace.streams.futures import on_reactor, to_deferred
from millrace.streams.partitions import reads, retention
from millrace.streams.partitions.admission import admit_batch
from millrace.streams.partitions.cleaner import LogCleaner
from millrace.streams.partitions.compaction import COMPACTIONS_TABLE, forget_topic
from millrace.streams.partitions.formats import (
    ENVELOPE,
    INDEX_SUFFIX,
    IndexEntry,
    envelope,
    set_leader_epoch,
)
from millrace.streams.partitions.loading import (
    LOG_STARTS_TABLE,
    LoadedTopic,
    load_topic,
    log_start_key,
    segments_of_partitions,
    take_snapshot,
)
from millrace.streams.partitions.partition import PartitionLog, PartitionOffsets
from millrace.streams.partitions.producers import MARKER_COORDINATOR_EPOCH, ProducerState, RefusedSequences
from millrace.streams.partitions.segments import BLOCKING_TIMEOUT, SegmentWriter, create_index_segment
from millrace.streams.partitions.snapshots import delete_snapshots
from millrace.streams.partitions.waiters import wait_for_any
from millrace.streams.partitions.watermark import IdempotentBatch, PendingAppend
from millrace.streams.partitions.writer_events import WriterEvents, attribute_key
from millrace.streams.producer_ids import ProducerIdAllocator
from millrace.streams.topics import TopicInfo, TopicRegistry, deletes_old_data

log = logging.getLogger(__name__)
LOAD_FAILURE_LOG_SECONDS = 60.0
MAX_LOAD_FAILURES_REMEMBERED = 1024

# ListOffsets' special timestamps
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
RELOAD_DELAY_SECONDS = 0.5  # a pause before a reload, so a load that fails is not retried in a tight loop


# compression.type -> the codec a topic stores its batches with (``producer``: as the producer sent them)
def _log_failure(failure: Failure, doing: str, what: str) -> None:
    log.warning("%s %s failed: %s", doing, what, failure.getErrorMessage())


@dataclass(frozen=True, slots=True)
class FetchedRecords:
    """One partition's answer to a fetch."""

    records: bytes
    offsets: PartitionOffsets
    # Transactions hook: (producer id, first offset) of aborted transactions in the range, for read_committed.
    aborted_transactions: tuple[tuple[int, int], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class PlannedFetch:
    """A partition's fetch: how many bytes it returns (known when asked), and the records."""

    size: int
    result: defer.Deferred[FetchedRecords]


@dataclass(slots=True)
class _LogStartWrites:
    """A partition's log-start table writes (reactor thread): the value known durable, whether a
    write is running, and the moves waiting for a write that covers them (wanted start, Deferred)."""

    durable: int
    running: bool = False
    waiting: list[tuple[int, defer.Deferred[int]]] = field(default_factory=list)


class PartitionStorage(Protocol):
    """What handlers may do with partitions (reactor thread only)."""

    def open_topic(self, topic: TopicInfo) -> defer.Deferred[list[PartitionLog]]:
        """The topic's partitions, loading them (off the reactor) the first time or after growth."""
        ...

    def offsets(self, p: PartitionLog) -> PartitionOffsets:
        """Log start, high watermark and last stable offset now (this node's copy: see ``leader_offsets``)."""
        ...

    def leader_offsets(self, p: PartitionLog) -> PartitionOffsets:
        """``offsets`` as the partition's leader knows them; PartitionError NOT_LEADER_OR_FOLLOWER on a
        cluster node that does not lead it now, or has not loaded it in its current term: another
        node's copy may be stale (a client told a stale end offset would take it as truncation)."""
        ...

    def append(self, topic: TopicInfo, p: PartitionLog, records: bytes | bytearray | memoryview | None, now_ms: int | None = None,
               events: WriterEvents | None = None, *, transactional_id: str | None = None,
               producer_owner: str | None = None) -> defer.Deferred[int]:
        """Append one produce request's batch; its base offset once the high watermark passes it.
        ``now_ms`` is the broker time its timestamps are checked against (and a LogAppendTime topic
        stamps), by default the storage's clock. ``events``: a native writer's event numbers
        (``writer_events``): a batch written before answers ``ALREADY_WRITTEN`` instead of an offset.
        ``transactional_id``: the producer's, which a transactional batch needs; ``producer_owner``: the
        principal an idempotent batch's producer id must have been issued to (None: a caller that
        checked the id itself, a native writer's against its writer id)."""
        ...

    def now_ms(self) -> int:
        """The storage's clock, in ms (what LogAppendTime stamps)."""
        ...

    def fetch(self, p: PartitionLog, offset: int, max_bytes: int, isolation: int = READ_UNCOMMITTED,
              min_one: bool = True) -> PlannedFetch:
        """Whole durable batches from the one holding ``offset``, at most ``max_bytes`` of them but with
        ``min_one`` at least one even if larger; their size is known at once, the bytes later."""
        ...

    def wait_for_data(self, parts: Sequence[PartitionLog], timeout: float) -> defer.Deferred[None]:
        """Fires when any of ``parts`` gets new durable data, or after ``timeout`` seconds."""
        ...

    def list_offset(self, p: PartitionLog, timestamp: int,
                    isolation: int = READ_UNCOMMITTED) -> defer.Deferred[tuple[int, int]]:
        """(offset, timestamp) for ListOffsets' ``timestamp`` (or LATEST, EARLIEST, MAX_TIMESTAMP)."""
        ...

    def delete_records(self, p: PartitionLog, offset: int) -> defer.Deferred[int]:
        """Move the log start to ``offset`` (-1: the high watermark); the new log start once durable."""
        ...


class Leadership(Protocol):
    """On a cluster node: which containers this node runs, in which ownership term. A partition is
    served only by the node running its open segment's container, and only from state loaded during
    the current term (another node may have appended in between)."""

    def terms(self) -> dict[int, int]:
        """Container id -> ownership epoch, for the containers running here now (any thread)."""
        ...

    def container_of(self, segment: str) -> int:
        ...


class SegmentPartitionStorage(PartitionStorage):
    """Kafka partitions over stream segments: the one owner of all partition state (reactor thread)."""

    def __init__(self, store: SegmentService, topics: TopicRegistry, tables: TableStore,
                 blocking: Callable[..., defer.Deferred[Any]], clock: IReactorTime,
                 max_message_bytes: int) -> None:
        """Blocking (makes sure the log-start table exists): construct before the reactor runs."""
        self.store = store
        self.topics = topics
        self.tables = tables
        self.blocking = blocking  # runs a blocking call on the worker pool; its Deferred fires on the reactor
        self.clock = clock
        self.max_message_bytes = max_message_bytes  # the broker-wide cap on a batch
        self._topics: dict[str, list[PartitionLog]] = {}
        self._writers: dict[str, SegmentWriter] = {}  # data segment name -> its writer
        self._loading: dict[str, list[defer.Deferred[None]]] = {}  # topic -> callers waiting for its load
        # topic -> when its last failed load was logged: a topic that cannot load (its stored data does
        # not parse) is refused at every request and named in the log once a minute, never dropped.
        self._load_failures_logged: dict[str, float] = {}
        self._reloading: set[str] = set()
        # topic -> its store appends not answered yet, and reloads waiting for them to be (``_settled``)
        self._in_flight: Counter[str] = Counter()
        self._settle_waiters: dict[str, list[defer.Deferred[None]]] = {}
        # topic -> failed idempotent batches (partition, pending append, refusal) the next reload answers
        self._unresolved: dict[str, list[tuple[int, PendingAppend, Failure]]] = {}
        self._refused = RefusedSequences()  # so a batch behind a retriable refusal is not out of sequence
        self._log_start_writes: dict[PartitionLog, _LogStartWrites] = {}  # partitions whose start moved
        # topic -> the bytes its index segments held when its last partition-state snapshot was taken
        self._snapshot_marks: dict[str, int] = {}
        self._snapshotting = False  # a snapshot round is running on the worker pool
        # Raises PartitionError unless (topic, partition) is in the ongoing transaction of the producer
        # id at that epoch, of that transactional id, or returns the question to ask the coordinator on
        # another node about it (``_verify_transaction``); set by the transaction coordinator (None:
        # transactional batches refused).
        self.transaction_check: Callable[[str, int, int, int, str], Callable[[], defer.Deferred[None]] | None] | None = None
        # What tells whether an idempotent producer id was issued to a principal (None: not checked).
        self.producer_ids: ProducerIdAllocator | None = None
        # A cluster node's leadership (None in one process: every partition is served here), and the
        # terms each topic's installed partitions were loaded under.
        self.leadership: Leadership | None = None
        self._loaded_terms: dict[str, dict[int, int]] = {}
        if not tables.exists(LOG_STARTS_TABLE):
            with contextlib.suppress(SegmentExistsError):
                tables.create_table(LOG_STARTS_TABLE)
        if not tables.exists(COMPACTIONS_TABLE):
            with contextlib.suppress(SegmentExistsError):
                tables.create_table(COMPACTIONS_TABLE)
        self.cleaner = LogCleaner(self)  # compaction rounds of compacted topics (``cleaner``)

    # -- topics ------------------------------------------------------------------------------------
    def warm_up(self, concurrency: int = 2) -> defer.Deferred[int]:
        """Reactor: load every topic (and partitioned stream) not loaded yet, ``concurrency`` at a time on
        the worker pool; fires with how many were loaded.

        A start does not wait for this: its time to ready would grow with the number of topics. A
        request for a topic still cold loads that topic first (``open_topic``, in arrival order), and the
        periodic work (retention, compaction, snapshots, producer expiry) reaches a topic once it is
        loaded, which this makes happen soon after a start whether or not a client asks for it. Few
        loads at a time, so requests' own blocking calls still find the pool free."""
        pending = [name for name in self.topics.record_keys() if name not in self._topics]
        loaded = 0

        def next_load() -> defer.Deferred[None] | None:
            while pending:
                topic = self.topics.record(pending.pop())
                if topic is not None and topic.name not in self._topics:
                    return self.open_topic(topic).addCallbacks(counted, failed, errbackArgs=(topic.name,))
            return None

        def counted(_: object) -> defer.Deferred[None] | None:
            nonlocal loaded
            loaded += 1
            return next_load()

        def failed(failure: Failure, name: str) -> defer.Deferred[None] | None:
            # Not fatal: the topic loads again on first use (a deletion meanwhile also lands here).
            log.warning("loading %s after the start failed: %s", name, failure.getErrorMessage())
            return next_load()

        chains = [d for d in (next_load() for _ in range(concurrency)) if d is not None]
        return defer.gatherResults(chains, consumeErrors=True).addCallback(lambda _: loaded)

    def _load(self, topic: TopicInfo) -> LoadedTopic:
        """Blocking: ``load_topic``, remembering the ownership terms that held before it read anything."""
        terms = self.leadership.terms() if self.leadership is not None else {}
        loaded = load_topic(self.store, self.clock, self.topics, self.tables, topic)
        loaded.terms = terms
        return loaded

    def check_leader(self, p: PartitionLog) -> None:
        """On a cluster node, refuse (NOT_LEADER_OR_FOLLOWER, retriable) a partition whose open
        segment's container runs elsewhere, and one whose state was loaded before this node's current
        term of that container (another node may have appended meanwhile): that one is reloaded."""
        leadership, writer = self.leadership, p.writer
        if leadership is None or writer is None:
            return
        container = leadership.container_of(writer.name)
        term = leadership.terms().get(container)
        if term is None:
            raise PartitionError(Reason.NOT_OWNER,
                                 f"{p.topic}-{p.partition}: container {container} runs on another node")
        if self._loaded_terms.get(p.topic, {}).get(container) != term:
            self._reload_after_failure(p.topic)
            raise PartitionError(Reason.LOADING,
                                 f"{p.topic}-{p.partition}: taking over container {container}, loading")

    def leads(self, p: PartitionLog) -> bool:
        """Whether this node serves ``p`` now (``check_leader`` passes): the periodic work (retention)
        touches only those, so a partition's log start moves on one node."""
        try:
            self.check_leader(p)
        except PartitionError:
            return False
        return True

    def loaded(self, name: str) -> list[PartitionLog] | None:
        return self._topics.get(name)

    def open_topic(self, topic: TopicInfo) -> defer.Deferred[list[PartitionLog]]:
        parts = self._topics.get(topic.name)
        if parts is not None and len(parts) >= topic.partition_count:
            return defer.succeed(parts)
        waiting = self._loading.get(topic.name)
        if waiting is not None:
            # One load per topic at a time; look again when it is done (the topic may have grown meanwhile).
            after: defer.Deferred[None] = defer.Deferred()
            waiting.append(after)
            return after.addCallback(lambda _: self.open_topic(topic))
        self._loading[topic.name] = []
        if parts is None:
            d = self.blocking(self._load, topic).addCallback(
                self._install)
        else:
            d = self.blocking(segments_of_partitions, self.topics, topic).addCallback(self._install_grown, topic)

        def finished(result: Any) -> Any:
            for waiter in self._loading.pop(topic.name, []):
                waiter.callback(None)
            if isinstance(result, Failure):
                self._log_failed_load(topic.name, result)
            else:
                self._load_failures_logged.pop(topic.name, None)
            return result

        return d.addBoth(finished)

    def _log_failed_load(self, name: str, failure: Failure) -> None:
        """Name a topic that cannot be loaded, and why (the store's message names the segment and the
        offset), at most once a minute: every request for it is refused until an operator repairs it, and
        every other topic keeps serving."""
        now = time.monotonic()
        if now - self._load_failures_logged.get(name, -LOAD_FAILURE_LOG_SECONDS) < LOAD_FAILURE_LOG_SECONDS:
            return
        self._load_failures_logged[name] = now
        if len(self._load_failures_logged) > MAX_LOAD_FAILURES_REMEMBERED:  # names of deleted topics go
            self._load_failures_logged.pop(next(iter(self._load_failures_logged)))
        log.error("topic %s cannot be loaded; its requests are refused (KAFKA_STORAGE_ERROR) until it is "
                  "repaired: %s", name, failure.getErrorMessage())

    def _install(self, loaded: LoadedTopic, replace: bool = False) -> list[PartitionLog]:
        """Take over a loaded topic's partitions (reactor; or the main thread before it runs). Partitions
        already installed stay (appends may be in flight on them) unless ``replace`` (a reload)."""
        name = loaded.topic.name
        current = self.topics.record(name)
        if current is None or current.topic_id != loaded.topic.topic_id:
            return loaded.partitions  # deleted (and perhaps created again) while loading: nothing to keep
        installed = self._topics.get(name)
        if installed is not None and not replace:
            # Loaded twice (a topic event and a request raced): keep the installed partitions and adopt only
            # partitions they lack, which are new and hold no data yet.
            names = [p.writer.name if p.writer is not None else "" for p in loaded.partitions]
            for writer in loaded.writers.values():
                self._writers.setdefault(writer.name, writer)
            return self._install_grown(names, loaded.topic)
        self._writers.update(loaded.writers)
        self._topics[name] = loaded.partitions
        self._loaded_terms[name] = loaded.terms
        return loaded.partitions

    def _install_grown(self, segment_names: list[str], topic: TopicInfo) -> list[PartitionLog]:
        """Add the partitions ``topic`` has beyond those installed; ``segment_names[p]`` is the open
        segment of partition p."""
        parts = self._topics.get(topic.name)
        if parts is None:
            raise PartitionError(Reason.UNKNOWN_PARTITION, f"topic {topic.name} is not loaded")
        for number in range(len(parts), min(topic.partition_count, len(segment_names))):
            writer = self._writers.get(segment_names[number])
            if writer is None:
                raise PartitionError(Reason.LOADING,
                                     f"segment {segment_names[number]} of {topic.name} is not loaded yet")
            parts.append(PartitionLog(topic.name, number, writer,
                                      folds=not topic.append_rules.compacted))
        return parts

    def topic_event(self, event: str, topic: TopicInfo) -> None:
        """TopicRegistry listener, on the worker thread that changed the topic. A new or grown topic's
        partitions are read right here, so they are ready when the change is answered: the reactor runs
        the hand-over (``on_reactor``) before the change's own result, which crosses after it."""
        if event == "deleted":
            on_reactor(self._forget, topic.name)
            try:
                self._drop_stored_state(topic.name)
            except Exception:  # the deletion itself stands; what is left is only unused
                log.exception("dropping the log starts and index segments of deleted %s failed", topic.name)
            return
        if event not in ("created", "grown"):
            return
        try:
            if event == "created":
                on_reactor(self._install, self._load(topic))
            else:
                on_reactor(self._grown, segments_of_partitions(self.topics, topic), topic)
        except Exception:  # the change itself stands; the partitions load on first use instead
            log.exception("loading the partitions of %s after it was %s failed", topic.name, event)

    def _grown(self, segment_names: list[str], topic: TopicInfo) -> None:
        if topic.name in self._topics:  # a topic never loaded loads whole on first use
            self._install_grown(segment_names, topic)

    def _forget(self, name: str) -> None:
        self._refused.forget(name)
        self._snapshot_marks.pop(name, None)
        for p in self._topics.pop(name, []):
            p.waiters.wake()
            self._log_start_writes.pop(p, None)
        # Its segment writers go too: a stream re-created under the name has segments of the same
        # names, which must start from what the store holds, not from these tails.
        scope, stream = self.topics.stream_of(name)
        prefix = f"{scope}/{stream}/"
        for segment in [n for n in self._writers if n.startswith(prefix)]:
            self._writers.pop(segment).discard_index()

    def _drop_stored_state(self, name: str) -> None:
        """Blocking (the deleting worker, before the stream goes): a deleted topic's log starts and
        index segments, which a topic or stream re-created under the name would otherwise load as its
        own (its segments have the same names)."""
        starts = [e.key for e in self.tables.entries(LOG_STARTS_TABLE, name.encode() + b"\0")]
        if starts:
            self.tables.remove(LOG_STARTS_TABLE, starts)
        forget_topic(self.store, self.tables, name)  # compacted segments live outside the stream's history
        delete_snapshots(self.store, *self.topics.stream_of(name))  # so do partition-state snapshots
        for segment in self.topics.segment_history(name):
            with contextlib.suppress(SegmentNotFoundError):
                self.store.delete(segment + INDEX_SUFFIX).result(BLOCKING_TIMEOUT)

    def is_reloading(self, topic: str) -> bool:
        """A reload of ``topic`` is under way: its installed partitions are about to be replaced."""
        return topic in self._reloading

    def reload(self, topic: str) -> None:
        """Rebuild ``topic``'s partitions from the store (reactor): a cluster node whose copy is out of
        date (another node scaled the topic) refuses its partitions retriably until then."""
        self._reload_after_failure(topic)

    def _reload_after_failure(self, topic: str) -> None:
        """After a failed append the partition's offsets and the segment tails this gateway assumed are
        unknown: once every append of the topic still in flight in the store has its answer, rebuild the
        topic from the store (the truth). Produce answers NOT_LEADER_OR_FOLLOWER (retriable) meanwhile;
        the rebuilt producer state recognises idempotent retries.

        The wait is what makes that last clause hold: an append failed as doomed (behind a failed one)
        may still land, and a load that read the segment before it did would install producer state
        without it, so the client's retry of that batch would be written a second time, and the
        producer's next batch refused as out of order (which makes librdkafka bump its epoch and
        resend its unacknowledged batches as new ones)."""
        if topic in self._reloading:
            return
        self._reloading.add(topic)

        def reload() -> defer.Deferred[Any]:
            info = self.topics.record(topic)
            if info is None:
                return defer.succeed(None)
            return self.blocking(self._load, info).addCallback(
                self._install, True)

        def finished(result: Any) -> None:
            self._reloading.discard(topic)
            if isinstance(result, Failure):
                log.error("reloading %s failed: %s", topic, result.getErrorMessage())
                if topic in self._unresolved:
                    self._reload_after_failure(topic)  # their answers wait for a reload that succeeds
                return
            self._resolve_after_reload(topic)

        self.clock.callLater(RELOAD_DELAY_SECONDS,
                             lambda: self._settled(topic).addCallback(lambda _: reload()).addBoth(finished))

    def _settled(self, topic: str) -> defer.Deferred[None]:
        """Fires once no append to ``topic`` is in flight in the store. While the topic reloads none
        starts (``_writable``), and every store append is answered in the end (the durable log's
        timeouts fail its container), so this fires."""
        if not self._in_flight[topic]:
            return defer.succeed(None)
        log.info("reloading %s after its %d appends in flight are answered", topic, self._in_flight[topic])
        waiter: defer.Deferred[None] = defer.Deferred()
        self._settle_waiters.setdefault(topic, []).append(waiter)
        return waiter

    def _answered(self, result: Any, topic: str) -> Any:
        """A store append of ``topic`` was answered (after its outcome was handled)."""
        self._in_flight[topic] -= 1
        if self._in_flight[topic] <= 0:
            del self._in_flight[topic]
            for waiter in self._settle_waiters.pop(topic, []):
                waiter.callback(None)
        return result

    # -- scaling -------------------------------------------------------------------------------------
    def prepare_successors(self, names: list[str]) -> None:
        """Blocking (worker): make sure each successor segment has its index segment before the switch."""
        for name in names:
            create_index_segment(self.store, name)

    def switch_segments(self, topic: TopicInfo, successors: list[SegmentRange]) -> int:
        """Point every partition whose slice a successor now owns at that successor. Runs on the reactor
        between creating the successors and sealing the predecessors: appends already handed to a
        predecessor are accepted there before its seal; every later one goes to a successor, so
        per-partition order holds across the switch. Returns how many partitions moved."""
        moved = 0
        stale = False
        for p in self._topics.get(topic.name, []):
            start = topic.slices[p.partition][0]
            seg = next((s for s in successors if s.contains(start)), None)
            if seg is None or (p.writer is not None and p.writer.name == seg.name):
                continue
            if not self.leads(p):
                # A cluster node's copy of a partition another node leads is not current: moving it on
                # would serve the successor from it. It is read again once the scale is done.
                stale = True
                continue
            writer = self._writers.get(seg.name)
            if writer is None:
                writer = self._writers[seg.name] = SegmentWriter(self.store, self.clock, seg.name, 0, 0)
            p.write_to(writer)
            moved += 1
        if stale:
            self._reload_after_failure(topic.name)
        return moved

    # -- produce -------------------------------------------------------------------------------------
    def offsets(self, p: PartitionLog) -> PartitionOffsets:
        return p.offsets()

    def leader_offsets(self, p: PartitionLog) -> PartitionOffsets:
        self.check_leader(p)
        return p.offsets()

    def _now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def now_ms(self) -> int:
        return self._now_ms()

    def expire_producers(self, expiration_ms: int) -> int:
        """Forget, in every loaded partition, producers idle for ``expiration_ms`` that hold no open
        transaction there (``producers.Producers.expire``); how many were forgotten."""
        before = self._now_ms() - expiration_ms
        return sum(p.producers.expire(before, p.txns.open) for parts in self._topics.values() for p in parts)

    def snapshot_round(self, min_growth: int, expiration_ms: int) -> defer.Deferred[None] | None:
        """Snapshot the partition state (``snapshots``) of each loaded topic served here whose index
        segments grew by ``min_growth`` bytes since its last snapshot was taken: on the worker pool, one
        topic after another, one round at a time. None when no round started."""
        if self._snapshotting:
            return None
        due = []
        for name, parts in self._topics.items():
            if not parts or name in self._reloading or not self.leads(parts[0]):
                continue
            size = sum({w.name: w.index_tail for p in parts for w in p.segments}.values())
            if size - self._snapshot_marks.get(name, 0) >= min_growth:
                due.append((name, size))
        if not due:
            return None
        self._snapshotting = True
        expire_before = self._now_ms() - expiration_ms

        def take_all() -> list[tuple[str, int]]:
            # Every topic tried is marked, with a snapshot or without (compacted, a batch a load would
            # drop, a store error): it is tried again once it has grown as much again, not every round.
            for name, _ in due:
                topic = self.topics.record(name)
                if topic is None:
                    continue
                try:
                    take_snapshot(self.store, self.clock, self.topics, self.tables, topic, expire_before)
                except Exception as e:  # noqa: BLE001 - a snapshot is an optimisation, never a failure
                    log.info("no snapshot of %s this round: %r", name, e)
            return due

        def finished(result: list[tuple[str, int]] | Failure) -> None:
            self._snapshotting = False
            if isinstance(result, Failure):
                _log_failure(result, "snapshotting", "partition state")
                return
            for name, size in result:
                if name in self._topics:
                    self._snapshot_marks[name] = size

        return self.blocking(take_all).addBoth(finished)

    def append(self, topic: TopicInfo, p: PartitionLog, records: bytes | bytearray | memoryview | None, now_ms: int | None = None,
               events: WriterEvents | None = None, *, transactional_id: str | None = None,
               producer_owner: str | None = None) -> defer.Deferred[int]:
        now_ms = self._now_ms() if now_ms is None else now_ms
        batch = admit_batch(topic, p.partition, records, now_ms)  # the one walk of its records
        rules = topic.append_rules
        h = batch.header
        limit = min(rules.max_message_bytes, self.max_message_bytes)
        if h.size > limit:
            raise PartitionError(Reason.RECORD_TOO_LARGE,
                                 f"batch of {h.size} bytes exceeds max.message.bytes={limit}")
        if h.is_control:
            raise PartitionError(Reason.INVALID_RECORD, "clients may not write control batches")
        if h.is_transactional:
            if h.producer_id < 0:
                raise PartitionError(Reason.INVALID_RECORD, "a transactional batch needs a producer id")
            if transactional_id is None:
                raise PartitionError(Reason.TRANSACTIONAL_ID_REQUIRED,
                                     "a transactional batch is sent with its producer's transactional id")
            if self.transaction_check is None:
                raise PartitionError(Reason.INVALID_RECORD, "transactions are not enabled")
            # The partition must be in the ongoing transaction of this transactional id, under this
            # producer id and epoch (KIP-890's verification): a late batch can never reopen a finished
            # one, nor another client's id write into someone's transaction. Confirmed here by the
            # coordinator on another node (``verify_transaction``), else an in-process lookup.
            if not p.verifications.admits(h.producer_id, h.producer_epoch, transactional_id):
                ask = self.transaction_check(p.topic, p.partition, h.producer_id, h.producer_epoch, transactional_id)
                if ask is not None:
                    # Confirmed, the batch is appended as if it came now (the partition or the producer
                    # may have moved on meanwhile: every check is made again).
                    return self._verify_transaction(p, h.producer_id, h.producer_epoch, transactional_id, ask).addCallback(
                        lambda _: self.append(topic, p, records, now_ms, events, transactional_id=transactional_id,
                                              producer_owner=producer_owner))
        elif (h.producer_id >= 0 and producer_owner is not None and self.producer_ids is not None
              and not self.producer_ids.owns(producer_owner, h.producer_id)):
            raise PartitionError(Reason.PRODUCER_NOT_OWNED, f"producer id {h.producer_id} was not issued to "
                                 f"{producer_owner}: ask for one with InitProducerId")
        try:
            writer = self._writable(p)
        except PartitionError as exc:
            if h.producer_id >= 0 and exc.reason.retriable:
                self._refused.refused(p.topic, p.partition, h.producer_id, h.producer_epoch, h.base_sequence)
            raise
        producer = None
        if h.producer_id >= 0:
            last_sequence = h.base_sequence + h.last_offset_delta
            try:
                producer, duplicate = p.producers.check(h.producer_id, h.producer_epoch, h.base_sequence,
                                                        last_sequence)
            except PartitionError as exc:
                expected = p.producers.next_sequence(h.producer_id, h.producer_epoch)
                if exc.reason is Reason.OUT_OF_ORDER_SEQUENCE and self._refused.explains_gap(
                        p.topic, p.partition, h.producer_id, h.producer_epoch, expected, h.base_sequence):
                    raise PartitionError(Reason.LOADING, f"{p.topic}-{p.partition}: producer {h.producer_id}'s "
                                         f"batch at sequence {expected} was refused here: resend from it") from exc
                # Rare, and librdkafka answers it by bumping the producer's epoch (its unacknowledged
                # batches are resent as new ones): worth a line to trace a duplicate back to.
                log.warning("%s-%d: refused producer %d epoch %d batch %d..%d: %s (refused here before: %s)",
                            p.topic, p.partition, h.producer_id, h.producer_epoch, h.base_sequence,
                            last_sequence, exc, self._refused.first_refused(p.topic, p.partition, h.producer_id))
                raise
            producer.last_ms = self._now_ms()
            if duplicate is not None:
                return duplicate
            if self._refused:
                self._refused.stored(p.topic, p.partition, h.producer_id, h.producer_epoch, last_sequence)
        if events is not None:
            written = p.writer_events.check(events)
            if written is not None:
                return written
        base = p.next_offset
        if h.is_transactional:
            p.txns.batch(h.producer_id, base)
        return self._store(p, writer, batch.data, h, producer, events)

    def forget_writer(self, topic: str, writer_id: str) -> None:
        """Drop ``writer_id``'s event numbers from every loaded partition of ``topic``: from memory at
        once, from its data segments' attributes in the background (a failure only leaves an attribute
        that a later load reads back). For writer ids that never append again: a committed native
        transaction's merge writer, whose numbers would otherwise stay in the segments forever."""
        for p in self._topics.get(topic, []):
            for segment in p.writer_events.forget(writer_id):
                removal = AttributeUpdate(attribute_key(writer_id, p.partition), type=AttributeUpdateType.REMOVE)
                with contextlib.suppress(SegmentNotFoundError):
                    to_deferred(self.store.update_attributes(segment, [removal])).addErrback(
                        _log_failure, "removing a writer attribute of", segment)

    def _writable(self, p: PartitionLog) -> SegmentWriter:
        self.check_leader(p)
        writer = p.writer
        if writer is None or writer.failed is not None or p.topic in self._reloading:
            if writer is not None and writer.failed is not None:
                self._reload_after_failure(p.topic)  # a reload that failed earlier is tried again
            raise PartitionError(Reason.LOADING, f"{p.topic}-{p.partition} is recovering")
        return writer

    def _verify_transaction(self, p: PartitionLog, producer_id: int, producer_epoch: int, transactional_id: str,
                            ask: Callable[[], defer.Deferred[None]]) -> defer.Deferred[None]:
        """Where the transaction coordinator runs on another node: fires once ``ask`` (the question to the
        coordinator, failing with its refusal) confirmed the producer's ongoing transaction includes the
        partition and no marker of the producer was written here meanwhile (PartitionError
        NOT_IN_TRANSACTION if one was: the transaction ended while the question was on its way)."""
        verifications = p.verifications
        guard = verifications.begin(producer_id, producer_epoch, transactional_id)

        def answered(_: None) -> None:
            if not verifications.confirm(producer_id, guard):
                raise PartitionError(Reason.NOT_IN_TRANSACTION, f"{p.topic}-{p.partition}: producer {producer_id}'s "
                                     f"transaction ended while it was being verified")

        return ask().addCallback(answered)

    def write_marker(self, p: PartitionLog, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int = MARKER_COORDINATOR_EPOCH) -> defer.Deferred[int]:
        """Append a transaction marker (the coordinator's control batch) for ``producer_id``; fires with
        its offset once durable, when the partition has closed the transaction (the last stable offset
        has moved past it and an abort is in the aborted index)."""
        writer = self._writable(p)
        marker = build_control_batch(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
                                     producer_id=producer_id, producer_epoch=producer_epoch,
                                     coordinator_epoch=coordinator_epoch)
        h = next(iter_batches(marker)).header
        p.producers.fence(producer_id, producer_epoch, self._now_ms(), coordinator_epoch)
        p.verifications.marker(producer_id)

        def closed(offset: int) -> int:
            p.txns.marker(producer_id, offset, commit)
            return offset

        # Runs when the high watermark passes the marker, before the partition's fetchers are woken.
        return self._store(p, writer, memoryview(marker), h, None).addCallback(closed)

    def _store(self, p: PartitionLog, writer: SegmentWriter, batch_data: memoryview, h: BatchHeader,
               producer: ProducerState | None, events: WriterEvents | None = None) -> defer.Deferred[int]:
        """Give the batch the partition's next offsets and append it; fires once acknowledged."""
        base = p.next_offset
        last = base + h.last_offset_delta
        p.next_offset = last + 1
        # Only the first 16 bytes change (baseOffset, partitionLeaderEpoch; outside the CRC): copy those,
        # and let the join below be the one copy of the batch.
        head = bytearray(batch_data[:16])
        set_base_offset(head, base, 0)
        set_leader_epoch(head, 0)
        data = b"".join((envelope(p.partition, h.size), head, batch_data[16:]))
        expected = writer.reserve(len(data))
        entry = IndexEntry.of_batch(p.partition, base, expected + ENVELOPE.size, h)
        p.index.append(p.segment_number(writer), base, last, entry.position, h.size, h.max_timestamp)
        retries: list[defer.Deferred[int]] = []  # duplicates of this batch that arrive while it is in flight
        if producer is not None:
            producer.batches.append((h.base_sequence, h.base_sequence + h.last_offset_delta, base))
            producer.in_flight[base] = retries
        identity = None if producer is None else IdempotentBatch(h.producer_id, h.producer_epoch, h.base_sequence,
                                                                 h.base_sequence + h.last_offset_delta)
        pending = p.watermark.track(last, identity)
        acked = pending.acked.addBoth(self._settle, producer, base, retries)
        attributes = () if events is None else (p.writer_events.appending(events, acked, writer.name),)
        stored = self.store.append(writer.name, data, expected_offset=expected, attributes=attributes,
                                   events=h.last_offset_delta + 1)
        self._in_flight[p.topic] += 1
        to_deferred(stored).addCallbacks(self._durable, self._failed, callbackArgs=(p, writer, entry, pending),
                                         errbackArgs=(p, writer, pending)).addBoth(self._answered, p.topic)
        return acked

    @staticmethod
    def _durable(_: Any, p: PartitionLog, writer: SegmentWriter, entry: IndexEntry, pending: PendingAppend) -> None:
        writer.index(entry)
        passed = p.watermark.made_durable(pending)
        if p.folds:
            p.index.fold(p.watermark.offset)
        if passed:
            # Producers hear first: a fetch woken here may answer in this same turn (a cache read).
            for acked in passed:
                acked.callback(None)
            p.waiters.wake()

    def _failed(self, failure: Failure, p: PartitionLog, writer: SegmentWriter, pending: PendingAppend) -> None:
        """Nothing from this batch on can be acknowledged in order any more. Each is refused, in the stream
        layer's terms (a moved container is not a broken disk), except an idempotent producer's batch: the
        store may hold it all the same (a container that failed mid-append recovers what its log had,
        and the batches behind it may land too), and a refusal tells the client it was not written, so
        once the client has bumped its epoch (librdkafka does, for an out-of-order answer on any
        partition) it would write it again as a new batch. Such a batch is answered after the reload,
        by whether the store holds it (``_resolve_after_reload``), as Kafka answers a produce only once
        its fate is known."""
        log.error("append to %s failed: %s", writer.name, failure.getErrorMessage())
        writer.failed = failure.value
        refusal = Failure(store_failure(failure.value, f"append to {p.topic}-{p.partition}"))
        for doomed in p.watermark.failed(pending):
            if doomed.batch is None:
                doomed.acked.errback(refusal)
            else:
                self._unresolved.setdefault(p.topic, []).append((p.partition, doomed, refusal))
        self._reload_after_failure(p.topic)

    def _resolve_after_reload(self, topic: str) -> None:
        """Answer the failed idempotent batches of ``topic`` by what the reloaded partitions hold: the
        stored base offset of one the store has, the refusal for one it does not (which nothing can
        append any more: every append was answered before the load read, and a moved container's log is
        fenced)."""
        parts = self._topics.get(topic)
        for partition, pending, refusal in self._unresolved.pop(topic, []):
            assert pending.batch is not None
            base = parts[partition].producers.stored_base(*pending.batch) \
                if parts is not None and partition < len(parts) else None
            if base is None:
                batch = pending.batch
                self._refused.refused(topic, partition, batch.producer_id, batch.epoch, batch.first_sequence)
                pending.acked.errback(refusal)
            else:
                log.info("%s-%d: a failed append of producer %d was found stored at offset %d", topic,
                         partition, pending.batch.producer_id, base)
                pending.acked.callback(base)

    @staticmethod
    def _settle(result: Any, producer: ProducerState | None, base: int, retries: list[defer.Deferred[int]]) -> Any:
        """The append's outcome: its base offset (as stored, when a reload found it), also for retries that
        waited on it."""
        if producer is not None:
            producer.in_flight.pop(base, None)
        if not isinstance(result, Failure) and result is not None:
            base = result
        for retry in retries:
            if isinstance(result, Failure):
                retry.errback(result)
            else:
                retry.callback(base)
        return result if isinstance(result, Failure) else base

    # -- fetch ---------------------------------------------------------------------------------------
    def fetch(self, p: PartitionLog, offset: int, max_bytes: int, isolation: int = READ_UNCOMMITTED,
              min_one: bool = True) -> PlannedFetch:
        self.check_leader(p)
        offsets = p.offsets()
        if offset < offsets.log_start or offset > offsets.high_watermark:
            raise PartitionError(Reason.OFFSET_OUT_OF_RANGE,
                                 f"offset {offset} outside [{offsets.log_start}, {offsets.high_watermark}] of "
                                 f"{p.topic}-{p.partition}")
        # read_committed stops at the last stable offset and is told the aborted transactions in its range.
        end = offsets.last_stable if isolation == READ_COMMITTED else offsets.high_watermark
        if offset >= end:
            return PlannedFetch(0, defer.succeed(FetchedRecords(b"", offsets)))
        plan = reads.plan_batches(p, offset, max_bytes, end, min_one)
        aborted: tuple[tuple[int, int], ...] = ()
        if isolation == READ_COMMITTED:
            aborted = tuple((a.producer_id, a.first_offset) for a in p.txns.aborted_between(offset, end))
        return PlannedFetch(plan.size, reads.read_plan(self.store, plan).addCallback(FetchedRecords, offsets, aborted))

    def wait_for_data(self, parts: Sequence[PartitionLog], timeout: float) -> defer.Deferred[None]:
        return wait_for_any(self.clock, [p.waiters for p in parts], timeout)

    # -- offsets -------------------------------------------------------------------------------------
    def list_offset(self, p: PartitionLog, timestamp: int,
                    isolation: int = READ_UNCOMMITTED) -> defer.Deferred[tuple[int, int]]:
        self.check_leader(p)
        offsets = p.offsets()
        if timestamp == LATEST:
            return defer.succeed((offsets.last_stable if isolation == READ_COMMITTED else offsets.high_watermark, -1))
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            return defer.succeed((offsets.log_start, -1))
        if timestamp == MAX_TIMESTAMP:
            return self._offset_of_max_timestamp(p)
        if timestamp >= 0:
            return self._offset_for_timestamp(p, timestamp)
        raise PartitionError(Reason.INVALID_REQUEST, f"no such ListOffsets timestamp {timestamp}")

    def _offset_for_timestamp(self, p: PartitionLog, timestamp: int,
                              after: int = -1) -> defer.Deferred[tuple[int, int]]:
        """(offset, timestamp) of the first record past ``after`` with timestamp >= ``timestamp``, or
        (-1, -1). A batch whose own maxTimestamp is below it is skipped unread; one read without such a
        record (a batch the cleaner emptied keeps its maxTimestamp) sends the search on to the next."""
        index = p.index
        i = index.first_reaching_timestamp(timestamp, start=index.entry_at(max(p.log_start, after + 1)))
        while i < len(index) and index.max_ts[i] < timestamp:
            i += 1
        if i >= len(index) or index.base[i] >= p.high_watermark:
            return defer.succeed((-1, -1))
        log_start, last = p.log_start, index.last[i]

        def pick(records: list[Any]) -> Any:
            found = next(((r.offset, r.timestamp) for r in records
                          if r.timestamp >= timestamp and r.offset >= log_start), None)
            return found if found is not None else self._offset_for_timestamp(p, timestamp, last)

        return reads.batch_records(self.store, p, i).addCallback(pick)

    def _offset_of_max_timestamp(self, p: PartitionLog) -> defer.Deferred[tuple[int, int]]:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
        index = p.index
        end = index.entries_below(p.high_watermark)
        if end == 0:
            return defer.succeed((-1, -1))
        target = index.running_max_ts[end - 1]
        best = index.first_reaching_timestamp(target, end=end)  # the first batch reaching it
        return reads.batch_records(self.store, p, best).addCallback(
            lambda records: next(((r.offset, r.timestamp) for r in records if r.timestamp == target), (-1, -1)))

    # -- log start: DeleteRecords and retention --------------------------------------------------------
    def delete_records(self, p: PartitionLog, offset: int) -> defer.Deferred[int]:
        self.check_leader(p)
        hw = p.high_watermark
        target = hw if offset == -1 else offset
        if target < 0 or target > hw:
            raise PartitionError(Reason.OFFSET_OUT_OF_RANGE,
                                 f"offset {offset} outside [0, {hw}] of {p.topic}-{p.partition}")
        return self._advance_log_start(p, target)

    def _advance_log_start(self, p: PartitionLog, offset: int) -> defer.Deferred[int]:
        """Move ``p``'s log start to ``offset``: in memory at once, so every request handled after this
        one sees it (Kafka handles a connection's requests one at a time; a ListOffsets or Fetch
        pipelined behind a DeleteRecords must not see the old start), and in the log-start table before
        the returned Deferred fires with the durable log start. The segment prefix no partition needs
        any more is truncated only once the new start is durable, so a crash never leaves a stored log
        start in front of truncated data."""
        writes = self._log_start_writes.get(p)
        if writes is None:
            writes = self._log_start_writes[p] = _LogStartWrites(p.log_start)
        offset = min(offset, p.high_watermark)
        if offset > p.log_start:
            p.log_start = offset
            p.index.drop_below(offset)
            p.txns.drop_below(offset)
        if writes.durable >= p.log_start:
            return defer.succeed(writes.durable)
        done: defer.Deferred[int] = defer.Deferred()
        writes.waiting.append((p.log_start, done))
        if not writes.running:
            self._write_log_start(p, writes)
        return done

    def _write_log_start(self, p: PartitionLog, writes: _LogStartWrites) -> None:
        """One table write at a time per partition, each of the newest log start: concurrent moves
        (DeleteRecords, retention) can then never store an older start over a newer one."""
        value = p.log_start
        writes.running = True

        def written(result: Any) -> None:
            writes.running = False
            settled = [d for wanted, d in writes.waiting if wanted <= value]
            writes.waiting = [(wanted, d) for wanted, d in writes.waiting if wanted > value]
            if isinstance(result, Failure):
                _log_failure(result, "storing the log start of", repr(p))
                for d in settled:
                    d.errback(result)
            else:
                writes.durable = max(writes.durable, value)
                self.truncate_segments(p.topic)
                for d in settled:
                    d.callback(writes.durable)
            if writes.waiting:
                self._write_log_start(p, writes)

        self.blocking(self.tables.put, LOG_STARTS_TABLE,
                      [(log_start_key(p.topic, p.partition), str(value).encode())]).addBoth(written)

    def truncate_segments(self, topic: str) -> None:
        """Truncate ``topic``'s data segments below what every partition still needs (retention, compaction)."""
        for name, offset in retention.truncation_points(self._topics.get(topic, [])).items():
            if offset > 0:
                to_deferred(self.store.truncate(name, offset)).addErrback(_log_failure, "truncating", name)

    def enforce_stream_retention(self, topic: TopicInfo, retention_ms: int, retention_bytes: int,
                                 now_ms: int | None = None) -> list[defer.Deferred[int]]:
        """Apply a native stream's retention policy (-1 = unlimited) to its partitions: time per batch,
        size over the whole stream (``retention.stream_retained_starts``)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        parts = self._topics.get(topic.name, [])
        starts = retention.stream_retained_starts(parts, retention_ms, retention_bytes, now_ms)
        return [self._advance_log_start(p, start) for p, start in zip(parts, starts, strict=True)
                if start > p.log_start and self.leads(p)]

    def enforce_retention(self, topic: TopicInfo, now_ms: int | None = None) -> list[defer.Deferred[int]]:
        """Apply retention.ms and retention.bytes to every partition of ``topic`` (unless its
        cleanup.policy leaves out "delete")."""
        if not deletes_old_data(topic.configs):
            return []
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        retention_ms = int(topic.config("retention.ms"))
        retention_bytes = int(topic.config("retention.bytes"))
        moves = []
        for p in self._topics.get(topic.name, []):
            if not self.leads(p):
                continue
            start = retention.retained_start(p, retention_ms, retention_bytes, now_ms)
            if start > p.log_start:
                moves.append(self._advance_log_start(p, start))
        return moves
