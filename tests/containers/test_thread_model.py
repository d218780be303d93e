"""The container's thread model: futures complete outside the container lock, so a callback may
use the container, even from another thread; parked tail reads end exactly once."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace

import pytest

from millrace.store.containers.container import FAILED
from millrace.store.durablelog.interface import Buffer, LogAddress
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.errors import DataLogWriterFencedError, SegmentExistsError, SegmentNotFoundError
from millrace.store.futures import StoreFuture
from millrace.store.lts.filesystem import FileSystemChunkStorage
from millrace.store.segment_store import SegmentStore
from tests.storehelpers import TEST_CONFIG, open_store


@pytest.fixture
def store(tmp_path):
    s = open_store(str(tmp_path), containers=1)
    yield s
    s.close()


def _watch_lock(store: SegmentStore, name: str, fut: StoreFuture) -> tuple[list[bool], threading.Event]:
    """When ``fut`` completes, its callback asks another thread to take the container lock (through
    get_info) and records whether that thread got in. A callback run under the lock would block it."""
    got_in: list[bool] = []
    finished = threading.Event()

    def callback(_: StoreFuture) -> None:
        other = threading.Thread(target=store.get_info, args=(name,), daemon=True)
        other.start()
        other.join(10)
        got_in.append(not other.is_alive())
        finished.set()

    fut.add_done_callback(callback)
    return got_in, finished


def test_appends_and_woken_tail_reads_complete_outside_the_lock(store):
    store.create_segment("t/a").result(5)
    parked = store.read("t/a", 0, 100, wait_timeout=30)
    read_got_in, read_finished = _watch_lock(store, "t/a", parked)
    append = store.append("t/a", b"wake")
    append_got_in, append_finished = _watch_lock(store, "t/a", append)
    assert read_finished.wait(30) and append_finished.wait(30)
    assert read_got_in == [True] and append_got_in == [True]
    assert parked.result(5).data == b"wake"


def test_a_callback_may_call_back_into_the_container(store):
    store.create_segment("t/b").result(5)
    follow_up: list[StoreFuture] = []
    first = store.append("t/b", b"one")
    first.add_done_callback(lambda _: follow_up.append(store.append("t/b", b"two")))
    first.result(5)
    assert follow_up[0].result(5) == 3
    assert store.read("t/b", 0, 10).result(5).data == b"onetwo"


def test_a_parked_read_fails_when_its_segment_is_deleted(store):
    store.create_segment("t/c").result(5)
    parked = store.read("t/c", 0, 100, wait_timeout=30)
    store.delete("t/c").result(5)
    with pytest.raises(SegmentNotFoundError):
        parked.result(5)


def test_a_repeated_seal_answers_once_everything_before_is_durable(store):
    store.create_segment("t/d").result(5)
    store.append("t/d", b"abc")
    first = store.seal("t/d")
    again = store.seal("t/d")  # accepted while the first may still be in flight
    assert again.result(5) == 3 and first.result(5) == 3
    assert store.get_info("t/d").sealed


class _HeldLog(FileDurableDataLog):
    """A file log that, while ``holding``, keeps appends back (in order) until ``release``."""

    holding = False

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.held: list[tuple[Sequence[Buffer], Future[LogAddress]]] = []

    def append_parts(self, parts: Sequence[Buffer]) -> Future[LogAddress]:
        if not self.holding:
            return super().append_parts(parts)
        later: Future[LogAddress] = Future()
        self.held.append((parts, later))
        return later

    def release(self) -> None:
        self.holding = False
        for parts, later in self.held:
            written = super().append_parts(parts)
            written.add_done_callback(lambda f, later=later: later.set_result(f.result()))


def test_a_create_racing_one_in_flight_is_refused_only_once_the_segment_is_visible(tmp_path):
    """Two callers create one segment; the second is told it exists only once the first creation is
    durable, so it can read the segment at once. Refused at once, a partition load that creates its
    index segment if missing (racing the topic's creation on a cluster) then found no such segment."""
    logs: list[_HeldLog] = []

    def new_log(cid: int) -> _HeldLog:
        logs.append(_HeldLog(str(tmp_path / f"log-{cid}")))
        return logs[-1]

    store = SegmentStore(1, new_log, FileSystemChunkStorage(str(tmp_path / "lts")), TEST_CONFIG)
    store.start()
    try:
        logs[0].holding = True
        first = store.create_segment("s/index")
        second = store.create_segment("s/index")
        assert not second.done()  # not refused while the segment is invisible to readers
        with pytest.raises(SegmentNotFoundError):
            store.get_info("s/index")
        logs[0].release()
        first.result(timeout=10)
        with pytest.raises(SegmentExistsError):
            second.result(timeout=10)
        assert store.get_info("s/index").length == 0
        with pytest.raises(SegmentExistsError):  # and at once, now that it is visible
            store.create_segment("s/index").result(timeout=0)
    finally:
        store.close()


class _GatedStorage(FileSystemChunkStorage):
    """Chunk writes wait at a gate once it is closed, so a test can hold the storage writer mid-flush."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.open = threading.Event()
        self.open.set()
        self.entered = threading.Event()

    def write_parts(self, name: str, parts: Sequence[Buffer]) -> None:
        if not self.open.is_set():
            self.entered.set()
            self.open.wait(30)
        super().write_parts(name, parts)


class _BreakableLog(FileDurableDataLog):
    """A file log whose appends fail once ``broken`` is set (a fenced or lost replicated log)."""

    broken = False

    def append_parts(self, parts: Sequence[Buffer]) -> Future[LogAddress]:
        if self.broken:
            failed: Future[LogAddress] = Future()
            failed.set_exception(DataLogWriterFencedError("fenced by a newer owner"))
            return failed
        return super().append_parts(parts)


def test_closing_a_failed_container_while_its_writer_flushes_does_not_deadlock(tmp_path):
    """A container whose log failed is closed while its storage writer is in the middle of a flush: the
    writer then reports the flush (which takes the container lock), so close must not hold the lock while
    it waits for the writer. It once did, and a cluster node whose container logs were fenced hung for
    good in the close, never registering again."""
    storage = _GatedStorage(str(tmp_path / "lts"))
    logs: list[_BreakableLog] = []

    def new_log(cid: int) -> _BreakableLog:
        logs.append(_BreakableLog(str(tmp_path / f"log-{cid}")))
        return logs[-1]

    store = SegmentStore(1, new_log, storage, replace(TEST_CONFIG, flush_age_seconds=0.05))
    store.start()
    container = store.container_for("s/a")
    try:
        store.create_segment("s/a").result(timeout=10)
        storage.open.clear()
        store.append("s/a", b"x" * 1000).result(timeout=10)
        assert storage.entered.wait(10), "the storage writer never flushed"
        logs[0].broken = True
        with pytest.raises(Exception):  # noqa: B017 - whichever error the failed log surfaces as
            store.append("s/a", b"y").result(timeout=10)
        assert container.state == FAILED
        closing = threading.Thread(target=container.close, daemon=True)
        closing.start()
        closing.join(0.5)  # let close reach the point where it waits for the writer
        storage.open.set()
        closing.join(20)
        # (Deadlocked, the store cannot be closed either: its threads are daemons and die with the run.)
        assert not closing.is_alive(), "closing the failed container deadlocked with its storage writer"
        store.close()
    finally:
        storage.open.set()
