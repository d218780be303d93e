"""Producer ids: unique for the life of the cluster, handed out from blocks reserved durably in a table
segment, so a restart never reuses an id.

An id is bound to what it was issued for, so a client that reads another's batches cannot write with
their producer id (a batch under a stolen id and the next sequence would make the owner's next batch a
"duplicate", acknowledged at the stolen one's offset and so lost):

- an idempotent producer's id (``allocate_for``) carries, in its low ``TAG_BITS``, an HMAC of the
  principal it was issued to and its counter, under a key kept in the same table (so every node and
  every restart checks alike, with no state per producer): ``owns`` recomputes it;
- a transactional id's or a native writer's id (``allocate``) lies in a space of its own (from
  ``COORDINATED_SPACE``) and carries the same kind of tag of its transactional id (whose ACL guards
  it), so any node can tell, with no call to the transaction coordinator, that a batch's producer id
  belongs to the transactional id it came with (``issued_for_transaction``).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import threading

from millrace.store.errors import SegmentExistsError, TableKeyVersionMismatchError
from millrace.store.tables import NOT_EXISTS, TableStore

PRODUCER_IDS_TABLE = "_system/_tables/kafka_producer_ids"
_KEY = b"next-block"
_BINDING_KEY = b"binding-key"
BLOCK = 1000
TAG_BITS = 24
_TAG_MASK = (1 << TAG_BITS) - 1
_TRANSACTIONAL = "transactional-id:"  # keeps transactional ids' tags apart from principals'
# Ids the transaction coordinator hands out (transactional ids, native writers) begin here; an
# idempotent producer's (counter << TAG_BITS | tag) stays below while its counter is below 2**38, and
# so does the tagged counter of a coordinated one.
COORDINATED_SPACE = 1 << 62


class ProducerIdAllocator:
    def __init__(self, tables: TableStore) -> None:
        self.tables = tables
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0
        if not tables.exists(PRODUCER_IDS_TABLE):
            with contextlib.suppress(SegmentExistsError):
                tables.create_table(PRODUCER_IDS_TABLE)
        self._binding_key = self._load_binding_key()

    def _load_binding_key(self) -> bytes:
        """The cluster's one key of producer id tags, made by whichever node asks first."""
        while True:
            (entry,) = self.tables.get(PRODUCER_IDS_TABLE, [_BINDING_KEY])
            if entry is not None:
                return bytes(entry.value)
            try:
                self.tables.put(PRODUCER_IDS_TABLE, [(_BINDING_KEY, os.urandom(32), NOT_EXISTS)])
            except TableKeyVersionMismatchError:
                continue  # another node made it first: read theirs

    def _next_counter(self) -> int:
        with self._lock:
            if self._next >= self._end:
                self._reserve()
            counter = self._next
            self._next += 1
            return counter

    def allocate(self, transactional_id: str) -> int:
        """A fresh producer id of ``transactional_id``, for the transaction coordinator (blocks while
        reserving a new block)."""
        counter = self._next_counter()
        return COORDINATED_SPACE | (counter << TAG_BITS) | self._tag(_TRANSACTIONAL + transactional_id, counter)

    def issued_for_transaction(self, transactional_id: str, producer_id: int) -> bool:
        """Whether ``producer_id`` was issued to ``transactional_id`` (any thread)."""
        if producer_id < COORDINATED_SPACE:
            return False
        tagged = producer_id - COORDINATED_SPACE
        return self._tag(_TRANSACTIONAL + transactional_id, tagged >> TAG_BITS) == tagged & _TAG_MASK

    def allocate_for(self, principal: str) -> int:
        """A fresh idempotent producer's id, bound to ``principal`` (blocks while reserving a block)."""
        counter = self._next_counter()
        return (counter << TAG_BITS) | self._tag(principal, counter)

    def owns(self, principal: str, producer_id: int) -> bool:
        """Whether ``producer_id`` is an idempotent producer's id issued to ``principal`` (any thread)."""
        if not 0 <= producer_id < COORDINATED_SPACE:
            return False
        return self._tag(principal, producer_id >> TAG_BITS) == producer_id & _TAG_MASK

    def _tag(self, principal: str, counter: int) -> int:
        digest = hmac.new(self._binding_key, f"{counter}:{principal}".encode(), hashlib.sha256).digest()
        return int.from_bytes(digest[:4], "big") & _TAG_MASK

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
