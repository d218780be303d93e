"""A lightweight future for the store's hot path.

``concurrent.futures.Future`` builds a Condition (and an RLock) per instance and notifies it on every
completion; at hundreds of thousands of appends per second that dominates the cost of an append.
``StoreFuture`` offers the same surface the store's callers use (result, exception, done,
add_done_callback, set_result, set_exception, cancel) and only creates an Event when a caller
actually blocks on it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import CancelledError
from typing import Any, Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")

_PENDING, _DONE, _FAILED, _CANCELLED = 0, 1, 2, 3
# One lock for the rare slow path (callbacks registering while completion runs, blocking waits).
_lock = threading.Lock()
# Threads that must never block (the reactor) may ask that a wait for a future not yet done fail at once
# (``refuse_waits``): such a wait stalls every connection, and deadlocks when the future needs that very
# thread (a table on another node, whose reactor waits for this one's).
_no_waits = threading.local()


def refuse_waits(thread: str | None) -> None:
    """From now on, on the calling thread, ``result`` and ``exception`` of a future that is not done
    raise RuntimeError naming ``thread`` instead of waiting (a zero timeout still just polls); None
    lifts it."""
    _no_waits.thread = thread


class StoreFuture(Generic[T]):
    __slots__ = ("_state", "_value", "_callbacks", "_event")

    def __init__(self) -> None:
        self._state = _PENDING
        self._value: Any = None
        self._callbacks: list[Callable[[StoreFuture[T]], None]] | None = None
        self._event: threading.Event | None = None

    def done(self) -> bool:
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def cancel(self) -> bool:
        """Stop waiting; does not undo an operation the store already accepted."""
        return self._complete(_CANCELLED, CancelledError())

    def set_result(self, value: T) -> None:
        if not self._complete(_DONE, value):
            raise RuntimeError("future already completed")

    def set_exception(self, exc: BaseException) -> None:
        if not self._complete(_FAILED, exc):
            raise RuntimeError("future already completed")

    def _complete(self, state: int, value: Any) -> bool:
        with _lock:
            if self._state != _PENDING:
                return False
            self._value = value
            self._state = state
            callbacks, self._callbacks = self._callbacks, None
            event = self._event
        if event is not None:
            event.set()
        if callbacks:
            for fn in callbacks:
                fn(self)
        return True

    def add_done_callback(self, fn: Callable[[StoreFuture[T]], None]) -> None:
        if self._state == _PENDING:
            with _lock:
                if self._state == _PENDING:
                    if self._callbacks is None:
                        self._callbacks = [fn]
                    else:
                        self._callbacks.append(fn)
                    return
        fn(self)

    def _wait(self, timeout: float | None) -> None:
        if self._state != _PENDING:
            return
        refusing = getattr(_no_waits, "thread", None)
        with _lock:
            if self._state != _PENDING:
                return
            if refusing is not None and timeout != 0:  # checked under the lock: a future done meanwhile passes
                raise RuntimeError(f"a store future was waited for on the {refusing} thread, which must never block")
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if not event.wait(timeout):
            raise TimeoutError(f"no result within {timeout} s")

    def result(self, timeout: float | None = None) -> T:
        self._wait(timeout)
        if self._state == _DONE:
            return self._value
        raise self._value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return None if self._state == _DONE else self._value


def completed(value: T) -> StoreFuture[T]:
    fut: StoreFuture[T] = StoreFuture()
    fut.set_result(value)
    return fut


def settled(call: Callable[[], T]) -> StoreFuture[T]:
    """``call()``'s outcome as a completed future: its value, or the exception it raised."""
    fut: StoreFuture[T] = StoreFuture()
    try:
        fut.set_result(call())
    except Exception as exc:  # noqa: BLE001 - the call's own failure is the future's answer
        fut.set_exception(exc)
    return fut


def failed(exc: BaseException) -> StoreFuture[Any]:
    fut: StoreFuture[Any] = StoreFuture()
    fut.set_exception(exc)
    return fut


def mapped(fut: StoreFuture[T], fn: Callable[[T], U]) -> StoreFuture[U]:
    """A future of ``fn`` of ``fut``'s result (its exception as is; ``fn`` raising fails this one only)."""
    out: StoreFuture[U] = StoreFuture()

    def done(f: StoreFuture[T]) -> None:
        exc = f.exception()
        if exc is not None:
            out.set_exception(exc)
            return
        try:
            out.set_result(fn(f.result()))
        except Exception as error:  # noqa: BLE001 - a malformed answer fails this call only
            out.set_exception(error)

    fut.add_done_callback(done)
    return out


def chained(fut: StoreFuture[T], fn: Callable[[T], StoreFuture[U]]) -> StoreFuture[U]:
    """The future of ``fn(result)``, another store call made on ``fut``'s outcome without blocking
    (``fut``'s exception, or ``fn`` raising, fails this one)."""
    out: StoreFuture[U] = StoreFuture()

    def relay(f: StoreFuture[U]) -> None:
        exc = f.exception()
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(f.result())

    def done(f: StoreFuture[T]) -> None:
        exc = f.exception()
        if exc is not None:
            out.set_exception(exc)
            return
        try:
            nxt = fn(f.result())
        except Exception as error:  # noqa: BLE001 - a refusal fails this call only
            out.set_exception(error)
            return
        nxt.add_done_callback(relay)

    fut.add_done_callback(done)
    return out
