"""The one way a protocol adapter reaches a segment by name: each command is checked against the
format of the stream that owns the segment, whoever asks (super users included).

Every stream has one format, owned here, in the stream layer:

=====================  =========================================  ========================================
format                 which segments                             what a raw segment command may do
=====================  =========================================  ========================================
events                 segments of a stream with a partition      read and describe only: events go in
                       record (every Kafka topic, and native      through Produce or APPEND_EVENTS, which
                       streams that event writers partitioned)    store validated Kafka batches; records
                                                                  leave by DeleteRecords and retention
bytes                  the one segment of a stream whose format   append (any bytes), writer attributes
                       was claimed as a byte stream
synchronizer           the one segment of a stream claimed for a  appends of whole entries
                       state synchronizer (reader groups' state,
                       watermark marks, user synchronizers)
pravega events         any segment of a stream written by          appends of whole Pravega event frames
                       Pravega's own writers, claimed by its      (``protocol/event_frames.py``), writer
                       first Pravega append                       attributes
unformatted            a stream's segment that no one claimed     a format claim; nothing else
internal               names holding ``#`` (tables, transactions, read and describe only
                       Kafka index segments) and ``_system/``
raw                    names of no stream (``a/b``, ``seg``)      anything: segments outside every stream,
                                                                  super users' only (``authorization``)
=====================  =========================================  ========================================

Creating, sealing, truncating, merging and deleting a stream's segments is the controller's and the
partition layer's (scale, SEAL_STREAM, TRUNCATE_STREAM, DELETE_STREAM, DeleteRecords), never a raw
command's, so no raw command can leave a stream unreadable. The controller-level commands are checked
here too (``check_create_stream``, ``check_seal_stream``, ``check_truncate_stream``, and ``check_scalable``
for every scale): a stream of the Kafka scope is made only as a topic, a Kafka topic is neither sealed
nor cut at byte offsets (its records go with DeleteRecords and retention, at batch boundaries),
an event stream is cut only where a batch begins, a synchronizer only where a whole state lies, a
Pravega events stream only where an event begins, and a
stream of one claimed segment never scales (a Pravega events stream scales: each of its segments is
claimed by its own first append, a scale's successors too).

A format is recorded on the segment (``FORMAT_ATTRIBUTE``), claimed once with a conditional attribute
update, and every raw append or attribute update to it carries a condition on it, so a segment whose
format changed (its stream deleted and made again under the name) refuses the command atomically; the
cache of formats is only a shortcut.

Threads: ``SegmentGate``'s commands are called on the reactor and return store futures; a format claim
and the controller-level checks block (controller and store calls) and run on the worker pool.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, TypeVar

from millrace.protocol.contracts import (
    FORMAT_ATTRIBUTE,
    LEGACY_BYTE_STREAM_ATTRIBUTE,
    AttributeUpdate,
    AttributeUpdateType,
    ReadResult,
    SegmentFormat,
    SegmentInfo,
)
from millrace.protocol.errors import (
    BadAttributeUpdateError,
    FormatViolationError,
    InvalidRequestError,
    InvalidStreamCutError,
    SegmentNotFoundError,
)
from millrace.protocol.event_frames import EVENT_TYPE, FRAME_HEADER, NotEventFramesError, count_frames
from millrace.protocol.names import EPOCH_DELIMITER, SYSTEM_SCOPE, is_internal_stream_name, parse_segment_name
from millrace.protocol.synchronizer import (
    ENTRY_HEADER_BYTES,
    KIND_SNAPSHOT,
    KIND_STATE,
    StateCorruptError,
    decode_entries,
    entry_length,
)
from millrace.protocol.wire import MAX_FRAME_BYTES
from millrace.store.controller import ScalingType
from millrace.store.futures import StoreFuture, chained, completed, failed
from millrace.streams.partitions.formats import (
    ENVELOPE,
    ENVELOPE_MAGIC,
    INDEX_ENTRY_SIZE,
    INDEX_SUFFIX,
    IndexEntry,
)

if TYPE_CHECKING:
    from millrace.store.contracts import SegmentService
    from millrace.store.controller import Controller
    from millrace.streams.topics import TopicRegistry

T = TypeVar("T")

_RESERVED_ATTRIBUTE_PREFIX = "millrace."
_FORMATS_CACHED = 4096
_BLOCKING_TIMEOUT = 30.0
# An entry is one append, so no longer than a frame: the most a cut check reads.
_MAX_SYNCHRONIZER_ENTRY = MAX_FRAME_BYTES
# How much of a Pravega events segment a cut check reads at once while it walks the events' headers.
_WALK_CHUNK = 64 * 1024


def _marked(name: str) -> bool:
    """Whether the name carries a mark past a stream segment's own (``#transaction.``, ``#kvtable``,
    ``#kafka-index``...): a segment that belongs to the layer that made it."""
    return "#" in name.replace(EPOCH_DELIMITER, "")


def stream_of_segment(name: str) -> tuple[str, str] | None:
    """(scope, stream) of a stream segment's name; None for internal and raw names."""
    if _marked(name):
        return None
    try:
        scope, stream, _ = parse_segment_name(name)
    except ValueError:
        return None
    return scope, stream


def _internal(name: str) -> bool:
    return _marked(name) or name.startswith(SYSTEM_SCOPE + "/") or name == SYSTEM_SCOPE


def _format_of(info: SegmentInfo) -> SegmentFormat | None:
    value = info.attributes.get(FORMAT_ATTRIBUTE)
    if value is None:  # an older byte stream's mark alone counts once its writer claims the format again
        return None
    try:
        return SegmentFormat(value)
    except ValueError:
        return None


class SegmentGate:
    """Raw segment commands of a protocol adapter, checked against their stream's format (see the
    module's table). ``topics``: the registry that knows which streams hold events (None: a listener
    that serves no event streams, where every stream is unformatted until claimed)."""

    def __init__(self, store: SegmentService, topics: TopicRegistry | None, kafka_scope: str,
                 controller: Controller, pool: Executor) -> None:
        """``pool``: where format claims and the controller-level checks block."""
        self.store = store
        self.topics = topics
        self.kafka_scope = kafka_scope
        self.controller = controller
        self.pool = pool
        self._formats: OrderedDict[str, SegmentFormat] = OrderedDict()
        self._lock = threading.Lock()

    # -- what a segment is ------------------------------------------------------------------------------
    def _holds_events(self, scope: str, stream: str) -> bool:
        return self.topics is not None and self.topics.of_stream(scope, stream) is not None

    def _refusal(self, name: str, command: str) -> FormatViolationError | None:
        """Why ``command`` may not touch ``name`` whatever its claimed format, or None if that depends on
        the format (a stream segment that holds no events)."""
        if _internal(name):
            return FormatViolationError(
                f"{command} of {name!r}: the segment holds Millrace's own state (a table, a transaction, an "
                "index or a system stream), written only through the commands that own it")
        stream = stream_of_segment(name)
        if stream is not None and self._holds_events(*stream):
            scope, stream_name = stream
            how = ("Kafka's Produce and DeleteRecords" if scope == self.kafka_scope
                   else "APPEND_EVENTS and TRUNCATE_STREAM at a batch boundary")
            return FormatViolationError(
                f"{command} of {name!r}: {scope}/{stream_name} holds events, stored as validated Kafka record "
                f"batches: write and remove them with {how}, never with raw segment commands")
        return None

    def _cached_format(self, name: str) -> SegmentFormat | None:
        with self._lock:
            fmt = self._formats.get(name)
            if fmt is not None:
                self._formats.move_to_end(name)
            return fmt

    def _remember(self, name: str, fmt: SegmentFormat | None) -> None:
        if fmt is None:
            return
        with self._lock:
            self._formats[name] = fmt
            self._formats.move_to_end(name)
            while len(self._formats) > _FORMATS_CACHED:
                self._formats.popitem(last=False)

    def _forget(self, name: str) -> None:
        with self._lock:
            self._formats.pop(name, None)

    def _format(self, name: str) -> StoreFuture[SegmentFormat | None]:
        cached = self._cached_format(name)
        if cached is not None:
            return completed(cached)
        out: StoreFuture[SegmentFormat | None] = StoreFuture()

        def known(f: StoreFuture[SegmentInfo]) -> None:
            exc = f.exception()
            if exc is not None:
                out.set_exception(exc)
                return
            fmt = _format_of(f.result())
            self._remember(name, fmt)
            out.set_result(fmt)

        self.store.get_info_future(name).add_done_callback(known)
        return out

    def _conditioned(self, name: str, fut: StoreFuture[T]) -> StoreFuture[T]:
        """``fut``, and the cached format forgotten if an attribute condition failed (the format
        condition may be the one that did): the next command reads the segment again."""
        def done(f: StoreFuture[T]) -> None:
            if isinstance(f.exception(), (BadAttributeUpdateError, SegmentNotFoundError)):
                self._forget(name)

        fut.add_done_callback(done)
        return fut

    # -- raw segment commands ------------------------------------------------------------------------------
    def create_segment(self, name: str, attributes: dict[str, int] | None = None) -> StoreFuture[None]:
        if _internal(name) or stream_of_segment(name) is not None:
            return failed(FormatViolationError(
                f"CREATE_SEGMENT of {name!r}: a stream's segments are made by the controller (CREATE_STREAM, "
                "scaling), tables' and transactions' by their commands"))
        return self.store.create_segment(name, attributes)

    def append(self, name: str, data: bytes, expected_offset: int | None = None,
               attributes: Sequence[AttributeUpdate] = (), events: int = 1,
               claim: SegmentFormat | None = None) -> StoreFuture[int]:
        """``claim``: the format the caller writes (a Pravega writer: ``PRAVEGA_EVENTS``, or ``BYTES``
        for its byte writer), claimed for the segment if it has none yet; a segment of another format
        refuses the append."""
        refusal = self._refusal(name, "APPEND")
        if refusal is not None:
            return failed(refusal)
        if stream_of_segment(name) is None:  # a raw segment
            return self.store.append(name, data, expected_offset, attributes, events)

        def checked(fmt: SegmentFormat | None) -> StoreFuture[int]:
            if claim is not None and fmt is not claim:
                if fmt is not None:
                    raise FormatViolationError(
                        f"APPEND to {name!r}: it is a {_format_name(fmt)} stream's segment, it takes no "
                        f"{_format_name(claim)} appends")
                return chained(self._on_pool(lambda: self.claim_format(name, claim)), lambda _: checked(claim))
            if fmt is SegmentFormat.BYTES:
                _check_writer_attributes(name, attributes)
            elif fmt is SegmentFormat.SYNCHRONIZER:
                _check_synchronizer_append(name, data, attributes)
            elif fmt is SegmentFormat.PRAVEGA_EVENTS:
                _check_writer_attributes(name, attributes)
                _check_pravega_events(name, data)
            else:
                raise _unformatted(name, "APPEND")
            return self._conditioned(name, self.store.append(
                name, data, expected_offset, [*attributes, _holds_format(fmt)], events))

        return chained(self._format(name), checked)

    def claimed(self, name: str) -> SegmentFormat | None:
        """The format this gate has seen claimed for ``name`` (None: not known here yet)."""
        return self._cached_format(name)

    def segment_format(self, name: str) -> StoreFuture[SegmentFormat | None]:
        """The format a stream's segment was claimed for (None: none yet, or a segment of no stream);
        FormatViolationError for a segment whose stream's format is not a claimed one (events stored as
        Kafka batches, Millrace's internal state), so an adapter can refuse a writer at its setup."""
        refusal = self._refusal(name, "APPEND")
        if refusal is not None:
            return failed(refusal)
        if stream_of_segment(name) is None:
            return completed(None)
        return self._format(name)

    def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> StoreFuture[None]:
        """Writer attributes of a byte stream, or a format claim (``claim_format``, on the pool)."""
        refusal = self._refusal(name, "UPDATE_ATTRIBUTES")
        if refusal is not None:
            return failed(refusal)
        if stream_of_segment(name) is None:
            return self.store.update_attributes(name, updates)
        if any(u.key == FORMAT_ATTRIBUTE for u in updates):
            (update,) = updates if len(updates) == 1 else (None,)
            if update is None or update.type is not AttributeUpdateType.REPLACE:
                return failed(FormatViolationError(
                    f"UPDATE_ATTRIBUTES of {name!r}: a format is claimed alone, by setting {FORMAT_ATTRIBUTE}"))
            try:
                fmt = SegmentFormat(update.value)
            except ValueError:
                return failed(FormatViolationError(f"no segment format {update.value}"))
            return self._on_pool(lambda: self.claim_format(name, fmt))

        def checked(fmt: SegmentFormat | None) -> StoreFuture[None]:
            if fmt is not SegmentFormat.BYTES and fmt is not SegmentFormat.PRAVEGA_EVENTS:
                raise (_unformatted(name, "UPDATE_ATTRIBUTES") if fmt is None else FormatViolationError(
                    f"UPDATE_ATTRIBUTES of {name!r}: a synchronizer's segment carries no attributes of its own"))
            _check_writer_attributes(name, updates)
            return self._conditioned(name, self.store.update_attributes(name, [*updates, _holds_format(fmt)]))

        return chained(self._format(name), checked)

    def seal(self, name: str) -> StoreFuture[int]:
        return self._raw_only(name, "SEAL", "SEAL_STREAM", lambda: self.store.seal(name))

    def truncate(self, name: str, offset: int) -> StoreFuture[None]:
        return self._raw_only(name, "TRUNCATE", "TRUNCATE_STREAM (a Kafka topic: DeleteRecords)",
                              lambda: self.store.truncate(name, offset))

    def truncate_byte_stream(self, name: str, offset: int) -> StoreFuture[None]:
        """Truncate a byte stream's one segment at ``offset`` as its stream is truncated (the controller
        records the new head, then cuts): how Pravega's byte writer truncates, with a segment command.
        Any other segment is refused as ``truncate`` refuses it."""
        stream = stream_of_segment(name)
        if stream is None or _internal(name):
            return self.truncate(name, offset)

        def checked(fmt: SegmentFormat | None) -> StoreFuture[None]:
            if fmt is not SegmentFormat.BYTES:
                return self.truncate(name, offset)
            scope, stream_name = stream

            def truncate() -> None:
                cut: dict[int | str, int] = {name: offset}
                self.check_truncate_stream(scope, stream_name, {name: offset})
                self.controller.truncate_stream(scope, stream_name, cut)

            return self._on_pool(truncate)

        return chained(self._format(name), checked)

    def readable(self, name: str) -> FormatViolationError | None:
        """Why a reader of raw bytes should not be given ``name`` (its bytes are Kafka record batches or
        Millrace's own state, which such a reader would misread), or None."""
        return self._refusal(name, "READ")

    def delete(self, name: str) -> StoreFuture[None]:
        return self._raw_only(name, "DELETE", "DELETE_STREAM", lambda: self.store.delete(name))

    def merge(self, target: str, source: str) -> StoreFuture[int]:
        for name in (target, source):
            if _internal(name) or stream_of_segment(name) is not None:
                return failed(FormatViolationError(
                    f"MERGE of {source!r} into {target!r}: streams' segments are merged only by the commit of "
                    "their transactions and by scaling"))
        return self.store.merge(target, source)

    def read(self, name: str, offset: int, max_length: int, wait_timeout: float = 0.0) -> StoreFuture[ReadResult]:
        return self.store.read(name, offset, max_length, wait_timeout)

    def _on_pool(self, call: Callable[[], T]) -> StoreFuture[T]:
        out: StoreFuture[T] = StoreFuture()

        def run() -> None:
            try:
                out.set_result(call())
            except Exception as exc:  # noqa: BLE001 - the caller's answer
                out.set_exception(exc)

        self.pool.submit(run)
        return out

    def _raw_only(self, name: str, command: str, instead: str, call: Callable[[], StoreFuture[T]]) -> StoreFuture[T]:
        if _internal(name) or stream_of_segment(name) is not None:
            return failed(FormatViolationError(
                f"{command} of {name!r}: a stream's segments change only through its stream: use {instead}"))
        return call()

    # -- blocking checks (worker pool) ---------------------------------------------------------------------
    def claim_format(self, name: str, fmt: SegmentFormat) -> None:
        """Record ``fmt`` as the format of the one segment of an unpartitioned stream of one fixed
        segment (idempotent for the same format; FormatViolationError for another, or for a stream
        that may not take it). Blocking."""
        scope, stream = stream_of_segment(name) or ("", "")
        if not scope:
            raise FormatViolationError(f"{name!r} is no stream's segment: only a stream takes a format")
        if scope == self.kafka_scope and not is_internal_stream_name(stream):
            raise FormatViolationError(f"{scope}/{stream} is a Kafka topic's stream: its format is Kafka's")
        if self._holds_events(scope, stream):
            raise FormatViolationError(f"{scope}/{stream} holds events: it cannot be a {fmt.name.lower()} stream")
        controller = self.controller
        current = controller.get_current_segments(scope, stream)
        if fmt is SegmentFormat.PRAVEGA_EVENTS:
            # Any segment of the stream, each claimed by its first append: such a stream scales, and a
            # scale's successors start unformatted and empty.
            pass
        elif (len(current) != 1 or current[0].name != name
                or controller.get_stream(scope, stream).config.scaling.type is not ScalingType.FIXED_NUM_SEGMENTS):
            raise FormatViolationError(f"{scope}/{stream} is not a stream of one fixed segment: it cannot be a "
                                       f"{fmt.name.lower()} stream")
        store = self.store
        try:
            store.update_attributes(name, [AttributeUpdate(FORMAT_ATTRIBUTE, int(fmt), AttributeUpdateType.REPLACE_IF_EQUALS,
                                                           None)]).result(_BLOCKING_TIMEOUT)
        except BadAttributeUpdateError:
            # Another claim came first. Its update may still be on its way to the log, where get_info does
            # not see it yet, so the same claim is confirmed by a condition checked in the same order.
            try:
                store.update_attributes(name, [_holds_format(fmt)]).result(_BLOCKING_TIMEOUT)
            except BadAttributeUpdateError:
                existing = _format_of(store.get_info(name))
                kind = f"a {existing.name.lower()}" if existing else "another"
                raise FormatViolationError(f"{scope}/{stream} is {kind} stream: its format does not change") from None
        else:
            info = store.get_info(name)
            if info.length > 0 and LEGACY_BYTE_STREAM_ATTRIBUTE not in info.attributes:
                # Raw appends are refused to unformatted segments, so only data older than formats is here.
                store.update_attributes(name, [AttributeUpdate(FORMAT_ATTRIBUTE, type=AttributeUpdateType.REMOVE)])
                raise FormatViolationError(f"{scope}/{stream} holds {info.length} bytes of no known format")
        if self._holds_events(scope, stream):
            # An event writer partitioned the stream meanwhile; it looked for the mark after recording
            # its partitions, so one of the two refuses: here, and the mark goes.
            store.update_attributes(name, [AttributeUpdate(FORMAT_ATTRIBUTE, type=AttributeUpdateType.REMOVE)])
            raise FormatViolationError(f"{scope}/{stream} holds events: it cannot be a {fmt.name.lower()} stream")
        self._remember(name, fmt)

    def check_create_stream(self, scope: str, stream: str) -> None:
        """Refuses a stream a client may not create by name (InvalidRequestError): a stream of the Kafka
        scope is a Kafka topic, made with its topic record by Kafka's CreateTopics; names starting with
        '_' are Millrace's own (a reader group's state, watermark marks), as Pravega reserves them."""
        if scope == self.kafka_scope and not is_internal_stream_name(stream):
            # A stream there without a topic record would be neither a Kafka topic nor writable. Only
            # Millrace's own streams (a reader group's state, watermark marks) are made there this way,
            # by the client beside the topics it reads.
            raise InvalidRequestError(f"streams of the scope {scope!r} are Kafka topics: create {stream!r} "
                                      f"with Kafka's CreateTopics (an AdminClient, kafka-topics.sh)")
        if stream.startswith("_") and not is_internal_stream_name(stream):
            raise InvalidRequestError(f"stream name {stream!r}: names starting with '_' are reserved for "
                                      "Millrace's own streams, as Pravega reserves them")

    def check_seal_stream(self, scope: str, stream: str) -> None:
        if scope == self.kafka_scope and self._holds_events(scope, stream):
            raise FormatViolationError(f"SEAL_STREAM of {scope}/{stream}: a Kafka topic is never sealed (Kafka "
                                       "clients could no longer produce to it); delete it with DeleteTopics")

    def check_truncate_stream(self, scope: str, stream: str, cut: Mapping[str, int], *,
                              retention_cut: bool = False) -> None:
        """Refuses a cut that would leave a segment starting inside a batch or an entry. Blocking: reads
        the index segments of event streams and the entries of synchronizers at the cut. A
        ``retention_cut`` (a subscriber's, which consumption-based retention may truncate at) is also
        taken for a Kafka topic, where it only has to fall on batch boundaries."""
        events = self._holds_events(scope, stream)
        if events and scope == self.kafka_scope and not retention_cut:
            raise FormatViolationError(f"TRUNCATE_STREAM of {scope}/{stream}: a Kafka topic's records are removed "
                                       "with DeleteRecords (at a record's offset), never at byte positions")
        store = self.store
        for name, offset in cut.items():
            if stream_of_segment(name) != (scope, stream):
                continue  # the controller refuses names of other streams
            try:
                info = store.get_info(name)
            except SegmentNotFoundError:
                continue
            if offset <= info.start_offset or offset >= info.length:
                continue  # nothing to cut, or all of it (the controller refuses beyond the end)
            if events:
                if not _batch_starts_at(store, name, offset):
                    raise InvalidStreamCutError(f"{name} at {offset}: no event batch begins there; cut streams "
                                                "at positions their readers or tail cuts gave")
            elif _format_of(info) is SegmentFormat.SYNCHRONIZER and not _whole_state_at(store, name, offset):
                raise InvalidStreamCutError(f"{name} at {offset}: a synchronizer's segment is cut only just "
                                            "before a state or a snapshot")
            elif (_format_of(info) is SegmentFormat.PRAVEGA_EVENTS
                  and not _event_frame_starts_at(store, name, info.start_offset, offset)):
                raise InvalidStreamCutError(f"{name} at {offset}: a Pravega events segment is cut only where an "
                                            "event begins (a reader's position)")


def check_scalable(store: SegmentService, segments: Sequence[str]) -> None:
    """FormatViolationError if a segment a scale would seal carries a claimed format: a byte stream's or
    a synchronizer's one segment never scales (its offsets are the stream's). Blocking; the scaler
    (``streams/scaling.py``) asks it for every scale, manual or automatic, whichever protocol asked."""
    for name in segments:
        try:
            fmt = _format_of(store.get_info(name))
        except SegmentNotFoundError:
            continue
        if fmt is not None and fmt is not SegmentFormat.PRAVEGA_EVENTS:
            raise FormatViolationError(f"{name} is a {fmt.name.lower()} stream's one segment: it never scales")


def _holds_format(fmt: SegmentFormat) -> AttributeUpdate:
    """A condition that holds only while the segment keeps ``fmt`` (it writes the value it holds)."""
    return AttributeUpdate(FORMAT_ATTRIBUTE, int(fmt), AttributeUpdateType.REPLACE_IF_EQUALS, int(fmt))


def _unformatted(name: str, command: str) -> FormatViolationError:
    return FormatViolationError(
        f"{command} of {name!r}: its stream has no format yet; write events with an event writer, or make it a "
        "byte stream or a synchronizer's first (StreamManager.create_byte_stream, create_synchronizer)")


def _check_writer_attributes(name: str, updates: Sequence[AttributeUpdate]) -> None:
    for update in updates:
        if update.key.startswith(_RESERVED_ATTRIBUTE_PREFIX):
            raise FormatViolationError(f"attribute {update.key!r} of {name!r}: attributes named "
                                       f"{_RESERVED_ATTRIBUTE_PREFIX}* are the stream layer's own")


def _format_name(fmt: SegmentFormat) -> str:
    return {SegmentFormat.BYTES: "byte", SegmentFormat.SYNCHRONIZER: "synchronizer",
            SegmentFormat.PRAVEGA_EVENTS: "Pravega events"}[fmt]


def _check_pravega_events(name: str, data: bytes) -> None:
    try:
        count_frames(data)
    except NotEventFramesError as exc:
        raise FormatViolationError(f"APPEND to {name!r}: a Pravega events stream takes whole event frames "
                                   f"(type 0, length, payload): {exc}") from None


def _check_synchronizer_append(name: str, data: bytes, attributes: Sequence[AttributeUpdate]) -> None:
    # Conditional or not (``update_unconditionally`` appends commutative updates at the tail), an append
    # of whole entries is atomic, so the segment stays a sequence of entries.
    if attributes:
        raise FormatViolationError(f"APPEND to {name!r}: a synchronizer's entries carry no attributes")
    try:
        entries, consumed = decode_entries(data, 0)
    except StateCorruptError as exc:
        raise FormatViolationError(f"APPEND to {name!r}: not a synchronizer entry: {exc}") from None
    if not entries or consumed != len(data):
        raise FormatViolationError(f"APPEND to {name!r}: the payload is not whole synchronizer entries")


def _read_exactly(store: SegmentService, name: str, offset: int, length: int) -> bytes:
    out = bytearray()
    while len(out) < length:
        got = store.read(name, offset + len(out), length - len(out)).result(_BLOCKING_TIMEOUT)
        if not got.data:
            break
        out += got.data
    return bytes(out)


def _whole_state_at(store: SegmentService, name: str, offset: int) -> bool:
    head = _read_exactly(store, name, offset, ENTRY_HEADER_BYTES)
    if len(head) < ENTRY_HEADER_BYTES:
        return False
    try:
        length = entry_length(head)
    except StateCorruptError:
        return False
    if length > _MAX_SYNCHRONIZER_ENTRY:
        return False
    data = head + _read_exactly(store, name, offset + ENTRY_HEADER_BYTES, length - ENTRY_HEADER_BYTES)
    try:
        entries, _ = decode_entries(data, offset)
    except StateCorruptError:
        return False
    return bool(entries) and entries[0].kind in (KIND_STATE, KIND_SNAPSHOT)


def _event_frame_starts_at(store: SegmentService, name: str, start: int, offset: int) -> bool:
    """Whether a Pravega event frame begins at ``offset``: walked header by header from the segment's
    start, which is one (such a segment is created empty and cut only where this walk found a frame).
    Only headers are read where events are large; small ones come a chunk at a time."""
    chunk = b""
    chunk_at = pos = start
    while pos < offset:
        if not chunk_at <= pos <= chunk_at + len(chunk) - FRAME_HEADER.size:
            chunk = _read_exactly(store, name, pos, max(FRAME_HEADER.size, min(_WALK_CHUNK, offset - pos)))
            chunk_at = pos
            if len(chunk) < FRAME_HEADER.size:
                return False
        kind, length = FRAME_HEADER.unpack_from(chunk, pos - chunk_at)
        if kind != EVENT_TYPE or length < 0:
            return False
        pos += FRAME_HEADER.size + length
    return pos == offset


def _batch_starts_at(store: SegmentService, name: str, offset: int) -> bool:
    """Whether an envelope (and so a batch) of the event segment ``name`` begins at ``offset``: found in
    its index segment (one entry per batch, by position), then by walking the envelopes stored past the
    index's last entry (the index is written a little behind the data)."""
    index = name + INDEX_SUFFIX
    try:
        info = store.get_info(index)
    except SegmentNotFoundError:
        return False
    first = (info.start_offset + INDEX_ENTRY_SIZE - 1) // INDEX_ENTRY_SIZE
    count = info.length // INDEX_ENTRY_SIZE - first

    def entry(i: int) -> IndexEntry:
        return IndexEntry.unpack_from(_read_exactly(store, index, (first + i) * INDEX_ENTRY_SIZE, INDEX_ENTRY_SIZE), 0)

    target = offset + ENVELOPE.size  # an entry's position is its batch's, just after the envelope
    lo, hi = 0, count
    while lo < hi:  # the first entry whose batch begins at or after the target
        mid = (lo + hi) // 2
        if entry(mid).position < target:
            lo = mid + 1
        else:
            hi = mid
    if lo < count:
        return entry(lo).position == target
    walk = entry(count - 1).end if count else store.get_info(name).start_offset
    while walk < offset:  # the unindexed tail: envelope by envelope from the last indexed batch's end
        head = _read_exactly(store, name, walk, ENVELOPE.size)
        if len(head) < ENVELOPE.size:
            return False
        magic, _, _, length = ENVELOPE.unpack(head)
        if magic != ENVELOPE_MAGIC:
            return False
        walk += ENVELOPE.size + length
    return walk == offset
