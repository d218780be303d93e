"""One timer thread for the whole store, instead of a thread per timed wait."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class TimerHandle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler:
    def __init__(self, name: str = "millrace-timer") -> None:
        self._heap: list[tuple[float, int, TimerHandle, Callable[[], None]]] = []
        self._counter = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def call_later(self, delay: float, fn: Callable[[], None]) -> TimerHandle:
        handle = TimerHandle()
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._counter), handle, fn))
            self._cond.notify()
        return handle

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._stopped:
                    return
                _, _, handle, fn = heapq.heappop(self._heap)
            if not handle.cancelled:
                try:
                    fn()
                except Exception:
                    # One failing callback must not end the thread every other timed wait depends on.
                    log.exception("timer callback %r failed", fn)
