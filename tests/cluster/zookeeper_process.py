"""A real standalone ZooKeeper server (Debian's ``zookeeper`` package) on 127.0.0.1, for the cluster tests.

The harness writes its own ``zoo.cfg`` (free client port, data dir under the test's temporary
directory, admin server off, only the ``ruok`` four-letter word, short ticks so session timeouts of a
second or two are allowed) and runs ``QuorumPeerMain`` with the package's jar; the jar's manifest names
its dependencies in /usr/share/java. ``start`` returns once the server answers ``ruok`` with ``imok``;
``kill`` is a SIGKILL, ``stop`` a SIGTERM. The port and data dir are kept across restarts, so a stopped
server comes back with its znodes (sessions of a SIGKILLed server expire on restart as usual).

With ``tls`` (a cluster's keys, gateway/commands/cluster_keys.py, holding ``tls/zookeeper.pem``) the server listens
on a TLS port only (``secureClientPort``, Netty, client certificates of the cluster CA required), the way
``millrace cluster up --secure`` runs it; ``ruok`` is then asked over TLS with ``tls_context``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Self

from millrace.gateway.commands.cluster_keys import ClusterKeys
from millrace.gateway.commands.local_cluster import NETTY_TLS_JARS
from tests.ports import free_port

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
# ZooKeeper logs through SLF4J; without a binding it is silent, so its own log file would be empty.
SLF4J_SIMPLE_JAR = "/usr/share/java/slf4j-simple.jar"
# A tick of 200 ms lets sessions time out in 0.4 s .. 20 s (ZooKeeper clamps to 2 .. 20 ticks by default;
# set explicitly below so the bounds are plain to see).
TICK_MS = 200


def zookeeper_available() -> str | None:
    """None when a server can be started here, else why not (for ``pytest.skip``)."""
    if not os.path.exists(ZOOKEEPER_JAR):
        return f"{ZOOKEEPER_JAR} is missing: install the Debian package zookeeper (scripts/bootstrap.sh does)"
    if shutil.which("java") is None:
        return "no java on PATH (scripts/bootstrap.sh installs openjdk-17-jdk-headless)"
    return None


def four_letter_word(port: int, word: bytes, timeout: float = 2.0, tls: ssl.SSLContext | None = None) -> bytes:
    """Send a four-letter command and return the whole answer (the server closes after it)."""
    plain = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:  # wrapped, the TLS socket owns the connection (``plain`` is detached)
        s = plain if tls is None else tls.wrap_socket(plain, server_hostname="127.0.0.1")
    except BaseException:
        plain.close()
        raise
    with s:
        s.sendall(word)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
        return b"".join(chunks)


def tls_context(keys: ClusterKeys, node_id: str = "1") -> ssl.SSLContext:
    """A TLS client of a secured ZooKeeper: the cluster CA trusted, node ``node_id``'s certificate presented."""
    context = ssl.create_default_context(cafile=str(keys.ca))
    context.load_cert_chain(str(keys.node_keystore(node_id)))
    return context


class ZooKeeperProcess:
    """One standalone server; ``hosts`` is the connect string for kazoo."""

    def __init__(self, directory: Path, port: int = 0, tls: ClusterKeys | None = None) -> None:
        self.directory = directory
        self.port = port
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "zookeeper.log"

    def _write_config(self) -> Path:
        data_dir = self.directory / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text("\n".join([
            f"tickTime={TICK_MS}",
            f"minSessionTimeout={2 * TICK_MS}",
            f"maxSessionTimeout={100 * TICK_MS}",
            f"dataDir={data_dir}",
            *([f"clientPort={self.port}", "clientPortAddress=127.0.0.1"] if self.tls is None else
              [f"secureClientPort={self.port}", "secureClientPortAddress=127.0.0.1",
               *self.tls.zookeeper_tls_properties()]),
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok",
            "",
        ]))
        return config

    def command(self, config: Path) -> list[str]:
        classpath = ZOOKEEPER_JAR + (f":{SLF4J_SIMPLE_JAR}" if os.path.exists(SLF4J_SIMPLE_JAR) else "")
        if self.tls is not None:
            classpath += "".join(f":{jar}" for jar in NETTY_TLS_JARS)
        return [
            "java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dzookeeper.admin.enableServer=false",
            "-cp", classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config),
        ]

    def start(self, timeout: float = 60.0) -> Self:
        """Start the server and wait for ``imok``; a port taken meanwhile by someone else means a new one."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fixed_port = self.port != 0
        for _ in range(5):
            if not fixed_port:
                self.port = free_port()
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(self.command(self._write_config()), stdout=log,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            if self._wait_ready(timeout):
                return self
            if fixed_port:
                break
        self.kill()
        raise RuntimeError(f"zookeeper did not start on port {self.port}:\n{self.log_path.read_text()}")

    def _wait_ready(self, timeout: float) -> bool:
        """True once it answers; False if it exited (e.g. its port was taken) or never answered."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                tls = None if self.tls is None else tls_context(self.tls)
                if four_letter_word(self.port, b"ruok", tls=tls) == b"imok":
                    return True
            except OSError:
                pass  # not listening yet
            time.sleep(0.1)
        self.kill()
        return False

    def kill(self) -> None:
        """SIGKILL: the server's sessions survive in its log and expire after a restart."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
