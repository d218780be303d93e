"""``KeyValueTable``: a versioned key-value table on table segments (Pravega's key-value tables).

Every update returns the key's new version; a conditional update names the version it expects
(``if_version``) and fails with ``TableKeyVersionMismatchError`` when the key moved on (or
``TableKeyNotFoundError`` when it is gone), so read-modify-write loops are safe under contention.

Keys and key families are ``str`` (stored as UTF-8) or ``bytes``; ``"k"`` and ``b"k"`` name the same key.
A **key family** is Pravega's primary key and the key within it the secondary key: every key of one
family lives in one table segment, so ``put_all`` / ``remove_all`` / ``update`` (puts and removals
mixed) within a family are atomic, and a family can be iterated on its own, by key prefix or key range
(``entries(key_family=..., prefix=...)`` / ``start=... end=...``), in key byte order.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from millrace.client.controller import ControllerClient
from millrace.protocol import messages as m
from millrace.protocol.errors import TableKeyNotFoundError, TableKeyVersionMismatchError
from millrace.protocol.messages import decode_reply
from millrace.protocol.tables import (
    MUST_NOT_EXIST,
    family_prefix,
    pack,
    partition_of,
    split_stored_key,
    stored_key,
    unpack,
)

ITERATE_PAGE = 1000

Key = str | bytes


@dataclass(frozen=True)
class TableEntry:
    """One entry; ``key`` is ``str`` unless the iteration asked for ``raw_keys`` (then ``bytes``)."""

    key: Key
    value: bytes
    version: int
    key_family: Key | None = None


@dataclass(frozen=True)
class Put:
    """In ``update``: set ``key`` (only at ``if_version``, when given)."""

    key: Key
    value: bytes
    if_version: int | None = None


@dataclass(frozen=True)
class Insert:
    """In ``update``: set ``key`` only if it does not exist (Pravega's ``Insert``)."""

    key: Key
    value: bytes


@dataclass(frozen=True)
class Remove:
    """In ``update``: remove ``key`` (only at ``if_version``, when given; else a no-op if absent)."""

    key: Key
    if_version: int | None = None


TableModification = Put | Insert | Remove


class KeyValueTable:
    def __init__(self, controller: ControllerClient, scope: str, table: str, partitions: int) -> None:
        self.controller = controller
        self.scope = scope
        self.table = table
        self.partitions = partitions

    # -- updates -----------------------------------------------------------------------------------
    def put(self, key: Key, value: bytes, *, if_version: int | None = None, key_family: Key | None = None) -> int:
        """Set ``key``; with ``if_version`` only if the key is still at that version. The new version."""
        return self.put_all([(key, value, if_version)], key_family=key_family)[0]

    def put_if_absent(self, key: Key, value: bytes, *, key_family: Key | None = None) -> int:
        """Set ``key`` only if it does not exist (TableKeyVersionMismatchError if it does)."""
        return self.put_all([(key, value, MUST_NOT_EXIST)], key_family=key_family)[0]

    def put_all(self, entries: Sequence[tuple[Key, bytes] | tuple[Key, bytes, int | None]], *,
                key_family: Key | None = None) -> list[int]:
        """Set several keys of one family at once: all or none (any failed condition fails all).
        Without a family there can be only one key (keys without a family may live apart)."""
        if not entries:
            return []
        family = _family(key_family)
        if family is None and len(entries) > 1:
            raise ValueError("an atomic update of several keys needs a key family")
        keys = [stored_key(family, _key(e[0])) for e in entries]
        values = [bytes(e[1]) for e in entries]
        expected = [e[2] if len(e) > 2 else None for e in entries]
        key_lengths, key_data = pack(keys)
        value_lengths, value_data = pack(values)
        request = m.KvPut(scope=self.scope, table=self.table, partition=self._partition(family, keys[0]),
                          keys=tuple(key_lengths), values=tuple(value_lengths), expected=tuple(expected))
        with self._user_keys(keys, [e[0] for e in entries], key_family):
            return list(self.controller.ask(request, m.KvVersionsReply, key_data + value_data).versions)

    def delete(self, key: Key, *, if_version: int | None = None, key_family: Key | None = None) -> None:
        """Remove ``key`` (a no-op if absent, unless ``if_version`` asks for a version)."""
        self.remove_all([(key, if_version)], key_family=key_family)

    def remove_all(self, keys: Sequence[Key | tuple[Key, int | None]], *, key_family: Key | None = None) -> None:
        """Remove several keys of one family at once: all or none."""
        if not keys:
            return
        family = _family(key_family)
        if family is None and len(keys) > 1:
            raise ValueError("an atomic removal of several keys needs a key family")
        pairs = [(k, None) if isinstance(k, str | bytes) else k for k in keys]
        stored = [stored_key(family, _key(k)) for k, _ in pairs]
        lengths, data = pack(stored)
        with self._user_keys(stored, [k for k, _ in pairs], key_family):
            self.controller.call(m.KvRemove(scope=self.scope, table=self.table,
                                            partition=self._partition(family, stored[0]),
                                            keys=tuple(lengths), expected=tuple(v for _, v in pairs)), data)

    def update(self, modifications: Sequence[TableModification], *, key_family: Key | None = None) -> list[int | None]:
        """Apply puts, inserts and removals of one family together: all or none (any failed condition
        fails all, and nothing changes). Returns, in order, each put's or insert's new version and None
        for each removal. Without a family there can be only one modification."""
        if not modifications:
            return []
        family = _family(key_family)
        if family is None and len(modifications) > 1:
            raise ValueError("an atomic update of several keys needs a key family")
        keys: list[bytes] = []
        values: list[bytes | None] = []
        expected: list[int | None] = []
        for mod in modifications:
            keys.append(stored_key(family, _key(mod.key)))
            if isinstance(mod, Put):
                values.append(bytes(mod.value))
                expected.append(mod.if_version)
            elif isinstance(mod, Insert):
                values.append(bytes(mod.value))
                expected.append(MUST_NOT_EXIST)
            elif isinstance(mod, Remove):
                values.append(None)
                expected.append(mod.if_version)
            else:
                raise TypeError(f"update takes Put, Insert and Remove, not {type(mod).__name__}")
        key_lengths, key_data = pack(keys)
        value_lengths, value_data = pack([v for v in values if v is not None])
        lengths = iter(value_lengths)
        request = m.KvUpdate(scope=self.scope, table=self.table, partition=self._partition(family, keys[0]),
                             keys=tuple(key_lengths), values=tuple(None if v is None else next(lengths) for v in values),
                             expected=tuple(expected))
        with self._user_keys(keys, [mod.key for mod in modifications], key_family):
            return list(self.controller.ask(request, m.KvUpdateReply, key_data + value_data).versions)

    # -- reads -------------------------------------------------------------------------------------
    def get(self, key: Key, *, key_family: Key | None = None) -> tuple[bytes, int] | None:
        """(value, version) of ``key``, or None when it is absent."""
        return self.get_all([key], key_family=key_family)[0]

    def get_all(self, keys: Iterable[Key], *, key_family: Key | None = None) -> list[tuple[bytes, int] | None]:
        """(value, version) or None for each of ``keys``, in order (one request per table segment)."""
        family = _family(key_family)
        stored = [stored_key(family, _key(k)) for k in keys]
        by_partition: dict[int, list[int]] = {}
        for i, k in enumerate(stored):
            by_partition.setdefault(self._partition(family, k), []).append(i)
        out: list[tuple[bytes, int] | None] = [None] * len(stored)
        for partition, indexes in by_partition.items():
            lengths, data = pack([stored[i] for i in indexes])
            request = m.KvGet(scope=self.scope, table=self.table, partition=partition, keys=tuple(lengths))
            header, payload = self.controller.call(request, data, retry=True)
            reply = decode_reply(m.KvGetReply, header)
            values = iter(unpack(list(reply.values), payload))
            for i, version in zip(indexes, reply.versions, strict=True):
                if version is not None:
                    out[i] = (next(values), version)
        return out

    def keys(self, *, key_family: Key | None = None, prefix: Key | None = None, start: Key | None = None,
             end: Key | None = None, raw_keys: bool = False) -> Iterator[tuple[Key, int]]:
        """(key, version) of the keys ``entries`` would give, without their values."""
        for entry in self._iterate(key_family, prefix, start, end, raw_keys, with_values=False):
            yield entry.key, entry.version

    def entries(self, *, key_family: Key | None = None, prefix: Key | None = None, start: Key | None = None,
                end: Key | None = None, raw_keys: bool = False) -> Iterator[TableEntry]:
        """Every entry of ``key_family`` (None: every entry without a family) in key byte order, page by
        page: only keys starting with ``prefix``, and at or above ``start`` and below ``end``, when given
        (Pravega's ``forPrimaryKey(pk, prefix)`` and ``forPrimaryKey(pk, from, to)``, with the family as
        the primary key). Keys come as ``str``, or as ``bytes`` with ``raw_keys`` (a key that is not
        UTF-8 needs it: ValueError otherwise)."""
        return self._iterate(key_family, prefix, start, end, raw_keys, with_values=True)

    def _iterate(self, key_family: Key | None, prefix: Key | None, start: Key | None, end: Key | None,
                 raw_keys: bool, with_values: bool) -> Iterator[TableEntry]:
        family = _family(key_family)
        scan = family_prefix(family) + (_key(prefix) if prefix is not None else b"")
        low = None if start is None else stored_key(family, _key(start))
        high = None if end is None else stored_key(family, _key(end))
        if family is not None:
            # A family lives in one partition.
            yield from self._scan(self._partition(family, b""), scan, low, high, key_family, raw_keys, with_values)
            return
        # Keys without a family are spread over every partition: merge their ordered pages.
        yield from heapq.merge(*(self._scan(p, scan, low, high, key_family, raw_keys, with_values)
                                 for p in range(self.partitions)), key=lambda e: _key(e.key))

    def _scan(self, partition: int, prefix: bytes, low: bytes | None, high: bytes | None, key_family: Key | None,
              raw_keys: bool, with_values: bool) -> Iterator[TableEntry]:
        """The entries of one table segment in the bounds, a page per request."""
        token: str | None = None
        while True:
            request = m.KvIterate(scope=self.scope, table=self.table, partition=partition, continuation=token,
                                  limit=ITERATE_PAGE, with_values=with_values,
                                  start=None if low is None else low.hex(), end=None if high is None else high.hex())
            header, payload = self.controller.call(request, prefix, retry=True)
            reply = decode_reply(m.KvIterateReply, header)
            blobs = unpack([*reply.keys, *reply.values], payload)
            stored, values = blobs[: len(reply.keys)], blobs[len(reply.keys):]
            for i, (raw, version) in enumerate(zip(stored, reply.versions, strict=True)):
                _, key = split_stored_key(raw)
                yield TableEntry(key if raw_keys else _text(key), values[i] if with_values else b"", version,
                                 key_family)
            token = reply.continuation
            if token is None:
                return

    # -- plumbing ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _user_keys(self, stored: Sequence[bytes], keys: Sequence[Key], key_family: Key | None) -> Iterator[None]:
        """A failed condition said as the caller wrote it: the server names the key as stored (family
        prefix and encoding), which means nothing to the caller; the same error type names theirs."""
        try:
            yield
        except (TableKeyNotFoundError, TableKeyVersionMismatchError) as e:
            message = str(e)
            for raw, key in zip(stored, keys, strict=True):
                family = f" of key family {key_family!r}" if key_family is not None else ""
                message = message.replace(f"key {raw!r}", f"key {key!r}{family}")
            raise type(e)(f"{self.scope}/{self.table}: {message}") from None

    def _partition(self, family: bytes | None, stored: bytes) -> int:
        return partition_of(family, stored, self.partitions)

    def __repr__(self) -> str:
        return f"KeyValueTable({self.scope}/{self.table}, partitions={self.partitions})"


def _key(key: Key) -> bytes:
    """A key's bytes: ``str`` as UTF-8."""
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    raise TypeError(f"keys are str or bytes, not {type(key).__name__}")


def _text(key: bytes) -> str:
    try:
        return key.decode()
    except UnicodeDecodeError:
        raise ValueError(f"key {key!r} is not UTF-8 text: iterate with raw_keys=True") from None


def _family(key_family: Key | None) -> bytes | None:
    return None if key_family is None else _key(key_family)
