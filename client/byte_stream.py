"""Byte streams: a stream read and written as one sequence of bytes (Pravega's ``ByteStreamWriter``
and ``ByteStreamReader``).

A byte stream is a stream with exactly one fixed segment that never scales, so its bytes are that
segment's bytes and an offset is a segment offset (it stays valid after truncation, which only moves
the head). ``StreamManager.create_byte_stream`` makes one; ``create_byte_writer`` /
``create_byte_reader`` open it. Byte data and event data never mix: the segment carries the
byte-stream format (``FORMAT_ATTRIBUTE``), the gateway refuses event writers on a segment so marked (or holding
any bytes) and the manager refuses a stream event writers have partitioned.

**Exactly once across lost connections**, as Pravega does it: each writer has an id, and each append
carries the writer's next event number as a segment attribute (``byte-writer:<id>``) updated
atomically with the append, on the condition that the attribute still holds the number before it
(``REPLACE_IF_EQUALS``). Appends are pipelined; the condition chains them, so what landed is always a
prefix of what was sent. After a lost connection the writer reads the attribute (the number of the
last append that is durable) and resends only the appends after it, with their original numbers. A
writer first claims an epoch (the high bits of its numbers) by setting the attribute conditionally, so
an earlier instance of the same id (a crashed process whose appends are still on their way, or one
still running) can append nothing after that: its condition no longer holds, and a running one is
fenced.
"""

from __future__ import annotations

import collections
import contextlib
import io
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass

from millrace.client.connection import Reply
from millrace.client.controller import ControllerClient
from millrace.client.streams import StreamCut
from millrace.protocol import messages as m
from millrace.protocol.contracts import AttributeUpdate, AttributeUpdateType, SegmentInfo
from millrace.protocol.errors import (
    BadAttributeUpdateError,
    ConnectionLostError,
    SegmentSealedError,
    StoreError,
    StreamSealedError,
    WriterFencedError,
)
from millrace.protocol.messages import decode_reply

CHUNK_BYTES = 1 << 20  # the most one append carries
READ_BYTES = 1 << 20  # the most one read asks for
MAX_BUFFERED_BYTES = 16 << 20  # unacknowledged bytes past which ``write`` waits
WRITER_ATTRIBUTE_PREFIX = "byte-writer:"
EPOCH_SHIFT = 32  # event numbers are (instance epoch << 32) + sequence within the instance
WAIT_SLICE_MS = 5000  # one blocking read's wait on the server (the client's call timeout is longer)
# How long a resend may keep finding an earlier attempt accepted but not yet durable.
SETTLE_SECONDS = 30.0


def writer_attribute(writer_id: str) -> str:
    """The segment attribute holding ``writer_id``'s last durable event number."""
    return WRITER_ATTRIBUTE_PREFIX + writer_id


@dataclass
class _Append:
    """One append: its bytes, its event number, and its request once sent."""

    number: int
    data: bytes
    future: Future[Reply] | None = None
    error: BaseException | None = None  # a send that failed before any request existed

    def failure(self) -> BaseException | None:
        if self.error is not None:
            return self.error
        if self.future is not None and self.future.done():
            return self.future.exception()
        return None

    def acknowledged(self) -> bool:
        return self.future is not None and self.future.done() and self.future.exception() is None

    def settled(self) -> bool:
        return self.error is not None or (self.future is not None and self.future.done())


class ByteStreamWriter(io.BufferedIOBase):
    """Appends bytes to a byte stream. ``write`` only buffers (it waits while more than
    ``MAX_BUFFERED_BYTES`` are unacknowledged); a sender thread sends the buffer in appends of at most
    ``CHUNK_BYTES``, pipelined, and whatever accumulates while appends are in flight goes out together.
    ``flush`` returns once everything written is durable. A file-like object (``io.BufferedIOBase``):
    not readable, not seekable; ``write`` takes every byte or raises.

    A failure the writer cannot repair (the stream sealed, another writer using the same id, the
    server unreachable past the pool's reconnect timeout) is raised by the next ``write``, ``flush``
    or ``close``; bytes not acknowledged by then may or may not have landed, never twice. A sealed
    stream raises ``StreamSealedError`` at ``write``: at once for a stream sealed before the writer
    was created, and from the first refused append on for one sealed later (bytes buffered before that
    fail at the next ``write`` or ``flush``).
    """

    def __init__(self, controller: ControllerClient, scope: str, stream: str, segment_id: int, segment: str,
                 writer_id: str | None = None) -> None:
        super().__init__()
        self.controller = controller
        self.scope = scope
        self.stream = stream
        self.segment_id = segment_id
        self.segment = segment
        self.writer_id = writer_id or uuid.uuid4().hex
        self.attribute = writer_attribute(self.writer_id)
        self.resent = 0  # appends sent again after a lost connection (their first attempt had not landed)
        self.recoveries = 0  # lost connections the writer recovered from
        self.lost_answers = 0  # appends that had landed although their answer was lost (not resent)
        self._cond = threading.Condition()
        self._buffer = bytearray()
        self._in_flight: collections.deque[_Append] = collections.deque()
        self._in_flight_bytes = 0
        self._error: BaseException | None = None
        self._stopping = False
        # Sealed already: every write is refused at once (nothing is buffered, so flush has nothing to
        # fail), and no epoch is claimed on a segment nobody may append to.
        self._sealed: StreamSealedError | None = self._sealed_error() if self._info().sealed else None
        self._first_number = (self._claim_epoch() if self._sealed is None else 0) + 1
        self._next_number = self._first_number
        self._sender = threading.Thread(target=self._run, name=f"millrace-byte-writer-{stream}", daemon=True)
        self._sender.start()

    # -- io.BufferedIOBase -------------------------------------------------------------------------
    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]  # io: any buffer
        """Buffer ``data`` for sending; returns its length (every byte is taken)."""
        chunk = bytes(data)
        with self._cond:
            if self.closed:
                raise ValueError("write to a closed ByteStreamWriter")
            if self._sealed is not None:
                raise self._sealed
            self._raise_failure()
            # Wait for room, but never refuse a write larger than the whole buffer: it goes alone.
            while self._buffer and len(self._buffer) + self._in_flight_bytes + len(chunk) > MAX_BUFFERED_BYTES:
                self._cond.wait()
                self._raise_failure()
            self._buffer += chunk
            self._cond.notify_all()
        return len(chunk)

    def flush(self) -> None:
        """Wait until everything written so far is durable."""
        if self.closed:
            return
        with self._cond:
            while (self._buffer or self._in_flight) and self._error is None:
                self._cond.wait()
            self._raise_failure()

    def close(self) -> None:
        """Flush, then stop the sender. The stream stays open for other writers."""
        if self.closed:
            return
        try:
            self.flush()
        finally:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            if threading.current_thread() is not self._sender:
                self._sender.join(timeout=5)
            super().close()

    def __del__(self) -> None:
        # io's finaliser would flush, i.e. talk to a server that may be gone; a writer dropped
        # without close() only stops its sender.
        with contextlib.suppress(Exception), self._cond:
            self._stopping = True
            self._cond.notify_all()

    def __enter__(self) -> ByteStreamWriter:
        return self

    def __repr__(self) -> str:
        return f"ByteStreamWriter({self.scope}/{self.stream}, writer_id={self.writer_id!r})"

    def _sealed_error(self) -> StreamSealedError:
        return StreamSealedError(f"byte stream {self.scope}/{self.stream} is sealed: nothing more can be written "
                                 "to it")

    # -- byte stream operations ------------------------------------------------------------------
    def seal(self) -> None:
        """Flush, seal the stream (no writer may append again; readers reach its end) and close."""
        self.flush()
        self.controller.seal_stream(self.scope, self.stream)
        self.close()

    def truncate_data_before(self, offset: int) -> None:
        """Drop the data before ``offset``; readers below it get SegmentTruncatedError. Recorded as
        the stream's head by the controller. An offset at or below the current head changes nothing;
        one past the durable tail raises InvalidStreamCutError."""
        if offset <= self._info().start_offset:
            return
        self.controller.truncate_stream(StreamCut(self.scope, self.stream, {self.segment_id: offset}))

    def fetch_tail_offset(self) -> int:
        """The durable length: where the next byte written lands once everything buffered has."""
        return self._info().length

    def fetch_head_offset(self) -> int:
        """The first offset still readable."""
        return self._info().start_offset

    # -- the sender thread --------------------------------------------------------------------------
    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    self._retire_acknowledged()
                    failed = any(a.failure() is not None for a in self._in_flight)
                    if failed or self._error is not None:
                        break
                    if self._buffer and (self._in_flight_bytes < MAX_BUFFERED_BYTES or not self._in_flight):
                        break
                    if self._stopping and not self._buffer:
                        return
                    self._cond.wait()
                if self._error is not None:
                    return
                if failed:
                    send = None
                else:
                    data = bytes(self._buffer[:CHUNK_BYTES])
                    del self._buffer[:CHUNK_BYTES]
                    send = _Append(self._next_number, data)
                    self._next_number += 1
                    self._in_flight.append(send)
                    self._in_flight_bytes += len(data)
            if send is not None:
                self._send(send)
                continue
            try:
                self._recover()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's next write or flush
                if isinstance(exc, SegmentSealedError):
                    sealed = self._sealed_error()
                    sealed.__cause__ = exc
                    exc = sealed
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                return

    def _retire_acknowledged(self) -> None:
        """Drop acknowledged appends from the front (called under the condition)."""
        while self._in_flight and self._in_flight[0].acknowledged():
            done = self._in_flight.popleft()
            self._in_flight_bytes -= len(done.data)
            self._cond.notify_all()

    def _send(self, append: _Append) -> None:
        expected = append.number - 1
        request = m.AppendToSegment(segment=self.segment, attributes=(
            AttributeUpdate(self.attribute, append.number, AttributeUpdateType.REPLACE_IF_EQUALS, expected),))
        try:
            # Never waits for a connect: a lost connection fails this append at once, and recovery
            # (which may wait) reconnects.
            future = self.controller.pool.request_if_connected(self.controller.endpoint, request, append.data)
        except ConnectionLostError as exc:
            with self._cond:
                append.error = exc
                self._cond.notify_all()
            return
        with self._cond:
            append.future = future
        future.add_done_callback(self._settled)

    def _settled(self, _future: Future[Reply]) -> None:
        # On the connection's receiver thread: only wake the sender, never send from here.
        with self._cond:
            self._cond.notify_all()

    def _recover(self) -> None:
        """Some append failed. Wait for every append in flight to settle, learn from the writer's
        attribute which of them are durable, and resend the rest in order with their original
        numbers, until all are acknowledged. An append accepted but not yet durable when the
        connection dropped refuses its resend (the attribute moved past the condition), so it is
        waited for, never written twice."""
        self.recoveries += 1
        best, progress_at, rounds = -1, time.monotonic(), 0
        while True:
            with self._cond:
                while not all(a.settled() for a in self._in_flight):
                    self._cond.wait()
                self._retire_acknowledged()
                pending = list(self._in_flight)
            if not pending:
                return
            failures = [exc for exc in (a.failure() for a in pending) if exc is not None]
            for exc in failures:
                if not isinstance(exc, (ConnectionLostError, BadAttributeUpdateError)):
                    raise exc  # e.g. the stream was sealed: nothing to repair
            landed = self._attribute_value()  # the claim at least: first number - 1
            if landed > pending[-1].number:
                raise WriterFencedError(f"another writer appends to {self.scope}/{self.stream} as "
                                        f"{self.writer_id!r} (its number {landed} is past this writer's)")
            refused_only = bool(failures) and all(isinstance(e, BadAttributeUpdateError) for e in failures)
            if landed > best or not refused_only:
                # Progress, or a lost connection (how long to wait for the server is the pool's call).
                best, progress_at = max(best, landed), time.monotonic()
            elif time.monotonic() - progress_at > SETTLE_SECONDS:
                raise failures[0]  # refused again and again with nothing landing: not a late append
            with self._cond:
                for a in pending:
                    if a.number <= landed:  # durable: its answer was lost, its bytes were not
                        self.lost_answers += 1
                        a.future, a.error = _done_future(), None
                self._retire_acknowledged()
                resend = list(self._in_flight)
                for a in resend:
                    a.future, a.error = None, None
            if rounds:
                time.sleep(0.05)  # an earlier attempt is accepted but not durable yet: give it time
            rounds += 1
            for append in resend:
                self.resent += 1
                self._send(append)

    def _attribute_value(self) -> int:
        """The writer id's last durable event number, reconnecting as long as the pool allows."""
        return self._info().attributes[self.attribute]

    def _claim_epoch(self) -> int:
        """Set the writer id's attribute to the start of a new epoch (high bits) and return it. An
        earlier instance of the id (a crashed process whose appends may still land, or one still
        running) expects a value below it, so none of its appends can land after this; a running one
        learns it is fenced from its next refusal."""
        while True:
            last = self._info().attributes.get(self.attribute)
            claim = 0 if last is None else ((int(last) >> EPOCH_SHIFT) + 1) << EPOCH_SHIFT
            update = AttributeUpdate(self.attribute, claim, AttributeUpdateType.REPLACE_IF_EQUALS,
                                     None if last is None else int(last))
            try:
                # A lost answer is settled by the next look: the attribute then holds the claim.
                self.controller.call(m.UpdateSegmentAttributes(segment=self.segment, attributes=(update,)))
                return claim
            except (BadAttributeUpdateError, ConnectionLostError):
                time.sleep(0.01)  # an append of the earlier instance is accepted, not yet durable

    def _info(self) -> SegmentInfo:
        # retry: the first attempt reconnects through the pool (with its backoff) when needed.
        return self.controller.segment_info(self.segment)


def _done_future() -> Future[Reply]:
    fut: Future[Reply] = Future()
    fut.set_result(({}, b""))
    return fut


class ByteStreamReader(io.RawIOBase):
    """Reads a byte stream from an offset (the head at first). A raw file object: ``read``,
    ``readinto``, ``seek``/``tell`` and ``io.BufferedReader(reader)`` work. ``read(n)`` waits until at
    least one byte is there, or the stream is sealed and read to its end (then b""); with a
    ``timeout`` (seconds) it returns None when nothing came in time, as a non-blocking file does.
    Reading below the head raises SegmentTruncatedError; reading past the tail OffsetOutOfRangeError.
    """

    def __init__(self, controller: ControllerClient, scope: str, stream: str, segment_id: int, segment: str,
                 timeout: float | None = None) -> None:
        super().__init__()
        self.controller = controller
        self.scope = scope
        self.stream = stream
        self.segment_id = segment_id
        self.segment = segment
        self.timeout = timeout
        self._offset = self.fetch_head_offset()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int | None:  # type: ignore[override]  # io: any buffer
        """Read into ``buffer`` from the current offset: the count read, 0 at the end of a sealed
        stream, None if ``timeout`` passed with nothing to read."""
        if self.closed:
            raise ValueError("read from a closed ByteStreamReader")
        view = memoryview(buffer).cast("B")
        if len(view) == 0:
            return 0
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            wait_ms = WAIT_SLICE_MS
            if deadline is not None:
                wait_ms = max(0, min(wait_ms, int((deadline - time.monotonic()) * 1000)))
            header, data = self.controller.call(
                m.ReadSegment(segment=self.segment, offset=self._offset, max_length=min(len(view), READ_BYTES),
                              wait_ms=wait_ms),
                retry=True,
            )
            if data:
                view[:len(data)] = data
                self._offset += len(data)
                return len(data)
            if decode_reply(m.ReadReply, header).end_of_segment:
                return 0
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to a segment offset: absolute, relative to the current one, or to the tail."""
        if whence == io.SEEK_SET:
            target = offset
        elif whence == io.SEEK_CUR:
            target = self._offset + offset
        elif whence == io.SEEK_END:
            target = self.fetch_tail_offset() + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if target < 0:
            raise ValueError(f"negative offset {target}")
        self._offset = target
        return target

    def tell(self) -> int:
        return self._offset

    def seek_to_offset(self, offset: int) -> None:
        """Pravega's name for ``seek(offset)``."""
        self.seek(offset)

    def available(self) -> int:
        """How many bytes a read would return now without waiting."""
        return max(0, self.fetch_tail_offset() - self._offset)

    def fetch_head_offset(self) -> int:
        """The first offset still readable (moved by truncation)."""
        return self._info().start_offset

    def fetch_tail_offset(self) -> int:
        """The durable length: everything below it can be read now."""
        return self._info().length

    def _info(self) -> SegmentInfo:
        return self.controller.segment_info(self.segment)

    def __enter__(self) -> ByteStreamReader:
        return self

    def __repr__(self) -> str:
        return f"ByteStreamReader({self.scope}/{self.stream}, offset={self._offset})"


__all__ = ["ByteStreamReader", "ByteStreamWriter", "StoreError", "writer_attribute"]
