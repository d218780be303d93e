"""The local durable log: segmented files in one directory, group commit, fdatasync before every ack.

Directory layout::

    lock                      flock'd exclusively by the owner while open (fences other processes)
    epoch                     ownership epoch, bumped durably by every open()
    truncation                highest truncated sequence number (0 = nothing truncated)
    00000000000000000001.log  frames (see framing.py); the name is the file's first sequence number

Sequence numbers start at 1 and are dense across files. Only the last file is ever written; it rolls
over once it holds ``max_file_bytes``.

Threading: ``append`` may be called from any thread and never blocks on I/O. A writer thread drains
the queue, writes each batch with ``os.pwritev`` (the entries' parts as given: no copy in Python, where
it would hold the GIL) and one ``os.fdatasync`` and then completes the batch's futures in sequence
order. Given ``turns`` (``turn_commits``), appends made on the event loop's thread do not wake the
writer: at the end of the loop's turn the loop's thread writes them itself when they are few, handing
the sync to the kernel where it can (``kernel_sync``; the loop then acks them when it reaps the sync),
or wakes the writer. One commit runs at a time (the commit lock, held from the write to the sync's end).
Future callbacks run on the committing thread: they must be quick and must never wait on another
append's future (that would deadlock the writer, or the loop). ``open``, ``read_all``, ``truncate`` and
``close`` do blocking I/O: keep them off the reactor thread.

Errors: a failed write or fdatasync fails its batch's futures with the OSError and breaks the log;
every later append fails with ContainerOfflineError (``__cause__`` is the OSError) until the owner
closes it and opens a new one. Appends after close also fail with ContainerOfflineError. ``open``
raises DataLogWriterFencedError while another FileDurableDataLog (in any process) holds the directory,
and DataCorruptionError for damage that is not a torn tail.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass

from crc32c import crc32c

from millrace.store.durablelog import framing
from millrace.store.durablelog.interface import Buffer, DurableDataLog, LogAddress, LogEntry, admit_parts
from millrace.store.durablelog.kernel_sync import KernelSyncs
from millrace.store.durablelog.turn_commits import TURN_COMMIT_BYTES, TURN_COMMIT_SYNC_SECONDS, TurnCommits
from millrace.store.errors import ContainerOfflineError, DataCorruptionError, DataLogWriterFencedError
from millrace.store.fsutil import (
    DEFAULT_PREALLOCATE_BYTES,
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
    Preallocation,
    drop_written,
    fsync_dir,
    write_fully,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024
# Bounds one write so a flood of queued appends still rolls files and acks in reasonable steps.
DEFAULT_MAX_BATCH_BYTES = 16 * 1024 * 1024

_LOCK_NAME = "lock"
_EPOCH_NAME = "epoch"
_TRUNCATION_NAME = "truncation"
_TMP_SUFFIX = ".tmp"
_LOG_NAME = re.compile(r"^(\d{20})\.log$")

# Small metadata records: magic, format version, value, CRC-32C of the first 16 bytes.
_META = struct.Struct("<IIQI")
_META_MAGIC = 0x4D4C524D  # b"MRLM"
_META_VERSION = 1


# An entry waiting for the writer: its parts, their length, its future.
_Queued = tuple[tuple[Buffer, ...], int, Future[LogAddress]]


@dataclass
class LogStats:
    """Counters maintained by the committing thread (read them for metrics and tests)."""

    appends: int = 0
    batches: int = 0  # commits: one write and one fdatasync each
    # Of those, the ones an event loop's thread wrote at the end of its turn, and the writer thread's:
    # each counted on its own, so either reads as a counter that never goes back.
    turn_commits: int = 0
    writer_commits: int = 0
    fsyncs: int = 0
    bytes_written: int = 0
    files_created: int = 0
    files_deleted: int = 0


@dataclass
class _LogFile:
    first_sequence: int
    path: str
    size: int


def _log_file_name(first_sequence: int) -> str:
    return f"{first_sequence:020d}.log"


class FileDurableDataLog(DurableDataLog):
    """A DurableDataLog kept in files under ``directory`` (see the module docstring)."""

    def __init__(
        self,
        directory: str,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        preallocate_bytes: int = DEFAULT_PREALLOCATE_BYTES,
        turns: TurnCommits | None = None,
    ) -> None:
        if max_file_bytes <= 0 or max_batch_bytes <= 0:
            raise ValueError("max_file_bytes and max_batch_bytes must be positive")
        self._dir = os.path.abspath(directory)
        self._max_file_bytes = max_file_bytes
        self._max_batch_bytes = max_batch_bytes
        self.stats = LogStats()
        # Indirection so tests can inject a failing sync; fdatasync suffices since only data and size change.
        self._sync_file: Callable[[int], None] = os.fdatasync

        # append() takes no lock: deque.append/popleft are atomic, and the flags below are written by
        # one side and read by the other in an order that leaves no queued entry stranded (see append).
        self._queue: deque[_Queued] = deque()
        self._wakeup = threading.Condition(threading.Lock())
        self._writer_waiting = False
        self._writer_exited = False
        self._accepting = False
        self._appended = False
        self._failure: BaseException | None = None
        self._writer: threading.Thread | None = None
        self._turns = turns
        self._turn_end_scheduled = False
        self._sync_in_flight = False  # a batch's sync is with the kernel (KernelSyncs); it holds the commit lock
        # The kernel answered EINVAL to a sync of this log's file (its filesystem has no asynchronous
        # fsync): not asked again, so each commit is not a failed system call first.
        self._kernel_refuses = False
        self._sync_seconds = 0.0  # a moving average of the commits' fdatasync, whoever ran them
        # Held by whichever thread writes: the writer, or the turn's thread committing a small tail.
        self._commit_lock = threading.Lock()

        # Writer-thread state (also touched by open/close while the writer is not running).
        self._write_sequence = 1  # next sequence the writer puts on disk
        self._active_fd = -1
        self._preallocation = Preallocation(preallocate_bytes)

        # Guards the file list, shared between the writer (rolling) and truncate (deleting).
        self._files_lock = threading.Lock()
        self._files: list[_LogFile] = []

        self._truncate_lock = threading.Lock()
        self._truncated_upto = 0
        self._epoch = 0
        self._lock_fd = -1

    # ----------------------------------------------------------------------------------------- open

    def open(self) -> None:
        """Take the directory lock, bump the epoch, recover the files and start the writer thread."""
        if self._accepting or self._writer is not None:
            raise RuntimeError("durable log is already open")
        if not os.path.isdir(self._dir):
            os.makedirs(self._dir, mode=PRIVATE_DIR_MODE, exist_ok=True)
            # Make the new directory's own entry durable, or a crash could lose the whole log.
            fsync_dir(os.path.dirname(self._dir))
        self._take_ownership()
        try:
            self._remove_temp_files()
            self._epoch = self._read_meta(_EPOCH_NAME) + 1
            self._write_meta(_EPOCH_NAME, self._epoch)
            self._truncated_upto = self._read_meta(_TRUNCATION_NAME)
            next_sequence = self._recover()
            active = self._files[-1]
            self._active_fd = os.open(active.path, os.O_WRONLY | os.O_CLOEXEC)
            self._preallocation.start(active.size)
        except BaseException:
            self._release_files()
            self._release_ownership()
            raise
        self._write_sequence = next_sequence
        self._queue.clear()
        self._failure = None
        self._appended = False
        self._writer_exited = False
        self._accepting = True
        self._writer = threading.Thread(target=self._run_writer, name=f"durablelog-writer:{self._dir}", daemon=True)
        self._writer.start()

    def _take_ownership(self) -> None:
        path = os.path.join(self._dir, _LOCK_NAME)
        for _ in range(3):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise DataLogWriterFencedError(f"durable log {self._dir} is owned by another writer") from e
                raise
            # The lock only means something if the locked inode is still the one at `path`.
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._lock_fd = fd
                return
            os.close(fd)
        raise DataLogWriterFencedError(f"durable log {self._dir}: lock file keeps being replaced")

    def _release_ownership(self) -> None:
        if self._lock_fd >= 0:
            # Closing the descriptor drops the flock.
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _release_files(self) -> None:
        if self._active_fd >= 0:
            os.close(self._active_fd)
            self._active_fd = -1
        with self._files_lock:
            self._files = []

    def _remove_temp_files(self) -> None:
        removed = False
        for name in os.listdir(self._dir):
            if name.endswith(_TMP_SUFFIX):
                os.unlink(os.path.join(self._dir, name))
                removed = True
        if removed:
            fsync_dir(self._dir)

    def _read_meta(self, name: str) -> int:
        path = os.path.join(self._dir, name)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return 0
        if len(raw) != _META.size:
            raise DataCorruptionError(f"{path}: metadata record has {len(raw)} bytes, expected {_META.size}")
        magic, version, value, crc = _META.unpack(raw)
        if magic != _META_MAGIC or version != _META_VERSION or crc32c(raw[:16]) != crc:
            raise DataCorruptionError(f"{path}: metadata record failed validation at byte 0")
        return value

    def _write_meta(self, name: str, value: int) -> None:
        """Replace a metadata record atomically and durably (temp file, fsync, rename, dir fsync)."""
        path = os.path.join(self._dir, name)
        tmp = path + _TMP_SUFFIX
        head = struct.pack("<IIQ", _META_MAGIC, _META_VERSION, value)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        try:
            os.write(fd, head + struct.pack("<I", crc32c(head)))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(self._dir)

    def _recover(self) -> int:
        """Validate the log files, cut a torn tail, drop truncated files; return the next sequence.

        Leaves ``self._files`` holding the retained files, the last of which becomes the active one.
        """
        truncated = self._truncated_upto
        found: list[_LogFile] = []
        for name in os.listdir(self._dir):
            m = _LOG_NAME.match(name)
            if m:
                path = os.path.join(self._dir, name)
                found.append(_LogFile(int(m.group(1)), path, os.path.getsize(path)))
        found.sort(key=lambda f: f.first_sequence)

        # A file is wholly truncated when the next file starts at or below truncated + 1; no need to read it.
        doomed = [f for f, nxt in zip(found, found[1:], strict=False) if nxt.first_sequence <= truncated + 1]
        kept = found[len(doomed) :]
        if kept and kept[0].first_sequence > truncated + 1:
            raise DataCorruptionError(
                f"{kept[0].path}: byte 0: log resumes at sequence {kept[0].first_sequence} but entries "
                f"after truncation point {truncated} are missing"
            )

        expected = kept[0].first_sequence if kept else truncated + 1
        for index, log_file in enumerate(kept):
            if log_file.first_sequence != expected:
                raise DataCorruptionError(
                    f"{log_file.path}: byte 0: sequence gap between files, expected a file starting at "
                    f"{expected}, found {log_file.first_sequence}"
                )
            is_last = index == len(kept) - 1
            with open(log_file.path, "rb") as f:
                data = f.read()
            good_end, count = _validate_file(log_file.path, data, log_file.first_sequence, is_last)
            if good_end < len(data):
                # Torn tail of the last file: everything from the first bad byte on was never acknowledged.
                fd = os.open(log_file.path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.ftruncate(fd, good_end)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            log_file.size = good_end
            expected += count

        next_sequence = max(expected, truncated + 1)
        if expected <= truncated + 1:
            # Every retained entry is truncated: drop the files and start afresh at the next sequence.
            doomed.extend(kept)
            kept = []
        for log_file in doomed:
            os.unlink(log_file.path)
            self.stats.files_deleted += 1
        if doomed:
            fsync_dir(self._dir)
        if not kept:
            path = os.path.join(self._dir, _log_file_name(next_sequence))
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE_MODE))
            fsync_dir(self._dir)
            self.stats.files_created += 1
            kept = [_LogFile(next_sequence, path, 0)]
        with self._files_lock:
            self._files = kept
        return next_sequence

    # ------------------------------------------------------------------------------------- contract

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def size_bytes(self) -> int:
        with self._files_lock:
            return sum(f.size for f in self._files)

    @property
    def directory(self) -> str:
        return self._dir

    def read_all(self) -> Iterator[LogEntry]:
        """Every entry after the truncation point, in order, re-validated as it is read."""
        if not self._accepting:
            raise ContainerOfflineError(f"durable log {self._dir} is not open")
        if self._appended:
            raise RuntimeError("read_all() is only valid before the first append")
        with self._files_lock:
            files = [_LogFile(f.first_sequence, f.path, f.size) for f in self._files]
        return self._read_files(files, self._truncated_upto)

    @staticmethod
    def _read_files(files: list[_LogFile], truncated: int) -> Iterator[LogEntry]:
        for log_file in files:
            with open(log_file.path, "rb") as f:
                data = f.read(log_file.size)
            if len(data) != log_file.size:
                raise DataCorruptionError(f"{log_file.path}: byte {len(data)}: file shrank while open")
            expected = log_file.first_sequence
            position = 0
            for sequence, start, end in framing.iter_frames(data):
                if sequence != expected:
                    raise DataCorruptionError(
                        f"{log_file.path}: byte {position}: expected sequence {expected}, found {sequence}"
                    )
                if sequence > truncated:
                    yield LogEntry(LogAddress(sequence), data[start:end])
                expected += 1
                position = end
            if position != len(data):
                raise DataCorruptionError(f"{log_file.path}: byte {position}: invalid frame (changed since open)")

    def append(self, payload: bytes) -> Future[LogAddress]:
        """Queue ``payload``; the future resolves to its address once it is fdatasync'd."""
        return self.append_parts((payload,))

    def append_parts(self, parts: Sequence[Buffer]) -> Future[LogAddress]:
        """Queue the entry ``parts`` make; the writer hands them to ``pwritev`` as they are, so no copy
        of them is made in Python (where it would hold the GIL)."""
        refused = self._refusal() if not self._accepting or self._failure is not None else None
        admitted, length, future = admit_parts(parts, refused)
        if future.done():
            return future
        self._queue.append((admitted, length, future))
        self._appended = True
        self._commit_soon()
        if self._writer_exited:
            # close() raced with this call and the writer is gone. The writer sets the flag before its
            # last sweep of the queue, so between the two of us every entry is answered.
            self._fail_queued(self._refusal())
        return future

    def end_turn(self, commit_here: bool) -> None:
        """The loop's turn that queued entries here is over (``TurnCommits``): when they are few, write
        them on this thread and hand the sync to the kernel, or without kernel syncs sync them here when
        asked to; else wake the writer."""
        self._turn_end_scheduled = False
        queue = self._queue
        if not queue or self._sync_in_flight:
            return  # the sync's end takes up what is queued
        small = _queued_bytes_at_most(queue, TURN_COMMIT_BYTES)
        syncs = self._turns.syncs if self._turns is not None and not self._kernel_refuses else None
        if small and syncs is not None and self._commit_lock.acquire(blocking=False):
            self._commit_in_kernel(syncs)
            return
        if (small and commit_here and self._sync_seconds < TURN_COMMIT_SYNC_SECONDS
                and self._commit_lock.acquire(blocking=False)):
            try:
                if queue and self._accepting and self._failure is None:
                    self._commit(on_turn=True)
            finally:
                self._commit_lock.release()
            if not queue or self._turn_end_scheduled:
                return  # what the completions appended has a turn end of its own
        self._wake_writer()

    def _commit_soon(self) -> None:
        """See the queue committed: at the end of this turn on the loop's thread, else by the writer."""
        turns = self._turns
        if turns is not None and turns.on_loop_thread():
            if not self._turn_end_scheduled:
                self._turn_end_scheduled = True
                turns.due(self)
        else:
            self._wake_writer()

    def _wake_writer(self) -> None:
        if self._writer_waiting:
            with self._wakeup:
                if self._writer_waiting:
                    self._writer_waiting = False
                    self._wakeup.notify()

    def _refusal(self) -> BaseException:
        if self._failure is not None:
            error = ContainerOfflineError(f"durable log {self._dir} is broken by an earlier write failure")
            error.__cause__ = self._failure
            return error
        return ContainerOfflineError(f"durable log {self._dir} is not open")

    def truncate(self, upto: LogAddress) -> None:
        """Durably record the truncation point, then delete files holding only truncated entries.

        ``upto`` must be an address already handed out by append(). The active file is never deleted
        here; once it rolls over, a later truncate removes it.
        """
        if not self._accepting:
            raise ContainerOfflineError(f"durable log {self._dir} is not open")
        written = self._write_sequence - 1
        if upto.sequence > written:
            # Only an address some future completed with is legitimate, and those are all written.
            raise ValueError(f"cannot truncate to {upto.sequence}: the last written sequence is {written}")
        with self._truncate_lock:
            if upto.sequence <= self._truncated_upto:
                return
            self._write_meta(_TRUNCATION_NAME, upto.sequence)
            self._truncated_upto = upto.sequence
            with self._files_lock:
                count = 0
                while count + 1 < len(self._files) and self._files[count + 1].first_sequence <= upto.sequence + 1:
                    count += 1
                doomed = self._files[:count]
                del self._files[:count]
            for log_file in doomed:
                os.unlink(log_file.path)
            if doomed:
                fsync_dir(self._dir)
                self.stats.files_deleted += len(doomed)

    def close(self) -> None:
        """Write and ack everything queued, stop the writer, release the directory lock. Idempotent."""
        self._accepting = False
        syncs = self._turns.syncs if self._turns is not None else None
        while self._sync_in_flight and syncs is not None:
            syncs.reap(wait=True)  # the loop may be stopped: its reaping cannot be counted on
        writer = self._writer
        if writer is not None:
            with self._wakeup:
                self._writer_waiting = False
                self._wakeup.notify()
            writer.join()
            self._writer = None
        self._fail_queued(self._refusal())
        # The commit lock waits out a commit at a turn's end still writing to the active file.
        with self._commit_lock, self._truncate_lock:
            if self._active_fd >= 0 and self._failure is None:
                # Tidiness only: recovery cuts a zero-filled tail the same way.
                with contextlib.suppress(OSError):
                    self._preallocation.seal(self._active_fd, self._files[-1].size)
            self._release_files()
            self._release_ownership()

    def __enter__(self) -> FileDurableDataLog:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------------------------------- writer

    def _run_writer(self) -> None:
        queue = self._queue
        while True:
            if not queue:
                with self._wakeup:
                    # The flag is raised before the queue is looked at: an append that the look missed
                    # sees it and notifies (append queues first, then reads the flag).
                    self._writer_waiting = True
                    while not queue and self._accepting:
                        self._wakeup.wait()
                        self._writer_waiting = True
                    self._writer_waiting = False
                # Checked after observing close, so an append that slipped in before close is written.
                if not queue:
                    self._writer_exited = True
                    self._fail_queued(self._refusal())  # appends that raced with the line above
                    return
            if self._failure is not None:
                self._fail_queued(self._refusal())
            else:
                with self._commit_lock:
                    if queue:
                        self._commit()

    def _commit(self, on_turn: bool = False) -> None:
        """Write the queue's head (up to max_batch_bytes) with one write and one fdatasync, then ack it.

        Futures complete in sequence order, after the fdatasync returned.
        """
        batch = self._write_batch(on_turn)
        if batch is not None:
            self._sync_here(batch)

    def _commit_in_kernel(self, syncs: KernelSyncs) -> None:
        """``_commit`` with the sync submitted to the kernel: the caller holds the commit lock, which the
        sync's completion releases (on the thread that reaps it: the loop's)."""
        writable = self._queue and self._accepting and self._failure is None
        batch = self._write_batch(on_turn=True) if writable else None  # fails its futures itself
        if batch is not None:
            # Raised first: the sync may end, and be reaped by another thread (a log closing reaps every
            # log's), before submit returns.
            self._sync_in_flight = True
            try:
                syncs.submit(self._active_fd, lambda error: self._kernel_synced(batch, error))
                return
            except OSError as refusal:
                self._sync_in_flight = False
                if refusal.errno == errno.EINVAL:
                    self._kernel_refuses = True
                    log.info("durable log %s: the kernel does not sync its files asynchronously (%s): its "
                             "commits at a turn's end sync on the loop's thread", self._dir, refusal)
                self._sync_here(batch)  # the kernel would not take it (its AIO limits, or the file's kind)
            except BaseException:
                self._sync_in_flight = False
                self._commit_lock.release()
                raise
        self._commit_lock.release()
        self._take_up_queue()

    def _sync_here(self, batch: _Batch) -> None:
        try:
            self._sync_file(self._active_fd)
        except BaseException as e:  # any failure must fail the futures, never strand them
            self._synced(batch, e)
            return
        self._synced(batch, None)

    def _kernel_synced(self, batch: _Batch, error: BaseException | None) -> None:
        try:
            self._sync_in_flight = False
            self._synced(batch, error)
        finally:
            self._commit_lock.release()
        self._take_up_queue()

    def _take_up_queue(self) -> None:
        """After a commit ended outside the writer: see that what was queued meanwhile gets written."""
        if not self._queue:
            return
        if self._failure is not None or not self._accepting:
            self._wake_writer()  # it fails them, or writes them before it exits
        else:
            self._commit_soon()

    def _write_batch(self, on_turn: bool) -> _Batch | None:
        """Frame the queue's head (up to max_batch_bytes) and write it to the active file, unsynced."""
        queue = self._queue
        pop = queue.popleft
        encode_header = framing.encode_header_of_parts
        futures: list[Future[LogAddress]] = []
        add_future = futures.append
        buffers: list[Buffer] = []
        add = buffers.append
        extend = buffers.extend
        first = sequence = self._write_sequence
        size = 0
        limit = self._max_batch_bytes
        try:
            while queue and size < limit:
                parts, length, future = pop()
                add_future(future)  # before anything that can raise, so the future is failed, not lost
                add(encode_header(sequence, parts, length))
                extend(parts)
                sequence += 1
                size += length + framing.HEADER_SIZE
            with self._files_lock:
                active = self._files[-1]
            if active.size >= self._max_file_bytes:
                active = self._roll(active)
            self._preallocation.cover(self._active_fd, active.size + size)
            write_fully(self._active_fd, buffers, size, active.size)
        except BaseException as e:  # any failure must fail the futures, never strand them
            self._failure = e
            self._fail(futures, e)
            return None
        return _Batch(futures, first, sequence, active, size, time.perf_counter(), on_turn)

    def _synced(self, batch: _Batch, error: BaseException | None) -> None:
        """The batch's sync is over: ack its entries in sequence order, or fail them and the log."""
        futures = batch.futures
        if error is not None:
            self._failure = error
            self._fail(futures, error)
            return
        active, size = batch.file, batch.size
        self._sync_seconds += (time.perf_counter() - batch.written_at - self._sync_seconds) / 8
        with contextlib.suppress(OSError):
            drop_written(self._active_fd, active.size, active.size + size)  # read again only by recovery
        self._write_sequence = batch.next_sequence
        active.size += size
        stats = self.stats
        stats.appends += len(futures)
        stats.batches += 1
        if batch.on_turn:
            stats.turn_commits += 1
        else:
            stats.writer_commits += 1
        stats.fsyncs += 1
        stats.bytes_written += size
        first = batch.first
        for future in futures:
            try:  # noqa: SIM105 - contextlib.suppress costs too much per entry here
                future.set_result(LogAddress(first))
            except InvalidStateError:
                pass  # the caller cancelled it; the entry is durable regardless
            first += 1

    def _fail_queued(self, error: BaseException) -> None:
        queue = self._queue
        futures = []
        while True:
            try:
                futures.append(queue.popleft()[2])
            except IndexError:
                break
        self._fail(futures, error)

    def _roll(self, old: _LogFile) -> _LogFile:
        # Before the next file exists: recovery accepts a zero-filled tail only in the last file.
        self._preallocation.seal(self._active_fd, old.size)
        path = os.path.join(self._dir, _log_file_name(self._write_sequence))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        try:
            fsync_dir(self._dir)
        except BaseException:
            os.close(fd)
            raise
        new_file = _LogFile(self._write_sequence, path, 0)
        with self._files_lock:
            self._files.append(new_file)
        # The old file was fdatasync'd after its last batch, so closing it loses nothing.
        os.close(self._active_fd)
        self._active_fd = fd
        self._preallocation.start(0)
        self.stats.files_created += 1
        return new_file

    @staticmethod
    def _fail(futures: list[Future[LogAddress]], error: BaseException) -> None:
        for future in futures:
            with contextlib.suppress(InvalidStateError):
                future.set_exception(error)


@dataclass(slots=True)
class _Batch:
    """Entries written to the active file and waiting for their sync."""

    futures: list[Future[LogAddress]]
    first: int  # the first entry's sequence
    next_sequence: int
    file: _LogFile
    size: int
    written_at: float
    on_turn: bool  # written by the loop's thread at a turn's end (else by the writer thread)


def _queued_bytes_at_most(queue: deque[_Queued], limit: int) -> bool:
    total = 0
    for _, length, _ in queue:
        total += length
        if total > limit:
            return False
    return True


def _validate_file(path: str, data: bytes, first_sequence: int, is_last: bool) -> tuple[int, int]:
    """Check a log file's frames; return (end of the last good frame, number of good frames).

    Raises DataCorruptionError for a sequence gap, for a bad frame in a non-last file, or for a bad
    frame followed by a valid one. A bad frame with nothing valid after it in the last file is a torn
    tail, reported by returning an end short of ``len(data)``.
    """
    expected = first_sequence
    position = 0
    for sequence, _start, end in framing.iter_frames(data):
        if sequence != expected:
            raise DataCorruptionError(
                f"{path}: byte {position}: sequence gap, expected {expected}, found {sequence}"
            )
        expected += 1
        position = end
    count = expected - first_sequence
    if position == len(data):
        return position, count
    if not is_last:
        raise DataCorruptionError(f"{path}: byte {position}: invalid frame in a log file that is not the last")
    later = framing.find_valid_frame(data, position + 1, expected)
    if later is not None:
        raise DataCorruptionError(
            f"{path}: byte {position}: invalid frame followed by a valid frame at byte {later}"
        )
    return position, count
