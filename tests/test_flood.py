"""Backpressure under a flood: producers write as fast as they can (Kafka acks=0 and acks=all, and the
native protocol) into a server with small byte budgets. The server's RSS must stay within what its
budgets allow plus a margin, every acknowledged record must be readable afterwards, and another
client must still get answers while the flood runs."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import psutil
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millrace.client.segments import SegmentClient
from millrace.gateway.kafka_protocol.codec import request_class
from millrace.store.budget import Admission, ByteBudget, charging, current_admission
from tests.kafka.wire import FETCH, KafkaWire
from tests.server_process import ServerProcess

MIB = 1024 * 1024
# A flood runs until its writers have sent FLOOD_TARGET times what the server may hold (at least
# MIN_FLOOD_SECONDS), or for MAX_FLOOD_SECONDS on a machine too slow to get there.
FLOOD_TARGET = 2.5
MIN_FLOOD_SECONDS = 4.0
MAX_FLOOD_SECONDS = 30.0
RECORD_BYTES = 1024
# Small budgets, so the flood pushes many times more bytes through the server than it may hold.
CONTAINERS = 2
CACHE_MB = 16
CONTAINER_BUDGET_MB = 8
CONNECTION_BUDGET_MB = 2
# A budget counts each byte once; the server briefly holds a few copies of it (request frame,
# enveloped batch, log frame, cache), and the interpreter its own overhead.
COPIES = 3
MARGIN_MB = 64
# Liveness, not performance: a metadata round trip during the flood must finish within this.
ANSWER_WITHIN_SECONDS = 20.0


def allowance_mb(connections: int) -> float:
    """RSS the server may grow by over its idle size: its cache plus its budgets' worth of copies."""
    return CACHE_MB + COPIES * (CONTAINERS * CONTAINER_BUDGET_MB + connections * CONNECTION_BUDGET_MB) + MARGIN_MB


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak = self.proc.memory_info().rss
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.Error:
                return


def record(producer: int, seq: int) -> bytes:
    """A 1 KiB value naming its producer and sequence number, so a read-back can check content."""
    return struct.pack(">II", producer, seq) + bytes(RECORD_BYTES - 8)


class Flood:
    """What the writers have sent between them, and the signal for them to stop."""

    def __init__(self, target_bytes: float) -> None:
        self.target_bytes = target_bytes
        self.stop = threading.Event()
        self.sent = 0
        self._lock = threading.Lock()

    def wrote(self, n: int) -> None:
        with self._lock:
            self.sent += n


def run_flood(flood: Flood, writers: list[Callable[[], None]], probe: Callable[[], None]) -> list[float]:
    """Run each writer on its own thread until ``flood`` has its target; meanwhile call ``probe``
    (another client's round trip) once a second. Returns the probe's round-trip times; raises what a
    writer raised."""
    failures: list[BaseException] = []

    def guarded(writer: Callable[[], None]) -> None:
        try:
            writer()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread below
            failures.append(exc)

    threads = [threading.Thread(target=guarded, args=(w,)) for w in writers]
    times: list[float] = []
    for t in threads:
        t.start()
    started = time.monotonic()
    while True:
        elapsed = time.monotonic() - started
        if elapsed >= MAX_FLOOD_SECONDS or (elapsed >= MIN_FLOOD_SECONDS and flood.sent >= flood.target_bytes):
            break
        start = time.monotonic()
        probe()
        times.append(time.monotonic() - start)
        time.sleep(max(0.0, 1.0 - times[-1]))
    flood.stop.set()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a flooding writer did not finish"
    if failures:
        raise failures[0]
    return times


@pytest.fixture
def server(tmp_path):
    s = ServerProcess(str(tmp_path / "data"), "--containers", str(CONTAINERS), "--cache-mb", str(CACHE_MB),
                      "--container-budget-mb", str(CONTAINER_BUDGET_MB),
                      "--connection-budget-mb", str(CONNECTION_BUDGET_MB)).start()
    yield s
    s.kill()


def test_kafka_flood_stays_within_budget_and_loses_nothing_acknowledged(server):
    topics = {acks: [f"flood-{acks}-{i}" for i in range(2)] for acks in ("0", "all")}
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(t, 2, 1) for names in topics.values() for t in names]).values():
        f.result(30)
    sampler = RssSampler(server.proc.pid)
    idle = sampler.peak
    sampler.start()
    acked: dict[tuple[str, int, int], bytes] = {}  # (topic, partition, offset) -> value
    errors: list[str] = []
    lock = threading.Lock()

    connections = 2 * len(topics["0"]) + 2
    flood = Flood(FLOOD_TARGET * allowance_mb(connections) * MIB)

    def write(producer_id: int, topic: str, acks: str) -> None:
        p = Producer({"bootstrap.servers": server.bootstrap, "acks": acks, "linger.ms": 5,
                      "queue.buffering.max.messages": 20000, "enable.idempotence": acks == "all"})

        def delivered(err, msg) -> None:  # noqa: ANN001 - librdkafka's callback
            if acks != "all":
                return
            with lock:
                if err is not None:
                    errors.append(str(err))
                else:
                    acked[(msg.topic(), msg.partition(), msg.offset())] = msg.value()

        seq = 0
        while not flood.stop.is_set():
            try:
                p.produce(topic, record(producer_id, seq), on_delivery=delivered)
                seq += 1
                flood.wrote(RECORD_BYTES)
            except BufferError:
                p.poll(0.005)
            if seq % 500 == 0:
                p.poll(0)
        assert p.flush(90) == 0, f"{topic}: records still unsent after the flood"

    writers = [functools.partial(write, i, t, acks)
               for i, (acks, t) in enumerate((a, t) for a, names in topics.items() for t in names)]
    assert len(writers) + 2 == connections
    rtts = run_flood(flood, writers, lambda: admin.list_topics(timeout=ANSWER_WITHIN_SECONDS))
    sampler.done.set()
    sampler.join()

    assert not errors, f"acks=all deliveries failed: {errors[:5]}"
    print(f"kafka flood: metadata round trips max {max(rtts):.2f}s")
    assert max(rtts) < ANSWER_WITHIN_SECONDS
    # How much the server took in (high watermarks): the flood must dwarf what it may hold, or the
    # RSS bound below would prove nothing (without budgets, RSS grows by a third to a half of it).
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "flood-check",
                         "enable.auto.commit": False, "fetch.max.bytes": 8 * MIB})
    try:
        check_kafka_flood(consumer, topics, acked, idle, sampler.peak, len(writers))
    finally:
        consumer.close()


def check_kafka_flood(consumer: Consumer, topics: dict[str, list[str]], acked: dict[tuple[str, int, int], bytes],
                      idle: int, peak: int, producers: int) -> None:
    ingested = 0
    for names in topics.values():
        for t in names:
            for part in range(2):
                ingested += consumer.get_watermark_offsets(TopicPartition(t, part), timeout=30)[1] * RECORD_BYTES
    grown_mb = (peak - idle) / MIB
    bound_mb = allowance_mb(connections=producers + 2)
    print(f"kafka flood: ingested {ingested / MIB:.0f} MiB, RSS grew {grown_mb:.0f} MiB "
          f"(bound {bound_mb:.0f})")
    assert ingested > 1.5 * bound_mb * MIB, "the flood was too small to test the budgets"
    assert grown_mb < bound_mb
    # Every acknowledged record is readable, with its content.
    assert acked
    wanted = dict(acked)
    consumer.assign([TopicPartition(t, p, 0) for t in topics["all"] for p in range(2)])
    deadline = time.monotonic() + 120
    while wanted and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=1.0):
            if msg.error() is not None:
                raise KafkaException(msg.error())
            value = wanted.pop((msg.topic(), msg.partition(), msg.offset()), None)
            assert value is None or value == msg.value()
    assert not wanted, f"{len(wanted)} acknowledged records not readable, e.g. {next(iter(wanted))}"


def test_native_flood_stays_within_budget_and_loses_nothing_acknowledged(server):
    segments = [f"flood/native/{i}" for i in range(3)]
    payload_bytes = 64 * 1024
    with SegmentClient("127.0.0.1", server.native_port) as setup:
        for name in segments:
            setup.create_segment(name)
    sampler = RssSampler(server.proc.pid)
    idle = sampler.peak
    sampler.start()
    acked: dict[str, dict[int, int]] = {name: {} for name in segments}  # offset -> sequence
    sent = [0]
    lock = threading.Lock()

    def payload(seq: int) -> bytes:
        return struct.pack(">I", seq) + os.urandom(16) + bytes(payload_bytes - 20)

    connections = len(segments) + 2
    flood = Flood(FLOOD_TARGET * allowance_mb(connections) * MIB)

    def write(name: str) -> None:
        # No client-side limit on requests in flight: only the server's backpressure (TCP stops
        # draining) keeps this writer from running away.
        with SegmentClient("127.0.0.1", server.native_port, timeout=120) as client:
            futures: list[tuple[int, Future]] = []
            seq = 0
            while not flood.stop.is_set():
                futures.append((seq, client.append_async(name, payload(seq))))
                seq += 1
                flood.wrote(payload_bytes)
            for s, f in futures:
                offset = f.result(120)
                with lock:
                    acked[name][offset] = s
                    sent[0] += payload_bytes

    writers = [functools.partial(write, name) for name in segments]
    with SegmentClient("127.0.0.1", server.native_port, timeout=ANSWER_WITHIN_SECONDS) as other:
        rtts = run_flood(flood, writers, lambda: other.get_info(segments[0]))
    sampler.done.set()
    sampler.join()

    grown_mb = (sampler.peak - idle) / MIB
    bound_mb = allowance_mb(connections)
    print(f"native flood: appended {sent[0] / MIB:.0f} MiB, RSS grew {grown_mb:.0f} MiB (bound {bound_mb:.0f}), "
          f"round trips max {max(rtts):.2f}s")
    assert max(rtts) < ANSWER_WITHIN_SECONDS
    assert sent[0] > 1.5 * bound_mb * MIB, "the flood was too small to test the budgets"
    assert grown_mb < bound_mb
    with SegmentClient("127.0.0.1", server.native_port) as reader:
        for name in segments:
            offsets = sorted(acked[name])
            assert offsets == [i * payload_bytes for i in range(len(offsets))]
            data = bytearray()
            while len(data) < len(offsets) * payload_bytes:
                got = reader.read(name, len(data), 4 * MIB)
                assert got.data, f"{name}: nothing at {len(data)}"
                data += got.data
            for offset in offsets:
                assert struct.unpack_from(">I", data, offset)[0] == acked[name][offset]


def test_one_request_larger_than_the_budgets_is_admitted_alone(server):
    """Budgets never refuse: an append bigger than the connection's and the container's budgets
    goes through, and the connection reads again once it is durable."""
    big = os.urandom((CONTAINER_BUDGET_MB + 1) * MIB)
    with SegmentClient("127.0.0.1", server.native_port) as client:
        client.create_segment("flood/big")
        assert client.append("flood/big", big) == 0
        assert client.append("flood/big", b"after") == len(big)
        data = bytearray()
        while len(data) < len(big) + 5:
            data += client.read("flood/big", len(data), 4 * MIB).data
        assert bytes(data) == big + b"after"


def test_budget_drains_at_its_low_water_mark_and_never_refuses():
    budget = ByteBudget(100, "b")
    budget.acquire(250)  # more than the limit: admitted
    assert budget.full and budget.peak == 250
    drained: list[int] = []
    budget.when_drained(lambda: drained.append(budget.used))
    budget.release(160)
    assert budget.full is False and not drained  # 90 held: below the limit, above low water (50)
    budget.release(50)
    assert drained == [40]
    budget.when_drained(lambda: drained.append(-1))  # already drained: called at once
    assert drained == [40, -1]
    with pytest.raises(RuntimeError):
        budget.release(41)


def test_budget_backlog_is_polled_until_it_drains():
    backlog = [80]
    timers: list[Callable[[], None]] = []
    budget = ByteBudget(64, "container", backlog=lambda: backlog[0],
                        call_later=lambda delay, fn: timers.append(fn), backlog_seconds=0.0)
    assert budget.full
    drained: list[bool] = []
    budget.when_drained(lambda: drained.append(True))
    assert len(timers) == 1 and not drained
    timers.pop()()  # still above low water: polls again
    assert len(timers) == 1 and not drained
    backlog[0] = 10
    timers.pop()()
    assert drained == [True] and not timers


def test_admission_waits_for_the_full_budgets_its_work_went_to():
    container = ByteBudget(10, "container")
    admission = Admission(ByteBudget(100, "connection"))
    with charging(admission):
        assert current_admission() is admission
    assert current_admission() is None
    container.acquire(5)
    admission.touch(container)
    assert admission.blocking() is None  # not full when touched: nothing to wait for
    container.acquire(5)
    admission.touch(container)
    assert admission.blocking() is container
    container.release(10)
    assert admission.blocking() is None
    admission.budget.acquire(100)
    assert admission.blocking() is admission.budget


def test_a_client_that_leaves_its_responses_unread_is_not_read_either(server):
    """A client pipelining fetches of a full megabyte without reading the answers: once responses back
    up in the transport the server stops reading that client's requests, so what it holds for the
    client stays bounded instead of growing with every request; other clients are still answered."""
    topic = "unread"
    p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 5})
    for seq in range(2 * 1024):
        p.produce(topic, record(0, seq))
    assert p.flush(60) == 0
    requests = 1000  # answered in full, that is about a gigabyte of responses
    sampler = RssSampler(server.proc.pid)
    idle = sampler.peak
    sampler.start()
    greedy = KafkaWire.connect(server.bootstrap)
    greedy.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    F = request_class(FETCH)  # noqa: N806 - a generated message class
    fetch = F(max_wait_ms=0, min_bytes=1, max_bytes=MIB, isolation_level=0, session_id=0, session_epoch=-1,
              topics=[F.FetchTopic(topic=topic, partitions=[F.FetchPartition(
                  partition=0, fetch_offset=0, partition_max_bytes=MIB)])])
    greedy.sock.settimeout(10)
    sent = 0
    with contextlib.suppress(TimeoutError):  # the server stopped reading: our send buffer is full
        for _ in range(requests):
            greedy.submit(FETCH, 12, fetch)
            sent += 1
    time.sleep(3)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    start = time.monotonic()
    admin.list_topics(timeout=ANSWER_WITHIN_SECONDS)
    answered_in = time.monotonic() - start
    sampler.done.set()
    sampler.join()
    greedy.close()
    grown_mb = (sampler.peak - idle) / MIB
    print(f"unread responses: {sent} fetches sent, RSS grew {grown_mb:.0f} MiB, another client answered in "
          f"{answered_in:.2f}s")
    assert grown_mb < MARGIN_MB + CONNECTION_BUDGET_MB * COPIES
