"""The durable data log contract, shared by the local file log and the ZeroMQ-replicated log.

Invariants every implementation keeps:
- An append's future completes only after the entry is durable (fsync'd locally, or on an ack quorum).
- Entries are assigned strictly increasing sequence numbers and are read back in that order, whole
  and byte-identical; futures complete in sequence order.
- ``truncate(upto)`` drops entries with sequence <= upto; they are never read again.
- ``open()`` fences every earlier owner (a higher epoch); a fenced writer's appends fail with
  DataLogWriterFencedError and it never writes again.
- A torn tail (a crash mid-write) is cut on open; corruption anywhere else raises DataCorruptionError.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from millrace.store.durablelog import framing
from millrace.store.fsutil import Buffer


@dataclass(frozen=True, order=True)
class LogAddress:
    """Where an entry lives in the log. ``sequence`` is dense and monotonic across restarts."""

    sequence: int


@dataclass(frozen=True)
class LogEntry:
    address: LogAddress
    payload: bytes


def admit_append(payload: bytes | memoryview, refusal: BaseException | None) -> tuple[bytes, Future[LogAddress]]:
    """The start of every implementation's ``append``: the payload as immutable bytes (copied now, so a
    caller mutating its buffer later cannot change what gets written) and its future, already failed
    with ``refusal`` (fenced, closed or failed log) or when the entry exceeds ``framing.MAX_PAYLOAD``
    (recovery would reject such a frame, so it must never reach a disk)."""
    if type(payload) is not bytes:
        payload = bytes(payload)
    future: Future[LogAddress] = Future()
    if refusal is not None:
        future.set_exception(refusal)
    elif len(payload) > framing.MAX_PAYLOAD:
        future.set_exception(ValueError(f"entry of {len(payload)} bytes exceeds {framing.MAX_PAYLOAD}"))
    return payload, future


def admit_parts(parts: Sequence[Buffer], refusal: BaseException | None) -> tuple[tuple[Buffer, ...], int, Future[LogAddress]]:
    """``admit_append`` for an entry given as buffers written back to back: the parts (each immutable:
    bytes or a view of bytes, else copied now), the entry's length and its future."""
    admitted = tuple(part if type(part) is bytes or (type(part) is memoryview and type(part.obj) is bytes)
                     else bytes(part) for part in parts)
    length = sum(map(len, admitted))
    future: Future[LogAddress] = Future()
    if refusal is not None:
        future.set_exception(refusal)
    elif length > framing.MAX_PAYLOAD:
        future.set_exception(ValueError(f"entry of {length} bytes exceeds {framing.MAX_PAYLOAD}"))
    return admitted, length, future


class DurableDataLog(ABC):
    """An append-only, fenced, truncatable log of opaque entries."""

    @abstractmethod
    def open(self) -> None:
        """Take ownership (fencing older owners with a new epoch) and recover the log's tail."""

    @property
    @abstractmethod
    def epoch(self) -> int:
        """The ownership epoch taken by ``open()``."""

    @abstractmethod
    def read_all(self) -> Iterator[LogEntry]:
        """Every entry not truncated, in order. Only valid after open() and before the first append."""

    @abstractmethod
    def append(self, payload: bytes) -> Future[LogAddress]:
        """Queue an entry; the future completes with its address once durable (group commit)."""

    def append_parts(self, parts: Sequence[Buffer]) -> Future[LogAddress]:
        """``append`` of the entry ``parts`` make back to back. A log that can write buffers as they are
        (the file log, with ``writev``) spares the caller the copy that joining them costs; this default
        joins them."""
        return self.append(bytes(parts[0]) if len(parts) == 1 else b"".join(parts))

    @abstractmethod
    def truncate(self, upto: LogAddress) -> None:
        """Drop every entry with sequence <= upto.sequence. Safe to call from any thread."""

    @abstractmethod
    def close(self) -> None:
        """Flush what is queued, stop the writer, release ownership."""

    @property
    @abstractmethod
    def size_bytes(self) -> int:
        """Bytes currently retained (not yet truncated), for metrics and truncation policy."""
