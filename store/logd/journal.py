"""A log replica's journal: the entries of many logs in shared files, group commit, fdatasync.

Files are ``<first record number, 20 digits>.journal``; each holds frames of the durable log's framing
(``framing.py``: magic, length, record number, CRC-32C) whose payloads are records:

    E  entry      name, sequence u64, entry_epoch u64, crc u32, payload
    F  fence      name, epoch u64
    T  truncate   name, upto u64
    L  confirmed  name, last confirmed u64

A new file starts with F/T/L records restating every log's fence, truncation point and last
confirmed, so a file holding no live entry can be deleted without losing that state. Replay reads the
files in order (a later entry at the same sequence replaces an earlier one), cuts a torn tail of the
last file and raises DataCorruptionError for damage anywhere else. Only the server's one thread
touches a Journal.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeAlias

from millrace.store.durablelog import framing
from millrace.store.errors import DataCorruptionError
from millrace.store.fsutil import (
    DEFAULT_PREALLOCATE_BYTES,
    PRIVATE_FILE_MODE,
    Buffer,
    Preallocation,
    drop_written,
    fsync_dir,
    private_directory,
    write_fully,
)

DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024
_NAME = re.compile(r"^(\d{20})\.journal$")
_ENTRY = struct.Struct("<QQI")
_VALUE = struct.Struct("<Q")
_NAME_LEN = struct.Struct("<H")
Record: TypeAlias = tuple[Buffer, ...]  # a record's bytes, as parts written back to back


@dataclass(slots=True)
class StoredEntry:
    """Where an entry's payload lives: journal file, byte offset, length; and its epoch and CRC."""

    entry_epoch: int
    file_id: int
    offset: int
    length: int
    crc: int


@dataclass
class LogState:
    """One log's state on this replica."""

    fenced: int = 0
    truncated: int = 0
    last_confirmed: int = 0
    entries: dict[int, StoredEntry] = field(default_factory=dict)

    def prefix_end(self, first: int, entry_epoch: int) -> int:
        """The highest sequence s such that every entry first..s (past truncation) is held with
        ``entry_epoch``; first - 1 when none is (or the truncation point, if higher)."""
        s = max(first, self.truncated + 1)
        entries = self.entries
        while True:
            stored = entries.get(s)
            if stored is None or stored.entry_epoch != entry_epoch:
                return s - 1
            s += 1


def _named(kind: bytes, name: str) -> bytes:
    raw = name.encode()
    return kind + _NAME_LEN.pack(len(raw)) + raw


def entry_record(name: str, sequence: int, entry_epoch: int, crc: int, payload: Buffer) -> tuple[Record, int]:
    """An entry record, its payload as given (not copied: the journal writes the parts with one pwritev),
    and the offset of the payload inside the record."""
    head = _named(b"E", name) + _ENTRY.pack(sequence, entry_epoch, crc)
    return (head, payload), len(head)


def value_record(kind: bytes, name: str, value: int) -> Record:
    return (_named(kind, name) + _VALUE.pack(value),)


class Journal:
    def __init__(self, directory: str, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                 preallocate_bytes: int = DEFAULT_PREALLOCATE_BYTES) -> None:
        self.directory = os.path.abspath(directory)
        self.max_file_bytes = max_file_bytes
        self.logs: dict[str, LogState] = {}
        self._files: dict[int, int] = {}  # file id -> read descriptor
        self._live: dict[int, int] = {}  # file id -> entries in it still live
        self._active_id = 0
        self._active_fd = -1
        self._active_size = 0
        self._preallocation = Preallocation(preallocate_bytes)
        self._next_record = 1
        self.fsyncs = 0

    # -- open / replay ---------------------------------------------------------------------------------
    def open(self) -> None:
        private_directory(self.directory)  # the journal holds the logs' entries: credentials too
        ids = sorted(int(m.group(1)) for n in os.listdir(self.directory) if (m := _NAME.match(n)))
        for index, file_id in enumerate(ids):
            self._replay_file(file_id, is_last=index == len(ids) - 1)
        for state in self.logs.values():
            for seq in [s for s in state.entries if s <= state.truncated]:
                self._drop(state, seq)
        self._roll()
        self._delete_dead_files()

    def _path(self, file_id: int) -> str:
        return os.path.join(self.directory, f"{file_id:020d}.journal")

    def _replay_file(self, file_id: int, is_last: bool) -> None:
        path = self._path(file_id)
        with open(path, "rb") as f:
            data = f.read()
        self._files[file_id] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._live.setdefault(file_id, 0)
        position = 0
        for record_no, start, end in framing.iter_frames(data):
            self._apply(memoryview(data)[start:end], file_id, start)
            self._next_record = record_no + 1
            position = end
        if position == len(data):
            return
        if not is_last or framing.find_valid_frame(data, position + 1, self._next_record) is not None:
            raise DataCorruptionError(f"{path}: byte {position}: invalid journal record")
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:  # a torn tail: nothing after it was ever acknowledged
            os.ftruncate(fd, position)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _apply(self, record: memoryview, file_id: int, record_offset: int) -> None:
        kind = bytes(record[:1])
        (name_len,) = _NAME_LEN.unpack_from(record, 1)
        name = bytes(record[3 : 3 + name_len]).decode()
        body = 3 + name_len
        state = self.log(name)
        if kind == b"E":
            sequence, entry_epoch, crc = _ENTRY.unpack_from(record, body)
            start = body + _ENTRY.size
            self._store(state, sequence, StoredEntry(entry_epoch, file_id, record_offset + start, len(record) - start, crc))
            return
        (value,) = _VALUE.unpack_from(record, body)
        if kind == b"F":
            state.fenced = max(state.fenced, value)
        elif kind == b"T":
            state.truncated = max(state.truncated, value)
        elif kind == b"L":
            state.last_confirmed = max(state.last_confirmed, value)
        else:
            raise DataCorruptionError(f"{self._path(file_id)}: unknown journal record {kind!r}")

    # -- state -----------------------------------------------------------------------------------------
    def log(self, name: str) -> LogState:
        state = self.logs.get(name)
        if state is None:
            state = self.logs[name] = LogState()
        return state

    def _store(self, state: LogState, sequence: int, stored: StoredEntry) -> None:
        old = state.entries.get(sequence)
        if old is not None:
            self._live[old.file_id] -= 1
        state.entries[sequence] = stored
        self._live[stored.file_id] = self._live.get(stored.file_id, 0) + 1

    def _drop(self, state: LogState, sequence: int) -> None:
        old = state.entries.pop(sequence, None)
        if old is not None:
            self._live[old.file_id] -= 1

    def truncate(self, state: LogState, upto: int) -> None:
        """Forget entries <= upto (the T record is written by the caller) and delete dead files."""
        if upto <= state.truncated:
            return
        state.truncated = upto
        for seq in [s for s in state.entries if s <= upto]:
            self._drop(state, seq)
        self._delete_dead_files()

    def _delete_dead_files(self) -> None:
        dead = [f for f, live in self._live.items() if live <= 0 and f != self._active_id]
        for file_id in dead:
            os.close(self._files.pop(file_id))
            del self._live[file_id]
            os.unlink(self._path(file_id))
        if dead:
            fsync_dir(self.directory)

    # -- writing ---------------------------------------------------------------------------------------
    def write(self, records: Iterable[tuple[str, int, StoredEntry | None, Record, int]]) -> None:
        """Append records with one pwritev of their parts as given and one fdatasync. Each item is (log,
        sequence, entry or None, record, payload offset in record); entries are indexed once durable."""
        items = list(records)
        if not items:
            return
        if self._active_size >= self.max_file_bytes:
            self._roll()
        buffers: list[Buffer] = []
        offset = self._active_size
        placed: list[tuple[str, int, StoredEntry]] = []
        for name, sequence, stored, record, payload_offset in items:
            length = sum(len(part) for part in record)
            header = framing.encode_header_of_parts(self._next_record, record, length)
            self._next_record += 1
            offset += len(header)
            if stored is not None:
                stored.file_id = self._active_id
                stored.offset = offset + payload_offset
                placed.append((name, sequence, stored))
            buffers.append(header)
            buffers.extend(record)
            offset += length
        self._preallocation.cover(self._active_fd, offset)
        write_fully(self._active_fd, buffers, offset - self._active_size, self._active_size)
        os.fdatasync(self._active_fd)
        self.fsyncs += 1
        drop_written(self._active_fd, self._active_size, offset)  # read again only by a recovery or a copy
        self._active_size = offset
        for name, sequence, stored in placed:
            self._store(self.log(name), sequence, stored)

    def read(self, stored: StoredEntry) -> bytes:
        return os.pread(self._files[stored.file_id], stored.length, stored.offset)

    def _roll(self) -> None:
        """Start a new file that restates every log's state, so older files hold only entries."""
        file_id = self._next_record
        path = self._path(file_id)
        if self._active_fd >= 0:
            # Before the next file exists: replay accepts a zero-filled tail only in the last file.
            self._preallocation.seal(self._active_fd, self._active_size)
            os.close(self._active_fd)
            self._active_fd = -1
        self._active_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        self._active_id = file_id
        self._active_size = os.fstat(self._active_fd).st_size
        self._preallocation.start(self._active_size)
        if file_id in self._files:  # an empty file left by a crash right after an earlier roll
            os.close(self._files[file_id])
        self._files[file_id] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._live.setdefault(file_id, 0)
        fsync_dir(self.directory)
        restated = []
        for name, state in self.logs.items():
            for kind, value in ((b"F", state.fenced), (b"T", state.truncated), (b"L", state.last_confirmed)):
                if value:
                    restated.append((name, 0, None, value_record(kind, name, value), 0))
        saved, self.max_file_bytes = self.max_file_bytes, 1 << 62  # the restatement never rolls itself
        try:
            self.write(restated)
        finally:
            self.max_file_bytes = saved

    def close(self) -> None:
        if self._active_fd >= 0:
            with contextlib.suppress(OSError):  # tidiness only: replay cuts a zero-filled tail the same way
                self._preallocation.seal(self._active_fd, self._active_size)
            os.close(self._active_fd)
            self._active_fd = -1
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()
