"""Kafka wire codec: frames in and out, dispatched to the generated message modules.

The request and response classes, and their per-version encoders and decoders, are generated from
Kafka's JSON specs into checked-in modules (``messages/``, see ``generate.py``): import a message's
classes from its module (``from millrace.gateway.kafka_protocol.messages.produce import
ProduceRequest``). This module frames them: ``decode_request``/``decode_response`` take one frame
*without* its 4-byte size prefix; the ``encode_*`` functions return the frame *with* the prefix
unless ``framed=False``. Decoding raises only ``KafkaDecodeError``; encoding only ``KafkaEncodeError``.
API modules are imported on first use.
"""

from __future__ import annotations

import importlib
import struct
from types import ModuleType
from typing import Any, TypeVar, overload

from millrace.gateway.kafka_protocol import messages
from millrace.gateway.kafka_protocol.messages import API_KEYS, SPEC_MODULES
from millrace.gateway.kafka_protocol.messages.request_header import REQUEST_HEADER_CODECS, RequestHeader
from millrace.gateway.kafka_protocol.messages.response_header import RESPONSE_HEADER_CODECS, ResponseHeader
from millrace.gateway.kafka_protocol.primitives import (
    ApiInfo,
    Buffer,
    Decoder,
    Encoder,
    KafkaCodecError,
    KafkaDecodeError,
    KafkaEncodeError,
    KafkaRequest,
    KafkaResponse,
    KafkaStruct,
    UnsupportedApiError,
    _nbytes,
    _p_i32,
)
from millrace.gateway.kafka_protocol.schema import snake_case

# The struct base classes and errors come from primitives and stay importable from here.
__all__ = [
    "API_KEYS",
    "RequestHeader",
    "ResponseHeader",
    "decode_message",
    "decode_request",
    "decode_response",
    "encode_message",
    "encode_request",
    "encode_response",
    "encode_response_parts",
    "message_class",
    "request_class",
    "response_class",
    "request_header_version",
    "response_header_version",
]

S = TypeVar("S", bound=KafkaStruct)
_Codecs = dict[int, tuple[Encoder[Any], Decoder[Any]]]

_API_VERSIONS_KEY = 18
_CONTROLLED_SHUTDOWN_KEY = 7
_S_hh = struct.Struct(">hh")
_u_i32 = struct.Struct(">i").unpack_from


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header version Kafka uses for an API version (2 = flexible, 0 = ControlledShutdown v0)."""
    if api_key == _CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    first = API_KEYS[api_key].request_flexible_min
    return 2 if first is not None and api_version >= first else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header version; ApiVersionsResponse always uses v0 so any client can parse it."""
    if api_key == _API_VERSIONS_KEY:
        return 0
    first = API_KEYS[api_key].response_flexible_min
    return 1 if first is not None and api_version >= first else 0


# --------------------------------------------------------------------------------------------
# generated modules, classes and version tables

_MODULES: dict[str, ModuleType] = {}


def _spec_module(name: str) -> ModuleType:
    mod = _MODULES.get(name)
    if mod is None:
        try:
            module_name = SPEC_MODULES[name]
        except KeyError:
            raise KafkaCodecError(f"no message spec named {name!r}") from None
        mod = _MODULES[name] = importlib.import_module(f"{messages.__name__}.{module_name}")
    return mod


def _api_info(api_key: int) -> ApiInfo:
    try:
        return API_KEYS[api_key]
    except KeyError:
        raise KafkaCodecError(f"unknown api key {api_key}") from None


def _codecs(name: str) -> _Codecs:
    """(encoder, decoder) by version of a spec by name."""
    table: _Codecs = getattr(_spec_module(name), snake_case(name).upper() + "_CODECS")
    return table


def message_class(name: str) -> type[KafkaStruct]:
    """The generated body class of a spec by name, e.g. ``message_class("ProduceRequest")``."""
    cls: type[KafkaStruct] = getattr(_spec_module(name), name)
    return cls


def request_class(api_key: int) -> type[KafkaRequest]:
    """Generated request body class of an api key."""
    name = _api_info(api_key).name + "Request"
    cls: type[KafkaRequest] = getattr(_spec_module(name), name)
    return cls


def response_class(api_key: int) -> type[KafkaResponse]:
    """Generated response body class of an api key."""
    name = _api_info(api_key).name + "Response"
    cls: type[KafkaResponse] = getattr(_spec_module(name), name)
    return cls


# Per api key, per version: (header codec function, body codec function), built on first use.
_Pairs = dict[int, tuple[Any, Any]]
_REQ_DECODERS: dict[int, _Pairs] = {}
_REQ_ENCODERS: dict[int, _Pairs] = {}
_RESP_DECODERS: dict[int, _Pairs] = {}
_RESP_ENCODERS: dict[int, _Pairs] = {}
_ENCODE, _DECODE = 0, 1


def _build(cache: dict[int, _Pairs], api_key: int, response: bool, which: int) -> _Pairs | None:
    """Fill ``cache[api_key]`` with the header and body encoders (``which=0``) or decoders (1) by version;
    None for an api key the specs do not know."""
    info = API_KEYS.get(api_key)
    if info is None:
        return None
    headers: _Codecs
    if response:
        headers, header_version, body = RESPONSE_HEADER_CODECS, response_header_version, info.name + "Response"
    else:
        headers, header_version, body = REQUEST_HEADER_CODECS, request_header_version, info.name + "Request"
    table = cache[api_key] = {
        v: (headers[header_version(api_key, v)][which], fns[which]) for v, fns in _codecs(body).items()
    }
    return table


def _pair(cache: dict[int, _Pairs], api_key: int, version: int, response: bool, which: int) -> tuple[Any, Any]:
    table = cache.get(api_key) or _build(cache, api_key, response, which)
    if table is None:
        raise KafkaCodecError(f"unknown api key {api_key}")
    try:
        return table[version]
    except KeyError:
        info = API_KEYS[api_key]
        raise KafkaCodecError(f"{info.name} has no version {version} "
                              f"(valid: {info.min_version}-{info.max_version})", api_key, version) from None


# --------------------------------------------------------------------------------------------
# public encode/decode

def _as_view(data: Buffer) -> memoryview:
    mv = data if type(data) is memoryview else memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def _encode(hdr_enc: Encoder[S], hdr: S, body_enc: Encoder[Any], body: KafkaStruct, framed: bool,
            api_key: int, version: int) -> list[Buffer]:
    parts: list[Buffer] = [b""]
    w = parts.append
    try:
        hdr_enc(hdr, w)
        body_enc(body, w)
    except KafkaEncodeError as e:
        e.api_key, e.api_version = api_key, version
        raise
    except Exception as e:  # bad attribute types/ranges surface as one error type
        raise KafkaEncodeError(f"cannot encode: {type(e).__name__}: {e}", api_key, version) from e
    if framed:
        parts[0] = _p_i32(sum(map(_nbytes, parts)))  # parts[0] is still empty here
    else:
        del parts[0]
    return parts


def encode_response_parts(api_key: int, version: int, correlation_id: int, response: KafkaStruct, *,
                          framed: bool = True) -> list[Buffer]:
    """The response as a list of buffers (``records`` fields are not copied), for writev-style output."""
    hdr_enc, body_enc = _pair(_RESP_ENCODERS, api_key, version, True, _ENCODE)
    hdr = ResponseHeader(correlation_id=correlation_id)
    return _encode(hdr_enc, hdr, body_enc, response, framed, api_key, version)


def encode_response(api_key: int, version: int, correlation_id: int, response: KafkaStruct, *,
                    framed: bool = True) -> bytes:
    """Encode header + response body; with the 4-byte size prefix unless ``framed=False``."""
    return b"".join(encode_response_parts(api_key, version, correlation_id, response, framed=framed))


def encode_request(
    api_key: int,
    version: int,
    correlation_id: int,
    request: KafkaStruct,
    *,
    client_id: str | None = None,
    framed: bool = True,
) -> bytes:
    """Encode header + request body; with the 4-byte size prefix unless ``framed=False``."""
    hdr_enc, body_enc = _pair(_REQ_ENCODERS, api_key, version, False, _ENCODE)
    hdr = RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id
    )
    return b"".join(_encode(hdr_enc, hdr, body_enc, request, framed, api_key, version))


def decode_request(frame: Buffer) -> tuple[RequestHeader, KafkaRequest]:
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
    table = _REQ_DECODERS.get(api_key) or _build(_REQ_DECODERS, api_key, False, _DECODE)
    decoders = table.get(version) if table is not None else None
    if decoders is None:
        cid = _u_i32(buf, 4)[0] if end >= 8 else None
        what = "api key" if table is None else "version"
        raise UnsupportedApiError(f"unsupported {what}", api_key, version, cid)
    try:
        hdr, pos = decoders[0](buf, 0, end)
        body, pos = decoders[1](buf, pos, end)
    except KafkaDecodeError as e:
        e.api_key, e.api_version = api_key, version
        raise
    except Exception as e:  # struct.error, IndexError, UnicodeDecodeError, ValueError, ...
        raise KafkaDecodeError(f"malformed request: {type(e).__name__}: {e}", api_key, version) from e
    return hdr, body


def decode_response(api_key: int, version: int, frame: Buffer) -> tuple[ResponseHeader, KafkaResponse]:
    """Decode one response frame (without its size prefix) into ``(ResponseHeader, body)``."""
    try:
        buf = _as_view(frame)
        end = len(buf)
        hdr_dec, body_dec = _pair(_RESP_DECODERS, api_key, version, True, _DECODE)
        hdr, pos = hdr_dec(buf, 0, end)
        body, pos = body_dec(buf, pos, end)
    except KafkaDecodeError as e:
        e.api_key, e.api_version = api_key, version
        raise
    except Exception as e:
        raise KafkaDecodeError(f"malformed response: {type(e).__name__}: {e}", api_key, version) from e
    return hdr, body


def _message_codecs(message: str | type[KafkaStruct], version: int) -> tuple[str, tuple[Encoder[Any], Decoder[Any]]]:
    name = message if isinstance(message, str) else message.__name__
    try:
        return name, _codecs(name)[version]
    except KeyError:
        raise KafkaCodecError(f"{name} has no version {version}") from None


def encode_message(message: str | type[KafkaStruct], version: int, obj: KafkaStruct) -> bytes:
    """Encode a bare struct of any spec (e.g. ConsumerProtocolAssignment) at ``version``, no header.

    Versioned data blobs such as the consumer protocol carry their int16 version in front;
    callers add it (``struct.pack('>h', version)``) as Kafka's ``MessageUtil`` does.
    """
    name, (enc, _) = _message_codecs(message, version)
    parts: list[Buffer] = []
    try:
        enc(obj, parts.append)
    except KafkaEncodeError as e:
        raise KafkaEncodeError(f"cannot encode {name} v{version}: {e}") from e
    except Exception as e:
        raise KafkaEncodeError(f"cannot encode {name} v{version}: {type(e).__name__}: {e}") from e
    return b"".join(parts)


@overload
def decode_message(message: type[S], version: int, data: Buffer) -> S: ...
@overload
def decode_message(message: str, version: int, data: Buffer) -> KafkaStruct: ...
def decode_message(message: str | type[KafkaStruct], version: int, data: Buffer) -> KafkaStruct:
    """Decode a bare struct of any spec at ``version`` (inverse of :func:`encode_message`)."""
    name, (_, dec) = _message_codecs(message, version)
    try:
        buf = _as_view(data)
        obj, _ = dec(buf, 0, len(buf))
    except KafkaDecodeError:
        raise
    except Exception as e:
        raise KafkaDecodeError(f"malformed {name} v{version}: {type(e).__name__}: {e}") from e
    return obj
