"""Kafka requests from one cluster node to another node's Kafka listener (and from ``millrace users``
to a server's).

Used where a node hands work to the node that serves it: transaction markers and transactional offset
commits (``transactions/``), an auto-creation asked of the controller (``resolve``), topic config changes
forwarded to the controller (``handlers/configs``). Every node's advertised Kafka listeners are in the
cluster view already, and these are the requests Kafka's own brokers send each other.

Which listener a node dials, and how it proves who it is there, is the ``NodeLink``: Kafka's
``inter.broker.listener.name``, with TLS and SASL (``sasl.mechanism.inter.broker.protocol`` and the
``username``/``password`` of that listener's JAAS entry) as the listener demands. With an authorizer on,
that principal is what the other node authorizes (a super user, as Kafka's brokers are).

Each request runs on the reactor, on a connection of its own, with a timeout: a paused node ties up no
worker thread (the worker pool also carries the node's table writes). On a SASL listener the connection
authenticates first (SaslHandshake, SaslAuthenticate): a few round trips, for requests that are rare next
to clients' own.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twisted.internet import defer, protocol
from twisted.internet.endpoints import SSL4ClientEndpoint, TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure

from millrace.gateway.kafka_protocol.codec import decode_response, encode_request
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from millrace.gateway.kafka_protocol.messages.sasl_handshake import SaslHandshakeRequest
from millrace.gateway.security.sasl_client import SaslLogin
from millrace.protocol.sasl import SaslClientError

if TYPE_CHECKING:
    from twisted.internet.interfaces import IOpenSSLClientConnectionCreator

    from millrace.gateway.kafka.nodes import KafkaNode, NodeDirectory

SEND_TIMEOUT_SECONDS = 10.0
_HANDSHAKE_VERSION = 1  # v1: the exchange goes on in SaslAuthenticate requests
_AUTHENTICATE_VERSION = 2


class NodeAuthenticationError(ConnectionError):
    """The other node refused this node's inter-broker login (never naming the password)."""


@dataclass(frozen=True)
class NodeLink:
    """How this node dials the others' Kafka listeners: which listener (None: the first each registered),
    TLS (a connection creator per host name) and SASL as that listener demands."""

    listener: str | None = None
    tls: Callable[[str], IOpenSSLClientConnectionCreator] | None = None
    sasl: SaslLogin | None = None


PLAINTEXT_LINK = NodeLink()


@dataclass
class Peers:
    """How this node reaches the other nodes: who leads what (None: in one process this node is all of
    them) and how to dial them. Set by the cluster server once it knows them."""

    directory: NodeDirectory | None = None
    link: NodeLink = PLAINTEXT_LINK


class _Frames(protocol.Protocol):
    """A client connection exchanging Kafka frames one at a time: ``send`` fires with the next frame."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self._waiting: defer.Deferred[bytes] | None = None
        self._lost: Failure | None = None

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    def send(self, frame: bytes) -> defer.Deferred[bytes]:
        if self._lost is not None:
            return defer.fail(self._lost)
        assert self.transport is not None and self._waiting is None
        self._waiting = defer.Deferred()
        self.transport.write(frame)
        return self._waiting

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 - Twisted's name
        self.buffer += data
        if len(self.buffer) < 4 or self._waiting is None:
            return
        (size,) = struct.unpack_from(">i", self.buffer)
        if len(self.buffer) >= 4 + size:
            frame = bytes(self.buffer[4:4 + size])
            del self.buffer[:4 + size]
            waiting, self._waiting = self._waiting, None
            waiting.callback(frame)

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802 - Twisted's name
        self._lost = Failure(ConnectionError(f"the node closed the connection: {reason.getErrorMessage()}"))
        if self._waiting is not None:
            waiting, self._waiting = self._waiting, None
            waiting.errback(self._lost)


def _call(frames: _Frames, request: Any, version: int, client_id: str) -> defer.Deferred[Any]:
    frame = encode_request(request.API_KEY, version, 1, request, client_id=client_id)
    return frames.send(frame).addCallback(lambda answer: decode_response(request.API_KEY, version, answer)[1])


@defer.inlineCallbacks
def _authenticate(frames: _Frames, login: SaslLogin, client_id: str) -> Generator[Any, Any, None]:
    """SaslHandshake, then the mechanism's messages in SaslAuthenticate requests (KIP-152)."""
    handshake = yield _call(frames, SaslHandshakeRequest(mechanism=login.mechanism), _HANDSHAKE_VERSION, client_id)
    if handshake.error_code != ErrorCode.NONE:
        raise NodeAuthenticationError(f"the node does not enable {login.mechanism} on this listener "
                                      f"(it enables {', '.join(handshake.mechanisms)})")
    client = login.client()
    message: bytes | None = client.first()
    while message is not None:
        answer = yield _call(frames, SaslAuthenticateRequest(auth_bytes=message), _AUTHENTICATE_VERSION, client_id)
        if answer.error_code != ErrorCode.NONE:
            raise NodeAuthenticationError(f"the node refused this node's {login.mechanism} login as "
                                          f"{login.username}: {answer.error_message}")
        try:
            message = client.answer(answer.auth_bytes)
        except SaslClientError as e:
            raise NodeAuthenticationError(str(e)) from None


def request_node(link: NodeLink, node: KafkaNode, request: Any, version: int, client_id: str,
                 timeout: float = SEND_TIMEOUT_SECONDS) -> defer.Deferred[Any]:
    """Reactor: one Kafka request to another node's Kafka listener (``link``'s), on a connection of its
    own; fires with the response (errbacks if the node cannot be reached, refuses this node's login, or
    does not answer within ``timeout``: no worker thread waits on a node that is paused)."""
    return request_address(link, *node.on(link.listener), request, version, client_id, timeout)


def request_address(link: NodeLink, host: str, port: int, request: Any, version: int, client_id: str,
                    timeout: float = SEND_TIMEOUT_SECONDS) -> defer.Deferred[Any]:
    """Reactor: ``request_node`` to the Kafka listener at ``host:port``, with ``link``'s TLS and login."""
    from twisted.internet import reactor

    frames = _Frames()
    endpoint = (TCP4ClientEndpoint(reactor, host, port, timeout=int(timeout) or 1) if link.tls is None else
                SSL4ClientEndpoint(reactor, host, port, link.tls(host), timeout=int(timeout) or 1))

    @defer.inlineCallbacks
    def exchange(_: Any) -> Generator[Any, Any, Any]:
        try:
            if link.sasl is not None:
                yield _authenticate(frames, link.sasl, client_id)
            return (yield _call(frames, request, version, client_id))
        finally:
            if frames.transport is not None:
                frames.transport.loseConnection()

    connecting = connectProtocol(endpoint, frames)

    def cancel(_: defer.Deferred[Any]) -> None:  # a timeout: stop connecting, or abort the connection
        connecting.cancel()
        frames.abort()

    def settle(result: Any) -> None:
        if not d.called:  # not after a timeout
            d.callback(result)  # a Failure runs d's errbacks

    d: defer.Deferred[Any] = defer.Deferred(cancel)
    connecting.addCallback(exchange).addBoth(settle)
    return d.addTimeout(timeout, reactor)
