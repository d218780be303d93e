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
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from millrace.store.cluster.layout import ClusterPaths
from millrace.store.durablelog.metadata import LogMetadataStore, LogRecord, MetadataVersionError
from millrace.store.errors import DataCorruptionError

_LOG_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}")


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
                 guard: OwnerGuard | None = None) -> None:
        self.client = client
        self.paths = paths or ClusterPaths()
        self.guard = guard
        client.ensure_path(self.paths.logs)

    def guarded(self, guard: OwnerGuard) -> ZooKeeperLogMetadataStore:
        """The same store with every change conditional on ``guard`` (one per container ownership term)."""
        return ZooKeeperLogMetadataStore(self.client, self.paths, guard)

    def _path(self, log_name: str) -> str:
        if not _LOG_NAME.fullmatch(log_name):
            raise ValueError(f"bad log name {log_name!r}")
        return f"{self.paths.logs}/{log_name}"

    def read(self, log_name: str) -> LogRecord:
        path = self._path(log_name)
        try:
            data, stat = self.client.get(path)
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
                    self.client.create(path, data)
                else:
                    self.client.set(path, data, version=expected_version - 1)
            except (NodeExistsError, BadVersionError, NoNodeError) as exc:
                raise self._conflict(log_name, expected_version) from exc
        else:
            transaction = self.client.transaction()
            transaction.check(self.guard.path, self.guard.version)
            if expected_version == 0:
                transaction.create(path, data)
            else:
                transaction.set_data(path, data, version=expected_version - 1)
            guard_result, change_result = transaction.commit()
            if isinstance(guard_result, Exception):
                raise OwnershipLostError(
                    f"log {log_name}: {self.guard.path} is no longer at version {self.guard.version}")
            if isinstance(change_result, Exception):
                raise self._conflict(log_name, expected_version) from change_result
        return replace(record, version=expected_version + 1)

    def _conflict(self, log_name: str, expected_version: int) -> MetadataVersionError:
        return MetadataVersionError(f"log {log_name}: metadata is at version {self.read(log_name).version}, "
                                    f"expected {expected_version}")
