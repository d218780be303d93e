"""Key-value tables: the controller's record of each table (its partition count), in a system table,
and the table segments that hold its keys (``millrace.protocol.tables`` names them).

Create writes the record first and then creates any missing partition segment, so a create that
crashed half-way is finished by the next create of the same table; delete removes the segments first
and the record last, so a delete that crashed half-way is finished by the next delete. All calls
block on table-segment I/O: call them from worker threads.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass

from millrace.protocol.errors import KeyValueTableNotFoundError, ScopeNotFoundError
from millrace.protocol.names import validate_name
from millrace.protocol.tables import table_segment_name
from millrace.store.controller.controller import KV_TABLES_TABLE, Controller
from millrace.store.errors import (
    SegmentExistsError,
    SegmentNotFoundError,
    TableKeyNotFoundError,
    TableKeyVersionMismatchError,
)
from millrace.store.tables import NOT_EXISTS

MAX_PARTITIONS = 1024


@dataclass(frozen=True)
class KeyValueTableInfo:
    scope: str
    table: str
    partitions: int
    created_ms: int

    def segment(self, partition: int) -> str:
        if not 0 <= partition < self.partitions:
            raise ValueError(f"{self.scope}/{self.table} has no partition {partition}")
        return table_segment_name(self.scope, self.table, partition)


class KeyValueTables:
    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.tables = controller.tables
        if not self.tables.exists(KV_TABLES_TABLE):
            with contextlib.suppress(SegmentExistsError):  # another instance got there first
                self.tables.create_table(KV_TABLES_TABLE)

    def create(self, scope: str, table: str, partitions: int) -> bool:
        """Create ``scope/table`` with ``partitions`` table segments; False if it already existed
        (whatever its partition count)."""
        validate_name("key-value table", table)
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise ValueError(f"partitions must be 1..{MAX_PARTITIONS}, not {partitions}")
        if not self.controller.scope_exists(scope):
            raise ScopeNotFoundError(scope)
        record = json.dumps({"partitions": partitions, "created_ms": time.time_ns() // 1_000_000}).encode()
        try:
            (version,) = self.tables.put(KV_TABLES_TABLE, [(_key(scope, table), record, NOT_EXISTS)])
            created = True
        except TableKeyVersionMismatchError:
            created = False
        if created and not self.controller.scope_exists(scope):
            # delete_scope marked the scope after our first look (it counts tables as content, so it
            # looks again after marking): withdraw, as create_stream does.
            with contextlib.suppress(TableKeyVersionMismatchError, TableKeyNotFoundError):
                self.tables.remove(KV_TABLES_TABLE, [(_key(scope, table), version)])
            raise ScopeNotFoundError(scope)
        info = self.get(scope, table)
        for p in range(info.partitions):
            with contextlib.suppress(SegmentExistsError):
                self.tables.create_table(info.segment(p))
        return created

    def get(self, scope: str, table: str) -> KeyValueTableInfo:
        (entry,) = self.tables.get(KV_TABLES_TABLE, [_key(scope, table)])
        if entry is None:
            raise KeyValueTableNotFoundError(f"{scope}/{table}")
        record = json.loads(entry.value)
        return KeyValueTableInfo(scope, table, int(record["partitions"]), int(record["created_ms"]))

    def list(self, scope: str) -> list[str]:
        if not self.controller.scope_exists(scope):
            raise ScopeNotFoundError(scope)
        prefix = f"{scope}/".encode()
        return sorted(e.key[len(prefix):].decode() for e in self.tables.entries(KV_TABLES_TABLE, prefix))

    def delete(self, scope: str, table: str) -> None:
        info = self.get(scope, table)
        for p in range(info.partitions):
            with contextlib.suppress(SegmentNotFoundError):
                self.tables.delete_table(info.segment(p))
        self.tables.remove(KV_TABLES_TABLE, [_key(scope, table)])


def _key(scope: str, table: str) -> bytes:
    return f"{scope}/{table}".encode()
