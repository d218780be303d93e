"""Fixtures of the durable-log tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from millrace.store.durablelog.kernel_sync import KernelSyncs


@pytest.fixture
def syncs() -> Iterator[KernelSyncs]:
    """An AIO context for kernel syncs (skips where the kernel gives none), closed after the test."""
    opened = KernelSyncs.open()
    if opened is None:
        pytest.skip("this kernel gives no AIO context")
    yield opened
    opened.close()
