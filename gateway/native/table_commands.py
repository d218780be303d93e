"""Key-value table commands of the native protocol (``millrace.protocol.tables`` has the payload layout).

Table operations name a table and a partition, never a segment, so a client reaches only the table
segments of key-value tables, not the controller's system tables. They block on table-segment I/O and
run on the worker pool, like the controller's commands.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from millrace.gateway.native.controller_commands import on_pool
from millrace.protocol.tables import MUST_NOT_EXIST, pack, unpack
from millrace.protocol.wire import Command
from millrace.store.controller.kvtables import KeyValueTables
from millrace.store.futures import StoreFuture
from millrace.store.tables import NOT_EXISTS, ExpectedVersion, TableStore

MAX_ITERATE_LIMIT = 10_000


@dataclass(frozen=True)
class Answer:
    """A reply with a payload beside its header."""

    header: dict[str, Any]
    payload: bytes


def _expected(raw: Any) -> ExpectedVersion:
    if raw is None:
        return None
    version = int(raw)
    if version == MUST_NOT_EXIST:
        return NOT_EXISTS
    if version < 0:
        raise ValueError(f"no such version {version}")
    return version


def table_handlers(kv: KeyValueTables, tables: TableStore,
                   pool: ThreadPoolExecutor) -> dict[int, Callable[[dict[str, Any], bytes], StoreFuture]]:
    def segment(h: dict[str, Any]) -> str:
        return kv.get(h["scope"], h["table"]).segment(int(h["partition"]))

    def put(h: dict[str, Any], payload: bytes) -> dict[str, Any]:
        key_lengths, value_lengths, expected = h["keys"], h["values"], h["expected"]
        if not len(key_lengths) == len(value_lengths) == len(expected):
            raise ValueError("keys, values and expected versions differ in number")
        blobs = unpack([*key_lengths, *value_lengths], payload)
        keys, values = blobs[: len(key_lengths)], blobs[len(key_lengths):]
        entries = [(k, v, _expected(e)) for k, v, e in zip(keys, values, expected, strict=True)]
        return {"versions": tables.put(segment(h), entries)}

    def remove(h: dict[str, Any], payload: bytes) -> None:
        keys = unpack(h["keys"], payload)
        expected = [None if e is None else int(e) for e in h["expected"]]
        if len(expected) != len(keys) or any(e is not None and e < 0 for e in expected):
            raise ValueError("a removal names one version (or null) per key, never 'must not exist'")
        tables.remove(segment(h), list(zip(keys, expected, strict=True)))

    def get(h: dict[str, Any], payload: bytes) -> Answer:
        found = tables.get(segment(h), unpack(h["keys"], payload))
        lengths, data = pack([e.value for e in found if e is not None])
        return Answer({"versions": [None if e is None else e.version for e in found], "values": lengths}, data)

    def iterate(h: dict[str, Any], payload: bytes) -> Answer:
        limit = int(h.get("limit", 1000))
        if not 1 <= limit <= MAX_ITERATE_LIMIT:
            raise ValueError(f"limit must be 1..{MAX_ITERATE_LIMIT}")
        token = h.get("continuation")
        continuation = bytes.fromhex(token) if token is not None else None
        name = segment(h)
        if h.get("with_values"):
            entries = tables.iterate_entries(name, continuation, limit, bytes(payload))
            items = [(e.key, e.version) for e in entries.items]
            value_lengths, value_data = pack([e.value for e in entries.items])
            next_token = entries.continuation
        else:
            page = tables.iterate_keys(name, continuation, limit, bytes(payload))
            items = [(k.key, k.version) for k in page.items]
            value_lengths, value_data = [], b""
            next_token = page.continuation
        key_lengths, key_data = pack([key for key, _ in items])
        header = {"keys": key_lengths, "values": value_lengths, "versions": [v for _, v in items],
                  "continuation": None if next_token is None else next_token.hex()}
        return Answer(header, key_data + value_data)

    def create(h: dict[str, Any], _payload: bytes) -> dict[str, Any]:
        created = kv.create(h["scope"], h["table"], int(h.get("partitions", 1)))
        return {"created": created, "partitions": kv.get(h["scope"], h["table"]).partitions}

    def describe(h: dict[str, Any], _payload: bytes) -> dict[str, Any]:
        info = kv.get(h["scope"], h["table"])
        return {"scope": info.scope, "table": info.table, "partitions": info.partitions,
                "created_ms": info.created_ms}

    return {
        Command.CREATE_KV_TABLE: on_pool(pool, create),
        Command.DELETE_KV_TABLE: on_pool(pool, lambda h, p: kv.delete(h["scope"], h["table"])),
        Command.LIST_KV_TABLES: on_pool(pool, lambda h, p: {"tables": kv.list(h["scope"])}),
        Command.GET_KV_TABLE: on_pool(pool, describe),
        Command.KV_PUT: on_pool(pool, put),
        Command.KV_REMOVE: on_pool(pool, remove),
        Command.KV_GET: on_pool(pool, get),
        Command.KV_ITERATE: on_pool(pool, iterate),
    }
