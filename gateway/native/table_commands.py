"""Key-value table commands of the native protocol (``millrace.protocol.tables`` has the payload layout).

Table operations name a table and a partition, never a segment, so a client reaches only the table
segments of key-value tables, not the controller's system tables. They block on table-segment I/O and
run on the worker pool, like the controller's commands.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from millrace.gateway.native.controller_commands import on_pool
from millrace.gateway.native.dispatch import Handlers, handlers, serve
from millrace.protocol import messages as m
from millrace.protocol.tables import MUST_NOT_EXIST, pack, unpack
from millrace.store.controller.kvtables import KeyValueTables
from millrace.store.tables import NOT_EXISTS, ExpectedVersion, TableStore

MAX_ITERATE_LIMIT = 10_000


@dataclass(frozen=True)
class Answer:
    """A reply with a payload beside its header: a reply message, or a header relayed as is."""

    header: object
    payload: bytes


def _expected(raw: int | None) -> ExpectedVersion:
    if raw is None:
        return None
    if raw == MUST_NOT_EXIST:
        return NOT_EXISTS
    if raw < 0:
        raise ValueError(f"no such version {raw}")
    return raw


def table_handlers(kv: KeyValueTables, tables: TableStore, pool: ThreadPoolExecutor) -> Handlers:
    def segment(r: m.KvPut | m.KvRemove | m.KvGet | m.KvIterate | m.KvUpdate) -> str:
        return kv.get(r.scope, r.table).segment(r.partition)

    def put(r: m.KvPut, payload: bytes) -> m.KvVersionsReply:
        if not len(r.keys) == len(r.values) == len(r.expected):
            raise ValueError("keys, values and expected versions differ in number")
        blobs = unpack([*r.keys, *r.values], payload)
        keys, values = blobs[: len(r.keys)], blobs[len(r.keys):]
        entries = [(k, v, _expected(e)) for k, v, e in zip(keys, values, r.expected, strict=True)]
        return m.KvVersionsReply(versions=tuple(tables.put(segment(r), entries)))

    def remove(r: m.KvRemove, payload: bytes) -> None:
        keys = unpack(list(r.keys), payload)
        if len(r.expected) != len(keys) or any(e is not None and e < 0 for e in r.expected):
            raise ValueError("a removal names one version (or null) per key, never 'must not exist'")
        tables.remove(segment(r), list(zip(keys, r.expected, strict=True)))

    def update(r: m.KvUpdate, payload: bytes) -> m.KvUpdateReply:
        if not len(r.keys) == len(r.values) == len(r.expected):
            raise ValueError("keys, values and expected versions differ in number")
        present = [n for n in r.values if n is not None]
        blobs = unpack([*r.keys, *present], payload)
        keys, values = blobs[: len(r.keys)], iter(blobs[len(r.keys):])
        entries = [(k, None if n is None else next(values), _expected(e))
                   for k, n, e in zip(keys, r.values, r.expected, strict=True)]
        return m.KvUpdateReply(versions=tuple(tables.update(segment(r), entries)))

    def get(r: m.KvGet, payload: bytes) -> Answer:
        found = tables.get(segment(r), unpack(list(r.keys), payload))
        lengths, data = pack([e.value for e in found if e is not None])
        return Answer(m.KvGetReply(versions=tuple(None if e is None else e.version for e in found),
                                   values=tuple(lengths)), data)

    def iterate(r: m.KvIterate, payload: bytes) -> Answer:
        if not 1 <= r.limit <= MAX_ITERATE_LIMIT:
            raise ValueError(f"limit must be 1..{MAX_ITERATE_LIMIT}")
        continuation = bytes.fromhex(r.continuation) if r.continuation is not None else None
        start = bytes.fromhex(r.start) if r.start is not None else None
        end = bytes.fromhex(r.end) if r.end is not None else None
        name = segment(r)
        if r.with_values:
            entries = tables.iterate_entries(name, continuation, r.limit, bytes(payload), start, end)
            items = [(e.key, e.version) for e in entries.items]
            value_lengths, value_data = pack([e.value for e in entries.items])
            next_token = entries.continuation
        else:
            page = tables.iterate_keys(name, continuation, r.limit, bytes(payload), start, end)
            items = [(k.key, k.version) for k in page.items]
            value_lengths, value_data = [], b""
            next_token = page.continuation
        key_lengths, key_data = pack([key for key, _ in items])
        reply = m.KvIterateReply(keys=tuple(key_lengths), values=tuple(value_lengths),
                                 versions=tuple(v for _, v in items),
                                 continuation=None if next_token is None else next_token.hex())
        return Answer(reply, key_data + value_data)

    def create(r: m.CreateKvTable, _payload: bytes) -> m.KvTableCreatedReply:
        created = kv.create(r.scope, r.table, r.partitions)
        return m.KvTableCreatedReply(created=created, partitions=kv.get(r.scope, r.table).partitions)

    def describe(r: m.GetKvTable, _payload: bytes) -> m.KvTableReply:
        info = kv.get(r.scope, r.table)
        return m.KvTableReply(scope=info.scope, table=info.table, partitions=info.partitions,
                              created_ms=info.created_ms)

    return handlers(
        serve(m.CreateKvTable, on_pool(pool, create)),
        serve(m.DeleteKvTable, on_pool(pool, lambda r, p: kv.delete(r.scope, r.table))),
        serve(m.ListKvTables, on_pool(pool, lambda r, p: m.KvTablesReply(tables=tuple(kv.list(r.scope))))),
        serve(m.GetKvTable, on_pool(pool, describe)),
        serve(m.KvPut, on_pool(pool, put)),
        serve(m.KvRemove, on_pool(pool, remove)),
        serve(m.KvGet, on_pool(pool, get)),
        serve(m.KvIterate, on_pool(pool, iterate)),
        serve(m.KvUpdate, on_pool(pool, update)),
    )
