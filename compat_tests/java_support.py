"""Compiles and runs the Java programs in compat_tests/java (CompatClient, SparkWireClient, each with the
shared JsonOut.java) against a kafka-clients version's jars (fetched by compat_tests/java/fetch_jars.sh),
collecting the JSON lines they print by scenario."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from compat_tests.common import Placed, Rec, unb64

ROOT = Path(__file__).resolve().parent.parent
JAVA_DIR = Path(__file__).resolve().parent / "java"
SHARED_SOURCES = [JAVA_DIR / "JsonOut.java"]  # compiled with every main class
JARS = Path(os.environ.get("KAFKA_JARS_DIR") or ROOT / ".cache" / "kafka-jars")  # as fetch_jars.sh
CLASSES = ROOT / ".cache" / "compat-java"
VERSIONS = ["3.9", "4.x"]


@dataclass
class JavaRun:
    version: str
    returncode: int | None
    stderr: str
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    timed_out: bool = False

    def scenario(self, name: str) -> list[dict[str, Any]]:
        """The events of one scenario; fails with the client's error if it did not complete."""
        events = self.events.get(name, [])
        errors = [e for e in events if e["event"] == "error"]
        assert not errors, f"Java kafka-clients {self.version}, scenario {name}: {errors[0]['error']}"
        if not any(e["event"] == "done" for e in events):
            why = "the JVM timed out" if self.timed_out else f"the JVM exited {self.returncode}"
            raise AssertionError(f"Java kafka-clients {self.version}, scenario {name} did not finish ({why}); "
                                 f"stderr tail:\n{self.stderr[-3000:]}")
        return events

    def of(self, name: str, event: str) -> list[dict[str, Any]]:
        return [e for e in self.scenario(name) if e["event"] == event]


def missing(version: str) -> str | None:
    """Why the Java tests for ``version`` cannot run here, or None if they can."""
    jars = JARS / version
    if not (jars / ".complete").exists():
        return (f"kafka-clients {version} jars missing in {jars}: compat_tests/java/fetch_jars.sh "
                "(run by scripts/bootstrap.sh) could not download them")
    if shutil.which("javac") is None or shutil.which("java") is None:
        return "java/javac not installed (scripts/bootstrap.sh installs openjdk-17-jdk-headless)"
    return None


def classpath(version: str, main: str = "CompatClient") -> str:
    """The classpath to run compat_tests/java/<main>.java (with the shared sources) on kafka-clients
    ``version``, compiling it once per source content; skips the test if the jars or a JDK are missing."""
    reason = missing(version)
    if reason:
        pytest.skip(reason)
    jars = JARS / version
    sources = [JAVA_DIR / f"{main}.java", *SHARED_SOURCES]
    h = hashlib.sha256(version.encode())
    for src in sources:
        h.update(src.name.encode() + b"\0" + src.read_bytes())
    digest = h.hexdigest()[:16]
    out = CLASSES / f"{main}-{version}-{digest}"
    if not (out / f"{main}.class").exists():
        tmp = CLASSES / f"{main}-{version}-{digest}.tmp-{uuid.uuid4().hex[:6]}"
        tmp.mkdir(parents=True)
        proc = subprocess.run(["javac", "-nowarn", "-cp", f"{jars}/*", "-d", str(tmp), *map(str, sources)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"javac against kafka-clients {version} failed:\n{proc.stderr}"
        if out.exists():
            shutil.rmtree(tmp)
        else:
            tmp.rename(out)
    return f"{out}:{jars}/*"


def oauth_jars(version: str) -> str:
    """The classpath entry of what kafka-clients ``version``'s OAuth login needs besides itself (Jackson,
    jose4j; fetched by compat_tests/java/fetch_jars.sh); skips the test if they are missing."""
    jars = JARS / version / "oauth"
    if not (jars / ".complete").exists():
        pytest.skip(f"the OAuth login's jars (Jackson, jose4j) are missing in {jars}: compat_tests/java/fetch_jars.sh "
                    "(run by scripts/bootstrap.sh) could not extract them")
    return f"{jars}/*"


def run_main(version: str, main: str, args: list[str], timeout: float, jvm_args: Sequence[str] = (),
             extra_classpath: Sequence[str] = ()) -> JavaRun:
    """One JVM running compat_tests/java/<main>.java with ``args``, its JSON lines collected by scenario
    (skips the test if the jars or a JDK are missing). ``jvm_args`` go before the class (``-Dname=value``
    system properties), ``extra_classpath`` after the client's jars."""
    cp = ":".join([classpath(version, main), *extra_classpath])
    cmd = ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *jvm_args, "-cp", cp, main, *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        timed_out = True
    run = JavaRun(version, proc.returncode, stderr, timed_out=timed_out)
    for line in stdout.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            run.events.setdefault(event["scenario"], []).append(event)
    start = run.events.get("-", [{}])[0]
    expected_prefix = version.split(".")[0] + "." if version.endswith(".x") else version
    assert str(start.get("clientVersion", "")).startswith(expected_prefix), (start, stderr[-2000:])
    return run


def run_java(version: str, bootstrap: str, workdir: Path, prefix: str, scenarios: list[str], timeout: float,
             ) -> JavaRun:
    """One JVM running CompatClient's ``scenarios`` in order (skips the test if the jars or a JDK are missing)."""
    return run_main(version, "CompatClient", [bootstrap, str(workdir), prefix, *scenarios], timeout)


def placed(e: dict[str, Any]) -> Placed:
    headers = tuple((unb64(k).decode(), unb64(v)) for k, v in e["headers"])  # type: ignore[union-attr]
    return Placed(e["partition"], e["offset"], Rec(unb64(e["key"]), unb64(e["value"]), headers))
