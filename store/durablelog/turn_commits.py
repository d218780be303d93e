"""Group commit at the end of an event loop's turn, on the loop's thread.

A request that arrives alone (a producer with linger 0, one record a request) would otherwise cross two
threads for its one append: the loop wakes the log's writer thread, and the writer's completion wakes
the loop back. Each crossing waits for the interpreter lock and a futex or a pipe, and costs as much
CPU as the append itself. Redis writes and syncs its append-only file this way before its loop sleeps.

Appends the loop's thread makes during a turn are gathered. When the turn's input is handled, each due
log writes its queue right there and hands the sync to the kernel (``KernelSyncs``), so the loop goes on
reading while the disk works and several logs' syncs overlap; the loop acks a batch when it reaps its
sync. A log whose queue is too big for this (a flood of large batches) hands it to its writer thread.
Without kernel syncs, one due log writes and syncs on the loop's thread and every other wakes its writer
first, so their syncs overlap with it; a log whose syncs have been slow of late (a disk busy with other
work) hands every commit to its writer, so the loop is not stalled in them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from millrace.store.durablelog.kernel_sync import KernelSyncs

# The most a log writes and syncs on the loop's thread at a turn's end; more goes to its writer thread.
TURN_COMMIT_BYTES = 64 * 1024
# A log whose syncs take longer than this on average hands every commit to its writer: a slow disk
# must not stall the loop's every connection (measured: a disk busy with another writer's fsyncs made
# an fdatasync take tens of ms, and the loop blocked in them served a paced producer 15 % slower).
TURN_COMMIT_SYNC_SECONDS = 0.001


class EventLoop(Protocol):
    def on_loop_thread(self) -> bool:
        """Whether the caller is the loop's thread, with the loop running."""

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop's thread after the input of the current turn is handled."""

    def watch_readable(self, fd: int, on_readable: Callable[[], object]) -> None:
        """Call ``on_readable`` on the loop's thread whenever ``fd`` is readable."""

    def when_stopped(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` on the loop's thread once the loop has stopped for good (it runs no turn after)."""


class TurnLog(Protocol):
    def end_turn(self, commit_here: bool) -> None:
        """Write what the turn queued on this thread (if small: with the kernel's sync, or without it when
        ``commit_here``) or hand it to the writer."""


class TurnCommits:
    """The logs with appends from the loop's current turn. Used on the loop's thread only."""

    def __init__(self, loop: EventLoop, syncs: KernelSyncs | None = None) -> None:
        self._loop = loop
        self._due: list[TurnLog] = []
        # Where the kernel syncs for us, every due log's small queue is written and its sync submitted
        # at the turn's end, and the loop goes on; the loop reaps the syncs as they end.
        self.syncs = syncs
        if syncs is not None:
            loop.watch_readable(syncs.fileno(), syncs.reap)
        loop.when_stopped(self._loop_stopped)

    def on_loop_thread(self) -> bool:
        return self._loop.on_loop_thread()

    def due(self, log: TurnLog) -> None:
        """``log`` has an append of this turn (once a turn per log: the log keeps track)."""
        if not self._due:
            self._loop.call_soon(self._end_turn)
        self._due.append(log)

    def _loop_stopped(self) -> None:
        """No turn ends and no reaping from here on: what waits for either goes to the logs' writers,
        which the store's closing waits for (the server closes it after its loop stopped)."""
        syncs, self.syncs = self.syncs, None
        while syncs is not None and syncs.reap(wait=True):
            pass  # the syncs' ends hand what queued behind them to the writers
        due, self._due = self._due, []
        for log in due:
            log.end_turn(commit_here=False)

    def _end_turn(self) -> None:
        # Appends made by the completions below belong to the next turn's list.
        due, self._due = self._due, []
        for log in due[:-1]:
            log.end_turn(commit_here=False)
        due[-1].end_turn(commit_here=True)
