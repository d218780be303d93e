"""A whole cluster on one machine, as background processes on 127.0.0.1: ``millrace cluster up/status/
start/down`` (the command is ``gateway/commands/cluster_cli.py``; this module starts, finds and stops processes).

A cluster directory ``DIR`` holds everything:

    DIR/cluster.json        the state: every process's role, name, ports, pid and command line
    DIR/.lock               flock'd while a command changes the state
    DIR/lts/                the long-term storage the nodes share (unless ``--lts`` names another)
    DIR/<name>/             each process's data and its ``out.log`` (stdout and stderr, appended)

Processes are named ``ROLE-N``: ``zookeeper-1`` (the Debian package's server, run from its jars the
way tests/cluster/zookeeper_process.py does), ``logd-1..R`` (``millrace logd``) and ``node-1..N``
(``millrace serve --zookeeper``, node id N). Ports are chosen free once, at the first ``up``, and kept:
a logd's address is in the log ensembles recorded in ZooKeeper and clients keep the bootstrap list, so
a process started again (``start``, or ``up`` after a crash of everything) must come back where it was.

With ``up --secure`` every link is secured (``DIR/secrets/``, made by ``gateway/commands/cluster_keys.py``, mode
0700, never printed): ZooKeeper digest credentials (the cluster's znodes are the nodes' alone), ZooKeeper
on a TLS port only (``secureClientPort``, no plain ``clientPort``: Netty, a certificate of the cluster CA,
client certificates of the cluster CA required; the nodes dial it with ``--zookeeper-tls-*``), mutual TLS
on the peer listeners (a cluster CA and a certificate per node), CURVE on the log replica links, and
listeners that are SASL_SSL only: Kafka's CLIENT for clients and INTERNAL between nodes, the native listener
(``tls://`` endpoints; nodes forward to each other there as the inter-broker user) and the HTTP API, with the
authorizer on and a super user ``admin`` whose password is printed once by that ``up`` and kept in
``DIR/secrets/admin.properties``, 0600. ``status`` reads ZooKeeper (over TLS, with node 1's certificate) and
the replicas with the same keys, and the nodes' HTTP API over TLS with the cluster CA (as ``admin``). A
cluster secured before ZooKeeper had TLS here keeps its plain ZooKeeper port (``zookeeper_tls`` in its
state is false).

Each process runs in its own session (``start_new_session``), so it outlives the command that started
it and a Ctrl-C in that terminal reaches none of them. A pid is trusted only while ``/proc/<pid>/
cmdline`` still names this cluster's directory (a pid reused by another program is never signalled);
a zombie counts as stopped.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from millrace.gateway.commands.cluster_keys import ClusterKeys, create_cluster_secrets, password
from millrace.gateway.security.properties import (
    SecuritySettings,
    apply_overrides,
    load_properties,
    security_settings,
)

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
SLF4J_SIMPLE_JAR = "/usr/share/java/slf4j-simple.jar"  # without a binding ZooKeeper logs nothing
# ZooKeeper's TLS port is Netty's; the jar's manifest names netty-handler and netty-transport but not what
# they need (Debian's libnetty-java has them): without these the server binds and every handshake fails.
NETTY_TLS_JARS = ("/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar")
ZOOKEEPER_TICK_MS = 200  # sessions may then time out in 0.4 .. 20 s
STATE_FILE = "cluster.json"
ROLES = ("zookeeper", "logd", "node")
READY = "millrace: ready"
_LOG_BYTES = re.compile(r'millrace_container_log_bytes\{container="(\d+)"\} (\S+)')


class ClusterError(Exception):
    """A cluster command that cannot be carried out (the message says why)."""


@dataclass
class Process:
    """One process of the cluster as the state file keeps it."""

    role: str
    index: int
    ports: dict[str, int]
    command: list[str] = field(default_factory=list)
    pid: int | None = None

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    def summary(self) -> dict[str, Any]:
        return {"role": self.role, "name": self.name, "pid": self.pid, "ports": dict(self.ports)}


@dataclass
class ClusterSettings:
    """What ``up`` was asked for, kept so that later starts build the same command lines."""

    nodes: int = 3
    log_replicas: int = 3
    containers: int = 4
    write_quorum: int = 3
    ack_quorum: int = 2
    session_timeout: float = 4.0
    host: str = "127.0.0.1"
    lts: str | None = None
    s3_endpoint: str | None = None
    node_args: list[str] = field(default_factory=list)
    # Kafka broker properties every node is given (``serve --config``/``--override``): listeners, security,
    # the authorizer. Each node's listeners get ports of their own (``kafka_listener_names``).
    config: str | None = None
    overrides: list[str] = field(default_factory=list)
    # Every link secured (``up --secure``): the keys in DIR/secrets, the properties written there.
    secure: bool = False
    # ZooKeeper on a TLS port only: set by ``up`` for a new secured cluster (false in the state of one
    # secured before ZooKeeper had TLS here, which goes on with its plain port).
    zookeeper_tls: bool = False

    def kafka_listener_names(self) -> list[str]:
        """The Kafka listeners each node binds, in ``listeners`` order (the first is the node's ``kafka``
        port); ConfigError when the properties cannot make them."""
        return [listener.name for listener in self._security().listeners]

    def _security(self) -> SecuritySettings:
        props = load_properties(self.config) if self.config else {}
        props = apply_overrides(props, self.overrides)
        props.setdefault("listeners", f"PLAINTEXT://{self.host}:0")
        return security_settings(props)

    def kafka_overrides(self, ports: dict[str, int]) -> list[str]:
        """A node's ``serve`` arguments for the properties: the file and overrides as given, then its own
        ``listeners`` (each on the node's port for it; a listener's host as configured, else ``host``) and,
        since several nodes share the machine, no ``advertised.listeners`` (each advertises what it binds)."""
        if not self.config and not self.overrides:
            return []
        args = ["--config", self.config] if self.config else []
        for override in self.overrides:
            args += ["--override", override]
        listeners = []
        for i, listener in enumerate(self._security().listeners):
            port = ports["kafka" if i == 0 else f"kafka:{listener.name}"]
            host = listener.endpoint.host or self.host
            listeners.append(f"{listener.name}://{f'[{host}]' if ':' in host else host}:{port}")
        return [*args, "--override", f"listeners={','.join(listeners)}", "--override", "advertised.listeners="]


def zookeeper_missing() -> str | None:
    """None when a ZooKeeper server can be started here, else what is missing."""
    if not os.path.exists(ZOOKEEPER_JAR):
        return f"{ZOOKEEPER_JAR} is missing: install the Debian package zookeeper"
    if shutil.which("java") is None:
        return "no java on PATH: install a JRE (openjdk-17-jre-headless)"
    return None


def zookeeper_tls_missing() -> str | None:
    """None when the ZooKeeper server can serve TLS here, else what is missing."""
    missing = [jar for jar in NETTY_TLS_JARS if not os.path.exists(jar)]
    if missing:
        return f"{', '.join(missing)} missing (ZooKeeper's TLS port needs Netty): install the Debian package libnetty-java"
    return None


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports (every socket held open until all are chosen)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def ruok(host: str, port: int, timeout: float = 2.0, tls: ssl.SSLContext | None = None) -> bool:
    """ZooKeeper's four-letter health check (over TLS with ``tls``: its secure port speaks nothing else)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            if tls is None:
                s.sendall(b"ruok")
                return s.recv(16) == b"imok"
            with tls.wrap_socket(s, server_hostname=host) as t:
                t.sendall(b"ruok")
                return t.recv(16) == b"imok"
    except OSError:  # ssl.SSLError too
        return False


def reachable(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections there."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class LocalCluster:
    """The processes of the cluster in ``directory``; every method reads the state file afresh."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).resolve()
        self.settings = ClusterSettings()
        self.processes: list[Process] = []

    # -- state ------------------------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    def exists(self) -> bool:
        return self.state_path.exists()

    def load(self) -> LocalCluster:
        try:
            raw = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            raise ClusterError(f"no cluster in {self.directory} (run `millrace cluster up --dir {self.directory}`)") \
                from None
        self.settings = ClusterSettings(**raw["settings"])
        self.processes = [Process(p["role"], int(p["index"]), {k: int(v) for k, v in p["ports"].items()},
                                  list(p["command"]), p.get("pid")) for p in raw["processes"]]
        return self

    def save(self) -> None:
        raw = {"settings": asdict(self.settings), "processes": [asdict(p) for p in self.processes]}
        temp = self.state_path.with_suffix(".tmp")
        temp.write_text(json.dumps(raw, indent=2) + "\n")
        os.replace(temp, self.state_path)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One command at a time changes the state of a cluster directory."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def process(self, name: str) -> Process:
        for p in self.processes:
            if p.name == name:
                return p
        raise ClusterError(f"no process {name!r} in {self.directory}: "
                           f"{', '.join(p.name for p in self.processes)}")

    def by_role(self, role: str) -> list[Process]:
        return [p for p in self.processes if p.role == role]

    @property
    def keys(self) -> ClusterKeys:
        """Where a secured cluster's key material is (``DIR/secrets``)."""
        return ClusterKeys(self.directory / "secrets")

    def zookeeper_credentials(self) -> Any:
        """The nodes' ZooKeeper identity on a secured cluster (what ``status`` reads with), else None."""
        if not self.settings.secure:
            return None
        from millrace.store.cluster.zk_auth import ZooKeeperCredentials

        return ZooKeeperCredentials.load(self.keys.zookeeper_credentials)

    def curve_keys(self) -> Any:
        """The nodes' CURVE keys on a secured cluster (``status`` asks the replicas with them), else None."""
        if not self.settings.secure:
            return None
        from millrace.store.durablelog.curve import CurveClientKeys

        return CurveClientKeys.load(self.keys.node_secret_key, self.keys.logd_public_key)

    def zookeeper_tls(self) -> Any:
        """TLS to the cluster's ZooKeeper (node 1's certificate, the cluster CA) when it has a TLS port, else None."""
        if not self.settings.zookeeper_tls:
            return None
        from millrace.store.cluster.zk_tls import ZooKeeperTls

        return ZooKeeperTls(str(self.keys.ca), str(self.keys.node_keystore("1")))

    @property
    def zookeeper(self) -> str:
        """The connect string of the cluster's ZooKeeper (its TLS port when ``zookeeper_tls``)."""
        return f"{self.settings.host}:{self.by_role('zookeeper')[0].ports['client']}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.settings.host}:{p.ports['kafka']}" for p in self.by_role("node"))

    @property
    def native(self) -> list[str]:
        """The nodes' native listeners, as a client names them (``tls://`` on a secured cluster)."""
        scheme = "tls://" if self.settings.secure else ""
        return [f"{scheme}{self.settings.host}:{p.ports['native']}" for p in self.by_role("node")]

    @property
    def log_replicas(self) -> list[str]:
        return [f"{self.settings.host}:{p.ports['zmq']}" for p in self.by_role("logd")]

    def summary(self) -> dict[str, Any]:
        """What ``up`` prints: where clients connect and which processes run."""
        return {"dir": str(self.directory), "zookeeper": self.zookeeper, "zookeeper_tls": self.settings.zookeeper_tls,
                "bootstrap": self.bootstrap, "native": self.native, "log_replicas": self.log_replicas,
                "processes": [p.summary() for p in self.processes]}

    # -- processes --------------------------------------------------------------------------------
    def alive(self, process: Process) -> bool:
        """Whether ``process``'s recorded pid is still that process (not a zombie, not a reused pid)."""
        pid = process.pid
        if pid is None:
            return False
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            return False
        state = stat[stat.rfind(b")") + 2:][:1]
        if state in (b"Z", b"X"):
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)  # ours (started in this process): reap it
            return False
        # An empty cmdline: caught between fork and exec (the child we just started); it is ours.
        return not cmdline or str(self.directory).encode() in cmdline

    def _command(self, process: Process) -> list[str]:
        s = self.settings
        home = self.directory / process.name
        if process.role == "zookeeper":
            return self._zookeeper_command(process, home)
        millrace = [sys.executable, "-m", "millrace"]
        if process.role == "logd":
            return [*millrace, "logd", "--data-dir", str(home / "data"), "--host", s.host,
                    "--port", str(process.ports["zmq"]), "--log-level", "WARNING",
                    *(self.keys.logd_flags() if s.secure else [])]
        lts = s.lts or str(self.directory / "lts")
        command = [*millrace, "serve", "--data-dir", str(home / "data"), "--host", s.host,
                   "--kafka-port", str(process.ports["kafka"]), "--native-port", str(process.ports["native"]),
                   "--peer-port", str(process.ports["peer"]), "--http-port", str(process.ports["http"]),
                   "--zookeeper", self.zookeeper,
                   "--node-id", str(process.index), "--log-replicas", ",".join(self.log_replicas),
                   "--write-quorum", str(s.write_quorum), "--ack-quorum", str(s.ack_quorum),
                   "--lts", lts, "--containers", str(s.containers), "--session-timeout", str(s.session_timeout),
                   "--log-level", os.environ.get("MILLRACE_CLUSTER_LOG_LEVEL", "WARNING")]
        if s.s3_endpoint:
            command += ["--s3-endpoint", s.s3_endpoint]
        secured: list[str] = []
        if s.secure:  # paths only: every secret stays in its file, off the command line
            node_id = str(process.index)
            secured = [*self.keys.node_flags(node_id, zookeeper_tls=s.zookeeper_tls),
                       "--override", f"ssl.keystore.location={self.keys.node_keystore(node_id)}"]
        return [*command, *s.kafka_overrides(process.ports), *secured, *s.node_args]

    def _zookeeper_command(self, process: Process, home: Path) -> list[str]:
        data = home / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = home / "zoo.cfg"
        port = process.ports["client"]
        jars = [ZOOKEEPER_JAR, *([SLF4J_SIMPLE_JAR] if os.path.exists(SLF4J_SIMPLE_JAR) else [])]
        if self.settings.zookeeper_tls:  # the TLS port alone: nothing listens for plain TCP
            listen = [f"secureClientPort={port}", f"secureClientPortAddress={self.settings.host}",
                      *self.keys.zookeeper_tls_properties()]
            jars += NETTY_TLS_JARS
        else:
            listen = [f"clientPort={port}", f"clientPortAddress={self.settings.host}"]
        config.write_text("\n".join([
            f"tickTime={ZOOKEEPER_TICK_MS}",
            f"minSessionTimeout={2 * ZOOKEEPER_TICK_MS}",
            f"maxSessionTimeout={100 * ZOOKEEPER_TICK_MS}",
            f"dataDir={data}",
            *listen,
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok",
            "",
        ]))
        classpath = ":".join(jars)
        return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dzookeeper.admin.enableServer=false",
                "-cp", classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)]

    def log_path(self, process: Process) -> Path:
        return self.directory / process.name / "out.log"

    def log_tail(self, process: Process, limit: int = 3000) -> str:
        try:
            return self.log_path(process).read_text(errors="replace")[-limit:]
        except OSError:
            return "(no log)"

    def _spawn(self, process: Process) -> int:
        """Start ``process`` in the background; returns where its log stood before (to wait for ready)."""
        home = self.directory / process.name
        home.mkdir(parents=True, exist_ok=True)
        process.command = self._command(process)
        log_path = self.log_path(process)
        offset = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {process.name}\n".encode())
            out.flush()
            offset = out.tell()
            child = subprocess.Popen(process.command, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=str(home), start_new_session=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        process.pid = child.pid
        # The child is ours only until this command exits; its exit status is never needed (readiness and
        # a clean stop are read from its log), and Popen would warn about it being left running.
        child.returncode = 0
        return offset

    def _wait_ready(self, process: Process, offset: int, timeout: float) -> None:
        """Until the process serves: ZooKeeper answers ``imok``, millrace prints ``millrace: ready``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive(process):
                raise ClusterError(f"{process.name} exited while starting; its log ends:\n{self.log_tail(process)}")
            if process.role == "zookeeper":
                tls = self.zookeeper_tls()
                if ruok(self.settings.host, process.ports["client"], tls=None if tls is None else tls.context()):
                    return
            else:
                with open(self.log_path(process), "rb") as f:
                    f.seek(offset)
                    if READY.encode() in f.read():
                        return
            time.sleep(0.1)
        self.signal(process, signal.SIGKILL)
        raise ClusterError(f"{process.name} did not serve within {timeout:g} s; its log ends:\n{self.log_tail(process)}")

    def start(self, process: Process, timeout: float = 120.0) -> None:
        """Start one process (which must not be running) on its recorded ports and wait until it serves."""
        if self.alive(process):
            raise ClusterError(f"{process.name} is running already (pid {process.pid})")
        offset = self._spawn(process)
        self.save()  # the pid is known now: `down` finds it even if waiting is interrupted
        self._wait_ready(process, offset, timeout)

    def signal(self, process: Process, sig: int) -> bool:
        """Send ``sig`` if the process is alive; whether it was."""
        if not self.alive(process):
            return False
        assert process.pid is not None
        try:
            os.kill(process.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def stop(self, processes: list[Process], timeout: float) -> list[dict[str, Any]]:
        """SIGTERM (and SIGCONT, for a paused one) to all of them at once, wait, SIGKILL what is left."""
        report: dict[str, dict[str, Any]] = {}
        began = time.monotonic()
        for p in processes:
            offset = self.log_path(p).stat().st_size if self.log_path(p).exists() else 0
            running = self.signal(p, signal.SIGTERM)
            if running:
                self.signal(p, signal.SIGCONT)
            report[p.name] = {"name": p.name, "pid": p.pid, "result": "stopped" if running else "not running",
                              "_offset": offset}
        waiting = [p for p in processes if report[p.name]["result"] == "stopped"]
        deadline = began + timeout
        while waiting and time.monotonic() < deadline:
            waiting = [p for p in waiting if self.alive(p)]
            if waiting:
                time.sleep(0.05)
        for p in waiting:
            self.signal(p, signal.SIGKILL)
            report[p.name]["result"] = "killed"  # did not stop within the timeout
        for p in processes:
            entry = report[p.name]
            offset = entry.pop("_offset")
            if entry["result"] == "stopped":
                entry["seconds"] = round(time.monotonic() - began, 2)
                if p.role != "zookeeper":  # millrace says so when it closed everything
                    with open(self.log_path(p), "rb") as f:
                        f.seek(offset)
                        entry["clean"] = b"millrace: stopped cleanly" in f.read()
        kill_deadline = time.monotonic() + 10
        while any(self.alive(p) for p in waiting) and time.monotonic() < kill_deadline:
            time.sleep(0.05)
        return [report[p.name] for p in processes]

    # -- commands -----------------------------------------------------------------------------------
    def up(self, settings: ClusterSettings, timeout: float = 120.0) -> dict[str, Any]:
        """Start a new cluster, or every stopped process of an existing one (on its old ports)."""
        with self.locked():
            new = not self.exists()
            admin: dict[str, Any] | None = None
            if not new:
                self.load()
                if settings.secure and not self.settings.secure:
                    raise ClusterError(f"the cluster in {self.directory} was made without --secure; its znodes, "
                                       "logs and listeners cannot be secured in place")
            else:
                missing = zookeeper_missing() or (zookeeper_tls_missing() if settings.secure else None)
                if missing:
                    raise ClusterError(missing)
                if settings.nodes < 1 or settings.log_replicas < settings.write_quorum:
                    raise ClusterError(f"need at least one node and --log-replicas >= --write-quorum "
                                       f"({settings.log_replicas} < {settings.write_quorum})")
                if settings.secure and settings.config:
                    raise ClusterError("--secure writes the nodes' server.properties itself: give further "
                                       "broker properties with --override")
                settings.zookeeper_tls = settings.secure
                self.settings = settings
                try:
                    secret = self._make_secrets() if settings.secure else None
                except FileExistsError as exc:  # keys left by an `up` that failed before saving its state
                    raise ClusterError(f"{exc}; remove {self.keys.directory} or use another --dir") from None
                self._plan()
                if secret is not None:
                    admin = self._admin_client_properties(secret)
                self.save()
            # In dependency order; nodes one at a time (a node's start-up reads tables other nodes may own).
            for p in self.processes:
                if self.alive(p):
                    continue
                try:
                    self.start(p, timeout)
                except ClusterError:
                    if not new:
                        raise  # its ports are recorded in ZooKeeper and known to clients: no others will do
                    # A port taken between choosing it and binding it: nothing knows this one yet.
                    p.ports = dict(zip(p.ports, free_ports(len(p.ports), self.settings.host), strict=True))
                    self.start(p, timeout)
            self.wait_serving(timeout)
            summary = self.summary()
            if admin is not None:  # printed by this first `up` only; kept in DIR/secrets/admin.properties
                summary["admin"] = admin
            return summary

    # -- a secured cluster's keys and properties -----------------------------------------------------
    def _make_secrets(self) -> str:
        """``up --secure``: the keys (cluster_keys.py) and the nodes' Kafka properties with the listeners'
        passwords, all in DIR/secrets (0700); returns the super user's password. Each node is given its own
        key store (``--override ssl.keystore.location``), node 1's in the file only makes it complete."""
        s = self.settings
        keys = create_cluster_secrets(self.keys.directory, {str(i): [s.host, "localhost"]
                                                            for i in range(1, s.nodes + 1)},
                                      zookeeper_names=[s.host, "localhost"] if s.zookeeper_tls else None)
        broker, admin = password(), password()
        plain = "org.apache.kafka.common.security.plain.PlainLoginModule required"
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        lines = [
            "# The nodes' Kafka properties, made by `millrace cluster up --secure` (holds passwords: 0600).",
            "# CLIENT: what Kafka clients use; INTERNAL: the nodes' own link (inter-broker); NATIVE: the native",
            "# listener (clients, and nodes forwarding to each other as broker); HTTP: the HTTP API. All SASL over TLS.",
            f"listeners=CLIENT://{s.host}:0,INTERNAL://{s.host}:0",
            "listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SASL_SSL,NATIVE:SASL_SSL,HTTP:SASL_SSL",
            "inter.broker.listener.name=INTERNAL",
            "sasl.mechanism.inter.broker.protocol=PLAIN",
            "listener.name.internal.sasl.enabled.mechanisms=PLAIN",
            f'listener.name.internal.plain.sasl.jaas.config={plain} username="broker" password="{broker}" '
            f'user_broker="{broker}";',
            "listener.name.client.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            f'listener.name.client.plain.sasl.jaas.config={plain} user_admin="{admin}";',
            f"listener.name.client.scram-sha-256.sasl.jaas.config={scram}",
            f"listener.name.client.scram-sha-512.sasl.jaas.config={scram}",
            "listener.name.native.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            f'listener.name.native.plain.sasl.jaas.config={plain} user_admin="{admin}" user_broker="{broker}";',
            f"listener.name.native.scram-sha-256.sasl.jaas.config={scram}",
            f"listener.name.native.scram-sha-512.sasl.jaas.config={scram}",
            "listener.name.http.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            f'listener.name.http.plain.sasl.jaas.config={plain} user_admin="{admin}";',
            f"listener.name.http.scram-sha-256.sasl.jaas.config={scram}",
            f"listener.name.http.scram-sha-512.sasl.jaas.config={scram}",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={keys.node_keystore('1')}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={keys.ca}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin;User:broker",
            "allow.everyone.if.no.acl.found=false",
        ]
        properties = keys.directory / "server.properties"
        fd = os.open(properties, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        s.config = str(properties)
        return admin

    def _admin_client_properties(self, secret: str) -> dict[str, Any]:
        """The super user ``admin``'s client configuration (Kafka's Java client names), written 0600 to
        DIR/secrets/admin.properties; returned for ``up`` to print once."""
        keys = self.keys
        path = keys.directory / "admin.properties"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("# The cluster's super user, made by `millrace cluster up --secure` (a Kafka client config)\n"
                    f"bootstrap.servers={self.bootstrap}\n"
                    "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="admin" password="{secret}";\n'
                    f"ssl.truststore.type=PEM\nssl.truststore.location={keys.ca}\n")
        return {"username": "admin", "password": secret, "security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                "ca": str(keys.ca), "client_properties": str(path)}

    def _plan(self) -> None:
        s = self.settings
        # A port for each further Kafka listener (``kafka:<NAME>``) too: nodes share the machine.
        kafka = ["kafka", *(f"kafka:{name}" for name in s.kafka_listener_names()[1:])]
        per_node = [*kafka, "native", "peer", "http"]
        ports = iter(free_ports(1 + s.log_replicas + len(per_node) * s.nodes, s.host))
        self.processes = [Process("zookeeper", 1, {"client": next(ports)})]
        self.processes += [Process("logd", i, {"zmq": next(ports)}) for i in range(1, s.log_replicas + 1)]
        self.processes += [Process("node", i, {name: next(ports) for name in per_node}) for i in range(1, s.nodes + 1)]

    def wait_serving(self, timeout: float) -> None:
        """Until every node accepts Kafka and native connections and every container has a live owner."""
        deadline = time.monotonic() + timeout
        last = "?"
        while time.monotonic() < deadline:
            dead = [p.name for p in self.processes if not self.alive(p)]
            if dead:
                raise ClusterError(f"{', '.join(dead)} stopped while the cluster was starting")
            closed = [p.name for p in self.by_role("node")
                      if not all(reachable(self.settings.host, p.ports[k]) for k in ("kafka", "native"))]
            unowned, counts = self.ownership()
            # Settled: every container owned by a live node and the shares balanced (the assigner hands
            # containers over to nodes that joined; clients started before that see partitions move).
            settled = not unowned and len(counts) == len(self.by_role("node")) \
                and max(counts.values()) - min(counts.values()) <= 1
            if not closed and settled:
                return
            last = (f"not accepting connections: {closed}; containers without a live owner: {unowned}; "
                    f"containers per live node: {counts}")
            time.sleep(0.2)
        raise ClusterError(f"the cluster did not serve within {timeout:g} s ({last})")

    def ownership(self) -> tuple[list[int], dict[str, int]]:
        """Containers without a live owner (all of them if ZooKeeper cannot be read), and how many each
        live node owns."""
        try:
            coordination = self.read_coordination(timeout=5.0)
        except Exception:  # noqa: BLE001 - not up yet, or down: nothing is owned as far as we can tell
            return list(range(self.settings.containers)), {}
        live = coordination["live"]
        counts = {node_id: 0 for node_id, _ in live}
        unowned = []
        for c in coordination["containers"]:
            if c["owner"] is None or (c["owner"], c["incarnation"]) not in live:
                unowned.append(c["id"])
            else:
                counts[c["owner"]] += 1
        return unowned, counts

    def read_coordination(self, timeout: float = 5.0) -> dict[str, Any]:
        """Nodes, containers, the elected assigner and the log records, as ZooKeeper has them."""
        from millrace.store.cluster.layout import ClusterPaths
        from millrace.store.cluster.log_metadata import ZooKeeperLogMetadataStore
        from millrace.store.cluster.member import connect, elected_leader, live_nodes, read_assignments

        paths = ClusterPaths()
        client = connect(self.zookeeper, session_timeout=10.0, connect_timeout=timeout,
                         credentials=self.zookeeper_credentials(), tls=self.zookeeper_tls())
        try:
            nodes = live_nodes(client, paths) if client.exists(paths.nodes) else {}
            assignments = read_assignments(client, paths, self.settings.containers)
            leader = elected_leader(client, paths) if client.exists(paths.leader) else None
            logs: dict[str, Any] = {}
            if client.exists(paths.logs):
                store = ZooKeeperLogMetadataStore(client, paths)
                for name in sorted(client.get_children(paths.logs)):
                    logs[name] = store.read(name)
        finally:
            client.stop()
            client.close()
        return {
            "nodes": nodes,
            "live": {(node_id, incarnation) for node_id, (_, incarnation) in nodes.items()},
            "leader": leader,
            "containers": [{"id": cid, "owner": a.node, "incarnation": a.incarnation, "epoch": a.epoch}
                           for cid, (a, _) in sorted(assignments.items())],
            "logs": logs,
        }

    def start_process(self, name: str, timeout: float = 120.0) -> dict[str, Any]:
        """``cluster start --process ROLE-N``: start one stopped process again, on its old ports. The state
        is locked only while the process is spawned and recorded, not while it comes up: a node may wait
        for a logd that another ``cluster start`` brings back meanwhile."""
        with self.locked():
            self.load()
            process = self.process(name)
            if self.alive(process):
                raise ClusterError(f"{process.name} is running already (pid {process.pid})")
            offset = self._spawn(process)
            self.save()
        self._wait_ready(process, offset, timeout)
        return process.summary()

    def down(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Stop every process: nodes first (they close their logs cleanly), then the logds, then ZooKeeper."""
        with self.locked():
            self.load()
            report = []
            for role in ("node", "logd", "zookeeper"):
                report += self.stop(self.by_role(role), timeout)
            for p in self.processes:
                p.pid = None
            self.save()
            return report

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        """``cluster status``: processes (from the state file), then nodes, containers with their owners
        and epochs, and each log's ensemble with every replica's lag (from ZooKeeper and the processes)."""
        self.load()
        host = self.settings.host
        result: dict[str, Any] = {
            "dir": str(self.directory), "zookeeper": self.zookeeper, "bootstrap": self.bootstrap,
            "processes": [{**p.summary(), "running": self.alive(p)} for p in self.processes],
        }
        if not self.alive(self.by_role("zookeeper")[0]):
            result["error"] = "zookeeper-1 is not running: nodes, containers and logs are unknown"
            return result
        try:
            coordination = self.read_coordination(timeout)
        except Exception as exc:  # noqa: BLE001 - report it: status must say something about a sick cluster
            result["error"] = f"cannot read ZooKeeper at {self.zookeeper}: {exc}"
            return result
        live = coordination["live"]
        containers = []
        for c in coordination["containers"]:
            owned = c["owner"] is not None and (c["owner"], c["incarnation"]) in live
            containers.append({**c, "owner_live": owned})
        result["controller"] = coordination["leader"]
        result["containers"] = containers
        nodes = []
        registered = coordination["nodes"]
        for p in self.by_role("node"):
            node_id = str(p.index)
            entry: dict[str, Any] = {"id": node_id, "name": p.name, "running": self.alive(p),
                                     "registered": node_id in registered}
            if node_id in registered:
                info, incarnation = registered[node_id]
                entry["incarnation"] = incarnation
                entry["advertised"] = info.advertised
            entry["serving"] = {k: reachable(host, port) for k, port in p.ports.items()}
            entry["containers"] = [c["id"] for c in containers if c["owner"] == node_id and c["owner_live"]]
            if entry["serving"].get("http"):
                entry["health"], log_bytes = self._node_http(p)
                for c in containers:
                    if c["id"] in entry["containers"] and c["id"] in log_bytes:
                        # The owner's durable log not yet truncated: appends not yet tiered to long-term
                        # storage (and the last checkpoint): how far tiering lags behind.
                        c["log_bytes"] = log_bytes[c["id"]]
            nodes.append(entry)
        result["nodes"] = nodes
        result["logs"] = self._log_status(coordination["logs"])
        return result

    def _node_http(self, process: Process) -> tuple[dict[str, Any] | None, dict[int, int]]:
        """A node's ``/health`` (its containers' states) and, from ``/metrics``, each of its containers'
        durable log bytes; (None, {}) if it does not answer. A secured cluster's HTTP API is HTTPS checked
        against the cluster CA, asked as ``admin`` (reads are open unless the nodes require a principal)."""
        secure = self.settings.secure
        base = f"{'https' if secure else 'http'}://{self.settings.host}:{process.ports['http']}"
        context = ssl.create_default_context(cafile=str(self.keys.ca)) if secure else None
        headers = self._admin_authorization() if secure else {}

        def get(path: str) -> Any:
            return urllib.request.urlopen(urllib.request.Request(f"{base}{path}", headers=headers),
                                          timeout=2, context=context)

        try:
            with get("/health") as answer:
                health = json.loads(answer.read())
        except urllib.error.HTTPError as exc:  # 503: not every container runs; the body says which
            health = json.loads(exc.read())
        except (OSError, ValueError):
            return None, {}
        log_bytes: dict[int, int] = {}
        try:
            with get("/metrics") as answer:
                for line in answer.read().decode().splitlines():
                    m = _LOG_BYTES.match(line)
                    if m:
                        log_bytes[int(m.group(1))] = int(float(m.group(2)))
        except (OSError, ValueError):
            pass
        return health, log_bytes

    def _admin_authorization(self) -> dict[str, str]:
        """HTTP Basic credentials of the super user ``admin`` (from DIR/secrets/admin.properties; never
        shown), or none if that file is gone."""
        try:
            text = (self.keys.directory / "admin.properties").read_text()
        except OSError:
            return {}
        found = re.search(r'username="([^"]*)" password="([^"]*)"', text)
        if found is None:
            return {}
        token = base64.b64encode(f"{found.group(1)}:{found.group(2)}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def _log_status(self, records: dict[str, Any]) -> list[dict[str, Any]]:
        """Each log's epoch, truncation point and current ensemble, with what every replica of it holds
        (``last``: its highest entry, ``lac``: the last confirmed entry it knows of) and its lag behind the
        replica holding most; ``under_replicated``: its fragments held by fewer than the write quorum (an
        ensemble that shrank for want of a spare, until a replica comes back and they are copied to it)."""
        from millrace.store.durablelog.replica_rpc import ReplicaRpc

        running = {f"{self.settings.host}:{p.ports['zmq']}" for p in self.by_role("logd") if self.alive(p)}
        rpc = ReplicaRpc(curve=self.curve_keys())
        logs = []
        try:
            for name, record in records.items():
                ensemble = list(record.fragments[-1].ensemble) if record.fragments else []
                asked: dict[str, tuple[dict[str, Any], list[bytes]]] = {
                    a: ({"op": "last_confirmed", "log": name}, []) for a in ensemble if a in running}
                replies = rpc.call(asked, timeout=1.0) if asked else {}
                held = {a: int(r[0]["last"]) for a, r in replies.items() if r[0].get("status") == "ok"}
                top = max(held.values(), default=0)
                replicas = []
                for address in ensemble:
                    reply = replies.get(address)
                    if address not in held or reply is None:
                        replicas.append({"address": address, "answered": False})
                        continue
                    replicas.append({"address": address, "answered": True, "last": held[address],
                                     "lac": int(reply[0]["lac"]), "lag": top - held[address]})
                short = sum(1 for f in record.fragments if len(f.ensemble) < self.settings.write_quorum)
                logs.append({"name": name, "epoch": record.epoch, "truncated": record.truncated,
                             "fragments": len(record.fragments), "under_replicated": short, "ensemble": ensemble,
                             "replicas": replicas})
        finally:
            rpc.close()
        return logs
