"""Long-poll: fetches parked until a partition's high watermark moves or their wait runs out.

Owned by the reactor thread: waiters are added by fetch handlers and woken by the high watermark's
advance (or by the topic's deletion), both on the reactor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime


class Waiters:
    """The fetches waiting on one partition."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: list[defer.Deferred[None]] = []

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, d: defer.Deferred[None]) -> None:
        self._waiting.append(d)

    def discard(self, d: defer.Deferred[None]) -> None:
        if d in self._waiting:
            self._waiting.remove(d)

    def wake(self) -> None:
        if not self._waiting:
            return
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            if not d.called:
                d.callback(None)


def wait_for_any(clock: IReactorTime, waiters: Sequence[Waiters], timeout: float) -> defer.Deferred[None]:
    """A Deferred that fires when any of ``waiters`` is woken, or after ``timeout`` seconds."""
    d: defer.Deferred[None] = defer.Deferred()
    for w in waiters:
        w.add(d)

    def expire() -> None:
        if not d.called:
            d.callback(None)

    timer = clock.callLater(timeout, expire)

    def done(result: Any) -> Any:
        if timer.active():
            timer.cancel()
        for w in waiters:
            w.discard(d)
        return result

    return d.addBoth(done)
