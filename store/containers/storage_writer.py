"""The storage writer: moves durable data from the read index into long-term storage.

Per segment it writes the dirty run of cached data as one new chunk once the run is large or old
enough (or the segment is sealed, flushed on request, or cache memory runs short), then logs a
StorageFlushed operation; when that is durable the data becomes evictable and the durable log can be
truncated past it. Chunks are write-once with unique names, so a crash between writing a chunk and
logging it leaves only an orphan, which the next owner's sweep deletes.

The writer sees its container only through ``WriterDataSource`` (Pravega's WriterDataSource): each
call is short and takes the container lock inside, so the writer never holds that lock itself, and
it never holds its own condition lock while calling the source (the container calls into the writer
under its lock: the order is always container lock, then writer condition).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from millrace.store.containers.config import ContainerConfig
from millrace.store.futures import StoreFuture
from millrace.store.lts.interface import ChunkStorage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DirtySegment:
    """A segment with durable data not yet in long-term storage."""

    segment_id: int
    dirty_bytes: int
    dirty_since: float  # monotonic time its oldest dirty byte arrived
    sealed: bool


@dataclass(frozen=True, slots=True)
class DirtyRun:
    """A gap-free run of a segment's dirty data from its first dirty byte: one chunk's contents."""

    segment_name: str
    offset: int
    blocks: list[bytes]


class WriterDataSource(Protocol):
    """What the storage writer needs of its container."""

    @property
    def container_id(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def serving(self) -> bool:
        """Running or closing: a failure of the writer then deserves a report."""
        ...

    def unflushed_bytes(self) -> int:
        """Durable data long-term storage does not hold yet (a hint: read without the lock)."""
        ...

    def dirty_segments(self) -> list[DirtySegment]: ...

    def dirty_run(self, segment_id: int, max_bytes: int) -> DirtyRun | None:
        """The segment's next run to flush, None when it has none (or is gone)."""
        ...

    def log_storage_flushed(self, segment_id: int, offset: int, length: int, chunk: str) -> StoreFuture[None] | None:
        """Log that ``chunk`` holds these bytes; None when the segment went away or was truncated
        past them meanwhile (the writer then deletes the chunk)."""
        ...

    def flushed_whole(self, segment_id: int) -> bool:
        """Whether the (sealed) segment is wholly in long-term storage, or gone."""
        ...

    def referenced_chunks(self) -> set[str]: ...

    def truncate_log(self) -> None: ...

    def maybe_checkpoint(self, max_age: float) -> None: ...


class StorageWriter:
    def __init__(self, source: WriterDataSource, storage: ChunkStorage, config: ContainerConfig) -> None:
        self._source = source
        self._storage = storage
        self._config = config
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._final_flush = False
        self._woken = False
        self._flush_requests: dict[int, list[StoreFuture[None]]] = {}
        self._to_delete: list[str] = []
        self._sweep_pending = False
        self._failures = 0
        # Un-flushed bytes past which every dirty segment is flushed at once, whatever its size or age.
        self._pressure_bytes = config.cache_max_bytes // 2
        self.chunks_written = 0
        self.bytes_written = 0

    # -- control (any thread) --------------------------------------------------------------------------
    def start(self, sweep_orphans: bool) -> None:
        self._sweep_pending = sweep_orphans
        self._thread = threading.Thread(
            target=self._run, name=f"storage-writer-{self._source.container_id}", daemon=True
        )
        self._thread.start()

    def stop(self, final_flush: bool) -> None:
        with self._cond:
            self._stopping = True
            self._final_flush = final_flush
            self._cond.notify()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._thread = None
        self._fail_requests(RuntimeError("storage writer stopped"))

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify()

    def limit_unflushed(self, pressure_bytes: int) -> None:
        """Flush everything once un-flushed bytes pass ``pressure_bytes`` too (the container's budget,
        which counts them, drains at that level). Waiting for each segment's own size or age instead
        let a container with many busy segments fill its budget before any was due: its writers were
        held until the oldest aged out (30 s), with the storage writer idle."""
        self._pressure_bytes = min(self._pressure_bytes, pressure_bytes)

    def notice_dirty(self, unflushed_bytes: int) -> None:
        """Called on every durable append with the container's un-flushed bytes: wake up early when they
        fill half the cache (which can evict only what long-term storage holds) or the budget's share."""
        if unflushed_bytes > self._pressure_bytes and not self._woken:
            self.wake()

    def request_flush(self, segment_id: int) -> StoreFuture[None]:
        """A future that completes once the (sealed) segment is wholly in long-term storage."""
        fut: StoreFuture[None] = StoreFuture()
        with self._cond:
            self._flush_requests.setdefault(segment_id, []).append(fut)
            self._woken = True
            self._cond.notify()
        return fut

    def delete_chunks(self, names: Sequence[str]) -> None:
        if names:
            with self._cond:
                self._to_delete.extend(names)
                self._woken = True
                self._cond.notify()

    # -- the writer thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        source = self._source
        try:
            if self._sweep_pending:
                self._sweep_orphans()
            while True:
                with self._cond:
                    if not self._stopping and not self._woken:
                        self._cond.wait(self._config.writer_poll_seconds)
                    self._woken = False
                    stopping, final = self._stopping, self._final_flush
                if stopping:
                    if final:
                        self._flush_round(force=True)
                        self._delete_pending()
                    return
                self._flush_round(force=False)
                self._delete_pending()
                self._complete_flush_requests()
                source.truncate_log()
                source.maybe_checkpoint(max_age=self._config.flush_age_seconds * 5)
        except Exception as exc:  # noqa: BLE001 - the container reports its own failure
            if source.serving:
                log.exception("storage writer of container %s stopped", source.container_id)
            self._fail_requests(exc)

    def _flush_round(self, force: bool) -> None:
        config = self._config
        now = time.monotonic()
        # Flush everything early only when un-flushed data crowds the cache. A cache full of data long-term
        # storage holds is no reason: eviction makes room. (Counting that too flushed each segment on
        # every append once the cache was half full: a chunk, and a chunk reference kept in memory, per
        # few appends.)
        pressure = self._source.unflushed_bytes() > self._pressure_bytes
        with self._cond:
            requested = set(self._flush_requests)
        due = [
            dirty
            for dirty in self._source.dirty_segments()
            if force
            or pressure
            or dirty.sealed
            or dirty.segment_id in requested
            or dirty.dirty_bytes >= config.flush_threshold_bytes
            or now - dirty.dirty_since >= config.flush_age_seconds
        ]
        # Each segment's last StorageFlushed is waited for at the end of the round, all together: one log
        # write for a round's worth of segments, not one per segment (many small segments, each due by
        # age, otherwise cost a log round trip each, and their fsyncs stood in the appends' way).
        logged: list[StoreFuture[None]] = []
        for dirty in due:
            if not self._flush_segment(dirty.segment_id, dirty.dirty_bytes, logged):
                break  # long-term storage is failing; back off until the next round
        for fut in logged:
            fut.result()

    def _flush_segment(self, segment_id: int, dirty_bytes: int, logged: list[StoreFuture[None]]) -> bool:
        """Write the ``dirty_bytes`` a segment had when the round began, in runs of at most a chunk's
        size. What arrives meanwhile waits for its own age or size: chasing the tail of a busy segment
        wrote a chunk, a StorageFlushed operation and a chunk reference kept in memory for every few
        appends. The last run's StorageFlushed goes into ``logged`` for the round to wait on (a run after
        it reads the state that one leaves). False when long-term storage failed."""
        source = self._source
        remaining = dirty_bytes
        pending: StoreFuture[None] | None = None
        while remaining > 0:
            if pending is not None:
                pending.result()  # the next run of this segment starts where that one's flush ends
                pending = None
            run = source.dirty_run(segment_id, min(self._config.max_chunk_bytes, remaining))
            if run is None:
                return True
            chunk = (
                f"containers/{source.container_id}/{run.segment_name}/"
                f"E{source.epoch}-O{run.offset}-{uuid.uuid4().hex[:12]}"
            )
            size = sum(len(block) for block in run.blocks)
            try:
                self._storage.write_parts(chunk, run.blocks)
            except Exception as exc:  # noqa: BLE001 - retried; the data stays safe in the log
                self._failures += 1
                log.warning("flush of %s to long-term storage failed (%d): %r", chunk, self._failures, exc)
                time.sleep(min(5.0, 0.1 * 2 ** min(self._failures, 6)))
                return False
            self._failures = 0
            pending = source.log_storage_flushed(segment_id, run.offset, size, chunk)
            if pending is None:
                self._delete([chunk])
                return True
            self.chunks_written += 1
            self.bytes_written += size
            remaining -= size
        if pending is not None:
            logged.append(pending)
        return True

    def _complete_flush_requests(self) -> None:
        with self._cond:
            requested = list(self._flush_requests)
        # Asked without holding the condition (lock order); a request added for the same segment
        # meanwhile is answered too, rightly: a sealed segment wholly flushed stays so.
        flushed = [segment_id for segment_id in requested if self._source.flushed_whole(segment_id)]
        done: list[StoreFuture[None]] = []
        with self._cond:
            for segment_id in flushed:
                done.extend(self._flush_requests.pop(segment_id, ()))
        for fut in done:
            if not fut.done():
                fut.set_result(None)

    def _fail_requests(self, exc: BaseException) -> None:
        with self._cond:
            requests, self._flush_requests = self._flush_requests, {}
        for futures in requests.values():
            for fut in futures:
                if not fut.done():
                    fut.set_exception(exc)

    def _delete_pending(self) -> None:
        with self._cond:
            names, self._to_delete = self._to_delete, []
        self._delete(names)

    def _delete(self, names: list[str]) -> None:
        for name in names:
            try:
                self._storage.delete(name)
            except Exception as exc:  # noqa: BLE001 - an orphan is swept at the next start
                log.warning("deleting chunk %s failed: %r", name, exc)

    def _sweep_orphans(self) -> None:
        """Delete this container's chunks that no segment references: leftovers of a crash between
        writing a chunk and logging it, or between a truncation/deletion and removing its chunks."""
        prefix = f"containers/{self._source.container_id}/"
        try:
            present = self._storage.list(prefix)
        except Exception as exc:  # noqa: BLE001 - sweeping is housekeeping; never fatal
            log.warning("listing chunks for the orphan sweep failed: %r", exc)
            return
        referenced = self._source.referenced_chunks()
        orphans = [name for name in present if name not in referenced]
        if orphans:
            log.info("container %s: deleting %d orphan chunks", self._source.container_id, len(orphans))
            self._delete(orphans)
