"""Filesystem helpers shared by the local durable log, the logd journal and filesystem chunk storage."""

from __future__ import annotations

import contextlib
import errno
import os
from typing import TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview
# Everything a server or a log replica writes may hold credentials: the SCRAM credential table is a table
# segment like any other, so its entries pass through the durable log files, the replicas' journals,
# checkpoints and long-term storage chunks. Hence owner-only modes for every file and directory written.
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024


def private_directory(path: str) -> None:
    """Create ``path`` (and missing parents) readable by its owner only, or tighten an existing one to
    that: a data directory made by an earlier version (0755) keeps working, and from this start on no
    other user can list or open what is in it, its older 0644 files included."""
    os.makedirs(path, mode=PRIVATE_DIR_MODE, exist_ok=True)
    if os.stat(path).st_mode & 0o777 != PRIVATE_DIR_MODE:
        os.chmod(path, PRIVATE_DIR_MODE)


def fsync_dir(path: str) -> None:
    """Make a directory's entries (files created, renamed or removed in it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_fully(fd: int, buffers: list[Buffer], size: int, offset: int) -> None:
    """``pwritev`` of ``buffers`` (``size`` bytes in all) at ``offset``, at most IOV_MAX at a time, on after a
    short write from where it stopped. The kernel copies them with the GIL released (a join in Python would
    hold it and copy every byte once more). ``buffers`` is consumed."""
    start = 0
    while size:
        batch = buffers[start:start + _IOV_MAX]
        written = os.pwritev(fd, batch, offset)
        offset += written
        if not written:
            raise OSError(errno.EIO, f"pwritev wrote nothing of {size} bytes")
        size -= written
        for buffer in batch:  # skip what was written; a part written in part is cut to its rest
            if written >= len(buffer):
                written -= len(buffer)
                start += 1
                continue
            if written:
                buffers[start] = memoryview(buffer)[written:]
            break


# How far ahead of an appended file's end its space is allocated, a step at a time (Preallocation).
DEFAULT_PREALLOCATE_BYTES = 16 * 1024 * 1024


class Preallocation:
    """Disk space allocated ahead of an appended file's written end, a step at a time.

    An fdatasync after an append that grows the file must also commit the new size and extents (a journal
    commit on ext4): here about 7 k such syncs a second against 10-11 k for writes into space allocated
    beforehand (docs/performance.md). So the file is grown by ``step`` bytes at once (``posix_fallocate``,
    which sets the size: allocating without it, FALLOC_FL_KEEP_SIZE, leaves the size change and its cost)
    and written at explicit offsets; the space past the written end reads as zeros, which the frames'
    readers take for a torn tail and cut. A file system that cannot allocate ahead turns it off: the
    writes then grow the file as before.
    """

    def __init__(self, step: int) -> None:
        self.step = step
        self.end = 0  # the file's allocated (and apparent) size

    def start(self, written_end: int) -> None:
        """Take a new active file, whose size is ``written_end`` (nothing allocated past what was written)."""
        self.end = written_end

    def cover(self, fd: int, end: int) -> None:
        """Make sure bytes up to ``end`` are allocated (called before a write that ends there)."""
        if end <= self.end or self.step <= 0:
            return
        new_end = end + self.step
        try:
            os.posix_fallocate(fd, self.end, new_end - self.end)
        except OSError as error:
            if error.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                self.step = 0  # the file system cannot: write without it from now on
            return  # full: write without it; the write itself fails if no space is left
        self.end = new_end

    def seal(self, fd: int, written_end: int) -> None:
        """Cut the space allocated past ``written_end`` and make the cut durable (before the file stops
        being the last, whose zero tail alone readers accept)."""
        if self.end > written_end:
            os.ftruncate(fd, written_end)
            os.fdatasync(fd)
        self.end = written_end


# The page cache holds a file in folios of up to 2 MiB (large folios on ext4/xfs), each aligned to its size,
# and drops only those wholly inside the range it is told: whole 2 MiB regions are dropped.
_FOLIO_REACH = 2 << 20


def drop_written(fd: int, start: int, end: int, *, complete: bool = False) -> None:
    """Drop the file's pages in [start, end) from the page cache; they must be durable (clean) already.

    For data written to be read again only rarely (a log's entries by recovery, a chunk that is in the
    read cache while hot): kept, each write takes memory afresh and the page cache grows by everything
    written, and taking fresh memory cost more kernel time than the write itself (docs/performance.md).
    The 2 MiB region a file is still being written in stays until the writes pass it: dropped, the next
    write into a page of it would first read that page back from disk. ``complete``: nothing more will
    be written to the file, so everything up to ``end`` goes."""
    start -= start % _FOLIO_REACH
    if not complete:
        end -= end % _FOLIO_REACH
    if end > start:
        # Advice only: the data is durable already, so a file system that refuses it must not fail a write.
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
