"""Recovery of a partition segment trusts its index segment only while the entries are contiguous in
segment order: an index written out of order (322, 324, 323 in a nemesis run, by a gateway that indexed
batches in the order their completions reached the reactor) or with a gap made a reload stop there and
serve a high watermark of 324 over 1206 stored records. Past such an entry the data is scanned. And a
writer whose index append finds entries it did not write there stops instead of appending after them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from twisted.internet.task import Clock
from twisted.python import threadable

from millrace.protocol.contracts import ReadResult
from millrace.protocol.errors import BadOffsetError
from millrace.protocol.records import NewRecord, build_record_batch, iter_batches
from millrace.store.futures import StoreFuture, completed
from millrace.store.segment_store import SegmentStore
from millrace.streams.partitions.formats import ENVELOPE, INDEX_SUFFIX, IndexEntry, envelope
from millrace.streams.partitions.segments import SegmentWriter, create_index_segment, recover_segment
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


class IndexOnlyStore:
    """The index segment of one data segment, answering at once (a store seen from the reactor thread)."""

    def __init__(self, index: bytes = b"") -> None:
        self.index = bytearray(index)

    def append(self, name: str, data: bytes, expected_offset: int | None = None) -> StoreFuture[int]:
        assert name == NAME + INDEX_SUFFIX
        if expected_offset is not None and expected_offset != len(self.index):
            fut: StoreFuture[int] = StoreFuture()
            fut.set_exception(BadOffsetError("index moved on", expected_offset, len(self.index)))
            return fut
        self.index += data
        return completed(len(self.index))

    def read(self, name: str, offset: int, max_length: int, wait_timeout: float = 0.0) -> StoreFuture[ReadResult]:
        return completed(ReadResult(offset, bytes(self.index[offset:offset + min(max_length, 7)])))  # short reads


@pytest.fixture
def on_reactor_thread() -> None:
    threadable.registerAsIOThread()  # results of completed futures are delivered at once, as on the reactor


def entry(offset: int, position: int) -> IndexEntry:
    return IndexEntry(0, offset, position + ENVELOPE.size, 100, 0, 0, -1, -1, -1, 0)


def test_a_writer_resyncs_past_entries_that_are_its_own(on_reactor_thread: None) -> None:
    """Another append (a recovery, or ours whose answer was lost) put the same entries first: go on after them."""
    first, second = entry(0, 0), entry(1, 100 + ENVELOPE.size)
    store = IndexOnlyStore(first.pack())
    writer = SegmentWriter(store, Clock(), NAME, tail=0, index_tail=0)  # type: ignore[arg-type]
    writer.index(first)
    writer.index(second)
    writer.flush_index()
    assert bytes(store.index) == first.pack() + second.pack()


def test_a_writer_whose_term_ended_never_appends_after_another_writers_entries(on_reactor_thread: None) -> None:
    """A zombie leader's index append finds the new leader's entries where it meant to write: it stops
    (recovery indexes the rest from the data) instead of appending its own after them (an index that
    went from offset 283 to 789 in a nemesis run)."""
    theirs = [entry(0, 0)]
    store = IndexOnlyStore(b"".join(e.pack() for e in theirs))
    writer = SegmentWriter(store, Clock(), NAME, tail=0, index_tail=0)  # type: ignore[arg-type]
    for n in range(3):  # the zombie's view: batches 500.. where the new leader wrote its batch 0
        writer.index(entry(500 + n, n * (100 + ENVELOPE.size)))
    writer.flush_index()
    writer.index(entry(503, 3 * (100 + ENVELOPE.size)))
    writer.flush_index()
    assert bytes(store.index) == b"".join(e.pack() for e in theirs)
