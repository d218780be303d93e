"""Group commit at the end of an event loop's turn (``turn_commits``) with the local durable log: which
thread writes and syncs, and that nothing queued is stranded between a turn and the writer."""

from __future__ import annotations

import errno
import os
import select
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest

from millrace.store.durablelog.interface import LogAddress
from millrace.store.durablelog.kernel_sync import KernelSyncs
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.durablelog.turn_commits import TURN_COMMIT_BYTES, TURN_COMMIT_SYNC_SECONDS, TurnCommits
from millrace.store.errors import ContainerOfflineError
from tests.durablelog.helpers import read_payloads


class ManualLoop:
    """An event loop whose thread is the test's and whose turns end when the test says."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.soon: list[Callable[[], None]] = []

    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self.thread

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.soon.append(fn)

    def watch_readable(self, fd: int, on_readable: Callable[[], object]) -> None:
        self.watched = (fd, on_readable)

    def when_stopped(self, fn: Callable[[], None]) -> None:
        self.stopped = fn

    def stop(self) -> None:
        """The loop stops for good: no turn of it ends again, and it is no longer the loop's thread."""
        self.soon = []
        self.thread = -1
        self.stopped()

    def read_when_readable(self, timeout: float = 10.0) -> None:
        """What the loop does when the watched descriptor turns readable (kernel syncs ended)."""
        fd, on_readable = self.watched
        assert select.select([fd], [], [], timeout)[0], "the watched descriptor never turned readable"
        on_readable()

    def end_turn(self) -> None:
        calls, self.soon = self.soon, []
        for fn in calls:
            fn()


def turn_log(path: Path, turns: TurnCommits) -> tuple[FileDurableDataLog, list[int]]:
    """An open log on ``turns`` and the list of threads its syncs ran on."""
    log = FileDurableDataLog(str(path), turns=turns)
    log.open()
    synced_on: list[int] = []

    def sync(fd: int) -> None:
        synced_on.append(threading.get_ident())
        os.fdatasync(fd)

    log._sync_file = sync
    return log, synced_on


def test_a_turns_appends_are_written_at_its_end_on_the_loops_thread(tmp_path: Path) -> None:
    loop = ManualLoop()
    log, synced_on = turn_log(tmp_path, TurnCommits(loop))
    futures = [log.append(b"one"), log.append(b"two")]
    assert not any(f.done() for f in futures)  # the writer thread was not woken for them
    assert len(loop.soon) == 1  # one turn end for the turn, however many appends
    loop.end_turn()
    assert [f.result(timeout=0) for f in futures] == [LogAddress(1), LogAddress(2)]
    assert synced_on == [loop.thread]
    assert log.stats.fsyncs == 1
    assert (log.stats.turn_commits, log.stats.writer_commits) == (1, 0)
    log.close()
    assert read_payloads(tmp_path) == [(1, b"one"), (2, b"two")]


def test_only_the_last_due_log_commits_here_and_the_others_overlap_on_their_writers(tmp_path: Path) -> None:
    loop = ManualLoop()
    turns = TurnCommits(loop)
    (first, first_synced), (last, last_synced) = turn_log(tmp_path / "a", turns), turn_log(tmp_path / "b", turns)
    a, b = first.append(b"a"), last.append(b"b")
    loop.end_turn()
    assert b.done() and last_synced == [loop.thread]
    assert a.result(timeout=10) == LogAddress(1)
    assert first_synced and first_synced[0] != loop.thread
    first.close()
    last.close()


def test_a_queue_too_big_for_the_loop_goes_to_the_writer(tmp_path: Path) -> None:
    loop = ManualLoop()
    log, synced_on = turn_log(tmp_path, TurnCommits(loop))
    big = log.append(b"x" * (TURN_COMMIT_BYTES + 1))
    loop.end_turn()
    assert big.result(timeout=10) == LogAddress(1)
    assert synced_on and loop.thread not in synced_on
    assert (log.stats.turn_commits, log.stats.writer_commits) == (0, 1)
    log.close()


def test_appends_from_another_thread_wake_the_writer_as_ever(tmp_path: Path) -> None:
    loop = ManualLoop()
    log, synced_on = turn_log(tmp_path, TurnCommits(loop))
    appended: list[Future[LogAddress]] = []
    other = threading.Thread(target=lambda: appended.append(log.append(b"elsewhere")))
    other.start()
    other.join()
    assert appended[0].result(timeout=10) == LogAddress(1)
    assert loop.soon == [] and loop.thread not in synced_on
    log.close()


def test_what_a_completion_appends_is_written_at_the_next_turns_end(tmp_path: Path) -> None:
    """The operation processor sends its next frame from a frame's completion: on the loop's thread,
    in the middle of a turn's commit. That append belongs to the next turn, and is not lost."""
    loop = ManualLoop()
    log, synced_on = turn_log(tmp_path, TurnCommits(loop))
    followers: list[Future[LogAddress]] = []
    first = log.append(b"first")
    first.add_done_callback(lambda _: followers.append(log.append(b"follower")))
    loop.end_turn()
    assert first.done() and len(followers) == 1 and not followers[0].done()
    assert len(loop.soon) == 1
    loop.end_turn()
    assert followers[0].result(timeout=0) == LogAddress(2)
    assert synced_on == [loop.thread, loop.thread]
    log.close()


def test_close_writes_what_waits_for_a_turn_that_never_ends(tmp_path: Path) -> None:
    loop = ManualLoop()
    log, _ = turn_log(tmp_path, TurnCommits(loop))
    waiting = log.append(b"waiting")
    closer = threading.Thread(target=log.close)  # a loop that stopped: its turn end never runs
    closer.start()
    closer.join(timeout=10)
    assert not closer.is_alive()
    assert waiting.result(timeout=0) == LogAddress(1)
    loop.end_turn()  # a late turn end finds nothing to do, and no open file
    assert read_payloads(tmp_path) == [(1, b"waiting")]


def test_a_log_reopened_before_its_turn_ended_commits_at_that_turns_end(tmp_path: Path) -> None:
    """A container's log closed and opened again while the loop runs (a restart after a failure)."""
    loop = ManualLoop()
    log, synced_on = turn_log(tmp_path, TurnCommits(loop))
    log.append(b"before")
    closer = threading.Thread(target=log.close)
    closer.start()
    closer.join(timeout=10)
    log.open()
    again = log.append(b"after")
    assert not again.done()
    loop.end_turn()
    assert again.result(timeout=0) == LogAddress(2)
    assert synced_on[-1] == loop.thread
    log.close()
    assert read_payloads(tmp_path) == [(1, b"before"), (2, b"after")]


def test_a_log_whose_syncs_are_slow_leaves_them_to_its_writer(tmp_path: Path) -> None:
    """A disk busy elsewhere makes each sync take milliseconds; the loop must not block in them."""
    loop = ManualLoop()
    log, synced_on = turn_log(tmp_path, TurnCommits(loop))
    fast_sync = log._sync_file

    def slow_sync(fd: int) -> None:
        time.sleep(3 * TURN_COMMIT_SYNC_SECONDS)  # at least this long: the average only climbs
        fast_sync(fd)

    log._sync_file = slow_sync
    for i in range(8):
        appended = log.append(b"%d" % i)
        loop.end_turn()
        appended.result(timeout=10)
    assert synced_on[0] == loop.thread
    assert synced_on[-1] != loop.thread
    log.close()


# -- syncs handed to the kernel (KernelSyncs) ------------------------------------------------------------



def test_a_turns_appends_are_synced_by_the_kernel_and_acked_when_the_loop_reaps(tmp_path: Path, syncs: KernelSyncs) -> None:
    loop = ManualLoop()
    turns = TurnCommits(loop, syncs)
    (a_log, a_synced), (b_log, b_synced) = turn_log(tmp_path / "a", turns), turn_log(tmp_path / "b", turns)
    a = [a_log.append(b"a1"), a_log.append(b"a2")]
    b = b_log.append(b"b1")
    loop.end_turn()
    assert syncs.submitted == 2  # both due logs' syncs are with the kernel at once, neither on a writer
    assert not any(f.done() for f in [*a, b])  # nothing is acked before its sync ended
    while not all(f.done() for f in [*a, b]):
        loop.read_when_readable()
    assert [f.result(timeout=0) for f in a] == [LogAddress(1), LogAddress(2)]
    assert b.result(timeout=0) == LogAddress(1)
    assert a_synced == [] and b_synced == []  # no fdatasync of ours ran, on any thread
    assert (a_log.stats.turn_commits, b_log.stats.turn_commits) == (1, 1)
    assert (a_log.stats.writer_commits, b_log.stats.writer_commits) == (0, 0)
    a_log.close()
    b_log.close()
    assert read_payloads(tmp_path / "a") == [(1, b"a1"), (2, b"a2")]


def test_what_is_queued_while_a_sync_is_with_the_kernel_waits_for_its_end(tmp_path: Path, syncs: KernelSyncs) -> None:
    """One batch of a log is in flight at a time, so acks keep sequence order; the batch queued behind
    it is written when the loop reaps the first, at the end of that turn."""
    loop = ManualLoop()
    log, _ = turn_log(tmp_path, TurnCommits(loop, syncs))
    first = log.append(b"first")
    loop.end_turn()
    second = log.append(b"second")
    loop.end_turn()
    assert syncs.submitted == 1 and not second.done()
    while not first.done():
        loop.read_when_readable()
    assert not second.done() and len(loop.soon) == 1
    loop.end_turn()
    assert syncs.submitted == 2
    while not second.done():
        loop.read_when_readable()
    assert (first.result(timeout=0), second.result(timeout=0)) == (LogAddress(1), LogAddress(2))
    log.close()


def test_a_failed_kernel_sync_fails_its_entries_and_breaks_the_log(tmp_path: Path, syncs: KernelSyncs) -> None:
    loop = ManualLoop()
    log, _ = turn_log(tmp_path, TurnCommits(loop, syncs))
    submit = syncs.submit
    syncs.submit = lambda fd, done: submit(fd, lambda _: done(OSError(errno.EIO, "injected")))  # type: ignore[method-assign]
    doomed = log.append(b"doomed")
    loop.end_turn()
    queued_behind = log.append(b"behind")
    loop.end_turn()
    loop.read_when_readable()
    with pytest.raises(OSError, match="injected"):
        doomed.result(timeout=0)
    with pytest.raises(ContainerOfflineError):
        queued_behind.result(timeout=10)
    with pytest.raises(ContainerOfflineError):
        log.append(b"after").result(timeout=0)
    log.close()


def test_a_sync_the_kernel_refuses_is_run_on_the_loops_thread(tmp_path: Path, syncs: KernelSyncs) -> None:
    loop = ManualLoop()
    log, synced_on = turn_log(tmp_path, TurnCommits(loop, syncs))

    def refuse(fd: int, done: object) -> None:
        raise OSError(errno.EAGAIN, "io_submit: no room")

    syncs.submit = refuse  # type: ignore[method-assign]
    appended = log.append(b"x")
    loop.end_turn()
    assert appended.result(timeout=0) == LogAddress(1)
    assert synced_on == [loop.thread]
    log.close()


def test_a_file_the_kernel_cannot_sync_asynchronously_is_not_offered_again(tmp_path: Path, syncs: KernelSyncs) -> None:
    """EINVAL (a filesystem with no asynchronous fsync) is the file's answer for good, unlike EAGAIN: the
    log's later commits sync on the loop's thread without a failed system call first."""
    loop = ManualLoop()
    log, synced_on = turn_log(tmp_path, TurnCommits(loop, syncs))
    offered: list[int] = []

    def refuse(fd: int, done: object) -> None:
        offered.append(fd)
        raise OSError(errno.EINVAL, "io_submit: Invalid argument")

    syncs.submit = refuse  # type: ignore[method-assign]
    for payload in (b"a", b"b", b"c"):
        appended = log.append(payload)
        loop.end_turn()
        assert appended.result(timeout=10).sequence > 0  # on this thread, or the writer's if syncs are slow
    assert len(offered) == 1 and len(synced_on) == 3
    log.close()


def test_close_waits_out_a_kernel_sync_the_stopped_loop_never_reaps(tmp_path: Path, syncs: KernelSyncs) -> None:
    loop = ManualLoop()
    log, _ = turn_log(tmp_path, TurnCommits(loop, syncs))
    in_flight = log.append(b"in flight")
    loop.end_turn()
    queued = log.append(b"queued behind it")
    closer = threading.Thread(target=log.close)
    closer.start()
    closer.join(timeout=10)
    assert not closer.is_alive()
    assert in_flight.result(timeout=0) == LogAddress(1)
    assert queued.result(timeout=0) == LogAddress(2)  # written by the writer before it exited
    assert read_payloads(tmp_path) == [(1, b"in flight"), (2, b"queued behind it")]


def test_a_loop_that_stops_hands_its_syncs_and_due_logs_to_the_writers(tmp_path: Path, syncs: KernelSyncs) -> None:
    """The server closes its store after the reactor stopped, waiting for what its logs hold: nothing
    may wait for a reaping or a turn end that will not come (it did: a shutdown hung on a sync whose end
    no one reaped)."""
    loop = ManualLoop()
    turns = TurnCommits(loop, syncs)
    (flying_log, _), (due_log, due_synced) = turn_log(tmp_path / "a", turns), turn_log(tmp_path / "b", turns)
    in_flight = flying_log.append(b"with the kernel")
    loop.end_turn()
    behind = flying_log.append(b"behind it")
    due = due_log.append(b"due at a turn end that never comes")
    loop.stop()
    assert in_flight.result(timeout=0) == LogAddress(1)
    assert behind.result(timeout=10) == LogAddress(2)
    assert due.result(timeout=10) == LogAddress(1)
    assert due_synced and due_synced[0] != threading.get_ident()
    after = due_log.append(b"appended after the stop")  # from the loop's old thread: no longer the loop's
    assert after.result(timeout=10) == LogAddress(2)
    flying_log.close()
    due_log.close()
