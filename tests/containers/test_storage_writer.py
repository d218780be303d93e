"""The storage writer against a data source of its own: it needs nothing of a container but what
``WriterDataSource`` offers."""

from __future__ import annotations

import threading
from dataclasses import replace

from millrace.store.containers.config import ContainerConfig
from millrace.store.containers.storage_writer import DirtyRun, DirtySegment, StorageWriter, WriterDataSource
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.futures import StoreFuture, completed
from millrace.store.lts.filesystem import FileSystemChunkStorage
from millrace.store.segment_store import SegmentStore
from tests.waiting import wait_for

CONFIG = replace(ContainerConfig(), writer_poll_seconds=0.01, flush_age_seconds=3600.0)


class FakeSource:
    """One sealed segment (id 1, "s/a") with dirty runs waiting; logs what the writer reports."""

    container_id = 7
    epoch = 3
    serving = True

    def __init__(self, runs: list[DirtyRun], refuse_log: bool = False) -> None:
        self._lock = threading.Lock()
        self._runs = list(runs)
        self._refuse_log = refuse_log
        self.logged: list[tuple[int, int, int, str]] = []
        self.truncations = 0

    def unflushed_bytes(self) -> int:
        return 0

    def dirty_segments(self) -> list[DirtySegment]:
        with self._lock:
            size = sum(len(b) for run in self._runs for b in run.blocks)
            return [DirtySegment(1, size, 0.0, sealed=True)] if self._runs else []

    def dirty_run(self, segment_id: int, max_bytes: int) -> DirtyRun | None:
        with self._lock:
            return self._runs[0] if self._runs else None

    def log_storage_flushed(self, segment_id: int, offset: int, length: int, chunk: str) -> StoreFuture[None] | None:
        with self._lock:
            self._runs.pop(0)
            if self._refuse_log:
                return None
            self.logged.append((segment_id, offset, length, chunk))
            return completed(None)

    def flushed_whole(self, segment_id: int) -> bool:
        with self._lock:
            return not self._runs

    def referenced_chunks(self) -> set[str]:
        with self._lock:
            return {chunk for *_, chunk in self.logged}

    def truncate_log(self) -> None:
        self.truncations += 1

    def maybe_checkpoint(self, max_age: float) -> None:
        pass


def _writer(source: WriterDataSource, storage: FileSystemChunkStorage) -> StorageWriter:
    writer = StorageWriter(source, storage, CONFIG)
    writer.start(sweep_orphans=True)
    return writer


def test_a_sealed_segment_is_flushed_run_by_run_and_logged(tmp_path):
    storage = FileSystemChunkStorage(str(tmp_path))
    source = FakeSource([DirtyRun("s/a", 0, [b"abc", b"def"]), DirtyRun("s/a", 6, [b"gh"])])
    writer = _writer(source, storage)
    try:
        writer.request_flush(1).result(timeout=30)
    finally:
        writer.stop(final_flush=False)
    assert [(offset, length) for _, offset, length, _ in source.logged] == [(0, 6), (6, 2)]
    for _, offset, _, chunk in source.logged:
        assert chunk.startswith(f"containers/7/s/a/E3-O{offset}-")
    assert storage.read(source.logged[0][3], 0, 6) == b"abcdef"
    assert storage.read(source.logged[1][3], 0, 2) == b"gh"
    assert source.truncations > 0
    assert writer.chunks_written == 2 and writer.bytes_written == 8


def test_a_chunk_the_container_refuses_is_deleted(tmp_path):
    storage = FileSystemChunkStorage(str(tmp_path))
    source = FakeSource([DirtyRun("s/a", 0, [b"abc"])], refuse_log=True)
    writer = _writer(source, storage)
    try:
        writer.request_flush(1).result(timeout=30)
    finally:
        writer.stop(final_flush=False)
    assert storage.list("containers/7/") == []
    assert writer.chunks_written == 0


def test_the_start_sweeps_chunks_no_segment_references(tmp_path):
    storage = FileSystemChunkStorage(str(tmp_path))
    storage.write("containers/7/s/a/E1-O0-orphan", b"lost")
    storage.write("containers/8/s/b/E1-O0-other", b"another container's")
    source = FakeSource([DirtyRun("s/a", 0, [b"abc"])])
    writer = _writer(source, storage)
    try:
        writer.request_flush(1).result(timeout=30)
    finally:
        writer.stop(final_flush=False)
    assert storage.list("containers/7/") == [source.logged[0][3]]
    assert storage.list("containers/8/") == ["containers/8/s/b/E1-O0-other"]


class BusySource(FakeSource):
    """An open segment whose appends keep arriving: each flush that is logged lets ``arrivals`` more
    single-block appends in, as a busy segment's do while a chunk is written."""

    def __init__(self, arrivals: int) -> None:
        super().__init__([DirtyRun("s/a", 0, [b"x" * 10]), DirtyRun("s/a", 10, [b"y" * 10])])
        self.arrivals = arrivals
        self.asked: list[int] = []

    def dirty_segments(self) -> list[DirtySegment]:
        return [replace(d, sealed=False) for d in super().dirty_segments()]

    def dirty_run(self, segment_id: int, max_bytes: int) -> DirtyRun | None:
        self.asked.append(max_bytes)
        return super().dirty_run(segment_id, max_bytes)

    def log_storage_flushed(self, segment_id: int, offset: int, length: int, chunk: str) -> StoreFuture[None] | None:
        logged = super().log_storage_flushed(segment_id, offset, length, chunk)
        with self._lock:
            if self.arrivals > 0:
                self.arrivals -= 1
                end = self._runs[-1].offset + 10 if self._runs else offset + length
                self._runs.append(DirtyRun("s/a", end, [b"z" * 10]))
        return logged


def test_a_round_flushes_what_was_dirty_when_it_began_not_what_keeps_arriving(tmp_path):
    """A busy open segment is written in chunks of its age's or size's worth, never a chunk per few
    appends: the two runs dirty at the round's start are written; the appends that arrived while they
    were wait for a later round."""
    source = BusySource(arrivals=50)
    writer = StorageWriter(source, FileSystemChunkStorage(str(tmp_path)), replace(CONFIG, flush_age_seconds=0.0))
    writer._flush_round(force=False)
    assert [(offset, length) for _, offset, length, _ in source.logged] == [(0, 10), (10, 10)]
    assert source.asked == [20, 10]  # no chunk is asked for more than the round still owes
    assert len(source.dirty_segments()) == 1  # the arrivals: left for the next round


class ManySegments(FakeSource):
    """Several open segments, one run each, whose StorageFlushed operations stay in the log until the
    test applies them: the log's group commit."""

    def __init__(self, count: int) -> None:
        super().__init__([DirtyRun(f"s/{i}", 0, [b"x" * 10]) for i in range(count)])
        self.unapplied: list[StoreFuture[None]] = []

    def dirty_segments(self) -> list[DirtySegment]:
        with self._lock:
            return [DirtySegment(i, 10, 0.0, sealed=False) for i, _ in enumerate(self._runs)]

    def dirty_run(self, segment_id: int, max_bytes: int) -> DirtyRun | None:
        with self._lock:
            return next((run for run in self._runs if run.segment_name == f"s/{segment_id}"), None)

    def log_storage_flushed(self, segment_id: int, offset: int, length: int, chunk: str) -> StoreFuture[None] | None:
        with self._lock:
            self.logged.append((segment_id, offset, length, chunk))
            fut: StoreFuture[None] = StoreFuture()
            self.unapplied.append(fut)
            return fut


def test_a_round_logs_its_segments_flushes_together_and_waits_for_them_once(tmp_path):
    """Many small segments due by age cost one log round trip a round, not one each (each a fsync in the
    way of the appends); the round still ends only once every flush it logged is applied."""
    source = ManySegments(5)
    writer = StorageWriter(source, FileSystemChunkStorage(str(tmp_path)), replace(CONFIG, flush_age_seconds=0.0))
    round_done = threading.Event()
    flushing = threading.Thread(target=lambda: (writer._flush_round(force=False), round_done.set()))
    flushing.start()
    try:
        deadline = 10.0
        while len(source.logged) < 5 and deadline > 0:  # all five written and logged, none applied yet
            threading.Event().wait(0.01)
            deadline -= 0.01
        assert sorted(segment for segment, *_ in source.logged) == [0, 1, 2, 3, 4]
        assert not round_done.is_set()
    finally:
        for fut in source.unapplied:
            fut.set_result(None)
        flushing.join(10)
    assert round_done.is_set()


def test_a_container_flushes_when_unflushed_data_fills_its_budget_before_any_segment_is_due(tmp_path):
    """The container's budget counts durable data long-term storage does not hold yet and reopens at
    its low-water mark. Eight busy segments each below the size that makes a segment due (and far
    from its age) used to hold the budget full with the storage writer idle, so writers were held
    until the oldest aged out; the writer now flushes everything once they pass the low-water mark."""
    store = SegmentStore(
        1, lambda cid: FileDurableDataLog(str(tmp_path / f"log-{cid}")), FileSystemChunkStorage(str(tmp_path / "lts")),
        replace(CONFIG, cache_max_bytes=64 << 20, flush_threshold_bytes=8 << 20), container_budget_bytes=4 << 20)
    store.start()
    try:
        (container,), (budget,) = store.containers, store.budgets
        names = [f"s/busy{i}" for i in range(8)]
        for name in names:
            store.create_segment(name).result(10)
        block = b"x" * (64 << 10)
        for _ in range(5):  # 8 x 320 KiB: past the low-water mark (2 MiB), each segment far below 8 MiB
            for fut in [store.append(name, block) for name in names]:
                fut.result(10)
        # Every segment is flushed, not only enough of them to reopen the budget. (The budget falls to its
        # low-water mark as soon as a few flushes are applied, while the round still writes the rest:
        # reading the count then raced the round. What arrives after a round began waits for the next
        # reason to flush: the budget is open again.)
        wait_for(lambda: container.writer.chunks_written >= len(names), "the storage writer to flush every segment")
        wait_for(lambda: budget.held() <= budget.low_water, "the flushes to reopen the budget")
    finally:
        store.close()
