"""Memory under many small requests: producers sending one record per batch (linger 0, as many
applications do) into a server with a small cache. What the server holds per batch must not grow with
the number of batches: its RSS stays within its budgets plus a margin, and once the cache is full it
stays flat while the batches keep coming (``python -m benchmarks memory-soak`` is the long version)."""

from __future__ import annotations

import itertools
import statistics
import threading

import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server_process import ServerProcess
from tests.test_flood import MIB, RssSampler

# A cache that the first quarter's batches fill (~170 bytes each, with their headers), so that later
# growth is per-batch state, not the cache filling.
CACHE_MB = 2
CONTAINER_BUDGET_MB = 8
# One producer: librdkafka at linger 0 takes most of a core itself, and more of them starve the server.
PRODUCERS = 1
BATCHES = 40_000  # in all, in four quarters; the last three are where per-batch state would show
QUARTERS = 4
RECORD_BYTES = 100
# Idle to peak: the cache, a few copies of the budgets' worth of bytes in flight, and the interpreter.
MARGIN_MB = 64
# Per-batch state grows RSS in every quarter; a thread pool or an allocator arena that grows once grows
# it in one. On a busy machine (the full suite beside this test) two more threads started late and RSS
# rose 8.8 MiB in the second half, then stayed within 2 MiB over 80,000 more batches. So the bound is
# on the median of the last three quarters' growth (10,000 batches each): ~300 bytes a batch. Before the
# fixes of issue 20 (d89a679 among them) the server grew by ~550 bytes a batch (1.1 GB over 2 M batches).
QUARTER_GROWTH_MB = 3


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
    checkpoint = threading.Barrier(PRODUCERS + 1)  # at the end of each quarter but the last
    failed: list[str] = []

    def produce(partition: int) -> None:
        p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 0, "batch.num.messages": 1, "queue.buffering.max.messages": 1000})

        def delivered(err, _msg) -> None:  # noqa: ANN001 - librdkafka's callback
            if err is not None:
                failed.append(str(err))

        share = BATCHES // PRODUCERS
        for i in range(share):
            if i and i % (share // QUARTERS) == 0:
                assert p.flush(120) == 0
                checkpoint.wait(120)
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
    at_quarters = []
    for _ in range(QUARTERS - 1):
        checkpoint.wait(300)
        at_quarters.append(server_rss(server))
    for t in threads:
        t.join(300)
        assert not t.is_alive()
    at_quarters.append(server_rss(server))
    sampler.done.set()
    sampler.join()
    assert not failed, failed[:3]
    grown_mb = (sampler.peak - idle) / MIB
    quarters_mb = [(after - before) / MIB for before, after in itertools.pairwise(at_quarters)]
    print(f"small batches: RSS idle {idle / MIB:.0f} MiB, peak +{grown_mb:.0f}, "
          f"quarters 2-4 {', '.join(f'{q:+.1f}' for q in quarters_mb)} MiB")
    assert grown_mb < CACHE_MB + 3 * CONTAINER_BUDGET_MB + MARGIN_MB
    assert statistics.median(quarters_mb) < QUARTER_GROWTH_MB
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
