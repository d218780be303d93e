"""/metrics on a real server under real traffic, parsed with Prometheus' own text parser: the series
docs/metrics.md documents move as they should (request counts and latency histograms grow, bytes in
cover what was produced, consumer lag rises while a group's consumer is away and falls once it is back,
byte budgets stay within their limits, a native reader group's unread bytes rise while its reader stops
and fall once it reads), and the table and the live page agree both ways."""

from __future__ import annotations

import re
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from millrace.client.manager import StreamManager
from millrace.client.segments import SegmentClient
from millrace.gateway.kafka_protocol.codec import request_class
from millrace.gateway.kafka_protocol.messages.fetch import FetchRequest
from millrace.protocol.records import NewRecord, build_record_batch
from millrace.store.latency import LatencyHistogram
from tests.kafka.wire import KafkaWire
from tests.server_process import ServerProcess, create_topic

DOCS = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
TOPIC = "metered-traffic"
PARTITIONS = 2
GROUP = "metered-group"
FETCH = FetchRequest.API_KEY


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(str(tmp_path_factory.mktemp("metrics") / "data")).start()
    yield srv
    srv.kill()


class Scrape:
    """One scrape of /metrics: every sample by series name."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: dict[str, list[Sample]] = {}
        for family in self.families.values():
            for sample in family.samples:
                self.samples.setdefault(sample.name, []).append(sample)

    def values(self, name: str, **labels: str) -> list[float]:
        return [s.value for s in self.samples.get(name, []) if labels.items() <= s.labels.items()]

    def total(self, name: str, **labels: str) -> float:
        return sum(self.values(name, **labels))

    def value(self, name: str, **labels: str) -> float:
        (found,) = self.values(name, **labels)
        return found


def scrape(server: ServerProcess) -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=30) as resp:
        assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
        return Scrape(resp.read().decode())


def produce(server: ServerProcess, topic: str, count: int, size: int = 200) -> int:
    """Produce ``count`` records of ``size`` value bytes, all acknowledged; the value bytes sent."""
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    failed: list[str] = []
    for i in range(count):
        producer.produce(topic, b"v" * size, key=f"k{i}".encode(),
                         on_delivery=lambda err, _: err is not None and failed.append(str(err)))
    assert producer.flush(30) == 0 and not failed, failed
    return count * size


def consume(server: ServerProcess, group: str, topic: str, count: int) -> None:
    """Read ``count`` records as a member of ``group`` and commit their offsets, then leave."""
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < count:
            assert time.monotonic() < deadline, f"read {seen} of {count}"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen += 1
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def lag(s: Scrape, group: str) -> dict[str, float]:
    return {x.labels["partition"]: x.value for x in s.samples.get("millrace_kafka_consumer_group_lag", [])
            if x.labels["group"] == group}


def requests(s: Scrape, api: str) -> float:
    return s.total("millrace_kafka_request_duration_seconds_count", api=api, listener="PLAINTEXT")


def check_histograms(s: Scrape) -> None:
    """Every histogram's buckets are cumulative and end in +Inf, which equals its _count."""
    for family in s.families.values():
        if family.type != "histogram" or not family.name.startswith("millrace_"):
            continue
        series: dict[tuple[tuple[str, str], ...], list[Sample]] = {}
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
                series.setdefault(key, []).append(sample)
        assert series, family.name
        for key, buckets in series.items():
            counts = [b.value for b in buckets]
            assert counts == sorted(counts) and buckets[-1].labels["le"] == "+Inf", (family.name, key)
            assert s.value(f"{family.name}_count", **dict(key)) == counts[-1]


def test_latency_histogram_buckets_as_prometheus_counts_them() -> None:
    """A value equal to a bound is in that bound's bucket ("le"), larger ones in the next; beyond the last
    bound, +Inf; the snapshot's count is the sum of its buckets."""
    h = LatencyHistogram((0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.002, 0.01, 5.0):
        h.observe(seconds)
    snap = h.snapshot()
    assert snap.counts == (2, 2, 1) and snap.count == 5 and snap.total == pytest.approx(5.0135)
    with pytest.raises(ValueError, match="ascending"):
        LatencyHistogram((0.01, 0.001))


def test_series_move_with_kafka_traffic(server: ServerProcess) -> None:
    create_topic(server, TOPIC, PARTITIONS)
    before = scrape(server)
    sent = produce(server, TOPIC, 200)
    consume(server, GROUP, TOPIC, 200)
    caught_up = scrape(server)

    # Requests per API: counted once each, with a histogram whose _count is the request count.
    for api in ("Produce", "Fetch", "JoinGroup", "SyncGroup", "OffsetCommit", "Metadata"):
        assert requests(caught_up, api) > requests(before, api), api
    assert requests(caught_up, "Produce") >= 1
    check_histograms(caught_up)
    # Bytes in cover at least the values produced (batches add keys and headers); bytes out at least those.
    assert caught_up.total("millrace_kafka_topic_bytes_in_total", topic=TOPIC) >= sent
    assert caught_up.total("millrace_kafka_topic_bytes_out_total", topic=TOPIC) >= sent
    assert caught_up.families["millrace_kafka_topic_bytes_in"].type == "counter"
    # The group committed all it read: no lag on either partition.
    assert lag(caught_up, GROUP) == {str(p): 0.0 for p in range(PARTITIONS)}

    # The consumer is away: lag rises by exactly what was produced meanwhile.
    produce(server, TOPIC, 50)
    away = scrape(server)
    assert sum(lag(away, GROUP).values()) == 50
    assert away.total("millrace_kafka_topic_bytes_in_total", topic=TOPIC) >= sent + 50 * 200
    # It is back: it reads the 50 and commits, and lag falls to nothing.
    consume(server, GROUP, TOPIC, 50)
    back = scrape(server)
    assert lag(back, GROUP) == {str(p): 0.0 for p in range(PARTITIONS)}
    assert requests(back, "OffsetCommit") > requests(away, "OffsetCommit")

    # Byte budgets: within [0, limit] (nothing here is larger than a budget).
    for held_name, limit_name in (("millrace_container_budget_held_bytes", "millrace_container_budget_limit_bytes"),):
        for sample in back.samples[held_name]:
            limit = back.value(limit_name, **sample.labels)
            assert 0 <= sample.value <= limit, sample
    assert 0 <= back.value("millrace_kafka_fetch_budget_held_bytes") <= back.value(
        "millrace_kafka_fetch_budget_limit_bytes")
    assert back.total("millrace_container_appends_total") > before.total("millrace_container_appends_total")
    # The local logs' commits, by the thread that ran them (which one depends on the disk's speed).
    commits = back.total("millrace_log_commits_total") - before.total("millrace_log_commits_total")
    assert commits >= 1
    assert {s.labels["thread"] for s in back.samples["millrace_log_commits_total"]} == {"reactor", "writer"}
    for ratio in back.values("millrace_container_cache_hit_ratio"):
        assert 0 <= ratio <= 1
    assert back.value("millrace_connections", listener="PLAINTEXT") >= 0
    assert all(v > 0 for v in back.values("millrace_container_recovery_seconds"))  # each start took time


def test_produce_and_fetch_errors_are_counted_by_code(server: ServerProcess) -> None:
    create_topic(server, "metered-small", 1, **{"max.message.bytes": "1000"})
    before = scrape(server)
    producer = Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 10000})
    failures: list[str] = []
    producer.produce("metered-small", b"x" * 5000, on_delivery=lambda err, _: failures.append(str(err)))
    producer.flush(30)
    assert failures and "MSG_SIZE_TOO_LARGE" in failures[0], failures
    # A fetch past the end: OFFSET_OUT_OF_RANGE, after which the consumer resets to the start.
    produce(server, "metered-small", 3, size=10)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "metered-errors",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([CTopicPartition("metered-small", 0, 1000)])
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                break
    finally:
        consumer.close()
    after = scrape(server)
    assert (after.total("millrace_kafka_errors_total", api="Produce", error="MESSAGE_TOO_LARGE")
            > before.total("millrace_kafka_errors_total", api="Produce", error="MESSAGE_TOO_LARGE"))
    assert (after.total("millrace_kafka_errors_total", api="Fetch", error="OFFSET_OUT_OF_RANGE")
            > before.total("millrace_kafka_errors_total", api="Fetch", error="OFFSET_OUT_OF_RANGE"))


def test_native_requests_and_connections(server: ServerProcess) -> None:
    before = scrape(server)
    with SegmentClient("127.0.0.1", server.native_port) as client:
        client.create_segment("metered/native/0")
        for _ in range(5):
            client.append("metered/native/0", b"n" * 100)
        assert client.read("metered/native/0", 0).data == b"n" * 500
        during = scrape(server)
        assert during.value("millrace_connections", listener="NATIVE") >= 1
    after = scrape(server)
    count = "millrace_native_request_duration_seconds_count"
    assert after.total(count, command="APPEND") - before.total(count, command="APPEND") == 5
    assert after.total(count, command="READ") > before.total(count, command="READ")
    assert after.total(count, command="CREATE_SEGMENT") > before.total(count, command="CREATE_SEGMENT")
    check_histograms(after)


def test_a_client_that_does_not_read_pauses_its_connection(server: ServerProcess) -> None:
    """Fetches whose responses the client never reads: the connection stops reading (paused, "send"), the
    responses' bytes hold the fetch budget, and the pause goes once the connection is closed."""
    create_topic(server, "metered-unread", 1)
    with KafkaWire.connect(server.bootstrap) as w:
        for _ in range(4):  # 4 MiB in the partition
            assert w.produce("metered-unread", 0, build_record_batch(
                [NewRecord(key=None, value=b"u" * 1024) for _ in range(1024)])).error_code == 0
    reader = KafkaWire.connect(server.bootstrap)
    try:
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        fetch = request_class(FETCH)
        request = fetch(max_wait_ms=0, min_bytes=1, max_bytes=1 << 22, isolation_level=0, session_id=0,
                        session_epoch=-1, topics=[fetch.FetchTopic(topic="metered-unread", partitions=[
                            fetch.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 22)])])
        reader.submit_together([(FETCH, 12, request)] * 32)  # 128 MiB of answers it will not read
        deadline = time.monotonic() + 60
        while True:
            page = scrape(server)
            if page.value("millrace_connections_paused", listener="PLAINTEXT", reason="send") >= 1:
                break
            assert time.monotonic() < deadline, "the connection never paused"
            time.sleep(0.2)
        assert page.value("millrace_kafka_fetch_budget_held_bytes") > 0  # responses held until sent
        assert page.value("millrace_kafka_fetch_budget_held_bytes") <= page.value(
            "millrace_kafka_fetch_budget_limit_bytes")
    finally:
        reader.close()
    deadline = time.monotonic() + 60
    while scrape(server).value("millrace_connections_paused", listener="PLAINTEXT", reason="send") > 0:
        assert time.monotonic() < deadline, "the closed connection still counts as paused"
        time.sleep(0.2)


def unread(s: Scrape, scope: str, group: str) -> list[float]:
    return s.values("millrace_reader_group_unread_bytes", scope=scope, group=group)


def test_reader_group_unread_bytes_rise_and_fall(server: ServerProcess) -> None:
    """The server's figure (folded from the group's state segment) moves with the reader, and is the
    native client's own ``ReaderGroup.unread_bytes`` from the same recorded positions."""
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("metered-rg")
        sm.create_stream("metered-rg", "events", initial_segments=2)
        writer = sm.create_writer("metered-rg", "events")
        for i in range(20):
            writer.write_event(b"e" * 100, routing_key=f"k{i}").result()
        group = sm.create_reader_group("watchers", "metered-rg", "events")
        before = scrape(server)
        # No reader read anything yet: everything written is unread, in the one stream the group reads.
        assert before.samples["millrace_reader_group_unread_bytes"][0].labels.keys() >= {"scope", "group", "stream"}
        assert unread(before, "metered-rg", "watchers") == [group.unread_bytes()]
        assert group.unread_bytes() > 2000
        reader = group.create_reader("r1")
        read = 0
        while reader.read_next_event(timeout=2.0) is not None:
            read += 1
        assert read == 20  # caught up: the reader records its positions

        def settled(expected: float | None = None) -> Scrape:
            deadline = time.monotonic() + 30
            while True:
                page = scrape(server)
                if unread(page, "metered-rg", "watchers") == [group.unread_bytes() if expected is None else expected]:
                    return page
                assert time.monotonic() < deadline, unread(page, "metered-rg", "watchers")
                time.sleep(0.2)

        settled(0)
        for i in range(10):  # the reader is away: unread bytes rise by what is written
            writer.write_event(b"w" * 100, routing_key=f"k{i}").result()
        away = settled()
        assert away.value("millrace_reader_group_unread_bytes", group="watchers", stream="metered-rg/events") > 1000
        while reader.read_next_event(timeout=2.0) is not None:
            pass
        settled(0)  # it read them: nothing unread
        reader.close()
        writer.close()


# -- the table and the live page agree ----------------------------------------------------------------

_ROW = re.compile(r"^\| `(millrace_[a-z_]+)` \| (counter|gauge|histogram) \|([^|]*)\| (every|local|replicated|cluster) \|")


def documented() -> dict[str, tuple[str, set[str], str]]:
    """docs/metrics.md's table: series -> (type, label names, where)."""
    rows = {}
    for line in DOCS.read_text().splitlines():
        m = _ROW.match(line)
        if m:
            name, kind, labels, where = m.groups()
            assert name not in rows, f"{name} is documented twice"
            # Label names; the values some rows list in parentheses are not labels.
            rows[name] = (kind, set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", labels))), where)
    assert len(rows) > 20, "the table was not found"
    return rows


def family_name(name: str, kind: str) -> str:
    """The name the text parser gives a documented series' family (a counter's without ``_total``)."""
    return name.removesuffix("_total") if kind == "counter" else name


def check_agreement(s: Scrape, where: set[str]) -> None:
    """Every series documented for ``where`` is on the page with its documented type and labels, and
    every millrace_ family on the page is documented."""
    table = documented()
    by_family = {family_name(name, kind): (name, kind, labels) for name, (kind, labels, _) in table.items()}
    for name, (kind, labels, place) in table.items():
        if place not in where:
            continue
        family = s.families.get(family_name(name, kind))
        assert family is not None, f"{name} is documented but not exported"
        assert family.type == kind, (name, family.type)
        assert family.samples, f"{name} has no samples"
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == labels, (name, sample.labels, labels)
    exported = {f for f in s.families if f.startswith("millrace_")}
    assert exported - set(by_family) == set(), "exported but not documented"


def test_documented_series_match_the_live_page(server: ServerProcess) -> None:
    # Enough traffic that every labelled series has a value: Kafka produce, group reads, errors, native,
    # a reader group.
    create_topic(server, "metered-docs", 1)
    create_topic(server, "metered-docs-small", 1, **{"max.message.bytes": "1000"})
    produce(server, "metered-docs", 10)
    consume(server, "metered-docs-group", "metered-docs", 10)
    producer = Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 10000})
    producer.produce("metered-docs-small", b"x" * 5000)  # refused: MESSAGE_TOO_LARGE
    producer.flush(30)
    with SegmentClient("127.0.0.1", server.native_port) as client:
        client.create_segment("metered/docs/0")
        client.append("metered/docs/0", b"d")
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:  # a native reader group
        sm.create_scope("metered-docs")
        sm.create_stream("metered-docs", "events", initial_segments=1)
        sm.create_reader_group("docs-readers", "metered-docs", "events").close()
    check_agreement(scrape(server), {"every", "local"})


def test_the_agreement_check_can_fail(server: ServerProcess) -> None:
    """An undocumented series, or a documented one missing, is caught."""
    page = scrape(server).text
    with pytest.raises(AssertionError, match="not documented"):
        check_agreement(Scrape(page + "# TYPE millrace_made_up gauge\nmillrace_made_up 1\n"), {"every"})
    without = "\n".join(line for line in page.splitlines() if "millrace_stream_epoch" not in line) + "\n"
    with pytest.raises(AssertionError, match="millrace_stream_epoch is documented but not exported"):
        check_agreement(Scrape(without), {"every"})
