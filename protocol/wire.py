"""Native protocol framing (pure, no I/O), shared by the server and the Python client.

A frame is a 4-byte big-endian length followed by the body. A request body is
``command:u8 request_id:u64 header_len:u32 header(JSON) payload``; a response body is
``status:u8 request_id:u64 header_len:u32 header(JSON) payload``. Payloads carry segment bytes
untouched, so appends and reads move data without re-encoding. Requests on a connection may be
pipelined; responses carry the request id and may complete out of order across segments.

What each command's header holds (and each reply's) is typed in ``protocol.messages``: one frozen
dataclass per request, checked field by field when a header is decoded.
"""

from __future__ import annotations

import enum
import json
import struct

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 32 * 1024 * 1024

_BODY = struct.Struct(">BQI")
_LEN = struct.Struct(">I")


class Command(enum.IntEnum):
    HELLO = 1
    CREATE_SEGMENT = 2
    APPEND = 3
    READ = 4
    GET_INFO = 5
    SEAL = 6
    TRUNCATE = 7
    DELETE = 8
    MERGE = 9
    UPDATE_ATTRIBUTES = 10
    LIST_SEGMENTS = 11
    # Where a segment is served (Pravega's getURI): {"container", "node", "native"}; node and native are
    # null from a single server (this server) and while a cluster container has no live owner.
    GET_SEGMENT_OWNER = 12
    # A segment's ingest rates per window (store.containers.rates.SegmentRates as JSON): how a cluster
    # node's auto-scaler and stream views see segments other nodes' containers hold.
    SEGMENT_RATES = 13
    # controller
    CREATE_SCOPE = 20
    DELETE_SCOPE = 21
    LIST_SCOPES = 22
    CREATE_STREAM = 23
    DESCRIBE_STREAM = 24
    LIST_STREAMS = 25
    GET_SEGMENT_FOR_KEY = 26
    SEAL_STREAM = 27
    DELETE_STREAM = 28
    TRUNCATE_STREAM = 29
    SPLIT_SEGMENT = 30
    MERGE_SEGMENTS = 31
    UPDATE_STREAM = 32
    # A subscriber reader group's retention cut of a stream (None: no longer a subscriber), and the
    # cuts of a stream's subscribers (store/controller/subscribers.py)
    UPDATE_SUBSCRIBER_CUT = 33
    LIST_SUBSCRIBER_CUTS = 34
    # key-value tables (protocol/tables.py encodes their payloads)
    CREATE_KV_TABLE = 40
    DELETE_KV_TABLE = 41
    LIST_KV_TABLES = 42
    GET_KV_TABLE = 43
    KV_PUT = 44
    KV_REMOVE = 45
    KV_GET = 46
    KV_ITERATE = 47
    KV_UPDATE = 48  # puts and removals of one table segment in one atomic batch
    # event writers (protocol/events.py encodes the batches)
    OPEN_WRITER = 50
    APPEND_EVENTS = 51
    READ_EVENTS = 52  # the committed events of one segment from a position (gateway/native/event_commands.py)
    WRITER_ROUTING = 53  # a stream's partition slices, retired partitions and open segments, for a writer
    # transactions of native writers: 60-69 (gateway/native/txn_commands.py)
    BEGIN_TXN = 60
    APPEND_TXN_EVENTS = 61
    END_TXN = 62
    TXN_STATUS = 63
    PING_TXN = 64
    FORGET_TXN_WRITER = 65  # node to node: a committed transaction's merge writer, forgotten by a leader
    # authentication (gateway/native/security.py): SASL, as Kafka's SaslHandshake and SaslAuthenticate
    AUTH_HANDSHAKE = 70  # choose a mechanism: {"mechanism"} -> the listener's enabled mechanisms
    AUTHENTICATE = 71  # one SASL message in the payload -> the server's answer in the payload


class Status(enum.IntEnum):
    OK = 0
    SEGMENT_NOT_FOUND = 1
    SEGMENT_EXISTS = 2
    SEGMENT_SEALED = 3
    BAD_OFFSET = 4
    BAD_ATTRIBUTE_UPDATE = 5
    OFFSET_OUT_OF_RANGE = 6
    SEGMENT_TRUNCATED = 7
    CONTAINER_OFFLINE = 8
    INVALID_REQUEST = 9
    UNKNOWN_COMMAND = 10
    INTERNAL_ERROR = 11
    RETRIABLE = 12
    WRITER_FENCED = 13
    EVENTS_REFUSED = 14
    # This node does not serve the segment (a cluster node whose container runs elsewhere, Pravega's
    # WrongHost): the header names the ``segment``; ask GET_SEGMENT_OWNER and send it there.
    WRONG_HOST = 15
    # The command would break the format of the stream that owns the segment (a raw append to a Kafka
    # topic, a seal of a table's segment...): ``streams/segment_gate.py`` names the rule.
    FORMAT_VIOLATION = 16
    SCOPE_NOT_FOUND = 20
    SCOPE_NOT_EMPTY = 21
    STREAM_NOT_FOUND = 22
    STREAM_EXISTS = 23
    STREAM_SEALED = 24
    STREAM_NOT_SEALED = 25
    INVALID_STREAM_CUT = 26
    INVALID_SCALE = 27
    SCALE_CONFLICT = 28
    TABLE_KEY_NOT_FOUND = 40
    TABLE_KEY_VERSION_MISMATCH = 41
    KV_TABLE_NOT_FOUND = 42
    # transactions of native writers: 60-69
    TXN_NOT_FOUND = 60
    TXN_FAILED = 61
    # security (gateway/native/security.py)
    AUTHENTICATION_FAILED = 70  # the connection is closed after this answer
    NOT_AUTHORIZED = 71


class WireError(ValueError):
    """A frame that does not parse."""


def encode_frame(code: int, request_id: int, header: dict[str, object] | None = None, payload: bytes = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode() if header else b""
    body_len = _BODY.size + len(head) + len(payload)
    return b"".join((_LEN.pack(body_len), _BODY.pack(code, request_id, len(head)), head, payload))


def decode_body(body: bytes | memoryview) -> tuple[int, int, dict[str, object], bytes | memoryview]:
    """(command or status, request id, header, payload) of one frame body. The payload is a slice of
    ``body``: a view, not a copy, when ``body`` is a memoryview."""
    if len(body) < _BODY.size:
        raise WireError(f"frame of {len(body)} bytes is shorter than its {_BODY.size}-byte header")
    code, request_id, head_len = _BODY.unpack_from(body)
    end = _BODY.size + head_len
    if end > len(body):
        raise WireError("header length runs past the frame")
    try:
        header = json.loads(bytes(body[_BODY.size : end])) if head_len else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise WireError("header is not a JSON object")
    return code, request_id, header, body[end:]
