"""The storage writer: moves durable data from the read index into long-term storage.

Per segment it writes the dirty run of cached data as one new chunk once the run is large or old
enough (or the segment is sealed, flushed on request, or cache memory runs short), then logs a
StorageFlushed operation; when that is durable the data becomes evictable and the durable log can be
truncated past it. Chunks are write-once with unique names, so a crash between writing a chunk and
logging it leaves only an orphan, which the next owner's sweep deletes.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from millrace.store.containers.container import SegmentContainer

log = logging.getLogger(__name__)


class StorageWriter:
    def __init__(self, container: SegmentContainer) -> None:
        self._container = container
        self._config = container.config
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._final_flush = False
        self._woken = False
        self._flush_requests: dict[int, list[Future]] = {}
        self._to_delete: list[str] = []
        self._sweep_pending = False
        self._failures = 0
        self.chunks_written = 0
        self.bytes_written = 0

    # -- control (any thread) --------------------------------------------------------------------------
    def start(self, sweep_orphans: bool) -> None:
        self._sweep_pending = sweep_orphans
        self._thread = threading.Thread(
            target=self._run, name=f"storage-writer-{self._container.container_id}", daemon=True
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
        with self._cond:
            requests, self._flush_requests = self._flush_requests, {}
        for futures in requests.values():
            for fut in futures:
                if not fut.done():
                    fut.set_exception(RuntimeError("storage writer stopped"))

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify()

    def notice_dirty(self, cached_bytes: int) -> None:
        """Called on every durable append: wake up early when the cache is filling with dirty data."""
        if cached_bytes > self._config.cache_max_bytes // 2 and not self._woken:
            self.wake()

    def request_flush(self, segment_id: int) -> Future[None]:
        """A future that completes once the (sealed) segment is wholly in long-term storage."""
        fut: Future = Future()
        with self._cond:
            self._flush_requests.setdefault(segment_id, []).append(fut)
            self._woken = True
            self._cond.notify()
        return fut

    def delete_chunks(self, names: list[str]) -> None:
        if names:
            with self._cond:
                self._to_delete.extend(names)
                self._woken = True
                self._cond.notify()

    # -- the writer thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        container = self._container
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
                container.truncate_log()
                container.maybe_checkpoint(max_age=self._config.flush_age_seconds * 5)
        except Exception as exc:  # noqa: BLE001 - the container reports its own failure
            if container.state in ("running", "closing"):
                log.exception("storage writer of container %s stopped", container.container_id)
            self._fail_requests(exc)

    def _flush_round(self, force: bool) -> None:
        container = self._container
        index = container.read_index()
        now = time.monotonic()
        with container.lock():
            pressure = index.total_bytes > self._config.cache_max_bytes // 2
            due = []
            for segment_id, cache in index.dirty_segments():
                seg = container.segment_by_id(segment_id)
                if seg is None:
                    continue
                if (
                    force
                    or pressure
                    or seg.sealed
                    or segment_id in self._flush_requests
                    or cache.dirty_bytes >= self._config.flush_threshold_bytes
                    or now - cache.dirty_since >= self._config.flush_age_seconds
                ):
                    due.append(segment_id)
        for segment_id in due:
            if not self._flush_segment(segment_id):
                break  # long-term storage is failing; back off until the next round

    def _flush_segment(self, segment_id: int) -> bool:
        """Write every dirty run of one segment. False when long-term storage failed."""
        container = self._container
        while True:
            with container.lock():
                seg = container.segment_by_id(segment_id)
                cache = container.read_index().peek(segment_id)
                run = cache.dirty_run(self._config.max_chunk_bytes) if seg is not None and cache else None
                if run is None:
                    return True
                start, blocks = run
                chunk = (
                    f"containers/{container.container_id}/{seg.name}/"
                    f"E{container.epoch}-O{start}-{uuid.uuid4().hex[:12]}"
                )
            data = b"".join(blocks)
            try:
                container.storage.write(chunk, data)
            except Exception as exc:  # noqa: BLE001 - retried; the data stays safe in the log
                self._failures += 1
                log.warning("flush of %s to long-term storage failed (%d): %r", chunk, self._failures, exc)
                time.sleep(min(5.0, 0.1 * 2 ** min(self._failures, 6)))
                return False
            self._failures = 0
            logged = container.log_storage_flushed(segment_id, start, len(data), chunk)
            if logged is None:
                self._delete([chunk])
                return True
            logged.result()
            self.chunks_written += 1
            self.bytes_written += len(data)

    def _complete_flush_requests(self) -> None:
        container = self._container
        done: list[Future] = []
        with container.lock(), self._cond:
            for segment_id in list(self._flush_requests):
                seg = container.segment_by_id(segment_id)
                if seg is None or (seg.durable_sealed and seg.storage_length >= seg.length):
                    done.extend(self._flush_requests.pop(segment_id))
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
                self._container.storage.delete(name)
            except Exception as exc:  # noqa: BLE001 - an orphan is swept at the next start
                log.warning("deleting chunk %s failed: %r", name, exc)

    def _sweep_orphans(self) -> None:
        """Delete this container's chunks that no segment references: leftovers of a crash between
        writing a chunk and logging it, or between a truncation/deletion and removing its chunks."""
        container = self._container
        prefix = f"containers/{container.container_id}/"
        try:
            present = container.storage.list(prefix)
        except Exception as exc:  # noqa: BLE001 - sweeping is housekeeping; never fatal
            log.warning("listing chunks for the orphan sweep failed: %r", exc)
            return
        referenced = container.referenced_chunks()
        orphans = [name for name in present if name not in referenced]
        if orphans:
            log.info("container %s: deleting %d orphan chunks", container.container_id, len(orphans))
            self._delete(orphans)
