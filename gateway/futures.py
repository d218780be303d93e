"""Bridges the store's futures to Twisted Deferreds on the reactor thread."""

from __future__ import annotations

from concurrent.futures import Future

from twisted.internet import defer, reactor
from twisted.internet.interfaces import IReactorFromThreads

from millrace.store.futures import StoreFuture


def to_deferred(fut: StoreFuture | Future) -> defer.Deferred:
    """A Deferred that fires on the reactor thread when ``fut`` completes (from any thread)."""
    d: defer.Deferred = defer.Deferred()

    def fire(f: StoreFuture | Future) -> None:
        exc = f.exception()
        if exc is not None:
            d.errback(exc)
        else:
            d.callback(f.result())

    fut.add_done_callback(lambda f: IReactorFromThreads(reactor).callFromThread(fire, f))
    return d
