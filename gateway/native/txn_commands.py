"""Transactions of native writers, the Pravega way: transaction segments, merged into the stream on commit,
recorded by the controller in a table segment (``store.controller.transactions``).

- ``BEGIN_TXN`` {scope, stream, txn_id, lease_ms, writer_id}: records the transaction OPEN (durable before
  the answer) with its lease deadline, the stream's partition slices and its transaction segments, one
  per segment that holds partitions now, named ``<parent>#transaction.<uuid hex>`` (in the parent's
  container). Answers the slices and the lease. The client chooses the uuid, so a begin whose answer was
  lost is resent and finds the same transaction.
- ``APPEND_TXN_EVENTS`` {scope, stream, txn_id, partition, first_event, last_event} + one plain (not
  transactional, no producer id) RecordBatch v2: stored in the partition's transaction segment in the
  data segments' format (``formats.envelope`` + the batch), its segment made on the first write. The
  events are numbered per partition from 0; the append is conditional on the segment attribute
  ``txn.events:<partition>`` (the last event number stored) being ``first_event - 1`` and sets it to
  ``last_event`` atomically, so a batch resent after a lost answer is stored once (it answers as
  written) and one behind a gap is refused (OUT_OF_ORDER_SEQUENCE, which the client resends in order).
  Nothing of it is in the stream: Kafka consumers and native readers neither see it nor wait for it.
- ``END_TXN`` {scope, stream, txn_id, commit}: no more appends are admitted, those in flight finish,
  then COMMITTING (or ABORTING) is recorded. A commit then seals each transaction segment, reads its
  batches and appends them, in order, to their partitions' *current* segments through
  ``PartitionStorage.append`` under the writer id ``txn:<uuid>`` with the batch's index in its
  transaction segment as its event number, so the partition assigns Kafka offsets now (a store-level
  merge of the segment's chunks cannot: stored batches must carry their partition's offsets) and a
  batch appended again after a crash answers ALREADY_WRITTEN instead of landing twice. Partitions never
  move between slices, so this holds across any scaling while the transaction was open; COMMITTING
  records the stream's partition count, so a merge resumed after a later split routes as the first
  pass did (``txn_merge``). Then COMMITTED
  is recorded and the transaction segments are deleted; an abort deletes them and records ABORTED.
  Once COMMITTING is recorded every batch lands (a restart finishes it), but partitions are merged
  one by one: a reader may see one partition's part before another's. Answers the final state; ending
  a transaction the way it ended answers the same again.
- ``TXN_STATUS`` {scope, stream, txn_id}: state, lease, slices and, while OPEN, per partition the next
  event number its segment expects, so another process can go on writing it (``get_txn``).
- ``PING_TXN``: the lease counts again from now (recorded).

Every ``transaction_check_seconds`` an OPEN transaction past its deadline is aborted, and ended records
older than ``native_txn_retention_ms`` are removed (the status is UNKNOWN afterwards). At start, COMMITTING
and ABORTING transactions are finished and ended ones' leftover segments deleted.

Here: the commands, the ends and the periodic lease check; ``txn_state`` holds the records and changes
them, ``txn_merge`` lands a commit's batches.

Threads: the reactor owns ``NativeTransactions``; table and segment I/O that blocks runs on the worker
pool (``NativeHost.blocking``). Per transaction one table write at a time (a DeferredLock); one process
serves the native transactions: the single server, or on a cluster the owner of the native transactions
table's container (``txn_cluster``), to which the other nodes forward.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from twisted.internet import defer, reactor, task
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from millrace.gateway.native.dispatch import Handlers, handlers, serve
from millrace.gateway.native.event_commands import partitioned_stream, stream_key
from millrace.gateway.native.host import NativeHost
from millrace.gateway.native.stream_errors import native_refusal
from millrace.gateway.native.txn_merge import CommitMerge, delete_segments, next_events
from millrace.gateway.native.txn_state import (
    WRITER_PREFIX,
    Shared,
    Txn,
    TxnRecords,
    events_attribute,
    not_open,
    now_ms,
)
from millrace.protocol import messages as m
from millrace.protocol.contracts import SegmentInfo
from millrace.protocol.errors import (
    AuthorizationError,
    BadAttributeUpdateError,
    EventsRefusedError,
    InvalidRequestError,
    RetriableError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    StreamNotFoundError,
    TxnFailedError,
)
from millrace.protocol.events import OUT_OF_ORDER_SEQUENCE
from millrace.protocol.records import RecordBatchError, validate_produce_records
from millrace.store.contracts import AttributeUpdate, AttributeUpdateType
from millrace.store.controller.transactions import (
    ENDED,
    NativeTransactionTable,
    TxnRecord,
    TxnState,
    record_key,
    transaction_segment_name,
)
from millrace.store.errors import TableKeyVersionMismatchError
from millrace.streams.errors import Reason, StreamError, batch_refusal
from millrace.streams.futures import every, to_deferred
from millrace.streams.partitions import PartitionLog
from millrace.streams.partitions.formats import envelope
from millrace.streams.resolve import record_logs
from millrace.streams.topics import TopicInfo

log = logging.getLogger(__name__)

MAX_LEASE_MS = 900_000  # as Kafka's transaction.max.timeout.ms and Pravega's default max lease

class NativeTransactions:
    """Every native transaction of this node (reactor thread)."""

    def __init__(self, broker: NativeHost, clock: IReactorTime | None = None, load: bool = True) -> None:
        """Blocking with ``load``: loads the records (before the reactor runs, like the Kafka coordinator's);
        without, ``reload`` loads them later (a cluster node, in a term of the table's container)."""
        self.broker = broker
        self.clock = clock if clock is not None else IReactorTime(reactor)
        self.retention_ms = broker.config.native_txn_retention_ms
        self.table = NativeTransactionTable(broker.tables)
        self.records = TxnRecords(self.table, broker.blocking, self.table.load() if load else [])
        self._beginning: dict[bytes, Shared] = {}
        self._loop: task.LoopingCall | None = None
        self._stopped = False
        self.merge = CommitMerge(broker, self.clock, self._stream_key, lambda: self._stopped)
        # Who else must forget a committed transaction's merge writer: on a cluster, the other nodes,
        # whose partitions the merge appended to (``txn_cluster``); (stream key, writer id).
        self.forget_elsewhere: Callable[[TxnRecord, str], None] | None = None

    def reload(self) -> defer.Deferred[None]:
        """Read the records again (worker pool), then ``start``: a node that begins serving the
        transactions (a new term of the table's container) works from what its predecessors recorded."""
        self.stop()
        self._stopped = False

        def loaded(records: list[tuple[TxnRecord, int]]) -> None:
            self.records = TxnRecords(self.table, self.broker.blocking, records)
            self._beginning = {}
            self.start()

        return self.broker.blocking(self.table.load).addCallback(loaded)

    def stop(self) -> None:
        """Serve nothing more and start no more work (a merge under way stops at its next retry); the
        records stay as durable, for whoever serves them next."""
        self._stopped = True
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None
        self.records.txns = {}

    # -- start and the periodic check -----------------------------------------------------------------
    def start(self) -> None:
        """Finish what a crash left COMMITTING or ABORTING, delete ended ones' leftover segments, then
        check leases and retention every ``transaction_check_seconds``."""
        for txn in list(self.records.txns.values()):
            state = txn.record.state
            if state in (TxnState.COMMITTING, TxnState.ABORTING):
                self._finish(txn).join().addErrback(self._log_failure, "finishing", txn)
            elif state in ENDED:
                self._delete(txn.record)
                if state == TxnState.COMMITTED:  # a crash may have come before its numbers were dropped
                    self._forget_merge_writer(txn.record)
        self._loop = every(self.broker.config.transaction_check_seconds, self.check,
                           "the native transactions' check", self.clock)

    def check(self) -> None:
        """Abort OPEN transactions past their lease, go on with ends a failure stopped, forget ended
        ones past the retention."""
        now = now_ms()
        for txn in list(self.records.txns.values()):
            record = txn.record
            if record.state == TxnState.OPEN and txn.outcome is None and now > record.deadline_ms:
                self._expire(txn)
            elif record.state in (TxnState.COMMITTING, TxnState.ABORTING) and txn.ending is None:
                self._finish(txn).join().addErrback(self._log_failure, "finishing", txn)
            elif record.state in ENDED and not txn.removing and now > record.ended_ms + self.retention_ms:
                self._remove(txn)

    def _expire(self, txn: Txn) -> None:
        """Abort an OPEN transaction whose lease ran out."""
        defer.maybeDeferred(self._end, txn, False).addErrback(self._log_failure, "aborting (lease)", txn)

    def _expired(self, txn: Txn, doing: str) -> None:
        """Raise (and abort it) if the transaction's lease ran out before the periodic check saw it."""
        if txn.record.state == TxnState.OPEN and txn.outcome is None and now_ms() > txn.record.deadline_ms:
            self._expire(txn)
            raise TxnFailedError(f"transaction {txn.record.txn_id}: its lease ran out, cannot {doing}")

    def _remove(self, txn: Txn) -> None:
        txn.removing = True
        record = txn.record

        def removed(_: Any) -> None:
            self.records.drop(txn)
            if record.state == TxnState.COMMITTED:  # its stream may have loaded after start's forget
                self._forget_merge_writer(record)

        def failed(failure: Failure) -> None:
            txn.removing = False  # the next check tries again
            self._log_failure(failure, "forgetting", txn)

        self.records.remove(txn).addCallback(lambda _: self._delete(record)).addCallbacks(removed, failed)

    def _stream_key(self, record: TxnRecord) -> str:
        return stream_key(self.broker, record.scope, record.stream)

    def _forget_merge_writer(self, record: TxnRecord) -> None:
        """A committed transaction's merge never appends again: drop its writer id's event numbers from
        the partitions and their segments' attributes, which would otherwise grow by one per commit."""
        self.broker.partitions.forget_writer(self._stream_key(record), f"{WRITER_PREFIX}{record.txn_id}")
        if self.forget_elsewhere is not None:
            self.forget_elsewhere(record, f"{WRITER_PREFIX}{record.txn_id}")

    def _delete(self, record: TxnRecord) -> defer.Deferred[None]:
        names = [name for name, _ in record.segments]
        return self.broker.blocking(delete_segments, self.broker, names).addErrback(
            lambda f: log.warning("deleting the segments of transaction %s failed: %s", record.txn_id,
                                  f.getErrorMessage()))

    @staticmethod
    def _log_failure(failure: Failure, doing: str, txn: Txn) -> None:
        log.warning("%s transaction %s failed: %s", doing, txn.record.txn_id, failure.getErrorMessage())

    # -- lookups ------------------------------------------------------------------------------------
    def _find(self, r: m.TxnRequest) -> Txn:
        """The transaction ``r`` names; AuthorizationError if another principal began it (with security
        on, every request carries its principal and every transaction begun so records its owner)."""
        txn = self.records.find(r.scope, r.stream, r.txn_id)
        _owned_by(txn, r)
        return txn

    # -- commands -----------------------------------------------------------------------------------
    def begin(self, r: m.BeginTxn, _payload: bytes) -> defer.Deferred[m.BeginTxnReply] | m.BeginTxnReply:
        scope, stream, txn_id, lease_ms = r.scope, r.stream, r.txn_id, r.lease_ms
        if not 0 < lease_ms <= MAX_LEASE_MS:
            raise InvalidRequestError(f"the lease must be 1 ms .. {MAX_LEASE_MS} ms, not {lease_ms}")
        key = record_key(scope, stream, txn_id)
        txn = self.records.txns.get(key)
        if txn is not None:
            _owned_by(txn, r)
            if txn.record.state == TxnState.OPEN and txn.outcome is None:
                return self._begun(txn.record)
            raise not_open(txn, "begin it again")
        under_way = self._beginning.get(key)
        if under_way is not None:  # a resent begin: the same answer
            return under_way.join()

        def located(found: tuple[TopicInfo, list[PartitionLog]]) -> defer.Deferred[m.BeginTxnReply]:
            topic, parts = found
            holding: dict[str, list[int]] = defaultdict(list)
            for p in range(topic.partition_count):
                writer = parts[p].writer
                if writer is None:
                    raise RetriableError(f"{scope}/{stream} partition {p} is loading")
                holding[writer.name].append(p)
            now = now_ms()
            record = TxnRecord(scope, stream, txn_id, r.writer_id, TxnState.OPEN, lease_ms,
                               now + lease_ms, now, 0, tuple(topic.slices),
                               tuple((transaction_segment_name(parent, txn_id), tuple(ps))
                                     for parent, ps in holding.items()), r.principal)

            return self.records.create(record).addCallback(lambda _: self._begun(record))

        def opened(topic: TopicInfo) -> defer.Deferred[tuple[TopicInfo, list[PartitionLog]]]:
            current = self.broker.topics.record(topic.name) or topic
            return record_logs(self.broker, current)

        def done(result: Any) -> Any:
            self._beginning.pop(key, None)
            if isinstance(result, Failure) and result.check(TableKeyVersionMismatchError):
                return Failure(RetriableError(f"transaction {txn_id} is being begun elsewhere"))
            return result

        begun = defer.maybeDeferred(partitioned_stream, self.broker, scope, stream).addCallback(
            opened).addCallback(located).addBoth(done)
        shared = Shared(begun)
        if not shared.done:
            self._beginning[key] = shared
        return shared.join()

    def _begun(self, record: TxnRecord) -> m.BeginTxnReply:
        # The partitions retired now, so the client routes around them; one retired later still takes
        # the transaction's events, which the commit sends to the partitions that hold their keys then.
        topic = self.broker.topics.of_stream(record.scope, record.stream)
        return m.BeginTxnReply(slices=record.slices, lease_ms=record.lease_ms,
                               retired=tuple(sorted(topic.retired)) if topic is not None else ())

    def append(self, r: m.AppendTxnEvents, payload: bytes) -> defer.Deferred[m.OffsetReply]:
        txn = self._find(r)
        partition, first, last = r.partition, r.first_event, r.last_event
        if txn.closed:
            raise not_open(txn, "write to it")
        self._expired(txn, "write to it")
        record = txn.record
        if not 0 <= partition < len(record.slices):
            raise StreamNotFoundError(f"{record.scope}/{record.stream} has no partition {partition}")
        try:
            (batch,) = validate_produce_records(payload)
        except RecordBatchError as exc:
            raise native_refusal(batch_refusal(exc)) from None
        header = batch.header
        if header.is_transactional or header.is_control or header.producer_id >= 0:
            raise InvalidRequestError("a transaction's batch is a plain batch: not transactional, no producer id")
        if not 0 <= first <= last or last - first + 1 != header.record_count:
            raise InvalidRequestError(f"events {first}..{last} do not number the batch's {header.record_count}")
        topic = self.broker.topics.record(stream_key(self.broker, r.scope, r.stream))
        limit = self.broker.partitions.max_message_bytes
        if topic is not None:
            limit = min(limit, int(topic.config("max.message.bytes")))
        if header.size > limit:
            raise native_refusal(StreamError(Reason.RECORD_TOO_LARGE,
                                             f"batch of {header.size} bytes exceeds max.message.bytes={limit}"))
        name = record.segment_of(partition)
        data = envelope(partition, header.size) + payload
        condition = AttributeUpdate(events_attribute(partition), last, AttributeUpdateType.REPLACE_IF_EQUALS,
                                    first - 1 if first > 0 else None)
        txn.appending += 1

        def store(_: Any) -> defer.Deferred[int]:
            return to_deferred(self.broker.store.append(name, data, attributes=[condition],
                                                        events=header.record_count))

        def refused(failure: Failure) -> Any:
            if failure.check(BadAttributeUpdateError):
                return self.broker.blocking(self.broker.store.get_info, name).addCallback(settle)
            if failure.check(SegmentSealedError, SegmentNotFoundError):
                return Failure(not_open(txn, "write to it"))
            return failure

        def settle(info: SegmentInfo) -> m.OffsetReply:
            stored = info.attributes.get(events_attribute(partition), -1)
            if stored >= last:
                return m.OffsetReply(offset=first)  # resent after a lost answer: stored once already
            if stored < first - 1:
                raise EventsRefusedError(f"events {first}..{last} follow {stored}: a gap",
                                         OUT_OF_ORDER_SEQUENCE)
            raise RetriableError(f"events before {last} are being stored")  # the original is not durable yet

        d = self._created(txn, name).addCallback(store).addCallbacks(lambda _: m.OffsetReply(offset=first), refused)
        return d.addBoth(txn.appended)

    def _created(self, txn: Txn, name: str) -> defer.Deferred[None]:
        """Fires once the transaction segment exists; appends waiting for it go on in arrival order."""
        if name in txn.created:
            making = txn.created[name]
            return defer.succeed(None) if making is None else making.join()

        def made(result: Any) -> Any:
            if isinstance(result, Failure) and not result.check(SegmentExistsError):
                del txn.created[name]  # the next append tries again
                return result
            txn.created[name] = None
            return None

        shared = Shared(to_deferred(self.broker.store.create_segment(name)).addBoth(made))
        if not shared.done:
            txn.created[name] = shared
        return shared.join()

    def end(self, r: m.EndTxn, _payload: bytes) -> defer.Deferred[m.TxnStateReply] | m.TxnStateReply:
        return self._end(self._find(r), r.commit)

    def _end(self, txn: Txn, commit: bool) -> defer.Deferred[m.TxnStateReply] | m.TxnStateReply:
        state = txn.record.state
        target, final = ((TxnState.COMMITTING, TxnState.COMMITTED) if commit
                         else (TxnState.ABORTING, TxnState.ABORTED))
        if state == final:
            return m.TxnStateReply(state=state.value)
        if txn.ending is not None and txn.outcome == commit:
            return txn.ending.join()
        if state == target:  # recorded before a restart, or its completion stopped on a failure
            return self._finish(txn).join()
        if state != TxnState.OPEN or txn.outcome is not None:
            raise not_open(txn, "commit it" if commit else "abort it")
        if commit:
            self._expired(txn, "commit it")
        txn.outcome = commit  # from here no append is admitted

        def record(_: Any) -> defer.Deferred[TxnRecord]:
            # A commit records the partitions there are now: its merge, resumed after any later split,
            # routes against the partitions live at this count, as its first pass did (``txn_merge``).
            topic = self.broker.topics.record(self._stream_key(txn.record)) if commit else None
            count = {} if topic is None else {"partition_count": topic.partition_count}
            return self.records.record(txn, lambda r: r.moved(target, **count))

        def not_recorded(failure: Failure) -> Failure:
            txn.outcome = None  # still OPEN: it may be ended again
            txn.ending = None
            return failure

        recorded = txn.drain().addCallback(record).addErrback(not_recorded)
        return self._track(txn, recorded.addCallback(lambda _: self._complete(txn))).join()

    def _finish(self, txn: Txn) -> Shared:
        """The completion of a recorded COMMITTING or ABORTING transaction (started unless under way)."""
        if txn.ending is not None:
            return txn.ending
        txn.outcome = txn.record.state == TxnState.COMMITTING
        return self._track(txn, self._complete(txn))

    @staticmethod
    def _track(txn: Txn, d: defer.Deferred[m.TxnStateReply]) -> Shared:
        def settled(result: Any) -> Any:
            if txn.ending is shared:
                txn.ending = None  # ended (the record says so) or stopped (the next END_TXN or check goes on)
            return result

        shared = Shared(d.addBoth(settled))
        if not shared.done:
            txn.ending = shared
        return shared

    def _complete(self, txn: Txn) -> defer.Deferred[m.TxnStateReply]:
        """Merge (commit) or drop (abort) the transaction segments of a recorded COMMITTING or ABORTING
        transaction, then record its final state; the answer to END_TXN."""
        record = txn.record
        commit = record.state == TxnState.COMMITTING
        final = TxnState.COMMITTED if commit else TxnState.ABORTED
        work = self.merge.merge(record) if commit else self._delete(record)

        def recorded(_: Any) -> defer.Deferred[TxnRecord]:
            return self.records.record(txn, lambda r: r.moved(final, ended_ms=now_ms()))

        def ended(_: Any) -> m.TxnStateReply:
            if commit:
                self._delete(record)
                self._forget_merge_writer(record)
            return m.TxnStateReply(state=final.value)

        def stopped(failure: Failure) -> Failure:
            self._log_failure(failure, "committing" if commit else "aborting", txn)
            return Failure(RetriableError(f"transaction {record.txn_id} is being "
                                          f"{'committed' if commit else 'aborted'}: {failure.getErrorMessage()}"))

        return work.addCallback(recorded).addCallbacks(ended, stopped)

    # -- status and lease ----------------------------------------------------------------------------
    def status(self, r: m.GetTxnStatus, _payload: bytes) -> defer.Deferred[m.TxnStatusReply] | m.TxnStatusReply:
        txn = self.records.get(r.scope, r.stream, r.txn_id)
        if txn is None:
            return m.TxnStatusReply(state="UNKNOWN")
        record = txn.record
        answer = m.TxnStatusReply(state=record.state.value, lease_ms=record.lease_ms, slices=record.slices)
        if record.state != TxnState.OPEN:
            return answer
        return self.broker.blocking(next_events, self.broker, record).addCallback(
            lambda numbers: dataclasses.replace(answer, sequences=numbers))

    def ping(self, r: m.PingTxn, _payload: bytes) -> defer.Deferred[None]:
        txn = self._find(r)
        if txn.closed:
            raise not_open(txn, "extend its lease")
        self._expired(txn, "extend its lease")

        def extend(record: TxnRecord) -> TxnRecord:
            if record.state != TxnState.OPEN:
                raise not_open(txn, "extend its lease")
            return record.moved(TxnState.OPEN, deadline_ms=now_ms() + record.lease_ms)

        return self.records.record(txn, extend).addCallback(lambda _: None)

    def handlers(self) -> Handlers:
        return handlers(serve(m.BeginTxn, self.begin), serve(m.AppendTxnEvents, self.append),
                        serve(m.EndTxn, self.end), serve(m.GetTxnStatus, self.status), serve(m.PingTxn, self.ping))


def _owned_by(txn: Txn, r: m.Request) -> None:
    """AuthorizationError unless the request's principal began the transaction (either unknown: security
    was off when it began, or is off now)."""
    owner = txn.record.owner
    if owner is not None and r.principal is not None and r.principal != owner:
        raise AuthorizationError(f"{r.principal} may not use transaction {txn.record.txn_id}: "
                                 f"{owner} began it")


def txn_handlers(broker: NativeHost) -> Handlers:
    """The transaction commands; blocking (loads the records): call before the reactor runs."""
    txns = NativeTransactions(broker)
    txns.start()
    return txns.handlers()
