"""A segment container: the unit that owns a set of segments, its durable log, read index and
storage writer.

Write path: validate against the *accepted* metadata under the container lock, update it, hand the
encoded operation to the durable log (group commit), and when the log acknowledges apply it to the
*durable* metadata and read index strictly in log order; only then complete the caller's future.
Recovery: the log always begins with a metadata checkpoint; restore it and replay what follows.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from millrace.store.containers import operations as ops
from millrace.store.containers.config import ContainerConfig
from millrace.store.containers.metadata import (
    ChunkRef,
    SegmentMetadata,
    apply_attributes,
    resolve_attribute_updates,
)
from millrace.store.containers.rates import RateRegistry, SegmentRates
from millrace.store.containers.read_index import ReadIndex
from millrace.store.containers.storage_writer import StorageWriter
from millrace.store.contracts import AttributeUpdate, ReadResult, SegmentInfo
from millrace.store.durablelog.interface import DurableDataLog, LogAddress
from millrace.store.errors import (
    BadOffsetError,
    ChunkNotFoundError,
    ContainerOfflineError,
    DataCorruptionError,
    OffsetOutOfRangeError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentTruncatedError,
    StoreError,
)
from millrace.store.futures import StoreFuture, failed
from millrace.store.lts.interface import ChunkStorage
from millrace.store.scheduler import Scheduler

log = logging.getLogger(__name__)

NEW, RUNNING, CLOSING, CLOSED, FAILED = "new", "running", "closing", "closed", "failed"


def _now_ms() -> int:
    return int(time.time() * 1000)


# Frames handed to the durable log and not yet acknowledged. One is enough to keep the disk busy
# while the next frame accumulates; two let the log overlap encoding with the fsync.
MAX_FRAMES_IN_FLIGHT = 2


class _Pending:
    """An operation handed to the durable log, waiting to be applied in log order."""

    __slots__ = ("op", "log_future", "result", "after", "value", "events")

    def __init__(
        self, op: ops.Operation, result: StoreFuture | None, after: Callable[[], None] | None, events: int | None
    ) -> None:
        self.op = op
        self.log_future: StoreFuture | None = None
        self.result = result
        self.after = after  # work to run once applied, outside the lock (e.g. deleting chunks)
        self.value: Any = None
        self.events = events  # an append's event count, for the segment's rates


class _Checkpoint:
    __slots__ = ("address", "lengths")

    def __init__(self, address: LogAddress, lengths: dict[int, int]) -> None:
        self.address = address
        self.lengths = lengths  # segment id -> accepted length when the checkpoint was taken


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
        self._scheduler = scheduler or Scheduler()
        self._owns_pool = read_pool is None
        self._read_pool = read_pool or ThreadPoolExecutor(config.storage_read_threads, f"lts-read-{container_id}")
        self._lock = threading.RLock()
        self._state = NEW
        self._failure: BaseException | None = None
        # accepted layer
        self._by_name: dict[str, SegmentMetadata] = {}
        self._by_id: dict[int, SegmentMetadata] = {}
        self._next_id = 1
        # durable layer (what readers see)
        self._visible: dict[str, SegmentMetadata] = {}
        self._read_index = ReadIndex(config.cache_max_bytes)
        self._waiters: dict[int, list[tuple[int, StoreFuture]]] = {}
        self._inflight: collections.deque[_Pending] = collections.deque()
        self._frame_parts: list[bytes] = []  # the next log entry, still accumulating
        self._frame_pending: list[_Pending] = []
        self._frames_in_flight = 0
        self._draining = False
        self._bytes_since_checkpoint = 0
        self._last_checkpoint_time = time.monotonic()
        self._checkpoints: list[_Checkpoint] = []
        self.writer = StorageWriter(self)
        self.stats = collections.Counter()
        # Counted when appends become durable on the live path; replayed appends are not load.
        self.rates = rates if rates is not None else RateRegistry()

    # -- lifecycle -----------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._log.epoch

    @property
    def state(self) -> str:
        return self._state

    def start(self) -> None:
        """Take ownership of the log, recover, and start the storage writer. With an empty log, the
        state comes from the checkpoint the last clean shutdown left in long-term storage, if any."""
        self._log.open()
        fresh = self._recover()
        if fresh:
            self._restore_from_storage()
        self._state = RUNNING
        if fresh:
            self._write_checkpoint().result()
        self.writer.start(sweep_orphans=True)

    @property
    def _meta_prefix(self) -> str:
        # Outside "containers/{id}/", so the orphan sweep over segment chunks never touches it.
        return f"containers/{self.container_id}.meta/"

    def _restore_from_storage(self) -> None:
        names = sorted(self.storage.list(self._meta_prefix))
        if not names:
            return
        raw = self.storage.read(names[-1], 0, 1 << 31)
        try:
            snapshot = json.loads(raw)
        except ValueError as exc:
            raise DataCorruptionError(f"container {self.container_id}: checkpoint {names[-1]} unreadable") from exc
        log.info("container %s: empty log, restoring from %s", self.container_id, names[-1])
        self._restore(snapshot)

    def _publish_checkpoint(self) -> None:
        """Leave the metadata in long-term storage next to the data it describes, so a node that lost
        its local disk after a clean shutdown still finds every segment."""
        with self._lock:
            if self._read_index.dirty_bytes:
                return  # not everything is in long-term storage: the local log stays authoritative
            snapshot = self._snapshot()
        name = f"{self._meta_prefix}checkpoint-{self.epoch:012d}-{time.time_ns():020d}"
        self.storage.write(name, json.dumps(snapshot, separators=(",", ":")).encode())
        for old in self.storage.list(self._meta_prefix):
            if old != name:
                self.storage.delete(old)

    def close(self) -> None:
        """Flush everything to long-term storage, checkpoint, truncate the log and stop, so the next
        start recovers from a single checkpoint."""
        with self._lock:
            if self._state != RUNNING:
                if self._state in (FAILED, NEW):
                    self._shutdown_threads()
                return
            self._state = CLOSING
            pending = [p.log_future for p in self._inflight if p.log_future is not None]
        for fut in pending:
            # A failed log is reported through _fail already; closing goes on regardless.
            with contextlib.suppress(Exception):
                fut.result(timeout=30)
        try:
            self.writer.stop(final_flush=True)
            with self._lock:
                checkpoint = self._write_checkpoint() if self._state == CLOSING else None
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
            pending, self._inflight = self._inflight, collections.deque()
            self._frame_parts, self._frame_pending = [], []
            waiters, self._waiters = self._waiters, {}
        for p in pending:
            if p.result is not None and not p.result.done():
                p.result.set_exception(error)
        for lst in waiters.values():
            for _, fut in lst:
                if not fut.done():
                    fut.set_exception(error)

    # -- recovery ------------------------------------------------------------------------------------
    def _recover(self) -> bool:
        """Restore the first checkpoint and replay the rest. Returns True for a fresh (empty) log."""
        first = True
        for entry in self._log.read_all():
            for position, op in enumerate(ops.decode_frame(entry.payload)):
                if first:
                    if not isinstance(op, ops.Checkpoint):
                        raise DataCorruptionError(
                            f"container {self.container_id}: log does not begin with a checkpoint "
                            f"(entry {entry.address.sequence})"
                        )
                    self._restore(op.snapshot)
                    first = False
                else:
                    self._accept(op)
                    self._apply(op)
                if isinstance(op, ops.Checkpoint) and position == 0:
                    self._checkpoints.append(_Checkpoint(entry.address, op.snapshot["lengths"]))
        return first

    def _restore(self, snapshot: dict[str, Any]) -> None:
        self._next_id = snapshot["next_id"]
        for raw in snapshot["segments"]:
            seg = SegmentMetadata.restore(raw)
            self._by_name[seg.name] = self._visible[seg.name] = self._by_id[seg.segment_id] = seg
        snapshot["lengths"] = {int(k): v for k, v in snapshot["lengths"].items()}

    # -- the write path ------------------------------------------------------------------------------
    def _submit(
        self,
        op: ops.Operation,
        result: StoreFuture | None,
        after: Callable[[], None] | None = None,
        events: int | None = None,
    ) -> None:
        """Queue an accepted operation for the log. Caller holds the lock, so log order is acceptance
        order. Operations accumulate into the next frame while earlier frames are being fsync'd."""
        part = ops.frame_part(op)
        pending = _Pending(op, result, after, events)
        self._inflight.append(pending)
        self._frame_parts.append(part)
        self._frame_pending.append(pending)
        self._bytes_since_checkpoint += len(part)
        if self._frames_in_flight < MAX_FRAMES_IN_FLIGHT:
            self._send_frame()
        if self._bytes_since_checkpoint >= self.config.checkpoint_every_bytes and not isinstance(op, ops.Checkpoint):
            self._write_checkpoint()

    def _send_frame(self) -> None:
        """Hand everything queued to the log as one entry. Caller holds the lock."""
        if not self._frame_parts:
            return
        frame = b"".join(self._frame_parts) if len(self._frame_parts) > 1 else self._frame_parts[0]
        pendings = self._frame_pending
        self._frame_parts, self._frame_pending = [], []
        try:
            log_future = self._log.append(frame)
        except Exception as exc:  # noqa: BLE001 - fenced or broken log
            log_future = failed(exc)
        for p in pendings:
            p.log_future = log_future
        self._frames_in_flight += 1
        log_future.add_done_callback(self._frame_done)

    def _frame_done(self, _: Any) -> None:
        with self._lock:
            self._frames_in_flight -= 1
            if self._state in (RUNNING, CLOSING):
                self._send_frame()
        self._drain()

    def _drain(self, _: StoreFuture | None = None) -> None:
        """Apply every operation at the head of the in-flight queue whose log write completed."""
        done: list[_Pending] = []
        failure: BaseException | None = None
        with self._lock:
            if self._draining:
                return  # re-entered from this thread; the outer loop picks the entry up
            self._draining = True
            try:
                while self._inflight:
                    head = self._inflight[0]
                    fut = head.log_future
                    if fut is None or not fut.done():
                        break
                    failure = fut.exception()
                    if failure is not None:
                        break
                    self._inflight.popleft()
                    head.value = self._apply(head.op, fut.result())
                    if head.events is not None:
                        self.rates.record(head.op.segment_id, head.events, len(head.op.data))
                    done.append(head)
            finally:
                self._draining = False
        if failure is not None:
            self._fail(failure)
        for p in done:
            if p.after is not None:
                p.after()
            if p.result is not None and not p.result.done():
                p.result.set_result(p.value)

    def _run(self, result: StoreFuture, accept: Callable[[], None]) -> StoreFuture:
        """Run ``accept`` (validate + submit) under the lock, turning store errors into a failed future."""
        try:
            with self._lock:
                self._check_running()
                accept()
        except StoreError as exc:
            if not result.done():
                result.set_exception(exc)
        return result

    def _segment(self, name: str) -> SegmentMetadata:
        seg = self._by_name.get(name)
        if seg is None:
            raise SegmentNotFoundError(name)
        return seg

    def _writable(self, name: str) -> SegmentMetadata:
        seg = self._segment(name)
        if seg.sealed or seg.merging:
            raise SegmentSealedError(name)
        return seg

    # -- public operations ------------------------------------------------------------------------------
    def create_segment(self, name: str, attributes: dict[str, int]) -> StoreFuture[None]:
        result: StoreFuture = StoreFuture()

        def accept() -> None:
            if name in self._by_name:
                raise SegmentExistsError(name)
            op = ops.Create(self._next_id, name, dict(attributes), _now_ms())
            self._accept(op)
            self._submit(op, result)

        return self._run(result, accept)

    def append(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None,
        attributes: Sequence[AttributeUpdate],
        events: int = 1,
    ) -> StoreFuture[int]:
        result: StoreFuture = StoreFuture()
        if len(data) > self.config.max_append_bytes:
            return failed(StoreError(f"append of {len(data)} bytes exceeds {self.config.max_append_bytes}"))
        if events < 0:
            return failed(StoreError(f"an append carries a non-negative event count, not {events}"))

        def accept() -> None:
            seg = self._writable(name)
            offset = seg.length
            if expected_offset is not None and expected_offset != offset:
                raise BadOffsetError(f"{name}: expected offset {expected_offset}, length is {offset}",
                                     expected_offset, offset)
            resolved = resolve_attribute_updates(seg.attributes, attributes) if attributes else {}
            op = ops.Append(seg.segment_id, offset, bytes(data), resolved)
            self._accept(op)
            self._submit(op, result, events=events)

        return self._run(result, accept)

    def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> StoreFuture[None]:
        result: StoreFuture = StoreFuture()

        def accept() -> None:
            seg = self._segment(name)
            if seg.merging:
                raise SegmentSealedError(name)
            op = ops.Attributes(seg.segment_id, resolve_attribute_updates(seg.attributes, updates))
            self._accept(op)
            self._submit(op, result)

        return self._run(result, accept)

    def seal(self, name: str) -> StoreFuture[int]:
        result: StoreFuture = StoreFuture()

        def accept() -> None:
            seg = self._segment(name)
            if seg.sealed:
                # Idempotent: a retried seal must not fail once the first one landed.
                self._when_durable(result, lambda: seg.length)
                return
            op = ops.Seal(seg.segment_id)
            self._accept(op)
            self._submit(op, result)

        return self._run(result, accept)

    def truncate(self, name: str, offset: int) -> StoreFuture[None]:
        result: StoreFuture = StoreFuture()

        def accept() -> None:
            seg = self._segment(name)
            if offset > seg.length or offset < 0:
                raise OffsetOutOfRangeError(f"{name}: truncate at {offset}, length {seg.length}")
            if offset <= seg.start_offset:
                self._when_durable(result, lambda: None)
                return
            op = ops.Truncate(seg.segment_id, offset)
            dropped = self._accept(op)
            self._submit(op, result, after=lambda: self.writer.delete_chunks(dropped))

        return self._run(result, accept)

    def delete(self, name: str) -> StoreFuture[None]:
        result: StoreFuture = StoreFuture()

        def accept() -> None:
            seg = self._segment(name)
            op = ops.Delete(seg.segment_id)
            chunks = [ref.chunk for ref in seg.chunks.refs]
            self._accept(op)
            self._submit(op, result, after=lambda: self.writer.delete_chunks(chunks))

        return self._run(result, accept)

    def merge(self, target: str, source: str) -> StoreFuture[int]:
        """Merge sealed ``source`` into ``target``. The source is first flushed whole to long-term
        storage, so the merge itself only moves chunk references (no data is copied)."""
        result: StoreFuture = StoreFuture()

        def accept() -> None:
            tgt = self._writable(target)
            src = self._segment(source)
            if src is tgt:
                raise StoreError("cannot merge a segment into itself")
            if not src.sealed:
                raise StoreError(f"merge source {source} is not sealed")
            if src.merging:
                raise StoreError(f"merge source {source} is already being merged")
            if not src.durable_sealed or src.storage_length < src.length:
                # Not all of it is in long-term storage yet: flush, then try again.
                flushed = self.writer.request_flush(src.segment_id)
                flushed.add_done_callback(lambda f: self._retry_merge(f, result, accept))
                return
            op = ops.Merge(tgt.segment_id, src.segment_id, tgt.length, src.length - src.start_offset)
            self._accept(op)
            self._submit(op, result)

        return self._run(result, accept)

    def _retry_merge(self, flushed: StoreFuture, result: StoreFuture, accept: Callable[[], None]) -> None:
        exc = flushed.exception()
        if exc is not None:
            result.set_exception(exc)
        else:
            self._run(result, accept)

    def _when_durable(self, result: StoreFuture, value: Callable[[], Any]) -> None:
        """Complete ``result`` once everything accepted so far is durable (for idempotent no-ops)."""
        if not self._inflight:
            result.set_result(value())
            return
        barrier = self._inflight[-1]
        previous = barrier.after

        def after() -> None:
            if previous is not None:
                previous()
            result.set_result(value())

        barrier.after = after

    # -- reads ---------------------------------------------------------------------------------------
    def _visible_segment(self, name: str) -> SegmentMetadata:
        seg = self._visible.get(name)
        if seg is None:
            raise SegmentNotFoundError(name)
        return seg

    def exists(self, name: str) -> bool:
        return name in self._visible

    def segment_rates(self, name: str) -> SegmentRates:
        with self._lock:
            return self.rates.rates(self._visible_segment(name).segment_id)

    def segment_names(self) -> list[str]:
        with self._lock:
            return list(self._visible)

    def get_info(self, name: str) -> SegmentInfo:
        with self._lock:
            self._check_running()
            seg = self._visible_segment(name)
            return SegmentInfo(
                name=seg.name,
                start_offset=seg.durable_start_offset,
                length=seg.durable_length,
                sealed=seg.durable_sealed,
                storage_length=min(seg.storage_length, seg.durable_length),
                attributes=dict(seg.durable_attributes),
                created_ms=seg.created_ms,
                last_modified_ms=seg.last_modified_ms,
            )

    def read(self, name: str, offset: int, max_length: int, wait_timeout: float = 0.0) -> StoreFuture[ReadResult]:
        result: StoreFuture = StoreFuture()
        try:
            self._read_into(result, name, offset, max_length, wait_timeout)
        except StoreError as exc:
            result.set_exception(exc)
        return result

    def _read_into(self, result: StoreFuture, name: str, offset: int, max_length: int, wait_timeout: float) -> None:
        with self._lock:
            self._check_running()
            seg = self._visible_segment(name)
            if offset < seg.durable_start_offset:
                raise SegmentTruncatedError(f"{name}: offset {offset} is below start {seg.durable_start_offset}")
            if offset > seg.durable_length:
                raise OffsetOutOfRangeError(f"{name}: offset {offset} is beyond length {seg.durable_length}")
            if offset == seg.durable_length or max_length <= 0:
                if seg.durable_sealed:
                    result.set_result(ReadResult(offset, b"", end_of_segment=True))
                elif wait_timeout > 0 and max_length > 0:
                    self._wait_for_tail(seg, offset, result, max_length, wait_timeout)
                else:
                    result.set_result(ReadResult(offset, b""))
                return
            limit = min(max_length, seg.durable_length - offset)
            data, next_cached = self._read_index.read(seg.segment_id, offset, limit)
            if data is not None:
                self.stats["cache_reads"] += 1
                result.set_result(ReadResult(offset, data))
                return
            ref = seg.chunks.find(offset)
            if ref is None:
                raise DataCorruptionError(f"{name}: offset {offset} is neither cached nor in long-term storage")
            limit = min(limit, ref.end - offset)
            if next_cached is not None:
                limit = min(limit, next_cached - offset)
            self.stats["storage_reads"] += 1
        self._read_pool.submit(self._read_from_storage, result, name, ref, offset, limit)

    def _read_from_storage(self, result: StoreFuture, name: str, ref: ChunkRef, offset: int, length: int) -> None:
        try:
            data = self.storage.read(ref.chunk, ref.chunk_offset + offset - ref.offset, length)
        except ChunkNotFoundError:
            # The chunk went away under us: a truncation or deletion won the race.
            result.set_exception(SegmentTruncatedError(f"{name}: offset {offset} no longer exists"))
            return
        except Exception as exc:  # noqa: BLE001 - surface storage failures to the reader
            result.set_exception(StoreError(f"{name}: long-term storage read failed: {exc!r}"))
            return
        result.set_result(ReadResult(offset, data))

    def _wait_for_tail(self, seg: SegmentMetadata, offset: int, result: StoreFuture, max_length: int,
                       timeout: float) -> None:
        """Park a read at the tail until data arrives, the segment is sealed, or ``timeout`` passes."""
        waiter: StoreFuture = StoreFuture()
        self._waiters.setdefault(seg.segment_id, []).append((offset, waiter))
        name = seg.name
        timer = self._scheduler.call_later(timeout, lambda: waiter.done() or waiter.set_result(False))

        def wake(f: StoreFuture) -> None:
            timer.cancel()
            if f.exception() is not None:
                result.set_exception(f.exception())
            elif f.result():
                try:
                    self._read_into(result, name, offset, max_length, 0.0)
                except StoreError as exc:
                    result.set_exception(exc)
            else:
                result.set_result(ReadResult(offset, b""))

        waiter.add_done_callback(wake)

    def _wake_waiters(self, seg: SegmentMetadata, error: BaseException | None = None) -> None:
        waiters = self._waiters.get(seg.segment_id)
        if not waiters:
            return
        keep = []
        for offset, fut in waiters:
            if fut.done():
                continue
            if error is not None:
                fut.set_exception(error)
            elif offset < seg.durable_length or seg.durable_sealed:
                fut.set_result(True)
            else:
                keep.append((offset, fut))
        if keep:
            self._waiters[seg.segment_id] = keep
        else:
            del self._waiters[seg.segment_id]

    # -- operation semantics: accept (accepted layer) and apply (durable layer) ----------------------
    def _accept(self, op: ops.Operation) -> Any:
        """Change the accepted layer. Validation happened already; this cannot fail."""
        if isinstance(op, ops.Append):
            seg = self._by_id[op.segment_id]
            seg.length = op.offset + len(op.data)
            if op.attributes:
                apply_attributes(seg.attributes, op.attributes)
        elif isinstance(op, ops.StorageFlushed):
            seg = self._by_id.get(op.segment_id)
            if seg is not None:
                seg.chunks.add(ChunkRef(op.offset, op.length, op.chunk))
        elif isinstance(op, ops.Create):
            seg = SegmentMetadata(op.segment_id, op.name, op.created_ms, op.attributes)
            self._by_name[op.name] = self._by_id[op.segment_id] = seg
            self._next_id = max(self._next_id, op.segment_id + 1)
        elif isinstance(op, ops.Attributes):
            apply_attributes(self._by_id[op.segment_id].attributes, op.attributes)
        elif isinstance(op, ops.Seal):
            self._by_id[op.segment_id].sealed = True
        elif isinstance(op, ops.Truncate):
            seg = self._by_id[op.segment_id]
            seg.start_offset = op.offset
            return [ref.chunk for ref in seg.chunks.drop_below(op.offset)]
        elif isinstance(op, ops.Delete):
            seg = self._by_id[op.segment_id]
            seg.deleted = True
            self._by_name.pop(seg.name, None)
        elif isinstance(op, ops.Merge):
            tgt, src = self._by_id[op.target_id], self._by_id[op.source_id]
            for ref in src.chunks.shifted(op.target_offset - src.start_offset, src.start_offset):
                tgt.chunks.add(ref)
            tgt.length = op.target_offset + op.length
            src.merging = src.deleted = True
            self._by_name.pop(src.name, None)
        return None

    def _apply(self, op: ops.Operation, address: LogAddress | None = None) -> Any:
        """Change the durable layer and read index once ``op`` is durable; returns the caller's result."""
        now = _now_ms()
        if isinstance(op, ops.Append):
            seg = self._by_id.get(op.segment_id)
            if seg is None:
                return op.offset
            end = op.offset + len(op.data)
            if end > seg.durable_length:
                seg.durable_length = end
            seg.last_modified_ms = now
            if op.attributes:
                apply_attributes(seg.durable_attributes, op.attributes)
            if end > seg.durable_start_offset and end > seg.storage_length:
                self._read_index.append(op.segment_id, op.offset, op.data)
                self.writer.notice_dirty(self._read_index.total_bytes)
            self._wake_waiters(seg)
            self.stats["appends"] += 1
            self.stats["append_bytes"] += len(op.data)
            return op.offset
        if isinstance(op, ops.StorageFlushed):
            self._read_index.mark_clean(op.segment_id, op.offset + op.length)
            return None
        if isinstance(op, ops.Create):
            seg = self._by_id[op.segment_id]
            self._visible[op.name] = seg
            return None
        if isinstance(op, ops.Attributes):
            seg = self._by_id[op.segment_id]
            apply_attributes(seg.durable_attributes, op.attributes)
            seg.last_modified_ms = now
            return None
        if isinstance(op, ops.Seal):
            seg = self._by_id[op.segment_id]
            seg.durable_sealed = True
            seg.last_modified_ms = now
            self._wake_waiters(seg)
            self.writer.wake()
            return seg.durable_length
        if isinstance(op, ops.Truncate):
            seg = self._by_id[op.segment_id]
            seg.durable_start_offset = max(seg.durable_start_offset, op.offset)
            self._read_index.drop_below(op.segment_id, op.offset)
            return None
        if isinstance(op, ops.Delete):
            seg = self._by_id.pop(op.segment_id)
            if self._visible.get(seg.name) is seg:
                del self._visible[seg.name]
            self._read_index.remove(op.segment_id)
            self.rates.forget(op.segment_id)
            self._wake_waiters(seg, SegmentNotFoundError(seg.name))
            return None
        if isinstance(op, ops.Merge):
            tgt = self._by_id[op.target_id]
            src = self._by_id.pop(op.source_id)
            if self._visible.get(src.name) is src:
                del self._visible[src.name]
            self._read_index.remove(op.source_id)
            self.rates.forget(op.source_id)
            tgt.durable_length = op.target_offset + op.length
            tgt.last_modified_ms = now
            self._wake_waiters(tgt)
            self._wake_waiters(src, SegmentNotFoundError(src.name))
            return op.target_offset
        if isinstance(op, ops.Checkpoint):
            if address is not None and self._state != NEW:
                self._checkpoints.append(_Checkpoint(address, op.snapshot["lengths"]))
            return None
        raise DataCorruptionError(f"unknown operation {op!r}")

    # -- checkpoints and log truncation -------------------------------------------------------------
    def _snapshot(self) -> dict[str, Any]:
        """The accepted layer, as a checkpoint records it."""
        segments = [seg for seg in self._by_id.values() if not seg.deleted]
        return {
            "container": self.container_id,
            "next_id": self._next_id,
            "segments": [seg.snapshot() for seg in segments],
            "lengths": {seg.segment_id: seg.length for seg in segments},
        }

    def _write_checkpoint(self) -> StoreFuture[None]:
        """Log a snapshot of the accepted layer. Caller holds the lock (or is single-threaded)."""
        op = ops.Checkpoint(self._snapshot())
        result: StoreFuture = StoreFuture()
        # A checkpoint must open its frame: the log is only ever truncated right before one.
        self._send_frame()
        self._submit(op, result)
        self._bytes_since_checkpoint = 0
        self._last_checkpoint_time = time.monotonic()
        return result

    def maybe_checkpoint(self, max_age: float) -> None:
        """Write a checkpoint when operations arrived since the last one and it is ``max_age`` old;
        this is what lets an idle container truncate its log."""
        with self._lock:
            if (
                self._state == RUNNING
                and self._bytes_since_checkpoint > 0
                and time.monotonic() - self._last_checkpoint_time >= max_age
            ):
                self._write_checkpoint()

    def truncate_log(self) -> None:
        """Truncate the durable log before the newest checkpoint whose data long-term storage holds."""
        with self._lock:
            best: _Checkpoint | None = None
            kept = 0
            for i, cp in enumerate(self._checkpoints):
                if not self._checkpoint_flushed(cp):
                    break
                best, kept = cp, i + 1
            if best is None or best.address.sequence <= 1:
                return
            del self._checkpoints[: kept - 1]  # keep ``best``: it is now the log's first entry
        self._log.truncate(LogAddress(best.address.sequence - 1))
        self.stats["log_truncations"] += 1

    def _checkpoint_flushed(self, cp: _Checkpoint) -> bool:
        for segment_id, length in cp.lengths.items():
            seg = self._by_id.get(int(segment_id))
            if seg is None or seg.deleted:
                continue
            if seg.storage_length < length and seg.start_offset < length:
                return False
        return True

    # -- what the storage writer needs --------------------------------------------------------------
    def lock(self) -> threading.RLock:
        return self._lock

    def segment_by_id(self, segment_id: int) -> SegmentMetadata | None:
        return self._by_id.get(segment_id)

    def read_index(self) -> ReadIndex:
        return self._read_index

    def log_storage_flushed(self, segment_id: int, offset: int, length: int, chunk: str) -> StoreFuture[None] | None:
        """Record a chunk the writer wrote. Returns None (and the writer deletes the chunk) when the
        segment went away or was truncated past it meanwhile."""
        with self._lock:
            if self._state not in (RUNNING, CLOSING):
                return None
            seg = self._by_id.get(segment_id)
            if seg is None or seg.deleted or offset + length <= seg.start_offset:
                return None
            op = ops.StorageFlushed(segment_id, offset, length, chunk)
            self._accept(op)
            result: StoreFuture = StoreFuture()
            self._submit(op, result)
            return result

    def referenced_chunks(self) -> set[str]:
        with self._lock:
            return {ref.chunk for seg in self._by_id.values() for ref in seg.chunks.refs}

    def checkpoint_count(self) -> int:
        return len(self._checkpoints)

    @property
    def log_size_bytes(self) -> int:
        return self._log.size_bytes
