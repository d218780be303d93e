"""Pravega's table segment commands over Millrace's table segments (``store/tables/``): what Pravega's
key-value tables and the Rust client's reader-group state (its table synchronizer) use.

Names. A Pravega client names a table segment like a stream segment (the Rust client's reader group
``rg`` of scope ``s`` lives in ``s/rg_kvtable/0.#epoch.0``), a name a user's stream could take. Each is
kept under Millrace's internal name ``<name>#pravega-table``, in the namespace no stream reaches (the
stream layer's gate refuses raw commands on it), and only these commands write it.

Versions are the table's: a key's version is the segment offset of the entry that last wrote it, as in
Pravega. ``NO_VERSION`` is an unconditional update, ``NOT_EXISTS`` "only if absent". The delta read
(``ReadTableEntriesDelta``) follows the table's segment from a position, as Pravega's delta iterator:
removals drop a key from the answer, and a position compaction took away answers ``should_clear``.

Threads: table calls block on store I/O, so ``answer`` runs on a worker pool, never the reactor.
"""

from __future__ import annotations

import typing
from typing import TypeAlias

from millrace.gateway.pravega_protocol import table_commands as tc
from millrace.gateway.pravega_protocol.base import WireCommand
from millrace.gateway.pravega_protocol.commands import (
    NoSuchSegment,
    OperationUnsupported,
    SegmentAlreadyExists,
    SegmentCreated,
    SegmentDeleted,
)
from millrace.protocol.errors import SegmentExistsError, SegmentNotFoundError
from millrace.store.errors import TableKeyNotFoundError, TableKeyVersionMismatchError
from millrace.store.tables import (
    NOT_EXISTS,
    ExpectedVersion,
    NotATableError,
    TableNotEmptyError,
    TableStore,
    continuation_after,
)

PRAVEGA_TABLE_MARK = "#pravega-table"
# The most entries or keys one read answers, whatever the client suggests, and about the most bytes
# (Pravega's MAX_READ_SIZE is 2 MiB; a frame is at most 16 MiB).
MAX_ITEMS = 1000
MAX_READ_BYTES = 2 * 1024 * 1024

TableCommand: TypeAlias = (tc.CreateTableSegment | tc.DeleteTableSegment | tc.GetTableSegmentInfo
                           | tc.UpdateTableEntries | tc.RemoveTableKeys | tc.ReadTable | tc.ReadTableKeys
                           | tc.ReadTableEntries | tc.ReadTableEntriesDelta)
TABLE_COMMANDS: tuple[type[WireCommand], ...] = typing.get_args(TableCommand)


def table_segment_of(command: TableCommand) -> str:
    """The table segment a command names, as the client named it."""
    return command.segment_name if isinstance(command, tc.GetTableSegmentInfo) else command.segment


def table_name(segment: str) -> str:
    """Where the table segment a Pravega client names lives in Millrace."""
    return segment + PRAVEGA_TABLE_MARK


def _expected(version: int) -> ExpectedVersion:
    if version == tc.NO_VERSION:
        return None
    if version == tc.NOT_EXISTS:
        return NOT_EXISTS
    return version


def _entry(key: bytes, value: bytes, version: int) -> tc.TableEntry:
    return tc.TableEntry(key=tc.TableKey(data=key, key_version=version), value=tc.TableValue(data=value))


class PravegaTables:
    """Answers the table segment commands (``TABLE_COMMANDS``); blocking."""

    def __init__(self, tables: TableStore) -> None:
        self.tables = tables

    def answer(self, command: TableCommand) -> WireCommand:
        request_id = command.request_id
        segment = table_segment_of(command)
        try:
            return self._answer(command, table_name(segment))
        except (SegmentNotFoundError, NotATableError):
            return NoSuchSegment(request_id=request_id, segment=segment)
        except TableKeyVersionMismatchError as exc:
            return tc.TableKeyBadVersion(request_id=request_id, segment=segment, server_stack_trace=str(exc))
        except TableKeyNotFoundError as exc:
            return tc.TableKeyDoesNotExist(request_id=request_id, segment=segment, server_stack_trace=str(exc))

    def _answer(self, command: TableCommand, name: str) -> WireCommand:
        tables = self.tables
        if isinstance(command, tc.CreateTableSegment):
            try:
                tables.create_table(name)
            except SegmentExistsError:
                return SegmentAlreadyExists(request_id=command.request_id, segment=command.segment)
            return SegmentCreated(request_id=command.request_id, segment=command.segment)
        if isinstance(command, tc.DeleteTableSegment):
            try:
                tables.delete_table(name, command.must_be_empty)
            except TableNotEmptyError as exc:
                return tc.TableSegmentNotEmpty(request_id=command.request_id, segment=command.segment,
                                               server_stack_trace=str(exc))
            return SegmentDeleted(request_id=command.request_id, segment=command.segment)
        if isinstance(command, tc.GetTableSegmentInfo):
            info = tables.get_info(name)
            return tc.TableSegmentInfo(request_id=command.request_id, segment_name=command.segment_name,
                                       start_offset=info.start_offset, length=info.length,
                                       entry_count=info.key_count, key_length=0)
        if isinstance(command, tc.UpdateTableEntries | tc.RemoveTableKeys):
            if command.table_segment_offset != -1:
                # Millrace's tables condition each key, not the whole segment's length.
                return OperationUnsupported(request_id=command.request_id, operation_name=type(command).__name__,
                                            server_stack_trace="a condition on the table segment's offset")
            if isinstance(command, tc.UpdateTableEntries):
                # Pravega takes a key more than once in a batch (the Rust client's synchronizer sends so):
                # each occurrence is checked against the table before the batch, and the last value
                # wins. Millrace's batches name a key once, so the occurrences become one entry.
                updates: dict[bytes, tuple[bytes, int]] = {}
                for e in command.table_entries:
                    seen = updates.get(e.key.data)
                    if seen is not None and seen[1] != e.key.key_version:
                        raise TableKeyVersionMismatchError(f"key {e.key.data!r} is expected at two versions")
                    updates[e.key.data] = (e.value.data, e.key.key_version)
                versions = dict(zip(updates, tables.put(name, [(key, value, _expected(version)) for key, (value, version)
                                                               in updates.items()]), strict=True))
                return tc.TableEntriesUpdated(request_id=command.request_id, updated_versions=tuple(
                    versions[e.key.data] for e in command.table_entries))
            removals: dict[bytes, int | None] = {}
            for k in command.keys:
                removals[k.data] = None if k.key_version == tc.NO_VERSION else k.key_version
            tables.remove(name, list(removals.items()))
            return tc.TableKeysRemoved(request_id=command.request_id, segment=command.segment)
        if isinstance(command, tc.ReadTable):
            found = tables.get(name, [k.data for k in command.keys])
            return tc.TableRead(request_id=command.request_id, segment=command.segment, entries=tuple(
                _entry(k.data, b"", tc.NOT_EXISTS) if e is None else _entry(e.key, e.value, e.version)
                for k, e in zip(command.keys, found, strict=True)))
        if isinstance(command, tc.ReadTableKeys | tc.ReadTableEntries):
            return self._iterate(command, name)
        if isinstance(command, tc.ReadTableEntriesDelta):
            return self._delta(command, name)
        typing.assert_never(command)

    def _iterate(self, command: tc.ReadTableKeys | tc.ReadTableEntries, name: str) -> WireCommand:
        args = command.args
        limit = max(1, min(MAX_ITEMS, command.suggested_key_count if isinstance(command, tc.ReadTableKeys)
                           else command.suggested_entry_count))
        token = args.continuation_token or None
        start = args.from_key or None
        # Pravega's range is inclusive of its end; Millrace's iteration stops before it.
        end = args.to_key + b"\x00" if args.to_key else None
        if isinstance(command, tc.ReadTableKeys):
            page = self.tables.iterate_keys(name, token, limit, start=start, end=end)
            keys = tuple(tc.TableKey(data=k.key, key_version=k.version) for k in page.items)
            # An empty page ends a client's iteration: a page's token always resumes after its last key
            # (or stays where it was), never back at the start.
            after = continuation_after(page.items[-1].key) if page.items else args.continuation_token
            return tc.TableKeysRead(request_id=command.request_id, segment=command.segment, keys=keys,
                                    continuation_token=after)
        entries = self.tables.iterate_entries(name, token, limit, start=start, end=end)
        after = continuation_after(entries.items[-1].key) if entries.items else args.continuation_token
        return tc.TableEntriesRead(request_id=command.request_id, segment=command.segment, entries=tuple(
            _entry(e.key, e.value, e.version) for e in entries.items), continuation_token=after)

    def _delta(self, command: tc.ReadTableEntriesDelta, name: str) -> WireCommand:
        limit = max(1, min(MAX_ITEMS, command.suggested_entry_count))
        changes = self.tables.changes_since(name, command.from_position, limit, MAX_READ_BYTES)
        latest: dict[bytes, tc.TableEntry] = {}
        for entry in changes.entries:
            latest.pop(entry.key, None)
            if entry.value is not None:  # a removal only drops the key, as Pravega's delta reply does
                latest[entry.key] = _entry(entry.key, entry.value, entry.version)
        return tc.TableEntriesDeltaRead(request_id=command.request_id, segment=command.segment,
                                        entries=tuple(latest.values()), should_clear=changes.cleared,
                                        reached_end=changes.reached_end, last_position=changes.next_position)
