"""Waiting in tests for something a real server does in its own time (never a timed assertion: the
timeout only ends a test that would otherwise hang, and names what never happened)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], object], what: str, timeout: float = 60.0, interval: float = 0.05) -> None:
    """Return once ``predicate()`` is true; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)
