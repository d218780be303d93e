"""Pravega's segment store wire protocol (WireCommands) on a Twisted listener, for Pravega's own
writers and readers: an adapter over the stream layer, as the Kafka and native listeners are.

Every segment command reaches the store through the stream layer's ``SegmentGate`` (``streams/
segment_gate.py``), the one the native listener's raw segment commands pass, so the format rules hold
here too, for everyone: a Kafka topic's or a Millrace event stream's segments (Kafka batches) take no
Pravega append, a stream's segments are sealed, truncated, merged and deleted only through the stream.

Event framing (docs/architecture.md, "The Pravega adapter"). A Pravega writer's appends are whole event
frames (``protocol/event_frames.py``), which the segment stores as sent, so Pravega's readers find the
events by byte offset. The first Pravega append to a stream's segment claims its format: ``PRAVEGA_EVENTS``
for an event writer's appends (``AppendBlock``/``AppendBlockEnd``/``ConditionalAppend``), ``BYTES`` for
a ``ConditionalBlockEnd`` (what the Rust client's byte writer sends: raw bytes at an expected offset). The
gate then checks every append against the claimed format.

Exactly once, as Pravega's ``AppendProcessor``: a writer's last event number is the segment attribute
named by its writer id, updated atomically with each append on the condition that it still holds the
number this connection last stored (``REPLACE_IF_EQUALS``); ``SetupAppend`` answers that attribute, so
a writer that reconnects resends only what is not stored. An append whose condition fails (another
connection of the same writer got there) is answered ``InvalidEventNumber`` and the connection closes.

Memory: frames come through ``BudgetedReceiver`` with the server's shared ``ConnectionGuards`` (the
memory pool of frames still arriving, the idle timeout); until a connection said ``Hello``, frames are
held to ``sasl.server.max.receive.size`` and it has ``millrace.authentication.timeout.ms`` to say it,
as before a login on the other listeners; after it, to
Pravega's own frame limit (16 MiB) or ``socket.request.max.bytes``, whichever is smaller. A frame holds
the connection's byte budget until answered (an ``AppendBlock`` until its block's append is answered).

Threads: the protocol runs on the reactor; store futures come back through ``on_reactor``.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from twisted.internet import protocol
from twisted.python.failure import Failure

from millrace.gateway.pravega.table_segments import (
    TABLE_COMMANDS,
    PravegaTables,
    TableCommand,
    table_segment_of,
)
from millrace.gateway.pravega_protocol import commands as wc
from millrace.gateway.pravega_protocol.appends import Append, AppendAssembler
from millrace.gateway.pravega_protocol.base import (
    MAX_WIRECOMMAND_SIZE,
    NULL_ATTRIBUTE_VALUE,
    OLDEST_COMPATIBLE_VERSION,
    TYPE_PLUS_LENGTH_SIZE,
    WIRE_VERSION,
    WireCommand,
)
from millrace.gateway.pravega_protocol.codec import decode_command
from millrace.gateway.pravega_protocol.errors import ErrorMessageCode, PravegaCodecError
from millrace.gateway.shared.framing import DEFAULT_CONNECTION_BUDGET_BYTES, BudgetedReceiver
from millrace.gateway.shared.limits import ConnectionGuards
from millrace.gateway.shared.request_metrics import ListenerMetrics
from millrace.protocol.contracts import (
    AttributeUpdate,
    AttributeUpdateType,
    ReadResult,
    SegmentFormat,
    SegmentInfo,
)
from millrace.protocol.errors import (
    BadAttributeUpdateError,
    BadOffsetError,
    ContainerOfflineError,
    FormatViolationError,
    OffsetOutOfRangeError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentTruncatedError,
    WrongHostError,
)
from millrace.store.contracts import SegmentService
from millrace.store.futures import StoreFuture
from millrace.store.tables import TableStore
from millrace.streams.futures import on_reactor
from millrace.streams.segment_gate import SegmentGate

log = logging.getLogger("millrace.pravega")

T = TypeVar("T")

# The most a SegmentRead carries, whatever the reader suggests (Pravega's server also caps its reads).
MAX_READ_BYTES = 1024 * 1024
# How long a read at the tail of a segment waits for an append before it is answered empty, at_tail.
TAIL_READ_WAIT_SECONDS = 5.0
_HEADER = TYPE_PLUS_LENGTH_SIZE


@dataclasses.dataclass
class _Writer:
    """What a connection knows of one writer of one segment since its SetupAppend."""

    segment: str
    stored: int  # the last event number this connection sent to the store (the next append's condition)
    acked: int  # the last event number answered with DataAppended (answers go out in order)


class PravegaSegmentStoreProtocol(BudgetedReceiver):
    """One client connection (module docstring)."""

    HEADER_BYTES = _HEADER
    LENGTH_AT = 4
    HEADER_DELIVERED = True

    def __init__(self, gate: SegmentGate, store: SegmentService, tables: PravegaTables, pool: Executor,
                 budget_bytes: int, guards: ConnectionGuards | None, metrics: ListenerMetrics | None = None) -> None:
        """``metrics``: where the open connection is counted for /metrics (None: not counted)."""
        super().__init__(budget_bytes, "pravega-connection", guards)
        self._metrics = metrics
        self.gate = gate
        self.store = store
        self.tables = tables
        self.pool = pool
        limit = MAX_WIRECOMMAND_SIZE - _HEADER
        if guards is not None:
            limit = min(limit, guards.limits.socket_request_max_bytes)
        self._max_body = limit
        self.MAX_LENGTH = min(limit, guards.pre_auth_max_bytes) if guards is not None else limit
        self._greeted = False
        self._assembler = AppendAssembler()
        self._writers: dict[uuid.UUID, _Writer] = {}
        self._block_size = 0  # the open AppendBlock's bytes: they hold the budget until its append is answered
        # Per segment, the append of this connection that is claiming its format: later appends wait for
        # it, so a claim never lets a later append overtake an earlier one.
        self._claiming: dict[str, StoreFuture[int]] = {}
        self._handlers: dict[type[WireCommand], Callable[[Any, int], None]] = {
            wc.Hello: self._hello,
            wc.KeepAlive: self._keep_alive,
            wc.SetupAppend: self._setup_append,
            wc.GetStreamSegmentInfo: self._segment_info,
            wc.ReadSegment: self._read,
            wc.CreateSegment: self._create,
            wc.SealSegment: self._seal,
            wc.TruncateSegment: self._truncate,
            wc.DeleteSegment: self._delete,
            wc.MergeSegments: self._merge,
            wc.GetSegmentAttribute: self._get_attribute,
            wc.UpdateSegmentAttribute: self._update_attribute,
            **dict.fromkeys(TABLE_COMMANDS, self._table_command),
        }

    def connectionMade(self) -> None:  # noqa: N802 - Twisted's name
        self.tcp.setTcpNoDelay(True)
        # Hello is this protocol's login: a connection that never says it is closed after
        # millrace.authentication.timeout.ms, as one that never logs in is on the other listeners.
        self.require_authentication()
        if self._metrics is not None:
            self._metrics.connections.add(self)

    # -- input ------------------------------------------------------------------------------------------
    def stringReceived(self, frame: memoryview) -> None:  # noqa: N802 - Twisted's name
        size = len(frame) - _HEADER
        try:
            command = decode_command(frame)
            if not self._greeted and not isinstance(command, wc.Hello):
                raise PravegaCodecError(f"{type(command).__name__} before Hello")
            item = self._assembler.process(command)
        except PravegaCodecError as exc:
            # Nothing of a bad frame (or of an open block it breaks) was acknowledged, so the writer
            # resends it all after it reconnects.
            log.info("closing Pravega connection from %s: %s", self._peer_name(), exc)
            self.answered(size)
            self.close_connection()
            return
        if item is None:  # an AppendBlock held until its end, or Padding
            if isinstance(command, wc.AppendBlock):
                self._block_size += size
            else:
                self.answered(size)
            return
        if isinstance(item, Append):
            held, self._block_size = size + self._block_size, 0
            self._append(item, held, bytes_format=isinstance(command, wc.ConditionalBlockEnd))
            return
        handler = self._handlers.get(type(item))
        if handler is None:
            self._reply(wc.OperationUnsupported(request_id=getattr(item, "request_id", -1),
                                                operation_name=type(item).__name__,
                                                server_stack_trace="not served by Millrace's Pravega listener"), size)
            return
        handler(item, size)

    def lengthLimitExceeded(self, length: int) -> None:  # noqa: N802 - Twisted's name
        log.info("closing Pravega connection from %s: a frame of %d bytes exceeds %d", self._peer_name(), length,
                 self.MAX_LENGTH)
        self.close_connection()

    # -- replies ----------------------------------------------------------------------------------------
    def _reply(self, reply: WireCommand, size: int) -> None:
        if not self._closed:
            self.send(reply.encode())
        self.answered(size)

    def _when_done(self, fut: StoreFuture[T], done: Callable[[StoreFuture[T]], None]) -> None:
        if fut.done():
            done(fut)
        else:
            fut.add_done_callback(lambda f: on_reactor(done, f))

    def _answer(self, fut: StoreFuture[T], size: int, request_id: int, segment: str, doing: str,
                reply: Callable[[T], WireCommand]) -> None:
        """Answer ``reply(result)``, or the error reply Pravega gives the failure."""
        def done(f: StoreFuture[T]) -> None:
            exc = f.exception()
            if exc is None:
                self._reply(reply(f.result()), size)
            else:
                self._reply_error(exc, size, request_id, segment, doing)

        self._when_done(fut, done)

    def _reply_error(self, exc: BaseException, size: int, request_id: int, segment: str, doing: str,
                     offset: int = -1) -> None:
        self._reply(error_reply(exc, request_id, segment, doing, offset), size)

    # -- connection -------------------------------------------------------------------------------------
    def _hello(self, hello: wc.Hello, size: int) -> None:
        self._reply(wc.Hello(high_version=WIRE_VERSION, low_version=OLDEST_COMPATIBLE_VERSION), size)
        if hello.high_version < OLDEST_COMPATIBLE_VERSION or hello.low_version > WIRE_VERSION:
            log.info("closing Pravega connection from %s: it speaks wire versions %d..%d, this server %d..%d",
                     self._peer_name(), hello.low_version, hello.high_version, OLDEST_COMPATIBLE_VERSION,
                     WIRE_VERSION)
            self.close_connection()
            return
        if not self._greeted:
            self._greeted = True
            self.MAX_LENGTH = self._max_body
            self.authenticated()

    def _keep_alive(self, _: wc.KeepAlive, size: int) -> None:
        self._reply(wc.KeepAlive(), size)

    # -- appends ----------------------------------------------------------------------------------------
    def _setup_append(self, setup: wc.SetupAppend, size: int) -> None:
        name, writer_id = setup.segment, setup.writer_id

        def known(f: StoreFuture[SegmentFormat | None]) -> None:
            exc = f.exception()
            if exc is not None:
                self._reply_error(exc, size, setup.request_id, name, "setting up appends")
                return

            def info(g: StoreFuture[SegmentInfo]) -> None:
                error = g.exception()
                if error is not None:
                    self._reply_error(error, size, setup.request_id, name, "setting up appends")
                    return
                last = g.result().attributes.get(str(writer_id), NULL_ATTRIBUTE_VALUE)
                self._writers[writer_id] = _Writer(name, last, last)
                self._reply(wc.AppendSetup(request_id=setup.request_id, segment=name, writer_id=writer_id,
                                           last_event_number=last), size)

            self._when_done(self.store.get_info_future(name), info)

        # The format check first: a Kafka topic's segment refuses a writer at its setup, before any event.
        self._when_done(self.gate.segment_format(name), known)

    def _append(self, append: Append, size: int, bytes_format: bool) -> None:
        writer = self._writers.get(append.writer_id)
        if writer is None or writer.segment != append.segment:
            self._reply(wc.InvalidEventNumber(writer_id=append.writer_id, request_id=append.request_id,
                                              server_stack_trace="no SetupAppend answered for this writer",
                                              event_number=append.event_number), size)
            self.close_connection()
            return
        previous = writer.stored
        writer.stored = append.event_number
        condition = AttributeUpdate(str(append.writer_id), append.event_number, AttributeUpdateType.REPLACE_IF_EQUALS,
                                    None if previous == NULL_ATTRIBUTE_VALUE else previous)
        claim = SegmentFormat.BYTES if bytes_format else SegmentFormat.PRAVEGA_EVENTS
        name = append.segment

        def store() -> StoreFuture[int]:
            return self.gate.append(name, append.data, append.expected_offset, [condition], append.event_count, claim)

        claiming = self._claiming.get(name)
        if claiming is not None:  # wait for the claim before: appends land in the order they came
            fut: StoreFuture[int] = StoreFuture()

            def after(_: StoreFuture[int]) -> None:
                inner = store()
                inner.add_done_callback(lambda f: _relay(f, fut))

            claiming.add_done_callback(after)
        else:
            fut = store()
            if not fut.done() and self.gate.claimed(name) is None:
                self._claiming[name] = fut

                def settled(_: StoreFuture[int]) -> None:
                    if self._claiming.get(name) is fut:
                        del self._claiming[name]

                fut.add_done_callback(lambda f: on_reactor(settled, f))

        def done(f: StoreFuture[int]) -> None:
            exc = f.exception()
            if exc is None:
                offset = f.result()
                if append.event_number > writer.acked:
                    acked, writer.acked = writer.acked, append.event_number
                    self._reply(wc.DataAppended(writer_id=append.writer_id, event_number=append.event_number,
                                                previous_event_number=acked, request_id=append.request_id,
                                                current_segment_write_offset=offset + len(append.data)), size)
                else:
                    self.answered(size)
                return
            if isinstance(exc, BadOffsetError) and append.expected_offset is not None:
                # As Pravega: the connection stays, and the writer's number goes back to what is stored.
                if writer.stored == append.event_number:
                    writer.stored = previous
                self._reply(wc.ConditionalCheckFailed(writer_id=append.writer_id, event_number=append.event_number,
                                                      request_id=append.request_id), size)
                return
            if isinstance(exc, BadAttributeUpdateError):
                # The writer's number is not what this connection stored: another connection of the same
                # writer appended meanwhile. Pravega closes, and the writer sets up again.
                log.info("Pravega writer %s on %s: event number %d refused (%s)", append.writer_id, name,
                         append.event_number, exc)
                self._reply(wc.InvalidEventNumber(writer_id=append.writer_id, request_id=append.request_id,
                                                  server_stack_trace=str(exc), event_number=append.event_number), size)
                self._writers.pop(append.writer_id, None)
                self.close_connection()
                return
            # Nothing was stored: the writer's number here goes back to what the segment holds (appends
            # sent behind this one were conditioned on it, and fail as InvalidEventNumber).
            if writer.stored == append.event_number:
                writer.stored = previous
            self._reply_error(exc, size, append.request_id, name, "appending data", append.event_number)

        self._when_done(fut, done)

    # -- reads and information --------------------------------------------------------------------------
    def _read(self, read: wc.ReadSegment, size: int) -> None:
        name, offset = read.segment, read.offset
        refusal = self.gate.readable(name)
        if refusal is not None:
            # A Kafka topic's segments hold Kafka record batches, Millrace's internal segments its own
            # state: a Pravega reader would take either for garbage events.
            self._reply_error(refusal, size, read.request_id, name, "reading")
            return
        length = max(0, min(read.suggested_length, MAX_READ_BYTES))
        fut = self.gate.read(name, offset, length, TAIL_READ_WAIT_SECONDS)

        def done(f: StoreFuture[ReadResult]) -> None:
            exc = f.exception()
            if exc is None:
                result = f.result()
                self._reply(wc.SegmentRead(segment=name, offset=offset, at_tail=not result.data and not
                                           result.end_of_segment, end_of_segment=result.end_of_segment,
                                           data=result.data, request_id=read.request_id), size)
            elif isinstance(exc, SegmentTruncatedError):
                # The reader is told where the segment starts now.
                def started(g: StoreFuture[SegmentInfo]) -> None:
                    start = g.result().start_offset if g.exception() is None else offset
                    self._reply(wc.SegmentIsTruncated(request_id=read.request_id, segment=name, start_offset=start,
                                                      offset=offset), size)

                self._when_done(self.store.get_info_future(name), started)
            else:
                self._reply_error(exc, size, read.request_id, name, "reading", offset)

        self._when_done(fut, done)

    def _segment_info(self, request: wc.GetStreamSegmentInfo, size: int) -> None:
        name = request.segment_name

        def done(f: StoreFuture[SegmentInfo]) -> None:
            exc = f.exception()
            if isinstance(exc, SegmentNotFoundError):  # as Pravega: an answer, not an error
                self._reply(wc.StreamSegmentInfo(request_id=request.request_id, segment_name=name, exists=False,
                                                 is_sealed=True, is_deleted=True, last_modified=0, write_offset=0,
                                                 start_offset=0), size)
            elif exc is not None:
                self._reply_error(exc, size, request.request_id, name, "getting segment info")
            else:
                info = f.result()
                self._reply(wc.StreamSegmentInfo(
                    request_id=request.request_id, segment_name=name, exists=True, is_sealed=info.sealed,
                    is_deleted=False, last_modified=info.last_modified_ms, write_offset=info.length,
                    start_offset=info.start_offset), size)

        self._when_done(self.store.get_info_future(name), done)

    def _get_attribute(self, request: wc.GetSegmentAttribute, size: int) -> None:
        key = str(request.attribute_id)
        self._answer(self.store.get_info_future(request.segment_name), size, request.request_id,
                     request.segment_name, "getting an attribute",
                     lambda info: wc.SegmentAttribute(request_id=request.request_id,
                                                      value=info.attributes.get(key, NULL_ATTRIBUTE_VALUE)))

    def _update_attribute(self, request: wc.UpdateSegmentAttribute, size: int) -> None:
        key = str(request.attribute_id)
        if request.new_value == NULL_ATTRIBUTE_VALUE:
            update = AttributeUpdate(key, type=AttributeUpdateType.REMOVE)
        else:
            update = AttributeUpdate(key, request.new_value, AttributeUpdateType.REPLACE_IF_EQUALS,
                                     None if request.expected_value == NULL_ATTRIBUTE_VALUE else request.expected_value)
        fut = self.gate.update_attributes(request.segment_name, [update])

        def done(f: StoreFuture[None]) -> None:
            exc = f.exception()
            if exc is None or isinstance(exc, BadAttributeUpdateError):
                self._reply(wc.SegmentAttributeUpdated(request_id=request.request_id, success=exc is None), size)
            else:
                self._reply_error(exc, size, request.request_id, request.segment_name, "updating an attribute")

        self._when_done(fut, done)

    # -- segment lifecycle (through the gate: a stream's segments change only through the stream) -------
    def _create(self, request: wc.CreateSegment, size: int) -> None:
        self._answer(self.gate.create_segment(request.segment), size, request.request_id, request.segment,
                     "creating a segment",
                     lambda _: wc.SegmentCreated(request_id=request.request_id, segment=request.segment))

    def _seal(self, request: wc.SealSegment, size: int) -> None:
        self._answer(self.gate.seal(request.segment), size, request.request_id, request.segment, "sealing",
                     lambda _: wc.SegmentSealed(request_id=request.request_id, segment=request.segment))

    def _truncate(self, request: wc.TruncateSegment, size: int) -> None:
        # A byte stream's segment (Pravega's byte writer truncates with this command) is cut through its
        # stream; any other stream's segment is refused by the gate.
        self._answer(self.gate.truncate_byte_stream(request.segment, request.truncation_offset), size,
                     request.request_id,
                     request.segment, "truncating",
                     lambda _: wc.SegmentTruncated(request_id=request.request_id, segment=request.segment))

    def _delete(self, request: wc.DeleteSegment, size: int) -> None:
        self._answer(self.gate.delete(request.segment), size, request.request_id, request.segment, "deleting",
                     lambda _: wc.SegmentDeleted(request_id=request.request_id, segment=request.segment))

    def _merge(self, request: wc.MergeSegments, size: int) -> None:
        if request.attribute_updates:
            self._reply(wc.OperationUnsupported(request_id=request.request_id, operation_name="mergeSegments",
                                                server_stack_trace="attribute updates with a merge are not served"),
                        size)
            return
        self._answer(self.gate.merge(request.target, request.source), size, request.request_id, request.target,
                     "merging", lambda length: wc.SegmentsMerged(request_id=request.request_id, target=request.target,
                                                                 source=request.source,
                                                                 new_target_write_offset=length))

    # -- table segments (blocking: on the pool) ---------------------------------------------------------
    def _table_command(self, command: TableCommand, size: int) -> None:
        fut: StoreFuture[WireCommand] = StoreFuture()

        def run() -> None:
            try:
                fut.set_result(self.tables.answer(command))
            except Exception as exc:  # noqa: BLE001 - the client's answer
                fut.set_exception(exc)

        self.pool.submit(run)
        self._answer(fut, size, command.request_id, table_segment_of(command), type(command).__name__,
                     lambda reply: reply)

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:  # noqa: N802 - Twisted's name
        super().connectionLost(reason)
        if self._metrics is not None:
            self._metrics.connections.discard(self)
        self._writers.clear()
        self._claiming.clear()


def _relay(source: StoreFuture[T], target: StoreFuture[T]) -> None:
    exc = source.exception()
    if exc is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


def error_reply(exc: BaseException, request_id: int, segment: str, doing: str, offset: int = -1) -> WireCommand:
    """The reply Pravega's segment store gives a failure of ``doing`` (its ``handleException``): the
    specific replies its clients act on, ``OperationUnsupported`` with the reason for a command the
    stream layer refuses, and ``ErrorMessage`` for anything else."""
    if isinstance(exc, SegmentNotFoundError):
        return wc.NoSuchSegment(request_id=request_id, segment=segment, offset=offset)
    if isinstance(exc, SegmentSealedError):
        return wc.SegmentIsSealed(request_id=request_id, segment=segment, offset=offset)
    if isinstance(exc, SegmentExistsError):
        return wc.SegmentAlreadyExists(request_id=request_id, segment=segment)
    if isinstance(exc, WrongHostError | ContainerOfflineError):
        return wc.WrongHost(request_id=request_id, segment=segment, correct_host="")
    if isinstance(exc, FormatViolationError):
        return wc.OperationUnsupported(request_id=request_id, operation_name=doing, server_stack_trace=str(exc))
    if isinstance(exc, OffsetOutOfRangeError):
        return wc.ErrorMessage(request_id=request_id, segment=segment, message=str(exc),
                               error_code=ErrorMessageCode.ILLEGAL_ARGUMENT_EXCEPTION)
    log.error("Pravega request %d (%s %s) failed", request_id, doing, segment, exc_info=exc)
    return wc.ErrorMessage(request_id=request_id, segment=segment, message=f"{doing}: {exc}",
                           error_code=ErrorMessageCode.UNSPECIFIED)


class PravegaSegmentStoreFactory(protocol.ServerFactory):
    """Connections of the Pravega segment store listener, over the stream layer's gate."""

    def __init__(self, gate: SegmentGate, store: SegmentService, tables: TableStore, pool: Executor,
                 connection_budget_bytes: int = DEFAULT_CONNECTION_BUDGET_BYTES,
                 guards: ConnectionGuards | None = None, metrics: ListenerMetrics | None = None) -> None:
        """``pool``: where table commands block; ``metrics``: where connections are counted for /metrics
        (the listener ``PRAVEGA`` of the native listener's metrics: open, paused, budget held)."""
        self.metrics = metrics
        self.gate = gate
        self.store = store
        self.tables = PravegaTables(tables)
        self.pool = pool
        self.connection_budget_bytes = connection_budget_bytes
        self.guards = guards if guards is not None else ConnectionGuards()

    def buildProtocol(self, addr: Any) -> PravegaSegmentStoreProtocol:  # noqa: N802 - Twisted's name
        return PravegaSegmentStoreProtocol(self.gate, self.store, self.tables, self.pool,
                                           self.connection_budget_bytes, self.guards, self.metrics)
