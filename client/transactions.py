"""Transactions, Pravega-shaped: events written in a transaction become visible all at once on commit,
or never (abort, or a lease that runs out).

    txw = sm.create_transaction_writer("iot", "readings", writer_id="loader-1")
    with txw.begin_txn() as txn:                   # commits on a clean exit, aborts on an exception
        txn.write_event(b"22.0", routing_key="sensor-7")

On the server a transaction is built the Pravega way (``gateway/native/txn_commands.py``;
docs/architecture.md): its events go to transaction segments beside the stream's, as
plain batches, and a commit appends them to the partitions, where they get their Kafka offsets; nothing
of an open or aborted transaction is ever in the stream, so no reader waits for it. The events of each
partition are numbered from 0 in the transaction, and every batch carries its first and last number,
so a batch resent after a lost connection (``EventSender``'s in-order resend) is stored once. An
event's future gives its partition and its number there (its Kafka offset exists only once committed).
``commit()`` flushes, then returns once COMMITTED is recorded: Kafka consumers and native readers then
see all of its events. The lease is enforced by the server: a transaction left open longer aborts
itself, so a crashed writer's transaction disappears; ``ping()`` restarts the lease. Several
transactions may be open at once, and ``get_txn`` finds one again from another process (to inspect,
commit, abort or write on).

Threads: as ``EventStreamWriter``; ``commit``/``abort`` block the calling thread.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

from millrace.client.connection import Reply
from millrace.client.controller import ControllerClient
from millrace.client.serializers import Serializer
from millrace.client.watermarks import TimeNoter
from millrace.client.writer import EventPosition, EventSender, _Batch, _EventFuture, _Partition
from millrace.protocol import messages as m
from millrace.protocol.errors import ConnectionLostError, RetriableError, TxnFailedError, TxnNotFoundError
from millrace.protocol.events import NO_PRODUCER_ID
from millrace.protocol.messages import Header, Request, decode_reply

T = TypeVar("T")

DEFAULT_LEASE_MS = 120_000
MAX_LEASE_MS = 900_000  # the server's longest lease
RETRY_DELAYS = (0.02, 0.05, 0.1, 0.2, 0.5)


class TxnStatus(enum.Enum):
    """Where a transaction stands (Pravega's Transaction.Status)."""

    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"
    UNKNOWN = "UNKNOWN"  # never begun, or completed longer ago than the server keeps records


class Transaction(EventSender[T]):
    """One open transaction: ``write_event`` as on a writer, then ``commit()`` or ``abort()``."""

    def __init__(self, writer: TransactionalEventStreamWriter[T], txn_id: uuid.UUID,
                 slices: list[tuple[float, float]], lease_ms: int, next_events: dict[int, int] | None = None,
                 retired: tuple[int, ...] = ()) -> None:
        """``next_events``: per partition, the number of the next event (a transaction resumed by
        another process goes on from the server's); ``retired``: partitions not to route to (events
        that still land in one, retired after the begin, are routed by key at commit)."""
        # Plain batches (no producer id): the event numbers make resends exact.
        super().__init__(writer.controller, writer.scope, writer.stream, writer.serializer, NO_PRODUCER_ID, -1,
                         slices, f"transaction {txn_id}", retired=retired)
        self.writer = writer
        self.writer_id = writer.writer_id
        self.txn_id = txn_id
        self.lease_ms = lease_ms
        self._next_event = [(next_events or {}).get(p, 0) for p in range(len(slices))]
        self._ended: TxnStatus | None = None  # set once commit() or abort() has been asked for

    def write_event(self, event: T, routing_key: str | None = None, *, block: bool = True) -> Future[EventPosition]:
        """Queue ``event``; the future completes with (partition, the event's number in the transaction's
        part of that partition) once it is durable in the transaction (or fails). Waits while the buffer
        is full, as ``EventStreamWriter.write_event`` does."""
        data = self.serializer.serialize(event)
        fut = _EventFuture()
        key = None if routing_key is None else routing_key.encode()
        with self._lock:
            self._refuse_writes()
            self._admit(len(data) + (len(key) if key else 0), block)
            p = self._partitions[self._partition_of(routing_key)]
            number = self._next_event[p.number]
            self._next_event[p.number] = number + 1
            self._enqueue(p, key, data, fut, number)
        return fut

    def _request(self, p: _Partition, batch: _Batch) -> Request:
        return m.AppendTxnEvents(scope=self.scope, stream=self.stream, txn_id=self.txn_id, partition=p.number,
                                 first_event=batch.first_event, last_event=batch.last_event)

    def _refuse_writes(self) -> None:
        if self._ended is not None:
            raise TxnFailedError(f"transaction {self.txn_id} is {self._ended.value.lower()}: no more events")

    # -- ending -------------------------------------------------------------------------------------
    def commit(self, timestamp: int | None = None) -> None:
        """Flush, then commit; returns once the commit is complete (every event then visible, once).
        Raises TxnFailedError if the transaction aborted meanwhile (e.g. its lease ran out), and the
        flush's error if an event could not be written (the transaction then stays open until
        ``abort()`` or its lease ends it). With ``timestamp`` (Pravega's ``commit(timestamp)``), the
        writer then notes that time, as ``EventStreamWriter.note_time``: its later transactions'
        events carry times at or after it, and readers' time windows follow."""
        self.flush()
        self._end(commit=True)
        if timestamp is not None and self._ended == TxnStatus.COMMITTED:
            self.writer._noter.note(timestamp)

    def abort(self) -> None:
        """Abort: none of the transaction's events will ever be visible. Returns once that is durable."""
        self._end(commit=False)

    def _end(self, commit: bool) -> None:
        with self._lock:
            self._ended = TxnStatus.COMMITTING if commit else TxnStatus.ABORTING
            self._closed = True
        reply = self.writer._call(m.EndTxn(scope=self.scope, stream=self.stream, txn_id=self.txn_id, commit=commit))
        self._ended = TxnStatus(decode_reply(m.TxnStateReply, reply).state)

    def check_status(self) -> TxnStatus:
        """The transaction's state on the server now."""
        return self.writer.txn_status(self.txn_id)

    def ping(self) -> None:
        """Restart the lease from now (TxnFailedError if the transaction is no longer open)."""
        self.writer._call(m.PingTxn(scope=self.scope, stream=self.stream, txn_id=self.txn_id))

    def __enter__(self) -> Transaction[T]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self.commit()
        elif self._ended is None:
            self.abort()

    def __repr__(self) -> str:
        return f"Transaction({self.scope}/{self.stream}, {self.txn_id})"


class TransactionalEventStreamWriter(Generic[T]):
    """Begins transactions on one stream (Pravega's TransactionalEventStreamWriter). ``lease_ms``: how
    long a transaction may stay open before the server aborts it (at most 15 minutes)."""

    def __init__(self, controller: ControllerClient, scope: str, stream: str, writer_id: str | None = None,
                 serializer: Serializer[T] | None = None, lease_ms: int = DEFAULT_LEASE_MS) -> None:
        if not 0 < lease_ms <= MAX_LEASE_MS:
            raise ValueError(f"lease_ms must be 1 .. {MAX_LEASE_MS}, not {lease_ms}")
        self.controller = controller
        self.scope = scope
        self.stream = stream
        self.writer_id = writer_id or uuid.uuid4().hex
        self.serializer = serializer
        self.lease_ms = lease_ms
        self._noter = TimeNoter(controller, scope, stream, self.writer_id)  # commit(timestamp)'s marks

    def begin_txn(self) -> Transaction[T]:
        """A new open transaction; its lease starts now."""
        txn_id = uuid.uuid4()
        # The id is ours, so a begin whose answer was lost is resent and answers the same transaction.
        reply = decode_reply(m.BeginTxnReply, self._call(m.BeginTxn(
            scope=self.scope, stream=self.stream, txn_id=txn_id, lease_ms=self.lease_ms, writer_id=self.writer_id)))
        return Transaction(self, txn_id, list(reply.slices), reply.lease_ms, retired=reply.retired)

    def get_txn(self, txn_id: uuid.UUID | str) -> Transaction[T]:
        """The transaction ``txn_id``, begun by this or another process, to inspect, write to, commit or
        abort. Its events from here continue each partition's event numbers where the server has them
        (the process that began it must not write to it any more). TxnNotFoundError if the server does
        not know it."""
        txn_id = uuid.UUID(str(txn_id))
        reply = self._status(txn_id)
        if reply.state == TxnStatus.UNKNOWN.value:
            raise TxnNotFoundError(f"no transaction {txn_id} on {self.scope}/{self.stream}")
        txn = Transaction(self, txn_id, list(reply.slices), reply.lease_ms,
                          {int(p): n for p, n in reply.sequences.items()})
        state = TxnStatus(reply.state)
        if state != TxnStatus.OPEN:
            txn._ended = state
            txn._closed = True
        return txn

    def txn_status(self, txn_id: uuid.UUID | str) -> TxnStatus:
        return TxnStatus(self._status(uuid.UUID(str(txn_id))).state)

    def _status(self, txn_id: uuid.UUID) -> m.TxnStatusReply:
        return decode_reply(m.TxnStatusReply, self._call(m.GetTxnStatus(scope=self.scope, stream=self.stream,
                                                                         txn_id=txn_id)))

    def _call(self, request: Request) -> Header:
        """A transaction request, resent while the server asks for a retry or the connection is lost (every
        transaction request answers the same when repeated), for up to the reconnect timeout (or the
        call timeout, if longer) since the first failure."""
        return _call_until_answered(self.controller, lambda: self.controller.pool.request(
            self.controller.endpoint, request).result(self.controller.timeout))

    def close(self) -> None:
        """Each transaction ends by commit, abort or its lease; only the marks' synchronizer of
        ``commit(timestamp)`` is closed."""
        self._noter.close()

    def __enter__(self) -> TransactionalEventStreamWriter[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _call_until_answered(controller: ControllerClient, call: Callable[[], Reply]) -> Header:
    patience = max(controller.pool.reconnect_timeout, controller.timeout)
    first_failure: float | None = None
    attempt = 0
    while True:
        try:
            return call()[0]
        except (RetriableError, ConnectionLostError):
            now = time.monotonic()
            first_failure = now if first_failure is None else first_failure
            if now - first_failure >= patience:
                raise
        time.sleep(RETRY_DELAYS[min(attempt, len(RETRY_DELAYS) - 1)])
        attempt += 1
