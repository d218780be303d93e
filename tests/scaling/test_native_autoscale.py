"""A native stream scales automatically as Pravega's does: one segment (one partition) under an
events-per-second policy and a writer far above it splits again and again, each split carving the
partitions it cuts, while the writer keeps writing; a reader group then reads every event once, in
order per key. (A Kafka topic's single partition could not split at all.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from millrace import ScalingPolicy, StreamManager, StringSerializer
from tests.scaling.test_autoscale_ramp import FAST_SCALING
from tests.server_process import ServerProcess

pytestmark = pytest.mark.timeout(180)
KEYS = 32


@pytest.fixture
def server(tmp_path: Any) -> Iterator[ServerProcess]:
    srv = ServerProcess(str(tmp_path / "data"), *FAST_SCALING, "--log-level", "INFO").start()
    try:
        yield srv
    finally:
        srv.kill()


def test_a_native_stream_splits_by_its_policy_under_a_writer(server: ServerProcess) -> None:
    scope, stream = "auto", "s"
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, stream, initial_segments=1,
                         scaling=ScalingPolicy.by_event_rate(100, scale_factor=2, min_segments=1))
        writer = sm.create_writer(scope, stream, StringSerializer(), writer_id="auto-writer")
        stop = threading.Event()
        written = [0]

        def write() -> None:
            while not stop.is_set():
                i = written[0]
                writer.write_event(f"k{i % KEYS}:{i // KEYS}", routing_key=f"k{i % KEYS}")
                written[0] = i + 1
                if i % 50 == 49:
                    writer.flush()
                    time.sleep(0.02)
            writer.flush()

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        deadline = time.monotonic() + 90
        while len(sm.describe_stream(scope, stream).segments) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        stop.set()
        thread.join(60)
        writer.close()
        total = written[0] - written[0] % KEYS  # whole rounds of keys only, so every key has the same count
        described = sm.describe_stream(scope, stream)
        assert len(described.segments) >= 3, described
        # Splits only: each split retired the partition it cut and added one per piece, so the
        # partitions are the stream's segments ever made (16 fixed slices would show 16).
        made = sum(len(epoch.created) for epoch in described.history)
        assert described.partition_count == made

        group = sm.create_reader_group("auto-readers", scope, stream, serializer=StringSerializer())
        reader = group.create_reader("r")
        read: list[tuple[str, int]] = []
        while (event := reader.read_next_event(timeout=2.0)) is not None:
            if event.data is not None:
                key, _, seq = event.data.partition(":")
                read.append((key, int(seq)))
        reader.close()

    assert len(read) == written[0] and len(set(read)) == len(read)  # each event once
    for k in range(KEYS):
        seqs = [seq for key, seq in read if key == f"k{k}"]
        assert seqs == list(range(len(seqs))) and len(seqs) >= total // KEYS  # in order, none missing
