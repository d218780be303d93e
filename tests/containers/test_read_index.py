"""The read index's budget bounds the memory its entries take, not only their data bytes."""

from __future__ import annotations

import os
import sys
import tracemalloc

from millrace.store.containers.read_index import ENTRY_OVERHEAD, ReadIndex


def test_small_entries_count_what_they_cost_in_memory() -> None:
    """A cache of 100-byte appends whose budget counted data alone held about twice its budget."""
    budget = 1 << 20
    index = ReadIndex(budget)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(50_000):  # 5 MB of data through a 1 MiB cache: everything clean is evicted
            index.append(1, i * 100, os.urandom(100))
            if i % 1000 == 999:
                index.mark_clean(1, (i + 1) * 100)
                index.evict()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert index.total_bytes <= budget
    assert held <= budget * 1.25  # within the budget but for the lists' spare capacity


def test_the_overhead_is_what_an_entry_costs() -> None:
    assert sys.getsizeof(b"") + sys.getsizeof(10**12) <= ENTRY_OVERHEAD
    index = ReadIndex(1 << 20)
    index.append(7, 0, b"x" * 10)
    assert index.total_bytes == 10 + ENTRY_OVERHEAD
    index.drop_below(7, 10)
    assert index.total_bytes == 0


def test_unflushed_bytes_are_counted_as_they_come_and_go() -> None:
    """The storage writer reads the container's un-flushed bytes on every append, so the index keeps the
    sum instead of adding up its segments each time."""
    index = ReadIndex(1 << 20)
    for segment in (1, 2, 3):
        for i in range(10):
            index.append(segment, i * 100, bytes(100))
    assert index.dirty_bytes == 3000
    index.mark_clean(1, 450)  # whole entries only: four of them
    assert index.dirty_bytes == 2600
    index.drop_below(2, 300)
    assert index.dirty_bytes == 2300
    index.remove(3)
    assert index.dirty_bytes == 1300
    assert index.dirty_bytes == sum(cache.dirty_bytes for _, cache in index.dirty_segments())
