"""A native stream on a three-node cluster splits anywhere and merges back while a writer writes through
one node and the scaling goes through another: the node that carves the stream's partitions is not the
one serving the appends, which learns of the retirement from the sealed segment and its reload
(``streams/partitions/loading.current_record``). Every event is read back once, in order per key."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from millrace import StreamManager, StringSerializer
from tests.cluster.serve_cluster import Cluster, wait_for


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, zk_hosts) as c:
        yield c


def test_a_native_stream_scaled_through_another_node_keeps_order_and_exactly_once(cluster: Cluster) -> None:
    first, second, third = cluster.nodes
    scope, stream, keys, total = "elastic", "s", 16, 4000
    with StreamManager(f"tcp://127.0.0.1:{first.native_port}", timeout=30.0, reconnect_timeout=120.0) as writing_sm, \
            StreamManager(f"tcp://127.0.0.1:{second.native_port}", timeout=30.0) as scaling_sm, \
            StreamManager(f"tcp://127.0.0.1:{third.native_port}", timeout=30.0) as reading_sm:
        writing_sm.create_scope(scope)
        writing_sm.create_stream(scope, stream, initial_segments=1)
        writer = writing_sm.create_writer(scope, stream, StringSerializer(), writer_id="cluster-writer")
        progress = [0]
        failures: list[BaseException] = []

        def write() -> None:
            try:
                for i in range(total):
                    writer.write_event(f"k{i % keys}:{i // keys}", routing_key=f"k{i % keys}")
                    if i % 100 == 99:
                        writer.flush()
                        progress[0] = i + 1
                writer.flush()
                progress[0] = total
            except BaseException as exc:  # noqa: BLE001 - reported by the test below
                failures.append(exc)

        writing = threading.Thread(target=write, daemon=True)
        writing.start()

        def segments() -> list[object]:
            return [s.segment for s in scaling_sm.describe_stream(scope, stream).segments]

        wait_for(lambda: progress[0] >= 1000 or bool(failures), "1000 events written")
        (whole,) = segments()
        scaling_sm.split_segment(scope, stream, whole, at=[0.3])
        wait_for(lambda: progress[0] >= 2000 or bool(failures), "2000 events written")
        scaling_sm.split_segment(scope, stream, segments()[1], pieces=3)
        wait_for(lambda: progress[0] >= 3000 or bool(failures), "3000 events written")
        scaling_sm.merge_segments(scope, stream, segments())
        writing.join(180)
        assert not failures, failures
        assert progress[0] == total
        writer.close()

        group = reading_sm.create_reader_group("cluster-readers", scope, stream, serializer=StringSerializer())
        reader = group.create_reader("r1")
        read: list[tuple[str, int]] = []
        deadline = time.monotonic() + 120
        while len(read) < total and time.monotonic() < deadline:
            event = reader.read_next_event(timeout=1.0)
            if event is not None and event.data is not None:
                key, _, seq = event.data.partition(":")
                read.append((key, int(seq)))
        reader.close()
        described = reading_sm.describe_stream(scope, stream)

    assert [(s.segment.key_start, s.segment.key_end) for s in described.segments] == [(0.0, 1.0)]
    assert described.partition_count == 1 + 2 + 3
    assert len(read) == total and len(set(read)) == total
    for k in range(keys):
        assert [seq for key, seq in read if key == f"k{k}"] == list(range(total // keys))
