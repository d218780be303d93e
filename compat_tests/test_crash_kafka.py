"""Crash safety as Kafka clients see it: an idempotent acks=all producer (confluent-kafka, and kafka-python
in a second run) keeps producing while the server is SIGKILLed and restarted on the same port. Afterwards
every acknowledged record is readable at the partition and offset its delivery report gave, nothing is
duplicated (the producer's retries of batches that were written but not acknowledged are deduplicated),
offsets stay dense, a consumer group resumes from the offsets it committed before the crash, and a
consumer reading live through the crash never saw a record the crash then lost."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from kafka import KafkaProducer

from compat_tests.common import wait_for
from compat_tests.conftest import DEFAULT_PARTITIONS, start_server
from tests.ports import free_port
from tests.server_process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOTAL = 4000  # records the producer sends, across the crash


def consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 200, "session.timeout.ms": 10000,
                     **extra})


def read_all(bootstrap: str, topic: str, want: int, timeout: float = 60.0) -> list[tuple[int, int, bytes]]:
    c = consumer(bootstrap, f"reader-{topic}")
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(DEFAULT_PARTITIONS)])
        out: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            msgs = c.consume(500, timeout=0.5)
            for m in msgs:
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consumer error after restart: {m.error()}")
                out.append((m.partition(), m.offset(), m.value()))
            if msgs:
                quiet_since = time.monotonic()
            elif len(out) >= want and time.monotonic() - quiet_since > 1.0:
                break
        return out
    finally:
        c.close()


class CrashProducer:
    """An idempotent acks=all producer of either client, recording each delivery report."""

    def __init__(self, client: str, bootstrap: str, topic: str) -> None:
        self.client = client
        self.topic = topic
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: list[tuple[bytes, str]] = []
        self.lock = threading.Lock()
        if client == "confluent-kafka":
            self.ck = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                "linger.ms": 2, "message.timeout.ms": 120000, "reconnect.backoff.max.ms": 500,
                                "socket.connection.setup.timeout.ms": 5000})
        else:
            self.kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=2,
                                    delivery_timeout_ms=120000, request_timeout_ms=10000,
                                    reconnect_backoff_max_ms=500, max_block_ms=120000)

    def _ok(self, value: bytes, partition: int, offset: int) -> None:
        with self.lock:
            self.acked[value] = (partition, offset)

    def _fail(self, value: bytes, err: object) -> None:
        with self.lock:
            self.failed.append((value, str(err)))

    def produce(self, key: bytes, value: bytes) -> None:
        if self.client == "confluent-kafka":
            def report(err: KafkaError | None, msg: Message) -> None:
                if err is None:
                    self._ok(value, msg.partition(), msg.offset())
                else:
                    self._fail(value, err)

            while True:
                try:
                    self.ck.produce(self.topic, key=key, value=value, on_delivery=report)
                    break
                except BufferError:
                    self.ck.poll(0.1)
            self.ck.poll(0)
        else:
            future = self.kp.send(self.topic, key=key, value=value)
            future.add_callback(lambda md: self._ok(value, md.partition, md.offset))
            future.add_errback(lambda e: self._fail(value, e))

    def flush(self, timeout: float) -> int:
        if self.client == "confluent-kafka":
            return int(self.ck.flush(timeout))
        self.kp.flush(timeout=timeout)
        self.kp.close(timeout=10)
        return 0


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_sigkill_while_producing(tmp_path: Any, client: str) -> None:
    data_dir = str(tmp_path / "data")
    port = free_port()
    srv: ServerProcess = start_server(data_dir, "--kafka-port", str(port))
    bootstrap = srv.bootstrap
    topic = f"crash-{client}-{int(time.time())}"
    group = f"crash-group-{topic}"
    stop_live = threading.Event()
    try:
        # Before the crash: 60 records, a group member consumes some of them and commits.
        pre = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(60):
            pre.produce(topic, key=f"pre-{i % 10}".encode(), value=f"pre-{i}".encode())
        assert pre.flush(30) == 0
        member = consumer(bootstrap, group)
        member.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 25 and time.monotonic() < deadline:
            seen += sum(1 for m in member.consume(5, timeout=0.5) if not m.error())
        assert seen >= 25, f"group member consumed only {seen} records before the crash"
        member.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in member.committed(member.assignment(), timeout=10)}
        member.close()

        # The producer that lives through the crash.
        producer = CrashProducer(client, bootstrap, topic)
        acked, failed = producer.acked, producer.failed
        stop_sending = threading.Event()

        def send() -> None:
            for i in range(TOTAL):
                if stop_sending.is_set():
                    return
                producer.produce(f"k{i % 13}".encode(), f"crash-{i}".encode())
                time.sleep(0.0015)

        # A consumer reading live through the crash (its own group): what it saw before the crash must
        # survive it (the high watermark only counts durable data), and it must carry on afterwards.
        live_seen: list[tuple[int, int, bytes]] = []
        live_errors: list[str] = []

        def live() -> None:
            c = consumer(bootstrap, f"live-{group}", **{"enable.auto.commit": True, "auto.commit.interval.ms": 200})
            c.subscribe([topic])
            try:
                while not stop_live.is_set():
                    for m in c.consume(200, timeout=0.2):
                        if m.error():
                            if m.error().code() != KafkaError._PARTITION_EOF and not m.error().retriable():
                                live_errors.append(str(m.error()))
                            continue
                        live_seen.append((m.partition(), m.offset(), m.value()))
            finally:
                c.close()

        live_reader = threading.Thread(target=live, daemon=True)
        live_reader.start()
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        wait_for("acknowledgements before the crash", lambda: len(acked) >= 400, timeout=60, interval=0.01)
        srv.kill()
        acked_before_kill = len(acked)
        seen_before_kill = list(live_seen)
        time.sleep(1.0)
        srv = start_server(data_dir, "--kafka-port", str(port))
        assert srv.bootstrap == bootstrap
        sender.join(120)
        assert not sender.is_alive(), "producer thread stuck"
        remaining = producer.flush(120)
        stop_sending.set()
        assert remaining == 0, f"{remaining} records never delivered after the restart"
        assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:3]}"
        assert len(acked) == TOTAL and acked_before_kill < TOTAL

        # Everything, read back after the restart.
        log = read_all(bootstrap, topic, TOTAL + 60)
        counts = Counter(v for _, _, v in log)
        dups = {v: n for v, n in counts.items() if n > 1}
        assert not dups, f"{len(dups)} records duplicated, e.g. {list(dups.items())[:5]}"
        by_partition: dict[int, list[int]] = defaultdict(list)
        for p, o, _ in log:
            by_partition[p].append(o)
        for p, offsets in by_partition.items():
            assert offsets == list(range(len(offsets))), f"partition {p}: offsets not dense after the crash"
        where = {v: (p, o) for p, o, v in log}
        lost = [v for v in acked if v not in where]
        assert not lost, f"{len(lost)} acknowledged records missing after the crash, e.g. {lost[:5]}"
        moved = [(v, acked[v], where[v]) for v in acked if where[v] != acked[v]]
        assert not moved, f"{len(moved)} records not at their acknowledged offsets, e.g. {moved[:5]}"
        assert len(log) == TOTAL + 60

        # The live consumer: everything it read (before and after the crash) is in the log at that place,
        # and it read everything in the end.
        assert any(v.startswith(b"crash-") for _, _, v in seen_before_kill), "live consumer saw nothing pre-crash"
        at = {(p, o): v for p, o, v in log}
        wrong = [(p, o, v) for p, o, v in seen_before_kill if at.get((p, o)) != v]
        assert not wrong, f"the live consumer read {len(wrong)} records the crash then lost or moved: {wrong[:5]}"
        wait_for("live consumer read everything", lambda: len({v for _, _, v in live_seen}) >= TOTAL + 60, timeout=60)
        stop_live.set()
        live_reader.join(30)
        assert not live_errors, live_errors[:5]
        wrong = [(p, o, v) for p, o, v in live_seen if at.get((p, o)) != v]
        assert not wrong, f"the live consumer read records not in the final log: {wrong[:5]}"

        # The group resumes at its pre-crash commits.
        resumed = consumer(bootstrap, group)
        resumed.subscribe([topic])
        first_seen: dict[int, int] = {}
        deadline = time.monotonic() + 40
        while len(first_seen) < DEFAULT_PARTITIONS and time.monotonic() < deadline:
            for m in resumed.consume(100, timeout=0.5):
                if not m.error():
                    first_seen.setdefault(m.partition(), m.offset())
        resumed.close()
        for p in range(DEFAULT_PARTITIONS):
            assert first_seen.get(p) == max(committed.get(p, 0), 0), (
                f"partition {p}: group resumed at {first_seen.get(p)}, committed before the crash {committed.get(p)}")
    finally:
        stop_live.set()
        srv.kill()
