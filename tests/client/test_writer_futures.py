"""The writer's per-event future (``_EventFuture``) behaves as a ``concurrent.futures.Future`` whether it
completes before or after someone waits on it, adds a callback, or waits on many with ``wait``; one at a
time (``complete``) or a landed batch's at once (``_complete_landed``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, as_completed, wait

import pytest

from millrace.client.writer import ALREADY_WRITTEN, EventPosition, _complete_landed, _EventFuture
from millrace.protocol.errors import ConnectionLostError

Completion = Callable[[_EventFuture, EventPosition], None]


def one(fut: _EventFuture, position: EventPosition) -> None:
    fut.complete(position)


def landed(fut: _EventFuture, position: EventPosition) -> None:
    _complete_landed([fut], position.partition, position.offset)


completions = pytest.mark.parametrize("finish", [one, landed], ids=["complete", "landed-batch"])


@completions
def test_completed_before_anyone_looks(finish: Completion) -> None:
    fut = _EventFuture()
    assert not fut.done()
    finish(fut, EventPosition(1, 7))
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


@completions
def test_waiters_and_callbacks_registered_first_are_woken(finish: Completion) -> None:
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
    finish(fut, EventPosition(0, 3))
    waiting.join(30)
    many.join(30)
    assert results == [EventPosition(0, 3)] * 2
    assert seen == [EventPosition(0, 3)]


@completions
def test_racing_completion_and_waiting_never_loses_a_wake_up(finish: Completion) -> None:
    for _ in range(2000):
        fut = _EventFuture()
        got: list[EventPosition] = []
        waiter = threading.Thread(target=lambda f=fut, into=got: into.append(f.result(30)))
        waiter.start()
        finish(fut, EventPosition(0, 1))
        waiter.join(30)
        assert got == [EventPosition(0, 1)]


@completions
def test_a_callback_runs_once_whether_added_before_or_racing_with_completion(finish: Completion) -> None:
    for _ in range(2000):
        fut = _EventFuture()
        calls: list[EventPosition] = []
        fut.add_done_callback(lambda f, into=calls: into.append(f.result()))  # before: nobody waits
        adder = threading.Thread(target=lambda f=fut, into=calls: f.add_done_callback(
            lambda g: into.append(g.result())))
        adder.start()
        finish(fut, EventPosition(2, 5))
        adder.join(30)
        assert calls == [EventPosition(2, 5)] * 2
    assert not _EventFuture().cancel()  # a written event cannot be taken back


def test_a_landed_batch_gives_each_event_its_offset_and_keeps_nothing_shared() -> None:
    futures = [_EventFuture() for _ in range(4)]
    calls: list[EventPosition] = []
    futures[1].add_done_callback(lambda f: calls.append(f.result()))
    assert _EventFuture()._done_callbacks == []  # a callback is the future's own, never the class's
    waiter = threading.Thread(target=lambda: calls.append(futures[2].result(30)))
    waiter.start()
    while futures[2]._lazy_condition is None:
        threading.Event().wait(0.01)
    _complete_landed(futures, 3, 100)
    waiter.join(30)
    assert [f.result() for f in futures] == [EventPosition(3, 100 + i) for i in range(4)]
    assert sorted(calls, key=lambda p: p.offset) == [EventPosition(3, 101), EventPosition(3, 102)]
    assert list(as_completed(futures, timeout=0)) and futures[0]._waiters == []
    again = [_EventFuture() for _ in range(3)]
    _complete_landed(again, 0, ALREADY_WRITTEN)
    assert {f.result() for f in again} == {EventPosition(0, ALREADY_WRITTEN)}
    assert all(f.result().already_written for f in again)


def test_asyncio_bridges_a_future_completed_in_a_batch() -> None:
    async def main() -> EventPosition:
        fut = _EventFuture()
        bridged = asyncio.wrap_future(fut)
        asyncio.get_running_loop().call_later(0.01, _complete_landed, [fut], 1, 9)
        return await bridged

    assert asyncio.run(main()) == EventPosition(1, 9)
