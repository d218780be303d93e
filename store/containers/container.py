"""A segment container: the unit that owns a set of segments, its durable log, read index and
storage writer. It coordinates its parts and holds no operation's meaning itself:

- ``operations``: each operation's validation (``prepare``), its change to the accepted layer
  (``accept``) and to the durable state (``apply``), and its log encoding;
- ``operation_processor``: group commit into the durable log, apply in log order, complete futures;
- ``recovery``: restore the first checkpoint and replay the log through the same accept/apply;
- ``checkpoints``: when to checkpoint, how far the log may be truncated;
- ``reader`` and ``read_index``: the read path, the cache and the reads parked at segment tails;
- ``storage_writer``: tiering to long-term storage, seeing the container as a ``WriterDataSource``.

Thread model. One lock per container (``ContainerLock``, plain, never taken twice by one thread)
guards all of its mutable state: the metadata (accepted and durable layers), the frame being gathered
and the in-flight queue, the read index with its parked tail reads, the checkpoint records, the rates
and counters. Holding it while accepting makes log order equal acceptance order and lets a
checkpoint describe exactly the state after every operation before it; holding it while applying
lets every reader see whole operations. Threads, and what each runs:

- the starting thread recovers (replays the log through ``apply``) before any other can reach it;
- callers' threads (the reactor, controller workers, tests) submit: validate and accept under the
  lock, queue the operation for the log, and get a ``StoreFuture``; a read takes the lock only to find
  its bytes, and a cache hit is answered after releasing it;
- the durable log's writer thread completes each frame: under the lock it sends the next frame and
  applies the durable operations in log order; then, outside the lock, it resumes the tail reads they
  answered, hands released chunks to the storage writer and completes the callers' futures;
- the storage writer's thread owns its queues (flush requests, chunks to delete) under its own
  condition; it sees the container only through ``WriterDataSource`` calls, each short and taking the
  lock inside, and writes, deletes and lists chunks without it;
- the long-term-storage read pool runs ``storage.read`` for cache misses and completes those reads,
  never holding the lock;
- the store's timer thread expires parked tail reads, taking the lock for a moment.

No future is completed while the lock is held (a log write that is complete before its callback is
registered would complete at once, so callbacks are registered after release), so any callback may
call back into the container. Lock order: the container lock, then the storage writer's condition;
the writer never calls its data source holding its condition. Results cross threads as
``StoreFuture`` (the durable log's own seam uses ``concurrent.futures.Future``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from millrace.store.budget import ByteBudget
from millrace.store.containers import operations as ops
from millrace.store.containers import recovery
from millrace.store.containers.checkpoints import CheckpointPolicy
from millrace.store.containers.config import ContainerConfig
from millrace.store.containers.lock import ContainerLock
from millrace.store.containers.memory_state import MemoryState
from millrace.store.containers.metadata import ContainerMetadata
from millrace.store.containers.operation_processor import OperationProcessor, complete_with
from millrace.store.containers.rates import RateRegistry, SegmentRates
from millrace.store.containers.read_index import ReadIndex
from millrace.store.containers.reader import SegmentReader
from millrace.store.containers.storage_writer import DirtyRun, DirtySegment, StorageWriter
from millrace.store.contracts import AttributeUpdate, ReadResult, SegmentInfo
from millrace.store.durablelog.interface import DurableDataLog
from millrace.store.errors import ContainerOfflineError, StoreError
from millrace.store.futures import StoreFuture, failed
from millrace.store.lts.interface import ChunkStorage
from millrace.store.scheduler import Scheduler

log = logging.getLogger(__name__)

NEW, RUNNING, CLOSING, CLOSED, FAILED = "new", "running", "closing", "closed", "failed"

Prepare = Callable[[ContainerMetadata], ops.Prepared]


class SegmentContainer:
    def __init__(
        self,
        container_id: int,
        durable_log: DurableDataLog,
        storage: ChunkStorage,
        config: ContainerConfig,
        scheduler: Scheduler | None = None,
        read_pool: ThreadPoolExecutor | None = None,
        rates: RateRegistry | None = None,
    ) -> None:
        self.container_id = container_id
        self.config = config
        self.storage = storage
        self._log = durable_log
        self._owns_pool = read_pool is None
        self._read_pool = read_pool or ThreadPoolExecutor(config.storage_read_threads, f"lts-read-{container_id}")
        self._lock = ContainerLock()
        self._state = NEW
        self._failure: BaseException | None = None
        self._metadata = ContainerMetadata()
        self._read_index = ReadIndex(config.cache_max_bytes)
        self.writer = StorageWriter(self, storage, config)
        self.budget: ByteBudget | None = None  # the byte budget its operations are held against, if any
        self.recovery_seconds = 0.0  # how long its last start took to open the log and recover (/metrics)
        # Counted when appends become durable on the live path; replayed appends are not load.
        self.rates = rates if rates is not None else RateRegistry()
        self._memory = MemoryState(
            self._metadata, self._read_index, self.rates, CheckpointPolicy(config.checkpoint_every_bytes), self.writer
        )
        self._processor = OperationProcessor(container_id, durable_log, self._lock, self._memory, self._fail)
        self._reader = SegmentReader(
            self._lock,
            self._metadata,
            self._read_index,
            storage,
            self._read_pool,
            scheduler or Scheduler(),
            self._memory.stats,
            self._check_running,
        )

    # -- lifecycle -----------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._log.epoch

    @property
    def state(self) -> str:
        return self._state

    @property
    def stats(self) -> Counter[str]:
        return self._memory.stats

    def start(self) -> None:
        """Take ownership of the log, recover, and start the storage writer. With an empty log, the
        state comes from the checkpoint the last clean shutdown left in long-term storage, if any."""
        began = time.monotonic()
        self._log.open()
        fresh = recovery.replay_log(self.container_id, self._log, self._memory)
        if fresh:
            recovery.restore_published(self.container_id, self.storage, self._memory)
        self.recovery_seconds = time.monotonic() - began
        self._state = RUNNING
        if fresh:
            # The log always begins with a checkpoint.
            with self._lock:
                first = self._processor.write_checkpoint()
            first.result()
        self.writer.start(sweep_orphans=True)

    def close(self) -> None:
        """Flush everything to long-term storage, checkpoint, truncate the log and stop, so the next
        start recovers from a single checkpoint."""
        with self._lock:
            state = self._state
            if state == RUNNING:
                self._state = CLOSING
            pending = self._processor.log_futures() if state == RUNNING else []
        if state != RUNNING:
            # Outside the lock: the storage writer being joined may be waiting for it (a failed container
            # closed while its writer reported a flush once held a node's member loop for good).
            if state in (FAILED, NEW):
                self._shutdown_threads()
            return
        for fut in pending:
            # A failed log is reported through _fail already; closing goes on regardless.
            with contextlib.suppress(Exception):
                fut.result(timeout=30)
        try:
            self.writer.stop(final_flush=True)
            with self._lock:
                checkpoint = self._processor.write_checkpoint() if self._state == CLOSING else None
            if checkpoint is not None:
                checkpoint.result(timeout=30)
                self.truncate_log()
                try:
                    self._publish_checkpoint()
                except Exception as exc:  # noqa: BLE001 - the local log still has everything
                    log.warning("container %s: publishing the checkpoint failed: %r", self.container_id, exc)
        finally:
            with self._lock:
                if self._state == CLOSING:
                    self._state = CLOSED
            self._shutdown_threads()

    def _publish_checkpoint(self) -> None:
        """Leave the metadata in long-term storage next to the data it describes, so a node that lost
        its local disk after a clean shutdown still finds every segment."""
        with self._lock:
            if self._read_index.dirty_bytes:
                return  # not everything is in long-term storage: the local log stays authoritative
            snapshot = self._metadata.snapshot(self.container_id)
        recovery.publish(self.container_id, self.epoch, self.storage, snapshot)

    def _shutdown_threads(self) -> None:
        self.writer.stop(final_flush=False)
        self._log.close()
        if self._owns_pool:
            self._read_pool.shutdown(wait=False)

    def _check_running(self) -> None:
        if self._state != RUNNING:
            raise ContainerOfflineError(
                f"container {self.container_id} is {self._state}"
                + (f": {self._failure!r}" if self._failure else "")
            )

    def _fail(self, exc: BaseException) -> None:
        """Stop serving: the durable log failed, so accepted-but-unlogged state is unknowable."""
        with self._lock:
            if self._state in (FAILED, CLOSED):
                return
            log.error("container %s failed: %r", self.container_id, exc)
            self._state = FAILED
            self._failure = exc
            error = ContainerOfflineError(f"container {self.container_id} failed: {exc!r}")
            abandoned, abandoned_bytes = self._processor.abandon()
            self._read_index.tail_reads.fail_all(error)
            parked = self._read_index.tail_reads.take_ready()
        self._processor.release_budget(abandoned_bytes)
        for fut in abandoned:
            if not fut.done():
                fut.set_exception(error)
        for read, outcome in parked:
            read.resume(outcome)

    # -- the write path ------------------------------------------------------------------------------
    def _execute(self, prepare: Prepare, result: StoreFuture[Any] | None = None) -> StoreFuture[Any]:
        """Prepare an operation against the accepted layer and hand it to the processor; validation
        errors fail the returned future."""
        if result is None:
            result = StoreFuture()
        try:
            with self._lock:
                self._check_running()
                verdict = prepare(self._metadata)
                if isinstance(verdict, ops.AlreadyDone):
                    if self._processor.follow_last(result, verdict.value):
                        return result
                elif isinstance(verdict, ops.FlushFirst):
                    flushed = self.writer.request_flush(verdict.segment_id)
                else:
                    self._processor.submit(verdict, result)
                    return result
        except StoreError as exc:
            if not result.done():
                result.set_exception(exc)
            return result
        if isinstance(verdict, ops.AlreadyDone):
            complete_with(result, verdict.value)
        else:
            # Outside the lock: the flush may be done already and prepare again at once.
            flushed.add_done_callback(lambda f: self._prepare_again(f, prepare, result))
        return result

    def _prepare_again(self, flushed: StoreFuture[None], prepare: Prepare, result: StoreFuture[Any]) -> None:
        exc = flushed.exception()
        if exc is not None:
            result.set_exception(exc)
        else:
            self._execute(prepare, result)

    def create_segment(self, name: str, attributes: dict[str, int]) -> StoreFuture[None]:
        return self._execute(lambda metadata: ops.Create.prepare(metadata, name, attributes))

    def append(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None,
        attributes: Sequence[AttributeUpdate],
        events: int = 1,
    ) -> StoreFuture[int]:
        try:
            ops.Append.check_request(data, events, self.config.max_append_bytes)
        except StoreError as exc:
            return failed(exc)
        return self._execute(
            lambda metadata: ops.Append.prepare(metadata, name, data, expected_offset, attributes, events)
        )

    def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> StoreFuture[None]:
        return self._execute(lambda metadata: ops.Attributes.prepare(metadata, name, updates))

    def seal(self, name: str) -> StoreFuture[int]:
        return self._execute(lambda metadata: ops.Seal.prepare(metadata, name))

    def truncate(self, name: str, offset: int) -> StoreFuture[None]:
        return self._execute(lambda metadata: ops.Truncate.prepare(metadata, name, offset))

    def delete(self, name: str) -> StoreFuture[None]:
        return self._execute(lambda metadata: ops.Delete.prepare(metadata, name))

    def merge(self, target: str, source: str) -> StoreFuture[int]:
        """Merge sealed ``source`` into ``target``. The source is first flushed whole to long-term
        storage, so the merge itself only moves chunk references (no data is copied)."""
        return self._execute(lambda metadata: ops.Merge.prepare(metadata, target, source))

    # -- reads ---------------------------------------------------------------------------------------
    def exists(self, name: str) -> bool:
        return name in self._metadata.visible

    def segment_names(self) -> list[str]:
        with self._lock:
            return list(self._metadata.visible)

    def segment_rates(self, name: str) -> SegmentRates:
        with self._lock:
            return self.rates.rates(self._metadata.visible_segment(name).segment_id)

    def read_bytes_by_segment(self) -> dict[str, int]:
        """Bytes read from each segment since this container started, for the segments read at all (the
        console turns two of these into a rate out; one integer a segment, kept with its metadata)."""
        with self._lock:
            return {name: seg.read_bytes for name, seg in self._metadata.visible.items() if seg.read_bytes}

    def get_info(self, name: str) -> SegmentInfo:
        return self._reader.info(name)

    def read(self, name: str, offset: int, max_length: int, wait_timeout: float = 0.0) -> StoreFuture[ReadResult]:
        return self._reader.read(name, offset, max_length, wait_timeout)

    def read_index(self) -> ReadIndex:
        return self._read_index

    @property
    def log_size_bytes(self) -> int:
        return self._log.size_bytes

    @property
    def durable_log(self) -> DurableDataLog:
        """Its durable log, for what the log reports of itself (/metrics: replication health)."""
        return self._log

    def unflushed_age(self) -> float:
        """Seconds since the oldest durable byte not yet in long-term storage arrived (0: none waits)."""
        with self._lock:
            oldest = min((cache.dirty_since for _, cache in self._read_index.dirty_segments()), default=None)
        return 0.0 if oldest is None else max(0.0, time.monotonic() - oldest)

    # -- the storage writer's view (WriterDataSource) ------------------------------------------------
    @property
    def serving(self) -> bool:
        return self._state in (RUNNING, CLOSING)

    def attach_budget(self, budget: ByteBudget) -> None:
        """Hold every queued operation's bytes against ``budget`` until it is applied."""
        self.budget = budget
        self._processor.attach_budget(budget)
        # The budget counts un-flushed data and reopens at its low-water mark: flush by then.
        self.writer.limit_unflushed(budget.low_water)

    def unflushed_bytes(self) -> int:
        """Durable data that long-term storage does not hold yet (the cache cannot evict it)."""
        return self._read_index.dirty_bytes  # one int, read without the lock: a hint

    def dirty_segments(self) -> list[DirtySegment]:
        with self._lock:
            out = []
            for segment_id, cache in self._read_index.dirty_segments():
                seg = self._metadata.by_id.get(segment_id)
                if seg is not None:
                    out.append(DirtySegment(segment_id, cache.dirty_bytes, cache.dirty_since, seg.sealed))
            return out

    def dirty_run(self, segment_id: int, max_bytes: int) -> DirtyRun | None:
        with self._lock:
            seg = self._metadata.by_id.get(segment_id)
            cache = self._read_index.peek(segment_id)
            run = cache.dirty_run(max_bytes) if seg is not None and cache is not None else None
            if seg is None or run is None:
                return None
            return DirtyRun(seg.name, run[0], run[1])

    def log_storage_flushed(self, segment_id: int, offset: int, length: int, chunk: str) -> StoreFuture[None] | None:
        result: StoreFuture[None] = StoreFuture()
        with self._lock:
            if not self.serving:
                return None
            try:
                op = ops.StorageFlushed.prepare(self._metadata, segment_id, offset, length, chunk)
            except StoreError:
                return None
            self._processor.submit(op, result)
        return result

    def flushed_whole(self, segment_id: int) -> bool:
        with self._lock:
            seg = self._metadata.by_id.get(segment_id)
            return seg is None or (seg.durable_sealed and seg.storage_length >= seg.length)

    def referenced_chunks(self) -> set[str]:
        with self._lock:
            return self._metadata.referenced_chunks()

    def truncate_log(self) -> None:
        """Truncate the durable log before the newest checkpoint whose data long-term storage holds."""
        with self._lock:
            upto = self._memory.checkpoints.truncation_point(self._metadata)
        if upto is not None:
            self._log.truncate(upto)
            with self._lock:
                self._memory.stats["log_truncations"] += 1

    def maybe_checkpoint(self, max_age: float) -> None:
        """Checkpoint an idle container that had activity, so that it can truncate its log."""
        with self._lock:
            if self._state == RUNNING and self._memory.checkpoints.idle_due(max_age):
                self._processor.write_checkpoint()
