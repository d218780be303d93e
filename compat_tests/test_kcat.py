"""kcat (Debian's package, librdkafka inside), unmodified, against a real Millrace server:
-P (every codec, keys, headers, null keys and values, a 1 MiB message), -C -o beginning -e, -L, -Q, -G."""

from __future__ import annotations

import json
import random
import shutil
import string
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from compat_tests.common import BIG_VALUE_BYTES, CODECS, MAX_REQUEST_BYTES, wait_for
from compat_tests.conftest import DEFAULT_PARTITIONS
from tests.server_process import ServerProcess

KCAT = shutil.which("kcat")
pytestmark = [
    pytest.mark.skipif(KCAT is None, reason="kcat is not installed (scripts/bootstrap.sh installs it with apt)"),
    pytest.mark.timeout(120),
]


def kcat(server: ServerProcess, *args: str, stdin: str | None = None, timeout: float = 60.0) -> str:
    cmd = [KCAT or "kcat", "-b", server.bootstrap, "-X", f"message.max.bytes={MAX_REQUEST_BYTES}", *args]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-3000:]}"
    return proc.stdout


def consume_json(server: ServerProcess, topic: str, *extra: str) -> list[dict[str, Any]]:
    out = kcat(server, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q", *extra)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def by_partition(msgs: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for m in msgs:
        out.setdefault(m["partition"], []).append(m)
    return out


def headers_of(m: dict[str, Any]) -> list[tuple[str, str]]:
    flat = m.get("headers") or []
    return list(zip(flat[0::2], flat[1::2], strict=True))


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume(server: ServerProcess, topic: str, codec: str, tmp_path: Path) -> None:
    z = [] if codec == "none" else ["-z", codec]
    # Keyed lines to partition 0: key and value split at ':'; with -Z an empty key or value is NULL.
    lines = ["k0:v0", "k1:value one", ":null key", "k3:", "k4:" + "x" * 5000, "k5:last"]
    kcat(server, "-P", "-t", topic, "-p", "0", *z, "-K", ":", "-Z", "-H", "h1=v1", "-H", "h2=",
         stdin="\n".join(lines) + "\n")
    # One 1 MiB message from a file (a file argument is one message), to partition 1.
    big = "".join(random.Random(codec).choices(string.ascii_letters + string.digits, k=BIG_VALUE_BYTES))
    (tmp_path / "big").write_text(big)
    kcat(server, "-P", "-t", topic, "-p", "1", *z, "-k", "bigkey", str(tmp_path / "big"))
    # Unkeyed lines spread by the partitioner.
    kcat(server, "-P", "-t", topic, *z, stdin="".join(f"spread-{i}\n" for i in range(20)))

    msgs = consume_json(server, topic)
    parts = by_partition(msgs)
    for partition, ms in parts.items():
        assert [m["offset"] for m in ms] == list(range(len(ms))), f"partition {partition} offsets not dense"
    p0 = parts[0]
    keyed = [(m["key"], m["payload"], headers_of(m)) for m in p0 if not (m["payload"] or "").startswith("spread-")]
    hdrs = [("h1", "v1"), ("h2", "")]
    assert keyed == [("k0", "v0", hdrs), ("k1", "value one", hdrs), (None, "null key", hdrs), ("k3", None, hdrs),
                     ("k4", "x" * 5000, hdrs), ("k5", "last", hdrs)]
    assert [m["offset"] for m in p0[:6]] == list(range(6))
    big_msgs = [m for m in parts[1] if m["key"] == "bigkey"]
    assert len(big_msgs) == 1 and big_msgs[0]["offset"] == 0 and big_msgs[0]["payload"] == big
    spread = [m["payload"] for m in msgs if (m["payload"] or "").startswith("spread-")]
    assert sorted(spread) == sorted(f"spread-{i}" for i in range(20))
    # Per partition, the unkeyed lines keep their input order.
    for ms in parts.values():
        seq = [int(m["payload"].split("-")[1]) for m in ms if (m["payload"] or "").startswith("spread-")]
        assert seq == sorted(seq)


def test_metadata_list(server: ServerProcess, topic: str) -> None:
    kcat(server, "-P", "-t", topic, stdin="a\nb\n")
    md = json.loads(kcat(server, "-L", "-J", "-t", topic))
    assert [b["id"] for b in md["brokers"]] and all(":" in b["name"] for b in md["brokers"]), md["brokers"]
    (t,) = [t for t in md["topics"] if t["topic"] == topic]
    assert "error" not in t or not t["error"], t
    assert sorted(p["partition"] for p in t["partitions"]) == list(range(DEFAULT_PARTITIONS))
    broker_ids = {b["id"] for b in md["brokers"]}
    assert all(p["leader"] in broker_ids for p in t["partitions"]), t
    # Plain text listing too, as people use it.
    text = kcat(server, "-L")
    assert f'topic "{topic}" with {DEFAULT_PARTITIONS} partitions' in text, text


def test_query_offsets_by_time(server: ServerProcess, topic: str) -> None:
    kcat(server, "-P", "-t", topic, "-p", "0", stdin="".join(f"early-{i}\n" for i in range(4)))
    time.sleep(1.2)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    kcat(server, "-P", "-t", topic, "-p", "0", stdin="".join(f"late-{i}\n" for i in range(3)))

    def query(ts: int) -> int:
        out = kcat(server, "-Q", "-t", f"{topic}:0:{ts}")
        # "<topic> [0] offset N"
        line = next(line for line in out.splitlines() if "offset" in line)
        return int(line.split()[-1])

    assert query(cut) == 4
    assert query(-1) == 7  # latest
    assert query(-2) == 0  # earliest


def test_balanced_consumer_group(server: ServerProcess, topic: str, group: str) -> None:
    kcat(server, "-P", "-t", topic, stdin="".join(f"first-{i}\n" for i in range(9)))

    def group_consume() -> list[dict[str, Any]]:
        # No "-o beginning" here: kcat's rebalance callback would then assign that offset and ignore the
        # group's commits; auto.offset.reset only applies where the group has none.
        out = kcat(server, "-G", group, "-e", "-J", "-q", "-X", "auto.offset.reset=earliest",
                   "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100", topic, timeout=45)
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    first = group_consume()
    assert sorted(m["payload"] for m in first) == sorted(f"first-{i}" for i in range(9))
    kcat(server, "-P", "-t", topic, stdin="".join(f"second-{i}\n" for i in range(5)))
    # Same group again: resumes from the committed offsets, so only the new records.
    second = wait_for("second run", group_consume)
    assert sorted(m["payload"] for m in second) == sorted(f"second-{i}" for i in range(5)), second
