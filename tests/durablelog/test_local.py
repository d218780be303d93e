"""FileDurableDataLog: appends, group commit, ordering, rolling, truncation, fencing in-process, errors."""

from __future__ import annotations

import errno
import os
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from millrace.store.durablelog.interface import LogAddress
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.errors import ContainerOfflineError, DataLogWriterFencedError
from tests.durablelog.helpers import log_files, open_log, payload_for, read_payloads
from tests.page_cache import resident_bytes


def test_round_trip_and_reopen(tmp_path: Path) -> None:
    payloads = [b"", b"a", bytes(range(256)) * 4, os.urandom(1 << 20), b"tail"]
    log = open_log(tmp_path)
    assert list(log.read_all()) == []
    addresses = [f.result(timeout=10) for f in [log.append(p) for p in payloads]]
    assert [a.sequence for a in addresses] == [1, 2, 3, 4, 5]
    log.close()
    assert read_payloads(tmp_path) == list(zip([1, 2, 3, 4, 5], payloads, strict=True))


def test_accepts_bytes_like_and_copies_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    buf = bytearray(b"before")
    future = log.append(buf)
    buf[:] = b"AFTER!"
    future.result(timeout=10)
    log.append(memoryview(b"view")).result(timeout=10)
    log.close()
    assert read_payloads(tmp_path) == [(1, b"before"), (2, b"view")]


def test_epoch_increments_on_every_open(tmp_path: Path) -> None:
    epochs = []
    for _ in range(3):
        log = open_log(tmp_path)
        epochs.append(log.epoch)
        log.close()
    assert epochs == [1, 2, 3]


def test_ordering_under_16_threads_and_group_commit(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    per_thread = 300
    results: dict[int, list[tuple[int, int]]] = {}
    completion_order: list[int] = []  # as the writer thread completed them
    start = threading.Barrier(16)
    appenders: set[int] = set()

    def completed(fut: Future) -> None:
        # A callback added to a future already complete runs at once on the appending thread, out of
        # the writer's order: only the writer thread's calls show the order futures complete in.
        if threading.get_ident() not in appenders:
            completion_order.append(fut.result().sequence)

    def worker(worker_id: int) -> None:
        appenders.add(threading.get_ident())
        start.wait()
        futures = []
        for i in range(per_thread):
            f = log.append(payload_for(worker_id, i))
            f.add_done_callback(completed)
            futures.append(f)
            if i % 10 == 0:
                f.result(timeout=30)  # mix waiting and pipelining appenders
        results[worker_id] = [(i, f.result(timeout=30).sequence) for i, f in enumerate(futures)]

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = log.stats
    log.close()

    total = 16 * per_thread
    assert stats.appends == total
    assert stats.fsyncs == stats.batches
    assert stats.fsyncs < total, "group commit should batch concurrent appends"
    # Futures complete in sequence order (callbacks run on the writer thread, one batch after another).
    assert completion_order == sorted(completion_order) and len(completion_order) > total // 10
    entries = dict(read_payloads(tmp_path))
    assert sorted(entries) == list(range(1, total + 1))
    for worker_id, pairs in results.items():
        sequences = [seq for _, seq in pairs]
        assert sequences == sorted(sequences), "one thread's appends keep their order"
        for i, seq in pairs:
            assert entries[seq] == payload_for(worker_id, i)


def test_rolling_names_files_by_first_sequence(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_file_bytes=1000)
    for i in range(100):
        log.append(payload_for(0, i)).result(timeout=10)  # one entry per batch, so rolls are exact
    size = log.size_bytes
    log.close()
    names = log_files(tmp_path)
    assert len(names) > 5
    firsts = [int(n[:-4]) for n in names]
    assert firsts[0] == 1 and firsts == sorted(firsts)
    assert size == sum(os.path.getsize(tmp_path / n) for n in names)
    entries = read_payloads(tmp_path, max_file_bytes=1000)
    assert entries == [(i + 1, payload_for(0, i)) for i in range(100)]
    # each file starts exactly where the previous one ended
    log = open_log(tmp_path, max_file_bytes=1000)
    log.close()


def test_truncate_deletes_files_and_survives_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_file_bytes=500)
    for i in range(60):
        log.append(payload_for(1, i)).result(timeout=10)
    before_files, before_size = len(log_files(tmp_path)), log.size_bytes
    log.truncate(LogAddress(30))
    after_files = log_files(tmp_path)
    assert len(after_files) < before_files
    assert int(after_files[0][:-4]) <= 31  # the file holding 31 is kept
    assert log.size_bytes < before_size
    log.truncate(LogAddress(10))  # going backwards is a no-op
    log.close()
    entries = read_payloads(tmp_path, max_file_bytes=500)
    assert entries == [(i + 1, payload_for(1, i)) for i in range(30, 60)]


def test_truncate_everything_keeps_sequence_continuity(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_file_bytes=200)
    for _ in range(20):
        log.append(b"x" * 50).result(timeout=10)
    log.truncate(LogAddress(20))
    log.close()
    log = open_log(tmp_path, max_file_bytes=200)
    assert list(log.read_all()) == []
    assert log.size_bytes == 0
    assert len(log_files(tmp_path)) == 1
    assert log.append(b"next").result(timeout=10) == LogAddress(21)
    log.close()
    assert read_payloads(tmp_path) == [(21, b"next")]


def test_truncate_inside_a_file_hides_entries_after_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(10):
        log.append(bytes([i])).result(timeout=10)
    log.close()
    log = open_log(tmp_path)
    log.truncate(LogAddress(4))
    assert [e.address.sequence for e in log.read_all()] == list(range(5, 11))
    assert log.append(b"more").result(timeout=10) == LogAddress(11)
    log.close()
    assert [s for s, _ in read_payloads(tmp_path)] == list(range(5, 12))


def test_truncate_rejects_unwritten_addresses(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(b"a").result(timeout=10)
    with pytest.raises(ValueError):
        log.truncate(LogAddress(2))
    log.close()
    with pytest.raises(ContainerOfflineError):
        log.truncate(LogAddress(1))


def test_read_all_only_before_first_append(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(b"a").result(timeout=10)
    with pytest.raises(RuntimeError):
        log.read_all()
    log.close()


def test_close_flushes_queue_and_later_appends_fail(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    futures = [log.append(b"q%d" % i) for i in range(5000)]
    log.close()
    assert [f.result(timeout=0).sequence for f in futures] == list(range(1, 5001))
    late = log.append(b"late")
    with pytest.raises(ContainerOfflineError):
        late.result(timeout=1)
    log.close()  # idempotent
    assert len(read_payloads(tmp_path)) == 5000


def test_reopen_same_instance_after_close(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(b"one").result(timeout=10)
    log.close()
    log.open()
    assert log.epoch == 2
    assert [e.payload for e in log.read_all()] == [b"one"]
    assert log.append(b"two").result(timeout=10) == LogAddress(2)
    log.close()


def test_second_owner_in_same_process_is_fenced(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(DataLogWriterFencedError):
        FileDurableDataLog(str(tmp_path)).open()
    log.close()
    other = open_log(tmp_path)
    assert other.epoch == 2
    other.close()


def test_sync_failure_breaks_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    acked = log.append(b"good").result(timeout=10)

    def failing_sync(fd: int) -> None:
        raise OSError(errno.EIO, "injected fsync failure")

    log._sync_file = failing_sync
    failed = log.append(b"lost?")
    with pytest.raises(OSError, match="injected"):
        failed.result(timeout=10)
    later = log.append(b"after")
    with pytest.raises(ContainerOfflineError) as info:
        later.result(timeout=10)
    assert isinstance(info.value.__cause__, OSError)
    log.close()
    entries = read_payloads(tmp_path)
    # The acked entry survives; the failed one may or may not (it was never acknowledged).
    assert entries[0] == (acked.sequence, b"good")
    assert [p for _, p in entries][1:] in ([], [b"lost?"])


def test_entries_queued_behind_a_failed_sync_fail_too(tmp_path: Path) -> None:
    """Entries already queued when a sync fails are answered (ContainerOfflineError), never stranded."""
    log = open_log(tmp_path)
    entered, release = threading.Event(), threading.Event()

    def failing_sync(fd: int) -> None:
        entered.set()
        release.wait(10)
        raise OSError(errno.EIO, "injected fsync failure")

    log._sync_file = failing_sync
    first = log.append(b"first")
    assert entered.wait(10)
    queued = [log.append_parts([b"queued-", b"%d" % i]) for i in range(5)]
    release.set()
    with pytest.raises(OSError, match="injected"):
        first.result(timeout=10)
    for future in queued:
        with pytest.raises(ContainerOfflineError):
            future.result(timeout=10)
    log.close()


def test_cancelled_future_does_not_disturb_the_writer(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    block = threading.Event()
    original = log._sync_file

    def slow_sync(fd: int) -> None:
        block.wait(5)
        original(fd)

    log._sync_file = slow_sync
    first = log.append(b"first")
    futures: list[Future[LogAddress]] = [log.append(b"x%d" % i) for i in range(10)]
    futures[3].cancel()
    block.set()
    first.result(timeout=10)
    assert [f.result(timeout=10).sequence for i, f in enumerate(futures) if i != 3] == [
        s for s in range(2, 12) if s != 5
    ]
    log.close()
    assert len(read_payloads(tmp_path)) == 11


def test_callback_may_append_without_deadlock(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    chained: list[Future[LogAddress]] = []
    log.append(b"a").add_done_callback(lambda _f: chained.append(log.append(b"b")))
    while not chained:
        threading.Event().wait(0.01)
    assert chained[0].result(timeout=10) == LogAddress(2)
    log.close()


def test_close_racing_appenders_answers_every_future(tmp_path: Path) -> None:
    log = open_log(tmp_path / "nested" / "log")
    futures: list[list[tuple[bytes, Future[LogAddress]]]] = [[] for _ in range(8)]
    go = threading.Event()

    def worker(worker_id: int) -> None:
        go.wait()
        for i in range(100_000):
            payload = payload_for(worker_id, i)
            f = log.append(payload)
            futures[worker_id].append((payload, f))
            if f.done() and f.exception() is not None:
                return

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    go.set()
    threading.Event().wait(0.2)
    log.close()
    for t in threads:
        t.join()
    acked: dict[int, bytes] = {}
    for per_worker in futures:
        for payload, f in per_worker:
            error = f.exception(timeout=10)  # every future is answered
            if error is None:
                acked[f.result().sequence] = payload
            else:
                assert isinstance(error, ContainerOfflineError)
    assert sorted(acked) == list(range(1, len(acked) + 1))
    assert dict(read_payloads(tmp_path / "nested" / "log")) == acked


def test_oversized_entry_is_refused_without_breaking_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from millrace.store.durablelog import framing

    monkeypatch.setattr(framing, "MAX_PAYLOAD", 1000)
    log = open_log(tmp_path)
    with pytest.raises(ValueError):
        log.append(b"x" * 1001).result(timeout=10)
    assert log.append(b"x" * 1000).result(timeout=10) == LogAddress(1)
    log.close()


def test_nothing_completes_before_the_sync_returns(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    entered, release = threading.Event(), threading.Event()
    original = log._sync_file

    def gated_sync(fd: int) -> None:
        entered.set()
        release.wait(10)
        original(fd)

    log._sync_file = gated_sync
    futures = [log.append(b"e%d" % i) for i in range(50)]
    assert entered.wait(10)
    threading.Event().wait(0.2)
    assert not any(f.done() for f in futures)
    assert log.stats.fsyncs == 0
    release.set()
    assert [f.result(timeout=10).sequence for f in futures] == list(range(1, 51))
    assert log.stats.fsyncs == log.stats.batches >= 1
    log.close()


@pytest.mark.parametrize("short", [False, True], ids=["pwritev", "short-writes"])
def test_entries_given_in_parts_read_back_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, short: bool) -> None:
    """``append_parts``: the writer hands the parts to pwritev as they are, more of them in one commit
    than one pwritev takes (IOV_MAX), and goes on after short writes; a mutable part is copied at once."""
    from millrace.store import fsutil

    pwritev = os.pwritev
    calls = []

    def counted_pwritev(fd: int, buffers: list, offset: int) -> int:  # short: at most 1,000 bytes, cut anywhere
        calls.append(len(buffers))
        given = [memoryview(b"".join(bytes(b) for b in buffers))[:1000]] if short else buffers
        return pwritev(fd, given, offset)

    monkeypatch.setattr(fsutil.os, "pwritev", counted_pwritev)
    log = open_log(tmp_path)
    entered, release = threading.Event(), threading.Event()
    original = log._sync_file

    def gated_sync(fd: int) -> None:  # holds the first commit, so the rest queue up for one commit
        entered.set()
        release.wait(10)
        original(fd)

    log._sync_file = gated_sync
    first = log.append_parts([b"first"])
    assert entered.wait(10)
    mutable = bytearray(b"mutable")
    expected = [b"first"]
    futures = [first, log.append_parts([b"head-", mutable, memoryview(b"-view")])]
    expected.append(b"head-mutable-view")
    mutable[:] = b"CHANGED"
    for i in range(1500):  # 4,500 buffers and 1,500 headers: more than one pwritev takes
        parts = [b"%d:" % i, b"", os.urandom(i % 50)]
        futures.append(log.append_parts(parts))
        expected.append(b"".join(parts))
    release.set()
    assert [f.result(timeout=30).sequence for f in futures] == list(range(1, 1503))
    log.close()
    monkeypatch.undo()
    assert max(calls) <= fsutil._IOV_MAX and len(calls) > 2
    assert read_payloads(tmp_path) == list(zip(range(1, 1503), expected, strict=True))


def test_durable_entries_leave_the_page_cache(tmp_path: Path) -> None:
    """Once fdatasync'd, an entry is only read again by recovery: its pages are dropped rather than kept
    (and the memory taken afresh for every new entry), all but the 2 MiB still being written, and the
    log still reads back whole."""
    payloads = [os.urandom(256 << 10) for _ in range(24)]
    log = open_log(tmp_path)
    for f in [log.append(p) for p in payloads]:
        f.result(timeout=10)
    (name,) = log_files(tmp_path)
    assert os.path.getsize(tmp_path / name) > 6 << 20
    assert resident_bytes(tmp_path / name) <= 2 << 20
    log.close()
    assert [p for _, p in read_payloads(tmp_path)] == payloads


def _crash_image(source: Path, target: Path) -> None:
    """The log directory as a crash would leave it: its files as they are now, the lock not held."""
    target.mkdir()
    for name in os.listdir(source):
        if name != "lock":
            (target / name).write_bytes((source / name).read_bytes())


def test_the_active_file_is_allocated_ahead_and_cut_to_its_entries(tmp_path: Path) -> None:
    """Appends go into space allocated ahead of them (an fdatasync then commits no size change); a
    crash leaves that space as a zero-filled tail, which reopening cuts; a clean close cuts it too."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    log = open_log(live, preallocate_bytes=1 << 20)
    payloads = [os.urandom(100) for _ in range(20)]
    for payload in payloads:
        log.append(payload).result(timeout=10)
    (name,) = log_files(live)
    written = log.size_bytes
    assert os.path.getsize(live / name) == 120 + (1 << 20)  # a step past the first entry (20 + 100 bytes)
    _crash_image(live, crashed)
    log.close()
    assert os.path.getsize(live / name) == written
    assert [p for _, p in read_payloads(live)] == payloads

    reopened = open_log(crashed, preallocate_bytes=1 << 20)
    assert [e.payload for e in reopened.read_all()] == payloads
    assert os.path.getsize(crashed / name) == written  # the zero tail is gone before any new append
    reopened.append(b"after").result(timeout=10)
    reopened.close()
    assert [p for _, p in read_payloads(crashed)] == [*payloads, b"after"]


def test_a_file_is_cut_to_its_entries_before_the_next_one_starts(tmp_path: Path) -> None:
    """Only the last file may end in allocated zeros: recovery takes damage anywhere else for corruption."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    log = open_log(live, max_file_bytes=1000, preallocate_bytes=64 << 10)
    for i in range(50):
        log.append(payload_for(0, i)).result(timeout=10)
    names = log_files(live)
    assert len(names) > 2
    for earlier, later in zip(names, names[1:], strict=False):
        frames = frames_filling(live / earlier)
        assert int(later[:-4]) == int(earlier[:-4]) + frames
    _crash_image(live, crashed)
    log.close()
    assert read_payloads(crashed, max_file_bytes=1000) == [(i + 1, payload_for(0, i)) for i in range(50)]


def frames_filling(path: Path) -> int:
    """How many whole frames the file holds, requiring that they fill it exactly."""
    from millrace.store.durablelog import framing

    data = path.read_bytes()
    frames = list(framing.iter_frames(data))
    assert frames and frames[-1][2] == len(data)
    return len(frames)


def test_a_file_system_that_cannot_allocate_ahead_is_written_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    log = open_log(tmp_path)
    for i in range(10):
        log.append(payload_for(1, i)).result(timeout=10)
    (name,) = log_files(tmp_path)
    assert os.path.getsize(tmp_path / name) == log.size_bytes
    log.close()
    assert read_payloads(tmp_path) == [(i + 1, payload_for(1, i)) for i in range(10)]
