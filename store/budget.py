"""Byte budgets: how much memory work in flight may hold before the connections feeding it stop reading.

A ``ByteBudget`` counts bytes held (requests read and not yet answered, appends accepted and not yet
durable) against a limit. It never refuses: admission control is the reader's job, which stops
reading when a budget it feeds is full and resumes once the budget drains below its low-water mark
(as Redpanda admits requests against a memory estimate). So nothing acknowledged is ever dropped
and one request larger than the whole budget is still admitted, alone.

Bytes are acquired where work is admitted (mostly the reactor thread) and released wherever it
completes (log-writer threads), so every method is thread-safe, and drain callbacks run on the
releasing thread (or the store's timer thread, for a polled backlog): callers that live on another
thread hop over themselves. Kafka quotas could hang on the same hook: a budget that drains with time.

``Admission`` is one connection's view: its own budget plus the budgets (containers) its appends
went to. While a connection dispatches a request it makes its admission *current* (``charging``),
and ``SegmentStore.append`` charges the appended bytes to the current admission as well as to the
container, until durable, whichever layer above the store did the append.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

MIB = 1024 * 1024


class ByteBudget:
    """Bytes held against ``limit``: full at ``limit``, drained again at ``low_water`` (half by default).

    ``backlog`` (optional) reports bytes held elsewhere that count too but drain without telling the
    budget (a container's data waiting for long-term storage); while anyone waits
    for such a budget to drain it is polled every ``poll_seconds`` through ``call_later``. A reading of
    the backlog serves for ``backlog_seconds``: it may cost a walk over a container's segments, and
    appends check it every time.
    """

    __slots__ = ("name", "limit", "low_water", "_used", "_peak", "_lock", "_waiters", "_backlog",
                 "_call_later", "_poll_seconds", "_polling", "_backlog_seconds", "_backlog_value", "_backlog_at")

    def __init__(self, limit: int, name: str = "", low_water: int | None = None,
                 backlog: Callable[[], int] | None = None,
                 call_later: Callable[[float, Callable[[], None]], Any] | None = None,
                 poll_seconds: float = 0.05, backlog_seconds: float = 0.01) -> None:
        if limit <= 0:
            raise ValueError(f"a byte budget needs a positive limit, not {limit}")
        if backlog is not None and call_later is None:
            raise ValueError("a budget with a backlog needs call_later to poll it")
        self.name = name
        self.limit = limit
        self.low_water = limit // 2 if low_water is None else min(low_water, limit)
        self._used = 0
        self._peak = 0
        self._lock = threading.Lock()
        self._waiters: list[Callable[[], None]] = []
        self._backlog = backlog
        self._call_later = call_later
        self._poll_seconds = poll_seconds
        self._polling = False
        self._backlog_seconds = backlog_seconds
        self._backlog_value = 0
        self._backlog_at = float("-inf")

    @property
    def used(self) -> int:
        """Bytes acquired and not yet released."""
        return self._used

    @property
    def peak(self) -> int:
        """The most bytes ever acquired at once (a request larger than the limit shows here)."""
        return self._peak

    def held(self) -> int:
        """Bytes that count against the limit: acquired ones plus the backlog."""
        return self._used + self._backlog_bytes()

    def _backlog_bytes(self) -> int:
        # Read outside our lock: the backlog's owner may hold its own lock while releasing here.
        # Threads racing to refresh it each store a fresh reading; any of them will do.
        if self._backlog is None:
            return 0
        now = time.monotonic()
        if now - self._backlog_at >= self._backlog_seconds:
            self._backlog_value = self._backlog()
            self._backlog_at = now
        return self._backlog_value

    @property
    def full(self) -> bool:
        return self.held() >= self.limit

    def acquire(self, n: int) -> None:
        """Hold ``n`` more bytes; always succeeds (the caller checks ``full`` and stops reading)."""
        with self._lock:
            self._used += n
            if self._used > self._peak:
                self._peak = self._used

    def release(self, n: int) -> None:
        with self._lock:
            self._used -= n
            if self._used < 0:
                raise RuntimeError(f"budget {self.name}: released more than was acquired")
            if not self._waiters:
                return
        backlog = self._backlog_bytes()
        with self._lock:
            if not self._waiters or self._used + backlog > self.low_water:
                return
            waiters, self._waiters = self._waiters, []
        for fn in waiters:
            fn()

    def when_drained(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once the budget holds at most ``low_water`` bytes: now (on this thread) if it
        already does, else on the thread whose release (or poll) gets it there."""
        backlog = self._backlog_bytes()
        start_polling = False
        with self._lock:
            waiting = self._used + backlog > self.low_water
            if waiting:
                self._waiters.append(fn)
                if self._backlog is not None and not self._polling:
                    self._polling = start_polling = True
        if not waiting:
            fn()
        elif start_polling:
            self._schedule_poll()

    def _schedule_poll(self) -> None:
        assert self._call_later is not None
        self._call_later(self._poll_seconds, self._poll)

    def _poll(self) -> None:
        backlog = self._backlog_bytes()
        with self._lock:
            if self._waiters and self._used + backlog > self.low_water:
                again = True
                waiters: list[Callable[[], None]] = []
            else:
                again = self._polling = False
                waiters, self._waiters = self._waiters, []
        if again:
            self._schedule_poll()
        for fn in waiters:
            fn()

    def __repr__(self) -> str:
        return f"ByteBudget({self.name!r}, used={self._used}, limit={self.limit})"


class Admission:
    """One connection's budget and the fuller budgets its work went to: it should stop reading while
    any of them is full. Used on the connection's thread (the reactor), except ``touch``, which the
    store calls on whichever thread appends for the connection."""

    __slots__ = ("budget", "_touched", "_lock")

    def __init__(self, budget: ByteBudget) -> None:
        self.budget = budget
        self._touched: set[ByteBudget] = set()
        self._lock = threading.Lock()

    def touch(self, budget: ByteBudget) -> None:
        """Work of this connection now holds bytes in ``budget`` (a container's)."""
        if budget.full:
            with self._lock:
                self._touched.add(budget)

    def blocking(self) -> ByteBudget | None:
        """A full budget this connection must wait for, or None when it may read."""
        if self.budget.full:
            return self.budget
        if not self._touched:
            return None
        with self._lock:
            for b in list(self._touched):
                if b.full:
                    return b
                self._touched.discard(b)
        return None


# The admission of the request being dispatched on this thread, if any (a hot path sets and resets
# it directly; ``charging`` is the readable form).
CURRENT_ADMISSION: contextvars.ContextVar[Admission | None] = contextvars.ContextVar(
    "millrace_admission", default=None)
current_admission = CURRENT_ADMISSION.get


@contextlib.contextmanager
def charging(admission: Admission) -> Iterator[None]:
    """Charge store appends made synchronously inside the block to ``admission`` too."""
    token = CURRENT_ADMISSION.set(admission)
    try:
        yield
    finally:
        CURRENT_ADMISSION.reset(token)
