"""The native protocol's commands as typed messages (as Pravega's WireCommands): one frozen dataclass per
request, and one per reply header that has fields, with one generic codec for all of them.

A frame still carries its header as a JSON object (``protocol.wire``), so payloads stay untouched; this
module says what each header holds. ``encode_request`` frames a request (its class names its command);
``decode_request`` turns a command and a header back into the request, checking every field's type from
the class's annotations, and raises ``InvalidRequestError`` for a malformed header and
``UnknownCommandError`` for a command no class serves, which the server answers as ``INVALID_REQUEST``
and ``UNKNOWN_COMMAND`` (the client raises the same classes again). ``decode_reply`` does the same for a
reply header. Fields that are None by default and None are left out of the JSON, as is ``forwarded``
while False.

Supported field types: str, int, float, bool, uuid.UUID (as its string), enums (as their value),
``X | None``, unions of scalars, ``tuple[X, ...]`` and fixed tuples (JSON lists), ``dict[str, X]``,
nested dataclasses (JSON objects) and ``object`` (any JSON value, passed through).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from millrace.protocol.contracts import AttributeUpdate, SegmentInfo
from millrace.protocol.errors import InvalidRequestError, ServerError, UnknownCommandError
from millrace.protocol.wire import Command, encode_frame

#: A decoded JSON header (what ``protocol.wire.decode_body`` gives).
Header = dict[str, object]


class MessageError(ValueError):
    """A header that does not hold its message: a missing, unknown or ill-typed field."""


@dataclass(frozen=True, kw_only=True)
class Request:
    """A request of the native protocol; each subclass serves one ``Command``."""

    command: ClassVar[Command]
    # Node to node: a request one cluster node sent on to the node that serves it (``forwarding``).
    forwarded: bool = False
    # Who the request is for, with security on (``gateway/native/security.py``): the listener sets it to
    # the connection's principal on every request, whatever a client sent; only an authenticated super
    # user (a cluster node forwarding a client's request) may send one of its own, and it is kept then.
    principal: str | None = None


REQUESTS: dict[Command, type[Request]] = {}
_BY_CODE: dict[int, type[Request]] = {}  # the same, keyed by plain ints (what a frame carries)
_R = TypeVar("_R", bound=type[Request])


def _serves(command: Command) -> Callable[[_R], _R]:
    """Class decorator: the request class of ``command``."""

    def register(cls: _R) -> _R:
        if command in REQUESTS:
            raise TypeError(f"{command.name} has two request classes")
        cls.command = command
        REQUESTS[command] = _BY_CODE[int(command)] = cls
        return cls

    return register


@dataclass(frozen=True, kw_only=True)
class SegmentRequest(Request):
    """A request about one segment."""

    segment: str


@dataclass(frozen=True, kw_only=True)
class ScopeRequest(Request):
    scope: str


@dataclass(frozen=True, kw_only=True)
class StreamRequest(ScopeRequest):
    """A request about one stream."""

    stream: str


@dataclass(frozen=True, kw_only=True)
class TableRequest(ScopeRequest):
    """A request about one key-value table."""

    table: str


@dataclass(frozen=True, kw_only=True)
class TablePartitionRequest(TableRequest):
    """A request about one table segment of a key-value table."""

    partition: int


# -- segments ------------------------------------------------------------------------------------------
@_serves(Command.HELLO)
@dataclass(frozen=True, kw_only=True)
class Hello(Request):
    pass


@dataclass(frozen=True, kw_only=True)
class HelloReply:
    version: int
    nodes: tuple[str, ...] = ()  # a cluster node names every node's native listener
    # The SASL mechanisms the listener takes; with ``authentication`` a client must authenticate
    # (AUTH_HANDSHAKE, AUTHENTICATE) before any other command.
    mechanisms: tuple[str, ...] = ()
    authentication: bool = False


# -- authentication (SASL, as Kafka's SaslHandshake and SaslAuthenticate) -------------------------------
@_serves(Command.AUTH_HANDSHAKE)
@dataclass(frozen=True, kw_only=True)
class AuthHandshake(Request):
    mechanism: str


@dataclass(frozen=True, kw_only=True)
class AuthHandshakeReply:
    mechanisms: tuple[str, ...]


@_serves(Command.AUTHENTICATE)
@dataclass(frozen=True, kw_only=True)
class Authenticate(Request):
    """The payload is the mechanism's next client message."""


@dataclass(frozen=True, kw_only=True)
class AuthenticateReply:
    """Beside the mechanism's answer (the payload): whether the exchange is done and, once it is, who the
    client is and how long the session lasts (None: no end; else re-authenticate on the connection before
    it ends, or the connection's next request after it is refused and the connection closed)."""

    complete: bool
    principal: str | None = None
    session_lifetime_ms: int | None = None


@_serves(Command.CREATE_SEGMENT)
@dataclass(frozen=True, kw_only=True)
class CreateSegment(SegmentRequest):
    attributes: dict[str, int] = field(default_factory=dict)


@_serves(Command.APPEND)
@dataclass(frozen=True, kw_only=True)
class AppendToSegment(SegmentRequest):
    expected_offset: int | None = None
    attributes: tuple[AttributeUpdate, ...] = ()
    events: int = 1  # a cluster node forwarding a Kafka batch keeps its rate count


@dataclass(frozen=True, kw_only=True)
class ValueReply:
    """An append's offset, a seal's or a merge's length."""

    value: int


@_serves(Command.READ)
@dataclass(frozen=True, kw_only=True)
class ReadSegment(SegmentRequest):
    offset: int
    max_length: int
    wait_ms: float = 0


@dataclass(frozen=True, kw_only=True)
class ReadReply:
    """Beside the bytes read (the payload)."""

    offset: int
    end_of_segment: bool = False


@_serves(Command.GET_INFO)
@dataclass(frozen=True, kw_only=True)
class GetSegmentInfo(SegmentRequest):
    """Answers a SegmentInfo."""


@_serves(Command.SEAL)
@dataclass(frozen=True, kw_only=True)
class SealSegment(SegmentRequest):
    pass


@_serves(Command.TRUNCATE)
@dataclass(frozen=True, kw_only=True)
class TruncateSegment(SegmentRequest):
    offset: int


@_serves(Command.DELETE)
@dataclass(frozen=True, kw_only=True)
class DeleteSegment(SegmentRequest):
    pass


@_serves(Command.MERGE)
@dataclass(frozen=True, kw_only=True)
class MergeIntoSegment(Request):
    target: str
    source: str


@_serves(Command.UPDATE_ATTRIBUTES)
@dataclass(frozen=True, kw_only=True)
class UpdateSegmentAttributes(SegmentRequest):
    attributes: tuple[AttributeUpdate, ...]


@_serves(Command.LIST_SEGMENTS)
@dataclass(frozen=True, kw_only=True)
class ListSegments(Request):
    pass


@dataclass(frozen=True, kw_only=True)
class SegmentsReply:
    segments: tuple[str, ...]


@_serves(Command.GET_SEGMENT_OWNER)
@dataclass(frozen=True, kw_only=True)
class GetSegmentOwner(SegmentRequest):
    pass


@dataclass(frozen=True, kw_only=True)
class SegmentOwnerReply:
    """Where a segment is served; node and native are None from a single server (this one) and while a
    cluster container has no live owner."""

    container: int
    node: str | None = None
    native: str | None = None


@_serves(Command.SEGMENT_RATES)
@dataclass(frozen=True, kw_only=True)
class GetSegmentRates(SegmentRequest):
    pass


@dataclass(frozen=True, kw_only=True)
class SegmentRatesReply:
    """``store.containers.rates.SegmentRates``: one value per window."""

    windows: tuple[float, ...]
    events_per_s: tuple[float, ...]
    bytes_per_s: tuple[float, ...]
    age_s: float


# -- controller: scopes and streams --------------------------------------------------------------------
@_serves(Command.CREATE_SCOPE)
@dataclass(frozen=True, kw_only=True)
class CreateScope(ScopeRequest):
    pass


@dataclass(frozen=True, kw_only=True)
class CreatedReply:
    created: bool


@_serves(Command.DELETE_SCOPE)
@dataclass(frozen=True, kw_only=True)
class DeleteScope(ScopeRequest):
    pass


@_serves(Command.LIST_SCOPES)
@dataclass(frozen=True, kw_only=True)
class ListScopes(Request):
    pass


@dataclass(frozen=True, kw_only=True)
class ScopesReply:
    scopes: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class ScalingFields:
    type: str = "fixed_num_segments"
    target_rate: int = 0
    scale_factor: int = 0
    min_segments: int = 1


@dataclass(frozen=True, kw_only=True)
class RetentionFields:
    type: str = "none"
    value: int = 0


@dataclass(frozen=True, kw_only=True)
class StreamConfigRequest(StreamRequest):
    """A stream's configuration (``store.controller.StreamConfiguration``)."""

    initial_segments: int = 1
    scaling: ScalingFields = ScalingFields()
    retention: RetentionFields = RetentionFields()
    # None (left out of the JSON) for none, so a server from before stream tags takes untagged creates
    tags: tuple[str, ...] | None = None


@_serves(Command.CREATE_STREAM)
@dataclass(frozen=True, kw_only=True)
class CreateStream(StreamConfigRequest):
    """Answers the stream's description (``gateway.native.controller_commands.describe_stream``)."""


@_serves(Command.UPDATE_STREAM)
@dataclass(frozen=True, kw_only=True)
class UpdateStream(StreamConfigRequest):
    expected_version: int | None = None


@dataclass(frozen=True, kw_only=True)
class VersionReply:
    version: int


@_serves(Command.DESCRIBE_STREAM)
@dataclass(frozen=True, kw_only=True)
class DescribeStream(StreamRequest):
    """Answers ``StreamDescriptionReply``."""


# -- a stream's description: the answer to DESCRIBE_STREAM, CREATE_STREAM and manual scales, and the JSON
# of the CLI and the HTTP API. Fields are only ever added; every field is always present (null where
# unknown), so the JSON keeps one shape.
@dataclass(frozen=True, kw_only=True)
class StreamConfigFields:
    initial_segments: int
    scaling: ScalingFields
    retention: RetentionFields


@dataclass(frozen=True, kw_only=True)
class SegmentRate:
    """A segment's measured rate over one window (``store.containers`` rate windows)."""

    window_s: float
    events_per_s: float
    bytes_per_s: float
    kib_per_s: float
    warm: bool  # a whole window measured


@dataclass(frozen=True, kw_only=True)
class SegmentDescription:
    """A segment of the current epoch, with what the store knows of it (null where it does not: a
    stream being created or deleted)."""

    segment_id: int
    name: str
    number: int
    epoch: int  # the epoch that created it
    key_start: float
    key_end: float
    container: int
    partitions: tuple[int, ...] | None  # live partitions whose slice starts in the range; null: no partitions
    length: int | None
    storage_length: int | None
    start_offset: int | None
    sealed: bool | None
    rates: tuple[SegmentRate, ...]  # one per rate window, shortest first


@dataclass(frozen=True, kw_only=True)
class KeyRange:
    """A segment and its slice of the key space (null bounds: a range older than the history kept)."""

    segment_id: int
    name: str
    key_start: float | None
    key_end: float | None


@dataclass(frozen=True, kw_only=True)
class EpochDescription:
    """One epoch of the history: the scale that made it, what it sealed and what it created."""

    epoch: int
    created_ms: int
    reason: str  # "create" | "manual" | "scale-up" | "scale-down"
    sealed_ids: tuple[int, ...]  # ascending
    created_ids: tuple[int, ...]
    sealed: tuple[KeyRange, ...]
    created: tuple[KeyRange, ...]


@dataclass(frozen=True, kw_only=True)
class PendingScale:
    """A scale recorded but not committed yet."""

    epoch: int
    reason: str
    created_ms: int
    sealed_ids: tuple[int, ...]
    created: tuple[KeyRange, ...]


@dataclass(frozen=True, kw_only=True)
class StreamDescriptionReply:
    scope: str
    stream: str
    state: str  # "active" | "scaling" | "sealing" | "sealed" | ...
    epoch: int  # the current epoch (the last one in ``history``)
    created_ms: int
    config: StreamConfigFields
    truncation: dict[str, int]  # the stream's head as a cut: segment id -> offset
    # A Kafka topic's partitions, or every partition (retired ones too) of a native stream events were
    # written to; null for other streams
    partition_count: int | None
    rate_windows: tuple[float, ...]  # seconds, shortest first
    segments: tuple[SegmentDescription, ...]  # the current epoch's, by key range
    history: tuple[EpochDescription, ...]  # every epoch, oldest first
    pending_scale: PendingScale | None
    # The configuration's tags; left out for a stream without any (a top-level None is, a nested one
    # not), so clients from before stream tags, which refuse fields they do not know, read those.
    tags: tuple[str, ...] | None = None


@_serves(Command.LIST_STREAMS)
@dataclass(frozen=True, kw_only=True)
class ListStreams(ScopeRequest):
    tag: str | None = None  # only the streams carrying this tag


@dataclass(frozen=True, kw_only=True)
class StreamsReply:
    streams: tuple[str, ...]


@_serves(Command.GET_SEGMENT_FOR_KEY)
@dataclass(frozen=True, kw_only=True)
class GetSegmentForKey(StreamRequest):
    key: str  # a routing key


@dataclass(frozen=True, kw_only=True)
class SegmentRangeReply:
    segment_id: int
    name: str
    key_start: float
    key_end: float


@_serves(Command.SEAL_STREAM)
@dataclass(frozen=True, kw_only=True)
class SealStream(StreamRequest):
    pass


@_serves(Command.DELETE_STREAM)
@dataclass(frozen=True, kw_only=True)
class DeleteStream(StreamRequest):
    pass


@_serves(Command.TRUNCATE_STREAM)
@dataclass(frozen=True, kw_only=True)
class TruncateStream(StreamRequest):
    cut: dict[str, int]  # segment name (or id as a string) -> offset


@_serves(Command.UPDATE_SUBSCRIBER_CUT)
@dataclass(frozen=True, kw_only=True)
class UpdateSubscriberCut(StreamRequest):
    """Consumption-based retention: ``subscriber``'s retention cut of the stream (segment name ->
    offset); None removes the subscriber."""

    subscriber: str
    cut: dict[str, int] | None = None


@_serves(Command.LIST_SUBSCRIBER_CUTS)
@dataclass(frozen=True, kw_only=True)
class ListSubscriberCuts(StreamRequest):
    pass


@dataclass(frozen=True, kw_only=True)
class SubscriberCutsReply:
    cuts: dict[str, dict[str, int]]  # subscriber -> its retention cut (segment name -> offset)


@_serves(Command.SPLIT_SEGMENT)
@dataclass(frozen=True, kw_only=True)
class SplitSegment(StreamRequest):
    """Answers the stream's description after the split."""

    segment: int | str  # id, number or name
    pieces: int = 2
    at: tuple[float, ...] | None = None


@_serves(Command.MERGE_SEGMENTS)
@dataclass(frozen=True, kw_only=True)
class MergeSegments(StreamRequest):
    """Answers the stream's description after the merge."""

    segments: tuple[int | str, ...]


# -- key-value tables (``protocol.tables`` lays out their payloads) ------------------------------------
@_serves(Command.CREATE_KV_TABLE)
@dataclass(frozen=True, kw_only=True)
class CreateKvTable(TableRequest):
    partitions: int = 1


@dataclass(frozen=True, kw_only=True)
class KvTableCreatedReply:
    created: bool
    partitions: int


@_serves(Command.DELETE_KV_TABLE)
@dataclass(frozen=True, kw_only=True)
class DeleteKvTable(TableRequest):
    pass


@_serves(Command.LIST_KV_TABLES)
@dataclass(frozen=True, kw_only=True)
class ListKvTables(ScopeRequest):
    pass


@dataclass(frozen=True, kw_only=True)
class KvTablesReply:
    tables: tuple[str, ...]


@_serves(Command.GET_KV_TABLE)
@dataclass(frozen=True, kw_only=True)
class GetKvTable(TableRequest):
    pass


@dataclass(frozen=True, kw_only=True)
class KvTableReply:
    scope: str
    table: str
    partitions: int
    created_ms: int


@_serves(Command.KV_PUT)
@dataclass(frozen=True, kw_only=True)
class KvPut(TablePartitionRequest):
    """The payload holds the keys, then the values, of these lengths."""

    keys: tuple[int, ...]
    values: tuple[int, ...]
    expected: tuple[int | None, ...]  # per entry: None, a version, or MUST_NOT_EXIST


@dataclass(frozen=True, kw_only=True)
class KvVersionsReply:
    versions: tuple[int, ...]


@_serves(Command.KV_REMOVE)
@dataclass(frozen=True, kw_only=True)
class KvRemove(TablePartitionRequest):
    keys: tuple[int, ...]
    expected: tuple[int | None, ...]


@_serves(Command.KV_GET)
@dataclass(frozen=True, kw_only=True)
class KvGet(TablePartitionRequest):
    keys: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class KvGetReply:
    """Per key its version (None: absent); the payload holds the found values, of these lengths."""

    versions: tuple[int | None, ...]
    values: tuple[int, ...]


@_serves(Command.KV_ITERATE)
@dataclass(frozen=True, kw_only=True)
class KvIterate(TablePartitionRequest):
    """The payload is the key prefix."""

    limit: int = 1000
    continuation: str | None = None  # hex
    with_values: bool = False
    start: str | None = None  # hex: only keys at or above this stored key
    end: str | None = None  # hex: only keys below this stored key


@dataclass(frozen=True, kw_only=True)
class KvIterateReply:
    keys: tuple[int, ...]
    values: tuple[int, ...]
    versions: tuple[int, ...]
    continuation: str | None = None


@_serves(Command.KV_UPDATE)
@dataclass(frozen=True, kw_only=True)
class KvUpdate(TablePartitionRequest):
    """Puts and removals applied together, all or none. The payload holds the keys, then the values
    of the puts, of these lengths; a value length of None makes that entry a removal."""

    keys: tuple[int, ...]
    values: tuple[int | None, ...]
    expected: tuple[int | None, ...]  # per entry: None, a version, or MUST_NOT_EXIST (puts only)


@dataclass(frozen=True, kw_only=True)
class KvUpdateReply:
    versions: tuple[int | None, ...]  # per entry: a put's new version, None for a removal


# -- event writers and readers (``protocol.events`` encodes the batches) -------------------------------
@_serves(Command.OPEN_WRITER)
@dataclass(frozen=True, kw_only=True)
class OpenWriter(StreamRequest):
    writer_id: str


@dataclass(frozen=True, kw_only=True)
class OpenWriterReply:
    producer_id: int
    epoch: int
    slices: tuple[tuple[float, float], ...]  # partition p's routing-key slice
    event_numbers: dict[str, int] = field(default_factory=dict)  # partition -> the id's last event number
    segments: tuple[str | None, ...] = ()  # each partition's open segment
    retired: tuple[int, ...] = ()  # partitions that take no more appends (a native stream split inside them)


@_serves(Command.WRITER_ROUTING)
@dataclass(frozen=True, kw_only=True)
class WriterRouting(StreamRequest):
    """A writer's routing again, without opening it again (which would fence its other batches): after a
    refusal because a partition retired."""


@dataclass(frozen=True, kw_only=True)
class WriterRoutingReply:
    slices: tuple[tuple[float, float], ...]
    retired: tuple[int, ...] = ()
    segments: tuple[str | None, ...] = ()


@_serves(Command.APPEND_EVENTS)
@dataclass(frozen=True, kw_only=True)
class AppendEvents(StreamRequest):
    partition: int
    writer_id: str | None = None  # with the batch's event numbers, for a writer opened with its own id
    first_event: int | None = None
    last_event: int | None = None


@dataclass(frozen=True, kw_only=True)
class OffsetReply:
    offset: int


@_serves(Command.READ_EVENTS)
@dataclass(frozen=True, kw_only=True)
class ReadEvents(StreamRequest):
    segment_id: int
    offset: int
    max_bytes: int
    wait_ms: int = 0
    end_offset: int | None = None


@dataclass(frozen=True, kw_only=True)
class ReadEventsReply:
    """Beside the batches read (the payload): per batch its (position, partition, first offset)."""

    offset: int
    next_offset: int
    end_of_segment: bool
    batches: tuple[tuple[int, int, int], ...] = ()


# -- transactions of native writers ---------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TxnRequest(StreamRequest):
    """A request about one transaction."""

    txn_id: uuid.UUID


@_serves(Command.BEGIN_TXN)
@dataclass(frozen=True, kw_only=True)
class BeginTxn(TxnRequest):
    lease_ms: int
    writer_id: str = ""


@dataclass(frozen=True, kw_only=True)
class BeginTxnReply:
    slices: tuple[tuple[float, float], ...]
    lease_ms: int
    retired: tuple[int, ...] = ()  # partitions not to route to (a commit re-routes what still lands there)


@_serves(Command.APPEND_TXN_EVENTS)
@dataclass(frozen=True, kw_only=True)
class AppendTxnEvents(TxnRequest):
    partition: int
    first_event: int
    last_event: int


@_serves(Command.END_TXN)
@dataclass(frozen=True, kw_only=True)
class EndTxn(TxnRequest):
    commit: bool


@dataclass(frozen=True, kw_only=True)
class TxnStateReply:
    state: str


@_serves(Command.TXN_STATUS)
@dataclass(frozen=True, kw_only=True)
class GetTxnStatus(TxnRequest):
    pass


@dataclass(frozen=True, kw_only=True)
class TxnStatusReply:
    """UNKNOWN names the state alone; while OPEN, ``sequences`` gives per partition the next event
    number its transaction segment expects."""

    state: str
    lease_ms: int = 0
    slices: tuple[tuple[float, float], ...] = ()
    sequences: dict[str, int] = field(default_factory=dict)


@_serves(Command.PING_TXN)
@dataclass(frozen=True, kw_only=True)
class PingTxn(TxnRequest):
    pass


@_serves(Command.FORGET_TXN_WRITER)
@dataclass(frozen=True, kw_only=True)
class ForgetTxnWriter(StreamRequest):
    writer_id: str


# -- the codec -----------------------------------------------------------------------------------------
def encode_request(request_id: int, request: Request, payload: bytes = b"") -> bytes:
    """The frame of ``request``."""
    return encode_frame(request.command, request_id, to_header(request), payload)


def decode_request(command: int, header: Header) -> Request:
    """The request a frame carries. UnknownCommandError for a command no class serves,
    InvalidRequestError for a header that does not hold the command's request."""
    cls = _BY_CODE.get(command)
    if cls is None:
        raise UnknownCommandError(f"unknown command {command}")
    try:
        return from_header(cls, header)
    except MessageError as exc:
        raise InvalidRequestError(f"{cls.command.name}: {exc}") from None


_M = TypeVar("_M")


def decode_reply(cls: type[_M], header: Header) -> _M:
    """A reply header as ``cls``; ServerError if it does not hold one (a server out of step)."""
    try:
        return from_header(cls, header)
    except MessageError as exc:
        raise ServerError(f"malformed {cls.__name__}: {exc}") from None


def to_header(message: object) -> Header:
    """A message (any dataclass of the supported field types) as a JSON object."""
    out: Header = {}
    for name, encode, omit_none in _plan(type(message)).encoders:
        value = getattr(message, name)
        if value is None and omit_none:
            continue
        if name == "forwarded" and not value:
            continue
        out[name] = encode(value)
    return out


def from_header(cls: type[_M], header: object) -> _M:
    """``cls`` (a dataclass) from a JSON object, each field checked against its annotation."""
    if not isinstance(header, dict):
        raise MessageError(f"{cls.__name__} is a JSON object, not {type(header).__name__}")
    plan = _plan(cls)
    if not plan.names.issuperset(header):
        unknown = set(header) - plan.names
        raise MessageError(f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    values = dict(plan.defaults)
    for name, factory in plan.factories:
        values[name] = factory()
    for name, decode, required in plan.decoders:
        raw = header.get(name, _ABSENT)
        if raw is _ABSENT:
            if required:
                raise MessageError(f"missing field {name!r}")
            continue
        values[name] = decode(raw, name)
    # What the generated __init__ would do, without its per-field object.__setattr__ calls (a frozen
    # dataclass's), which cost more than the decoding: every field is set, none has a __post_init__.
    message = object.__new__(cls)
    message.__dict__.update(values)
    return message


# The codec works from plans compiled once per class (and converters once per annotation): a request's
# header is decoded on every append, so reading annotations per call would cost the hot path dearly.
_ABSENT = object()
_Encode = Callable[[object], object]
_Decode = Callable[[object, str], object]


class _Plan(typing.NamedTuple):
    names: frozenset[str]
    # (field, its encoder, left out when None)
    encoders: tuple[tuple[str, _Encode, bool], ...]
    # (field, its decoder, required)
    decoders: tuple[tuple[str, _Decode, bool], ...]
    # What __init__ would set for the fields a header leaves out: plain defaults, and factories to call.
    defaults: dict[str, object]
    factories: tuple[tuple[str, Callable[[], object]], ...]


_PLANS: dict[type, _Plan] = {}
_DECODERS: dict[object, _Decode] = {}


def _plan(cls: type) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        fields = [f for f in dataclasses.fields(cls) if f.init]
        plan = _PLANS[cls] = _Plan(
            names=frozenset(f.name for f in fields),
            encoders=tuple((f.name, _encoder(hints[f.name]), f.default is None) for f in fields),
            decoders=tuple(
                (f.name, _decoder(hints[f.name]),
                 f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                for f in fields),
            defaults={f.name: f.default for f in fields if f.default is not dataclasses.MISSING},
            factories=tuple((f.name, f.default_factory) for f in fields
                            if f.default_factory is not dataclasses.MISSING),
        )
    return plan


_SCALARS = (bool, int, float, str)


def _identity(value: object) -> object:
    return value


def _encoder(annotation: object) -> _Encode:
    """Scalars go to JSON as they are; anything else through ``_to_json``."""
    options = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else (annotation,)
    if all(option in _SCALARS or option is type(None) for option in options):
        return _identity
    return _to_json


def _to_json(value: object) -> object:
    if isinstance(value, bool | int | float | str) and not isinstance(value, enum.Enum):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, tuple | list):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: encode(getattr(value, name)) for name, encode, _ in _plan(type(value)).encoders}
    return value


def _decoder(annotation: object) -> _Decode:
    """The converter of JSON values to ``annotation`` (cached); it raises MessageError naming the field."""
    decode = _DECODERS.get(annotation)
    if decode is None:
        decode = _DECODERS[annotation] = _make_decoder(annotation)
    return decode


def _make_decoder(annotation: object) -> _Decode:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is object:
        return lambda raw, where: raw
    if origin in (typing.Union, types.UnionType):
        return _union_decoder(annotation, args)
    if annotation is bool:
        return _exact_decoder(annotation, lambda raw: isinstance(raw, bool))
    if annotation is int:
        return _exact_decoder(annotation, lambda raw: isinstance(raw, int) and not isinstance(raw, bool))
    if annotation is str:
        return _exact_decoder(annotation, lambda raw: isinstance(raw, str))
    if annotation is float:
        def as_float(raw: object, where: str) -> object:
            if isinstance(raw, int | float) and not isinstance(raw, bool):
                return float(raw)
            raise _ill_typed(where, annotation, raw)
        return as_float
    if annotation is uuid.UUID:
        def as_uuid(raw: object, where: str) -> object:
            if not isinstance(raw, str):
                raise _ill_typed(where, annotation, raw)
            try:
                return uuid.UUID(raw)
            except ValueError:
                raise MessageError(f"{where}: {raw!r} is not a UUID") from None
        return as_uuid
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        enum_type = annotation

        def as_enum(raw: object, where: str) -> object:
            try:
                return enum_type(raw)
            except ValueError:
                raise MessageError(f"{where}: {raw!r} is no {enum_type.__name__}") from None
        return as_enum
    if origin is tuple:
        return _tuple_decoder(annotation, args)
    if origin is dict:
        value_decoder = _decoder(args[1])

        def as_dict(raw: object, where: str) -> object:
            if not isinstance(raw, dict):
                raise _ill_typed(where, annotation, raw)
            return {str(k): value_decoder(v, f"{where}[{k!r}]") for k, v in raw.items()}
        return as_dict
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        message_type = annotation

        def as_message(raw: object, where: str) -> object:
            try:
                return from_header(message_type, raw)
            except MessageError as exc:
                raise MessageError(f"{where}: {exc}") from None
        return as_message
    raise TypeError(f"no codec for {annotation!r}")  # a message class the codec cannot carry


def _exact_decoder(annotation: object, holds: Callable[[object], bool]) -> _Decode:
    def exact(raw: object, where: str) -> object:
        if holds(raw):
            return raw
        raise _ill_typed(where, annotation, raw)
    return exact


def _union_decoder(annotation: object, args: tuple[object, ...]) -> _Decode:
    optional = type(None) in args
    options = [_decoder(option) for option in args if option is not type(None)]

    def one_of(raw: object, where: str) -> object:
        if raw is None and optional:
            return None
        for option in options:
            try:
                return option(raw, where)
            except MessageError:
                continue
        raise _ill_typed(where, annotation, raw)
    return one_of


def _tuple_decoder(annotation: object, args: tuple[object, ...]) -> _Decode:
    if len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0])

        def as_sequence(raw: object, where: str) -> object:
            if not isinstance(raw, list):
                raise _ill_typed(where, annotation, raw)
            return tuple(item(v, f"{where}[{i}]") for i, v in enumerate(raw))
        return as_sequence
    items = [_decoder(a) for a in args]

    def as_fixed(raw: object, where: str) -> object:
        if not isinstance(raw, list):
            raise _ill_typed(where, annotation, raw)
        if len(raw) != len(items):
            raise MessageError(f"{where}: {len(raw)} items, not {len(items)}")
        return tuple(decode(v, f"{where}[{i}]") for i, (decode, v) in enumerate(zip(items, raw, strict=True)))
    return as_fixed


def _ill_typed(where: str, annotation: object, raw: object) -> MessageError:
    name = getattr(annotation, "__name__", None) or str(annotation)
    return MessageError(f"{where}: {raw!r} is not {name}")


__all__ = ["REQUESTS", "AttributeUpdate", "Header", "MessageError", "Request", "SegmentInfo", "decode_reply",
           "decode_request", "encode_request", "from_header", "to_header"]
