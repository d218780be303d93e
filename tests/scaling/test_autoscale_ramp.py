"""Automatic scaling follows a load ramp: an 8-partition topic that starts in one segment, with an
aggressive events-per-second policy, grows to at least four segments while the load is high and
shrinks back to one or two once it is low again, and a consumer group reads every record exactly
once in per-partition order throughout.

The server runs with fast auto-scaling (rate windows 1/2/4 s, a round every 0.5 s, a 2 s cooldown),
so the whole ramp takes well under a minute."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from millrace.client.segments import SegmentClient
from tests.scaling.test_client_continuity import (
    PARTITIONS,
    Group,
    check_exactly_once,
    confluent_group_member,
)
from tests.server_process import ServerProcess

TARGET = 100  # events/s per segment
LOW_RATE = 40  # records/s in total: below half the target even in a single segment, so everything is cold
HIGH_RATE = 2400  # records/s: 24x the target, enough to keep even eight segments over it
FAST_SCALING = ("--scale-windows", "1,2,4", "--scale-interval-seconds", "0.5", "--scale-cooldown-seconds", "2")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def server(tmp_path: Any) -> Iterator[ServerProcess]:
    srv = ServerProcess(str(tmp_path / "data"), *FAST_SCALING, "--log-level", "INFO").start()
    try:
        yield srv
    finally:
        srv.kill()


class Ramp:
    """An idempotent producer whose rate can be changed while it runs (keyed records ``r-<index>``)."""

    def __init__(self, server: ServerProcess, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True,
                                  "linger.ms": 5})
        self.topic = topic
        self.rate = LOW_RATE
        self.sent = 0
        self.produced: dict[int, tuple[int, int]] = {}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def set_rate(self, rate: int) -> None:
        self.rate = rate

    def _delivered(self, index: int) -> Any:
        def cb(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.errors.append(f"{index}: {err}")
            else:
                self.produced[index] = (msg.partition(), msg.offset())
        return cb

    def _run(self) -> None:
        last = time.monotonic()
        owed = 0.0
        while not self.stop.is_set():
            time.sleep(0.01)
            now = time.monotonic()
            owed += (now - last) * self.rate
            last = now
            while owed >= 1:
                i = self.sent
                self.producer.produce(self.topic, f"r-{i}".encode(), key=f"k{i % 256}".encode(),
                                      on_delivery=self._delivered(i))
                self.sent += 1
                owed -= 1
            self.producer.poll(0)
        remaining = self.producer.flush(30)
        if remaining:
            self.errors.append(f"{remaining} records still queued after flush")

    def __enter__(self) -> Ramp:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def test_load_ramp_scales_up_and_back_down(server: ServerProcess) -> None:
    topic = "ramp"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={
        "millrace.segments.initial": "1",
        "millrace.scaling.type": "by_event_rate",
        "millrace.scaling.target": str(TARGET),
        "millrace.scaling.factor": "2",
        "millrace.scaling.min.segments": "1",
    })])[topic].result(30)
    timeline: list[tuple[float, str, int]] = []  # (seconds since start, phase, open segments)

    group = Group()
    members = [threading.Thread(target=confluent_group_member, args=(server, topic, group, f"ramp-{n}", 1000),
                                daemon=True) for n in range(2)]
    for t in members:
        t.start()
    group.wait_assigned()

    with SegmentClient("127.0.0.1", server.native_port) as native, Ramp(server, topic) as ramp:
        t0 = time.monotonic()

        def segments(phase: str) -> int:
            count = len(native.describe_stream("kafka", topic)["segments"])
            timeline.append((round(time.monotonic() - t0, 1), phase, count))
            return count

        def watch(phase: str, done: Any, limit: float) -> int:
            deadline = time.monotonic() + limit
            while time.monotonic() < deadline:
                count = segments(phase)
                if done(count):
                    return count
                time.sleep(0.25)
            return segments(phase)

        # Low: a single segment stays a single segment.
        assert watch("low", lambda c: c != 1, 4.0) == 1, timeline
        ramp.set_rate(HIGH_RATE)
        peak = watch("high", lambda c: c >= 4, 30.0)
        assert peak >= 4, f"the high phase never reached 4 segments: {timeline}"
        peak = max(peak, watch("high", lambda c: False, 3.0))  # hold the load a little longer
        ramp.set_rate(LOW_RATE)
        low = watch("low again", lambda c: c <= 2, 60.0)
        assert low <= 2, f"the low phase did not scale back down to 1 or 2 segments: {timeline}"
        high_sent = ramp.sent
    print("timeline (s, phase, open segments):", timeline)
    scaled = [line.strip() for line in server.output if "auto-scaling kafka/ramp" in line]
    print("\n".join(scaled))

    assert not ramp.errors, f"{len(ramp.errors)} failed deliveries, first: {ramp.errors[:5]}"
    group.drain(len(ramp.produced))
    for t in members:
        t.join(30)
    assert not group.errors, f"consumer errors: {group.errors[:5]}"
    check_exactly_once(ramp.sent, ramp.produced, group.consumed)
    assert high_sent > HIGH_RATE * 3
    assert any("scale-up" in line for line in scaled) and any("scale-down" in line for line in scaled), scaled
