"""Native transactions as the controller records them: one record per transaction in the table segment
``_system/_tables/native_transactions``, changed only by conditional updates (Pravega's transaction
metadata in the controller's tables).

A record names the transaction (scope, stream, uuid, the writer id that began it), its state, its
lease deadline, the stream's partition slices when it began (the client routes the transaction's events
with these for its whole life) and its transaction segments: ``<parent segment>#transaction.<uuid hex>``
for each segment that held partitions when it began, with those partitions; once the commit is decided,
the stream's partition count then. A transaction segment lives in its parent's container
(``store.segment_store.container_key``).

States and their order: OPEN -> COMMITTING -> COMMITTED, or OPEN -> ABORTING -> ABORTED. Each step is a
conditional replace of the record at the version its writer read, so two writers of one transaction
(say an END_TXN and the lease check) never both move it: the loser re-reads. An ended record stays for a
retention, then is removed. All calls block on table-segment I/O: call them from worker threads.
"""

from __future__ import annotations

import contextlib
import enum
import json
import uuid
from dataclasses import dataclass, replace

from millrace.store.controller.names import SYSTEM_SCOPE
from millrace.store.errors import SegmentExistsError, TableKeyNotFoundError, TableKeyVersionMismatchError
from millrace.store.segment_store import TRANSACTION_DELIMITER
from millrace.store.tables import NOT_EXISTS, TableStore

NATIVE_TXNS_TABLE = f"{SYSTEM_SCOPE}/_tables/native_transactions"
RECORD_VERSION = 1


class TxnState(enum.StrEnum):
    """Pravega's transaction states."""

    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"


ENDED = (TxnState.COMMITTED, TxnState.ABORTED)


def transaction_segment_name(parent: str, txn_id: uuid.UUID) -> str:
    """Pravega's name of the transaction segment of ``txn_id`` over ``parent``."""
    return f"{parent}{TRANSACTION_DELIMITER}{txn_id.hex}"


@dataclass(frozen=True)
class TxnRecord:
    scope: str
    stream: str
    txn_id: uuid.UUID
    writer_id: str
    state: TxnState
    lease_ms: int
    deadline_ms: int  # the lease ends here (epoch ms): an OPEN transaction still open then aborts
    created_ms: int
    ended_ms: int  # when it became COMMITTED or ABORTED (0 before): the retention counts from here
    slices: tuple[tuple[float, float], ...]  # partition p's routing-key slice when the transaction began
    segments: tuple[tuple[str, tuple[int, ...]], ...]  # transaction segment -> the partitions it holds
    # The principal that began it, with security on (``User:alice``): only it may write, ping or end it.
    owner: str | None = None
    # The stream's partition count when the commit was decided (recorded with COMMITTING): the merge
    # routes against the partitions live then, so a merge resumed after a later split routes as the
    # first pass did. None in records written before it was kept: the count at the merge.
    partition_count: int | None = None

    @property
    def key(self) -> bytes:
        return record_key(self.scope, self.stream, self.txn_id)

    def segment_of(self, partition: int) -> str:
        """The transaction segment holding ``partition``'s events (KeyError if none does)."""
        for name, partitions in self.segments:
            if partition in partitions:
                return name
        raise KeyError(f"transaction {self.txn_id} has no segment for partition {partition}")

    def moved(self, state: TxnState, **changes: int) -> TxnRecord:
        return replace(self, state=state, **changes)  # type: ignore[arg-type]

    def encode(self) -> bytes:
        return json.dumps({
            "v": RECORD_VERSION, "scope": self.scope, "stream": self.stream, "txn_id": str(self.txn_id),
            "writer_id": self.writer_id, "state": self.state.value, "lease_ms": self.lease_ms,
            "deadline_ms": self.deadline_ms, "created_ms": self.created_ms, "ended_ms": self.ended_ms,
            "slices": [list(s) for s in self.slices],
            "segments": [[name, list(partitions)] for name, partitions in self.segments],
            **({} if self.owner is None else {"owner": self.owner}),
            **({} if self.partition_count is None else {"partition_count": self.partition_count}),
        }, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> TxnRecord:
        r = json.loads(raw)
        return cls(str(r["scope"]), str(r["stream"]), uuid.UUID(r["txn_id"]), str(r["writer_id"]),
                   TxnState(r["state"]), int(r["lease_ms"]), int(r["deadline_ms"]), int(r["created_ms"]),
                   int(r["ended_ms"]), tuple((float(lo), float(hi)) for lo, hi in r["slices"]),
                   tuple((str(name), tuple(int(p) for p in parts)) for name, parts in r["segments"]),
                   None if r.get("owner") is None else str(r["owner"]),
                   None if r.get("partition_count") is None else int(r["partition_count"]))


def record_key(scope: str, stream: str, txn_id: uuid.UUID) -> bytes:
    return f"{scope}/{stream}/{txn_id}".encode()


class NativeTransactionTable:
    """The records, read and changed conditionally (blocking; worker threads)."""

    def __init__(self, tables: TableStore) -> None:
        self.tables = tables
        if not tables.exists(NATIVE_TXNS_TABLE):
            with contextlib.suppress(SegmentExistsError):  # another instance got there first
                tables.create_table(NATIVE_TXNS_TABLE)

    def load(self) -> list[tuple[TxnRecord, int]]:
        """Every record with its version."""
        return [(TxnRecord.decode(e.value), e.version) for e in self.tables.entries(NATIVE_TXNS_TABLE)]

    def get(self, scope: str, stream: str, txn_id: uuid.UUID) -> tuple[TxnRecord, int] | None:
        (entry,) = self.tables.get(NATIVE_TXNS_TABLE, [record_key(scope, stream, txn_id)])
        return None if entry is None else (TxnRecord.decode(entry.value), entry.version)

    def write(self, changes: list[tuple[TxnRecord, int | None]]) -> list[int | Exception]:
        """Create (version None) or replace (at that version) several records in one conditional table
        write: one append for many transactions. If a condition fails, each change is tried on its own, so
        a stale one fails alone. Per change: its new version, or its TableKeyVersionMismatchError /
        TableKeyNotFoundError. The records must be of different transactions."""
        try:
            return list(self.tables.put(NATIVE_TXNS_TABLE, [
                (r.key, r.encode(), NOT_EXISTS if v is None else v) for r, v in changes]))
        except (TableKeyVersionMismatchError, TableKeyNotFoundError) as exc:
            if len(changes) == 1:
                return [exc]
        results: list[int | Exception] = []
        for record, version in changes:
            try:
                results.append(self.create(record) if version is None else self.replace(record, version))
            except (TableKeyVersionMismatchError, TableKeyNotFoundError) as exc:
                results.append(exc)
        return results

    def create(self, record: TxnRecord) -> int:
        """Record a new transaction; its version. TableKeyVersionMismatchError if it exists."""
        (version,) = self.tables.put(NATIVE_TXNS_TABLE, [(record.key, record.encode(), NOT_EXISTS)])
        return version

    def replace(self, record: TxnRecord, version: int) -> int:
        """Replace the record at ``version``; the new version. TableKeyVersionMismatchError (or
        TableKeyNotFoundError) if it changed meanwhile."""
        (new_version,) = self.tables.put(NATIVE_TXNS_TABLE, [(record.key, record.encode(), version)])
        return new_version

    def remove(self, record: TxnRecord, version: int) -> None:
        self.tables.remove(NATIVE_TXNS_TABLE, [(record.key, version)])
