"""The transaction coordinator (KIP-98, with KIP-447's group checks and KIP-890's produce verification).

In one process this node coordinates every transactional id. On a cluster the coordinator is the owner
of the transactions table's container, and it serves only from state it loaded in its current term of
that container (``coordination``, ``gateway.kafka.cluster.TransactionCoordination``): a new term drops
what it held, reloads the table and completes every prepared transaction again (``resume``); other
nodes answer NOT_COORDINATOR. Markers for partitions led by other nodes go to their leaders as
WriteTxnMarkers (``markers``), retried against whichever node leads the partition next.

State machine, as Kafka's: Empty -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn) -> PrepareCommit or
PrepareAbort (EndTxn, a fencing InitProducerId, the timeout) -> CompleteCommit or CompleteAbort once a
marker is durable in every partition of the transaction and, for a commit, its offsets are committed
in their groups; InitProducerId bumps the epoch of an idle transactional id (fencing older instances).

Invariants:
- Every state change is durable in the transactions table before it is answered or acted on; a
  Prepare* state is durable before the first marker is written, so a crash at any later step finds it
  and completes the same outcome (``resume``).
- One transition at a time per transactional id: while markers are written (``completing``), every
  other request of that id gets CONCURRENT_TRANSACTIONS, which clients retry.
- A transactional batch is admitted by a partition only while that partition is in its producer's
  Ongoing transaction at the same epoch (``check_produce``), so no batch can land after its marker.

Owned by the reactor thread; table writes go through one coalescing writer on the worker pool, in
call order.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from millrace.gateway.kafka.group_store import OffsetAndMetadata
from millrace.gateway.kafka.node_requests import request_node
from millrace.gateway.kafka.stream_errors import KafkaError, error_code
from millrace.gateway.kafka.transactions.markers import (
    CLIENT_ID,
    TXN_OFFSET_COMMIT_VERSION,
    MarkerWriter,
    offset_errors,
    send_markers,
    txn_offset_commit_request,
)
from millrace.gateway.kafka.transactions.state import (
    IDLE,
    PREPARING,
    TRANSACTIONS_TABLE,
    TopicPartition,
    TransactionMetadata,
    TxnState,
)
from millrace.gateway.kafka.transactions.verification import TransactionVerifier
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.store.errors import SegmentExistsError
from millrace.store.tables.coalescing import CoalescingWriter
from millrace.streams.errors import Reason, StreamError
from millrace.streams.futures import every
from millrace.streams.partitions import PartitionError
from millrace.streams.partitions.producers import MARKER_COORDINATOR_EPOCH

if TYPE_CHECKING:
    from millrace.gateway.kafka.group_coordinator import GroupCoordinator
    from millrace.gateway.kafka.node_requests import Peers
    from millrace.store.tables import TableStore
    from millrace.streams.partitions import SegmentPartitionStorage
    from millrace.streams.producer_ids import ProducerIdAllocator
    from millrace.streams.topics import TopicRegistry

log = logging.getLogger(__name__)

# InitProducerId's refusals of a native writer's lease, in the stream layer's words.
LEASE_REFUSALS: dict[ErrorCode, Reason] = {
    ErrorCode.CONCURRENT_TRANSACTIONS: Reason.BUSY,  # the id's transaction is completing, or being fenced
    ErrorCode.COORDINATOR_NOT_AVAILABLE: Reason.STORAGE_FAILURE,  # the state write failed
    ErrorCode.NOT_COORDINATOR: Reason.NOT_OWNER,  # this node's coordinator term ended meanwhile
    ErrorCode.PRODUCER_FENCED: Reason.PRODUCER_FENCED,
    ErrorCode.INVALID_PRODUCER_EPOCH: Reason.PRODUCER_FENCED,
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: Reason.INVALID_REQUEST,
}

MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms default
MAX_EPOCH = 32767
RETRY_SECONDS = 0.2  # a marker or offset write that failed (partition reloading) is tried again after this


#: The ids native writers are opened under (``gateway.native.event_commands.WRITER_ID_PREFIX``, checked
#: equal by a test). On a cluster they stay with the node that has them, as before coordination moved:
#: the native OPEN_WRITER is served by any node (routing native writers to the coordinator is left).
NATIVE_WRITER_PREFIX = "millrace.writer:"


def coordinated(transactional_id: str) -> bool:
    """Whether the id is a Kafka transactional id, served by the coordinating node only."""
    return not transactional_id.startswith(NATIVE_WRITER_PREFIX)


class NotCoordinatingError(Exception):
    """This node no longer coordinates the transaction (its state was dropped: another term or node)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    """Transactions of every transactional id (reactor thread)."""

    def __init__(self, partitions: SegmentPartitionStorage, producer_ids: ProducerIdAllocator, tables: TableStore,
                 topics: TopicRegistry, blocking: Callable[..., defer.Deferred[Any]], groups: GroupCoordinator,
                 peers: Peers, node_id: int, clock: IReactorTime, check_seconds: float = 1.0) -> None:
        """``partitions`` take the markers; ``producer_ids`` issue the transactions' producer ids; ``tables``
        hold the transaction records; ``topics`` name the partitions; ``blocking`` runs a blocking call on
        the worker pool; ``groups`` commit the offsets of transactions; ``peers`` reach the other nodes
        (the partitions' leaders and the groups' coordinator) from this one, ``node_id``."""
        self.partitions = partitions
        self.producer_ids = producer_ids
        self.tables = tables
        self.topics = topics
        self.blocking = blocking
        self.groups = groups
        self.peers = peers
        self.node_id = node_id
        self.clock = clock
        self.check_seconds = check_seconds  # how often timed-out transactions are looked for
        self.txns: dict[str, TransactionMetadata] = {}
        self._by_pid: dict[int, TransactionMetadata] = {}
        self._completing: dict[str, defer.Deferred[ErrorCode]] = {}  # transactional id -> its completion
        self._initializing: set[str] = set()
        self._writer: CoalescingWriter[tuple[bytes, bytes | None], None] = CoalescingWriter(
            self._write_records, blocking)
        # On a cluster (any thread): whether this node still holds the term its transaction state is of.
        # Checked right before each write, so records queued before the term ended are not written over
        # the next coordinator's.
        self._term_held: Callable[[], bool] | None = None
        self._loop: task.LoopingCall | None = None
        self.markers = MarkerWriter(partitions)
        self.verifier = TransactionVerifier(peers, clock)  # a partition leader's questions to the coordinator
        # On a cluster: None while this node coordinates with state of its current term, else the error
        # to answer (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS); None in one process.
        self.coordination: Callable[[], ErrorCode | None] | None = None
        self.coordinator_epoch = MARKER_COORDINATOR_EPOCH  # on a cluster: the term, in every marker
        # Bumped whenever the state is dropped: work of an older generation (retries, callbacks) stops.
        self.generation = 0

    # -- start ---------------------------------------------------------------------------------------
    def load(self) -> None:
        """Blocking: read every transaction record (before the reactor runs)."""
        self._install(self._read())

    def _read(self) -> list[TransactionMetadata]:
        """Blocking: every transaction record in the table (made if missing)."""
        tables = self.tables
        if not tables.exists(TRANSACTIONS_TABLE):
            with contextlib.suppress(SegmentExistsError):
                tables.create_table(TRANSACTIONS_TABLE)
        return [TransactionMetadata.decode(entry.key.decode(), entry.value)
                for entry in tables.entries(TRANSACTIONS_TABLE)]

    def _install(self, records: list[TransactionMetadata]) -> None:
        for meta in records:
            self.txns[meta.transactional_id] = meta
            self._by_pid[meta.producer_id] = meta

    def reload(self) -> defer.Deferred[None]:
        """Reactor (a cluster node's new term): drop what is held, read the table on the worker pool and
        install it unless dropped again meanwhile (the caller then ``resume``s)."""
        self.reset()
        generation = self.generation

        def install(records: list[TransactionMetadata]) -> None:
            if generation == self.generation:
                self._install([meta for meta in records if coordinated(meta.transactional_id)])

        return self.blocking(self._read).addCallback(install)

    def reset(self) -> None:
        """Reactor: forget every transaction (its state is durable in the table); EndTxn calls waiting
        on a completion are told NOT_COORDINATOR, and the completion's retries stop."""
        self.generation += 1
        waiting = [d for tid, d in self._completing.items() if coordinated(tid)]
        self.txns = {tid: meta for tid, meta in self.txns.items() if not coordinated(tid)}
        self._by_pid = {pid: meta for pid, meta in self._by_pid.items() if not coordinated(meta.transactional_id)}
        self._completing = {tid: d for tid, d in self._completing.items() if not coordinated(tid)}
        self._initializing = {tid for tid in self._initializing if not coordinated(tid)}
        for d in waiting:
            d.callback(ErrorCode.NOT_COORDINATOR)

    def fence_writes(self, term_held: Callable[[], bool]) -> None:
        """On a cluster: ``term_held`` (any thread) says whether this node still holds the term of its
        state; transaction records are written only while it does."""
        self._term_held = term_held

    def _write_records(self, changes: list[tuple[bytes, bytes | None]]) -> list[Exception | None]:
        """Blocking: one put of the records (the latest of an id wins; None removes it), one removal;
        per change, NotCoordinatingError if this node's term is over (Kafka transactional ids only)."""
        latest = dict(changes)
        refused: set[bytes] = set()
        if self._term_held is not None and not self._term_held():
            refused = {key for key in latest if coordinated(key.decode())}
            latest = {key: value for key, value in latest.items() if key not in refused}
        puts = [(key, value) for key, value in latest.items() if value is not None]
        if puts:
            self.tables.put(TRANSACTIONS_TABLE, puts)
        removed = [key for key, value in latest.items() if value is None]
        if removed:
            self.tables.remove(TRANSACTIONS_TABLE, removed)
        return [NotCoordinatingError(key.decode()) if key in refused else None for key, _ in changes]

    def check(self) -> ErrorCode | None:
        """None when this node coordinates transactions now, else the error to answer."""
        return None if self.coordination is None else self.coordination()

    def resume(self) -> None:
        """Reactor: complete the transactions a crash (or a moved coordinator) left prepared, as Kafka's
        new coordinator does: their markers are written again (at most once per partition)."""
        for meta in list(self.txns.values()):
            if meta.state in PREPARING and meta.transactional_id not in self._completing:
                self._complete(meta, meta.state == TxnState.PREPARE_COMMIT)

    def start(self) -> None:
        """On the reactor: finish transactions a crash left prepared (on a cluster, the coordination
        does that when a term starts), then watch for timeouts."""
        if self.coordination is None:
            self.resume()
        self._loop = every(self.check_seconds, self.abort_timed_out, "the transaction timeout check", self.clock)

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    # -- checks ----------------------------------------------------------------------------------------
    def check_produce(self, topic: str, partition: int, producer_id: int, epoch: int,
                      transactional_id: str) -> Callable[[], defer.Deferred[None]] | None:
        """Raises PartitionError unless the partition is in the ongoing transaction of
        ``transactional_id``, whose producer id and epoch the batch carries. On a cluster node that does
        not coordinate the id: the question for the coordinator (``TransactionVerifier``), whose answer
        the partition keeps until the producer's next marker there."""
        if coordinated(transactional_id) and self.check() is not None:
            if not self.producer_ids.issued_for_transaction(transactional_id, producer_id):
                raise PartitionError(Reason.UNKNOWN_PRODUCER, f"producer id {producer_id} is not the producer id "
                                     f"of {transactional_id!r}")
            return lambda: self.verifier.ask(transactional_id, producer_id, epoch, topic, partition)
        meta = self._by_pid.get(producer_id)
        if meta is None or meta.producer_id != producer_id or meta.transactional_id != transactional_id:
            raise PartitionError(Reason.UNKNOWN_PRODUCER,
                                 f"producer id {producer_id} is not the producer id of {transactional_id!r}")
        if epoch != meta.producer_epoch:
            raise PartitionError(Reason.PRODUCER_FENCED,
                                 f"producer epoch {epoch} is not the current {meta.producer_epoch}")
        if meta.state != TxnState.ONGOING or (topic, partition) not in meta.partitions:
            raise PartitionError(Reason.NOT_IN_TRANSACTION,
                                 f"{topic}-{partition} is not in an ongoing transaction of {meta.transactional_id}")
        return None

    def verify(self, transactional_id: str, producer_id: int, epoch: int,
               partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn's verify_only (KIP-890): for each partition, whether it is in the ongoing
        transaction of ``transactional_id`` under this producer id and epoch (a partition leader asks
        before it admits the transaction's first batch)."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        elif epoch != meta.producer_epoch:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        elif meta.state != TxnState.ONGOING or transactional_id in self._completing:
            error = ErrorCode.INVALID_TXN_STATE
        else:
            return {tp: ErrorCode.NONE if tp in meta.partitions else ErrorCode.INVALID_TXN_STATE for tp in partitions}
        return dict.fromkeys(partitions, error)

    def _validate(self, transactional_id: str, producer_id: int, epoch: int,
                  fenced: ErrorCode) -> tuple[TransactionMetadata | None, ErrorCode]:
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != meta.producer_epoch:
            return None, fenced
        if transactional_id in self._completing or meta.state in PREPARING:
            return None, ErrorCode.CONCURRENT_TRANSACTIONS
        return meta, ErrorCode.NONE

    def pending_offsets(self, group_id: str) -> set[TopicPartition]:
        """Partitions of ``group_id`` with offsets in a transaction not yet complete (KIP-447's
        require_stable answers UNSTABLE_OFFSET_COMMIT for them)."""
        return {tp for meta in self.txns.values() if meta.state not in IDLE
                for tp in meta.offsets.get(group_id, {})}

    # -- InitProducerId --------------------------------------------------------------------------------
    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int,
                         epoch: int) -> defer.Deferred[tuple[ErrorCode, int, int]]:
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            return defer.succeed((ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1))
        if transactional_id in self._initializing or transactional_id in self._completing:
            return defer.succeed((ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1))
        meta = self.txns.get(transactional_id)
        generation = self.generation
        if meta is None:
            self._initializing.add(transactional_id)
            d = self.blocking(self.producer_ids.allocate, transactional_id)

            def allocated(pid: int) -> defer.Deferred[tuple[ErrorCode, int, int]]:
                if generation != self.generation and coordinated(transactional_id):
                    return defer.succeed((ErrorCode.NOT_COORDINATOR, -1, -1))
                fresh = TransactionMetadata(transactional_id, pid, 0, timeout_ms, updated_ms=_now_ms())
                self.txns[transactional_id] = fresh
                self._by_pid[pid] = fresh
                return self._persist(fresh).addCallback(lambda _: (ErrorCode.NONE, pid, 0))

            return d.addCallback(allocated).addErrback(self._unavailable, (-1, -1)).addBoth(
                self._done_initializing, transactional_id)
        if producer_id >= 0 and (producer_id, epoch) != (meta.producer_id, meta.producer_epoch):
            # KIP-360: a producer that names its id and epoch must be the current one to bump it.
            return defer.succeed((ErrorCode.PRODUCER_FENCED, -1, -1))
        if meta.state in PREPARING:
            return defer.succeed((ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1))
        if meta.state == TxnState.ONGOING:
            # A new instance fences the old one: bump the epoch, abort its transaction with the bumped
            # epoch (its partitions then refuse the old one), and let the new instance retry, as Kafka does.
            self._bump_epoch(meta)
            self._begin_end(meta, commit=False)
            return defer.succeed((ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1))
        self._initializing.add(transactional_id)
        # A new producer id once the epoch is exhausted, else None: the epoch is bumped.
        new_id: defer.Deferred[int | None] = (self.blocking(self.producer_ids.allocate, transactional_id)
                                              if meta.producer_epoch + 1 >= MAX_EPOCH else defer.succeed(None))

        def bump(new_pid: int | None) -> defer.Deferred[tuple[ErrorCode, int, int]]:
            if new_pid is not None:
                self._by_pid.pop(meta.producer_id, None)
                meta.producer_id, meta.producer_epoch = new_pid, 0
                self._by_pid[new_pid] = meta
            else:
                meta.producer_epoch += 1
            meta.timeout_ms = timeout_ms
            meta.state = TxnState.EMPTY
            meta.partitions.clear()
            meta.offsets.clear()
            meta.start_ms = -1
            meta.updated_ms = _now_ms()
            return self._persist(meta).addCallback(lambda _: (ErrorCode.NONE, meta.producer_id, meta.producer_epoch))

        return new_id.addCallback(bump).addErrback(self._unavailable, (-1, -1)).addBoth(
            self._done_initializing, transactional_id)

    def lease_writer(self, transactional_id: str, lease_ms: int) -> defer.Deferred[tuple[int, int]]:
        """A native writer's producer id and epoch (InitProducerId on its id, fencing older instances),
        or a ``StreamError`` saying in the stream layer's words why not: native writers do not speak
        Kafka's codes."""
        def answered(outcome: tuple[ErrorCode, int, int]) -> tuple[int, int]:
            error, producer_id, epoch = outcome
            if error != ErrorCode.NONE:
                raise StreamError(LEASE_REFUSALS.get(error, Reason.UNEXPECTED),
                                  f"leasing writer id {transactional_id}: {error.name}")
            return producer_id, epoch

        return self.init_producer_id(transactional_id, lease_ms, -1, -1).addCallback(answered)

    def _done_initializing(self, result: Any, transactional_id: str) -> Any:
        self._initializing.discard(transactional_id)
        return result

    @staticmethod
    def _unavailable(failure: Failure, rest: tuple[int, ...]) -> tuple[Any, ...]:
        return (TransactionCoordinator._unavailable_code(failure), *rest)

    def _bump_epoch(self, meta: TransactionMetadata) -> None:
        # The fencing epoch itself is never handed to a producer: the next InitProducerId bumps again.
        meta.producer_epoch = min(meta.producer_epoch + 1, MAX_EPOCH - 1)

    # -- AddPartitionsToTxn / AddOffsetsToTxn / TxnOffsetCommit -------------------------------------
    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[TopicPartition], fenced: ErrorCode) -> defer.Deferred[ErrorCode]:
        meta, error = self._validate(transactional_id, producer_id, epoch, fenced)
        if meta is None:
            return defer.succeed(error)
        wanted = set(partitions)
        if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
            return defer.succeed(ErrorCode.NONE)
        self._begin(meta)
        meta.partitions |= wanted
        return self._persist(meta).addCallbacks(lambda _: ErrorCode.NONE, self._unavailable_code)

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                    fenced: ErrorCode) -> defer.Deferred[ErrorCode]:
        meta, error = self._validate(transactional_id, producer_id, epoch, fenced)
        if meta is None:
            return defer.succeed(error)
        if meta.state == TxnState.ONGOING and group_id in meta.offsets:
            return defer.succeed(ErrorCode.NONE)
        self._begin(meta)
        meta.offsets.setdefault(group_id, {})
        return self._persist(meta).addCallbacks(lambda _: ErrorCode.NONE, self._unavailable_code)

    def txn_offset_commit(self, transactional_id: str, group_id: str, producer_id: int, epoch: int,
                          offsets: dict[TopicPartition, OffsetAndMetadata]) -> defer.Deferred[ErrorCode]:
        meta, error = self._validate(transactional_id, producer_id, epoch, ErrorCode.PRODUCER_FENCED)
        if meta is None:
            return defer.succeed(error)
        if meta.state != TxnState.ONGOING or group_id not in meta.offsets:
            return defer.succeed(ErrorCode.INVALID_TXN_STATE)
        meta.offsets[group_id].update(offsets)
        meta.updated_ms = _now_ms()
        return self._persist(meta).addCallbacks(lambda _: ErrorCode.NONE, self._unavailable_code)

    @staticmethod
    def _unavailable_code(failure: Failure) -> ErrorCode:
        if failure.check(NotCoordinatingError):
            return ErrorCode.NOT_COORDINATOR
        log.warning("transaction state write failed: %s", failure.getErrorMessage())
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    @staticmethod
    def _begin(meta: TransactionMetadata) -> None:
        """An idle transactional id starts a transaction (its timeout counts from here)."""
        now = _now_ms()
        if meta.state != TxnState.ONGOING:
            meta.state = TxnState.ONGOING
            meta.partitions.clear()
            meta.offsets.clear()
            meta.start_ms = now
        meta.updated_ms = now

    # -- EndTxn, fencing, timeouts ---------------------------------------------------------------------
    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                fenced: ErrorCode) -> defer.Deferred[ErrorCode]:
        meta = self.txns.get(transactional_id)
        if meta is not None and meta.producer_id == producer_id and meta.producer_epoch == epoch \
                and transactional_id not in self._completing:
            # A retry of an EndTxn that already completed gets its answer again.
            if meta.state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
                return defer.succeed(ErrorCode.NONE)
            if meta.state in IDLE:
                return defer.succeed(ErrorCode.INVALID_TXN_STATE)
        meta, error = self._validate(transactional_id, producer_id, epoch, fenced)
        if meta is None:
            return defer.succeed(error)
        return self._begin_end(meta, commit)

    def _begin_end(self, meta: TransactionMetadata, commit: bool) -> defer.Deferred[ErrorCode]:
        """Prepare (durably), then complete: markers, the group offsets of a commit, the final state."""
        meta.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        meta.updated_ms = _now_ms()
        done: defer.Deferred[ErrorCode] = defer.Deferred()
        self._completing[meta.transactional_id] = done

        def prepared(_: Any) -> None:
            self._complete(meta, commit)

        def failed(failure: Failure) -> None:
            if failure.check(NotCoordinatingError):
                return  # dropped: the next coordinator completes it from the table
            # The Prepare record may or may not be durable: keep retrying the whole completion.
            log.warning("preparing %s failed: %s", meta.transactional_id, failure.getErrorMessage())
            self.clock.callLater(RETRY_SECONDS, lambda: self._persist(meta).addCallbacks(prepared, failed))

        self._persist(meta).addCallbacks(prepared, failed)
        return done

    def _complete(self, meta: TransactionMetadata, commit: bool) -> None:
        """Write the markers and (for a commit) the offsets, retrying until each succeeds, then record
        the complete state; fires the waiting EndTxn."""
        if meta.transactional_id not in self._completing:
            self._completing[meta.transactional_id] = defer.Deferred()
        pid, epoch, generation = meta.producer_id, meta.producer_epoch, self.generation
        steps = [self._marker(topic, partition, pid, epoch, commit, generation)
                 for topic, partition in sorted(meta.partitions)]
        if commit:
            steps.extend(self._group_offsets(group, offsets, generation, (meta.transactional_id, pid, epoch))
                         for group, offsets in meta.offsets.items() if offsets)

        def finish(_: Any) -> defer.Deferred[None]:
            meta.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            meta.partitions.clear()
            meta.offsets.clear()
            meta.start_ms = -1
            meta.updated_ms = _now_ms()
            return self._persist_until_done(meta)

        def answered(_: Any) -> None:
            waiting = self._completing.pop(meta.transactional_id, None)
            if waiting is not None:
                waiting.callback(ErrorCode.NONE)

        defer.gatherResults(steps, consumeErrors=True).addCallback(finish).addCallback(answered)

    def _persist_until_done(self, meta: TransactionMetadata) -> defer.Deferred[None]:
        result: defer.Deferred[None] = defer.Deferred()

        def attempt() -> None:
            self._persist(meta).addCallbacks(result.callback, retry)

        def retry(failure: Failure) -> None:
            if failure.check(NotCoordinatingError):
                return  # dropped: the next coordinator completes it from the table
            log.warning("recording %s failed: %s", meta.transactional_id, failure.getErrorMessage())
            self.clock.callLater(RETRY_SECONDS, attempt)

        attempt()
        return result

    def _marker(self, topic: str, partition: int, pid: int, epoch: int, commit: bool,
                generation: int) -> defer.Deferred[None]:
        """The marker of one partition, written by its leader (here, or another node asked with
        WriteTxnMarkers; retrying while the partition recovers or moves) or skipped if the topic or
        partition is gone. Stops (never fires) once the coordinator's state of ``generation`` is dropped."""
        result: defer.Deferred[None] = defer.Deferred()
        storage = self.partitions

        def attempt() -> None:
            # check() first: a node back from a pause learns here that its term is over (and drops).
            if self.check() is not None or generation != self.generation:
                return
            # record, not get: the partition record whatever the stream's scope (get knows Kafka topics only).
            info = self.topics.record(topic)
            if info is None or partition >= info.partition_count:
                result.callback(None)
                return
            storage.open_topic(info).addCallback(write).addCallbacks(lambda _: result.callback(None), retry)

        def write(parts: list[Any]) -> defer.Deferred[None]:
            p = parts[partition]
            nodes = self.peers.directory
            if nodes is not None and p.writer is not None:
                leader = nodes.leader(p.writer.name)
                if leader is None:
                    raise PartitionError(Reason.NOT_OWNER, f"{topic}-{partition} has no leader now")
                if leader.node_id != self.node_id:
                    return send_markers(self.peers.link, leader, pid, epoch, commit, self.coordinator_epoch,
                                        {topic: [partition]}).addCallback(answered)
            return self.markers.write(p, pid, epoch, commit, self.coordinator_epoch)

        def answered(errors: dict[tuple[str, int], ErrorCode]) -> None:
            error = errors[(topic, partition)]
            if error not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                raise KafkaError(error, f"{topic}-{partition}: {error.name}")

        def retry(failure: Failure) -> None:
            if failure.check(PartitionError, KafkaError) and error_code(failure.value) is ErrorCode.INVALID_PRODUCER_EPOCH:
                # The partition holds a newer epoch of the producer: this marker's transaction is over there.
                result.callback(None)
                return
            if not failure.check(PartitionError, KafkaError):
                log.warning("marker for %s-%s failed: %s", topic, partition, failure.getErrorMessage())
            self.clock.callLater(RETRY_SECONDS, attempt)

        attempt()
        return result

    def _group_offsets(self, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata], generation: int,
                       producer: tuple[str, int, int]) -> defer.Deferred[None]:
        """A committed transaction's offsets of ``group_id``, committed in the group (on its coordinator:
        here, or another node asked with TxnOffsetCommit), retrying until they are."""
        result: defer.Deferred[None] = defer.Deferred()
        stamped = {tp: OffsetAndMetadata(om.offset, om.leader_epoch, om.metadata, om.commit_timestamp or _now_ms())
                   for tp, om in offsets.items()}

        def attempt() -> None:
            if self.check() is not None or generation != self.generation:
                return
            nodes = self.peers.directory
            node = nodes.group_coordinator() if nodes is not None else None
            if node is not None and node.node_id != self.node_id:
                transactional_id, pid, epoch = producer
                request = txn_offset_commit_request(transactional_id, group_id, pid, epoch, stamped)
                d = request_node(self.peers.link, node, request, TXN_OFFSET_COMMIT_VERSION,
                                 CLIENT_ID).addCallback(offset_errors)
            else:
                d = self.groups.call(lambda c: c.offsets.commit_transactional_offsets(group_id, stamped))
            d.addCallbacks(committed, retry)

        def committed(errors: dict[TopicPartition, ErrorCode]) -> None:
            # NOT_COORDINATOR: the groups moved (to be asked again where they are now).
            if any(e in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         ErrorCode.NOT_COORDINATOR) for e in errors.values()):
                self.clock.callLater(RETRY_SECONDS, attempt)
            else:
                result.callback(None)

        def retry(failure: Failure) -> None:
            log.warning("committing offsets of %s failed: %s", group_id, failure.getErrorMessage())
            self.clock.callLater(RETRY_SECONDS, attempt)

        attempt()
        return result

    def abort_timed_out(self, now_ms: int | None = None) -> list[str]:
        """Abort every Ongoing transaction past its timeout, fencing its producer (Kafka bumps the epoch
        too: the abandoned producer gets PRODUCER_FENCED / INVALID_PRODUCER_EPOCH if it comes back)."""
        now_ms = _now_ms() if now_ms is None else now_ms
        if self.check() is not None:
            return []  # another node coordinates (or this one is loading)
        aborted = []
        for meta in list(self.txns.values()):
            if meta.state == TxnState.ONGOING and meta.transactional_id not in self._completing \
                    and meta.transactional_id not in self._initializing \
                    and now_ms > meta.start_ms + meta.timeout_ms:
                log.info("aborting transaction of %s: timed out after %d ms", meta.transactional_id, meta.timeout_ms)
                self._bump_epoch(meta)
                self._begin_end(meta, commit=False)
                aborted.append(meta.transactional_id)
        return aborted

    def _persist(self, meta: TransactionMetadata) -> defer.Deferred[None]:
        """Write ``meta``'s record, unless its state was dropped (another term or node coordinates):
        a former coordinator must not write over its successor's records."""
        if coordinated(meta.transactional_id) and (self.txns.get(meta.transactional_id) is not meta
                                                   or self.check() is not None):
            return defer.fail(NotCoordinatingError(meta.transactional_id))
        return self._writer.write((meta.transactional_id.encode(), meta.encode()))
