"""The frame, the protocol's constants and type codes, and the machinery that turns a command's field
declarations into its encoder and decoder. No I/O.

A frame is ``type code (int32) | payload length (int32) | payload``. A command class is a frozen,
keyword-only dataclass whose fields are declared *in wire order* with ``Annotated`` codecs (see
``primitives``); ``@wire_command(CommandType.X)`` reads those declarations once, at class creation, and
records the class under its type code, so decoding is a table lookup, never an if-chain. Commands whose
layout no field list can say (``Padding``, ``TableKey`` ...) override ``write_fields``/``read_fields``.

Keyword-only because Pravega's Java constructors do not always list fields in the order they are
written (``DataAppended``, ``CreateSegment``): here declaration order *is* wire order, and positional
arguments, which would tempt one to follow the Java constructor, are refused.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from collections.abc import Callable, Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar, dataclass_transform

from millrace.gateway.pravega_protocol.errors import PravegaDecodeError, PravegaEncodeError
from millrace.gateway.pravega_protocol.primitives import Buffer, DataInput, DataOutput, FieldCodec

__all__ = [
    "FRAME_HEADER",
    "MAX_WIRECOMMAND_SIZE",
    "NULL_ATTRIBUTE_VALUE",
    "NULL_TABLE_SEGMENT_OFFSET",
    "OLDEST_COMPATIBLE_VERSION",
    "TYPE_PLUS_LENGTH_SIZE",
    "TYPE_SIZE",
    "WIRE_VERSION",
    "CommandType",
    "StructCodec",
    "WireCommand",
    "WireStruct",
    "registered_commands",
    "wire_command",
    "wire_struct",
]

#: The protocol version this codec speaks, and the oldest a peer may speak (sent in ``Hello``),
#: as in Pravega's ``WireCommands`` (Pravega 0.14 / master of 2025).
WIRE_VERSION = 17
OLDEST_COMPATIBLE_VERSION = 5

TYPE_SIZE = 4
TYPE_PLUS_LENGTH_SIZE = 8
#: The largest frame Pravega's server accepts, header included (16 MiB - 1).
MAX_WIRECOMMAND_SIZE = 0x00FFFFFF
#: An attribute with no value (``Long.MIN_VALUE``).
NULL_ATTRIBUTE_VALUE = -(2**63)
#: ``UpdateTableEntries``/``RemoveTableKeys`` without a table segment offset condition.
NULL_TABLE_SEGMENT_OFFSET = -1

FRAME_HEADER = struct.Struct(">ii")
_MAX_INT = 2**31 - 1


class CommandType(IntEnum):
    """Every type code of Pravega's ``WireCommandType``; requests and their replies side by side."""

    HELLO = -127
    PADDING = -1
    PARTIAL_EVENT = -2
    FLUSH_TO_STORAGE = -3
    FLUSHED_TO_STORAGE = -4
    LIST_STORAGE_CHUNKS = -5
    STORAGE_CHUNKS_LISTED = -6
    EVENT = 0  # only ever inside append data or a ConditionalAppend, never a frame of its own
    SETUP_APPEND = 1
    APPEND_SETUP = 2
    APPEND_BLOCK = 3
    APPEND_BLOCK_END = 4
    CONDITIONAL_APPEND = 5
    DATA_APPENDED = 7
    CONDITIONAL_CHECK_FAILED = 8
    READ_SEGMENT = 9
    SEGMENT_READ = 10
    GET_STREAM_SEGMENT_INFO = 11
    STREAM_SEGMENT_INFO = 12
    CREATE_SEGMENT = 20
    SEGMENT_CREATED = 21
    SEAL_SEGMENT = 28
    SEGMENT_SEALED = 29
    DELETE_SEGMENT = 30
    SEGMENT_DELETED = 31
    UPDATE_SEGMENT_POLICY = 32
    SEGMENT_POLICY_UPDATED = 33
    GET_SEGMENT_ATTRIBUTE = 34
    SEGMENT_ATTRIBUTE = 35
    UPDATE_SEGMENT_ATTRIBUTE = 36
    SEGMENT_ATTRIBUTE_UPDATED = 37
    TRUNCATE_SEGMENT = 38
    SEGMENT_TRUNCATED = 39
    CREATE_TRANSIENT_SEGMENT = 40
    LOCATE_OFFSET = 41
    OFFSET_LOCATED = 42
    WRONG_HOST = 50
    SEGMENT_IS_SEALED = 51
    SEGMENT_ALREADY_EXISTS = 52
    NO_SUCH_SEGMENT = 53
    INVALID_EVENT_NUMBER = 55
    SEGMENT_IS_TRUNCATED = 56
    OPERATION_UNSUPPORTED = 57
    MERGE_SEGMENTS = 58
    SEGMENTS_MERGED = 59
    AUTH_TOKEN_CHECK_FAILED = 60
    ERROR_MESSAGE = 61
    GET_TABLE_SEGMENT_INFO = 68
    TABLE_SEGMENT_INFO = 69
    CREATE_TABLE_SEGMENT = 70
    DELETE_TABLE_SEGMENT = 71
    UPDATE_TABLE_ENTRIES = 74
    TABLE_ENTRIES_UPDATED = 75
    REMOVE_TABLE_KEYS = 76
    TABLE_KEYS_REMOVED = 77
    READ_TABLE = 78
    TABLE_READ = 79
    TABLE_SEGMENT_NOT_EMPTY = 80
    TABLE_KEY_DOES_NOT_EXIST = 81
    TABLE_KEY_BAD_VERSION = 82
    READ_TABLE_KEYS = 83
    TABLE_KEYS_READ = 84
    READ_TABLE_ENTRIES = 85
    TABLE_ENTRIES_READ = 86
    # Pravega numbers the delta pair reply-first.
    TABLE_ENTRIES_DELTA_READ = 87
    READ_TABLE_ENTRIES_DELTA = 88
    CONDITIONAL_BLOCK_END = 89
    MERGE_SEGMENTS_BATCH = 90
    SEGMENTS_BATCH_MERGED = 91
    KEEP_ALIVE = 100


S = TypeVar("S", bound="WireStruct")
C = TypeVar("C", bound="WireCommand")
FieldSpecs = tuple[tuple[str, FieldCodec[Any]], ...]


class WireStruct:
    """A value written as its fields in declaration order: a command's payload, or a structure inside
    one (a table key, a chunk's description)."""

    __slots__ = ()
    _wire_fields: ClassVar[FieldSpecs] = ()

    @classmethod
    def wire_fields(cls) -> FieldSpecs:
        """``(field name, codec)`` in wire order."""
        return cls._wire_fields

    def write_fields(self, out: DataOutput) -> None:
        for name, codec in self._wire_fields:
            try:
                codec.write(out, getattr(self, name))
            except PravegaEncodeError as exc:
                raise PravegaEncodeError(f"{type(self).__name__}.{name}: {exc}") from exc

    @classmethod
    def read_fields(cls: type[S], inp: DataInput) -> S:
        values = {}
        for name, codec in cls._wire_fields:
            try:
                values[name] = codec.read(inp)
            except PravegaDecodeError as exc:
                raise PravegaDecodeError(f"{cls.__name__}.{name}: {exc}") from exc
        return cls(**values)


class WireCommand(WireStruct):
    """A command: one frame on the wire."""

    __slots__ = ()
    TYPE: ClassVar[CommandType]

    def encode(self) -> bytes:
        """The whole frame: type code, payload length, payload. Not checked against
        ``MAX_WIRECOMMAND_SIZE``, as Pravega's encoder does not check it: keeping replies under what
        peers accept (a ``SegmentRead``'s data, a table read's entries) is the sender's business."""
        out = DataOutput()
        self.write_fields(out)
        if out.size > _MAX_INT:
            raise PravegaEncodeError(f"{type(self).__name__}: a payload of {out.size} bytes overflows the length")
        return b"".join((FRAME_HEADER.pack(self.TYPE, out.size), *out.parts))

    @classmethod
    def decode(cls: type[C], frame: Buffer) -> C:
        """One whole frame of this command (header included, nothing after it)."""
        view = memoryview(frame)
        if view.nbytes < TYPE_PLUS_LENGTH_SIZE:
            raise PravegaDecodeError(f"a frame needs {TYPE_PLUS_LENGTH_SIZE} header bytes, got {view.nbytes}")
        type_code, length = FRAME_HEADER.unpack_from(view)
        if type_code != cls.TYPE:
            raise PravegaDecodeError(f"{cls.__name__} has type {int(cls.TYPE)}, the frame {type_code}")
        if length != view.nbytes - TYPE_PLUS_LENGTH_SIZE:
            raise PravegaDecodeError(f"header says {length} payload bytes, the frame has {view.nbytes - 8}")
        return cls.decode_payload(view[TYPE_PLUS_LENGTH_SIZE:])

    @classmethod
    def decode_payload(cls: type[C], payload: Buffer) -> C:
        """The command from its payload. Bytes after the last field are ignored, as Pravega ignores
        them: newer peers append fields that older readers skip."""
        return cls.read_fields(DataInput(payload))


class StructCodec(FieldCodec[S]):
    """A nested structure as a field."""

    __slots__ = ("struct_type",)

    def __init__(self, struct_type: type[S]) -> None:
        self.struct_type = struct_type

    def write(self, out: DataOutput, value: S) -> None:
        if not isinstance(value, self.struct_type):
            raise PravegaEncodeError(f"expected {self.struct_type.__name__}, not {type(value).__name__}")
        value.write_fields(out)

    def read(self, inp: DataInput) -> S:
        return self.struct_type.read_fields(inp)


_COMMANDS: dict[int, type[WireCommand]] = {}


def _field_specs(cls: type[WireStruct]) -> FieldSpecs:
    hints = typing.get_type_hints(cls, include_extras=True)
    specs = []
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]  # cls is a dataclass by now
        codecs = [m for m in getattr(hints[field.name], "__metadata__", ()) if isinstance(m, FieldCodec)]
        if len(codecs) != 1:
            raise TypeError(f"{cls.__name__}.{field.name} needs exactly one wire codec in its Annotated type")
        specs.append((field.name, codecs[0]))
    return tuple(specs)


def _make_struct(cls: type[S]) -> type[S]:
    made = dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(cls)
    # A structure whose layout no field list can say writes and reads itself; its fields carry no codecs.
    hand_written = "write_fields" in vars(cls) and "read_fields" in vars(cls)
    made._wire_fields = () if hand_written else _field_specs(made)
    return made


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(dataclasses.field,))
def wire_struct(cls: type[S]) -> type[S]:
    """Make ``cls`` a frozen keyword-only dataclass written as its declared fields."""
    return _make_struct(cls)


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(dataclasses.field,))
def wire_command(command_type: CommandType) -> Callable[[type[C]], type[C]]:
    """Make ``cls`` a frozen keyword-only dataclass and record it as the command of ``command_type``."""

    def register(cls: type[C]) -> type[C]:
        if command_type in _COMMANDS:
            raise TypeError(f"{command_type.name} is already {_COMMANDS[command_type].__name__}")
        cls.TYPE = command_type
        made = _make_struct(cls)
        _COMMANDS[command_type] = made
        return made

    return register


def registered_commands() -> Mapping[int, type[WireCommand]]:
    """Every command class by type code (``codec.COMMANDS`` is the public, complete view)."""
    return MappingProxyType(_COMMANDS)
