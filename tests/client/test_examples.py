"""The examples docs/client.md walks through run as written against a real server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.server_process import ServerProcess

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_streams_and_tables_example(server: ServerProcess, uri: str) -> None:
    out = run(os.path.join(EXAMPLES, "streams_and_tables.py"), uri)
    assert "epoch 1: 3 segments, last scale: manual" in out
    assert "a stale version is refused" in out
    assert "sensor-7 = offline" in out
    assert "room-1: {'humidity': '40', 'temperature': '21.5'}" in out
    assert out.rstrip().endswith("streams left: []")


def test_kafka_interop_example(server: ServerProcess, uri: str) -> None:
    out = run(os.path.join(EXAMPLES, "kafka_interop.py"), uri, server.bootstrap)
    readings = [line for line in out.splitlines() if line.startswith("sensor-7 ")]
    expected = [f"sensor-7 {{\"sensor\":\"sensor-7\",\"reading\":{20 + i / 10}}}" for i in range(10)]
    assert readings == [*expected, 'sensor-7 {"sensor":"sensor-7","reading":99.9}']


def test_transactions_example(server: ServerProcess, uri: str) -> None:
    out = run(os.path.join(EXAMPLES, "transactions.py"), uri, server.bootstrap)
    assert "second transaction: ABORTED" in out
    assert "found again: OPEN" in out
    read = [line for line in out.splitlines() if line.startswith("read: ")]
    assert read == ["read: order-1 paid", "read: order-1 placed", "read: order-2 placed", "read: order-4 placed"]


def test_byte_streams_example(server: ServerProcess, uri: str) -> None:
    out = run(os.path.join(EXAMPLES, "byte_streams.py"), uri).splitlines()
    assert out[:6] == ["tail after 3 entries: 24", "first line: entry 1 | next offset: 8", "last line: entry 3",
                       "head after truncation: 8", "a new reader starts with: entry 2",
                       "a read at the tail with a 0.2 s timeout: None"]
    assert out[6:] == ["the follower woke with: entry 4",
                       "after sealing, the whole log: ['entry 2', 'entry 3', 'entry 4']"]


def test_batch_reads_example(server: ServerProcess, uri: str) -> None:
    out = run(os.path.join(EXAMPLES, "batch_reads.py"), uri).splitlines()
    ranges = [line for line in out if line.startswith("segment ")]
    assert len(ranges) >= 2 and any(line.startswith("segment 1.") for line in ranges)  # both epochs
    assert f"{len(ranges)} ranges, 1000 events" in out
    assert [line for line in out if line.startswith("sensor-")] == [
        f"sensor-{n}: sum of readings {sum(range(250))}" for n in (1, 2, 3, 4)]
    assert out[-1] == "after the halfway cut: 500 events"


def test_reader_groups_example(server: ServerProcess, uri: str) -> None:
    out = run(os.path.join(EXAMPLES, "reader_groups.py"), uri).splitlines()
    assert out[:3] == ["read 20 orders, each once: True", "online: ['alice', 'bob']",
                       "after the split: 10 more, per-customer order kept: True"]
    assert out[3].startswith("checkpoint before-refund-run: shop/orders[0.1@") and out[3].endswith(", 1.2@0, 1.3@0]")
    assert out[4:6] == ["checkpoint event returned: ['before-refund-run']", "after reset_to: [30, 31, 32, 33, 34]"]
    assert out[6].startswith("fetched again: {'order': 3") and "'customer': 'customer-" in out[6]
    assert out[7:] == ["bounded read up to the cut: True, read completed: True",
                       "after truncation: told of lost data: True, then read [45, 46, 47, 48, 49]",
                       "automatic checkpoint after 5 events, its cut at the tail: True",
                       "group deleted"]


def test_asyncio_client_example(server: ServerProcess, uri: str) -> None:
    out = run(os.path.join(EXAMPLES, "asyncio_client.py"), uri).splitlines()
    assert out[0].startswith("first event at partition ")
    assert out[1:] == ["read: ['order-1 placed', 'order-2 placed', 'order-3 placed', 'order-4 placed', "
                       "'order-5 placed']",
                       "november: ['2026-11-01', '2026-11-02']",
                       "update gave versions for the puts only: [False, True, True]"]


def test_reader_group_notifications_as_documented(server: ServerProcess, uri: str, tmp_path: Path) -> None:
    """The notifications snippet of docs/client.md, run as written (only the server's address swapped)."""
    with open(os.path.join(os.path.dirname(EXAMPLES), "docs", "client.md"), encoding="utf-8") as docs:
        blocks = re.findall(r"```python\n(.*?)```", docs.read(), re.S)
    snippet = next(b for b in blocks if "end_of_data_notifier(interval" in b)
    script = tmp_path / "notifications.py"
    script.write_text(snippet.replace("tcp://127.0.0.1:9090", uri), encoding="utf-8")
    assert run(str(script)).splitlines() == [
        "SegmentNotification(number_of_segments=1, number_of_readers=0)",
        "SegmentNotification(number_of_segments=2, number_of_readers=1)",
        "EndOfDataNotification()"]
