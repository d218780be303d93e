"""A segment writer's index stays one gapless, duplicate-free stream of entries when index appends fail,
as they do on a cluster: the index segment's container moves (an append lost, landed or not), or
another node's recovery writes the same entries first. Recovery trusts the index as a prefix and scans
the data past it, so a gap would hide batches and a duplicate would repeat them."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from millrace.protocol.contracts import ReadResult
from millrace.protocol.errors import BadOffsetError, ConnectionLostError, SegmentSealedError
from millrace.store.futures import StoreFuture, completed
from millrace.streams.partitions import segments
from millrace.streams.partitions.formats import ENVELOPE
from millrace.streams.partitions.segments import INDEX_FLUSH_SECONDS, SegmentWriter

ENTRY = 8  # bytes per stub entry (the real ones are fixed-size too)


class Entry:
    """Batch n of a data segment whose batches take 100 bytes each (envelope included)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.position = n * 100 + ENVELOPE.size
        self.length = 100 - ENVELOPE.size
        self.end = self.position + self.length

    def pack(self) -> bytes:
        return self.n.to_bytes(ENTRY, "big")


class IndexStore:
    """The index segment, with each append held until the test answers it."""

    def __init__(self) -> None:
        self.index = bytearray()
        self.waiting: list[tuple[int, bytes, StoreFuture[int]]] = []

    def append(self, name: str, data: bytes, expected_offset: int | None = None, **_: Any) -> StoreFuture[int]:
        fut: StoreFuture[int] = StoreFuture()
        assert expected_offset is not None
        self.waiting.append((expected_offset, bytes(data), fut))
        return fut

    def read(self, name: str, offset: int, max_length: int, wait_timeout: float = 0.0) -> StoreFuture[ReadResult]:
        """What the index holds (a writer reads back what another append put there before it goes on)."""
        return completed(ReadResult(offset, bytes(self.index[offset:offset + max_length])))

    def answer(self, lose: bool = False, land: bool = True) -> None:
        """Answer the oldest append: applied if its offset matches (and ``land``), refused otherwise;
        ``lose``: the answer is lost (ConnectionLostError), whether or not it landed."""
        expected, data, fut = self.waiting.pop(0)
        if expected != len(self.index):
            fut.set_exception(BadOffsetError("offset", expected, len(self.index)))
            return
        if land:
            self.index += data
        if lose:
            fut.set_exception(ConnectionLostError("lost"))
        else:
            fut.set_result(expected)

    def answer_all(self) -> None:
        while self.waiting:
            self.answer()

    def entries(self) -> list[int]:
        return [int.from_bytes(self.index[i:i + ENTRY], "big") for i in range(0, len(self.index), ENTRY)]


def _now(fut: StoreFuture[Any]) -> Deferred[Any]:
    d: Deferred[Any] = Deferred()
    fut.add_done_callback(lambda f: d.errback(f.exception()) if f.exception() else d.callback(f.result()))
    return d


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch) -> tuple[SegmentWriter, IndexStore, Clock]:
    monkeypatch.setattr(segments, "to_deferred", _now)  # no reactor here: answers come back at once
    store, clock = IndexStore(), Clock()
    return SegmentWriter(store, clock, "s/t/0", 0, 0), store, clock  # type: ignore[arg-type]


def write(writer: SegmentWriter, clock: Clock, numbers: range) -> None:
    """One flush of these entries (one index append)."""
    for n in numbers:
        writer.index(Entry(n))  # type: ignore[arg-type]
    clock.advance(INDEX_FLUSH_SECONDS)


def test_a_lost_append_that_never_landed_is_sent_again_and_later_ones_follow_it(setup: Any) -> None:
    writer, store, clock = setup
    write(writer, clock, range(0, 3))
    write(writer, clock, range(3, 5))
    write(writer, clock, range(5, 6))
    store.answer(lose=True, land=False)  # the container moved with it
    store.answer_all()  # the two behind it are refused, then the resent stream lands
    write(writer, clock, range(6, 8))
    store.answer_all()
    assert store.entries() == list(range(8))


def test_a_lost_append_that_landed_is_not_written_twice(setup: Any) -> None:
    writer, store, clock = setup
    write(writer, clock, range(0, 3))
    write(writer, clock, range(3, 5))
    store.answer(lose=True, land=True)
    store.answer_all()
    write(writer, clock, range(5, 7))
    store.answer_all()
    assert store.entries() == list(range(7))


def test_entries_another_writer_put_first_are_skipped_even_those_not_yet_queued_here(setup: Any) -> None:
    writer, store, clock = setup
    write(writer, clock, range(0, 2))
    store.answer_all()
    # Another node's recovery indexes batches 2..5 from the data before this writer hears of 4 and 5.
    store.index += b"".join(Entry(n).pack() for n in range(2, 6))
    write(writer, clock, range(2, 4))
    store.answer_all()
    write(writer, clock, range(4, 8))
    store.answer_all()
    assert store.entries() == list(range(8))


def test_an_unexpected_failure_stops_the_index_rather_than_leave_a_gap(setup: Any) -> None:
    writer, store, clock = setup
    write(writer, clock, range(0, 2))
    store.answer_all()
    write(writer, clock, range(2, 4))
    _, _, fut = store.waiting.pop(0)
    fut.set_exception(SegmentSealedError("sealed"))
    write(writer, clock, range(4, 6))
    assert store.waiting == []  # nothing more is appended: recovery indexes the rest from the data
    assert store.entries() == [0, 1]


def test_entries_seen_durable_out_of_order_are_written_in_segment_order(setup: Any) -> None:
    """An append's completion may reach the reactor after a later one's (to_deferred fires at once for a
    future already complete): the index must still list the batches in segment order."""
    writer, store, clock = setup
    for n in (0, 2, 1, 3, 5, 6, 4, 7):
        writer.index(Entry(n))  # type: ignore[arg-type]
    clock.advance(INDEX_FLUSH_SECONDS)
    store.answer_all()
    assert store.entries() == list(range(8))
    writer.index(Entry(9))  # type: ignore[arg-type]  # 8 not durable yet: 9 waits for it
    clock.advance(INDEX_FLUSH_SECONDS)
    assert store.waiting == [] and store.entries() == list(range(8))
    writer.index(Entry(8))  # type: ignore[arg-type]
    clock.advance(INDEX_FLUSH_SECONDS)
    store.answer_all()
    assert store.entries() == list(range(10))
