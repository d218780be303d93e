"""The container's read path: durable data only, from the read index, from long-term storage, or
once it arrives at the tail.

A read takes the container lock only to find its bytes: a cache hit is answered after the lock is
released; a miss goes to long-term storage on the read pool (blocking I/O never runs under the lock);
a read at the tail parks in the read index's ``TailReads`` and is resumed, outside the lock, by the
log writer's thread when an append or a seal answers it, or by the timer thread when it times out.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from millrace.store.containers.lock import ContainerLock
from millrace.store.containers.metadata import ChunkRef, ContainerMetadata, SegmentMetadata
from millrace.store.containers.read_index import ParkedRead, ReadIndex, TailOutcome
from millrace.store.contracts import ReadResult, SegmentInfo
from millrace.store.errors import (
    ChunkNotFoundError,
    DataCorruptionError,
    OffsetOutOfRangeError,
    SegmentTruncatedError,
    StoreError,
)
from millrace.store.futures import StoreFuture
from millrace.store.lts.interface import ChunkStorage
from millrace.store.scheduler import Scheduler


class SegmentReader:
    def __init__(
        self,
        lock: ContainerLock,
        metadata: ContainerMetadata,
        read_index: ReadIndex,
        storage: ChunkStorage,
        read_pool: ThreadPoolExecutor,
        scheduler: Scheduler,
        stats: collections.Counter[str],
        check_running: Callable[[], None],
    ) -> None:
        self._lock = lock
        self._metadata = metadata
        self._read_index = read_index
        self._storage = storage
        self._read_pool = read_pool
        self._scheduler = scheduler
        self._stats = stats
        self._check_running = check_running

    def info(self, name: str) -> SegmentInfo:
        with self._lock:
            self._check_running()
            seg = self._metadata.visible_segment(name)
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

    def read(self, name: str, offset: int, max_length: int, wait_timeout: float) -> StoreFuture[ReadResult]:
        result: StoreFuture[ReadResult] = StoreFuture()
        self._read_into(result, name, offset, max_length, wait_timeout)
        return result

    def _read_into(
        self, result: StoreFuture[ReadResult], name: str, offset: int, max_length: int, wait_timeout: float
    ) -> None:
        answer: ReadResult | None = None
        from_storage: tuple[ChunkRef, int] | None = None
        try:
            with self._lock:
                self._check_running()
                seg = self._metadata.visible_segment(name)
                if offset < seg.durable_start_offset:
                    raise SegmentTruncatedError(f"{name}: offset {offset} is below start {seg.durable_start_offset}")
                if offset > seg.durable_length:
                    raise OffsetOutOfRangeError(f"{name}: offset {offset} is beyond length {seg.durable_length}")
                if offset == seg.durable_length or max_length <= 0:
                    if seg.durable_sealed:
                        answer = ReadResult(offset, b"", end_of_segment=True)
                    elif wait_timeout > 0 and max_length > 0:
                        self._park(result, seg, offset, max_length, wait_timeout)
                        return
                    else:
                        answer = ReadResult(offset, b"")
                else:
                    limit = min(max_length, seg.durable_length - offset)
                    data, next_cached = self._read_index.read(seg.segment_id, offset, limit)
                    if data is not None:
                        self._stats["cache_reads"] += 1
                        self._stats["read_bytes"] += len(data)
                        seg.read_bytes += len(data)
                        answer = ReadResult(offset, data)
                    else:
                        ref = seg.chunks.find(offset)
                        if ref is None:
                            raise DataCorruptionError(
                                f"{name}: offset {offset} is neither cached nor in long-term storage"
                            )
                        limit = min(limit, ref.end - offset)
                        if next_cached is not None:
                            limit = min(limit, next_cached - offset)
                        self._stats["storage_reads"] += 1
                        self._stats["read_bytes"] += limit
                        seg.read_bytes += limit
                        from_storage = (ref, limit)
        except StoreError as exc:
            if not result.done():
                result.set_exception(exc)
            return
        if from_storage is not None:
            ref, limit = from_storage
            self._read_pool.submit(self._read_from_storage, result, name, ref, offset, limit)
        elif answer is not None and not result.done():
            result.set_result(answer)

    def _read_from_storage(
        self, result: StoreFuture[ReadResult], name: str, ref: ChunkRef, offset: int, length: int
    ) -> None:
        """On the read pool: the bytes come from the chunk long-term storage holds them in."""
        try:
            data = self._storage.read(ref.chunk, ref.chunk_offset + offset - ref.offset, length)
        except ChunkNotFoundError:
            # The chunk went away under us: a truncation or deletion won the race.
            result.set_exception(SegmentTruncatedError(f"{name}: offset {offset} no longer exists"))
            return
        except Exception as exc:  # noqa: BLE001 - surface storage failures to the reader
            result.set_exception(StoreError(f"{name}: long-term storage read failed: {exc!r}"))
            return
        result.set_result(ReadResult(offset, data))

    def _park(
        self, result: StoreFuture[ReadResult], seg: SegmentMetadata, offset: int, max_length: int, timeout: float
    ) -> None:
        """Park a read at the tail until data arrives, the segment is sealed or goes, or ``timeout``
        passes. Caller holds the lock, so no append can slip between the check and the parking."""
        name = seg.name

        def resume(outcome: TailOutcome) -> None:
            if isinstance(outcome, BaseException):
                if not result.done():
                    result.set_exception(outcome)
            elif outcome:
                self._read_into(result, name, offset, max_length, 0.0)
            elif not result.done():
                result.set_result(ReadResult(offset, b""))

        parked = self._read_index.tail_reads.park(seg.segment_id, offset, resume)
        parked.timer = self._scheduler.call_later(timeout, lambda: self._expire(parked))

    def _expire(self, parked: ParkedRead) -> None:
        """On the timer thread: end the wait, unless a wake or a failure took the read first."""
        with self._lock:
            expired = self._read_index.tail_reads.expire(parked)
        if expired:
            parked.resume(False)
