"""Native requests one cluster node sends on to another: the node that serves them (the elected
controller for stream and scope changes, the native transactions' node for transactions, a partition's
leader for a commit's appends).

``forwarding`` wraps a handler: where the request belongs is decided per request (here, another node's
native listener, or nowhere yet); a forwarded request is marked, and a node that gets one it cannot
serve itself answers retriably instead of forwarding again, so two nodes with different views of the
cluster never bounce a request between them; the first node tries again until a bound. A forward whose
connection died after it was sent answers retriably (its outcome is unknown; a client's resend of a
change that did happen answers as a repeat does: exists, already ended, ...).

On a secured cluster (``NativeLink``) a node dials the others' native listeners as any client must: TLS
where the NATIVE listener is SSL or SASL_SSL (its certificate checked against the NATIVE listener's trust
store and the host name dialled), and SASL where it is SASL_*, logging in as the inter-broker user (the
identity the Kafka inter-broker link logs in as, ``gateway/kafka/node_requests.py``), before any request
goes out on the connection. A forwarded request keeps the client's principal (``Request.principal``, set
by the listener that took it): the listener of the node that runs it believes a principal only from a
super user (``security.NativeSession.admit``), so the command is authorized there as the client's. A
connection whose session has a lifetime is replaced by a fresh one at 85 % of it; the old one finishes
what it carries and is closed when its session ends.

Threads: the reactor; connections are made (and log in) on the worker pool (a connect may wait), and
their answers come back to the reactor through ``to_deferred``.
"""

from __future__ import annotations

import dataclasses
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from twisted.internet import defer, reactor, task
from twisted.python.failure import Failure

from millrace.gateway.native.dispatch import Handler
from millrace.gateway.native.host import NativeHost
from millrace.gateway.native.table_commands import Answer
from millrace.gateway.security.sasl_client import SaslLogin
from millrace.protocol import messages as m
from millrace.protocol.errors import AuthenticationError, ConnectionLostError, RetriableError
from millrace.protocol.messages import Header, Request, decode_reply
from millrace.protocol.sasl import SaslClientError
from millrace.store.cluster.connection import NodeConnection, NotSentError
from millrace.store.futures import StoreFuture
from millrace.streams.futures import to_deferred

HERE = "here"  # where a request is served: this node
DEFAULT_RETRY_BOUND = 30.0
LOGIN_TIMEOUT = 10.0  # one message of a node's login exchange
_FIRST_BACKOFF, _MAX_BACKOFF = 0.05, 1.0
_RENEW_AT = 0.85  # of a session's lifetime: a fresh connection (and session) is made then

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class NativeLink:
    """How this node dials the other nodes' native listeners (``assembly.native_link``): ``tls`` (None:
    plain TCP), a context checking the listener's certificate and host name; ``login`` (None: none), the
    SASL identity it logs in as there (the inter-broker user)."""

    tls: ssl.SSLContext | None = None
    login: SaslLogin | None = None


PLAINTEXT_NATIVE_LINK = NativeLink()


class NodeLoginError(NotSentError):
    """The other node refused this node's login: nothing was sent on the connection, which is closed."""


def log_in(connection: NodeConnection, login: SaslLogin, timeout: float = LOGIN_TIMEOUT) -> float | None:
    """Blocking: ``login``'s SASL exchange on a new connection, before any other request (AUTH_HANDSHAKE,
    then AUTHENTICATE with the messages of ``protocol.sasl.SaslClient``, as on the Kafka link). Returns
    the session's lifetime in seconds (None: unbounded). NodeLoginError if the node refuses the login
    or (SCRAM) does not prove it knows the credential; ConnectionLostError or TimeoutError if it goes."""
    refused = f"{connection.address} refused this node's {login.mechanism} login as {login.username}"
    try:
        connection.request(m.AuthHandshake(mechanism=login.mechanism)).result(timeout)
        client = login.client()
        message = client.first()
        while True:
            header, answer = connection.request(m.Authenticate(), message).result(timeout)
            reply = decode_reply(m.AuthenticateReply, header)
            following = client.answer(answer)  # SCRAM: the server's final message proves it here
            if reply.complete:
                if following is not None:
                    raise NodeLoginError(f"{refused}: it ended the exchange before proving the credential")
                break
            if following is None:
                raise NodeLoginError(f"{refused}: it asks for more than {login.mechanism} says")
            message = following
    except (AuthenticationError, SaslClientError) as exc:
        raise NodeLoginError(f"{refused}: {exc}") from None
    lifetime = reply.session_lifetime_ms
    return None if lifetime is None else lifetime / 1000


class NodeLinks:
    """One native connection per other node's listener, made on demand (worker pool), with ``link``'s TLS
    and login. Requests to a node go out on one connection in the order they were made (those made while
    it connects wait for it, then go in that order), so the node receives them in that order."""

    def __init__(self, broker: NativeHost, link: NativeLink = PLAINTEXT_NATIVE_LINK) -> None:
        self.broker = broker
        self.link = link
        self._links: dict[str, NodeConnection] = {}
        self._waiting: dict[str, list[defer.Deferred[NodeConnection]]] = {}  # address -> callers, in order
        # A connection whose session ends: (monotonic time to replace it by, seconds its session lasts).
        self._sessions: dict[NodeConnection, tuple[float, float]] = {}

    def request(self, address: str, request: Request,
                payload: bytes = b"") -> defer.Deferred[tuple[Header, bytes]]:
        """The node's answer: (header, payload)."""
        link = self._links.get(address)
        if link is not None and not link.closed and address not in self._waiting and not self._renew(link):
            return self._send(link, request, payload)
        waiter: defer.Deferred[NodeConnection] = defer.Deferred()
        answer = waiter.addCallback(self._send, request, payload)
        connecting = address in self._waiting
        self._waiting.setdefault(address, []).append(waiter)
        if not connecting:
            # Queued before the connect starts: a connect that fails at once (a dead node's port refuses
            # in microseconds) completes the Deferred synchronously, and its callers must be there.
            self.broker.blocking(self._connect, address).addBoth(self._connected, address)
        return answer

    def _send(self, link: NodeConnection, request: Request,
              payload: bytes) -> defer.Deferred[tuple[Header, bytes]]:
        try:
            sent = link.request(request, payload)
        except NotSentError:  # the connection closed (its node died): the next request connects again
            if self._links.get(link.address) is link:
                del self._links[link.address]
            return defer.fail()
        return to_deferred(sent)

    def _renew(self, link: NodeConnection) -> bool:
        """Whether ``link``'s session is near its end: the next request goes on a fresh connection."""
        session = self._sessions.get(link)
        return session is not None and time.monotonic() >= session[0]

    def _connect(self, address: str) -> tuple[NodeConnection, float | None]:
        """Worker thread: a connection to ``address`` that has logged in, and its session's lifetime."""
        host, _, port = address.rpartition(":")
        connection = NodeConnection(host, int(port), tls=self.link.tls, tls_hostname=host)
        if self.link.login is None:
            return connection, None
        try:
            return connection, log_in(connection, self.link.login)
        except NodeLoginError as exc:
            log.error("%s: check sasl.mechanism.inter.broker.protocol and the NATIVE listener's JAAS entries and "
                      "super.users on every node", exc)
            connection.close()
            raise
        except (ConnectionLostError, TimeoutError) as exc:  # nothing but the login went out
            connection.close()
            raise NotSentError(f"logging in to {address} failed: {exc}") from None

    def _connected(self, outcome: tuple[NodeConnection, float | None] | Failure, address: str) -> None:
        waiting = self._waiting.pop(address, [])
        ready: NodeConnection | Failure
        if isinstance(outcome, Failure):
            ready = outcome
        else:
            ready, lifetime = outcome
            if lifetime is not None:
                self._sessions[ready] = (time.monotonic() + _RENEW_AT * lifetime, lifetime)
            old = self._links.get(address)
            self._links[address] = ready
            if old is not None and not old.closed:
                # Its session still runs (it is being renewed): what it carries is answered before it ends.
                _, old_lifetime = self._sessions.get(old, (0.0, 0.0))
                reactor.callLater((1 - _RENEW_AT) * old_lifetime, self._retire, old)
            elif old is not None:
                self._sessions.pop(old, None)
        for waiter in waiting:  # in the order the requests were made
            if isinstance(ready, Failure):
                waiter.errback(ready)
            else:
                waiter.callback(ready)

    def _retire(self, old: NodeConnection) -> None:
        self._sessions.pop(old, None)
        self.broker.blocking(old.close)  # joins its reader thread: not on the reactor

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links = {}
        self._sessions = {}


def forwarding(handler: Handler, place: Callable[[], str | None], links: NodeLinks,
               what: str, retry_bound: float = DEFAULT_RETRY_BOUND) -> Handler:
    """``handler`` where ``place()`` says HERE; sent on to the native listener it names otherwise. While
    it names none, or that node did not get the request or answers retriably (it does not serve it
    either: views differ while things move), the request is tried again, backing off, for up to
    ``retry_bound`` seconds (an election or a container move takes up to a session timeout), so clients
    see the move as a slower answer, as the segment router does. ``what``: whom the request is for."""

    def handle(request: Request, payload: bytes) -> object:
        if request.forwarded:
            if place() != HERE:
                raise RetriableError(f"this node does not serve {what} (a forward crossed a move); retry")
            return handler(request, payload)
        return attempt(request, payload, time.monotonic() + retry_bound, _FIRST_BACKOFF)

    def attempt(request: Request, payload: bytes, deadline: float, backoff: float) -> defer.Deferred[Any]:
        where = place()
        if where == HERE:
            return _deferred(handler, request, payload)
        if where is None:
            tried: defer.Deferred[Any] = defer.fail(RetriableError(f"{what} is not known here yet"))
        else:
            tried = links.request(where, dataclasses.replace(request, forwarded=True), payload).addCallback(
                lambda answer: Answer(*answer) if answer[1] else answer[0])

        def again(failure: Failure) -> Any:
            if not failure.check(NotSentError, RetriableError):
                if failure.check(ConnectionLostError):  # sent, answer lost: the client decides
                    return Failure(RetriableError(f"forwarding to {what} failed: {failure.getErrorMessage()}"))
                return failure  # the answer of the node that served it
            if time.monotonic() + backoff > deadline:
                return Failure(RetriableError(f"{what} unreachable for {retry_bound:g} s: "
                                              f"{failure.getErrorMessage()}"))
            return task.deferLater(reactor, backoff, attempt, request, payload, deadline,
                                   min(_MAX_BACKOFF, backoff * 2))

        return tried.addErrback(again)

    return handle


def _deferred(handler: Handler, request: Request, payload: bytes) -> defer.Deferred[Any]:
    """A handler's outcome (a value, a Deferred or a store future) as a Deferred."""
    try:
        outcome = handler(request, payload)
    except Exception:  # noqa: BLE001 - the caller's errback answers it
        return defer.fail()
    if isinstance(outcome, defer.Deferred):
        return outcome
    if isinstance(outcome, StoreFuture):
        return to_deferred(outcome)
    return defer.succeed(outcome)
