"""The operation processor: the container's write path (Pravega's OperationProcessor together with
its memory-state updater).

``submit`` runs on the caller's thread under the container lock: the operation changes the accepted
layer and joins the next *frame*, so log order is acceptance order. At most ``MAX_FRAMES_IN_FLIGHT``
frames are in the durable log at a time; while one is written and fsync'd the next gathers every
operation that arrives meanwhile (group commit), and one frame is one log entry.

When the log acknowledges a frame, its completion runs on the thread that committed it (the log's
writer, or the reactor at the end of the turn that appended it: ``turn_commits``): under the lock it
applies every operation at the head of the in-flight queue whose frame is durable, strictly in log
order; then, with the lock released, it resumes the tail reads that became answerable, hands released
chunks to the storage writer, and completes the callers' futures. So nothing is visible or
acknowledged before it is durable, and no future completes while the lock is held.

Every queued operation's bytes count against the container's byte budget (``store.budget``) from
acceptance until it is applied: acquired one operation at a time under the lock, released once per
drained frame outside it, so a connection writing here stops reading while the log falls behind.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from millrace.store.budget import ByteBudget
from millrace.store.containers.lock import ContainerLock
from millrace.store.containers.memory_state import MemoryState
from millrace.store.containers.operations import Checkpoint, Operation
from millrace.store.containers.read_index import ParkedRead, TailOutcome
from millrace.store.durablelog.interface import Buffer, DurableDataLog, LogAddress
from millrace.store.errors import StoreError
from millrace.store.futures import StoreFuture

# Frames handed to the durable log and not yet acknowledged. One is enough to keep the disk busy
# while the next frame accumulates; two let the log overlap encoding with the fsync.
MAX_FRAMES_IN_FLIGHT = 2


class _Pending:
    """An operation handed to the durable log, waiting to be applied in log order."""

    __slots__ = ("op", "result", "released", "opens_entry", "size", "log_future", "value", "followers")

    def __init__(
        self, op: Operation, result: StoreFuture[Any] | None, released: tuple[str, ...], opens_entry: bool,
        size: int,
    ) -> None:
        self.op = op
        self.size = size  # its bytes in the frame, held against the container's budget until applied
        self.result = result
        self.released = released  # chunks to delete from long-term storage once durable
        self.opens_entry = opens_entry  # first in its frame: a checkpoint here can be truncated to
        self.log_future: Future[LogAddress] | None = None
        self.value: Any = None
        # Futures of no-op requests that complete when this operation does, with value().
        self.followers: list[tuple[StoreFuture[Any], Callable[[], Any]]] | None = None


def complete_with(result: StoreFuture[Any], value: Callable[[], Any]) -> None:
    """Complete ``result`` with ``value()``, or with the ``StoreError`` it raises (``AlreadyDone``)."""
    try:
        outcome = value()
    except StoreError as exc:
        result.set_exception(exc)
        return
    result.set_result(outcome)


class OperationProcessor:
    def __init__(
        self,
        container_id: int,
        durable_log: DurableDataLog,
        lock: ContainerLock,
        state: MemoryState,
        on_failure: Callable[[BaseException], None],
    ) -> None:
        self._container_id = container_id
        self._log = durable_log
        self._lock = lock
        self._state = state
        self._on_failure = on_failure
        self._inflight: collections.deque[_Pending] = collections.deque()
        self._frame_parts: list[Buffer] = []  # the next log entry, still accumulating
        self._frame_pending: list[_Pending] = []
        self._frames_in_flight = 0
        self._budget: ByteBudget | None = None

    def attach_budget(self, budget: ByteBudget) -> None:
        """Count queued operations against ``budget`` from now on (set before the container serves)."""
        self._budget = budget

    # -- the caller's side (lock held) -----------------------------------------------------------------
    def submit(self, op: Operation, result: StoreFuture[Any] | None) -> None:
        """Accept ``op`` and queue it for the log; ``result`` completes once it is applied."""
        size = self._enqueue(op, result)
        if self._state.checkpoints.logged(size):
            self.write_checkpoint()

    def write_checkpoint(self) -> StoreFuture[None]:
        """Log a snapshot of the accepted layer, as the first operation of a new frame (the log is
        only ever truncated right before a checkpoint)."""
        result: StoreFuture[None] = StoreFuture()
        self._send_frame()
        self._enqueue(Checkpoint.prepare(self._state.metadata, self._container_id), result)
        self._state.checkpoints.written()
        return result

    def follow_last(self, result: StoreFuture[Any], value: Callable[[], Any]) -> bool:
        """Complete ``result`` with ``value()`` once everything accepted so far is applied. False when
        nothing is in flight: the caller completes it itself, after releasing the lock."""
        if not self._inflight:
            return False
        last = self._inflight[-1]
        if last.followers is None:
            last.followers = []
        last.followers.append((result, value))
        return True

    def log_futures(self) -> list[Future[LogAddress]]:
        """The log writes still outstanding (for a clean shutdown to wait on)."""
        return [p.log_future for p in self._inflight if p.log_future is not None]

    def abandon(self) -> tuple[list[StoreFuture[Any]], int]:
        """Drop everything not yet applied (the log failed); returns the futures to fail and the bytes
        to give back to the budget (by ``release_budget``, once the lock is released)."""
        pending, self._inflight = self._inflight, collections.deque()
        self._frame_parts, self._frame_pending = [], []
        futures: list[StoreFuture[Any]] = []
        for p in pending:
            if p.result is not None:
                futures.append(p.result)
            futures.extend(fut for fut, _ in p.followers or ())
        return futures, sum(p.size for p in pending)

    def release_budget(self, size: int) -> None:
        """Give ``size`` bytes back to the budget. Never under the container lock: a release may read
        the container's unflushed bytes (which takes the lock) and wake connections."""
        if self._budget is not None and size:
            self._budget.release(size)

    def _enqueue(self, op: Operation, result: StoreFuture[Any] | None) -> int:
        released = op.accept(self._state.metadata)
        parts = op.frame_parts()
        size = sum(map(len, parts))
        if self._budget is not None:
            self._budget.acquire(size)
        pending = _Pending(op, result, released, opens_entry=not self._frame_parts, size=size)
        self._inflight.append(pending)
        self._frame_parts.extend(parts)
        self._frame_pending.append(pending)
        if self._frames_in_flight < MAX_FRAMES_IN_FLIGHT:
            self._send_frame()
        return size

    def _send_frame(self) -> None:
        """Hand everything queued to the log as one entry."""
        if not self._frame_parts:
            return
        frame = self._frame_parts
        pendings = self._frame_pending
        self._frame_parts, self._frame_pending = [], []
        try:
            log_future = self._log.append_parts(frame)
        except Exception as exc:  # noqa: BLE001 - fenced or broken log
            log_future = Future()
            log_future.set_exception(exc)
        for p in pendings:
            p.log_future = log_future
        self._frames_in_flight += 1
        # Registered once the lock is released: a write already complete (or refused) runs the
        # completion at once, on this thread, and that must not happen under the lock.
        self._lock.after_release(lambda: log_future.add_done_callback(self._frame_done))

    # -- the log writer's side ------------------------------------------------------------------------
    def _frame_done(self, _: Future[LogAddress]) -> None:
        with self._lock:
            self._frames_in_flight -= 1
            self._send_frame()
        self._drain()

    def _drain(self) -> None:
        """Apply every operation at the head of the in-flight queue whose frame is durable, then
        complete what they unblocked outside the lock."""
        done: list[_Pending] = []
        failure: BaseException | None = None
        state = self._state
        with self._lock:
            inflight = self._inflight
            durable: Future[LogAddress] | None = None  # the frame last found durable: its ops need no check
            while inflight:
                head = inflight[0]
                fut = head.log_future
                if fut is None:
                    break  # its frame is still gathering
                if fut is not durable:
                    if not fut.done():
                        break
                    failure = fut.exception()
                    if failure is not None:
                        break
                    durable = fut
                inflight.popleft()
                head.value = head.op.apply(state, fut.result() if head.opens_entry else None)
                done.append(head)
            resumed: list[tuple[ParkedRead, TailOutcome]] = state.read_index.tail_reads.take_ready()
        if failure is not None:
            self._on_failure(failure)
        self.release_budget(sum(p.size for p in done))
        for read, outcome in resumed:
            read.resume(outcome)
        for p in done:
            if p.released:
                state.writer.delete_chunks(p.released)
            if p.result is not None and not p.result.done():
                p.result.set_result(p.value)
            if p.followers:
                for follower, value in p.followers:
                    if not follower.done():
                        complete_with(follower, value)
