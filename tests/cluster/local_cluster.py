"""``millrace cluster up/status/start/down`` driven as a user would, through the command, for the tests
that need a whole cluster of real processes (the local-cluster tests and the fault tests)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Self

from millrace.gateway.commands.local_cluster import LocalCluster, Process
from tests.server_process import REPO_ROOT


def millrace(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "millrace", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT, stdin=subprocess.DEVNULL)


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


# The cluster's processes run in sessions of their own (they outlive `cluster up`), so a test process
# killed outright (SIGKILL, a CI timeout) would leave them running: a watchdog outside the test's session
# stops the cluster when the test process is gone.
_WATCHDOG = """
import os, subprocess, sys, time
parent, directory = int(sys.argv[1]), sys.argv[2]
while os.path.exists(f"/proc/{parent}"):
    time.sleep(1)
subprocess.run([sys.executable, "-m", "millrace", "cluster", "down", "--dir", directory, "--timeout", "10"],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""


def start_watchdog(directory: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(directory)],
                            cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


class _ZooKeeperPerNode(LocalCluster):
    """The cluster's own process control (state file, lock, readiness), with some nodes' ``--zookeeper``
    replaced."""

    def __init__(self, directory: Path, zookeeper: dict[str, str]) -> None:
        super().__init__(directory)
        self.per_node = zookeeper

    def _command(self, process: Process) -> list[str]:
        command = super()._command(process)
        if process.name in self.per_node:
            command[command.index("--zookeeper") + 1] = self.per_node[process.name]
        return command


class LocalClusterCli:
    """A cluster in ``directory`` run with the ``millrace cluster`` command; ``up`` keeps what it printed."""

    def __init__(self, directory: Path, *up_args: str) -> None:
        self.directory = directory
        # Nodes' new groups rebalance at once (as in Kafka's test clusters); ``up_args`` may add another value.
        self.up_args = ["--node-arg=--group-initial-rebalance-delay-ms=0", *up_args]
        self.summary: dict[str, Any] = {}

    def up(self, *extra: str) -> dict[str, Any]:
        done = millrace("cluster", "up", "--dir", str(self.directory), *self.up_args, *extra)
        assert done.returncode == 0, f"cluster up failed:\n{done.stdout}\n{done.stderr}"
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        assert len(lines) == 1, f"cluster up printed more than one JSON object: {done.stdout}"
        self.summary = json.loads(lines[0])
        return self.summary

    def status(self) -> dict[str, Any]:
        done = millrace("cluster", "status", "--dir", str(self.directory), "--json", timeout=60)
        assert done.returncode == 0, f"cluster status failed:\n{done.stdout}\n{done.stderr}"
        return dict(json.loads(done.stdout))

    def start(self, name: str) -> dict[str, Any]:
        done = millrace("cluster", "start", "--dir", str(self.directory), "--process", name)
        assert done.returncode == 0, f"cluster start {name} failed:\n{done.stdout}\n{done.stderr}"
        started = dict(json.loads(done.stdout))
        self._state_changed()
        return started

    def down(self) -> subprocess.CompletedProcess[str]:
        return millrace("cluster", "down", "--dir", str(self.directory))

    def restart_nodes_through(self, zookeeper: dict[str, str], timeout: float = 120.0) -> None:
        """Stop the named nodes (SIGTERM, all at once: a clean stop) and start them again, all at once, with
        the command line the cluster gives them but each reaching ZooKeeper at its own address (node name
        -> ``host:port``, e.g. a ``TcpProxy``): how a test gives a node of a ``cluster up`` cluster a link to
        ZooKeeper of its own, to cut. The new pids are in the cluster's state, so ``status`` and ``down``
        see them; a later ``cluster start`` of such a node uses the cluster's own address again."""
        local = _ZooKeeperPerNode(self.directory, zookeeper)
        local.load()
        local.stop([local.process(name) for name in zookeeper], timeout=30)
        errors: list[BaseException] = []

        def start(name: str) -> None:
            try:
                _ZooKeeperPerNode(self.directory, zookeeper).start_process(name, timeout)  # one each: load() replaces its processes
            except BaseException as exc:  # noqa: BLE001 - raised below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(name,)) for name in zookeeper]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._state_changed()
        if errors:
            raise errors[0]

    def _state_changed(self) -> None:
        state = json.loads((self.directory / "cluster.json").read_text())
        pids = {f"{p['role']}-{p['index']}": p["pid"] for p in state["processes"]}
        for p in self.summary.get("processes", []):
            p["pid"] = pids[p["name"]]

    # -- what the tests do to processes, by pid as a user would -----------------------------------
    @property
    def bootstrap(self) -> str:
        return str(self.summary["bootstrap"])

    @property
    def secure(self) -> bool:
        return "--secure" in self.up_args

    def client_settings(self) -> dict[str, Any]:
        """librdkafka settings a Kafka client of this cluster adds to its own (none for a plain cluster):
        on a secured one the super user ``admin`` over SASL_SSL, checked against the cluster CA. Read from
        DIR/secrets/admin.properties (what the first ``up`` printed, under "admin", is not printed again by
        a later ``up``), as a user of the cluster would."""
        if not self.secure:
            return {}
        text = (self.directory / "secrets" / "admin.properties").read_text()
        login = re.search(r'username="([^"]*)" password="([^"]*)"', text)
        ca = re.search(r"^ssl\.truststore\.location=(.+)$", text, flags=re.M)
        protocol = re.search(r"^security\.protocol=(.+)$", text, flags=re.M)
        mechanism = re.search(r"^sasl\.mechanism=(.+)$", text, flags=re.M)
        assert login and ca and protocol and mechanism, "admin.properties without a login, a CA or a protocol"
        return {"security.protocol": protocol.group(1).strip(), "sasl.mechanism": mechanism.group(1).strip(),
                "sasl.username": login.group(1), "sasl.password": login.group(2),
                "ssl.ca.location": ca.group(1).strip()}

    def pid(self, name: str) -> int:
        self._state_changed()
        return int(next(p["pid"] for p in self.summary["processes"] if p["name"] == name))

    def names(self, role: str) -> list[str]:
        return [p["name"] for p in self.summary["processes"] if p["role"] == role]

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        pid = self.pid(name)
        os.kill(pid, sig)
        if sig == signal.SIGKILL:
            deadline = time.monotonic() + 10
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        return pid

    def all_pids(self) -> list[int]:
        state = json.loads((self.directory / "cluster.json").read_text())
        return [int(p["pid"]) for p in state["processes"] if p["pid"] is not None]

    def __enter__(self) -> Self:
        self._watchdog = start_watchdog(self.directory)
        try:
            self.up()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        # Whatever the test did (paused processes included), nothing may outlive it.
        pids = [p["pid"] for p in self.summary.get("processes", [])]
        if (self.directory / "cluster.json").exists():
            self.down()
        watchdog = getattr(self, "_watchdog", None)
        if watchdog is not None:
            watchdog.kill()
            watchdog.wait(10)
        for pid in pids:
            if pid is not None and pid_alive(pid) and self.ours(pid):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)

    def ours(self, pid: int) -> bool:
        """Whether ``pid`` is still a process of this cluster (not a pid reused by another program)."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return str(self.directory.resolve()).encode() in f.read()
        except OSError:
            return False
