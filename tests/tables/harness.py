"""A real segment store for table and controller tests, with restart support."""

from __future__ import annotations

from pathlib import Path

from tests.storehelpers import open_store


class StoreHarness:
    """``restart()`` closes the store and recovers a new one from disk."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = open_store(str(root))

    def restart(self):
        self.store.close()
        self.store = open_store(str(self.root))
        return self.store

    def close(self) -> None:
        self.store.close()


def make_harness(request, tmp_path: Path) -> StoreHarness:
    harness = StoreHarness(tmp_path)
    request.addfinalizer(harness.close)
    return harness
