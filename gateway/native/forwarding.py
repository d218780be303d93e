"""Native requests one cluster node sends on to another: the node that serves them (the elected
controller for stream and scope changes, the native transactions' node for transactions, a partition's
leader for a commit's appends).

``forwarding`` wraps a handler: where the request belongs is decided per request (here, another node's
native listener, or nowhere yet); a forwarded request is marked, and a node that gets one it cannot
serve itself answers retriably instead of forwarding again, so two nodes with different views of the
cluster never bounce a request between them; the first node tries again until a bound. A forward whose
connection died after it was sent answers retriably (its outcome is unknown; a client's resend of a
change that did happen answers as a repeat does: exists, already ended, ...).

Threads: the reactor; connections are made on the worker pool (a connect may wait), and their answers
come back to the reactor through ``to_deferred``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from twisted.internet import defer, reactor, task
from twisted.python.failure import Failure

from millrace.gateway.native.dispatch import Handler
from millrace.gateway.native.host import NativeHost
from millrace.gateway.native.table_commands import Answer
from millrace.protocol.errors import ConnectionLostError, RetriableError
from millrace.protocol.messages import Header, Request
from millrace.store.cluster.connection import NodeConnection, NotSentError
from millrace.store.futures import StoreFuture
from millrace.streams.futures import to_deferred

HERE = "here"  # where a request is served: this node
DEFAULT_RETRY_BOUND = 30.0
_FIRST_BACKOFF, _MAX_BACKOFF = 0.05, 1.0


class NodeLinks:
    """One native connection per other node's listener, made on demand (worker pool). Requests to a
    node go out on one connection in the order they were made (those made while it connects wait for
    it, then go in that order), so the node receives them in that order."""

    def __init__(self, broker: NativeHost) -> None:
        self.broker = broker
        self._links: dict[str, NodeConnection] = {}
        self._waiting: dict[str, list[defer.Deferred[NodeConnection]]] = {}  # address -> callers, in order

    def request(self, address: str, request: Request,
                payload: bytes = b"") -> defer.Deferred[tuple[Header, bytes]]:
        """The node's answer: (header, payload)."""
        link = self._links.get(address)
        if link is not None and not link.closed and address not in self._waiting:
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

    @staticmethod
    def _connect(address: str) -> NodeConnection:
        host, _, port = address.rpartition(":")
        return NodeConnection(host, int(port))

    def _connected(self, outcome: NodeConnection | Failure, address: str) -> None:
        waiting = self._waiting.pop(address, [])
        if isinstance(outcome, NodeConnection):
            old = self._links.get(address)
            self._links[address] = outcome
            if old is not None and not old.closed:
                old.close()
        for waiter in waiting:  # in the order the requests were made
            if isinstance(outcome, Failure):
                waiter.errback(outcome)
            else:
                waiter.callback(outcome)

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links = {}


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
