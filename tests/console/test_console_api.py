"""The console's JSON API against a real server with real Kafka traffic: consumer groups with lag,
record browsing (formats, timestamps, read_committed), the heat map's segment history, cluster and
overview, the pages' files; native reader groups (positions and unread bytes, folded by the server from
their state segments); and ``millrace groups`` (Kafka and reader groups over the API)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server_process import ServerProcess

PARTITIONS = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(str(tmp_path_factory.mktemp("console") / "data")).start()
    yield srv
    srv.kill()


def get(server: ServerProcess, path: str, **query: Any) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{server.http_port}{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            assert resp.headers["content-type"] == "application/json"
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def ok(server: ServerProcess, path: str, **query: Any) -> Any:
    status, body = get(server, path, **query)
    assert status == 200, body
    return body


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def create_topic(server: ServerProcess, name: str, segments: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1, config={"millrace.segments.initial": str(segments)})]
                        )[name].result(30)


def produce(server: ServerProcess, topic: str, values: list[bytes], partition: int = 0,
            headers: list[tuple[str, bytes]] | None = None, timestamp: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        kwargs: dict[str, Any] = {"key": f"k{i}".encode(), "partition": partition}
        if headers:
            kwargs["headers"] = headers
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        producer.produce(topic, v, **kwargs)
    assert producer.flush(30) == 0


def test_groups_show_members_assignments_offsets_and_lag(server: ServerProcess) -> None:
    create_topic(server, "orders")
    produce(server, "orders", [f"order-{i}".encode() for i in range(30)], partition=1)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "billing", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "client.id": "billing-1"})
    consumer.subscribe(["orders"])
    try:
        got = 0
        deadline = time.monotonic() + 30
        while got < 10 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
        consumer.commit(offsets=[TopicPartition("orders", 1, 10)], asynchronous=False)

        listing = ok(server, "/api/groups")["groups"]
        billing = next(g for g in listing if g["group_id"] == "billing")
        assert billing["state"] == "Stable" and billing["members"] == 1 and billing["lag"] == 20

        desc = ok(server, "/api/groups/billing")
        assert desc["state"] == "Stable" and desc["protocol_type"] == "consumer"
        (member,) = desc["members"]
        assert member["client_id"] == "billing-1"
        assert member["assignment"] == [{"topic": "orders", "partitions": list(range(PARTITIONS))}]
        p1 = next(p for p in desc["partitions"] if p["partition"] == 1)
        assert p1 == {"topic": "orders", "partition": 1, "committed_offset": 10, "log_start_offset": 0,
                      "high_watermark": 30, "lag": 20}
        # Assigned partitions without a commit are listed with no lag, as Kafka's tools show them.
        p0 = next(p for p in desc["partitions"] if p["partition"] == 0)
        assert p0["committed_offset"] is None and p0["lag"] is None
        assert desc["lag"] == 20
        # The console sampled the group's lag since its first request.
        wait_for(lambda: ok(server, "/api/groups/billing")["lag_history"], "a lag sample")
        assert ok(server, "/api/groups/billing")["lag_history"][-1]["lag"] == 20
    finally:
        consumer.close()
    assert get(server, "/api/groups/nobody")[0] == 404


def test_browse_records_by_offset_and_timestamp_in_each_format(server: ServerProcess) -> None:
    create_topic(server, "readings")
    base = int(time.time() * 1000) - 60_000
    produce(server, "readings", [b'{"t": 1}', b"\x00\xffbinary"], partition=2,
            headers=[("source", b"probe-7")], timestamp=base)
    produce(server, "readings", [b'{"t": 3}'], partition=2, timestamp=base + 30_000)

    body = ok(server, "/api/topics/readings/messages", partition=2, offset=0, format="json")
    assert body["isolation"] == "read_committed" and body["high_watermark"] == 3
    first, second, third = body["records"]
    assert first == {"offset": 0, "timestamp": base, "key": "k0", "value": {"t": 1},
                     "headers": [{"key": "source", "value": "probe-7"}]}
    assert second["value"] == "\x00\ufffdbinary"  # not JSON: shown as text
    assert third["offset"] == 2 and third["value"] == {"t": 3}

    hexed = ok(server, "/api/topics/readings/messages", partition=2, offset=1, limit=1, format="hex")
    assert [r["value"] for r in hexed["records"]] == [b"\x00\xffbinary".hex()]
    assert hexed["next_offset"] == 2

    by_time = ok(server, "/api/topics/readings/messages", partition=2, timestamp=base + 1, format="text")
    assert [r["offset"] for r in by_time["records"]] == [2]
    newest = ok(server, "/api/topics/readings/messages", partition=2, limit=2)
    assert [r["offset"] for r in newest["records"]] == [1, 2]

    assert get(server, "/api/topics/readings/messages", partition=9)[0] == 404
    assert get(server, "/api/topics/readings/messages", partition=0, format="xml")[0] == 400
    assert get(server, "/api/topics/readings/messages", partition=0, limit=100000)[0] == 400
    assert get(server, "/api/topics/nothing/messages", partition=0)[0] == 404

    topic = ok(server, "/api/topics/readings")
    assert topic["partition_count"] == PARTITIONS
    assert topic["partitions"][2] == {"partition": 2, "log_start_offset": 0, "high_watermark": 3,
                                      "last_stable_offset": 3}
    assert {"topic": "readings", "partition_count": PARTITIONS} in ok(server, "/api/topics")["topics"]


def test_read_committed_hides_aborted_and_open_transactions(server: ServerProcess) -> None:
    create_topic(server, "ledger")
    producer = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "ledger-writer"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("ledger", b"aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("ledger", b"committed", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce("ledger", b"open", partition=0)
    producer.flush(30)
    try:
        committed = ok(server, "/api/topics/ledger/messages", partition=0, offset=0)
        assert [r["value"] for r in committed["records"]] == ["committed"]
        everything = ok(server, "/api/topics/ledger/messages", partition=0, offset=0, isolation="read_uncommitted")
        assert [r["value"] for r in everything["records"]] == ["aborted", "committed", "open"]
    finally:
        producer.abort_transaction(30)


def test_heatmap_shows_each_segment_over_time_with_splits_and_rates(server: ServerProcess) -> None:
    create_topic(server, "heat")
    produce(server, "heat", [b"x" * 100] * 50, partition=0)
    before = ok(server, "/api/heatmap/kafka/heat")
    (only,) = before["segments"]
    assert (only["key_start"], only["key_end"], only["sealed_ms"], only["created_by"]) == (0.0, 1.0, None, "create")
    assert before["epochs"][0]["reason"] == "create"

    status, _ = post(server, "/api/streams/kafka/heat/split", {"segment": 0, "pieces": 2})
    assert status == 200
    after = ok(server, "/api/heatmap/kafka/heat")
    sealed, left, right = after["segments"]
    assert sealed["segment_id"] == only["segment_id"] and sealed["sealed_by"] == "manual"
    assert sealed["sealed_ms"] == left["created_ms"] == right["created_ms"] >= sealed["created_ms"]
    assert (left["key_start"], left["key_end"], right["key_start"], right["key_end"]) == (0.0, 0.5, 0.5, 1.0)
    assert [e["reason"] for e in after["epochs"]] == ["create", "manual"]

    # The sampled rates name the open segments: the new ones, after the split.
    produce(server, "heat", [b"y" * 100] * 50, partition=3)
    rates = wait_for(lambda: [s for s in ok(server, "/api/heatmap/kafka/heat")["rates"]
                              if str(right["segment_id"]) in s["segments"]], "a rate sample of the new segments")
    assert set(rates[-1]["segments"]) == {str(left["segment_id"]), str(right["segment_id"])}
    assert get(server, "/api/heatmap/kafka/nothing")[0] == 404


def post(server: ServerProcess, path: str, body: Any) -> tuple[int, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{server.http_port}{path}", data=json.dumps(body).encode(),
                                 method="POST", headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_cluster_and_overview(server: ServerProcess) -> None:
    cluster = ok(server, "/api/cluster")
    assert cluster["mode"] == "embedded"
    (node,) = cluster["nodes"]
    assert [c["id"] for c in cluster["containers"]] == node["containers"]
    assert all(c["state"] == "running" and c["owner"] == node["id"] for c in cluster["containers"])

    create_topic(server, "flow")
    ok(server, "/api/overview")  # starts sampling if nothing did yet
    produce(server, "flow", [b"z" * 1000] * 200, partition=0)
    overview = wait_for(lambda: (o := ok(server, "/api/overview"))["throughput"]
                        and any(t["bytes_in_per_s"] > 0 for t in o["throughput"]) and o, "bytes in sampled")
    kafka = next(s for s in overview["scopes"] if s["scope"] == "kafka")
    assert "flow" in kafka["streams"] and overview["topics"] >= 1 and overview["healthy"]
    assert overview["storage"]["log_bytes"] + overview["storage"]["long_term_bytes"] >= 200_000
    assert set(overview["storage"]) == {"log_bytes", "cache_bytes", "long_term_bytes"}
    assert get(server, "/api/overview/more")[0] == 404


def groups_cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "millrace", "groups", *args,
                           "--http", f"http://127.0.0.1:{server.http_port}"],
                          capture_output=True, text=True, timeout=60)


def test_groups_cli_lists_and_describes_over_the_api(server: ServerProcess, tmp_path: Any) -> None:
    create_topic(server, "payments")
    produce(server, "payments", [b"p"] * 12, partition=3)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "audit", "client.id": "auditor",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("payments", 3, 0)])
    consumer.commit(offsets=[TopicPartition("payments", 3, 5)], asynchronous=False)
    consumer.close()

    listed = groups_cli(server, "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["GROUP", "STATE", "TYPE", "MEMBERS", "LAG"]
    assert ["audit", "Empty", "classic", "0", "7"] in [line.split() for line in lines]

    described = groups_cli(server, "describe", "audit")
    assert described.returncode == 0, described.stderr
    rows = [line.split() for line in described.stdout.splitlines()]
    assert rows[1] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                       "CLIENT-ID"]
    assert rows[2] == ["payments", "3", "5", "12", "7", "-", "-", "-"]

    as_json = json.loads(groups_cli(server, "describe", "audit", "--json").stdout)
    assert as_json["partitions"] == [{"topic": "payments", "partition": 3, "committed_offset": 5,
                                      "log_start_offset": 0, "high_watermark": 12, "lag": 7}]
    missing = groups_cli(server, "describe", "nobody")
    assert missing.returncode == 1 and "404 no group 'nobody'" in missing.stderr


def test_pages_and_their_files_are_served_offline(server: ServerProcess) -> None:
    base = f"http://127.0.0.1:{server.http_port}"
    with urllib.request.urlopen(base + "/", timeout=30) as resp:
        assert resp.headers["content-type"].startswith("text/html")
        page = resp.read().decode()
    # Every script and style the page loads is one of ours, served here: nothing from elsewhere.
    assert '<script src="/static/vendor/echarts.min.js"></script>' in page
    for path in ("/static/console.js", "/static/heatmap.js", "/static/console.css", "/static/vendor/echarts.min.js"):
        with urllib.request.urlopen(base + path, timeout=30) as resp:
            assert resp.status == 200 and len(resp.read()) > 1000, path
    with urllib.request.urlopen(base + "/static/console.js", timeout=30) as resp:
        assert resp.headers["content-type"].startswith("text/javascript")
    assert "http" not in page.replace("http-equiv", "")  # no external address in the page
    for missing in ("/static/", "/static/vendor/", "/nothing"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + missing, timeout=30)
        assert refused.value.code == 404, missing


def reader_group(server: ServerProcess, scope: str, group: str) -> Any:
    return ok(server, f"/api/reader-groups/{scope}/{group}")


def test_reader_group_positions_and_unread_bytes_rise_and_fall(server: ServerProcess) -> None:
    """A real native reader group: the API shows its reader's segment at the recorded position; unread
    bytes rise while the reader stops (successors of a split it has not reached counting whole) and fall
    once it reads again; the sampled history shows the rise and the fall."""
    from millrace.client.manager import StreamManager

    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("plant")
        sm.create_stream("plant", "meters", initial_segments=1)
        writer = sm.create_writer("plant", "meters")
        for _ in range(10):
            writer.write_event(b"m" * 100, routing_key="meter-1").result()
        group = sm.create_reader_group("floor", "plant", "meters")
        reader = group.create_reader("reader-1")
        for _ in range(10):
            assert reader.read_next_event(timeout=5.0) is not None
        assert reader.read_next_event(timeout=1.0) is None  # caught up: the reader records its position
        caught_up = wait_for(lambda: (d := reader_group(server, "plant", "floor"))["unread_bytes"] == 0
                             and d["segments"][0]["offset"] > 0 and d, "the reader's recorded position")
        (held,) = caught_up["segments"]
        assert held["reader"] == "reader-1" and held["state"] == "held" and held["offset"] == held["length"]
        assert caught_up["online_readers"] == ["reader-1"] and caught_up["streams"] == ["plant/meters"]
        assert caught_up["readers"] == [{"reader": "reader-1", "segments": [held], "unread_bytes": 0}]

        # The reader stops; more is written, the segment is split and more lands in the successors.
        for _ in range(5):
            writer.write_event(b"u" * 100, routing_key="meter-1").result()
        status, _ = post(server, "/api/streams/plant/meters/split", {"segment": 0, "pieces": 2})
        assert status == 200
        for i in range(8):
            writer.write_event(b"s" * 100, routing_key=f"meter-{i}").result()
        behind = reader_group(server, "plant", "floor")
        first = next(x for x in behind["segments"] if x["segment"] == held["segment"])
        assert first["offset"] == held["offset"] and first["unread_bytes"] == first["length"] - held["offset"] > 500
        successors = [x for x in behind["segments"] if x["state"] == "successor"]
        assert len(successors) == 2 and all(x["reader"] is None and x["offset"] == 0 for x in successors)
        assert sum(x["unread_bytes"] for x in successors) == sum(x["length"] for x in successors) > 800
        assert behind["unread_bytes"] == first["unread_bytes"] + sum(x["unread_bytes"] for x in successors)
        assert behind["unread_by_stream"] == {"plant/meters": behind["unread_bytes"]}
        listed = ok(server, "/api/reader-groups", scope="plant")["reader_groups"]
        assert listed == [{"scope": "plant", "group": "floor", "streams": ["plant/meters"],
                           "online_readers": ["reader-1"], "unread_bytes": behind["unread_bytes"]}]
        wait_for(lambda: any(x["unread_bytes"] == behind["unread_bytes"]
                             for x in reader_group(server, "plant", "floor")["unread_history"]), "the rise sampled")

        # It reads everything again (the successors after their predecessor): unread falls to nothing.
        got = 0
        while reader.read_next_event(timeout=2.0) is not None:
            got += 1
        assert got == 13
        wait_for(lambda: reader_group(server, "plant", "floor")["unread_bytes"] == 0, "unread bytes falling to 0")
        history = wait_for(lambda: (h := reader_group(server, "plant", "floor")["unread_history"])[-1]["unread_bytes"] == 0
                           and h, "the fall sampled")
        values = [x["unread_bytes"] for x in history]
        assert values[values.index(behind["unread_bytes"]):][-1] == 0
        reader.close()
        writer.close()
    assert get(server, "/api/reader-groups/plant/nobody")[0] == 404
    assert get(server, "/api/reader-groups", scope="no-such-scope")[0] == 404


def test_reader_group_state_is_folded_again_after_a_compaction(server: ServerProcess) -> None:
    """The server's cached fold stops where it last read; a compaction then truncates the state segment past
    that point, and the next look starts again from the snapshot at the segment's start."""
    from millrace.client.manager import StreamManager

    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("compacted")
        sm.create_stream("compacted", "s", initial_segments=2)
        group = sm.create_reader_group("g", "compacted", "s")
        assert reader_group(server, "compacted", "g")["online_readers"] == []  # the fold reached the tail
        first = group.create_reader("r1")
        before = sm.describe_stream("compacted", "_RGg").segments[0].segment.name
        start = group._sync.compact()  # what every 500th update of a group handle does
        assert sm.controller.segment_info(before).start_offset == start > 0
        second = group.create_reader("r2")
        described = reader_group(server, "compacted", "g")
        assert described["online_readers"] == ["r1", "r2"] and len(described["segments"]) == 2
        first.close()
        second.close()
        assert reader_group(server, "compacted", "g")["online_readers"] == []


def test_groups_cli_shows_reader_groups_over_the_api(server: ServerProcess) -> None:
    from millrace.client.manager import StreamManager

    def cli(*args: str) -> Any:
        out = groups_cli(server, *args)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout) if "--json" in args else out.stdout

    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("iot")
        sm.create_stream("iot", "readings", initial_segments=1)
        writer = sm.create_writer("iot", "readings")
        for _ in range(10):
            writer.write_event(b"r" * 100, routing_key="sensor-7").result()
        group = sm.create_reader_group("dashboard", "iot", "readings")
        reader = group.create_reader("reader-1")
        for _ in range(10):
            assert reader.read_next_event(timeout=5.0) is not None
        assert reader.read_next_event(timeout=1.0) is None  # caught up: the reader records its position
        read_to = wait_for(lambda: (d := cli("readers", "iot/dashboard", "--json"))["segments"][0]["offset"] > 0 and d,
                           "the reader's recorded position")
        (held,) = read_to["segments"]
        assert held["reader"] == "reader-1" and held["unread_bytes"] == 0 and held["offset"] == held["length"]
        for _ in range(5):
            writer.write_event(b"u" * 100, routing_key="sensor-7").result()
        writer.close()
        described = cli("describe", "--reader-group", "iot/dashboard", "--json")
        (behind,) = described["segments"]
        assert behind["offset"] == held["offset"] and behind["unread_bytes"] == behind["length"] - held["offset"] > 500
        assert described["unread_bytes"] == behind["unread_bytes"]
        summary = {"scope": "iot", "group": "dashboard", "streams": ["iot/readings"], "online_readers": ["reader-1"],
                   "unread_bytes": behind["unread_bytes"]}
        assert cli("readers", "iot", "--json") == [summary]
        assert summary in cli("list", "--json")["reader_groups"]
        table = cli("readers", "iot").splitlines()
        assert table[0].split() == ["SCOPE", "GROUP", "STREAMS", "READERS", "UNREAD-BYTES"]
        assert table[1].split() == ["iot", "dashboard", "iot/readings", "1", str(behind["unread_bytes"])]
        # list: the Kafka groups' table, then the reader groups'.
        listed = [line.split() for line in cli("list").splitlines()]
        assert ["iot", "dashboard", "iot/readings", "1", str(behind["unread_bytes"])] in listed
        assert listed.index(["SCOPE", "GROUP", "STREAMS", "READERS", "UNREAD-BYTES"]) > 0
        rows = [line.split() for line in cli("describe", "--reader-group", "iot/dashboard").splitlines()]
        assert rows[1] == ["SEGMENT", "READER", "STATE", "OFFSET", "LENGTH", "UNREAD-BYTES"]
        assert rows[2] == [behind["segment"], "reader-1", "held", str(held["offset"]), str(behind["length"]),
                           str(behind["unread_bytes"])]
        reader.close()
    missing = groups_cli(server, "describe", "--reader-group", "iot/nobody")
    assert missing.returncode == 1 and "404 no reader group 'nobody' in scope 'iot'" in missing.stderr
