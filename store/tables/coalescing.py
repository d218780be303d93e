"""Table writes from the reactor, coalesced: changes queued while one batch is written go together in
the next, so many callers share one table append (and its fsync).

It lives with the table store because that is what it batches for; it needs nothing of the gateway (the
worker pool that runs the blocking write is passed in), so the Kafka transaction coordinator and the
native transactions both use it without either adapter importing the other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from twisted.internet import defer
from twisted.python.failure import Failure

Change = TypeVar("Change")
Result = TypeVar("Result")


class CoalescingWriter(Generic[Change, Result]):
    """Writes changes one batch at a time, in call order, through ``write_batch`` on the worker pool.

    ``write_batch`` (blocking) gets every change queued since the last batch and answers one outcome per
    change, in order: its result, or the exception that change alone failed with. If ``write_batch``
    raises, every change of the batch fails with it. Reactor thread only.
    """

    def __init__(self, write_batch: Callable[[list[Change]], Sequence[Result | Exception]],
                 blocking: Callable[..., defer.Deferred[Any]]) -> None:
        self.write_batch = write_batch
        self.blocking = blocking
        self._queue: list[tuple[Change, defer.Deferred[Result]]] = []
        self._busy = False

    def write(self, change: Change) -> defer.Deferred[Result]:
        d: defer.Deferred[Result] = defer.Deferred()
        self._queue.append((change, d))
        self._pump()
        return d

    def _pump(self) -> None:
        if self._busy or not self._queue:
            return
        batch, self._queue = self._queue, []
        self._busy = True
        self.blocking(self.write_batch, [change for change, _ in batch]).addBoth(self._written, batch)

    def _written(self, outcome: Sequence[Result | Exception] | Failure,
                 batch: list[tuple[Change, defer.Deferred[Result]]]) -> None:
        self._busy = False
        for i, (_, d) in enumerate(batch):
            if isinstance(outcome, Failure):
                d.errback(outcome)
            else:
                result = outcome[i]
                if isinstance(result, Exception):
                    d.errback(Failure(result))
                else:
                    d.callback(result)
        self._pump()
