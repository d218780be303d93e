"""Memory under many small requests: producers sending one record per batch (linger 0, as many
applications do) into a server with a small cache. What the server holds per batch must not grow with
the number of batches: its RSS stays within its budgets plus a margin, and once the cache is full it
stays flat while the batches keep coming (``benchmarks/memory_soak.py`` is the long version)."""

from __future__ import annotations

import threading

import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server_process import ServerProcess
from tests.test_flood import MIB, RssSampler

# A cache that the first half's batches fill (~170 bytes each, with their headers), so that the second
# half's growth is per-batch state, not the cache filling.
CACHE_MB = 2
CONTAINER_BUDGET_MB = 8
# One producer: librdkafka at linger 0 takes most of a core itself, and more of them starve the server.
PRODUCERS = 1
BATCHES = 40_000  # in all; the second half is where per-batch state would show
RECORD_BYTES = 100
# Idle to peak: the cache, a few copies of the budgets' worth of bytes in flight, and the interpreter.
MARGIN_MB = 64
# Over the second half (20,000 batches), once the cache is full: ~400 bytes a batch. Before the fixes
# of issue 20 (d89a679 among them) the server grew by ~550 bytes a batch (1.1 GB over 2 M batches).
SECOND_HALF_GROWTH_MB = 8


@pytest.fixture
def server(tmp_path):
    s = ServerProcess(str(tmp_path / "data"), "--cache-mb", str(CACHE_MB),
                      "--container-budget-mb", str(CONTAINER_BUDGET_MB)).start()
    yield s
    s.kill()


def test_single_record_batches_leave_no_state_behind_per_batch(server):
    topic = "small-batches"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, PRODUCERS, 1)])[topic].result(30)
    sampler = RssSampler(server.proc.pid)
    idle = sampler.peak
    sampler.start()
    halfway = threading.Barrier(PRODUCERS + 1)
    failed: list[str] = []

    def produce(partition: int) -> None:
        p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 0, "batch.num.messages": 1, "queue.buffering.max.messages": 1000})

        def delivered(err, _msg) -> None:  # noqa: ANN001 - librdkafka's callback
            if err is not None:
                failed.append(str(err))

        share = BATCHES // PRODUCERS
        for i in range(share):
            if i == share // 2:
                assert p.flush(120) == 0
                halfway.wait(120)
            while True:
                try:
                    p.produce(topic, b"v" * RECORD_BYTES, partition=partition, on_delivery=delivered)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        assert p.flush(120) == 0

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(PRODUCERS)]
    for t in threads:
        t.start()
    halfway.wait(300)
    at_half = server_rss(server)
    for t in threads:
        t.join(300)
        assert not t.is_alive()
    at_end = server_rss(server)
    sampler.done.set()
    sampler.join()
    assert not failed, failed[:3]
    grown_mb, second_half_mb = (sampler.peak - idle) / MIB, (at_end - at_half) / MIB
    print(f"small batches: RSS idle {idle / MIB:.0f} MiB, peak +{grown_mb:.0f}, second half {second_half_mb:+.1f} MiB")
    assert grown_mb < CACHE_MB + 3 * CONTAINER_BUDGET_MB + MARGIN_MB
    assert second_half_mb < SECOND_HALF_GROWTH_MB
    offsets = sum(admin_high_watermark(server, topic, p) for p in range(PRODUCERS))
    assert offsets == BATCHES


def server_rss(server: ServerProcess) -> int:
    return psutil.Process(server.proc.pid).memory_info().rss


def admin_high_watermark(server: ServerProcess, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "small-batches-check"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1]
    finally:
        consumer.close()
