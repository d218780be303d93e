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
