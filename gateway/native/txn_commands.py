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
  move between slices, so this holds across any scaling while the transaction was open. Then COMMITTED
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

Threads: the reactor owns ``NativeTransactions``; table and segment I/O that blocks runs on the worker
pool (``NativeHost.blocking``). Per transaction one table write at a time (a DeferredLock); one process
serves a stream's native transactions (the controller's node).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from twisted.internet import defer, reactor, task
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.native.event_commands import partitioned_stream, stream_key
from millrace.gateway.native.host import NativeHost
from millrace.gateway.native.stream_errors import native_refusal
from millrace.protocol.errors import (
    BadAttributeUpdateError,
    EventsRefusedError,
    InvalidRequestError,
    RetriableError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    StreamNotFoundError,
    TxnFailedError,
    TxnNotFoundError,
)
from millrace.protocol.events import OUT_OF_ORDER_SEQUENCE
from millrace.protocol.records import RecordBatchError, validate_produce_records
from millrace.protocol.wire import Command
from millrace.store.contracts import AttributeUpdate, AttributeUpdateType
from millrace.store.controller.transactions import (
    ENDED,
    NativeTransactionTable,
    TxnRecord,
    TxnState,
    record_key,
    transaction_segment_name,
)
from millrace.store.errors import TableKeyNotFoundError, TableKeyVersionMismatchError
from millrace.streams.errors import Reason, batch_refusal
from millrace.streams.futures import to_deferred
from millrace.streams.partitions import PartitionError, PartitionLog
from millrace.streams.partitions.formats import ENVELOPE, ENVELOPE_MAGIC, envelope
from millrace.streams.partitions.writer_events import ALREADY_WRITTEN, WriterEvents
from millrace.streams.resolve import record_logs
from millrace.streams.topics import TopicInfo

log = logging.getLogger(__name__)

MAX_LEASE_MS = 900_000  # as Kafka's transaction.max.timeout.ms and Pravega's default max lease
EVENTS_ATTRIBUTE = "txn.events:"  # + partition: the last event number a transaction segment holds
WRITER_PREFIX = "txn:"  # + uuid: the writer id a commit appends under (``writer_events``)
RETRY_SECONDS = 0.2
MAX_RETRY_SECONDS = 5.0
READ_CHUNK = 4 * 1024 * 1024
MERGE_WINDOW = 16  # a partition's batches appended at once during a commit
BLOCKING_TIMEOUT = 60.0

Handler = Callable[[dict[str, Any], bytes], "defer.Deferred[Any] | dict[str, Any]"]
_Batches = list[tuple[int, int, bytes]]  # (partition, index in the transaction segment, batch)


def events_attribute(partition: int) -> str:
    return f"{EVENTS_ATTRIBUTE}{partition}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _txn_id(h: dict[str, Any]) -> uuid.UUID:
    raw = str(h["txn_id"])
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise InvalidRequestError(f"txn_id {raw!r} is not a UUID") from None


class _Shared:
    """One outcome that several callers wait for: each ``join()`` gets its own Deferred of it."""

    def __init__(self, d: defer.Deferred[Any]) -> None:
        self.done = False
        self.result: Any = None
        self._waiters: list[defer.Deferred[Any]] = []
        d.addBoth(self._fire)

    def _fire(self, result: Any) -> None:
        self.done, self.result = True, result
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            self._deliver(w)

    def _deliver(self, w: defer.Deferred[Any]) -> None:
        if isinstance(self.result, Failure):
            w.errback(self.result)
        else:
            w.callback(self.result)

    def join(self) -> defer.Deferred[Any]:
        w: defer.Deferred[Any] = defer.Deferred()
        if self.done:
            self._deliver(w)
        else:
            self._waiters.append(w)
        return w


class _Txn:
    """One transaction as the reactor knows it: its record (as durable) and what is under way."""

    def __init__(self, record: TxnRecord, version: int) -> None:
        self.record = record
        self.version = version
        self.lock = defer.DeferredLock()  # one table write at a time
        self.ending: _Shared | None = None  # the end under way (its final state), if any
        self.outcome: bool | None = None  # what the end under way does: True commits
        self.appending = 0  # appends in flight
        self.drained: list[defer.Deferred[None]] = []  # fire once ``appending`` is 0
        self.created: dict[str, _Shared | None] = {}  # segments made (None) or being made
        self.removing = False

    @property
    def closed(self) -> bool:
        """No more appends: an end has begun (or is recorded)."""
        return self.outcome is not None or self.record.state != TxnState.OPEN

    def drain(self) -> defer.Deferred[None]:
        if self.appending == 0:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self.drained.append(d)
        return d

    def appended(self, result: Any) -> Any:
        self.appending -= 1
        if self.appending == 0:
            waiting, self.drained = self.drained, []
            for d in waiting:
                d.callback(None)
        return result


class _RecordWriter:
    """Record changes written together: those queued while a table write runs go in the next one, so
    many transactions' begins and ends share one table append (and its fsync)."""

    def __init__(self, table: NativeTransactionTable, blocking: Callable[..., defer.Deferred[Any]]) -> None:
        self.table = table
        self.blocking = blocking
        self._queue: list[tuple[TxnRecord, int | None, defer.Deferred[int]]] = []
        self._busy = False

    def write(self, record: TxnRecord, version: int | None) -> defer.Deferred[int]:
        """Create (``version`` None) or conditionally replace ``record``; its new version."""
        d: defer.Deferred[int] = defer.Deferred()
        self._queue.append((record, version, d))
        self._pump()
        return d

    def _pump(self) -> None:
        if self._busy or not self._queue:
            return
        batch, self._queue = self._queue, []
        self._busy = True
        self.blocking(self.table.write, [(r, v) for r, v, _ in batch]).addBoth(self._written, batch)

    def _written(self, outcome: Any, batch: list[tuple[TxnRecord, int | None, defer.Deferred[int]]]) -> None:
        self._busy = False
        for i, (_, _, d) in enumerate(batch):
            if isinstance(outcome, Failure):
                d.errback(outcome)
            elif isinstance(outcome[i], Exception):
                d.errback(Failure(outcome[i]))
            else:
                d.callback(outcome[i])
        self._pump()


def _sealed_batches(broker: NativeHost, name: str) -> _Batches:
    """Blocking: seal a transaction segment and read its batches back, in order (none if it was never
    made or is gone)."""
    store = broker.store
    try:
        length = store.seal(name).result(BLOCKING_TIMEOUT)
    except SegmentNotFoundError:
        return []
    data = bytearray()
    while len(data) < length:
        read = store.read(name, len(data), min(READ_CHUNK, length - len(data))).result(BLOCKING_TIMEOUT)
        if not read.data:
            raise RuntimeError(f"{name}: no data at {len(data)} below its length {length}")
        data += read.data
    batches: _Batches = []
    pos = 0
    while pos < length:
        magic, _version, partition, size = ENVELOPE.unpack_from(data, pos)
        if magic != ENVELOPE_MAGIC or pos + ENVELOPE.size + size > length:
            raise RuntimeError(f"{name}: no batch envelope at {pos}")
        start = pos + ENVELOPE.size
        batches.append((partition, len(batches), bytes(data[start:start + size])))
        pos = start + size
    return batches


BatchAppender = Callable[[TopicInfo, PartitionLog, bytes, WriterEvents], "defer.Deferred[int]"]


def local_batch_appender(broker: NativeHost) -> BatchAppender:
    """Commits append through this node's partition storage (a single server leads every partition)."""
    return lambda topic, log_, batch, events: broker.partitions.append(topic, log_, memoryview(batch),
                                                                       events=events)


def _delete_segments(broker: NativeHost, names: list[str]) -> None:
    """Blocking: delete transaction segments that exist."""
    for name in names:
        with contextlib.suppress(SegmentNotFoundError):
            broker.store.delete(name).result(BLOCKING_TIMEOUT)


def _next_events(broker: NativeHost, record: TxnRecord) -> dict[str, int]:
    """Blocking: per partition written so far, the next event number its transaction segment expects."""
    answer: dict[str, int] = {}
    for name, partitions in record.segments:
        try:
            attributes = broker.store.get_info(name).attributes
        except SegmentNotFoundError:
            continue
        for p in partitions:
            last = attributes.get(events_attribute(p))
            if last is not None:
                answer[str(p)] = last + 1
    return answer


class NativeTransactions:
    """Every native transaction of this node (reactor thread)."""

    def __init__(self, broker: NativeHost, clock: IReactorTime | None = None, load: bool = True) -> None:
        """Blocking with ``load``: loads the records (before the reactor runs, like the Kafka coordinator's);
        without, ``reload`` loads them later (a cluster node, in a term of the table's container)."""
        self.broker = broker
        self.clock = clock if clock is not None else IReactorTime(reactor)
        self.retention_ms = broker.config.native_txn_retention_ms
        self.table = NativeTransactionTable(broker.tables)
        self.txns: dict[bytes, _Txn] = {r.key: _Txn(r, v) for r, v in self.table.load()} if load else {}
        self._writer = _RecordWriter(self.table, broker.blocking)
        self._beginning: dict[bytes, _Shared] = {}
        self._loop: task.LoopingCall | None = None
        self._stopped = False
        # How a commit lands a batch in its partition: here, through this node's partition storage; a
        # cluster node sends the batches of partitions another node leads to that node (``txn_cluster``).
        self.append_batch: BatchAppender = local_batch_appender(broker)
        # Who else must forget a committed transaction's merge writer: on a cluster, the other nodes,
        # whose partitions the merge appended to (``txn_cluster``); (stream key, writer id).
        self.forget_elsewhere: Callable[[TxnRecord, str], None] | None = None

    def reload(self) -> defer.Deferred[None]:
        """Read the records again (worker pool), then ``start``: a node that begins serving the
        transactions (a new term of the table's container) works from what its predecessors recorded."""
        self.stop()
        self._stopped = False

        def loaded(records: list[tuple[TxnRecord, int]]) -> None:
            self.txns = {r.key: _Txn(r, v) for r, v in records}
            self._writer = _RecordWriter(self.table, self.broker.blocking)
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
        self.txns = {}

    # -- start and the periodic check -----------------------------------------------------------------
    def start(self) -> None:
        """Finish what a crash left COMMITTING or ABORTING, delete ended ones' leftover segments, then
        check leases and retention every ``transaction_check_seconds``."""
        for txn in list(self.txns.values()):
            state = txn.record.state
            if state in (TxnState.COMMITTING, TxnState.ABORTING):
                self._finish(txn).join().addErrback(self._log_failure, "finishing", txn)
            elif state in ENDED:
                self._delete(txn.record)
                if state == TxnState.COMMITTED:  # a crash may have come before its numbers were dropped
                    self._forget_merge_writer(txn.record)
        self._loop = task.LoopingCall(self.check)
        self._loop.clock = self.clock
        self._loop.start(self.broker.config.transaction_check_seconds, now=False)

    def check(self) -> None:
        """Abort OPEN transactions past their lease, go on with ends a failure stopped, forget ended
        ones past the retention."""
        now = _now_ms()
        for txn in list(self.txns.values()):
            record = txn.record
            if record.state == TxnState.OPEN and txn.outcome is None and now > record.deadline_ms:
                self._expire(txn)
            elif record.state in (TxnState.COMMITTING, TxnState.ABORTING) and txn.ending is None:
                self._finish(txn).join().addErrback(self._log_failure, "finishing", txn)
            elif record.state in ENDED and not txn.removing and now > record.ended_ms + self.retention_ms:
                self._remove(txn)

    def _expire(self, txn: _Txn) -> None:
        """Abort an OPEN transaction whose lease ran out."""
        defer.maybeDeferred(self._end, txn, False).addErrback(self._log_failure, "aborting (lease)", txn)

    def _expired(self, txn: _Txn, doing: str) -> None:
        """Raise (and abort it) if the transaction's lease ran out before the periodic check saw it."""
        if txn.record.state == TxnState.OPEN and txn.outcome is None and _now_ms() > txn.record.deadline_ms:
            self._expire(txn)
            raise TxnFailedError(f"transaction {txn.record.txn_id}: its lease ran out, cannot {doing}")

    def _remove(self, txn: _Txn) -> None:
        txn.removing = True
        record = txn.record

        def removed(_: Any) -> None:
            if self.txns.get(record.key) is txn:
                del self.txns[record.key]
            if record.state == TxnState.COMMITTED:  # its stream may have loaded after start's forget
                self._forget_merge_writer(record)

        def failed(failure: Failure) -> None:
            txn.removing = False  # the next check tries again
            self._log_failure(failure, "forgetting", txn)

        d = txn.lock.run(lambda: self.broker.blocking(self.table.remove, record, txn.version))
        d.addCallback(lambda _: self._delete(record)).addCallbacks(removed, failed)

    def _forget_merge_writer(self, record: TxnRecord) -> None:
        """A committed transaction's merge never appends again: drop its writer id's event numbers from
        the partitions and their segments' attributes, which would otherwise grow by one per commit."""
        name = stream_key(self.broker, {"scope": record.scope, "stream": record.stream})
        self.broker.partitions.forget_writer(name, f"{WRITER_PREFIX}{record.txn_id}")
        if self.forget_elsewhere is not None:
            self.forget_elsewhere(record, f"{WRITER_PREFIX}{record.txn_id}")

    def _delete(self, record: TxnRecord) -> defer.Deferred[None]:
        names = [name for name, _ in record.segments]
        return self.broker.blocking(_delete_segments, self.broker, names).addErrback(
            lambda f: log.warning("deleting the segments of transaction %s failed: %s", record.txn_id,
                                  f.getErrorMessage()))

    @staticmethod
    def _log_failure(failure: Failure, doing: str, txn: _Txn) -> None:
        log.warning("%s transaction %s failed: %s", doing, txn.record.txn_id, failure.getErrorMessage())

    # -- lookups ------------------------------------------------------------------------------------
    def _find(self, h: dict[str, Any]) -> _Txn:
        txn = self.txns.get(record_key(str(h["scope"]), str(h["stream"]), _txn_id(h)))
        if txn is None:
            raise TxnNotFoundError(f"no transaction {h['txn_id']} on {h['scope']}/{h['stream']}")
        return txn

    @staticmethod
    def _not_open(txn: _Txn, doing: str) -> TxnFailedError:
        state = txn.record.state.value if txn.outcome is None or txn.record.state in ENDED else (
            "committing" if txn.outcome else "aborting")
        return TxnFailedError(f"transaction {txn.record.txn_id} is {state.lower()}: cannot {doing}")

    # -- table writes (under the transaction's lock) ----------------------------------------------------
    def _record(self, txn: _Txn, change: Callable[[TxnRecord], TxnRecord]) -> defer.Deferred[TxnRecord]:
        """Replace the record with ``change(record)``, conditionally on the version we hold."""

        def write() -> defer.Deferred[TxnRecord]:
            updated = change(txn.record)

            def written(version: int) -> TxnRecord:
                txn.record, txn.version = updated, version
                return updated

            def lost(failure: Failure) -> Any:
                if not failure.check(TableKeyVersionMismatchError, TableKeyNotFoundError):
                    return failure
                # Another controller instance changed it: never overwrite, take the record as it is now
                # (the caller's request is answered retriably and sees it).
                return self.broker.blocking(self.table.get, updated.scope, updated.stream,
                                            updated.txn_id).addCallback(adopt)

            def adopt(found: tuple[TxnRecord, int] | None) -> None:
                if found is None:
                    if self.txns.get(txn.record.key) is txn:
                        del self.txns[txn.record.key]
                else:
                    txn.record, txn.version = found
                raise RetriableError(f"transaction {updated.txn_id} changed meanwhile")

            return self._writer.write(updated, txn.version).addCallbacks(written, lost)

        return txn.lock.run(write)

    # -- commands -----------------------------------------------------------------------------------
    def begin(self, h: dict[str, Any], _payload: bytes) -> defer.Deferred[dict[str, Any]] | dict[str, Any]:
        scope, stream, txn_id = str(h["scope"]), str(h["stream"]), _txn_id(h)
        lease_ms = int(h["lease_ms"])
        if not 0 < lease_ms <= MAX_LEASE_MS:
            raise InvalidRequestError(f"the lease must be 1 ms .. {MAX_LEASE_MS} ms, not {lease_ms}")
        key = record_key(scope, stream, txn_id)
        txn = self.txns.get(key)
        if txn is not None:
            if txn.record.state == TxnState.OPEN and txn.outcome is None:
                return self._begun(txn.record)
            raise self._not_open(txn, "begin it again")
        under_way = self._beginning.get(key)
        if under_way is not None:  # a resent begin: the same answer
            return under_way.join()

        def located(found: tuple[TopicInfo, list[PartitionLog]]) -> defer.Deferred[dict[str, Any]]:
            topic, parts = found
            holding: dict[str, list[int]] = defaultdict(list)
            for p in range(topic.partition_count):
                writer = parts[p].writer
                if writer is None:
                    raise RetriableError(f"{scope}/{stream} partition {p} is loading")
                holding[writer.name].append(p)
            now = _now_ms()
            record = TxnRecord(scope, stream, txn_id, str(h.get("writer_id", "")), TxnState.OPEN, lease_ms,
                               now + lease_ms, now, 0, tuple(topic.slices),
                               tuple((transaction_segment_name(parent, txn_id), tuple(ps))
                                     for parent, ps in holding.items()))

            def recorded(version: int) -> dict[str, Any]:
                self.txns[key] = _Txn(record, version)
                return self._begun(record)

            return self._writer.write(record, None).addCallback(recorded)

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
        shared = _Shared(begun)
        if not shared.done:
            self._beginning[key] = shared
        return shared.join()

    @staticmethod
    def _begun(record: TxnRecord) -> dict[str, Any]:
        return {"slices": [list(s) for s in record.slices], "lease_ms": record.lease_ms}

    def append(self, h: dict[str, Any], payload: bytes) -> defer.Deferred[dict[str, Any]]:
        txn = self._find(h)
        partition, first, last = int(h["partition"]), int(h["first_event"]), int(h["last_event"])
        if txn.closed:
            raise self._not_open(txn, "write to it")
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
        topic = self.broker.topics.record(stream_key(self.broker, h))
        limit = self.broker.partitions.max_message_bytes
        if topic is not None:
            limit = min(limit, int(topic.config("max.message.bytes")))
        if header.size > limit:
            raise EventsRefusedError(f"batch of {header.size} bytes exceeds max.message.bytes={limit}",
                                     int(ErrorCode.MESSAGE_TOO_LARGE))
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
                return Failure(self._not_open(txn, "write to it"))
            return failure

        def settle(info: Any) -> dict[str, Any]:
            stored = info.attributes.get(events_attribute(partition), -1)
            if stored >= last:
                return {"offset": first}  # resent after a lost answer: stored once already
            if stored < first - 1:
                raise EventsRefusedError(f"events {first}..{last} follow {stored}: a gap",
                                         OUT_OF_ORDER_SEQUENCE)
            raise RetriableError(f"events before {last} are being stored")  # the original is not durable yet

        d = self._created(txn, name).addCallback(store).addCallbacks(lambda _: {"offset": first}, refused)
        return d.addBoth(txn.appended)

    def _created(self, txn: _Txn, name: str) -> defer.Deferred[None]:
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

        shared = _Shared(to_deferred(self.broker.store.create_segment(name)).addBoth(made))
        if not shared.done:
            txn.created[name] = shared
        return shared.join()

    def end(self, h: dict[str, Any], _payload: bytes) -> defer.Deferred[dict[str, Any]] | dict[str, Any]:
        txn = self._find(h)
        return self._end(txn, bool(h["commit"]))

    def _end(self, txn: _Txn, commit: bool) -> defer.Deferred[dict[str, Any]] | dict[str, Any]:
        state = txn.record.state
        target, final = ((TxnState.COMMITTING, TxnState.COMMITTED) if commit
                         else (TxnState.ABORTING, TxnState.ABORTED))
        if state == final:
            return {"state": state.value}
        if txn.ending is not None and txn.outcome == commit:
            return txn.ending.join()
        if state == target:  # recorded before a restart, or its completion stopped on a failure
            return self._finish(txn).join()
        if state != TxnState.OPEN or txn.outcome is not None:
            raise self._not_open(txn, "commit it" if commit else "abort it")
        if commit:
            self._expired(txn, "commit it")
        txn.outcome = commit  # from here no append is admitted

        def record(_: Any) -> defer.Deferred[TxnRecord]:
            return self._record(txn, lambda r: r.moved(target))

        def not_recorded(failure: Failure) -> Failure:
            txn.outcome = None  # still OPEN: it may be ended again
            txn.ending = None
            return failure

        recorded = txn.drain().addCallback(record).addErrback(not_recorded)
        return self._track(txn, recorded.addCallback(lambda _: self._complete(txn))).join()

    def _finish(self, txn: _Txn) -> _Shared:
        """The completion of a recorded COMMITTING or ABORTING transaction (started unless under way)."""
        if txn.ending is not None:
            return txn.ending
        txn.outcome = txn.record.state == TxnState.COMMITTING
        return self._track(txn, self._complete(txn))

    @staticmethod
    def _track(txn: _Txn, d: defer.Deferred[dict[str, Any]]) -> _Shared:
        def settled(result: Any) -> Any:
            if txn.ending is shared:
                txn.ending = None  # ended (the record says so) or stopped (the next END_TXN or check goes on)
            return result

        shared = _Shared(d.addBoth(settled))
        if not shared.done:
            txn.ending = shared
        return shared

    def _complete(self, txn: _Txn) -> defer.Deferred[dict[str, Any]]:
        """Merge (commit) or drop (abort) the transaction segments of a recorded COMMITTING or ABORTING
        transaction, then record its final state; the answer to END_TXN."""
        record = txn.record
        commit = record.state == TxnState.COMMITTING
        final = TxnState.COMMITTED if commit else TxnState.ABORTED
        work = self._merge(record) if commit else self._delete(record)

        def recorded(_: Any) -> defer.Deferred[TxnRecord]:
            return self._record(txn, lambda r: r.moved(final, ended_ms=_now_ms()))

        def ended(_: Any) -> dict[str, Any]:
            if commit:
                self._delete(record)
                self._forget_merge_writer(record)
            return {"state": final.value}

        def stopped(failure: Failure) -> Failure:
            self._log_failure(failure, "committing" if commit else "aborting", txn)
            return Failure(RetriableError(f"transaction {record.txn_id} is being "
                                          f"{'committed' if commit else 'aborted'}: {failure.getErrorMessage()}"))

        return work.addCallback(recorded).addCallbacks(ended, stopped)

    # -- commit: the merge ----------------------------------------------------------------------------
    def _merge(self, record: TxnRecord) -> defer.Deferred[None]:
        """Append every batch of the transaction segments to its partition, in order (retried until done)."""
        name = stream_key(self.broker, {"scope": record.scope, "stream": record.stream})
        writer_id = f"{WRITER_PREFIX}{record.txn_id}"

        counts = [0, 0]  # batches, and those a commit before a crash had appended already

        def merge_segment(batches: _Batches) -> defer.Deferred[Any]:
            by_partition: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
            for partition, index, batch in batches:
                by_partition[partition].append((index, batch))
            counts[0] += len(batches)
            return defer.gatherResults([self._land(name, writer_id, p, todo, 0, counts)
                                        for p, todo in by_partition.items()], consumeErrors=True)

        def merged(_: Any) -> None:
            if counts[1]:
                log.info("transaction %s: commit resumed, %d of its %d batches had been appended already",
                         record.txn_id, counts[1], counts[0])

        return defer.gatherResults([
            self.broker.blocking(_sealed_batches, self.broker, segment).addCallback(merge_segment)
            for segment, _ in record.segments], consumeErrors=True).addCallback(merged)

    def _land(self, name: str, writer_id: str, partition: int, batches: list[tuple[int, bytes]],
              attempt: int, counts: list[int]) -> defer.Deferred[None]:
        """Append ``batches`` to the partition's current segment, ``MERGE_WINDOW`` at a time (a big
        transaction neither holds the reactor for one long turn nor floods the container); from the first
        that failed, again later (those that had landed answer ALREADY_WRITTEN)."""
        topic = self.broker.topics.record(name)
        if topic is None:
            log.warning("committing into %s: the stream is gone, %d batches of partition %d dropped", name,
                        len(batches), partition)
            return defer.succeed(None)

        def append_all(found: tuple[TopicInfo, list[PartitionLog]]) -> defer.Deferred[Any]:
            current, parts = found
            acks: list[defer.Deferred[int]] = []
            for index, batch in batches[:MERGE_WINDOW]:
                try:
                    acks.append(self.append_batch(current, parts[partition], batch,
                                                  WriterEvents(writer_id, index, index)))
                except PartitionError as exc:
                    acks.append(defer.fail(exc))
                    break
            return defer.DeferredList(acks, consumeErrors=True)

        def landed(results: list[tuple[bool, Any]]) -> defer.Deferred[None] | None:
            if self._stopped:
                return None  # another node serves the transactions now and finishes this commit
            failed = next((i for i, (ok, _) in enumerate(results) if not ok), len(results))
            counts[1] += sum(1 for _, offset in results[:failed] if offset == ALREADY_WRITTEN)
            if failed == len(results):
                rest = batches[failed:]
                return self._land(name, writer_id, partition, rest, 0, counts) if rest else None
            reason = results[failed][1]
            delay = min(MAX_RETRY_SECONDS, RETRY_SECONDS * 2 ** min(attempt, 5))
            level = logging.DEBUG if isinstance(reason.value, PartitionError) and reason.value.reason in (
                Reason.NOT_OWNER, Reason.LOADING, Reason.SEGMENT_SEALED) else logging.WARNING
            log.log(level, "committing into %s-%d: %s; again in %.1f s", name, partition,
                    reason.getErrorMessage(), delay)
            return task.deferLater(self.clock, delay, lambda: None).addCallback(
                lambda _: self._land(name, writer_id, partition, batches[failed:], attempt + 1, counts))

        return record_logs(self.broker, topic).addCallback(append_all).addCallback(landed)

    # -- status and lease ----------------------------------------------------------------------------
    def status(self, h: dict[str, Any], _payload: bytes) -> defer.Deferred[dict[str, Any]] | dict[str, Any]:
        txn = self.txns.get(record_key(str(h["scope"]), str(h["stream"]), _txn_id(h)))
        if txn is None:
            return {"state": "UNKNOWN"}
        record = txn.record
        answer: dict[str, Any] = {"state": record.state.value, "lease_ms": record.lease_ms,
                                  "slices": [list(s) for s in record.slices], "sequences": {}}
        if record.state != TxnState.OPEN:
            return answer
        return self.broker.blocking(_next_events, self.broker, record).addCallback(
            lambda numbers: {**answer, "sequences": numbers})

    def ping(self, h: dict[str, Any], _payload: bytes) -> defer.Deferred[dict[str, Any]]:
        txn = self._find(h)
        if txn.closed:
            raise self._not_open(txn, "extend its lease")
        self._expired(txn, "extend its lease")

        def extend(record: TxnRecord) -> TxnRecord:
            if record.state != TxnState.OPEN:
                raise self._not_open(txn, "extend its lease")
            return record.moved(TxnState.OPEN, deadline_ms=_now_ms() + record.lease_ms)

        return self._record(txn, extend).addCallback(lambda _: {})


def txn_handlers(broker: NativeHost) -> dict[int, Handler]:
    """The transaction commands; blocking (loads the records): call before the reactor runs."""
    txns = NativeTransactions(broker)
    txns.start()
    return {Command.BEGIN_TXN: txns.begin, Command.APPEND_TXN_EVENTS: txns.append, Command.END_TXN: txns.end,
            Command.TXN_STATUS: txns.status, Command.PING_TXN: txns.ping}
