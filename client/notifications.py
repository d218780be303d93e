"""A reader group's notifications, as Pravega's ``ReaderGroup.getSegmentNotifier`` and
``getEndOfDataNotifier``: listeners told when the number of segments the group reads changes, and
when every stream of the group is read to its end.

    notifier = group.segment_notifier(interval=10.0)
    notifier.register_listener(lambda n: scale_readers_to(n.number_of_segments))

Both poll the group's state (a state synchronizer read, nothing on the server of their own): a
thread of the notifier's own checks every ``interval`` seconds while a listener is registered, and
``check()`` checks at once on the caller's thread. Listeners run on that thread, or through the
``executor`` given (anything with ``submit(fn, *args)``: a ``concurrent.futures`` executor, or the
event loop's adapter ``millrace.aio`` uses, which also runs coroutine listeners). A listener that
raises is logged and stays registered. After ``unregister_listener`` or ``close()`` returns, a
listener is not called again (one call already under way on another thread may finish).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, Self, TypeVar

log = logging.getLogger(__name__)

N = TypeVar("N")

DEFAULT_INTERVAL_S = 120.0  # as Pravega's pravega.client.segmentNotification.poll.interval.seconds


class Submitter(Protocol):
    """Where listeners run: ``concurrent.futures.Executor`` fits, so does any ``submit(fn, *args)``."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Any: ...


@dataclass(frozen=True)
class SegmentNotification:
    """The number of segments the group reads changed (Pravega's ``SegmentNotification``):
    ``number_of_segments`` held by readers or waiting for one (a successor counts once all its
    predecessors were read to their ends), and ``number_of_readers`` online."""

    number_of_segments: int
    number_of_readers: int


@dataclass(frozen=True)
class EndOfDataNotification:
    """Every stream of the group was read to its end (Pravega's ``EndOfDataNotification``): each is
    sealed and its last segments read, or, with end cuts, read up to them."""


Listener = Callable[[N], object]


class _PollingNotifier(Generic[N]):
    """Listeners of one kind of notification and the poller that finds them."""

    def __init__(self, what: str, interval: float | None, executor: Submitter | None) -> None:
        if interval is not None and interval <= 0:
            raise ValueError(f"interval must be positive seconds or None, not {interval!r}")
        self.interval = interval
        self.executor = executor
        self._what = what
        self._lock = threading.Lock()  # listeners, the poller, and what was last seen
        self._check_lock = threading.Lock()  # one check at a time, so notifications keep their order
        self._listeners: list[Listener[N]] = []
        self._stop: threading.Event | None = None  # the running poller's, None while none runs
        self._closed = False

    # -- listeners -------------------------------------------------------------------------------------
    def register_listener(self, listener: Listener[N]) -> None:
        """Call ``listener(notification)`` for every notification from now on. Starts polling (unless
        ``interval`` is None); its first check tells the state as it is."""
        with self._lock:
            if self._closed:
                raise ValueError(f"{self!r} is closed")
            self._listeners.append(listener)
            if self._stop is None and self.interval is not None:
                self._forget()  # a poller starting afresh tells its first listeners where things are
                self._stop = threading.Event()
                threading.Thread(target=self._poll, args=(self._stop, self.interval), daemon=True,
                                 name=f"millrace-{self._what}-notifier").start()

    def unregister_listener(self, listener: Listener[N] | None = None) -> None:
        """Stop calling ``listener`` (every listener with None); polling stops with the last one."""
        with self._lock:
            if listener is None:
                self._listeners.clear()
            else:
                # ==, not is: a bound method (``told.append``) is a new object at each access
                self._listeners = [fn for fn in self._listeners if fn != listener]
            if not self._listeners and self._stop is not None:
                self._stop.set()
                self._stop = None

    def close(self) -> None:
        """Unregister every listener and stop polling for good."""
        self.unregister_listener()
        with self._lock:
            self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- checking ------------------------------------------------------------------------------------
    def check(self) -> N | None:
        """Look at the group's state now (what the poller does every ``interval``); tell the
        listeners and return the notification if there is one, else None."""
        with self._check_lock:
            notification = self._next()
            if notification is not None:
                with self._lock:
                    listeners = list(self._listeners)
                for listener in listeners:
                    self._dispatch(listener, notification)
            return notification

    def _next(self) -> N | None:
        """The notification the state calls for now, if any (and remember what was seen)."""
        raise NotImplementedError

    def _forget(self) -> None:
        """Forget what was seen, so the next check tells the state as it is."""
        raise NotImplementedError

    def _poll(self, stop: threading.Event, interval: float) -> None:
        while not stop.is_set():
            try:
                self.check()
            except Exception:  # the poller must outlive a lost connection or a closed group
                if stop.is_set():
                    return  # closed meanwhile: the failure is the closing's
                log.warning("%r: checking the group's state failed; trying again in %g s", self, interval,
                            exc_info=True)
            stop.wait(interval)

    def _dispatch(self, listener: Listener[N], notification: N) -> None:
        if self.executor is None:
            self._call(listener, notification)
            return
        try:
            self.executor.submit(self._call, listener, notification)
        except Exception:  # e.g. an executor shut down or a closed event loop: nowhere to tell anyone
            log.warning("%r: its executor refused a notification; closing it", self, exc_info=True)
            self.close()

    def _call(self, listener: Listener[N], notification: N) -> object:
        with self._lock:
            registered = listener in self._listeners
        if not registered:
            return None  # unregistered since the notification was found
        try:
            return listener(notification)
        except Exception:
            log.exception("%r: listener %r failed on %r", self, listener, notification)
            return None


class SegmentNotifier(_PollingNotifier[SegmentNotification]):
    """Tells its listeners when the number of segments the group reads changes (Pravega's
    ``SegmentNotifier``), e.g. to run as many readers as there are segments."""

    def __init__(self, observe: Callable[[], tuple[int, int]], interval: float | None = DEFAULT_INTERVAL_S,
                 executor: Submitter | None = None) -> None:
        """``observe()``: (segments, online readers) in the group's state, read afresh."""
        super().__init__("segment", interval, executor)
        self._observe = observe
        self._segments: int | None = None

    def _next(self) -> SegmentNotification | None:
        segments, readers = self._observe()
        if segments == self._segments:
            return None  # as Pravega's: a change of readers alone is no notification
        self._segments = segments
        return SegmentNotification(segments, readers)

    def _forget(self) -> None:
        self._segments = None

    def __repr__(self) -> str:
        return f"SegmentNotifier(every {self.interval} s)"


class EndOfDataNotifier(_PollingNotifier[EndOfDataNotification]):
    """Tells its listeners once when every stream of the group has been read to its end (Pravega's
    ``EndOfDataNotifier``); again only after the group had data to read once more (a reset)."""

    def __init__(self, observe: Callable[[], bool], interval: float | None = DEFAULT_INTERVAL_S,
                 executor: Submitter | None = None) -> None:
        """``observe()``: whether the group's state, read afresh, has everything read."""
        super().__init__("end-of-data", interval, executor)
        self._observe = observe
        self._ended = False

    def _next(self) -> EndOfDataNotification | None:
        ended, told = self._observe(), self._ended
        self._ended = ended
        return EndOfDataNotification() if ended and not told else None

    def _forget(self) -> None:
        self._ended = False

    def __repr__(self) -> str:
        return f"EndOfDataNotifier(every {self.interval} s)"
