"""Pravega's table segment commands (the key/value segments behind its controller metadata, key-value
tables and reader group state) and the keys, values and iterator arguments they carry. No I/O.

Keys and values are written with two lengths: the structure's own (after the first int) and the
data's. A key with empty data is written as those two ints alone, without its version, so it decodes
with ``NO_VERSION`` whatever version it was given, exactly as in Pravega.
"""

from __future__ import annotations

from typing import Annotated, TypeAlias

from millrace.gateway.pravega_protocol.base import (
    CommandType,
    StructCodec,
    WireCommand,
    WireStruct,
    wire_command,
    wire_struct,
)
from millrace.gateway.pravega_protocol.errors import PravegaDecodeError, PravegaEncodeError
from millrace.gateway.pravega_protocol.primitives import (
    BOOL,
    INT,
    LONG,
    Bool,
    DataInput,
    DataOutput,
    Int,
    ListOf,
    Long,
    SizedBytes,
    Trailing,
    Utf,
)

__all__ = [
    "NOT_EXISTS",
    "NO_VERSION",
    "CreateTableSegment",
    "DeleteTableSegment",
    "GetTableSegmentInfo",
    "ReadTable",
    "ReadTableEntries",
    "ReadTableEntriesDelta",
    "ReadTableKeys",
    "RemoveTableKeys",
    "TableEntriesDeltaRead",
    "TableEntriesRead",
    "TableEntriesUpdated",
    "TableEntry",
    "TableIteratorArgs",
    "TableKey",
    "TableKeyBadVersion",
    "TableKeyDoesNotExist",
    "TableKeysRead",
    "TableKeysRemoved",
    "TableRead",
    "TableSegmentInfo",
    "TableSegmentNotEmpty",
    "TableValue",
    "UpdateTableEntries",
]

#: A key version meaning "unconditional" (``Long.MIN_VALUE``).
NO_VERSION = -(2**63)
#: A key version meaning "only if the key does not exist".
NOT_EXISTS = -1

_INT_SIZE = 4
_LONG_SIZE = 8


def _data_bytes(value: object, what: str) -> bytes | bytearray | memoryview:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise PravegaEncodeError(f"{what} must be bytes, not {type(value).__name__}")
    return value


@wire_struct
class TableKey(WireStruct):
    """A key and the version a conditional update expects (or, in replies, the key's version)."""

    data: bytes
    key_version: int = NO_VERSION

    def write_fields(self, out: DataOutput) -> None:
        data = _data_bytes(self.data, "TableKey.data")
        size = memoryview(data).nbytes
        out.write_int(_INT_SIZE + size + _LONG_SIZE)  # the size Pravega declares, even for an empty key
        out.write_int(size)
        if size:
            out.write(data)
            out.write_long(self.key_version)

    @classmethod
    def read_fields(cls, inp: DataInput) -> TableKey:
        available = inp.remaining()
        declared_size = inp.read_int()
        size = inp.read_int()
        if size == 0:
            return cls(data=b"", key_version=NO_VERSION)
        if available < declared_size:
            raise PravegaDecodeError(f"TableKey declares {declared_size} bytes, {available} are left")
        return cls(data=inp.read_bytes(size), key_version=inp.read_long())


@wire_struct
class TableValue(WireStruct):
    data: bytes

    def write_fields(self, out: DataOutput) -> None:
        data = _data_bytes(self.data, "TableValue.data")
        size = memoryview(data).nbytes
        out.write_int(_INT_SIZE + size)
        out.write_int(size)
        if size:
            out.write(data)

    @classmethod
    def read_fields(cls, inp: DataInput) -> TableValue:
        available = inp.remaining()
        declared_size = inp.read_int()
        size = inp.read_int()
        if size == 0:
            return cls(data=b"")
        if available < declared_size:
            raise PravegaDecodeError(f"TableValue declares {declared_size} bytes, {available} are left")
        return cls(data=inp.read_bytes(size))


@wire_struct
class TableEntry(WireStruct):
    """One entry of Pravega's ``TableEntries``: a key, then its value."""

    key: Annotated[TableKey, StructCodec(TableKey)]
    value: Annotated[TableValue, StructCodec(TableValue)]


@wire_struct
class TableIteratorArgs(WireStruct):
    """Where an iteration over a table segment resumes and the key range it covers.

    The wire carries a fourth buffer between the token and the range, the prefix filter Pravega 0.10
    deprecated: it is always written empty and skipped when read. Each buffer is read only if its
    length still fits in the frame, as older clients sent fewer of them."""

    continuation_token: bytes = b""
    from_key: bytes = b""
    to_key: bytes = b""

    def write_fields(self, out: DataOutput) -> None:
        out.write_sized_bytes(_data_bytes(self.continuation_token, "continuation_token"))
        out.write_int(0)  # the deprecated prefix filter
        out.write_sized_bytes(_data_bytes(self.from_key, "from_key"))
        out.write_sized_bytes(_data_bytes(self.to_key, "to_key"))

    @classmethod
    def read_fields(cls, inp: DataInput) -> TableIteratorArgs:
        def buffer() -> bytes:
            return inp.read_bytes(inp.read_int()) if inp.remaining() >= _INT_SIZE else b""

        continuation_token = buffer()
        buffer()  # the deprecated prefix filter
        from_key = buffer()
        return cls(continuation_token=continuation_token, from_key=from_key, to_key=buffer())


Keys: TypeAlias = Annotated[tuple[TableKey, ...], ListOf(StructCodec(TableKey))]
Entries: TypeAlias = Annotated[tuple[TableEntry, ...], ListOf(StructCodec(TableEntry))]
IteratorArgs: TypeAlias = Annotated[TableIteratorArgs, StructCodec(TableIteratorArgs)]
# A conditional update on the segment's length, absent from older clients' requests.
TableSegmentOffset: TypeAlias = Annotated[int, Trailing(LONG, -1, min_remaining=1)]


@wire_command(CommandType.GET_TABLE_SEGMENT_INFO)
class GetTableSegmentInfo(WireCommand):
    request_id: Long
    segment_name: Utf
    delegation_token: Utf = ""


@wire_command(CommandType.TABLE_SEGMENT_INFO)
class TableSegmentInfo(WireCommand):
    request_id: Long
    segment_name: Utf
    start_offset: Long
    length: Long
    entry_count: Long
    key_length: Int


@wire_command(CommandType.CREATE_TABLE_SEGMENT)
class CreateTableSegment(WireCommand):
    """``key_length`` > 0 makes a fixed-key-length segment; each field after the token was added in a
    later release and is read only if present. The reply is ``SegmentCreated``."""

    request_id: Long
    segment: Utf
    delegation_token: Utf = ""
    sorted_deprecated: Annotated[bool, Trailing(BOOL, False, min_remaining=1)] = False
    key_length: Annotated[int, Trailing(INT, 0, min_remaining=_INT_SIZE)] = 0
    rollover_size_bytes: Annotated[int, Trailing(LONG, 0, min_remaining=_LONG_SIZE)] = 0


@wire_command(CommandType.DELETE_TABLE_SEGMENT)
class DeleteTableSegment(WireCommand):
    """``must_be_empty``: refuse (``TableSegmentNotEmpty``) if the segment holds keys. The reply is
    ``SegmentDeleted``."""

    request_id: Long
    segment: Utf
    must_be_empty: Bool
    delegation_token: Utf = ""


@wire_command(CommandType.UPDATE_TABLE_ENTRIES)
class UpdateTableEntries(WireCommand):
    request_id: Long
    segment: Utf
    delegation_token: Utf = ""
    table_entries: Entries
    table_segment_offset: TableSegmentOffset = -1


@wire_command(CommandType.TABLE_ENTRIES_UPDATED)
class TableEntriesUpdated(WireCommand):
    """The new version of each updated key, in request order."""

    request_id: Long
    updated_versions: Annotated[tuple[int, ...], ListOf(LONG)]


@wire_command(CommandType.REMOVE_TABLE_KEYS)
class RemoveTableKeys(WireCommand):
    request_id: Long
    segment: Utf
    delegation_token: Utf = ""
    keys: Keys
    table_segment_offset: TableSegmentOffset = -1


@wire_command(CommandType.TABLE_KEYS_REMOVED)
class TableKeysRemoved(WireCommand):
    request_id: Long
    segment: Utf


@wire_command(CommandType.READ_TABLE)
class ReadTable(WireCommand):
    """Look keys up (their versions are ``NO_VERSION``)."""

    request_id: Long
    segment: Utf
    delegation_token: Utf = ""
    keys: Keys


@wire_command(CommandType.TABLE_READ)
class TableRead(WireCommand):
    """One entry per key asked for; a missing key comes back with an empty value and ``NOT_EXISTS``."""

    request_id: Long
    segment: Utf
    entries: Entries


@wire_command(CommandType.TABLE_SEGMENT_NOT_EMPTY)
class TableSegmentNotEmpty(WireCommand):
    request_id: Long
    segment: Utf
    server_stack_trace: Utf = ""


@wire_command(CommandType.TABLE_KEY_DOES_NOT_EXIST)
class TableKeyDoesNotExist(WireCommand):
    """A conditional update named a key that does not exist."""

    request_id: Long
    segment: Utf
    server_stack_trace: Utf = ""


@wire_command(CommandType.TABLE_KEY_BAD_VERSION)
class TableKeyBadVersion(WireCommand):
    """A conditional update's key version is not the key's current one."""

    request_id: Long
    segment: Utf
    server_stack_trace: Utf = ""


@wire_command(CommandType.READ_TABLE_KEYS)
class ReadTableKeys(WireCommand):
    request_id: Long
    segment: Utf
    delegation_token: Utf = ""
    suggested_key_count: Int
    args: IteratorArgs


@wire_command(CommandType.TABLE_KEYS_READ)
class TableKeysRead(WireCommand):
    request_id: Long
    segment: Utf
    keys: Keys
    continuation_token: SizedBytes


@wire_command(CommandType.READ_TABLE_ENTRIES)
class ReadTableEntries(WireCommand):
    request_id: Long
    segment: Utf
    delegation_token: Utf = ""
    suggested_entry_count: Int
    args: IteratorArgs


@wire_command(CommandType.TABLE_ENTRIES_READ)
class TableEntriesRead(WireCommand):
    request_id: Long
    segment: Utf
    entries: Entries
    continuation_token: SizedBytes


@wire_command(CommandType.READ_TABLE_ENTRIES_DELTA)
class ReadTableEntriesDelta(WireCommand):
    """The entries changed since ``from_position`` in the segment (how state synchronizers follow)."""

    request_id: Long
    segment: Utf
    delegation_token: Utf = ""
    from_position: Long
    suggested_entry_count: Int


@wire_command(CommandType.TABLE_ENTRIES_DELTA_READ)
class TableEntriesDeltaRead(WireCommand):
    """``should_clear``: the position was compacted away and the reader must start over."""

    request_id: Long
    segment: Utf
    entries: Entries
    should_clear: Bool
    reached_end: Bool
    last_position: Long
