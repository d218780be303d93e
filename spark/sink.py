"""Writing: every Spark task writes its rows into a transaction of its own; the driver commits a batch's
transactions exactly once per batch id.

A task leaves its transaction open and hands its id to the driver (the commit message). The driver
records the batch in a key-value table before committing anything, so a crash at any point leaves one of
three states a rerun of the batch id recognises:

- nothing recorded for the batch: it never committed; the rerun's transactions are committed;
- recorded as ``committing``: the commit was under way. The recorded transactions (still open: their
  lease outlives a driver restart) are committed and the rerun's aborted, so the batch lands once;
- recorded as ``committed``, or a later batch recorded: the rerun's transactions are aborted.

The record is one key per sink (``sink_id``) in the table ``commit_table`` (default
``<scope>/spark-commits``): the last batch id, its transactions and its state, updated with conditional
puts, so two drivers of the same sink (a zombie beside its replacement) cannot both commit a batch.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from millrace import (
    BytesSerializer,
    KeyValueTable,
    StreamManager,
    TableKeyVersionMismatchError,
    Transaction,
    TransactionalEventStreamWriter,
    TxnFailedError,
    TxnNotFoundError,
    TxnStatus,
)
from millrace.spark.options import SinkOptions

COMMITTING, COMMITTED = "committing", "committed"


class SinkSchemaError(ValueError):
    """The rows written do not have the columns the sink writes from."""


class SinkCommitError(RuntimeError):
    """A batch cannot be committed exactly once: say why, so nothing is silently lost or doubled."""


@dataclass(frozen=True)
class TaskTransaction(WriterCommitMessage):
    """What a task hands the driver: its open transaction (None when it had no rows) and how many events
    the transaction holds."""

    txn_id: str | None
    events: int


@dataclass(frozen=True)
class BatchRecord:
    """The sink's record in the commit table: the last batch it began committing."""

    batch_id: int
    txn_ids: tuple[str, ...]
    state: str  # COMMITTING or COMMITTED

    def to_bytes(self) -> bytes:
        return json.dumps({"batch_id": self.batch_id, "txns": list(self.txn_ids), "state": self.state}).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> BatchRecord:
        try:
            body = json.loads(raw)
            return cls(int(body["batch_id"]), tuple(str(t) for t in body["txns"]), str(body["state"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise SinkCommitError(f"the sink's commit record is not one this connector wrote: {exc!r}") from None


def transaction_writer(sm: StreamManager, options: SinkOptions) -> TransactionalEventStreamWriter[bytes]:
    return sm.create_transaction_writer(options.scope, options.stream, serializer=BytesSerializer(),
                                        lease_ms=options.txn_lease_ms)


def write_rows(options: SinkOptions, rows: Iterator[Row]) -> TaskTransaction:
    """One task's rows into a transaction left open for the driver to commit. Rows need ``event``
    (binary, or a string written as UTF-8) and may have ``routing_key`` (a string, or null)."""
    with options.connection.manager() as sm:
        txn: Transaction[bytes] | None = None
        events = 0
        try:
            for row in rows:
                if txn is None:  # a task without rows leaves no transaction behind
                    txn = transaction_writer(sm, options).begin_txn()
                txn.write_event(_event_bytes(row), _routing_key(row))
                events += 1
            if txn is not None:
                txn.flush()  # durable in the transaction before the driver may commit it
        except BaseException:
            if txn is not None:
                txn.abort()
            raise
        return TaskTransaction(None if txn is None else str(txn.txn_id), events)


def check_schema(schema: StructType) -> None:
    """SinkSchemaError, on the driver before any task runs, unless the rows have an ``event`` column
    (binary or string) and, if any, a string ``routing_key``."""
    fields = {f.name: f.dataType for f in schema.fields}
    if not isinstance(fields.get("event"), (BinaryType, StringType)):
        raise SinkSchemaError(f"format('millrace') writes rows with an 'event' column, binary or string "
                              f"(found {schema.simpleString()})")
    if "routing_key" in fields and not isinstance(fields["routing_key"], StringType):
        raise SinkSchemaError(f"column 'routing_key' must be a string, not {fields['routing_key'].simpleString()}")


def _event_bytes(row: Row) -> bytes:
    value = row["event"]
    if value is None:
        raise SinkSchemaError("an event is null: every row needs its 'event'")
    return value.encode() if isinstance(value, str) else bytes(value)


def _routing_key(row: Row) -> str | None:
    if "routing_key" not in row.__fields__:
        return None  # no such column: events without a key are spread over the stream
    key = row["routing_key"]
    return None if key is None else str(key)


class BatchCommitter:
    """Commits a batch's transactions exactly once per (sink_id, batch id), as the module says."""

    def __init__(self, sm: StreamManager, options: SinkOptions) -> None:
        if options.sink_id is None:
            raise ValueError("exactly-once commits need a sink_id")
        self.sm, self.options, self.key = sm, options, options.sink_id
        self.txw = transaction_writer(sm, options)
        self.table: KeyValueTable = sm.create_key_value_table(options.commit_scope, options.commit_table)

    def commit(self, txn_ids: Sequence[str], batch_id: int) -> bool:
        """Commit ``txn_ids`` as batch ``batch_id``, or abort them when the batch was committed before;
        whether they were committed."""
        found = self.table.get(self.key)
        if found is not None:
            record = BatchRecord.from_bytes(found[0])
            if record.batch_id > batch_id or (record.batch_id == batch_id and record.state == COMMITTED):
                self._abort(txn_ids)  # a rerun of a batch that landed already
                return False
            if record.batch_id == batch_id and self._finish(record):
                self._abort(txn_ids)  # the crashed attempt's transactions landed instead
                self.table.put(self.key, BatchRecord(batch_id, record.txn_ids, COMMITTED).to_bytes(),
                               if_version=found[1])
                return False
        pending = BatchRecord(batch_id, tuple(txn_ids), COMMITTING).to_bytes()
        try:
            version = (self.table.put_if_absent(self.key, pending) if found is None
                       else self.table.put(self.key, pending, if_version=found[1]))
        except TableKeyVersionMismatchError:
            self._abort(txn_ids)
            raise SinkCommitError(f"sink {self.key!r}: another driver committed batch {batch_id} meanwhile; "
                                  "its transactions were aborted") from None
        for txn_id in txn_ids:
            self.txw.get_txn(txn_id).commit()
        self.table.put(self.key, BatchRecord(batch_id, tuple(txn_ids), COMMITTED).to_bytes(), if_version=version)
        return True

    def _finish(self, record: BatchRecord) -> bool:
        """Complete a commit that a crash interrupted: True once the recorded transactions are all
        committed; False if none of them had committed and they can no longer be (their lease ran out),
        so the rerun's transactions must take their place."""
        statuses = {t: self.txw.txn_status(t) for t in record.txn_ids}
        unknown = [t for t, s in statuses.items() if s == TxnStatus.UNKNOWN]
        if unknown:
            # Forgotten by the server (or never begun): committed or not, nobody can say any more.
            raise SinkCommitError(
                f"sink {self.key!r}, batch {record.batch_id}: a crash interrupted its commit, and the server "
                f"no longer knows transactions {unknown}; whether they landed cannot be told")
        lost = [t for t, s in statuses.items() if s in (TxnStatus.ABORTED, TxnStatus.ABORTING)]
        if lost:
            if len(lost) == len(statuses):
                return False  # nothing of the crashed attempt is visible
            raise SinkCommitError(
                f"sink {self.key!r}, batch {record.batch_id}: a crash interrupted its commit, and transactions "
                f"{lost} ended without committing while others did; the batch cannot land exactly once")
        for txn_id, status in statuses.items():
            if status != TxnStatus.COMMITTED:
                self.txw.get_txn(txn_id).commit()
        return True

    def _abort(self, txn_ids: Sequence[str]) -> None:
        abort_txns(self.txw, txn_ids)


def abort_txns(txw: TransactionalEventStreamWriter[bytes], txn_ids: Sequence[str]) -> None:
    for txn_id in txn_ids:
        # Ended already (its lease ran out) or forgotten: nothing of it is visible either way.
        with contextlib.suppress(TxnFailedError, TxnNotFoundError):
            txw.get_txn(txn_id).abort()


def txn_ids(messages: Sequence[WriterCommitMessage | None]) -> list[str]:
    return [m.txn_id for m in messages if isinstance(m, TaskTransaction) and m.txn_id is not None]


def abort_all(options: SinkOptions, messages: Sequence[WriterCommitMessage | None]) -> None:
    """A failed job's transactions: aborted, so none of their events is ever visible."""
    ids = txn_ids(messages)
    if not ids:
        return
    with options.connection.manager() as sm:
        abort_txns(transaction_writer(sm, options), ids)


def commit_batch(options: SinkOptions, messages: Sequence[WriterCommitMessage | None], batch_id: int | None) -> None:
    """Commit a finished job's transactions: exactly once per batch id, or, for a batch write without
    ``batch_id``, simply all of them."""
    ids = txn_ids(messages)
    with options.connection.manager() as sm:
        if batch_id is None:
            txw = transaction_writer(sm, options)
            for txn_id in ids:
                txw.get_txn(txn_id).commit()
            return
        BatchCommitter(sm, options).commit(ids, batch_id)


class MillraceBatchWriter(DataSourceWriter):
    """``df.write.format("millrace").mode("append")``: all rows land, or none (a failed job aborts every
    task's transaction). With ``batch_id`` and ``sink_id``, a rerun of that batch id adds nothing."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> TaskTransaction:
        return write_rows(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_batch(self.options, messages, self.options.batch_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_all(self.options, messages)


class MillraceStreamWriter(DataSourceStreamWriter):
    """``writeStream.format("millrace")``: each micro-batch's rows land once per Spark batch id, across
    query restarts and reruns of a batch."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> TaskTransaction:
        return write_rows(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        commit_batch(self.options, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        abort_all(self.options, messages)
