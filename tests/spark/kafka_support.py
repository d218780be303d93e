"""What the end-to-end Spark tests share: running an example's command as a process, reading a topic back
without Spark, and turning outputs into tests/spark/reference.py's window aggregates."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from spark_examples.readings import Reading
from tests.spark import reference

ROOT = Path(__file__).resolve().parents[2]
_WATERMARK = re.compile(r"(sensors-\w+): last batch \S+, watermark (\S+)")


def example_command(module: str, *args: str, jars: str) -> list[str]:
    """An example's command as spark_examples/run.sh runs it, on local[2] with the connector jars."""
    return [sys.executable, "-m", module, *args, "--master", "local[2]", "--jars", jars,
            "--shuffle-partitions", "2", "--conf", "spark.ui.enabled=false"]


def run_example(module: str, *args: str, jars: str) -> str:
    """Runs an example's command to its end; returns its stderr and stdout."""
    cmd = example_command(module, *args, jars=jars)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    out = proc.stderr + proc.stdout
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{out[-6000:]}"
    return out


def watermarks(output: str) -> dict[str, int]:
    """The final watermark (epoch ms, 0 for none) of each query, from the streaming pipeline's last lines."""
    out = {}
    for name, text in _WATERMARK.findall(output):
        out[name] = 0 if text == "None" else int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    return out


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    value: bytes


def read_topic(bootstrap: str, topic: str, client: dict[str, Any] | None = None) -> list[Record]:
    """Every record of ``topic`` up to its end offsets, partition by partition, without a consumer group
    (``client``: librdkafka settings to add, e.g. for a secured listener)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", **(client or {})})
    try:
        parts = c.list_topics(topic, timeout=20).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        got: dict[int, list[Record]] = {p: [] for p in parts}
        while any(len(got[p]) < ends[p] for p in parts):
            msg = c.poll(10)
            assert msg is not None, f"timed out reading {topic}: {[(p, len(got[p]), ends[p]) for p in parts]}"
            assert msg.error() is None, msg.error()
            got[msg.partition()].append(Record(msg.partition(), msg.offset(), msg.value()))
        for p, recs in got.items():
            assert [r.offset for r in recs] == list(range(len(recs))), f"{topic}-{p} offsets are not dense"
        return [r for p in sorted(got) for r in got[p]]
    finally:
        c.close()


def readings_of(records: list[Record]) -> list[Reading]:
    return [Reading(**json.loads(r.value)) for r in records]


def parquet_windows(spark: Any, path: Path) -> dict[reference.WindowKey, reference.Agg]:
    return reference.from_rows(spark.read.parquet(str(path)).collect())


def kafka_windows(bootstrap: str, topic: str, window_ms: int = 60_000) -> dict[reference.WindowKey, reference.Agg]:
    return reference.from_rows((json.loads(r.value) for r in read_topic(bootstrap, topic)), window_ms)
