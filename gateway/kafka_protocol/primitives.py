"""What the generated Kafka message modules (``messages/``) are built from: the struct base classes,
the codec's errors, and the readers and writers of Kafka's primitive types. No I/O.

Readers take ``(buf, pos, end)`` and return ``(value, new_pos)``; writers take the value and ``w``, a
function that collects output buffers (``list.append``), so large ``records`` are never copied.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias, TypeVar

__all__ = [
    "ApiInfo",
    "Buffer",
    "Decoder",
    "Encoder",
    "KafkaCodecError",
    "KafkaDecodeError",
    "KafkaEncodeError",
    "KafkaRequest",
    "KafkaResponse",
    "KafkaStruct",
    "UnsupportedApiError",
    "Writer",
]

#: What an encoder writes and what a ``bytes`` or ``records`` field may hold when encoding.
Buffer: TypeAlias = bytes | bytearray | memoryview
Writer: TypeAlias = Callable[[Buffer], None]
S = TypeVar("S", bound="KafkaStruct")
Decoder: TypeAlias = Callable[[memoryview, int, int], tuple[S, int]]
Encoder: TypeAlias = Callable[[S, Writer], None]


@dataclass(frozen=True, slots=True)
class ApiInfo:
    """One API from the specs: ``name`` without the Request/Response suffix; ``module`` is its
    generated module in ``messages/``."""

    api_key: int
    name: str
    module: str
    min_version: int
    max_version: int
    request_flexible_min: int | None  # first flexible request version, None if never
    response_flexible_min: int | None
    latest_version_unstable: bool
    listeners: tuple[str, ...]


class KafkaCodecError(Exception):
    """Base of the codec's errors; carries the api key/version when known."""

    def __init__(self, message: str, api_key: int | None = None, api_version: int | None = None) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version

    def __str__(self) -> str:
        msg = super().__str__()
        if self.api_key is None:
            return msg
        from millrace.gateway.kafka_protocol.messages import API_KEYS

        name = API_KEYS[self.api_key].name if self.api_key in API_KEYS else "?"
        return f"{msg} (api_key={self.api_key} {name}, version={self.api_version})"


class KafkaDecodeError(KafkaCodecError):
    """Input bytes are truncated, malformed or not decodable at the given version."""


class UnsupportedApiError(KafkaDecodeError):
    """The request names an api key or version that is not generated (not served by the gateway).

    Kafka answers an ApiVersionsRequest of a too-new version with an ApiVersionsResponse v0
    carrying UNSUPPORTED_VERSION, hence the correlation id (``None`` if the frame was too short).
    """

    def __init__(self, message: str, api_key: int, api_version: int, correlation_id: int | None) -> None:
        super().__init__(message, api_key, api_version)
        self.correlation_id = correlation_id


class KafkaEncodeError(KafkaCodecError):
    """An object cannot be encoded at the requested version (bad type, range, or field not in version)."""


class KafkaStruct:
    """Base of all generated message and struct classes.

    Tagged fields unknown to the spec are kept in ``_unknown_tagged_fields`` as ``[(tag, bytes)]``
    and written back on encode.
    """

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _unknown_tagged_fields: list[tuple[int, bytes]] | None

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, KafkaStruct)
        return all(getattr(self, f) == getattr(other, f) for f in self._fields) and (
            (self._unknown_tagged_fields or None) == (other._unknown_tagged_fields or None)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        body = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({body})"

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dicts/lists (for logging, JSON, tests)."""

        def conv(v: Any) -> Any:
            if isinstance(v, KafkaStruct):
                return v.to_dict()
            if isinstance(v, list):
                return [conv(x) for x in v]
            if isinstance(v, memoryview):
                return bytes(v)
            return v

        return {f: conv(getattr(self, f)) for f in self._fields}


class KafkaRequest(KafkaStruct):
    """Base of the generated request bodies."""

    __slots__ = ()
    API_KEY: ClassVar[int]


class KafkaResponse(KafkaStruct):
    """Base of the generated response bodies."""

    __slots__ = ()
    API_KEY: ClassVar[int]


# --------------------------------------------------------------------------------------------
# readers and writers used by the generated code

_new = object.__new__
_ZERO_UUID = uuid.UUID(int=0)
_UVB = [bytes([i]) for i in range(128)]
_UVB0 = b"\x00"
_NULL32 = b"\xff\xff\xff\xff"
_i8 = struct.Struct(">b")
_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_u_i8 = _i8.unpack_from
_u_i16 = _i16.unpack_from
_u_i32 = _i32.unpack_from
_p_i16 = _i16.pack
_p_i32 = _i32.pack
_pack = struct.pack


def _trunc(what: str = "value") -> KafkaDecodeError:
    return KafkaDecodeError(f"truncated input while reading {what}")


def _rd_uv(buf: memoryview, pos: int) -> tuple[int, int]:
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return b, pos
    result = b & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise KafkaDecodeError("unsigned varint longer than 5 bytes")


def _uv(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _UVB[n]
    if n < 0 or n > 0xFFFFFFFF:
        raise KafkaEncodeError(f"unsigned varint out of range: {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _span(buf: memoryview, pos: int, n: int, end: int, what: str) -> int:
    e = pos + n
    if e > end:
        raise _trunc(what)
    return e


def _rd_str(buf: memoryview, pos: int, end: int) -> tuple[str, int]:
    (n,) = _u_i16(buf, pos)
    pos += 2
    if n < 0:
        raise KafkaDecodeError("null or negative length for a non-nullable string")
    e = _span(buf, pos, n, end, "string")
    return str(buf[pos:e], "utf-8"), e


def _rd_nstr(buf: memoryview, pos: int, end: int) -> tuple[str | None, int]:
    (n,) = _u_i16(buf, pos)
    pos += 2
    if n < 0:
        if n == -1:
            return None, pos
        raise KafkaDecodeError(f"negative string length {n}")
    e = _span(buf, pos, n, end, "string")
    return str(buf[pos:e], "utf-8"), e


def _rd_cstr(buf: memoryview, pos: int, end: int) -> tuple[str, int]:
    n, pos = _rd_uv(buf, pos)
    if n == 0:
        raise KafkaDecodeError("null compact string for a non-nullable field")
    e = _span(buf, pos, n - 1, end, "compact string")
    return str(buf[pos:e], "utf-8"), e


def _rd_cnstr(buf: memoryview, pos: int, end: int) -> tuple[str | None, int]:
    n, pos = _rd_uv(buf, pos)
    if n == 0:
        return None, pos
    e = _span(buf, pos, n - 1, end, "compact string")
    return str(buf[pos:e], "utf-8"), e


def _rd_blen(buf: memoryview, pos: int, nullable: bool) -> tuple[int, int]:
    (n,) = _u_i32(buf, pos)
    if n < 0 and not (nullable and n == -1):
        raise KafkaDecodeError(f"invalid bytes length {n}")
    return n, pos + 4


def _rd_bytes(buf: memoryview, pos: int, end: int) -> tuple[bytes, int]:
    n, pos = _rd_blen(buf, pos, False)
    e = _span(buf, pos, n, end, "bytes")
    return bytes(buf[pos:e]), e


def _rd_nbytes(buf: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = _rd_blen(buf, pos, True)
    if n < 0:
        return None, pos
    e = _span(buf, pos, n, end, "bytes")
    return bytes(buf[pos:e]), e


def _rd_cbytes(buf: memoryview, pos: int, end: int) -> tuple[bytes, int]:
    n, pos = _rd_uv(buf, pos)
    if n == 0:
        raise KafkaDecodeError("null compact bytes for a non-nullable field")
    e = _span(buf, pos, n - 1, end, "compact bytes")
    return bytes(buf[pos:e]), e


def _rd_cnbytes(buf: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = _rd_uv(buf, pos)
    if n == 0:
        return None, pos
    e = _span(buf, pos, n - 1, end, "compact bytes")
    return bytes(buf[pos:e]), e


# records: zero-copy views of the frame
def _rd_mv(buf: memoryview, pos: int, end: int) -> tuple[memoryview, int]:
    n, pos = _rd_blen(buf, pos, False)
    e = _span(buf, pos, n, end, "records")
    return buf[pos:e], e


def _rd_nmv(buf: memoryview, pos: int, end: int) -> tuple[memoryview | None, int]:
    n, pos = _rd_blen(buf, pos, True)
    if n < 0:
        return None, pos
    e = _span(buf, pos, n, end, "records")
    return buf[pos:e], e


def _rd_cmv(buf: memoryview, pos: int, end: int) -> tuple[memoryview, int]:
    n, pos = _rd_uv(buf, pos)
    if n == 0:
        raise KafkaDecodeError("null compact records for a non-nullable field")
    e = _span(buf, pos, n - 1, end, "compact records")
    return buf[pos:e], e


def _rd_cnmv(buf: memoryview, pos: int, end: int) -> tuple[memoryview | None, int]:
    n, pos = _rd_uv(buf, pos)
    if n == 0:
        return None, pos
    e = _span(buf, pos, n - 1, end, "compact records")
    return buf[pos:e], e


def _rd_uuid(buf: memoryview, pos: int, end: int) -> tuple[uuid.UUID, int]:
    e = _span(buf, pos, 16, end, "uuid")
    return uuid.UUID(bytes=bytes(buf[pos:e])), e


def _rd_alen(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    (n,) = _u_i32(buf, pos)
    pos += 4
    if n < -1:
        raise KafkaDecodeError(f"invalid array length {n}")
    # every element takes at least one byte: refuse absurd counts before allocating
    if n > end - pos:
        raise KafkaDecodeError(f"array of {n} elements but only {end - pos} bytes remain")
    return n, pos


def _rd_calen(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    n, pos = _rd_uv(buf, pos)
    n -= 1
    if n > end - pos:
        raise KafkaDecodeError(f"array of {n} elements but only {end - pos} bytes remain")
    return n, pos


def _keep_unknown_tag(tags: list[tuple[int, bytes]] | None, tag: int, data: memoryview) -> list[tuple[int, bytes]]:
    if tags is None:
        return [(tag, bytes(data))]
    tags.append((tag, bytes(data)))
    return tags


def _rd_unknown_tags(buf: memoryview, pos: int, end: int) -> tuple[list[tuple[int, bytes]] | None, int]:
    """The tagged fields of a struct that knows none of them, all kept as unknown."""
    tags = None
    nt, pos = _rd_uv(buf, pos)
    for _ in range(nt):
        tag, pos = _rd_uv(buf, pos)
        sz, pos = _rd_uv(buf, pos)
        te = pos + sz
        if te > end:
            raise _trunc("tagged field")
        tags = _keep_unknown_tag(tags, tag, buf[pos:te])
        pos = te
    return tags, pos


def _null_array(name: str) -> KafkaDecodeError:
    return KafkaDecodeError(f"non-nullable array {name} was null")


def _unpack_array(code: str, size: int, buf: memoryview, pos: int, n: int, end: int) -> tuple[list[Any], int]:
    e = _span(buf, pos, n * size, end, "array")
    return list(struct.unpack_from(f">{n}{code}", buf, pos)), e


def _nbytes(b: Buffer) -> int:
    return b.nbytes if type(b) is memoryview else len(b)


def _utf8(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise KafkaEncodeError(f"string of {len(b)} bytes is too long")
    return b


def _w_nstr(s: str | None, w: Writer) -> None:
    if s is None:
        w(b"\xff\xff")
        return
    b = _utf8(s)
    w(_p_i16(len(b)))
    w(b)


def _w_cnstr(s: str | None, w: Writer) -> None:
    if s is None:
        w(b"\x00")
        return
    b = _utf8(s)
    w(_uv(len(b) + 1))
    w(b)


# A string is written the same whether or not its field is nullable; the generated encoders have
# already refused None where it is not allowed.
_w_str: Callable[[str, Writer], None] = _w_nstr
_w_cstr: Callable[[str, Writer], None] = _w_cnstr


def _w_bytes(b: Buffer, w: Writer) -> None:
    w(_p_i32(_nbytes(b)))
    w(b)


def _w_nbytes(b: Buffer | None, w: Writer) -> None:
    if b is None:
        w(b"\xff\xff\xff\xff")
    else:
        w(_p_i32(_nbytes(b)))
        w(b)


def _w_cbytes(b: Buffer, w: Writer) -> None:
    w(_uv(_nbytes(b) + 1))
    w(b)


def _w_cnbytes(b: Buffer | None, w: Writer) -> None:
    if b is None:
        w(b"\x00")
    else:
        w(_uv(_nbytes(b) + 1))
        w(b)


def _w_tagged(tags: list[tuple[int, bytes]], w: Writer) -> None:
    tags.sort(key=_first)
    prev = -1
    w(_uv(len(tags)))
    for tag, b in tags:
        if tag <= prev:
            raise KafkaEncodeError(f"duplicate tagged field {tag}")
        prev = tag
        w(_uv(tag))
        w(_uv(_nbytes(b)))
        w(b)


def _first(t: tuple[int, bytes]) -> int:
    return t[0]


# The version is left out so versions can share code; the codec's entry points add api key and version.
def _not_in_version(name: str) -> KafkaEncodeError:
    return KafkaEncodeError(f"field {name} has a non-default value but does not exist in this version")


def _null_value(name: str) -> KafkaEncodeError:
    return KafkaEncodeError(f"field {name} is None but is not nullable in this version")
