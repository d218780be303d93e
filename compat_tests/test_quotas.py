"""Client quotas against the real clients, on a server of this module's own.

The Java Admin (kafka-clients 4.x) sets and lists quotas with alterClientQuotas / describeClientQuotas
and gets Kafka's refusals. Then confluent-kafka (librdkafka) producers and consumers run side by side:
the one whose client id has a 1 MB/s quota is held to it (measured after the first window's burst,
within 10 %) while one without a quota runs much faster at the same time, and librdkafka's throttle
callback shows the server's responses carried throttle_time_ms. Quotas for the data clients are set with
kafka-python's protocol classes (it has no quota helper), so they do not depend on a JDK.

The server measures rates over ``quota.window.num=2`` windows of 1 s (Kafka's default is 11): a new
client may burst ``(num - 1)`` windows' worth before it is throttled, as in Kafka, and with 11 that
burst alone would dominate a ten-second measurement."""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

from compat_tests.java_support import VERSIONS, run_main
from tests.server_process import ServerProcess

pytestmark = pytest.mark.timeout(180)

QUOTA = 1024 * 1024  # bytes per second
WARM_UP, MEASURE = 2.0, 8.0  # seconds: the first window's burst, then the steady rate
VALUE = b"q" * 10_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(str(tmp_path_factory.mktemp("quotas")), "--override", "quota.window.num=2",
                       "--override", "quota.window.size.seconds=1") as s:
        yield s


def _bootstrap(server: ServerProcess) -> str:
    return f"127.0.0.1:{server.kafka_port}"


def _set_client_quota(server: ServerProcess, client_id: str, key: str, value: float) -> None:
    """AlterClientQuotas from kafka-python, which has the protocol classes but no admin helper."""
    from kafka import KafkaAdminClient
    from kafka.protocol.admin import AlterClientQuotasRequest as A  # noqa: N814 - the generated class

    admin = KafkaAdminClient(bootstrap_servers=_bootstrap(server))
    try:
        request = A(validate_only=False, entries=[A.EntryData(
            entity=[A.EntryData.EntityData(entity_type="client-id", entity_name=client_id)],
            ops=[A.EntryData.OpData(key=key, value=value, remove=False)])])
        response = admin._manager.run(admin._manager.send, request)  # noqa: SLF001 - see above
    finally:
        admin.close()
    assert [e.error_code for e in response.entries] == [0], response


def test_java_admin_sets_and_lists_quotas(server: ServerProcess) -> None:
    run = run_main(VERSIONS[-1], "QuotasClient", [_bootstrap(server), "java-producer", "java-consumer", str(QUOTA)],
                   timeout=120)
    unknown, fraction = run.of("refused", "unknown_key")[0], run.of("refused", "fraction")[0]
    assert (unknown["outcome"], unknown["message"]) == ("InvalidRequestException", "Invalid configuration key no_such_quota")
    assert (fraction["outcome"], fraction["message"]) == ("InvalidRequestException",
                                                          "producer_byte_rate cannot be a fractional value.")
    run.scenario("alter")
    clients = {e["entity"]["client-id"]: e["values"] for e in run.of("describe", "clients")[0]["entries"]}
    assert clients["java-producer"] == {"producer_byte_rate": float(QUOTA)}
    assert clients["java-consumer"] == {"consumer_byte_rate": float(QUOTA)}
    assert run.of("describe", "default_user")[0]["entries"] == [
        {"entity": {"user": "<default>"}, "values": {"request_percentage": 400.0}}]


class _Producing(threading.Thread):
    """A producer writing 10 kB records to a topic of its own as fast as it is let, for ``seconds`` from
    its first delivery; ``delivered`` holds (the server's append time in s, bytes) per record.

    The topic stamps records with LogAppendTime, so a record is placed in time by when the server took
    it, not by when this process got round to its delivery callback: on a loaded machine those
    callbacks come late and in bunches, and a second of them shifted across the measurement's edge was
    a tenth of the measured rate."""

    def __init__(self, server: ServerProcess, client_id: str, seconds: float) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        self.throttles: list[int] = []
        self.delivered: list[tuple[float, int]] = []
        self.seconds = seconds
        self.topic = f"quota-produce-{client_id}-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": _bootstrap(server)})
        admin.create_topics([NewTopic(self.topic, 1, config={"message.timestamp.type": "LogAppendTime"})])[
            self.topic].result(30)
        # Requests of 64 kB, 5 in flight (as the Java producer's default): a quota is enforced a request at
        # a time, and those already sent when the connection is muted land anyway, so the bytes a client
        # may have in flight bound how far one measurement can stray from the quota.
        self.producer = Producer({"bootstrap.servers": _bootstrap(server), "client.id": client_id, "linger.ms": 5,
                                  "batch.size": 65536, "max.in.flight": 5, "queue.buffering.max.kbytes": 1024,
                                  "throttle_cb": lambda event: self.throttles.append(event.throttle_time)})

    def run(self) -> None:
        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                kind, stamp = msg.timestamp()
                assert kind == TIMESTAMP_LOG_APPEND_TIME, kind
                self.delivered.append((stamp / 1000.0, len(msg.value())))

        # The clock starts at the first record taken, not at start(): the burst a new client is let (a
        # window's worth) comes then, however long the client took to connect and find its topic.
        while not self.delivered or time.time() < self.delivered[0][0] + self.seconds:
            try:
                self.producer.produce(self.topic, VALUE, on_delivery=delivered)
            except BufferError:
                self.producer.poll(0.01)
            self.producer.poll(0)
        self.producer.flush(30)


def _rate(events: list[tuple[float, int]], start: float) -> float:
    """Bytes per second from ``start + WARM_UP`` over ``MEASURE`` seconds: the least-squares slope of
    the bytes so far against time.

    A throttled client moves in steps (a burst when its connection is unmuted, then a mute of up to a
    window), about one every two seconds with these windows. Counting the bytes between two fixed
    instants caught three or four of those steps by where they fell, a spread of a tenth of the
    rate; the slope of the staircase does not depend on where its ends fall."""
    begin = start + WARM_UP
    times, totals, total = [], [], 0
    for t, n in sorted(e for e in events if begin <= e[0] < begin + MEASURE):
        total += n
        times.append(t)
        totals.append(total)
    return statistics.linear_regression(times, totals).slope


def test_a_producer_over_its_quota_is_slowed_to_it(server: ServerProcess) -> None:
    _set_client_quota(server, "slow-producer", "producer_byte_rate", QUOTA)
    slow = _Producing(server, "slow-producer", WARM_UP + MEASURE)
    fast = _Producing(server, "fast-producer", WARM_UP + MEASURE)
    slow.start()
    fast.start()
    slow.join(60)
    fast.join(60)
    slow_rate, fast_rate = _rate(slow.delivered, slow.delivered[0][0]), _rate(fast.delivered, fast.delivered[0][0])
    assert 0.9 * QUOTA <= slow_rate <= 1.1 * QUOTA, (slow_rate, fast_rate)
    assert fast_rate > 3 * QUOTA, (slow_rate, fast_rate)
    assert slow.throttles and max(slow.throttles) > 0  # the responses carried throttle_time_ms
    assert not any(slow_ms > 0 for slow_ms in fast.throttles)


def test_a_consumer_over_its_quota_is_slowed_to_it(server: ServerProcess) -> None:
    from confluent_kafka import Consumer, Producer

    topic = f"quota-fetch-{uuid.uuid4().hex[:8]}"
    total = int(QUOTA * (WARM_UP + MEASURE + 4))  # more than the slow consumer can read in the test
    # Batches of 64 kB: a fetch returns at least one whole batch (KIP-74), and a consumer is throttled a
    # fetch at a time, so batches as large as a second's quota would make its rate jump by seconds.
    producer = Producer({"bootstrap.servers": _bootstrap(server), "linger.ms": 20, "batch.size": 65536})
    for _ in range(total // len(VALUE)):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    _set_client_quota(server, "slow-consumer", "consumer_byte_rate", QUOTA)
    results: dict[str, tuple[list[tuple[float, int]], list[int]]] = {}

    def consume(client_id: str) -> None:
        throttles: list[int] = []
        received: list[tuple[float, int]] = []
        consumer = Consumer({"bootstrap.servers": _bootstrap(server), "client.id": client_id,
                             "group.id": f"{client_id}-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "fetch.max.bytes": 65536, "message.max.bytes": 65536,
                             "max.partition.fetch.bytes": 65536,
                             "throttle_cb": lambda event: throttles.append(event.throttle_time)})
        consumer.subscribe([topic])
        stop = time.monotonic() + WARM_UP + MEASURE
        try:
            while time.monotonic() < stop and sum(n for _, n in received) < total:
                for msg in consumer.consume(500, timeout=0.2):
                    if msg.error() is None:
                        received.append((time.monotonic(), len(msg.value())))
        finally:
            consumer.close()
        results[client_id] = (received, throttles)

    threads = [threading.Thread(target=consume, args=(c,), daemon=True) for c in ("slow-consumer", "fast-consumer")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    (slow, slow_throttles), (fast, fast_throttles) = results["slow-consumer"], results["fast-consumer"]
    assert slow and fast
    slow_rate = _rate(slow, slow[0][0])
    assert 0.9 * QUOTA <= slow_rate <= 1.1 * QUOTA, slow_rate
    assert sum(n for _, n in fast) >= total * 0.99  # read it all while the slow one was held
    assert fast[-1][0] - fast[0][0] < WARM_UP + MEASURE / 2
    assert slow_throttles and max(slow_throttles) > 0
    assert not any(ms > 0 for ms in fast_throttles)
