"""The one crossing into the reactor thread (millrace.streams.futures.to_deferred)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from twisted.internet import defer, reactor, task
from twisted.python import threadable

from millrace.store.futures import StoreFuture, completed
from millrace.streams.futures import every, on_reactor, to_deferred
from tests.server_process import REPO_ROOT


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Callable[..., Any], tuple[Any, ...]]]]:
    """This thread plays the reactor's; calls sent to it through callFromThread are recorded, not run."""
    sent: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
    monkeypatch.setattr(reactor, "callFromThread", lambda fn, *args: sent.append((fn, args)), raising=False)
    previous = threadable.ioThread
    threadable.registerAsIOThread()
    yield sent
    threadable.ioThread = previous
    for fn, args in sent:  # hand over what is left, or the inbox would wait for a turn that never comes
        fn(*args)


def test_a_completed_future_fires_in_the_same_reactor_turn(hops: list) -> None:
    d = to_deferred(completed(b"cached"))
    assert d.called and d.result == b"cached" and hops == []


def test_a_failed_future_errbacks_in_the_same_reactor_turn(hops: list) -> None:
    fut: StoreFuture[bytes] = StoreFuture()
    fut.set_exception(KeyError("gone"))
    d = to_deferred(fut)
    assert d.called
    failure = d.result
    d.addErrback(lambda f: None)  # consumed: no unhandled-error report
    assert failure.check(KeyError)


def test_a_future_completed_elsewhere_comes_back_through_the_reactor(hops: list) -> None:
    fut: StoreFuture[int] = StoreFuture()
    d = to_deferred(fut)
    completer = threading.Thread(target=fut.set_result, args=(7,))
    completer.start()
    completer.join()
    assert not d.called and len(hops) == 1  # not fired on the completing thread
    fn, args = hops[0]
    fn(*args)  # the reactor's turn
    assert d.called and d.result == 7


def test_a_worker_never_fires_a_deferred_itself(hops: list) -> None:
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(to_deferred(completed(1))))
    worker.start()
    worker.join()
    assert not results[0].called and len(hops) == 1


def test_calls_from_other_threads_share_one_wake_up_and_run_in_order(hops: list) -> None:
    futures: list[StoreFuture[int]] = [StoreFuture() for _ in range(3)]
    deferreds = [to_deferred(f) for f in futures]
    ran: list[Any] = []
    deferreds[0].addCallback(ran.append)

    def complete() -> None:  # a log write completing a group commit's appends, and a notice after them
        for i, f in enumerate(futures):
            f.set_result(i)
        on_reactor(ran.append, "notice")

    completer = threading.Thread(target=complete)
    completer.start()
    completer.join()
    assert len(hops) == 1 and not any(d.called for d in deferreds)
    fn, args = hops.pop()
    fn(*args)
    assert ran == [0, "notice"] and [d.result for d in deferreds[1:]] == [1, 2]


def test_a_failing_call_does_not_drop_the_calls_after_it(hops: list) -> None:
    ran: list[str] = []

    def fail() -> None:
        raise RuntimeError("a bug in one call")

    worker = threading.Thread(target=lambda: (on_reactor(fail), on_reactor(ran.append, "after")))
    worker.start()
    worker.join()
    fn, args = hops.pop()
    fn(*args)
    assert ran == ["after"]


def test_periodic_work_outlives_a_round_that_raises_or_fails(caplog: pytest.LogCaptureFixture) -> None:
    """A bare LoopingCall stops for good, silently, at its first error: ``every`` logs it and goes on."""
    clock = task.Clock()
    rounds: list[int] = []
    pending: list[defer.Deferred[None]] = []

    def work() -> defer.Deferred[None] | None:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise RuntimeError("a bad round")
        if len(rounds) == 2:
            d: defer.Deferred[None] = defer.Deferred()
            pending.append(d)
            return d
        return None

    loop = every(1.0, work, "the test's round", clock)
    clock.advance(1.0)
    assert rounds == [0] and "the test's round failed" in caplog.text
    clock.advance(1.0)
    assert rounds == [0, 1]
    clock.advance(5.0)
    assert rounds == [0, 1], "the next round waits for this round's Deferred"
    pending[0].errback(RuntimeError("a failed Deferred"))
    assert "a failed Deferred" in caplog.text
    clock.advance(1.0)
    assert rounds == [0, 1, 2] and loop.running
    loop.stop()


REACTOR_WAIT = """
import os
os.environ["MILLRACE_CHECK_REACTOR_WAITS"] = "1"
from twisted.internet import reactor
from millrace.store.futures import StoreFuture
from millrace.streams.futures import check_reactor_waits

def on_the_reactor():
    try:
        StoreFuture().result(timeout=5)
    except RuntimeError as exc:
        print("refused:", exc)
    try:
        StoreFuture().result(timeout=0)
    except TimeoutError:
        print("polled")
    reactor.stop()

check_reactor_waits()
reactor.callWhenRunning(on_the_reactor)
reactor.run()
try:
    StoreFuture().result(timeout=0.01)
except TimeoutError:
    print("waited after the reactor stopped")
"""


def test_a_checking_run_refuses_a_wait_for_a_store_future_on_the_reactor() -> None:
    """Such a wait stalls every connection, and deadlocks when the future needs the reactor (two cluster
    nodes each waiting for a table on the other): the tests' servers fail where they would wait."""
    done = subprocess.run([sys.executable, "-c", REACTOR_WAIT], capture_output=True, text=True, timeout=60,
                          cwd=REPO_ROOT)
    assert done.stdout.splitlines() == [
        "refused: a store future was waited for on the reactor thread, which must never block",
        "polled",
        "waited after the reactor stopped",
    ], done.stderr
