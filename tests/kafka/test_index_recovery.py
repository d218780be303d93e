"""Recovery of a partition segment trusts its index segment only while the entries are contiguous in
segment order: an index written out of order (322, 324, 323 in a nemesis run, by a gateway that indexed
batches in the order their completions reached the reactor) or with a gap made a reload stop there and
serve a high watermark of 324 over 1206 stored records. Past such an entry the data is scanned."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millrace.gateway.kafka.partitions.formats import ENVELOPE, INDEX_SUFFIX, IndexEntry, envelope
from millrace.gateway.kafka.partitions.segments import create_index_segment, recover_segment
from millrace.gateway.kafka_protocol.records import NewRecord, build_record_batch, iter_batches
from millrace.store.segment_store import SegmentStore
from tests.storehelpers import open_store

NAME = "kafka/t/0.#epoch.0"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SegmentStore]:
    s = open_store(str(tmp_path))
    try:
        yield s
    finally:
        s.close()


def write_batches(store: SegmentStore, count: int) -> list[IndexEntry]:
    """``count`` one-record batches at offsets 0.. in the data segment; their index entries."""
    store.create_segment(NAME).result(10)
    create_index_segment(store, NAME)
    entries, position = [], 0
    for offset in range(count):
        batch = build_record_batch([NewRecord(key=None, value=f"v{offset}".encode())], base_offset=offset)
        header = next(iter_batches(batch)).header
        store.append(NAME, envelope(0, len(batch)) + batch, expected_offset=position).result(10)
        entries.append(IndexEntry.of_batch(0, offset, position + ENVELOPE.size, header))
        position += ENVELOPE.size + len(batch)
    return entries


def write_index(store: SegmentStore, entries: list[IndexEntry]) -> None:
    store.append(NAME + INDEX_SUFFIX, b"".join(e.pack() for e in entries), expected_offset=0).result(10)


@pytest.mark.parametrize("order", [[0, 1, 2, 3, 4, 5], [0, 1, 3, 2, 4, 5], [0, 1, 4, 5], [0, 2], []])
def test_recovery_finds_every_batch_whatever_the_index_holds(store: SegmentStore, order: list[int]) -> None:
    entries = write_batches(store, 6)
    write_index(store, [entries[i] for i in order])
    found = recover_segment(store, NAME)
    assert [e.base_offset for e in found.entries] == list(range(6))
    assert found.tail == entries[-1].end
