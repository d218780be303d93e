"""The native listener: one Twisted protocol per connection, dispatching to the segment store.

A request's bytes (and an append's, until durable) hold the connection's budget until its reply is
written; when the budget is full the connection stops reading (``gateway.shared.framing``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from time import perf_counter
from typing import Any, Protocol

from twisted.internet import defer, protocol
from twisted.python.failure import Failure

from millrace.gateway.native.controller_commands import PartitionsOf, controller_handlers
from millrace.gateway.native.dispatch import Handlers, handlers, serve
from millrace.gateway.native.event_commands import event_handlers
from millrace.gateway.native.host import NativeHost
from millrace.gateway.native.security import NativeSecurity, NativeSession
from millrace.gateway.native.table_commands import Answer, table_handlers
from millrace.gateway.native.txn_commands import txn_handlers
from millrace.gateway.shared.framing import DEFAULT_CONNECTION_BUDGET_BYTES, BudgetedReceiver
from millrace.gateway.shared.limits import ConnectionGuards
from millrace.gateway.shared.request_metrics import ListenerMetrics, RequestMetrics
from millrace.protocol import messages as m
from millrace.protocol.contracts import AttributeUpdate, ReadResult
from millrace.protocol.errors import AuthenticationError, UnknownCommandError, error_details, status_of
from millrace.protocol.messages import decode_request
from millrace.protocol.wire import (
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    Status,
    WireError,
    decode_body,
    encode_frame,
)
from millrace.store.containers.rates import SegmentRates
from millrace.store.contracts import SegmentService
from millrace.store.controller import Controller
from millrace.store.controller.kvtables import KeyValueTables
from millrace.store.futures import StoreFuture, mapped
from millrace.streams.futures import on_reactor
from millrace.streams.scaling import StreamScaling
from millrace.streams.segment_gate import SegmentGate

log = logging.getLogger(__name__)


def _rates_reply(rates: SegmentRates) -> m.SegmentRatesReply:
    return m.SegmentRatesReply(windows=rates.windows, events_per_s=rates.events_per_s,
                               bytes_per_s=rates.bytes_per_s, age_s=rates.age_s)


def _header_of(value: object) -> m.Header | None:
    """The reply header of a handler's answer: a reply message, a header relayed as is (a forwarded
    request's answer, a stream's description), or nothing."""
    if value is None:
        return None
    if isinstance(value, dict):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return m.to_header(value)
    raise TypeError(f"a handler answered {type(value).__name__}, which is no reply")


class NativeProtocol(BudgetedReceiver):
    MAX_LENGTH = MAX_FRAME_BYTES

    def __init__(self, store: SegmentService, controller_commands: Handlers,
                 budget_bytes: int = DEFAULT_CONNECTION_BUDGET_BYTES, security: NativeSecurity | None = None,
                 metrics: ListenerMetrics | None = None, guards: ConnectionGuards | None = None,
                 segments: SegmentCommands | None = None) -> None:
        """``segments``: what serves the raw segment commands, the stream layer's ``SegmentGate`` on a
        client listener; the store itself (the default) only on a cluster's peer listener, whose other
        side is a node's own stream layer."""
        super().__init__(budget_bytes, "native-connection", guards)
        # The protocol's own bound, lowered by socket.request.max.bytes where that is smaller
        self._max_frame = MAX_FRAME_BYTES if guards is None else min(
            MAX_FRAME_BYTES, guards.limits.socket_request_max_bytes)
        self.MAX_LENGTH = self._max_frame
        self._pre_auth_limit = False  # frames held to sasl.server.max.receive.size until authenticated
        self.store = store
        if segments is None:
            segments = store
        # The listener's request latencies and open connections (/metrics; None: not counted). A request
        # in flight is (command, ``perf_counter`` at arrival) by its id until its reply is written.
        self._metrics = metrics
        self._started: dict[int, tuple[int, float]] = {}
        # With TLS, SASL or an authorizer (``security.py``): the connection's session, made once connected.
        # None otherwise: every request is served, and the hot path tests only that.
        self._security = security if security is not None and security.active else None
        self.session: NativeSession | None = None
        self._handlers: Handlers = {
            # One server serves every segment; a cluster node's controller_commands answer with the owner.
            **handlers(
                serve(m.GetSegmentOwner, lambda r, p: m.SegmentOwnerReply(
                    container=store.container_id_of(r.segment))),
                # A cluster node's HELLO also names every node (``cluster_server``).
                serve(m.Hello, lambda r, p: m.HelloReply(version=PROTOCOL_VERSION)),
            ),
            **controller_commands,
            **segment_handlers(segments),
            **handlers(
                # Queries in their never-blocking forms: a cluster node's router asks another node.
                serve(m.GetSegmentInfo, lambda r, p: store.get_info_future(r.segment)),
                serve(m.ListSegments, lambda r, p: mapped(store.list_segments_future(),
                                                          lambda names: m.SegmentsReply(segments=tuple(names)))),
                serve(m.GetSegmentRates, lambda r, p: mapped(store.segment_rates_future(r.segment), _rates_reply)),
            ),
        }

    def connectionMade(self) -> None:  # noqa: N802 - Twisted's name
        # Responses are small and latency-bound: never let Nagle hold one back for a delayed ACK.
        self.tcp.setTcpNoDelay(True)
        if self._security is not None:
            peer = self.tcp.getPeer()
            self.session = NativeSession(self._security, str(getattr(peer, "host", "")), self.close_connection)
            # Until it authenticated (or, where it need not, its TLS handshake is done), frames no larger
            # than sasl.server.max.receive.size, and only so long to do it
            self.MAX_LENGTH = min(self._max_frame, self._security.max_pre_auth_bytes)
            self._pre_auth_limit = True
            if self.session.must_authenticate:
                self.require_authentication()
        if self._metrics is not None:
            self._metrics.connections.add(self)

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:  # noqa: N802 - Twisted's name
        super().connectionLost(reason)
        if self._metrics is not None:
            self._metrics.connections.discard(self)

    def stringReceived(self, body: memoryview) -> None:  # noqa: N802 - Twisted's name
        size = len(body)
        started = perf_counter()
        try:
            code, request_id, header, payload = decode_body(body)
        except WireError as exc:
            log.info("closing native connection from %s: %s", self.tcp.getPeer(), exc)
            self.close_connection()
            return
        if self._metrics is not None:
            self._started[request_id] = (code, started)
        try:
            request = decode_request(code, header)
            session, listing = self.session, None
            if session is not None:  # TLS, SASL or ACLs: who the client is, and whether it may do this
                listing = self._secured(session, request, request_id, size, payload)
                if listing is _ANSWERED:
                    return
            handler = self._handlers.get(request.command)
            if handler is None:
                raise UnknownCommandError(f"command {request.command.name} is not served here")
            # The payload's one copy (the frame is a view of what the socket read); the container
            # keeps this very object.
            outcome = handler(request, bytes(payload))
            if session is not None and listing is not None:  # a list: what the principal may describe
                outcome = _deferred_outcome(outcome).addCallback(listing)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an error status
            self._reply_exception(request_id, size, exc)
            return
        if isinstance(outcome, defer.Deferred):  # reactor-side work (event appends): fires on the reactor
            outcome.addCallbacks(lambda value: self._reply_value(request_id, size, value),
                                 lambda failure: self._reply_failure(request_id, size, failure))
        elif isinstance(outcome, StoreFuture):
            if outcome.done():  # e.g. a read served from the cache: answer in this reactor turn
                self._reply_future(request_id, size, outcome)
            else:
                outcome.add_done_callback(lambda f: on_reactor(self._reply_future, request_id, size, f))
        else:
            self._reply_value(request_id, size, outcome)

    def lengthLimitExceeded(self, length: int) -> None:  # noqa: N802 - Twisted's name
        log.info("closing native connection: frame of %d bytes exceeds %d", length, self.MAX_LENGTH)
        self.close_connection()

    def _secured(self, session: NativeSession, request: m.Request, request_id: int, size: int,
                 payload: memoryview | bytes) -> Any:
        """The session's part of a request: authentication commands answered here (``_ANSWERED``), the
        others admitted (the answer's filter, for a listing, else None) or refused by raising."""
        try:
            session.peer_certificate(self.transport)
        except ValueError as exc:  # no ssl.principal.mapping.rules rule names the certificate
            log.info("closing native connection: its certificate maps to no principal: %s", exc)
            raise AuthenticationError("the client certificate maps to no principal") from None
        if self._pre_auth_limit and (session.authenticated or not session.must_authenticate):
            # Authenticated by its certificate, or on a listener that needs no login: the TLS handshake
            # is done (a request arrived), so large frames may come.
            self._lift_pre_auth_limit()
        if isinstance(request, m.AuthHandshake):
            self._reply_value(request_id, size, session.handshake(request))
            return _ANSWERED
        if isinstance(request, m.Authenticate):
            reply, answer = session.authenticate(bytes(payload))
            if reply.complete:
                self._lift_pre_auth_limit()
            self._reply_value(request_id, size, Answer(reply, answer))
            return _ANSWERED
        if isinstance(request, m.Hello) and self._security is not None:
            hello = self._handlers[request.command](request, b"")
            assert isinstance(hello, m.HelloReply)
            self._reply_value(request_id, size, dataclasses.replace(
                hello, mechanisms=self._security.sasl_mechanisms, authentication=session.must_authenticate))
            return _ANSWERED
        return session.admit(request)

    def _lift_pre_auth_limit(self) -> None:
        self.MAX_LENGTH = self._max_frame
        self._pre_auth_limit = False
        self.authenticated()

    def _reply_future(self, request_id: int, size: int, fut: StoreFuture) -> None:
        exc = fut.exception()
        if exc is not None:
            self._reply_exception(request_id, size, exc)
        else:
            self._reply_value(request_id, size, fut.result())

    def _reply_failure(self, request_id: int, size: int, failure: Failure) -> None:
        exc = failure.value
        self._reply_exception(request_id, size, exc if exc is not None else RuntimeError(failure.getErrorMessage()))

    def _reply(self, request_id: int, frame: bytes, size: int) -> None:
        """Write a reply; the request's ``size`` bytes stop holding the budget."""
        metrics = self._metrics
        if metrics is not None:
            arrived = self._started.pop(request_id, None)
            if arrived is not None:  # from arrival to its reply written, once per request
                code, started = arrived
                latency = metrics.latency.get(code) or metrics.histogram(code)
                latency.observe(perf_counter() - started)
        self.send(frame)
        self.answered(size)

    def _reply_value(self, request_id: int, size: int, value: object) -> None:
        if isinstance(value, ReadResult):
            reply = m.ReadReply(offset=value.offset, end_of_segment=value.end_of_segment)
            frame = encode_frame(Status.OK, request_id, m.to_header(reply), value.data)
        elif isinstance(value, Answer):
            frame = encode_frame(Status.OK, request_id, _header_of(value.header), value.payload)
        elif isinstance(value, int) and not isinstance(value, bool):  # an append's offset, a seal's length
            frame = encode_frame(Status.OK, request_id, m.to_header(m.ValueReply(value=value)))
        else:
            frame = encode_frame(Status.OK, request_id, _header_of(value))
        self._reply(request_id, frame, size)

    def _reply_exception(self, request_id: int, size: int, exc: BaseException) -> None:
        status = status_of(exc)
        if status == Status.INTERNAL_ERROR:
            log.error("native request %d failed", request_id, exc_info=exc)
        if status == Status.AUTHENTICATION_FAILED and self.session is not None:
            # Answered once, then the connection ends (Kafka's SaslServerAuthenticator), both after
            # connection.failed.authentication.delay.ms with nothing read meanwhile.
            delay = self.failed_authentication()
            if delay > 0:
                self._clock.callLater(delay, self._refuse_login, request_id, size, str(exc), error_details(exc))
            else:
                self._refuse_login(request_id, size, str(exc), error_details(exc))
            return
        self._reply_error(request_id, size, status, str(exc) or type(exc).__name__, error_details(exc))

    def _refuse_login(self, request_id: int, size: int, message: str, details: dict | None) -> None:
        if self._closed:  # the client left meanwhile
            return
        self._reply_error(request_id, size, Status.AUTHENTICATION_FAILED, message or "authentication failed", details)
        self.close_connection()

    def _reply_error(self, request_id: int, size: int, status: Status, message: str,
                     extra: dict | None = None) -> None:
        self._reply(request_id, encode_frame(status, request_id, {"error": message, **(extra or {})}), size)


class SegmentCommands(Protocol):
    """What serves the raw segment commands: the store, or the stream layer's gate in front of it."""

    def create_segment(self, name: str, attributes: dict[str, int] | None = None) -> StoreFuture[None]: ...

    def append(self, name: str, data: bytes, expected_offset: int | None = None,
               attributes: Sequence[AttributeUpdate] = (), events: int = 1) -> StoreFuture[int]: ...

    def read(self, name: str, offset: int, max_length: int, wait_timeout: float = 0.0) -> StoreFuture[ReadResult]: ...

    def seal(self, name: str) -> StoreFuture[int]: ...

    def truncate(self, name: str, offset: int) -> StoreFuture[None]: ...

    def delete(self, name: str) -> StoreFuture[None]: ...

    def merge(self, target: str, source: str) -> StoreFuture[int]: ...

    def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> StoreFuture[None]: ...


def segment_handlers(segments: SegmentCommands) -> Handlers:
    return handlers(
        serve(m.CreateSegment, lambda r, p: segments.create_segment(r.segment, r.attributes)),
        serve(m.AppendToSegment, lambda r, p: segments.append(
            r.segment, p, r.expected_offset, list(r.attributes), r.events)),
        serve(m.ReadSegment, lambda r, p: segments.read(r.segment, r.offset, r.max_length, r.wait_ms / 1000)),
        serve(m.SealSegment, lambda r, p: segments.seal(r.segment)),
        serve(m.TruncateSegment, lambda r, p: segments.truncate(r.segment, r.offset)),
        serve(m.DeleteSegment, lambda r, p: segments.delete(r.segment)),
        serve(m.MergeIntoSegment, lambda r, p: segments.merge(r.target, r.source)),
        serve(m.UpdateSegmentAttributes, lambda r, p: segments.update_attributes(r.segment, list(r.attributes))),
    )


_ANSWERED = object()  # a request the session answered itself


def _deferred_outcome(outcome: object) -> defer.Deferred[Any]:
    """A handler's outcome as a Deferred firing on the reactor."""
    if isinstance(outcome, defer.Deferred):
        return outcome
    if isinstance(outcome, StoreFuture):
        d: defer.Deferred[Any] = defer.Deferred()

        def done(f: StoreFuture) -> None:
            exc = f.exception()
            if exc is not None:
                d.errback(exc)
            else:
                d.callback(f.result())

        outcome.add_done_callback(lambda f: on_reactor(done, f))
        return d
    return defer.succeed(outcome)


class NativeFactory(protocol.ServerFactory):
    def __init__(self, store: SegmentService, controller: Controller, pool: ThreadPoolExecutor, scaler: StreamScaling,
                 partitions_of: PartitionsOf | None = None,
                 connection_budget_bytes: int = DEFAULT_CONNECTION_BUDGET_BYTES,
                 broker: NativeHost | None = None, transactions: bool = True,
                 security: NativeSecurity | None = None, guards: ConnectionGuards | None = None) -> None:
        """``broker``: the Kafka gateway whose partition storage takes native event appends (None: the
        listener serves no event writers); ``transactions``: serve its native transactions here (a
        cluster node installs the cluster's own handlers instead: ``txn_cluster``)."""
        self.store = store
        # Every raw segment command and every stream-level change of a client passes the stream layer's
        # format rules, super users' included.
        self.segments = SegmentGate(store, broker.topics if broker is not None else None, scaler.scope, controller,
                                    pool)
        self.controller_commands: Handlers = {
            **controller_handlers(controller, pool, scaler, self.segments, partitions_of,
                                  broker.topics.delete_stream if broker is not None else None),
            **table_handlers(KeyValueTables(controller), controller.tables, pool),
            **(event_handlers(broker) if broker is not None else {}),
            **(txn_handlers(broker) if broker is not None and transactions else {}),
        }
        self.connection_budget_bytes = connection_budget_bytes
        self.security = security  # None: PLAINTEXT, no ACLs
        self.guards = guards if guards is not None else ConnectionGuards()  # shared with the other listeners
        self.requests = RequestMetrics()  # its connections' latencies and the open ones, for /metrics
        self.requests.listener("NATIVE")  # reported from the start, with no connection yet

    def buildProtocol(self, addr: Any) -> NativeProtocol:  # noqa: N802 - Twisted's name
        return NativeProtocol(self.store, self.controller_commands, self.connection_budget_bytes, self.security,
                              self.requests.listener("NATIVE"), self.guards, self.segments)
