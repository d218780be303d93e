"""Producer ids for idempotent producers: unique for the life of the cluster, handed out from blocks
reserved durably in a table segment, so a restart never reuses an id."""

from __future__ import annotations

import contextlib
import threading

from millrace.store.errors import SegmentExistsError, TableKeyVersionMismatchError
from millrace.store.tables import NOT_EXISTS, TableStore

PRODUCER_IDS_TABLE = "_system/_tables/kafka_producer_ids"
_KEY = b"next-block"
BLOCK = 1000


class ProducerIdAllocator:
    def __init__(self, tables: TableStore) -> None:
        self.tables = tables
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0
        if not tables.exists(PRODUCER_IDS_TABLE):
            with contextlib.suppress(SegmentExistsError):
                tables.create_table(PRODUCER_IDS_TABLE)

    def allocate(self) -> int:
        """A fresh producer id (blocks while reserving a new block)."""
        with self._lock:
            if self._next >= self._end:
                self._reserve()
            pid = self._next
            self._next += 1
            return pid

    def _reserve(self) -> None:
        while True:
            (entry,) = self.tables.get(PRODUCER_IDS_TABLE, [_KEY])
            start = int(entry.value) if entry is not None else 0
            expected = entry.version if entry is not None else NOT_EXISTS
            try:
                self.tables.put(PRODUCER_IDS_TABLE, [(_KEY, str(start + BLOCK).encode(), expected)])
            except TableKeyVersionMismatchError:
                continue  # another allocator reserved first: take the next block
            self._next, self._end = start, start + BLOCK
            return
