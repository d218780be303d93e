"""Clients read each other's batches: kafka-python, confluent-kafka, kcat and the Java clients 3.9 and 4.x
each write with their own codecs into one topic (the server stores every batch as sent), then every one of them
reads the whole topic back and must see exactly the same records at the same offsets."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from compat_tests.common import Placed, Rec, check_consumed, expect_dense, records_to_lines
from compat_tests.java_support import VERSIONS, missing, placed, run_java
from tests.server_process import ServerProcess

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 4
HAVE_KCAT = shutil.which("kcat") is not None  # without it, the others still interoperate


def recs_for(writer: str, codec: str, n: int = 8) -> list[Rec]:
    out = []
    for i in range(n):
        key: bytes | None = None if i == 3 else f"{writer}-{codec}-key-{i}".encode()
        value: bytes | None = None if i == 5 else f"{writer}-{codec}-value-{i}".encode()
        headers = (("writer", writer.encode()), ("codec", codec.encode())) if i % 2 == 0 else ()
        out.append(Rec(key, value, headers))
    return out


def write_kafka_python(bootstrap: str, topic: str, partition: int, codec: str) -> list[Rec]:
    recs = recs_for("kafka-python", codec)
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type=codec, linger_ms=20)
    futures = [p.send(topic, key=r.key, value=r.value, headers=list(r.headers), partition=partition) for r in recs]
    p.flush(30)
    metas = [f.get(30) for f in futures]
    p.close(10)
    assert [m.partition for m in metas] == [partition] * len(recs)
    return recs


def write_confluent(bootstrap: str, topic: str, partition: int, codec: str) -> list[Rec]:
    recs = recs_for("confluent", codec)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "compression.type": codec, "linger.ms": 20})
    for r in recs:
        p.produce(topic, key=r.key, value=r.value, headers=list(r.headers) or None, partition=partition)
    assert p.flush(30) == 0
    return recs


def write_kcat(bootstrap: str, topic: str, partition: int, codec: str) -> list[Rec]:
    # kcat's -H applies to every line, and -Z turns an empty key or value into NULL.
    lines = [f"kcat-{codec}-key-{i}:kcat-{codec}-value-{i}" for i in range(6)] + [":no-key", "no-value:"]
    subprocess.run([shutil.which("kcat") or "kcat", "-b", bootstrap, "-P", "-t", topic, "-p", str(partition),
                    "-z", codec, "-K", ":", "-Z", "-H", "writer=kcat", "-X", "linger.ms=20"],
                   input="\n".join(lines) + "\n", text=True, check=True, timeout=60, capture_output=True)
    headers = (("writer", b"kcat"),)
    return ([Rec(f"kcat-{codec}-key-{i}".encode(), f"kcat-{codec}-value-{i}".encode(), headers) for i in range(6)]
            + [Rec(None, b"no-key", headers), Rec(b"no-value", None, headers)])


def read_kafka_python(bootstrap: str, topic: str, want: int) -> list[Placed]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        c.assign([KpTopicPartition(topic, p) for p in range(PARTITIONS)])
        c.seek_to_beginning()
        got: list[Placed] = []
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=300).values():
                got += [Placed(m.partition, m.offset, Rec(m.key, m.value, tuple(m.headers or ()))) for m in msgs]
        return got
    finally:
        c.close()


def read_confluent(bootstrap: str, topic: str, want: int) -> list[Placed]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"interop-{topic}", "enable.auto.commit": False})
    try:
        c.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got: list[Placed] = []
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            for m in c.consume(100, timeout=0.3):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    continue
                got.append(Placed(m.partition(), m.offset(), Rec(m.key(), m.value(), tuple(m.headers() or ()))))
        return got
    finally:
        c.close()


def _enc(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


def read_kcat(bootstrap: str, topic: str, want: int) -> list[Placed]:
    out = subprocess.run([shutil.which("kcat") or "kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e",
                          "-J", "-q"], text=True, check=True, timeout=60, capture_output=True).stdout
    got = []
    for line in out.splitlines():
        m: dict[str, Any] = json.loads(line)
        flat = m.get("headers") or []
        headers = tuple((k, None if v is None else v.encode()) for k, v in zip(flat[0::2], flat[1::2], strict=True))
        got.append(Placed(m["partition"], m["offset"], Rec(_enc(m["key"]), _enc(m["payload"]), headers)))
    return got


@pytest.fixture(scope="module")
def written(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[int, list[Placed]]]:
    topic = f"interop-{int(time.time() * 1000)}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    # Partition p gets batches from writers in this order; each batch's codec differs from its neighbours'.
    plan = [
        (0, write_kafka_python, "gzip"), (0, write_confluent, "zstd"), (0, write_kcat, "lz4"),
        (1, write_confluent, "snappy"), (1, write_kafka_python, "lz4"), (1, write_kcat, "none"),
        (2, write_kcat, "zstd"), (2, write_kafka_python, "snappy"), (2, write_confluent, "gzip"),
        (3, write_kafka_python, "zstd"), (3, write_kcat, "gzip"), (3, write_confluent, "lz4"),
    ]
    sent: dict[int, list[Rec]] = {}
    for partition, write, codec in plan:
        if write is write_kcat and not HAVE_KCAT:
            continue
        sent.setdefault(partition, []).extend(write(server.bootstrap, topic, partition, codec))
    # The Java clients write too, with their default producer (idempotent), after everyone else.
    for version, codec in zip(VERSIONS, ["snappy", "zstd"], strict=True):
        if missing(version):
            continue
        java_recs = recs_for(f"java-{version}", codec)
        work = tmp_path_factory.mktemp(f"interop-java-{version}")
        (work / "records.tsv").write_text(records_to_lines(java_recs))
        scenario = f"write:{topic}:3:{codec}"
        run = run_java(version, server.bootstrap, work, "unused", [scenario], timeout=120)
        offsets = [e["offset"] for e in sorted(run.of(scenario, "produced"), key=lambda e: e["i"])]
        assert offsets == list(range(len(sent[3]), len(sent[3]) + len(java_recs))), offsets
        sent[3].extend(java_recs)
    expected: dict[int, list[Placed]] = {}
    for partition, recs in sent.items():
        expected.update(expect_dense(recs, [(partition, i) for i in range(len(recs))]))
    return topic, expected


def total(expected: dict[int, list[Placed]]) -> int:
    return sum(len(v) for v in expected.values())


@pytest.mark.parametrize("reader", ["kafka-python", "confluent-kafka", "kcat"])
def test_python_and_c_readers(server: ServerProcess, written: tuple[str, dict[int, list[Placed]]], reader: str,
                              ) -> None:
    if reader == "kcat" and not HAVE_KCAT:
        pytest.skip("kcat is not installed (scripts/bootstrap.sh installs it with apt)")
    topic, expected = written
    read = {"kafka-python": read_kafka_python, "confluent-kafka": read_confluent, "kcat": read_kcat}[reader]
    check_consumed(expected, read(server.bootstrap, topic, total(expected)))


@pytest.mark.parametrize("version", VERSIONS)
def test_java_readers(server: ServerProcess, written: tuple[str, dict[int, list[Placed]]], version: str,
                      tmp_path: Path) -> None:
    reason = missing(version)
    if reason:
        pytest.skip(reason)
    topic, expected = written
    scenario = f"read:{topic}:{total(expected)}"
    run = run_java(version, server.bootstrap, tmp_path, "unused", [scenario], timeout=120)
    check_consumed(expected, [placed(e) for e in run.of(scenario, "consumed")])
