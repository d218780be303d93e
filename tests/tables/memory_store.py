"""An in-memory stand-in for SegmentStore with the same contract for the calls tables make.

Used where a test wants many thousands of operations (property tests) without durable-log fsyncs,
and to check that TableStore relies on nothing beyond the documented SegmentStore contract."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from store.contracts import AttributeUpdate, ReadResult, SegmentInfo
from store.errors import (
    BadOffsetError,
    OffsetOutOfRangeError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentTruncatedError,
)


def _done(value=None, error: BaseException | None = None) -> Future:
    f: Future = Future()
    if error is not None:
        f.set_exception(error)
    else:
        f.set_result(value)
    return f


@dataclass
class _Segment:
    data: bytearray = field(default_factory=bytearray)
    start: int = 0
    sealed: bool = False
    attributes: dict[str, int] = field(default_factory=dict)
    created_ms: int = 0


class MemorySegmentStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._segments: dict[str, _Segment] = {}
        self._clock = 0

    def _get(self, name: str) -> _Segment:
        seg = self._segments.get(name)
        if seg is None:
            raise SegmentNotFoundError(name)
        return seg

    def _call(self, fn) -> Future:
        with self._lock:
            try:
                return _done(fn())
            except Exception as e:  # noqa: BLE001 - futures carry every failure
                return _done(error=e)

    def create_segment(self, name: str, attributes: dict[str, int] | None = None) -> Future[None]:
        def run() -> None:
            if name in self._segments:
                raise SegmentExistsError(name)
            self._clock += 1  # distinct creation stamps even within one millisecond
            self._segments[name] = _Segment(
                attributes=dict(attributes or {}), created_ms=int(time.time() * 1000) * 1000 + self._clock
            )

        return self._call(run)

    def append(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        attributes: Sequence[AttributeUpdate] = (),
    ) -> Future[int]:
        def run() -> int:
            seg = self._get(name)
            if seg.sealed:
                raise SegmentSealedError(name)
            length = seg.start + len(seg.data)
            if expected_offset is not None and expected_offset != length:
                raise BadOffsetError(name, expected_offset, length)
            seg.data += data
            return length

        return self._call(run)

    def read(self, name: str, offset: int, max_length: int, wait_timeout: float = 0.0) -> Future[ReadResult]:
        def run() -> ReadResult:
            seg = self._get(name)
            length = seg.start + len(seg.data)
            if offset < seg.start:
                raise SegmentTruncatedError(name)
            if offset > length:
                raise OffsetOutOfRangeError(name)
            # Short reads are allowed by the contract; exercise them.
            n = min(max_length, 4096 + offset % 777)
            data = bytes(seg.data[offset - seg.start : offset - seg.start + n])
            return ReadResult(offset, data, seg.sealed and offset + len(data) == length)

        return self._call(run)

    def get_info(self, name: str) -> SegmentInfo:
        with self._lock:
            seg = self._get(name)
            length = seg.start + len(seg.data)
            return SegmentInfo(name, seg.start, length, seg.sealed, 0, dict(seg.attributes), seg.created_ms)

    def exists(self, name: str) -> bool:
        with self._lock:
            return name in self._segments

    def seal(self, name: str) -> Future[int]:
        def run() -> int:
            seg = self._get(name)
            seg.sealed = True
            return seg.start + len(seg.data)

        return self._call(run)

    def truncate(self, name: str, offset: int) -> Future[None]:
        def run() -> None:
            seg = self._get(name)
            if not seg.start <= offset <= seg.start + len(seg.data):
                raise OffsetOutOfRangeError(name)
            del seg.data[: offset - seg.start]
            seg.start = offset

        return self._call(run)

    def delete(self, name: str) -> Future[None]:
        def run() -> None:
            self._get(name)
            del self._segments[name]

        return self._call(run)

    def list_segments(self) -> list[str]:
        with self._lock:
            return sorted(self._segments)
