"""One Kafka client connection: framing, decoding, dispatch, and responses in request order.

A request's bytes hold the connection's budget until its response is written (an acks=0 produce:
until its appends are durable); when the budget is full the connection stops reading
(``gateway.framing``)."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Any

from twisted.internet import defer, protocol
from twisted.python.failure import Failure

from millrace.gateway.framing import DEFAULT_CONNECTION_BUDGET_BYTES, BudgetedReceiver
from millrace.gateway.kafka.broker import Broker, RequestContext
from millrace.gateway.kafka.handlers.api_versions import API_VERSIONS, api_versions_response
from millrace.gateway.kafka.registry import NO_RESPONSE, REGISTRY
from millrace.gateway.kafka_protocol.codec import (
    KafkaDecodeError,
    UnsupportedApiError,
    decode_request,
    encode_response_parts,
)
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.primitives import Buffer

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

    __slots__ = ("parts", "ready", "size", "sent_callbacks")

    def __init__(self, size: int) -> None:
        # The encoded response as buffers, written as they are (records stay the views the handler
        # gave): no join of the whole response before the transport's own.
        self.parts: list[Buffer] | None = None
        self.ready = False
        self.size = size  # the request's bytes, held against the connection's budget until answered
        self.sent_callbacks: list[Callable[[], None]] | None = None  # ``RequestContext.when_sent``'s


class KafkaConnection(BudgetedReceiver):
    def __init__(self, broker: Broker, budget_bytes: int) -> None:
        super().__init__(budget_bytes, "kafka-connection")
        self.broker = broker
        self.MAX_LENGTH = broker.config.max_request_bytes
        self._slots: collections.deque[_Slot] = collections.deque()
        self._peer = ""
        # Response bytes the transport has yet to take (``_write_out``), and the ``when_sent`` calls of
        # responses not all sent yet: made once it has sent everything (``resumeProducing``), or the
        # connection is gone
        self._outgoing: collections.deque[Buffer] = collections.deque()
        self._after_send: list[Callable[[], None]] = []

    def connectionMade(self) -> None:  # noqa: N802 - Twisted's name
        # Responses are small and latency-bound: never let Nagle hold one back for a delayed ACK.
        self.tcp.setTcpNoDelay(True)
        peer = self.tcp.getPeer()
        self._peer = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"

    def stringReceived(self, frame: memoryview) -> None:  # noqa: N802 - Twisted's name
        try:
            header, request = decode_request(frame)
        except UnsupportedApiError as exc:
            self._unsupported(exc, len(frame))
            return
        except KafkaDecodeError as exc:
            log.info("closing Kafka connection from %s: undecodable request: %s", self._peer, exc)
            self.tcp.loseConnection()
            return
        handler = REGISTRY.get(header.request_api_key)
        version = header.request_api_version
        if handler is None or not handler.min_version <= version <= handler.max_version:
            # The client ignored ApiVersions: Kafka closes the connection in that case.
            log.info("closing Kafka connection from %s: api %d v%d not implemented",
                     self._peer, header.request_api_key, version)
            self.tcp.loseConnection()
            return
        ctx = RequestContext(self.broker, header.request_api_key, version, header.correlation_id,
                             header.client_id, self._peer)
        slot = _Slot(len(frame))
        self._slots.append(slot)
        try:
            outcome = handler.handle(ctx, request)
        except Exception:  # noqa: BLE001 - a handler bug must not take the broker down
            self._failed(ctx, Failure())
            return
        if isinstance(outcome, defer.Deferred):
            outcome.addCallbacks(self._respond, lambda f: self._failed(ctx, f), callbackArgs=(ctx, slot))
        else:
            self._respond(outcome, ctx, slot)

    def _respond(self, response: Any, ctx: RequestContext, slot: _Slot) -> None:
        if response is not NO_RESPONSE:
            try:
                slot.parts = encode_response_parts(ctx.api_key, ctx.api_version, ctx.correlation_id, response)
            except Exception:  # noqa: BLE001 - a response we cannot encode must not leave the client hanging
                self._failed(ctx, Failure())
                return
        slot.sent_callbacks = ctx.sent_callbacks
        slot.ready = True
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
                self.tcp.write(b"".join(out))
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
        self.tcp.loseConnection()

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
        self.tcp.loseConnection()

    def lengthLimitExceeded(self, length: int) -> None:  # noqa: N802 - Twisted's name
        log.info("closing Kafka connection from %s: request of %d bytes exceeds %d",
                 self._peer, length, self.MAX_LENGTH)
        self.tcp.loseConnection()


class KafkaFactory(protocol.ServerFactory):
    def __init__(self, broker: Broker, connection_budget_bytes: int = DEFAULT_CONNECTION_BUDGET_BYTES) -> None:
        self.broker = broker
        self.connection_budget_bytes = connection_budget_bytes

    def buildProtocol(self, addr: Any) -> KafkaConnection:  # noqa: N802 - Twisted's name
        return KafkaConnection(self.broker, self.connection_budget_bytes)
