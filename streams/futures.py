"""The gateway's thread model, and the one place where work crosses into the reactor thread.

Threads and what each owns:

- **Reactor thread** (Twisted). Owns every piece of mutable gateway state: connections and their
  in-order response slots, Kafka partition state (offset index, producer states, high watermark and
  pending acknowledgements, long-poll waiters, segment writers' tails, index-segment buffers, log
  starts) through ``SegmentPartitionStorage``, consumer groups and their timers. Handlers run here and
  never block: they answer at once or return a Deferred.
- **Worker pool** (the ``controller`` ThreadPoolExecutor; ``Broker.blocking``). Blocking table and
  controller I/O: topic create/delete/grow/configs, stream scaling, group-store writes, log-start
  writes, the reads that load or reload a topic's partitions, and partition-state snapshots (built
  from the store alone, like a load). A worker owns nothing of the
  reactor's: a load builds *fresh* partition objects no one else can see, and the reactor takes them
  over when the Deferred fires (``SegmentPartitionStorage._install``). Topic records are the
  exception that is shared: ``TopicRegistry`` replaces immutable ``TopicInfo`` values under its lock on
  workers, and any thread reads them.
- **Reactor thread pool** (Twisted's). The auto-scaler's rounds; a topic's scaling switch runs its
  reactor part through ``call_on_reactor``.
- **Store threads** (log writers, storage writers, the LTS read pool, the scheduler). Own the store's
  state; they complete ``StoreFuture``s and touch nothing of the gateway's. The reactor stands in for
  a local log's writer at the end of a turn that appended to it (``ReactorLoop``): then the store's
  completions run on the reactor, and a handler that appends must never wait for the result there.

How results cross: every store or pool future a gateway caller waits on becomes a Deferred in
``to_deferred``, which fires on the reactor thread (at once when the future is already complete and the
caller is on the reactor, e.g. a read served from the cache: no extra reactor turn). A worker that must
run something on the reactor uses ``on_reactor`` (fire and forget) or ``call_on_reactor`` (waits for the
result). Completions and ``on_reactor`` calls go through one inbox, in the order posted, and the reactor
is woken once for all that arrive before it runs them. Before the reactor runs (``millrace serve``
recovering), the main thread stands in for it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from twisted.internet import defer, reactor, task, threads
from twisted.internet.interfaces import (
    IReactorCore,
    IReactorFDSet,
    IReactorFromThreads,
    IReactorTime,
    IReadDescriptor,
)
from twisted.python import threadable
from zope.interface import implementer

from millrace.store.futures import StoreFuture, refuse_waits

T = TypeVar("T")
log = logging.getLogger(__name__)


def to_deferred(fut: StoreFuture[T] | Future[T]) -> defer.Deferred[T]:
    """A Deferred that fires on the reactor thread when ``fut`` completes (from any thread)."""
    d: defer.Deferred[T] = defer.Deferred()

    def fire(f: StoreFuture[T] | Future[T]) -> None:
        exc = f.exception()
        if exc is not None:
            d.errback(exc)
        else:
            d.callback(f.result())

    if fut.done() and threadable.isInIOThread():
        fire(fut)
    else:
        fut.add_done_callback(lambda f: _INBOX.post(fire, f))
    return d


class _ReactorInbox:
    """Calls from other threads for the reactor, run in the order posted, handed over in batches: one
    wake-up of the reactor (a pipe write, a turn of its loop) for all that arrive before it gets to
    them, where ``callFromThread`` each would cost one (a log write completes a group commit's worth of
    appends at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., object], tuple[Any, ...]]] = []

    def post(self, fn: Callable[..., object], *args: Any) -> None:
        with self._lock:
            first = not self._calls
            self._calls.append((fn, args))
        if first:
            if threadable.isInIOThread():
                # A completion made on the reactor itself (a log committed at a turn's end): the next
                # turn runs it, with no wake-up through the pipe.
                IReactorTime(reactor).callLater(0, self._run)
            else:
                IReactorFromThreads(reactor).callFromThread(self._run)

    def _run(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for fn, args in calls:
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - one failing call must not drop the rest of the batch
                log.exception("a call handed to the reactor failed: %r", fn)


_INBOX = _ReactorInbox()


def check_reactor_waits() -> None:
    """With ``MILLRACE_CHECK_REACTOR_WAITS=1`` (the tests run their servers so): while the reactor runs,
    a wait for a store future on its thread raises instead of blocking (``refuse_waits``), so a handler or
    a start-up step that would stall or deadlock the reactor fails where it waits. Lifted when the
    shutdown begins: the server closes its store on this thread after that."""
    if os.environ.get("MILLRACE_CHECK_REACTOR_WAITS") != "1":
        return
    core = IReactorCore(reactor)
    core.callWhenRunning(refuse_waits, "reactor")
    core.addSystemEventTrigger("before", "shutdown", refuse_waits, None)


def every(seconds: float, fn: Callable[[], object], what: str, clock: IReactorTime | None = None,
          now: bool = False) -> task.LoopingCall:
    """Run ``fn`` on the reactor every ``seconds`` (from now on with ``now``), started. A round that
    raises, or whose Deferred fails, is logged as ``what`` and the next round comes as planned: a bare
    ``LoopingCall`` stops for good at its first error, and silently, since no one waits on its Deferred.
    A round's Deferred is waited for before the next round is timed, so rounds never overlap."""

    def guarded() -> object:
        try:
            result = fn()
        except Exception:  # noqa: BLE001 - periodic work must outlive one bad round
            log.exception("%s failed; it runs again in %g s", what, seconds)
            return None
        if isinstance(result, defer.Deferred):
            return result.addErrback(
                lambda f: log.error("%s failed; it runs again in %g s:\n%s", what, seconds, f.getTraceback()))
        return None

    loop = task.LoopingCall(guarded)
    loop.clock = clock if clock is not None else IReactorTime(reactor)
    loop.start(seconds, now=now)
    return loop


class ReactorLoop:
    """The reactor as the durable logs' ``EventLoop`` (``store.durablelog.turn_commits``): an append
    made on the reactor is written and synced at the end of its turn, on the reactor."""

    def on_loop_thread(self) -> bool:
        return bool(getattr(reactor, "running", False)) and threadable.isInIOThread()

    def call_soon(self, fn: Callable[[], None]) -> None:
        IReactorTime(reactor).callLater(0, fn)

    def watch_readable(self, fd: int, on_readable: Callable[[], object]) -> None:
        IReactorFDSet(reactor).addReader(_Readable(fd, on_readable))

    def when_stopped(self, fn: Callable[[], None]) -> None:
        # "after": the reactor no longer counts as running, so appends from here on wake their writers.
        IReactorCore(reactor).addSystemEventTrigger("after", "shutdown", fn)


@implementer(IReadDescriptor)
class _Readable:
    """A descriptor the reactor reads for us: ``on_readable`` does the reading."""

    def __init__(self, fd: int, on_readable: Callable[[], object]) -> None:
        self._fd = fd
        self._on_readable = on_readable

    def fileno(self) -> int:
        return self._fd

    def doRead(self) -> None:
        self._on_readable()

    def connectionLost(self, reason: object) -> None:
        pass

    def logPrefix(self) -> str:
        return "kernel-syncs"


def on_reactor(fn: Callable[..., object], *args: Any) -> None:
    """Run ``fn(*args)`` on the reactor thread soon (from any thread); in call order."""
    _INBOX.post(fn, *args)


def call_on_reactor(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` on the reactor thread and return its result (from a worker thread only)."""
    return threads.blockingCallFromThread(IReactorFromThreads(reactor), fn, *args)
