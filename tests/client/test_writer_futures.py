"""The writer's per-event future (``_EventFuture``) behaves as a ``concurrent.futures.Future`` whether it
completes before or after someone waits on it, adds a callback, or waits on many with ``wait``."""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, wait

import pytest

from millrace.client.writer import EventPosition, _EventFuture
from millrace.protocol.errors import ConnectionLostError


def test_completed_before_anyone_looks() -> None:
    fut = _EventFuture()
    assert not fut.done()
    fut.complete(EventPosition(1, 7))
    assert fut.done() and fut.result() == EventPosition(1, 7) and fut.exception() is None
    seen: list[Future[EventPosition]] = []
    fut.add_done_callback(seen.append)  # runs at once on a finished future
    assert seen == [fut]
    failed = _EventFuture()
    failed.complete(ConnectionLostError("gone"))
    with pytest.raises(ConnectionLostError):
        failed.result()
    assert isinstance(failed.exception(), ConnectionLostError)
    assert wait([fut, failed], timeout=0).not_done == set()


def test_waiters_and_callbacks_registered_first_are_woken() -> None:
    fut = _EventFuture()
    seen: list[EventPosition] = []
    fut.add_done_callback(lambda f: seen.append(f.result()))
    results: list[EventPosition] = []
    waiting = threading.Thread(target=lambda: results.append(fut.result(30)))
    waiting.start()
    other = _EventFuture()
    many = threading.Thread(target=lambda: results.append(next(iter(wait([other, fut], 30, FIRST_COMPLETED).done))
                                                          .result()))
    many.start()
    while fut._lazy_condition is None or not fut._waiters:  # both threads wait on it now
        threading.Event().wait(0.01)
    fut.complete(EventPosition(0, 3))
    waiting.join(30)
    many.join(30)
    assert results == [EventPosition(0, 3)] * 2
    assert seen == [EventPosition(0, 3)]


def test_racing_completion_and_waiting_never_loses_a_wake_up() -> None:
    for _ in range(2000):
        fut = _EventFuture()
        got: list[EventPosition] = []
        waiter = threading.Thread(target=lambda f=fut, into=got: into.append(f.result(30)))
        waiter.start()
        fut.complete(EventPosition(0, 1))
        waiter.join(30)
        assert got == [EventPosition(0, 1)]


def test_a_callback_runs_once_whether_added_before_or_racing_with_completion() -> None:
    for _ in range(2000):
        fut = _EventFuture()
        calls: list[EventPosition] = []
        fut.add_done_callback(lambda f, into=calls: into.append(f.result()))  # before: nobody waits
        adder = threading.Thread(target=lambda f=fut, into=calls: f.add_done_callback(
            lambda g: into.append(g.result())))
        adder.start()
        fut.complete(EventPosition(2, 5))
        adder.join(30)
        assert calls == [EventPosition(2, 5)] * 2
    assert not _EventFuture().cancel()  # a written event cannot be taken back
