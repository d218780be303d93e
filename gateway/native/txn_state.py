"""What the reactor holds of the native transactions: their records as durable in the controller's table
(``store.controller.transactions``) and, per transaction, what is under way; and the one way a record
changes (``TxnRecords.record``: a conditional table write under the transaction's lock, coalesced with
other transactions' writes).

Threads: the reactor; the table writes run on the worker pool (``NativeHost.blocking``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.protocol.errors import RetriableError, TxnFailedError, TxnNotFoundError
from millrace.store.controller.transactions import (
    ENDED,
    NativeTransactionTable,
    TxnRecord,
    TxnState,
    record_key,
)
from millrace.store.errors import TableKeyNotFoundError, TableKeyVersionMismatchError
from millrace.store.tables.coalescing import CoalescingWriter

EVENTS_ATTRIBUTE = "txn.events:"  # + partition: the last event number a transaction segment holds
WRITER_PREFIX = "txn:"  # + uuid: the writer id a commit appends under (``writer_events``)


def events_attribute(partition: int) -> str:
    return f"{EVENTS_ATTRIBUTE}{partition}"


def now_ms() -> int:
    return int(time.time() * 1000)


class Shared:
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


class Txn:
    """One transaction as the reactor knows it: its record (as durable) and what is under way."""

    def __init__(self, record: TxnRecord, version: int) -> None:
        self.record = record
        self.version = version
        self.lock = defer.DeferredLock()  # one table write at a time
        self.ending: Shared | None = None  # the end under way (its final state), if any
        self.outcome: bool | None = None  # what the end under way does: True commits
        self.appending = 0  # appends in flight
        self.drained: list[defer.Deferred[None]] = []  # fire once ``appending`` is 0
        self.created: dict[str, Shared | None] = {}  # segments made (None) or being made
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


def not_open(txn: Txn, doing: str) -> TxnFailedError:
    """The error of a request that needs the transaction OPEN and not being ended."""
    state = txn.record.state.value if txn.outcome is None or txn.record.state in ENDED else (
        "committing" if txn.outcome else "aborting")
    return TxnFailedError(f"transaction {txn.record.txn_id} is {state.lower()}: cannot {doing}")


class TxnRecords:
    """The transactions this node serves, by record key, and their table (reactor thread)."""

    def __init__(self, table: NativeTransactionTable, blocking: Callable[..., defer.Deferred[Any]],
                 records: list[tuple[TxnRecord, int]]) -> None:
        self.table = table
        self.blocking = blocking
        self.txns: dict[bytes, Txn] = {r.key: Txn(r, v) for r, v in records}
        self._writer: CoalescingWriter[tuple[TxnRecord, int | None], int] = CoalescingWriter(
            table.write, blocking)

    def get(self, scope: str, stream: str, txn_id: uuid.UUID) -> Txn | None:
        return self.txns.get(record_key(scope, stream, txn_id))

    def find(self, scope: str, stream: str, txn_id: uuid.UUID) -> Txn:
        txn = self.get(scope, stream, txn_id)
        if txn is None:
            raise TxnNotFoundError(f"no transaction {txn_id} on {scope}/{stream}")
        return txn

    def create(self, record: TxnRecord) -> defer.Deferred[Txn]:
        """Record a new transaction (TableKeyVersionMismatchError if someone else did) and hold it."""

        def recorded(version: int) -> Txn:
            txn = self.txns[record.key] = Txn(record, version)
            return txn

        return self._writer.write((record, None)).addCallback(recorded)

    def record(self, txn: Txn, change: Callable[[TxnRecord], TxnRecord]) -> defer.Deferred[TxnRecord]:
        """Replace the record with ``change(record)``, conditionally on the version we hold (under the
        transaction's lock)."""

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
                return self.blocking(self.table.get, updated.scope, updated.stream,
                                     updated.txn_id).addCallback(adopt)

            def adopt(found: tuple[TxnRecord, int] | None) -> None:
                if found is None:
                    self.drop(txn)
                else:
                    txn.record, txn.version = found
                raise RetriableError(f"transaction {updated.txn_id} changed meanwhile")

            return self._writer.write((updated, txn.version)).addCallbacks(written, lost)

        return txn.lock.run(write)

    def remove(self, txn: Txn) -> defer.Deferred[None]:
        """Remove the record from the table (under the transaction's lock); ``drop`` forgets it here."""
        return txn.lock.run(lambda: self.blocking(self.table.remove, txn.record, txn.version))

    def drop(self, txn: Txn) -> None:
        if self.txns.get(txn.record.key) is txn:
            del self.txns[txn.record.key]
