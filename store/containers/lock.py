"""The container lock: one plain, non-re-entrant lock that runs what was queued while it was held
right after it is released.

Work that may call out of the container (registering a callback on a log write that may already be
complete, which then runs at once) is queued with ``after_release`` instead of being done under the
lock. So nothing that completes a caller's future ever runs while the lock is held, and nothing ever
needs to take the lock twice: a thread that tried would deadlock at once, which tests reveal.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class ContainerLock:
    __slots__ = ("_lock", "_after_release")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._after_release: list[Callable[[], None]] = []

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        if not self._after_release:
            self._lock.release()
            return
        actions, self._after_release = self._after_release, []
        self._lock.release()
        for action in actions:
            action()

    def after_release(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the holder releases the lock. Caller holds it."""
        self._after_release.append(action)
