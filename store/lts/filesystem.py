"""Filesystem long-term storage: one file per chunk under a root directory (the embedded default).

A chunk name's '/'-separated components become directories, each component percent-encoded so any
character is safe on disk. The chunk file itself gets the suffix ``@chunk``; '@' is always encoded
inside components, so a chunk file can never collide with a directory of another chunk's name
(chunks ``a`` and ``a/b`` coexist) nor with an in-progress temp file (``@tmp-...``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Iterator, Sequence
from urllib.parse import quote, unquote

from millrace.store.errors import ChunkExistsError, ChunkNotFoundError
from millrace.store.fsutil import (
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
    Buffer,
    drop_written,
    fsync_dir,
    private_directory,
    write_fully,
)
from millrace.store.lts.interface import ChunkStorage

_CHUNK_SUFFIX = "@chunk"
_TMP_MARK = "@tmp-"
# Characters kept readable on disk; everything else (notably '%', '@', '/') is %XX-encoded.
_SAFE = "#=+,-._~"


def validate_chunk_name(name: str) -> None:
    """Reject names that are not portable across backends or could escape a storage root.

    Both backends apply the same rules, so a chunk written to one can be copied to the other: S3-like
    servers silently normalise empty and '.' components (SeaweedFS stores ``a//b`` as ``a/b``), so
    two distinct names could alias one object, and '..' would climb out of the filesystem root.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"chunk name must be a non-empty string, got {name!r}")
    if name.startswith("/"):
        raise ValueError(f"chunk name must be relative, got absolute {name!r}")
    if "\x00" in name:
        raise ValueError(f"chunk name must not contain NUL: {name!r}")
    for part in name.split("/"):
        if part in ("", ".", ".."):
            raise ValueError(f"chunk name has an empty, '.' or '..' component: {name!r}")


def _check_range(offset: int, length: int) -> None:
    if offset < 0 or length < 0:
        raise ValueError(f"offset and length must be >= 0, got offset={offset} length={length}")


# A chunk is made durable a step at a time: one fsync of a whole 8 MiB chunk put that much in front of
# the disk at once, and every durable log's fdatasync on the same disk waited behind it (8-15 ms against
# a median of 0.5 ms, the produce latency's p99; docs/performance.md).
_SYNC_STEP = 1 << 20


def _steps(parts: Sequence[Buffer], step: int) -> Iterator[list[Buffer]]:
    """``parts`` cut into runs of ``step`` bytes (the last may be shorter), as views: nothing is copied."""
    run: list[Buffer] = []
    room = step
    for part in parts:
        view = memoryview(part).cast("B")
        while len(view):
            piece = view[:room]
            run.append(piece)
            view = view[len(piece):]
            room -= len(piece)
            if not room:
                yield run
                run, room = [], step
    if run:
        yield run


class FileSystemChunkStorage(ChunkStorage):
    """Chunks as files under ``root``; writes are write-once and durable (fsync'd file and directory)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        private_directory(self.root)

    def __repr__(self) -> str:
        return f"FileSystemChunkStorage({self.root!r})"

    def _dir_and_file(self, name: str) -> tuple[str, str]:
        validate_chunk_name(name)
        parts = [quote(p, safe=_SAFE) for p in name.split("/")]
        directory = os.path.join(self.root, *parts[:-1])
        return directory, parts[-1] + _CHUNK_SUFFIX

    def _path(self, name: str) -> str:
        directory, file = self._dir_and_file(name)
        return os.path.join(directory, file)

    def _make_dirs(self, directory: str) -> None:
        """Create ``directory`` and missing parents, fsyncing each parent so new entries survive a crash."""
        if directory == self.root or os.path.isdir(directory):
            return
        parent = os.path.dirname(directory)
        self._make_dirs(parent)
        try:
            os.mkdir(directory, PRIVATE_DIR_MODE)
        except FileExistsError:
            return
        fsync_dir(parent)

    def write_parts(self, name: str, parts: Sequence[Buffer]) -> None:
        directory, file = self._dir_and_file(name)
        final = os.path.join(directory, file)
        # A concurrent delete may remove the (empty) directory between mkdir and creating the temp
        # file; that race is harmless, so recreate the directory and try again.
        for attempt in range(10):
            tmp = os.path.join(directory, f"{file}{_TMP_MARK}{uuid.uuid4().hex}")
            try:
                self._make_dirs(directory)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
            except FileNotFoundError:
                if attempt == 9:
                    raise
                continue
            break
        try:
            try:
                size = 0
                for step in _steps(parts, _SYNC_STEP):
                    if size:
                        os.fdatasync(fd)  # a step at a time: see _SYNC_STEP
                    step_bytes = sum(len(b) for b in step)
                    write_fully(fd, step, step_bytes, size)  # the parts as they are: no join
                    size += step_bytes
                os.fsync(fd)
                # Hot, the chunk's data is in the read cache; cold, it is read back as from S3.
                drop_written(fd, 0, size, complete=True)
            finally:
                os.close(fd)
            try:
                # link() never replaces an existing file, unlike rename(): of racing writers exactly
                # one creates the chunk, and a zombie cannot overwrite what a newer owner wrote.
                os.link(tmp, final)
            except FileExistsError:
                raise ChunkExistsError(f"chunk already exists: {name}") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        fsync_dir(directory)

    def read(self, name: str, offset: int, length: int) -> bytes:
        _check_range(offset, length)
        try:
            fd = os.open(self._path(name), os.O_RDONLY)
        except FileNotFoundError:
            raise ChunkNotFoundError(f"no such chunk: {name}") from None
        try:
            chunks = []
            remaining = length
            while remaining > 0:
                piece = os.pread(fd, remaining, offset)
                if not piece:
                    break
                chunks.append(piece)
                offset += len(piece)
                remaining -= len(piece)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def delete(self, name: str) -> None:
        directory, file = self._dir_and_file(name)
        try:
            os.unlink(os.path.join(directory, file))
        except FileNotFoundError:
            return
        try:
            fsync_dir(directory)
        except FileNotFoundError:
            return  # a concurrent delete already pruned the emptied directory
        self._prune_empty_dirs(directory)

    def _prune_empty_dirs(self, directory: str) -> None:
        # Deleted segments would otherwise leave a directory tree behind forever.
        while directory != self.root and directory.startswith(self.root + os.sep):
            try:
                os.rmdir(directory)
            except OSError as e:
                if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                    return
                raise
            directory = os.path.dirname(directory)

    def exists(self, name: str) -> bool:
        return os.path.isfile(self._path(name))

    def list(self, prefix: str = "") -> list[str]:
        # Only walk the subtree the prefix's complete components point at, not the whole root.
        parts = prefix.split("/")
        dir_parts = parts[:-1]
        if any(p in ("", ".", "..") for p in dir_parts):
            return []  # no valid chunk name starts this way
        start = os.path.join(self.root, *(quote(p, safe=_SAFE) for p in dir_parts))
        names = []
        for dirpath, _dirs, files in os.walk(start):
            rel = os.path.relpath(dirpath, self.root)
            rel_parts = [] if rel == "." else [unquote(p) for p in rel.split(os.sep)]
            for f in files:
                if not f.endswith(_CHUNK_SUFFIX):
                    continue  # temp files of writes in progress or abandoned by a crash
                name = "/".join([*rel_parts, unquote(f[: -len(_CHUNK_SUFFIX)])])
                if name.startswith(prefix):
                    names.append(name)
        names.sort()
        return names
