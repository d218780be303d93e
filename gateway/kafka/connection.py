"""One Kafka client connection: framing, decoding, dispatch, and responses in request order.

A request's bytes hold the connection's budget until its response is written (an acks=0 produce:
until its appends are durable); when the budget is full the connection stops reading
(``gateway.shared.framing``)."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from time import perf_counter
from typing import Any

from twisted.internet import defer, protocol
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import Broker, RequestContext
from millrace.gateway.kafka.handlers.api_versions import API_VERSIONS, api_versions_response
from millrace.gateway.kafka.outcome import NO_RESPONSE
from millrace.gateway.kafka.registry import REGISTRY
from millrace.gateway.kafka.sessions import KafkaListener, Session
from millrace.gateway.kafka_protocol.codec import (
    KafkaDecodeError,
    UnsupportedApiError,
    decode_request,
    encode_response_parts,
)
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.primitives import Buffer
from millrace.gateway.shared.framing import DEFAULT_CONNECTION_BUDGET_BYTES, BudgetedReceiver

log = logging.getLogger(__name__)

WRITE_CHUNK = 1 << 20  # a response larger than this goes to the transport in pieces of it, as it sends


def _call_all(calls: list[Callable[[], None]]) -> None:
    for fn in calls:
        try:
            fn()
        except Exception:  # noqa: BLE001 - one failing call must not skip the others
            log.exception("a call after a response was sent failed")


class _Slot:
    """A request's place in the connection's response order."""

    __slots__ = ("parts", "ready", "size", "sent_callbacks", "started")

    def __init__(self, size: int, started: float = 0.0) -> None:
        # The encoded response as buffers, written as they are (records stay the views the handler
        # gave): no join of the whole response before the transport's own.
        self.parts: list[Buffer] | None = None
        self.ready = False
        self.size = size  # the request's bytes, held against the connection's budget until answered
        self.sent_callbacks: list[Callable[[], None]] | None = None  # ``RequestContext.when_sent``'s
        self.started = started  # ``perf_counter`` when the request arrived: its latency's start


class KafkaConnection(BudgetedReceiver):
    def __init__(self, broker: Broker, budget_bytes: int, listener: KafkaListener | None = None) -> None:
        super().__init__(budget_bytes, "kafka-connection", broker.guards)
        self.broker = broker
        self.MAX_LENGTH = broker.config.max_request_bytes  # socket.request.max.bytes
        self.listener = listener
        # The session, on a listener with TLS or SASL (None on PLAINTEXT: every request is admitted, by
        # ANONYMOUS, and the hot path checks nothing more). Until it authenticates, frames are held to
        # the listener's pre-authentication limit, and it has millrace.authentication.timeout.ms to.
        self.session: Session | None = None
        if listener is not None and (listener.uses_sasl or listener.ssl is not None):
            self.session = Session(listener, self.close_connection, self._authenticated,
                                   broker.guards.login_failures, self.failed_authentication)
            if listener.uses_sasl:
                self.MAX_LENGTH = listener.max_pre_auth_bytes
        self._slots: collections.deque[_Slot] = collections.deque()
        self._peer = ""
        # Response bytes the transport has yet to take (``_write_out``), and the ``when_sent`` calls of
        # responses not all sent yet: made once it has sent everything (``resumeProducing``), or the
        # connection is gone
        self._outgoing: collections.deque[Buffer] = collections.deque()
        self._after_send: list[Callable[[], None]] = []
        self.on_close: Callable[[], None] | None = None  # what the factory counts, released once closed
        # The listener's request latencies and open connections (/metrics; the PLAINTEXT listener of the
        # server's own configuration when none is given)
        self._metrics = broker.requests.listener(listener.name if listener is not None else "PLAINTEXT")

    def connectionMade(self) -> None:  # noqa: N802 - Twisted's name
        # Responses are small and latency-bound: never let Nagle hold one back for a delayed ACK.
        self.tcp.setTcpNoDelay(True)
        peer = self.tcp.getPeer()
        self._peer = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"
        self._metrics.connections.add(self)
        if self.session is not None:
            self.session.host = str(getattr(peer, "host", ""))
            if not self.session.authenticated:
                self.require_authentication()

    def stringReceived(self, frame: memoryview) -> None:  # noqa: N802 - Twisted's name
        started = perf_counter()
        if self.session is not None and self.session.raw_tokens:
            self._raw_token(self.session, frame)
            return
        try:
            header, request = decode_request(frame)
        except UnsupportedApiError as exc:
            self._unsupported(exc, len(frame))
            return
        except KafkaDecodeError as exc:
            log.info("closing Kafka connection from %s: undecodable request: %s", self._peer, exc)
            self.close_connection()
            return
        session = self.session
        if session is not None and not self._admitted(session, header.request_api_key):
            return
        handler = REGISTRY.get(header.request_api_key)
        version = header.request_api_version
        if handler is None or not handler.min_version <= version <= handler.max_version:
            # The client ignored ApiVersions: Kafka closes the connection in that case.
            log.info("closing Kafka connection from %s: api %d v%d not implemented",
                     self._peer, header.request_api_key, version)
            self.close_connection()
            return
        ctx = RequestContext(self.broker, header.request_api_key, version, header.correlation_id,
                             header.client_id, self._peer, self.listener, session)
        slot = _Slot(len(frame), started)
        self._slots.append(slot)
        quotas = self.broker.quotas
        try:
            if quotas.active:  # a quota is configured: measure and throttle (none: this test is all it costs)
                outcome = quotas.handle(ctx, handler.handle, request, len(frame), self.mute_until)
            else:
                outcome = handler.handle(ctx, request)
        except Exception:  # noqa: BLE001 - a handler bug must not take the broker down
            self._failed(ctx, Failure())
            return
        if isinstance(outcome, defer.Deferred):
            outcome.addCallbacks(self._respond, lambda f: self._failed(ctx, f), callbackArgs=(ctx, slot))
        else:
            self._respond(outcome, ctx, slot)

    def _admitted(self, session: Session, api_key: int) -> bool:
        """Whether the session lets this request through; closes the connection if not (Kafka's answer
        to a request before authentication, or after the session's lifetime without re-authenticating)."""
        if not session.certificate_read:
            # The TLS handshake is done once a request has arrived: the client's certificate is known.
            try:
                session.peer_certificate(getattr(self.transport, "getPeerCertificate", lambda: None)())
            except ValueError as e:  # no ssl.principal.mapping.rules rule names it: Kafka refuses it
                log.info("closing Kafka connection from %s: its certificate maps to no principal: %s", self._peer, e)
                self.close_connection()
                return False
        if session.admits(api_key):
            return True
        name = REGISTRY[api_key].name if api_key in REGISTRY else f"api {api_key}"
        log.info("closing Kafka connection from %s: %s %s", self._peer, name,
                 "after its session expired" if session.authenticated else "before it authenticated")
        self.close_connection()
        return False

    def _raw_token(self, session: Session, frame: memoryview) -> None:
        """One message of a SASL exchange begun by SaslHandshake v0: a bare frame, answered by one (after
        the responses before it); a failure closes the connection, which is all v0 can say."""
        try:
            answer, _ = session.authenticate(frame)
        except Exception as e:  # noqa: BLE001 - the mechanism's refusal, or a message out of turn
            log.info("SASL authentication from %s failed: %s", self._peer, getattr(e, "reason", e))
            delay = self.failed_authentication()
            if delay > 0:
                self._clock.callLater(delay, lambda: None if self._closed else self.close_connection())
            else:
                self.close_connection()
            return
        slot = _Slot(len(frame))
        slot.parts = [len(answer).to_bytes(4, "big"), answer]
        slot.ready = True
        self._slots.append(slot)
        self._flush()

    def _authenticated(self) -> None:
        """The session authenticated: the next frame may be as large as any request (the length of a
        frame is checked as it starts, so this must not wait for the next request)."""
        self.MAX_LENGTH = self.broker.config.max_request_bytes
        self.authenticated()


    def _respond(self, response: Any, ctx: RequestContext, slot: _Slot) -> None:
        if response is not NO_RESPONSE:
            try:
                slot.parts = encode_response_parts(ctx.api_key, ctx.api_version, ctx.correlation_id, response)
            except Exception:  # noqa: BLE001 - a response we cannot encode must not leave the client hanging
                self._failed(ctx, Failure())
                return
        slot.sent_callbacks = ctx.sent_callbacks
        slot.ready = True
        # Kafka's RequestMetrics, once per request: from its arrival to its response ready to write.
        latency = self._metrics.latency.get(ctx.api_key) or self._metrics.histogram(ctx.api_key)
        latency.observe(perf_counter() - slot.started)
        self._flush()

    def _flush(self) -> None:
        out: list[Buffer] = []
        sent: list[Callable[[], None]] = []
        slots = self._slots
        while slots and slots[0].ready:
            slot = slots.popleft()
            if slot.parts is not None:
                out.extend(slot.parts)
            if slot.sent_callbacks is not None:
                sent += slot.sent_callbacks
            self.answered(slot.size)
        if out:
            if self._outgoing or sum(map(len, out)) > WRITE_CHUNK:
                self._outgoing.extend(out)
                self._write_out()
            else:
                # One buffer for everything ready: the transport joins its pending buffers before it sends
                # anyway, and one write spares its per-buffer checks (a small response has a dozen parts).
                self.send(b"".join(out))
        if sent:
            if self._outgoing or (self._send_wait and not self._closed):  # not all of it is sent yet
                self._after_send += sent
            else:
                _call_all(sent)

    def _write_out(self) -> None:
        """Hand queued response bytes to the transport, ``WRITE_CHUNK`` at a time, while it takes them: the
        transport joins what it holds into one buffer, so a large response written whole would be held
        twice (its parts, often views of store reads, and the joined copy) until the client read it."""
        outgoing = self._outgoing
        while outgoing and not self._send_wait and not self._closed:
            chunk: list[Buffer] = []
            room = WRITE_CHUNK
            while outgoing and room > 0:
                part = outgoing.popleft()
                if len(part) > room:
                    view = memoryview(part)
                    chunk.append(view[:room])
                    outgoing.appendleft(view[room:])
                    break
                chunk.append(part)
                room -= len(part)
            self.tcp.write(b"".join(chunk))  # the transport pauses us (``_send_wait``) once it holds enough
        if self._closed:
            outgoing.clear()

    def resumeProducing(self) -> None:  # noqa: N802 - Twisted's name
        """The transport sent every byte it held."""
        super().resumeProducing()
        self._write_out()
        if self._after_send and not self._outgoing and not self._send_wait:
            sent, self._after_send = self._after_send, []
            _call_all(sent)

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:  # noqa: N802 - Twisted's name
        super().connectionLost(reason)
        self._metrics.connections.discard(self)
        if self.on_close is not None:
            self.on_close()
            self.on_close = None
        # What waited for the transport will never be sent; responses still to come find the
        # connection closed and make their calls at once (``_flush``).
        self._outgoing.clear()
        sent, self._after_send = self._after_send, []
        _call_all(sent)

    def _failed(self, ctx: RequestContext, failure: Failure) -> None:
        log.error("Kafka %s v%d from %s failed; closing the connection\n%s",
                  REGISTRY[ctx.api_key].name, ctx.api_version, self._peer, failure.getTraceback())
        if ctx.sent_callbacks:
            _call_all(ctx.sent_callbacks)  # it will never be sent
            ctx.sent_callbacks = None
        self.close_connection()

    def _unsupported(self, exc: UnsupportedApiError, size: int) -> None:
        if exc.api_key == API_VERSIONS and exc.correlation_id is not None:
            # A client newer than us: answer with a v0 body listing what we do support (as Kafka does).
            slot = _Slot(size)
            slot.parts = encode_response_parts(API_VERSIONS, 0, exc.correlation_id,
                                               api_versions_response(ErrorCode.UNSUPPORTED_VERSION))
            slot.ready = True
            self._slots.append(slot)
            self._flush()
            return
        log.info("closing Kafka connection from %s: %s", self._peer, exc)
        self.close_connection()

    def lengthLimitExceeded(self, length: int) -> None:  # noqa: N802 - Twisted's name
        log.info("closing Kafka connection from %s: request of %d bytes exceeds %d",
                 self._peer, length, self.MAX_LENGTH)
        self.close_connection()


class ConnectionLimit:
    """Kafka's ``max.connections.per.ip``: the connections one client address may hold open over every
    Kafka listener; one more is closed as it arrives (a client cannot exhaust the server's sockets)."""

    def __init__(self, per_address: int) -> None:
        self.per_address = per_address
        self._open: collections.Counter[str] = collections.Counter()

    def admit(self, host: str) -> bool:
        if self._open[host] >= self.per_address:
            return False
        self._open[host] += 1
        return True

    def release(self, host: str) -> None:
        self._open[host] -= 1
        if self._open[host] <= 0:
            del self._open[host]


class KafkaFactory(protocol.ServerFactory):
    """A Kafka listener's connections (``listener`` None: the PLAINTEXT listener of the server's own
    configuration, advertised as ``KafkaConfig`` says), within ``limit`` per client address if given."""

    def __init__(self, broker: Broker, connection_budget_bytes: int = DEFAULT_CONNECTION_BUDGET_BYTES,
                 listener: KafkaListener | None = None, limit: ConnectionLimit | None = None) -> None:
        self.broker = broker
        self.connection_budget_bytes = connection_budget_bytes
        self.listener = listener
        self.limit = limit

    def buildProtocol(self, addr: Any) -> KafkaConnection | None:  # noqa: N802 - Twisted's name
        limit = self.limit
        if limit is None:
            return KafkaConnection(self.broker, self.connection_budget_bytes, self.listener)
        host = str(getattr(addr, "host", ""))
        if not limit.admit(host):
            log.info("refusing a Kafka connection from %s: it has %d open (max.connections.per.ip)", host,
                     limit.per_address)
            return None  # Twisted closes the connection at once
        connection = KafkaConnection(self.broker, self.connection_budget_bytes, self.listener)
        connection.on_close = lambda: limit.release(host)
        return connection
