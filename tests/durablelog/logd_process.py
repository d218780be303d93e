"""Runs real ``millrace logd`` replica processes on 127.0.0.1 for the replicated log tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from millrace.store.durablelog.metadata import FileLogMetadataStore
from millrace.store.durablelog.replicated import ReplicatedDurableDataLog, ReplicationConfig

REPO_ROOT = str(Path(__file__).resolve().parents[2])
_LISTEN = re.compile(r"millrace: logd listening on [\d.]+:(\d+)")


class LogdProcess:
    """One replica; ``port`` is kept across restarts so its address stays the same."""

    def __init__(self, data_dir: str, port: int = 0) -> None:
        self.data_dir = data_dir
        self.port = port
        self.output: list[str] = []
        self.proc: subprocess.Popen[str] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> LogdProcess:
        cmd = [sys.executable, "-m", "millrace", "logd", "--data-dir", self.data_dir, "--port", str(self.port),
               "--log-level", "WARNING"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=REPO_ROOT))
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                m = _LISTEN.search(line)
                if m:
                    self.port = int(m.group(1))
                if "millrace: ready" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.1):
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("logd did not start:\n" + "".join(self.output))
        if self.proc.poll() is not None:
            raise RuntimeError("logd failed to start:\n" + "".join(self.output))
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


class Replicas:
    """N logd processes and the metadata directory their logs are described in."""

    def __init__(self, root: Path, count: int) -> None:
        self.root = root
        self.logds = [LogdProcess(str(root / f"logd-{i}")) for i in range(count)]
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

    def config(self, write_quorum: int = 3, ack_quorum: int = 2, **kwargs: float) -> ReplicationConfig:
        return ReplicationConfig(self.addresses, write_quorum, ack_quorum, **kwargs)  # type: ignore[arg-type]

    def log(self, name: str = "log", **kwargs: float) -> ReplicatedDurableDataLog:
        return ReplicatedDurableDataLog(name, self.metadata, self.config(**kwargs))

    def opened(self, name: str = "log", **kwargs: float) -> ReplicatedDurableDataLog:
        log = self.log(name, **kwargs)
        log.open()
        return log

    def close(self) -> None:
        for logd in self.logds:
            if logd.proc is not None and logd.proc.poll() is None:
                logd.resume()
            logd.kill()
