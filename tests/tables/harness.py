"""Builds segment stores for table and controller tests, with restart support."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tables.memory_store import MemorySegmentStore


def real_store_available() -> bool:
    try:
        import tests.storehelpers  # noqa: F401 - only whether it imports
    except ImportError:
        return False
    return True


class StoreHarness:
    """A store that can be restarted: ``restart()`` closes it and recovers a new one from disk
    (the memory store keeps its object: a restart then only drops the callers' in-memory state)."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.root = root
        self.store = self._open()

    def _open(self):
        if self.kind == "memory":
            return MemorySegmentStore()
        from tests.storehelpers import open_store

        return open_store(str(self.root))

    def restart(self):
        if self.kind != "memory":
            self.store.close()
            self.store = self._open()
        return self.store

    def close(self) -> None:
        if self.kind != "memory":
            self.store.close()


def make_harness(request, tmp_path: Path) -> StoreHarness:
    if request.param == "real" and not real_store_available():
        pytest.skip("the segment store has not landed yet")
    harness = StoreHarness(request.param, tmp_path)
    request.addfinalizer(harness.close)
    return harness
