"""docs/spark.md's section on Spark's Kafka source and sink, run as written: its commands are parsed out of
the page and run in its order from a directory laid out like the repository root, against a real Millrace,
so the page cannot drift from what works; the README's first Spark job is the section's first five commands.
Only what a test machine must change is substituted: the server's ports (the page says
127.0.0.1:9092 and the native default), the connector jar folder (/opt/jars), and Maven `--packages`
(unreachable here) by the same jars. Every output is checked against an independent computation over the
topic. Skips, saying why, without the connector's jars (tests/spark/conftest.py)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace.client.segments import SegmentClient
from tests.server_process import ServerProcess
from tests.spark import reference
from tests.spark.conftest import connector_or_skip
from tests.spark.kafka_support import (
    ROOT,
    Record,
    kafka_windows,
    parquet_windows,
    read_topic,
    readings_of,
    watermarks,
)
from tests.spark.shell_commands import joined_commands

JARS = connector_or_skip()

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

HANG_GUARD_S = 600.0  # a stuck command fails instead of hanging the suite; nothing here is timed
MAVEN_CONNECTOR = re.compile(r"--packages org\.apache\.spark:spark-sql-kafka-0-10_2\.13:\S+")


def section_commands(path: Path, heading: str) -> list[str]:
    """The shell commands of a page's section, in order (indented code lines, continuations joined)."""
    text = path.read_text()
    section = text[text.index(f"\n## {heading}\n"):]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    return joined_commands(line for line in section.splitlines()
                           if line.startswith("    ") and not line.lstrip().startswith("#"))


def readme_commands() -> list[str]:
    """The commands of docs/spark.md's section on Spark's Kafka source and sink, whose first five are the
    README's first Spark job, word for word."""
    commands = section_commands(ROOT / "docs" / "spark.md", "Spark's Kafka source and sink")
    first_job = section_commands(ROOT / "README.md", "A first Spark job")
    assert first_job == commands[:5], (first_job, commands[:5])
    return commands


def kind(command: str) -> str:
    words = shlex.split(command)
    while "=" in words[0]:  # VAR=value prefixes
        words.pop(0)
    if words[0].endswith("spark-submit"):
        return "spark-submit"
    if words[0] == "spark_examples/run.sh":
        return f"run.sh {words[1]}"
    if words[0] == ".venv/bin/millrace":
        return f"millrace {words[1]} {words[2]}"
    return words[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(str(tmp_path_factory.mktemp("millrace"))).start()
    try:
        yield srv
    finally:
        srv.kill()


class Shell:
    """Runs the page's commands as a user would from the repository root: a directory holding the repository's
    spark_examples/, scripts/ and .venv/ (so outputs land in a fresh place), with no virtualenv activated."""

    def __init__(self, home: Path, server: ServerProcess) -> None:
        self.home = home
        for name in ("spark_examples", "scripts", ".venv"):
            (home / name).symlink_to(ROOT / name)
        self.server = server
        venv_bin = str(ROOT / ".venv" / "bin")
        path = ":".join(p for p in os.environ.get("PATH", "").split(":") if p and p != venv_bin)
        self.env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "SPARK_KAFKA_JARS")}
        self.env["PATH"] = path or "/usr/bin:/bin"
        self.jar_dir = str(Path(JARS.split(",")[0]).parent)

    def prepare(self, command: str) -> tuple[str, dict[str, str]]:
        env = dict(self.env)
        command = command.replace("127.0.0.1:9092", self.server.bootstrap).replace("/opt/jars/", self.jar_dir + "/")
        command = MAVEN_CONNECTOR.sub(f"--jars {JARS}", command)
        if command.startswith(".venv/bin/millrace"):
            command += f" --server 127.0.0.1:{self.server.native_port}"
        elif "--jars" not in command:
            env["SPARK_KAFKA_JARS"] = JARS  # stands in for the Maven download (the page: "stands in for --jars")
        return command, env

    def run(self, command: str) -> str:
        line, env = self.prepare(command)
        proc = subprocess.run(["bash", "-c", line], cwd=self.home, env=env, capture_output=True, text=True,
                              timeout=HANG_GUARD_S)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{command}\nexited {proc.returncode}:\n{out[-6000:]}"
        assert "Traceback" not in out, out[-6000:]
        return out

    def start(self, command: str, log: Path) -> subprocess.Popen:
        line, env = self.prepare(command)
        with log.open("w") as f:  # its own session and process group, as a terminal gives a command
            return subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=self.home, env=env, stdout=f,
                                    stderr=subprocess.STDOUT, start_new_session=True)


def wait_until(what: str, check: Any) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(2)


def cut_by_time(records: list[Record], t_from: int, t_to: int) -> list[Record]:
    """Kafka's reading of startingTimestamp/endingTimestamp: per partition, from the first record at or after
    t_from to before the first at or after t_to."""
    out: list[Record] = []
    for p in sorted({r.partition for r in records}):
        recs = [r for r in records if r.partition == p]
        ts = [rd.ts_ms for rd in readings_of(recs)]
        start = next((i for i, t in enumerate(ts) if t >= t_from), len(recs))
        end = next((i for i, t in enumerate(ts) if t >= t_to), len(recs))
        out += recs[start:end]
    return out


def segments(server: ServerProcess, topic: str) -> list[tuple[int, list[int]]]:
    with SegmentClient("127.0.0.1", server.native_port) as c:
        return [(s["number"], s["partitions"]) for s in c.describe_stream("kafka", topic)["segments"]]


def test_page_spark_section_as_written(server: ServerProcess, spark: Any, tmp_path: Path) -> None:
    commands = readme_commands()
    assert [kind(c) for c in commands] == [
        "run.sh generate", "run.sh stream", "millrace streams split", "millrace streams merge", "run.sh history",
        "spark-submit", "run.sh stream"], commands
    generate, stream, split, merge, history, submit, with_jars = commands
    home = tmp_path / "repo"
    home.mkdir()
    sh = Shell(home, server)

    sh.run(generate)
    records = read_topic(server.bootstrap, "sensor-readings")
    readings = readings_of(records)
    assert len(readings) == 100_000 and {r.partition for r in records} == {0, 1, 2, 3}
    assert segments(server, "sensor-readings") == [(0, [0, 1, 2, 3])], "4 partitions in one segment"
    everything = reference.aggregates(readings)
    assert len({r.device for r in readings}) == 50
    times = [r.ts_ms for r in readings]
    assert reference_ms("2025-06-01T10:00:00Z") - 30_000 <= min(times) < max(times) < reference_ms("2025-06-01T12:46:41Z")
    final_watermark = max(r.ts_ms for r in readings) - 120_000
    production = reference.closed_by(everything, final_watermark)
    assert max(k[1] for k in production) >= reference_ms("2025-06-01T12:43:00Z"), "closes windows up to ~12:44"

    log = tmp_path / "stream.log"
    proc = sh.start(stream, log)
    try:
        wait_until("the streaming query to start", lambda: "started sensors-kafka" in log.read_text()
                   or proc.poll() is not None)
        sh.run(split)
        assert segments(server, "sensor-readings") == [(1, [0, 1]), (2, [2, 3])]
        sh.run(merge)
        assert segments(server, "sensor-readings") == [(3, [0, 1, 2, 3])]

        def complete() -> bool:
            assert proc.poll() is None, f"stream exited {proc.returncode}:\n{log.read_text()[-5000:]}"
            try:
                got = parquet_windows(spark, home / "spark-out" / "aggregates")
                return {k: v.readings for k, v in got.items()} == {k: v.readings for k, v in production.items()}
            except Exception as e:  # nothing written yet: no directory, or no file to take a schema from
                if "PATH_NOT_FOUND" in str(e) or "Unable to infer schema" in str(e):
                    return False
                raise
        wait_until("the streaming pipeline to write every window its watermark closes", complete)
        wait_until("the Kafka sink to hold them too",
                   lambda: len(read_topic(server.bootstrap, "sensor-aggregates")) >= len(production))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        status = proc.wait(300)
    out = log.read_text()
    assert status == 0 and "Traceback" not in out and "SIGINT: stopping" in out, out[-5000:]
    assert watermarks(out) == {"sensors-kafka": final_watermark, "sensors-parquet": final_watermark}, out[-2000:]
    reference.assert_same(parquet_windows(spark, home / "spark-out" / "aggregates"), production)
    reference.assert_same(kafka_windows(server.bootstrap, "sensor-aggregates"), production)

    out = sh.run(history)
    hist = reference.aggregates(readings_of(cut_by_time(records, reference_ms("2025-06-01T10:00:00Z"),
                                                        reference_ms("2025-06-01T11:00:00Z"))))
    both = set(hist) & set(production)
    same = sum(1 for k in both if hist[k] == production[k])
    assert f"{len(hist)} device windows from sensor-readings" in out, out[-3000:]
    assert (f"compared with production: same {same}, different {len(both) - same}, only_history 0, "
            f"only_production {len(production) - len(both)}") in out, out[-3000:]
    assert set(hist) <= set(production) and same > len(hist) * 9 // 10, "the page's description of it"

    # Resuming the same checkpoint with spark-submit, then with run.sh and the page's jar list: the topic has
    # nothing new, so no batch runs and nothing is written twice.
    for command in (submit, with_jars):
        out = sh.run(command)
        assert set(watermarks(out)) == {"sensors-kafka", "sensors-parquet"}, out[-3000:]
    reference.assert_same(parquet_windows(spark, home / "spark-out" / "aggregates"), production)
    reference.assert_same(kafka_windows(server.bootstrap, "sensor-aggregates"), production)


def reference_ms(iso: str) -> int:
    from spark_examples.generate import parse_time_ms

    return parse_time_ms(iso)
