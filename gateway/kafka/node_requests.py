"""Kafka requests from one cluster node to another node's Kafka listener.

Used where a node hands work to the node that serves it: transaction markers and transactional offset
commits (``transactions/``), an auto-creation asked of the controller (``resolve``), topic config changes
forwarded to the controller (``handlers/configs``). Every node's advertised Kafka listener is in the
cluster view already, and these are the requests Kafka's own brokers send each other.

Each request runs on the reactor, on a connection of its own, with a timeout: a paused node ties up no
worker thread (the worker pool also carries the node's table writes).
"""

from __future__ import annotations

import struct
from typing import Any

from twisted.internet import defer, protocol
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure

from millrace.gateway.kafka_protocol.codec import decode_response, encode_request

SEND_TIMEOUT_SECONDS = 10.0


class _OneRequest(protocol.Protocol):
    """A connection that sends one Kafka request frame and fires ``done`` with the response frame."""

    def __init__(self, frame: bytes) -> None:
        self.frame = frame
        self.buffer = bytearray()
        # Cancelling (a timeout) aborts the connection.
        self.done: defer.Deferred[bytes] = defer.Deferred(lambda _: self._abort())

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    def connectionMade(self) -> None:  # noqa: N802 - Twisted's name
        assert self.transport is not None
        self.transport.write(self.frame)

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 - Twisted's name
        self.buffer += data
        if len(self.buffer) < 4:
            return
        (size,) = struct.unpack_from(">i", self.buffer)
        if len(self.buffer) >= 4 + size and not self.done.called:
            assert self.transport is not None
            self.transport.loseConnection()
            self.done.callback(bytes(self.buffer[4:4 + size]))

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802 - Twisted's name
        if not self.done.called:
            self.done.errback(ConnectionError(f"the node closed the connection: {reason.getErrorMessage()}"))


def request_node(host: str, port: int, request: Any, version: int, client_id: str,
                 timeout: float = SEND_TIMEOUT_SECONDS) -> defer.Deferred[Any]:
    """Reactor: one Kafka request to another node's Kafka listener, on a connection of its own; fires
    with the response (errbacks if the node cannot be reached or does not answer within ``timeout``:
    no worker thread waits on a node that is paused)."""
    from twisted.internet import reactor

    one = _OneRequest(encode_request(request.API_KEY, version, 1, request, client_id=client_id))
    connected = connectProtocol(TCP4ClientEndpoint(reactor, host, port, timeout=int(timeout) or 1), one)

    def sent(_: Any) -> defer.Deferred[bytes]:
        return one.done

    d = connected.addCallback(sent)
    d.addTimeout(timeout, reactor)
    return d.addCallback(lambda frame: decode_response(request.API_KEY, version, frame)[1])
