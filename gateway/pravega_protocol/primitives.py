"""Java ``DataInput``/``DataOutput`` as Pravega's wire uses them, and the field codecs commands are
declared with. No I/O.

Everything is big-endian. Strings are Java's ``writeUTF``: a u16 byte length, then *modified* UTF-8
(U+0000 as ``C0 80``, characters beyond the BMP as two 3-byte surrogates). UUIDs are two longs, the
most significant first, which is exactly ``uuid.UUID.bytes``.

A command field is declared ``name: Annotated[python_type, codec]``; the aliases here (``Long``,
``Utf``, ``Uuid`` ...) are those annotations, so a declaration reads like the Java field list.
``Trailing`` marks a field that older peers do not send: Pravega reads it only when enough bytes remain
in the frame and otherwise uses a default, which is how its wire grew without version negotiation.
"""

from __future__ import annotations

import struct
import sys
import uuid
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable
from typing import Annotated, Generic, TypeAlias, TypeVar

from millrace.gateway.pravega_protocol.errors import PravegaDecodeError, PravegaEncodeError

__all__ = [
    "BOOL",
    "BYTE",
    "INT",
    "LONG",
    "REST_BYTES",
    "SIZED_BYTES",
    "UTF",
    "UUID",
    "Bool",
    "Buffer",
    "Byte",
    "CodedEnum",
    "DataInput",
    "DataOutput",
    "FieldCodec",
    "Int",
    "ListOf",
    "Long",
    "RestBytes",
    "SizedBytes",
    "Trailing",
    "Utf",
    "Uuid",
    "decode_modified_utf8",
    "encode_modified_utf8",
]

#: What a decoder accepts and what a bytes field may be given when encoding.
Buffer: TypeAlias = bytes | bytearray | memoryview
T = TypeVar("T")

_BYTE = struct.Struct(">b")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_U16 = struct.Struct(">H")
_MAX_UTF_BYTES = 0xFFFF
# array("H") holds UTF-16 code units in the machine's order; decode them with the matching codec.
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


class DataInput:
    """Reads one frame's payload like Java's ``DataInput``; every read is bounds-checked against the
    payload's end, so a short frame raises ``PravegaDecodeError`` instead of reading the next frame."""

    __slots__ = ("_buf", "_pos", "_end")

    def __init__(self, buf: Buffer, pos: int = 0, end: int | None = None) -> None:
        self._buf = memoryview(buf)
        self._pos = pos
        self._end = len(self._buf) if end is None else end

    @property
    def position(self) -> int:
        return self._pos

    def remaining(self) -> int:
        """Bytes left in the payload (Java's ``available()``)."""
        return self._end - self._pos

    def _take(self, n: int, what: str) -> int:
        if n < 0:
            raise PravegaDecodeError(f"negative length {n} for {what}")
        pos = self._pos
        if self._end - pos < n:
            raise PravegaDecodeError(f"truncated frame: {what} needs {n} bytes, {self._end - pos} left")
        self._pos = pos + n
        return pos

    def read_byte(self) -> int:
        return int(_BYTE.unpack_from(self._buf, self._take(1, "byte"))[0])

    def read_boolean(self) -> bool:
        # Java's readBoolean: any non-zero byte is true.
        return self._buf[self._take(1, "boolean")] != 0

    def read_int(self) -> int:
        return int(_INT.unpack_from(self._buf, self._take(4, "int"))[0])

    def read_long(self) -> int:
        return int(_LONG.unpack_from(self._buf, self._take(8, "long"))[0])

    def read_uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.read_bytes(16))

    def read_bytes(self, n: int) -> bytes:
        pos = self._take(n, "bytes")
        return bytes(self._buf[pos : pos + n])

    def read_rest(self) -> bytes:
        return self.read_bytes(self.remaining())

    def read_utf(self) -> str:
        length = _U16.unpack_from(self._buf, self._take(2, "string length"))[0]
        return decode_modified_utf8(self.read_bytes(length))


class DataOutput:
    """Collects one payload as a list of parts, so a large data field is copied once, into the frame."""

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: list[Buffer] = []
        self.size = 0

    def write(self, data: Buffer) -> None:
        self.parts.append(data)
        self.size += len(data) if not isinstance(data, memoryview) else data.nbytes

    def _pack(self, fmt: struct.Struct, value: int, what: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PravegaEncodeError(f"{what} must be an int, not {type(value).__name__}")
        try:
            self.write(fmt.pack(value))
        except struct.error as exc:
            raise PravegaEncodeError(f"{what} out of range: {value}") from exc

    def write_byte(self, value: int) -> None:
        self._pack(_BYTE, value, "byte")

    def write_boolean(self, value: bool) -> None:
        self.write(b"\x01" if value else b"\x00")

    def write_int(self, value: int) -> None:
        self._pack(_INT, value, "int")

    def write_long(self, value: int) -> None:
        self._pack(_LONG, value, "long")

    def write_uuid(self, value: uuid.UUID) -> None:
        if not isinstance(value, uuid.UUID):
            raise PravegaEncodeError(f"expected a UUID, not {type(value).__name__}")
        self.write(value.bytes)

    def write_utf(self, value: str) -> None:
        if not isinstance(value, str):
            raise PravegaEncodeError(f"expected a str, not {type(value).__name__}")
        encoded = encode_modified_utf8(value)
        self.write(_U16.pack(len(encoded)))
        self.write(encoded)

    def write_sized_bytes(self, data: Buffer) -> None:
        """An int length, then the bytes (how Pravega writes every ByteBuf that is not a frame's tail)."""
        self.write_int(memoryview(data).nbytes)
        self.write(data)


def encode_modified_utf8(text: str) -> bytes:
    """``text`` as Java's ``writeUTF`` encodes it, without the u16 length prefix."""
    if text.isascii() and "\x00" not in text:
        encoded = text.encode("ascii")
    else:
        out = bytearray()
        # Java strings are UTF-16: a character beyond the BMP is two surrogates, each encoded alone.
        for unit in array("H", text.encode(_UTF16_NATIVE, "surrogatepass")):
            if 0 < unit < 0x80:
                out.append(unit)
            elif unit < 0x800:  # includes U+0000, which modified UTF-8 never writes as a zero byte
                out += bytes((0xC0 | unit >> 6, 0x80 | unit & 0x3F))
            else:
                out += bytes((0xE0 | unit >> 12, 0x80 | (unit >> 6) & 0x3F, 0x80 | unit & 0x3F))
        encoded = bytes(out)
    if len(encoded) > _MAX_UTF_BYTES:
        raise PravegaEncodeError(f"string encodes to {len(encoded)} bytes; writeUTF allows {_MAX_UTF_BYTES}")
    return encoded


def decode_modified_utf8(data: bytes) -> str:
    """The string Java's ``readUTF`` reads from ``data`` (the bytes after the u16 length).

    Accepts what Java accepts (a plain zero byte, overlong 2- and 3-byte forms) and refuses what it
    refuses (4-byte forms, stray continuation bytes, truncated sequences)."""
    if data.isascii():
        return data.decode("ascii")
    units = array("H")
    i, n = 0, len(data)
    while i < n:
        lead = data[i]
        if lead < 0x80:
            units.append(lead)
            i += 1
        elif lead >> 5 == 0b110:
            if i + 1 >= n or data[i + 1] & 0xC0 != 0x80:
                raise PravegaDecodeError(f"malformed modified UTF-8 around byte {i}")
            units.append((lead & 0x1F) << 6 | data[i + 1] & 0x3F)
            i += 2
        elif lead >> 4 == 0b1110:
            if i + 2 >= n or data[i + 1] & 0xC0 != 0x80 or data[i + 2] & 0xC0 != 0x80:
                raise PravegaDecodeError(f"malformed modified UTF-8 around byte {i}")
            units.append((lead & 0x0F) << 12 | (data[i + 1] & 0x3F) << 6 | data[i + 2] & 0x3F)
            i += 3
        else:
            raise PravegaDecodeError(f"malformed modified UTF-8: byte {lead:#04x} at {i}")
    # Pairs of surrogates become one character; a lone one stays, as a Java string may hold it.
    return units.tobytes().decode(_UTF16_NATIVE, "surrogatepass")


# ----------------------------------------------------------------------------------------------
# field codecs


class FieldCodec(ABC, Generic[T]):
    """How one field is written and read."""

    __slots__ = ()

    @abstractmethod
    def write(self, out: DataOutput, value: T) -> None: ...

    @abstractmethod
    def read(self, inp: DataInput) -> T: ...


class _ByteCodec(FieldCodec[int]):
    def write(self, out: DataOutput, value: int) -> None:
        out.write_byte(value)

    def read(self, inp: DataInput) -> int:
        return inp.read_byte()


class _BoolCodec(FieldCodec[bool]):
    def write(self, out: DataOutput, value: bool) -> None:
        if not isinstance(value, bool):
            raise PravegaEncodeError(f"expected a bool, not {type(value).__name__}")
        out.write_boolean(value)

    def read(self, inp: DataInput) -> bool:
        return inp.read_boolean()


class _IntCodec(FieldCodec[int]):
    def write(self, out: DataOutput, value: int) -> None:
        out.write_int(value)

    def read(self, inp: DataInput) -> int:
        return inp.read_int()


class _LongCodec(FieldCodec[int]):
    def write(self, out: DataOutput, value: int) -> None:
        out.write_long(value)

    def read(self, inp: DataInput) -> int:
        return inp.read_long()


class _UtfCodec(FieldCodec[str]):
    def write(self, out: DataOutput, value: str) -> None:
        out.write_utf(value)

    def read(self, inp: DataInput) -> str:
        return inp.read_utf()


class _UuidCodec(FieldCodec[uuid.UUID]):
    def write(self, out: DataOutput, value: uuid.UUID) -> None:
        out.write_uuid(value)

    def read(self, inp: DataInput) -> uuid.UUID:
        return inp.read_uuid()


def _check_bytes(value: object) -> Buffer:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise PravegaEncodeError(f"expected bytes, not {type(value).__name__}")
    return value


class _SizedBytesCodec(FieldCodec[bytes]):
    def write(self, out: DataOutput, value: bytes) -> None:
        out.write_sized_bytes(_check_bytes(value))

    def read(self, inp: DataInput) -> bytes:
        return inp.read_bytes(inp.read_int())


class _RestBytesCodec(FieldCodec[bytes]):
    """The rest of the frame, with no length of its own (the frame's length delimits it)."""

    def write(self, out: DataOutput, value: bytes) -> None:
        out.write(_check_bytes(value))

    def read(self, inp: DataInput) -> bytes:
        return inp.read_rest()


class ListOf(FieldCodec[tuple[T, ...]]):
    """An int count, then that many elements; a tuple in Python so commands stay hashable."""

    __slots__ = ("element",)

    def __init__(self, element: FieldCodec[T]) -> None:
        self.element = element

    def write(self, out: DataOutput, value: tuple[T, ...]) -> None:
        if not isinstance(value, tuple | list):
            raise PravegaEncodeError(f"expected a tuple, not {type(value).__name__}")
        out.write_int(len(value))
        for item in value:
            self.element.write(out, item)

    def read(self, inp: DataInput) -> tuple[T, ...]:
        count = inp.read_int()
        if count < 0:
            raise PravegaDecodeError(f"negative element count {count}")
        # No preallocation from the count: a lying count fails on its first missing element.
        return tuple(self.element.read(inp) for _ in range(count))


class Trailing(FieldCodec[T]):
    """A field appended to a command after its first release: read only when at least
    ``min_remaining`` bytes are left in the frame (the test Pravega's ``readFrom`` makes for that
    field), else ``default``. Always written, as Pravega's current version writes it."""

    __slots__ = ("inner", "default", "min_remaining")

    def __init__(self, inner: FieldCodec[T], default: T, min_remaining: int) -> None:
        self.inner = inner
        self.default = default
        self.min_remaining = min_remaining

    def write(self, out: DataOutput, value: T) -> None:
        self.inner.write(out, value)

    def read(self, inp: DataInput) -> T:
        if inp.remaining() >= self.min_remaining:
            return self.inner.read(inp)
        return self.default


E = TypeVar("E", bound=int)


class CodedEnum(FieldCodec[E]):
    """An int on the wire, an enum in Python; ``from_wire`` decides what an unknown code becomes."""

    __slots__ = ("from_wire",)

    def __init__(self, from_wire: Callable[[int], E]) -> None:
        self.from_wire = from_wire

    def write(self, out: DataOutput, value: E) -> None:
        out.write_int(int(value))

    def read(self, inp: DataInput) -> E:
        return self.from_wire(inp.read_int())


BYTE = _ByteCodec()
BOOL = _BoolCodec()
INT = _IntCodec()
LONG = _LongCodec()
UTF = _UtfCodec()
UUID = _UuidCodec()
SIZED_BYTES = _SizedBytesCodec()
REST_BYTES = _RestBytesCodec()

# The annotations fields are declared with: Python type first, wire codec second.
Byte: TypeAlias = Annotated[int, BYTE]
Bool: TypeAlias = Annotated[bool, BOOL]
Int: TypeAlias = Annotated[int, INT]
Long: TypeAlias = Annotated[int, LONG]
Utf: TypeAlias = Annotated[str, UTF]
Uuid: TypeAlias = Annotated[uuid.UUID, UUID]
SizedBytes: TypeAlias = Annotated[bytes, SIZED_BYTES]
RestBytes: TypeAlias = Annotated[bytes, REST_BYTES]
