"""Replicated log metadata: who owns a log (epoch), where its entries live (fragments), what is truncated.

A log is a run of *fragments*. A fragment is written by one owner (its ``epoch``) to one ensemble of
replicas, starting at sequence ``first``; it ends where the next fragment begins, and the last one is
open. An owner starts a fragment when it opens the log (after recovering the previous owner's tail)
and whenever it replaces a replica (an ensemble change). An entry read from a replica counts only if
its entry epoch is the epoch of the fragment its sequence falls in, so entries a recovery dropped
(an older owner's unacknowledged tail) are never read, whatever a replica still holds.

Every change is a compare-and-set on the record's version, so an owner whose epoch was superseded
learns it at its next change. ``FileLogMetadataStore`` keeps one JSON file per log under a directory
(flock + temp file + rename); ``ZooKeeperLogMetadataStore`` (``millrace.store.cluster.log_metadata``)
keeps the same record in a znode and uses the znode version for the compare-and-set.

An owner holds its log's record in an ``OwnedRecord``: the writer, recovery and repair of a
replicated log all read and change the record through that one object.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from millrace.store.errors import DataCorruptionError, DataLogWriterFencedError, StoreError
from millrace.store.fsutil import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, fsync_dir


class MetadataVersionError(StoreError):
    """A compare-and-set found a different version: someone else changed the log's metadata."""


@dataclass(frozen=True)
class Fragment:
    epoch: int
    first: int
    ensemble: tuple[str, ...]


@dataclass(frozen=True)
class LogRecord:
    epoch: int = 0
    truncated: int = 0
    fragments: tuple[Fragment, ...] = ()
    version: int = 0  # 0: the record does not exist yet

    def fragment_end(self, index: int, last_open: int) -> int:
        """Last sequence of fragment ``index`` (``last_open`` for the open last one)."""
        if index + 1 < len(self.fragments):
            return self.fragments[index + 1].first - 1
        return last_open

    def with_fragment(self, fragment: Fragment) -> LogRecord:
        """Add ``fragment``, dropping earlier ones it makes empty (they start at or after it)."""
        kept = tuple(f for f in self.fragments if f.first < fragment.first)
        return replace(self, fragments=(*kept, fragment))

    def with_changed(self, first: int, change: Callable[[Fragment], Fragment]) -> LogRecord:
        """Apply ``change`` to the fragment starting at ``first``, if it is still there."""
        return replace(self, fragments=tuple(change(f) if f.first == first else f for f in self.fragments))

    def truncated_to(self, upto: int) -> LogRecord:
        """Record truncation at ``upto`` and drop fragments wholly below it."""
        fragments = self.fragments
        while len(fragments) > 1 and fragments[1].first <= upto + 1:
            fragments = fragments[1:]
        return replace(self, truncated=max(self.truncated, upto), fragments=fragments)

    def to_json(self) -> dict[str, object]:
        return {"epoch": self.epoch, "truncated": self.truncated,
                "fragments": [[f.epoch, f.first, list(f.ensemble)] for f in self.fragments]}

    @staticmethod
    def from_json(value: dict[str, object], version: int) -> LogRecord:
        raw = value["fragments"]
        if not isinstance(raw, list):
            raise ValueError("fragments must be a list")
        fragments = tuple(Fragment(int(e), int(f), tuple(str(r) for r in ens)) for e, f, ens in raw)
        return LogRecord(int(str(value["epoch"])), int(str(value["truncated"])), fragments, version)


class LogMetadataStore(ABC):
    """Where replicated logs keep their records (a directory on one node, ZooKeeper in a cluster)."""

    @abstractmethod
    def read(self, log_name: str) -> LogRecord:
        """The current record; version 0 when the log has none yet."""

    @abstractmethod
    def compare_and_set(self, log_name: str, record: LogRecord, expected_version: int) -> LogRecord:
        """Store ``record`` if the stored version is ``expected_version``; return it with its new
        version, or raise MetadataVersionError."""


class FileLogMetadataStore(LogMetadataStore):
    """One ``<log>.json`` per log (``{"version": n, "record": {...}}``), changed under a flock."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, mode=PRIVATE_DIR_MODE, exist_ok=True)

    def _path(self, log_name: str) -> str:
        if "/" in log_name or log_name.startswith("."):
            raise ValueError(f"bad log name {log_name!r}")
        return os.path.join(self.directory, f"{log_name}.json")

    @contextlib.contextmanager
    def _locked(self, log_name: str) -> Iterator[None]:
        fd = os.open(self._path(log_name) + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def read(self, log_name: str) -> LogRecord:
        path = self._path(log_name)
        try:
            with open(path, "rb") as f:
                raw = json.loads(f.read())
            return LogRecord.from_json(raw["record"], int(raw["version"]))
        except FileNotFoundError:
            return LogRecord()
        except (ValueError, KeyError, TypeError) as exc:
            raise DataCorruptionError(f"{path}: unreadable log metadata") from exc

    def compare_and_set(self, log_name: str, record: LogRecord, expected_version: int) -> LogRecord:
        with self._locked(log_name):
            current = self.read(log_name)
            if current.version != expected_version:
                raise MetadataVersionError(
                    f"log {log_name}: metadata is at version {current.version}, expected {expected_version}")
            stored = replace(record, version=expected_version + 1)
            path = self._path(log_name)
            tmp = path + ".tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE_MODE)
            with open(fd, "wb") as f:
                f.write(json.dumps({"version": stored.version, "record": stored.to_json()}).encode())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            fsync_dir(self.directory)
            return stored


class OwnedRecord:
    """One owner's copy of its log's record, the one way the parts of a replicated log change it.

    ``take_epoch`` (in ``open``, before any other thread of the log runs) bumps the epoch in the
    store; every later change is a compare-and-set from this copy under that epoch, so a version
    mismatch means a newer owner took the log (``DataLogWriterFencedError``). Any thread may read it;
    changes (from ``open``, ``truncate``'s caller, the I/O thread's ensemble changes and the
    maintenance thread's swaps) are serialized by a lock held across the store's round trip.
    """

    def __init__(self, log_name: str, store: LogMetadataStore) -> None:
        self.log_name = log_name
        self._store = store
        self._lock = threading.Lock()
        self._record = LogRecord()
        self._epoch = 0

    @property
    def epoch(self) -> int:
        """The epoch this owner took (0 before the first ``take_epoch``)."""
        return self._epoch

    @property
    def record(self) -> LogRecord:
        """The record, once any change in flight has landed."""
        with self._lock:
            return self._record

    def peek(self) -> LogRecord:
        """The record as last stored, without waiting for a change in flight: for the I/O thread,
        which must never wait on the metadata store's round trip."""
        return self._record

    def take_epoch(self) -> LogRecord:
        """Become the owner: store the record with the epoch after the current one (compare-and-set,
        retried when another opener races us)."""
        for _ in range(10):
            current = self._store.read(self.log_name)
            try:
                record = self._store.compare_and_set(self.log_name, replace(current, epoch=current.epoch + 1),
                                                     current.version)
                break
            except MetadataVersionError:
                continue  # another opener raced us: take the epoch after theirs
        else:
            raise DataLogWriterFencedError(f"log {self.log_name}: could not take an epoch")
        self._epoch = record.epoch
        with self._lock:
            self._record = record
        return record

    def change(self, change: Callable[[LogRecord], LogRecord]) -> LogRecord:
        """Apply ``change`` to the record with a compare-and-set; a foreign change means fenced."""
        with self._lock:
            try:
                self._record = self._store.compare_and_set(self.log_name, change(self._record),
                                                           self._record.version)
            except MetadataVersionError as exc:
                raise DataLogWriterFencedError(f"log {self.log_name}: epoch {self._epoch} was superseded") from exc
            return self._record
