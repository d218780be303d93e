"""Runs real ``millrace logd`` replica processes on 127.0.0.1 for the replicated log tests."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from millrace.store.durablelog.metadata import FileLogMetadataStore
from millrace.store.durablelog.replicated import ReplicatedDurableDataLog
from millrace.store.durablelog.replication_config import ReplicationConfig
from tests.server_process import MillraceProcess

_LISTEN = re.compile(r"millrace: logd listening on [\d.]+:(\d+)")


class LogdProcess(MillraceProcess):
    """One replica; ``port`` is kept across restarts so its address stays the same."""

    name = "logd"

    def __init__(self, data_dir: str, port: int = 0, *extra: str) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.port = port
        self.extra = extra  # more `millrace logd` flags (CURVE keys)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return ["logd", "--data-dir", self.data_dir, "--port", str(self.port), "--log-level", "WARNING", *self.extra]

    def on_line(self, line: str) -> None:
        m = _LISTEN.search(line)
        if m:
            self.port = int(m.group(1))


class Replicas:
    """N logd processes and the metadata directory their logs are described in."""

    def __init__(self, root: Path, count: int, *extra: str) -> None:
        self.root = root
        self.logds = [LogdProcess(str(root / f"logd-{i}"), 0, *extra) for i in range(count)]
        self.metadata = FileLogMetadataStore(str(root / "logmeta"))

    def start(self) -> Replicas:
        for logd in self.logds:
            logd.start()
        return self

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(logd.address for logd in self.logds)

    def by_address(self, address: str) -> LogdProcess:
        return next(logd for logd in self.logds if logd.address == address)

    def config(self, write_quorum: int = 3, ack_quorum: int = 2, **kwargs: Any) -> ReplicationConfig:
        return ReplicationConfig(self.addresses, write_quorum, ack_quorum, **kwargs)

    def log(self, name: str = "log", **kwargs: Any) -> ReplicatedDurableDataLog:
        return ReplicatedDurableDataLog(name, self.metadata, self.config(**kwargs))

    def opened(self, name: str = "log", **kwargs: Any) -> ReplicatedDurableDataLog:
        log = self.log(name, **kwargs)
        log.open()
        return log

    def close(self) -> None:
        for logd in self.logds:
            if logd.proc is not None and logd.proc.poll() is None:
                logd.resume()
            logd.kill()
