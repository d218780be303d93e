"""``KeyValueTable``: a versioned key-value table on table segments (Pravega's key-value tables).

Every update returns the key's new version; a conditional update names the version it expects
(``if_version``) and fails with ``TableKeyVersionMismatchError`` when the key moved on (or
``TableKeyNotFoundError`` when it is gone), so read-modify-write loops are safe under contention.
Keys of one **key family** live in one table segment: ``put_all`` / ``remove_all`` within a family
are atomic, and a family can be iterated on its own. Keys are text; values are bytes.
"""

from __future__ import annotations

import contextlib
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


@dataclass(frozen=True)
class TableEntry:
    key: str
    value: bytes
    version: int
    key_family: str | None = None


class KeyValueTable:
    def __init__(self, controller: ControllerClient, scope: str, table: str, partitions: int) -> None:
        self.controller = controller
        self.scope = scope
        self.table = table
        self.partitions = partitions

    # -- updates -----------------------------------------------------------------------------------
    def put(self, key: str, value: bytes, *, if_version: int | None = None, key_family: str | None = None) -> int:
        """Set ``key``; with ``if_version`` only if the key is still at that version. The new version."""
        return self.put_all([(key, value, if_version)], key_family=key_family)[0]

    def put_if_absent(self, key: str, value: bytes, *, key_family: str | None = None) -> int:
        """Set ``key`` only if it does not exist (TableKeyVersionMismatchError if it does)."""
        return self.put_all([(key, value, MUST_NOT_EXIST)], key_family=key_family)[0]

    def put_all(self, entries: Sequence[tuple[str, bytes] | tuple[str, bytes, int | None]], *,
                key_family: str | None = None) -> list[int]:
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

    def delete(self, key: str, *, if_version: int | None = None, key_family: str | None = None) -> None:
        """Remove ``key`` (a no-op if absent, unless ``if_version`` asks for a version)."""
        self.remove_all([(key, if_version)], key_family=key_family)

    def remove_all(self, keys: Sequence[str | tuple[str, int | None]], *, key_family: str | None = None) -> None:
        """Remove several keys of one family at once: all or none."""
        if not keys:
            return
        family = _family(key_family)
        if family is None and len(keys) > 1:
            raise ValueError("an atomic removal of several keys needs a key family")
        pairs = [(k, None) if isinstance(k, str) else k for k in keys]
        stored = [stored_key(family, _key(k)) for k, _ in pairs]
        lengths, data = pack(stored)
        with self._user_keys(stored, [k for k, _ in pairs], key_family):
            self.controller.call(m.KvRemove(scope=self.scope, table=self.table,
                                            partition=self._partition(family, stored[0]),
                                            keys=tuple(lengths), expected=tuple(v for _, v in pairs)), data)

    # -- reads -------------------------------------------------------------------------------------
    def get(self, key: str, *, key_family: str | None = None) -> tuple[bytes, int] | None:
        """(value, version) of ``key``, or None when it is absent."""
        return self.get_all([key], key_family=key_family)[0]

    def get_all(self, keys: Iterable[str], *, key_family: str | None = None) -> list[tuple[bytes, int] | None]:
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

    def keys(self, *, key_family: str | None = None) -> Iterator[tuple[str, int]]:
        """(key, version) of every key of ``key_family`` (None: of every key without a family)."""
        for entry in self._iterate(key_family, with_values=False):
            yield entry.key, entry.version

    def entries(self, *, key_family: str | None = None) -> Iterator[TableEntry]:
        """Every entry of ``key_family`` (None: every entry without a family), in key byte order."""
        return self._iterate(key_family, with_values=True)

    def _iterate(self, key_family: str | None, with_values: bool) -> Iterator[TableEntry]:
        family = _family(key_family)
        prefix = family_prefix(family)
        # A family lives in one partition; keys without one are spread over all of them.
        partitions = [self._partition(family, b"")] if family is not None else range(self.partitions)
        for partition in partitions:
            token: str | None = None
            while True:
                request = m.KvIterate(scope=self.scope, table=self.table, partition=partition, continuation=token,
                                      limit=ITERATE_PAGE, with_values=with_values)
                header, payload = self.controller.call(request, prefix, retry=True)
                reply = decode_reply(m.KvIterateReply, header)
                blobs = unpack([*reply.keys, *reply.values], payload)
                stored, values = blobs[: len(reply.keys)], blobs[len(reply.keys):]
                for i, (raw, version) in enumerate(zip(stored, reply.versions, strict=True)):
                    _, key = split_stored_key(raw)
                    yield TableEntry(key.decode(), values[i] if with_values else b"", version, key_family)
                token = reply.continuation
                if token is None:
                    break

    # -- plumbing ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _user_keys(self, stored: Sequence[bytes], keys: Sequence[str], key_family: str | None) -> Iterator[None]:
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


def _key(key: str) -> bytes:
    if not isinstance(key, str):
        raise TypeError(f"keys are str, not {type(key).__name__}")
    return key.encode()


def _family(key_family: str | None) -> bytes | None:
    return None if key_family is None else key_family.encode()
