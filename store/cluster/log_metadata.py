"""``LogMetadataStore`` in ZooKeeper: one znode per replicated log under ``<root>/logs``.

The znode holds ``LogRecord.to_json()``; the record's version is the znode's version + 1 (version 0
still means "no record yet", as in ``FileLogMetadataStore``). ``compare_and_set`` is ZooKeeper's
conditional create (expected version 0) or conditional setData (``version=expected - 1``), so of two
would-be owners that read the same record only one can store the next epoch: the other gets
``MetadataVersionError`` and the replicated log reports itself fenced.

With an ``OwnerGuard`` (the container's ownership znode and the version this node was given it at),
every change is also a multi-op transaction that first checks that znode: once the assigner gave the
container to someone else, a node that missed the news (paused, partitioned) cannot even take a new
log epoch, so it can never fence the rightful owner. That failure is ``OwnershipLostError``.

No call waits for ZooKeeper without bound: kazoo holds a request made while it is reconnecting until the
link is back, which held a node cut off from ZooKeeper in a container's clean close (its log truncation)
for the whole partition, and a SIGTERM'd one past ``cluster down``'s patience. While disconnected a call
fails at once with ``ConnectionLoss`` (nothing was sent); an answer slower than ``ZOOKEEPER_WAIT`` fails
the same way, its outcome unknown (a change that lands later only makes this owner's next one conflict,
which the replicated log reports as fenced).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError
from kazoo.interfaces import IAsyncResult

from millrace.store.cluster.layout import ClusterPaths
from millrace.store.durablelog.metadata import LogMetadataStore, LogRecord, MetadataVersionError
from millrace.store.errors import DataCorruptionError

_LOG_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}")
ZOOKEEPER_WAIT = 10.0  # seconds for one answer from a connected ZooKeeper (milliseconds when healthy)


class OwnershipLostError(MetadataVersionError):
    """The guarding ownership znode changed: this node no longer owns the log's container."""


@dataclass(frozen=True)
class OwnerGuard:
    """A znode and the version it must still have for a metadata change to go through."""

    path: str
    version: int


class ZooKeeperLogMetadataStore(LogMetadataStore):
    """Log records as versioned znodes; ``guard`` makes every change conditional on ownership too."""

    def __init__(self, client: KazooClient, paths: ClusterPaths | None = None,
                 guard: OwnerGuard | None = None, ensure_path: bool = True) -> None:
        self.client = client
        self.paths = paths or ClusterPaths()
        self.guard = guard
        if ensure_path:
            client.ensure_path(self.paths.logs)

    def guarded(self, guard: OwnerGuard) -> ZooKeeperLogMetadataStore:
        """The same store with every change conditional on ``guard`` (one per container ownership term)."""
        return ZooKeeperLogMetadataStore(self.client, self.paths, guard, ensure_path=False)

    def _path(self, log_name: str) -> str:
        if not _LOG_NAME.fullmatch(log_name):
            raise ValueError(f"bad log name {log_name!r}")
        return f"{self.paths.logs}/{log_name}"

    def _call(self, what: str, start: Callable[[], IAsyncResult]) -> Any:
        """Start a kazoo request only while connected and wait for its answer at most ZOOKEEPER_WAIT."""
        if not self.client.connected:
            raise ConnectionLoss(f"{what}: not connected to ZooKeeper")
        try:
            return start().get(timeout=ZOOKEEPER_WAIT)
        except self.client.handler.timeout_exception:
            raise ConnectionLoss(f"{what}: no answer from ZooKeeper within {ZOOKEEPER_WAIT:g} s") from None

    def read(self, log_name: str) -> LogRecord:
        path = self._path(log_name)
        try:
            data, stat = self._call(f"reading {path}", lambda: self.client.get_async(path))
        except NoNodeError:
            return LogRecord()
        try:
            return LogRecord.from_json(json.loads(data), stat.version + 1)
        except (ValueError, KeyError, TypeError) as exc:
            raise DataCorruptionError(f"znode {path}: unreadable log metadata") from exc

    def compare_and_set(self, log_name: str, record: LogRecord, expected_version: int) -> LogRecord:
        path = self._path(log_name)
        data = json.dumps(record.to_json()).encode()
        if self.guard is None:
            try:
                if expected_version == 0:
                    self._call(f"creating {path}", lambda: self.client.create_async(path, data))
                else:
                    self._call(f"setting {path}", lambda: self.client.set_async(path, data, version=expected_version - 1))
            except (NodeExistsError, BadVersionError, NoNodeError) as exc:
                raise self._conflict(log_name, expected_version) from exc
        else:
            transaction = self.client.transaction()
            transaction.check(self.guard.path, self.guard.version)
            if expected_version == 0:
                transaction.create(path, data)
            else:
                transaction.set_data(path, data, version=expected_version - 1)
            guard_result, change_result = self._call(f"changing {path}", transaction.commit_async)
            if isinstance(guard_result, Exception):
                raise OwnershipLostError(
                    f"log {log_name}: {self.guard.path} is no longer at version {self.guard.version}")
            if isinstance(change_result, Exception):
                raise self._conflict(log_name, expected_version) from change_result
        return replace(record, version=expected_version + 1)

    def _conflict(self, log_name: str, expected_version: int) -> MetadataVersionError:
        return MetadataVersionError(f"log {log_name}: metadata is at version {self.read(log_name).version}, "
                                    f"expected {expected_version}")
