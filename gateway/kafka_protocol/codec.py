"""Kafka wire codec generated from the JSON message specs.

For every (message, version) the first use generates specialised Python source for the encoder
and decoder of each struct, compiles it once with ``exec`` (as franz-go or Kafka's own generator
do ahead of time) and caches the functions; identical per-version code is shared. Consecutive
fixed-width fields are read and written with one precompiled ``struct.Struct`` call.

Object model: every struct of a message (the body, inline structs, common structs) is a generated
class with ``__slots__`` and snake_case attributes (``ThrottleTimeMs`` -> ``throttle_time_ms``);
the body class is named after the spec (``ProduceRequest``) and carries the other struct classes
as attributes (``ProduceRequest.TopicProduceData``). Constructors take keyword arguments and fill
the spec defaults for the rest. Types: ints/bool/float as Python scalars, ``string`` as ``str``,
``bytes`` as ``bytes``, ``records`` as a zero-copy ``memoryview`` of the input frame (any
bytes-like object when encoding), ``uuid`` as ``uuid.UUID``, arrays as ``list``; nullable fields
use ``None``. Tagged fields unknown to the spec are kept in ``_unknown_tagged_fields`` as
``[(tag, bytes)]`` and written back on encode.

Framing: ``decode_request``/``decode_response`` take one frame *without* its 4-byte size prefix;
the ``encode_*`` functions return the frame *with* the prefix unless ``framed=False``.
"""

from __future__ import annotations

import struct
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from millrace.gateway.kafka_protocol.schema import FieldSpec, MessageSpec, StructSpec, load_specs

__all__ = [
    "API_KEYS",
    "ApiInfo",
    "KafkaCodecError",
    "KafkaDecodeError",
    "KafkaEncodeError",
    "KafkaStruct",
    "RequestHeader",
    "ResponseHeader",
    "UnsupportedApiError",
    "decode_message",
    "decode_request",
    "decode_response",
    "encode_message",
    "encode_request",
    "encode_response",
    "encode_response_parts",
    "message_class",
    "precompile",
    "request_class",
    "request_header_version",
    "response_class",
    "response_header_version",
]


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
        name = API_KEYS[self.api_key].name if self.api_key in API_KEYS else "?"
        return f"{msg} (api_key={self.api_key} {name}, version={self.api_version})"


class KafkaDecodeError(KafkaCodecError):
    """Input bytes are truncated, malformed or not decodable at the given version."""


class UnsupportedApiError(KafkaDecodeError):
    """The request names an api key or version absent from the specs.

    Kafka answers an ApiVersionsRequest of a too-new version with an ApiVersionsResponse v0
    carrying UNSUPPORTED_VERSION, hence the correlation id (``None`` if the frame was too short).
    """

    def __init__(self, message: str, api_key: int, api_version: int, correlation_id: int | None) -> None:
        super().__init__(message, api_key, api_version)
        self.correlation_id = correlation_id


class KafkaEncodeError(KafkaCodecError):
    """An object cannot be encoded at the requested version (bad type, range, or field not in version)."""


class KafkaStruct:
    """Base of all generated message/struct classes."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _spec: StructSpec

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._fields) and (
            (self._unknown_tagged_fields or None) == (other._unknown_tagged_fields or None)  # type: ignore[attr-defined]
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


# --------------------------------------------------------------------------------------------
# runtime helpers shared by the generated code

_FIXED: dict[str, tuple[str, int]] = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
    "bool": ("?", 1),
}
_ZERO_UUID = uuid.UUID(int=0)
_UVB = [bytes([i]) for i in range(128)]
_i8 = struct.Struct(">b")
_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_u_i16 = _i16.unpack_from
_u_i32 = _i32.unpack_from
_p_i16 = _i16.pack
_p_i32 = _i32.pack


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


def _null_array(name: str) -> KafkaDecodeError:
    return KafkaDecodeError(f"non-nullable array {name} was null")


def _unpack_array(code: str, size: int, buf: memoryview, pos: int, n: int, end: int) -> tuple[list, int]:
    e = _span(buf, pos, n * size, end, "array")
    return list(struct.unpack_from(f">{n}{code}", buf, pos)), e


def _nbytes(b: Any) -> int:
    return b.nbytes if type(b) is memoryview else len(b)


def _w_str(s: str, w: Callable[[Any], None]) -> None:
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise KafkaEncodeError(f"string of {len(b)} bytes is too long")
    w(_p_i16(len(b)))
    w(b)


def _w_nstr(s: str | None, w: Callable[[Any], None]) -> None:
    if s is None:
        w(b"\xff\xff")
    else:
        _w_str(s, w)


def _w_cstr(s: str, w: Callable[[Any], None]) -> None:
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise KafkaEncodeError(f"string of {len(b)} bytes is too long")
    w(_uv(len(b) + 1))
    w(b)


def _w_cnstr(s: str | None, w: Callable[[Any], None]) -> None:
    if s is None:
        w(b"\x00")
    else:
        _w_cstr(s, w)


def _w_bytes(b: Any, w: Callable[[Any], None]) -> None:
    w(_p_i32(_nbytes(b)))
    w(b)


def _w_nbytes(b: Any, w: Callable[[Any], None]) -> None:
    if b is None:
        w(b"\xff\xff\xff\xff")
    else:
        w(_p_i32(_nbytes(b)))
        w(b)


def _w_cbytes(b: Any, w: Callable[[Any], None]) -> None:
    w(_uv(_nbytes(b) + 1))
    w(b)


def _w_cnbytes(b: Any, w: Callable[[Any], None]) -> None:
    if b is None:
        w(b"\x00")
    else:
        w(_uv(_nbytes(b) + 1))
        w(b)


def _w_tagged(tags: list[tuple[int, bytes]], w: Callable[[Any], None]) -> None:
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


def _first(t: tuple) -> Any:
    return t[0]


def _not_in_version(name: str, version: int) -> KafkaEncodeError:
    return KafkaEncodeError(f"field {name} has a non-default value but does not exist in version {version}")


# --------------------------------------------------------------------------------------------
# code generation

_NS: dict[str, Any] = {
    "_new": object.__new__,
    "_UUID": uuid.UUID,
    "_ZERO_UUID": _ZERO_UUID,
    "KafkaDecodeError": KafkaDecodeError,
    "_trunc": _trunc,
    "_rd_uv": _rd_uv,
    "_uv": _uv,
    "_rd_uuid": _rd_uuid,
    "_rd_alen": _rd_alen,
    "_rd_calen": _rd_calen,
    "_null_array": _null_array,
    "_unpack_array": _unpack_array,
    "_pack": struct.pack,
    "_w_tagged": _w_tagged,
    "_not_in_version": _not_in_version,
    "_u_i8": _i8.unpack_from,
}
for _fn in (
    _rd_str, _rd_nstr, _rd_cstr, _rd_cnstr, _rd_bytes, _rd_nbytes, _rd_cbytes, _rd_cnbytes,
    _rd_mv, _rd_nmv, _rd_cmv, _rd_cnmv,
    _w_str, _w_nstr, _w_cstr, _w_cnstr, _w_bytes, _w_nbytes, _w_cbytes, _w_cnbytes,
):  # fmt: skip
    _NS[_fn.__name__] = _fn

_compiled: dict[str, str] = {}  # generated source body -> function name in _NS
_lock = threading.RLock()


def _struct_obj(fmt: str) -> str:
    """Name in the generated namespace of a precompiled big-endian Struct for ``fmt``."""
    name = "_S_" + fmt.replace("?", "o")
    if name not in _NS:
        _NS[name] = struct.Struct(">" + fmt)
    return name


def _compile(kind: str, body_lines: list[str]) -> str:
    """Compile one generated function (deduplicated by its text) and return its name."""
    body = "\n".join(body_lines)
    name = _compiled.get(body)
    if name is None:
        name = f"_{kind}{len(_compiled)}"
        src = body.replace("__FN__", name, 1)
        code = compile(src, f"<kafka-codec {name}>", "exec")
        exec(code, _NS)
        _compiled[body] = name
    return name


def _default_literal(f: FieldSpec, cls_name: str | None) -> str:
    """Python expression for the field's default (a fresh object for mutable values)."""
    d = f.default
    if f.is_array:
        return "None" if d == "null" else "[]"
    if f.is_struct:
        return "None" if d == "null" else f"{cls_name}()"
    t = f.type
    if d == "null":
        return "None"
    if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return str(int(d, 0)) if d else "0"
    if t == "float64":
        return repr(float(d)) if d else "0.0"
    if t == "bool":
        return "True" if (d or "false").lower() == "true" else "False"
    if t == "string":
        return repr(d or "")
    if t == "bytes":
        return 'b""'
    if t == "records":
        return "None"
    if t == "uuid":
        return "_ZERO_UUID"
    raise AssertionError(t)


class _MessageCodegen:
    """Generates classes and per-version codecs for one spec file."""

    def __init__(self, spec: MessageSpec) -> None:
        self.spec = spec
        self.prefix = f"_C_{spec.name}_"
        self.classes: dict[str, type] = {}
        self._make_classes()

    # classes --------------------------------------------------------------------------------
    def cls_ref(self, s: StructSpec) -> str:
        return self.prefix + s.name

    def _make_classes(self) -> None:
        structs = [self.spec.struct, *self.spec.structs.values()]
        for s in structs:
            attrs = [f.attr for f in s.fields]
            params = []
            assigns = []
            for f in s.fields:
                dflt = _default_literal(f, self.cls_ref(f.struct) if f.struct else None)
                if dflt in ("[]",) or dflt.endswith("()"):
                    params.append(f"{f.attr}=None")
                    assigns.append(f"    self.{f.attr} = {dflt} if {f.attr} is None else {f.attr}")
                else:
                    params.append(f"{f.attr}={dflt}")
                    assigns.append(f"    self.{f.attr} = {f.attr}")
            params.append("_unknown_tagged_fields=None")
            assigns.append("    self._unknown_tagged_fields = _unknown_tagged_fields")
            src = "\n".join([f"def __init__(self, *, {', '.join(params)}):", *assigns])
            ns: dict[str, Any] = {}
            # class references in defaults resolve through _NS at call time
            exec(compile(src, f"<kafka-codec {self.spec.name}.{s.name}.__init__>", "exec"), _NS, ns)
            cls = type(
                s.name,
                (KafkaStruct,),
                {
                    "__slots__": (*attrs, "_unknown_tagged_fields"),
                    "_fields": tuple(attrs),
                    "_spec": s,
                    "__init__": ns["__init__"],
                    "__module__": __name__,
                    "__qualname__": s.name if s is self.spec.struct else f"{self.spec.name}.{s.name}",
                    "__doc__": f"Kafka {self.spec.name} struct {s.name} (generated from the spec).",
                },
            )
            self.classes[s.name] = cls
            _NS[self.cls_ref(s)] = cls
        body = self.classes[self.spec.struct.name]
        for name, cls in self.classes.items():
            if cls is not body:
                setattr(body, name, cls)

    # helpers ---------------------------------------------------------------------------------
    def _flex(self, f: FieldSpec, version: int, flex: bool) -> bool:
        return version in f.flexible_versions if f.flexible_versions is not None else flex

    # decoding --------------------------------------------------------------------------------
    def _read_value(self, f: FieldSpec, version: int, flex: bool, target: str, end: str, ind: str, out: list[str], elem: bool = False) -> None:
        """Lines that read one value of ``f`` (or one array element if ``elem``) into ``target``."""
        t = f.elem_type
        fflex = self._flex(f, version, flex)
        nullable = version in f.nullable_versions and not elem
        if not elem and f.is_array:
            out.append(f"{ind}n, pos = {'_rd_calen' if fflex else '_rd_alen'}(buf, pos, {end})")
            out.append(f"{ind}if n < 0:")
            out.append(f"{ind}    {target} = None" if nullable else f"{ind}    raise _null_array({f.name!r})")
            out.append(f"{ind}else:")
            if t in _FIXED:
                code, size = _FIXED[t]
                out.append(f"{ind}    {target}, pos = _unpack_array({code!r}, {size}, buf, pos, n, {end})")
            else:
                out.append(f"{ind}    {target} = L = []")
                out.append(f"{ind}    a = L.append")
                out.append(f"{ind}    for _ in range(n):")
                self._read_value(f, version, flex, "x", end, ind + "        ", out, elem=True)
                out.append(f"{ind}        a(x)")
            return
        if f.struct is not None:
            fn = self.decoder(f.struct, version)
            if nullable:
                out.append(f"{ind}if _u_i8(buf, pos)[0] < 0:")
                out.append(f"{ind}    {target} = None")
                out.append(f"{ind}    pos += 1")
                out.append(f"{ind}else:")
                out.append(f"{ind}    {target}, pos = {fn}(buf, pos + 1, {end})")
            else:
                out.append(f"{ind}{target}, pos = {fn}(buf, pos, {end})")
            return
        if t in _FIXED:
            code, size = _FIXED[t]
            out.append(f"{ind}if pos + {size} > {end}: raise _trunc({f.name!r})")
            out.append(f"{ind}{target}, = {_struct_obj(code)}.unpack_from(buf, pos)")
            out.append(f"{ind}pos += {size}")
            return
        if t == "uuid":
            out.append(f"{ind}{target}, pos = _rd_uuid(buf, pos, {end})")
            return
        base = {"string": "str", "bytes": "bytes", "records": "mv"}[t]
        fn = "_rd_" + ("c" if fflex else "") + ("n" if nullable else "") + base
        out.append(f"{ind}{target}, pos = {fn}(buf, pos, {end})")

    def decoder(self, s: StructSpec, version: int) -> str:
        flex = version in self.spec.flexible_versions
        out = ["def __FN__(buf, pos, end):", f"    o = _new({self.cls_ref(s)})"]
        tagged: list[FieldSpec] = []
        run: list[FieldSpec] = []

        def flush() -> None:
            if not run:
                return
            fmt = "".join(_FIXED[f.type][0] for f in run)
            size = struct.calcsize(">" + fmt)
            targets = ", ".join(f"o.{f.attr}" for f in run)
            out.append(f"    {targets}, = {_struct_obj(fmt)}.unpack_from(buf, pos)")
            out.append(f"    pos += {size}")
            run.clear()

        for f in s.fields:
            if version not in f.versions or (f.tag is not None and (not flex or version not in f.tagged_versions)):
                flush()
                out.append(f"    o.{f.attr} = {_default_literal(f, self.cls_ref(f.struct) if f.struct else None)}")
                continue
            if f.tag is not None:
                tagged.append(f)
                out.append(f"    o.{f.attr} = {_default_literal(f, self.cls_ref(f.struct) if f.struct else None)}")
                continue
            if f.type in _FIXED:
                run.append(f)
                continue
            flush()
            self._read_value(f, version, flex, f"o.{f.attr}", "end", "    ", out)
        flush()
        out.append("    o._unknown_tagged_fields = None")
        if flex:
            out.append("    nt, pos = _rd_uv(buf, pos)")
            out.append("    for _ in range(nt):")
            out.append("        tag, pos = _rd_uv(buf, pos)")
            out.append("        sz, pos = _rd_uv(buf, pos)")
            out.append("        te = pos + sz")
            out.append("        if te > end: raise _trunc('tagged field')")
            kw = "if"
            for f in sorted(tagged, key=lambda f: f.tag):
                out.append(f"        {kw} tag == {f.tag}:")
                self._read_value(f, version, flex, f"o.{f.attr}", "te", "            ", out)
                kw = "elif"
            out.append("        " + ("else:" if tagged else "if True:"))
            out.append("            if o._unknown_tagged_fields is None: o._unknown_tagged_fields = []")
            out.append("            o._unknown_tagged_fields.append((tag, bytes(buf[pos:te])))")
            out.append("        pos = te")
        out.append("    return o, pos")
        return _compile("d", out)

    # encoding --------------------------------------------------------------------------------
    def _write_value(self, f: FieldSpec, version: int, flex: bool, expr: str, ind: str, out: list[str], elem: bool = False) -> None:
        t = f.elem_type
        fflex = self._flex(f, version, flex)
        nullable = version in f.nullable_versions and not elem
        if not elem and f.is_array:
            out.append(f"{ind}v = {expr}")
            if nullable:
                out.append(f"{ind}if v is None:")
                out.append(f"{ind}    w({'_UVB0' if fflex else '_NULL32'})")
                out.append(f"{ind}else:")
                ind += "    "
            out.append(f"{ind}w({'_uv(len(v) + 1)' if fflex else '_p_i32(len(v))'})")
            if t in _FIXED:
                out.append(f"{ind}w(_pack('>%d{_FIXED[t][0]}' % len(v), *v))")
            else:
                out.append(f"{ind}for x in v:")
                self._write_value(f, version, flex, "x", ind + "    ", out, elem=True)
            return
        if f.struct is not None:
            fn = self.encoder(f.struct, version)
            if nullable:
                out.append(f"{ind}if {expr} is None:")
                out.append(f"{ind}    w(b'\\xff')")
                out.append(f"{ind}else:")
                out.append(f"{ind}    w(b'\\x01')")
                out.append(f"{ind}    {fn}({expr}, w)")
            else:
                out.append(f"{ind}{fn}({expr}, w)")
            return
        if t in _FIXED:
            out.append(f"{ind}w({_struct_obj(_FIXED[t][0])}.pack({expr}))")
            return
        if t == "uuid":
            out.append(f"{ind}w({expr}.bytes)")
            return
        base = {"string": "str", "bytes": "bytes", "records": "bytes"}[t]
        fn = "_w_" + ("c" if fflex else "") + ("n" if nullable else "") + base
        out.append(f"{ind}{fn}({expr}, w)")

    def _is_default_expr(self, f: FieldSpec, expr: str) -> str:
        d = _default_literal(f, self.cls_ref(f.struct) if f.struct else None)
        if d == "[]":
            return f"not {expr}"
        if d == "None":
            return f"{expr} is None"
        return f"{expr} == {d}"

    def encoder(self, s: StructSpec, version: int) -> str:
        flex = version in self.spec.flexible_versions
        out = ["def __FN__(o, w):"]
        tagged: list[FieldSpec] = []
        run: list[FieldSpec] = []

        def flush() -> None:
            if not run:
                return
            fmt = "".join(_FIXED[f.type][0] for f in run)
            args = ", ".join(f"o.{f.attr}" for f in run)
            out.append(f"    w({_struct_obj(fmt)}.pack({args}))")
            run.clear()

        for f in s.fields:
            present = version in f.versions
            if present and f.tag is not None and (not flex or version not in f.tagged_versions):
                present = False
            if not present:
                if not f.ignorable:
                    flush()
                    out.append(f"    if not ({self._is_default_expr(f, 'o.' + f.attr)}):")
                    out.append(f"        raise _not_in_version({f.name!r}, {version})")
                continue
            if f.tag is not None:
                tagged.append(f)
                continue
            if f.type in _FIXED:
                run.append(f)
                continue
            flush()
            self._write_value(f, version, flex, "o." + f.attr, "    ", out)
        flush()
        if flex:
            if not tagged:
                out.append("    u = o._unknown_tagged_fields")
                out.append("    if u:")
                out.append("        _w_tagged(list(u), w)")
                out.append("    else:")
                out.append("        w(_UVB0)")
            else:
                out.append("    tg = list(o._unknown_tagged_fields or ())")
                for f in sorted(tagged, key=lambda f: f.tag):
                    out.append(f"    if not ({self._is_default_expr(f, 'o.' + f.attr)}):")
                    out.append("        b = []")
                    out.append("        w0, w = w, b.append")
                    self._write_value(f, version, flex, "o." + f.attr, "        ", out)
                    out.append("        w = w0")
                    out.append(f"        tg.append(({f.tag}, b''.join(b)))")
                out.append("    if tg:")
                out.append("        _w_tagged(tg, w)")
                out.append("    else:")
                out.append("        w(_UVB0)")
        if len(out) == 1:
            out.append("    pass")
        return _compile("e", out)


_NS.update({"_UVB0": b"\x00", "_NULL32": b"\xff\xff\xff\xff", "_p_i32": _p_i32})


# --------------------------------------------------------------------------------------------
# registry

@dataclass(frozen=True, slots=True)
class ApiInfo:
    """One API from the specs: ``name`` without the Request/Response suffix."""

    api_key: int
    name: str
    min_version: int
    max_version: int
    request_flexible_min: int | None  # first flexible request version, None if never
    latest_version_unstable: bool
    listeners: tuple[str, ...]


_SPECS = load_specs()
_GENS: dict[str, _MessageCodegen] = {}
_CODECS: dict[tuple[str, int], tuple[Callable, Callable]] = {}


def _gen(name: str) -> _MessageCodegen:
    g = _GENS.get(name)
    if g is None:
        with _lock:
            g = _GENS.get(name)
            if g is None:
                try:
                    spec = _SPECS[name]
                except KeyError:
                    raise KafkaCodecError(f"no message spec named {name!r}") from None
                g = _GENS[name] = _MessageCodegen(spec)
    return g


def _codec(name: str, version: int) -> tuple[Callable, Callable]:
    """(encoder, decoder) of a message body at a version, generated on first use."""
    c = _CODECS.get((name, version))
    if c is None:
        g = _gen(name)
        if version not in g.spec.valid_versions:
            raise KafkaCodecError(f"{name} has no version {version} (valid: {g.spec.valid_versions})")
        with _lock:
            c = _CODECS.get((name, version))
            if c is None:
                s = g.spec.struct
                c = _CODECS[(name, version)] = (_NS[g.encoder(s, version)], _NS[g.decoder(s, version)])
    return c


def _first_flexible(spec: MessageSpec) -> int | None:
    fv = spec.flexible_versions
    return None if fv.empty else fv.lo


API_KEYS: dict[int, ApiInfo] = {}
_REQ_NAMES: dict[int, str] = {}
_RESP_NAMES: dict[int, str] = {}
for _s in _SPECS.values():
    if _s.kind == "request" and _s.api_key is not None:
        _REQ_NAMES[_s.api_key] = _s.name
        API_KEYS[_s.api_key] = ApiInfo(
            api_key=_s.api_key,
            name=_s.name.removesuffix("Request"),
            min_version=_s.valid_versions.lo,
            max_version=_s.valid_versions.hi,
            request_flexible_min=_first_flexible(_s),
            latest_version_unstable=_s.latest_version_unstable,
            listeners=_s.listeners,
        )
    elif _s.kind == "response" and _s.api_key is not None:
        _RESP_NAMES[_s.api_key] = _s.name
API_KEYS = dict(sorted(API_KEYS.items()))

_API_VERSIONS_KEY = 18
_CONTROLLED_SHUTDOWN_KEY = 7


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header version Kafka uses for an API version (2 = flexible, 0 = ControlledShutdown v0)."""
    if api_key == _CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 2 if api_version in _SPECS[_REQ_NAMES[api_key]].flexible_versions else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header version; ApiVersionsResponse always uses v0 so any client can parse it."""
    if api_key == _API_VERSIONS_KEY:
        return 0
    return 1 if api_version in _SPECS[_RESP_NAMES[api_key]].flexible_versions else 0


def message_class(name: str) -> type[KafkaStruct]:
    """The generated body class of a spec by name, e.g. ``message_class("ProduceRequest")``."""
    g = _gen(name)
    return g.classes[g.spec.struct.name]


def _api_name(table: dict[int, str], api_key: int) -> str:
    try:
        return table[api_key]
    except KeyError:
        raise KafkaCodecError(f"unknown api key {api_key}") from None


def request_class(api_key: int) -> type[KafkaStruct]:
    """Generated request body class of an api key."""
    return message_class(_api_name(_REQ_NAMES, api_key))


def response_class(api_key: int) -> type[KafkaStruct]:
    """Generated response body class of an api key."""
    return message_class(_api_name(_RESP_NAMES, api_key))


RequestHeader = message_class("RequestHeader")
ResponseHeader = message_class("ResponseHeader")


def precompile(api_keys: list[int] | None = None) -> None:
    """Generate every codec up front (e.g. at gateway start) so no request pays for it."""
    for key in api_keys if api_keys is not None else list(API_KEYS):
        info = API_KEYS[key]
        for v in range(info.min_version, info.max_version + 1):
            _codec(_REQ_NAMES[key], v)
            _codec(_RESP_NAMES[key], v)
            _codec("RequestHeader", request_header_version(key, v))
            _codec("ResponseHeader", response_header_version(key, v))


# --------------------------------------------------------------------------------------------
# public encode/decode

def _as_view(data: Any) -> memoryview:
    mv = data if type(data) is memoryview else memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def _encode_parts(parts: list, framed: bool) -> list:
    if framed:
        parts[0] = _p_i32(sum(map(_nbytes, parts)))  # parts[0] is still empty here
    else:
        del parts[0]
    return parts


def _encode(codecs: list[tuple[Callable, Any]], framed: bool, api_key: int, version: int) -> list:
    parts: list = [b""]
    w = parts.append
    try:
        for enc, obj in codecs:
            enc(obj, w)
    except KafkaEncodeError as e:
        e.api_key, e.api_version = api_key, version
        raise
    except Exception as e:  # bad attribute types/ranges surface as one error type
        raise KafkaEncodeError(f"cannot encode: {type(e).__name__}: {e}", api_key, version) from e
    return _encode_parts(parts, framed)


def encode_response_parts(api_key: int, version: int, correlation_id: int, response: Any, *, framed: bool = True) -> list:
    """The response as a list of buffers (``records`` fields are not copied), for writev-style output."""
    hdr_enc = _codec("ResponseHeader", response_header_version(api_key, version))[0]
    body_enc = _codec(_api_name(_RESP_NAMES, api_key), version)[0]
    hdr = ResponseHeader(correlation_id=correlation_id)
    return _encode([(hdr_enc, hdr), (body_enc, response)], framed, api_key, version)


def encode_response(api_key: int, version: int, correlation_id: int, response: Any, *, framed: bool = True) -> bytes:
    """Encode header + response body; with the 4-byte size prefix unless ``framed=False``."""
    return b"".join(encode_response_parts(api_key, version, correlation_id, response, framed=framed))


def encode_request(
    api_key: int,
    version: int,
    correlation_id: int,
    request: Any,
    *,
    client_id: str | None = None,
    framed: bool = True,
) -> bytes:
    """Encode header + request body; with the 4-byte size prefix unless ``framed=False``."""
    hdr_v = request_header_version(api_key, version)
    hdr = RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id
    )
    hdr_enc = _codec("RequestHeader", hdr_v)[0]
    body_enc = _codec(_api_name(_REQ_NAMES, api_key), version)[0]
    return b"".join(_encode([(hdr_enc, hdr), (body_enc, request)], framed, api_key, version))


def decode_request(frame: Any) -> tuple[Any, Any]:
    """Decode one request frame (without its size prefix) into ``(RequestHeader, body)``.

    Raises :class:`KafkaDecodeError` (:class:`UnsupportedApiError` for unknown keys/versions) and
    nothing else, whatever the input. Bytes after the body are ignored, as Kafka does.
    """
    try:
        buf = _as_view(frame)
    except Exception as e:
        raise KafkaDecodeError(f"not a bytes-like frame: {type(frame).__name__}") from e
    end = len(buf)
    if end < 4:
        raise KafkaDecodeError(f"request frame of {end} bytes is shorter than the header")
    api_key, version = _S_hh.unpack_from(buf, 0)
    name = _REQ_NAMES.get(api_key)
    if name is None or version not in _SPECS[name].valid_versions:
        cid = _u_i32(buf, 4)[0] if end >= 8 else None
        what = "api key" if name is None else "version"
        raise UnsupportedApiError(f"unsupported {what}", api_key, version, cid)
    try:
        hdr_dec = _codec("RequestHeader", request_header_version(api_key, version))[1]
        body_dec = _codec(name, version)[1]
        hdr, pos = hdr_dec(buf, 0, end)
        body, pos = body_dec(buf, pos, end)
    except KafkaDecodeError as e:
        e.api_key, e.api_version = api_key, version
        raise
    except Exception as e:  # struct.error, IndexError, UnicodeDecodeError, ValueError, ...
        raise KafkaDecodeError(f"malformed request: {type(e).__name__}: {e}", api_key, version) from e
    return hdr, body


def decode_response(api_key: int, version: int, frame: Any) -> tuple[Any, Any]:
    """Decode one response frame (without its size prefix) into ``(ResponseHeader, body)``."""
    try:
        buf = _as_view(frame)
        end = len(buf)
        hdr_dec = _codec("ResponseHeader", response_header_version(api_key, version))[1]
        body_dec = _codec(_api_name(_RESP_NAMES, api_key), version)[1]
        hdr, pos = hdr_dec(buf, 0, end)
        body, pos = body_dec(buf, pos, end)
    except KafkaDecodeError as e:
        e.api_key, e.api_version = api_key, version
        raise
    except Exception as e:
        raise KafkaDecodeError(f"malformed response: {type(e).__name__}: {e}", api_key, version) from e
    return hdr, body


def encode_message(name: str, version: int, obj: Any) -> bytes:
    """Encode a bare struct of any spec (e.g. ConsumerProtocolAssignment) at ``version``, no header.

    Versioned data blobs such as the consumer protocol carry their int16 version in front;
    callers add it (``struct.pack('>h', version)``) as Kafka's ``MessageUtil`` does.
    """
    parts: list = []
    try:
        _codec(name, version)[0](obj, parts.append)
    except KafkaEncodeError:
        raise
    except Exception as e:
        raise KafkaEncodeError(f"cannot encode {name} v{version}: {type(e).__name__}: {e}") from e
    return b"".join(parts)


def decode_message(name: str, version: int, data: Any) -> Any:
    """Decode a bare struct of any spec at ``version`` (inverse of :func:`encode_message`)."""
    try:
        buf = _as_view(data)
        obj, _ = _codec(name, version)[1](buf, 0, len(buf))
    except KafkaDecodeError:
        raise
    except Exception as e:
        raise KafkaDecodeError(f"malformed {name} v{version}: {type(e).__name__}: {e}") from e
    return obj


_S_hh = struct.Struct(">hh")
