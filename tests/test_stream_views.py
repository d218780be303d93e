"""Seeing elastic streams through a real server: `millrace streams describe|split|merge`, the
/api/streams HTTP resources and the stream metrics, for a Kafka topic and for a plain stream."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from millrace.gateway.http.site import _error_status
from millrace.store.controller import ScaleConflictError
from tests.server_process import ServerProcess

PARTITIONS = 8


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServerProcess(str(tmp_path_factory.mktemp("views") / "data")).start()
    yield srv
    srv.kill()


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "millrace", *args, "--server", f"127.0.0.1:{server.native_port}"],
                          capture_output=True, text=True, timeout=60)


def cli_json(server: ServerProcess, *args: str) -> dict[str, Any]:
    out = cli(server, *args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def http(server: ServerProcess, path: str, body: Any = None, raw: bytes | None = None) -> tuple[int, Any]:
    """(status, parsed JSON) of a GET, or of a POST when a body is given."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(f"http://127.0.0.1:{server.http_port}{path}", data=data,
                                 method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        assert err.headers["content-type"] == "application/json"
        return err.code, json.loads(err.read())


def metrics(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=30) as resp:
        return resp.read().decode()


def create_topic(server: ServerProcess, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1, config={"millrace.segments.initial": "1"})])[name].result(30)


def produce(server: ServerProcess, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, f"record-{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def partitions(desc: dict[str, Any]) -> list[list[int]]:
    return [s["partitions"] for s in desc["segments"]]


def check_rates(desc: dict[str, Any]) -> None:
    for seg in desc["segments"]:
        assert [r["window_s"] for r in seg["rates"]] == desc["rate_windows"]
        for r in seg["rates"]:
            assert r["events_per_s"] >= 0 and r["bytes_per_s"] >= 0 and r["kib_per_s"] >= 0


def test_kafka_topic_split_and_merge_are_visible(server):
    create_topic(server, "views")
    produce(server, "views", 400)

    desc = cli_json(server, "streams", "describe", "kafka/views")
    assert desc["partition_count"] == PARTITIONS and desc["epoch"] == 0
    assert partitions(desc) == [list(range(PARTITIONS))]
    (seg,) = desc["segments"]
    assert seg["length"] > 0 and seg["start_offset"] == 0 and seg["sealed"] is False
    assert isinstance(seg["container"], int) and seg["storage_length"] >= 0
    check_rates(desc)
    assert any(r["events_per_s"] > 0 for r in seg["rates"])  # 400 records just arrived
    assert [(h["epoch"], h["reason"], h["sealed_ids"], h["created_ids"]) for h in desc["history"]] == [
        (0, "create", [], [seg["segment_id"]])]
    assert desc["pending_scale"] is None

    # Split by number over the native protocol: halves at a partition boundary.
    after_cli = cli_json(server, "streams", "split", "kafka/views", str(seg["number"]))
    assert partitions(after_cli) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    last = after_cli["history"][-1]
    assert (last["epoch"], last["reason"], last["sealed_ids"]) == (1, "manual", [seg["segment_id"]])
    assert last["created_ids"] == [s["segment_id"] for s in after_cli["segments"]]
    assert last["sealed"][0]["name"] == seg["name"] and last["sealed"][0]["key_end"] == 1.0

    # Split by name over HTTP, at partition 1's start.
    low = after_cli["segments"][0]
    status, after_split = http(server, "/api/streams/kafka/views/split", {"segment": low["name"], "at": [0.125]})
    assert status == 200, after_split
    assert partitions(after_split) == [[0], [1, 2, 3], [4, 5, 6, 7]]
    assert after_split["history"][-1]["sealed_ids"] == [low["segment_id"]]
    assert after_split["history"][-1]["reason"] == "manual"

    # Merge the two low segments back over HTTP, by id.
    first, second, high = after_split["segments"]
    status, merged = http(server, "/api/streams/kafka/views/merge",
                          {"segments": [first["segment_id"], second["segment_id"]]})
    assert status == 200, merged
    assert partitions(merged) == [[0, 1, 2, 3], [4, 5, 6, 7]] and merged["epoch"] == 3
    assert merged["segments"][1]["segment_id"] == high["segment_id"]  # untouched by the merge
    assert merged["history"][-1]["sealed_ids"] == sorted([first["segment_id"], second["segment_id"]])
    assert [h["reason"] for h in merged["history"]] == ["create", "manual", "manual", "manual"]

    # Data still flows into the successors, and their sizes show it.
    produce(server, "views", 80)
    status, described = http(server, "/api/streams/kafka/views")
    assert status == 200
    assert [s["name"] for s in described["segments"]] == [s["name"] for s in merged["segments"]]
    assert all(s["length"] > 0 for s in described["segments"])
    check_rates(described)

    human = cli(server, "streams", "describe", "kafka/views")
    assert human.returncode == 0, human.stderr
    text = human.stdout
    assert "epoch 3, 2 open segments, 8 partitions" in text
    for s in described["segments"]:
        assert s["name"] in text
    assert "0-3" in text and "4-7" in text
    assert "history:" in text
    history = text.split("history:")[1].splitlines()
    assert sum("manual" in line for line in history) == 3 and any("create" in line for line in history)
    assert f"sealed {seg['name'].rsplit('/', 1)[1]} ->" in text

    status, listing = http(server, "/api/streams/kafka")
    assert status == 200 and "views" in listing["streams"] and listing["scope"] == "kafka"
    status, scopes = http(server, "/api/streams")
    assert status == 200 and "kafka" in scopes["scopes"]


def test_metrics_show_streams_and_segment_rates(server):
    create_topic(server, "metered")
    produce(server, "metered", 200)
    assert cli(server, "streams", "split", "kafka/metered", "0", "--pieces", "4").returncode == 0
    desc = cli_json(server, "streams", "describe", "kafka/metered")
    text = metrics(server)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    metered = (("scope", "kafka"), ("stream", "metered"))
    assert samples["millrace_stream_segments", metered] == 4
    assert samples["millrace_stream_epoch", metered] == 1
    for seg in desc["segments"]:
        for kind in ("events", "bytes"):
            labels = tuple(sorted((*metered, ("segment", seg["name"]), ("window", "2s"))))
            assert samples[f"millrace_segment_{kind}_per_second", labels] >= 0
    assert "# TYPE millrace_segment_events_per_second gauge" in text
    assert ("millrace_container_appends_total", (("container", "0"),)) in samples  # the container series stay


def test_plain_stream_describes_without_partitions(server):
    assert cli(server, "scopes", "create", "plain").returncode == 0
    created = cli(server, "streams", "create", "plain/events", "--segments", "2")
    assert created.returncode == 0, created.stderr
    desc = cli_json(server, "streams", "describe", "plain/events")
    assert desc["partition_count"] is None and partitions(desc) == [None, None]
    assert [h["reason"] for h in desc["history"]] == ["create"]
    check_rates(desc)

    split = cli_json(server, "streams", "split", "plain/events", desc["segments"][0]["name"], "--at", "0.1,0.3")
    assert [(s["key_start"], s["key_end"]) for s in split["segments"]] == [
        (0.0, 0.1), (0.1, 0.3), (0.3, 0.5), (0.5, 1.0)]
    assert partitions(split) == [None] * 4
    merged = cli_json(server, "streams", "merge", "plain/events", *(str(s["segment_id"])
                                                                    for s in split["segments"][2:]))
    assert [(s["key_start"], s["key_end"]) for s in merged["segments"]] == [(0.0, 0.1), (0.1, 0.3), (0.3, 1.0)]
    assert merged["history"][-1]["sealed_ids"] == sorted(s["segment_id"] for s in split["segments"][2:])

    human = cli(server, "streams", "describe", "plain/events").stdout
    assert "Kafka topic" not in human and "plain/events/" in human and "history:" in human
    status, listing = http(server, "/api/streams/plain")
    assert status == 200 and listing["streams"] == ["events"]
    assert 'millrace_stream_segments{scope="plain",stream="events"} 3.0' in metrics(server)


def test_http_errors(server):
    create_topic(server, "strict")
    status, body = http(server, "/api/streams/kafka/nope")
    assert status == 404 and body["type"] == "StreamNotFoundError"
    assert http(server, "/api/streams/nope")[0] == 404
    assert http(server, "/api/streams/nope/x")[0] == 404
    assert http(server, "/api/streams/kafka/strict/extra")[0] == 404
    assert http(server, "/api/streams/kafka/strict/rebalance", {})[0] == 404
    assert http(server, "/api/streams/kafka/nope/split", {"segment": 0})[0] == 404

    split = "/api/streams/kafka/strict/split"
    status, body = http(server, split, raw=b"{not json")
    assert status == 400 and "error" in body
    status, body = http(server, split, {"pieces": 2})
    assert status == 400 and "segment" in body["error"]
    assert http(server, split, {"segment": 0, "pieces": 2, "at": [0.5]})[0] == 400
    status, body = http(server, split, {"segment": 0, "at": [0.3]})  # not a partition boundary
    assert status == 400 and body["type"] == "InvalidScaleError"
    assert http(server, split, {"segment": 99})[0] == 400  # no such open segment
    status, body = http(server, "/api/streams/kafka/strict/merge", {"segments": [0]})
    assert status == 400 and body["type"] == "InvalidScaleError"
    assert http(server, "/api/streams/kafka/strict")[1]["epoch"] == 0  # nothing changed

    # A sealed stream cannot scale: a conflict with its state.
    assert cli(server, "scopes", "create", "closed").returncode == 0
    assert cli(server, "streams", "create", "closed/s", "--segments", "2").returncode == 0
    assert cli(server, "streams", "seal", "closed/s").returncode == 0
    status, body = http(server, "/api/streams/closed/s/split", {"segment": 0})
    assert status == 409 and body["type"] == "StreamSealedError"
    # A lost race (another scale got there first) is a conflict too; too timing-bound to provoke here.
    assert _error_status(ScaleConflictError("raced")) == 409

    # The CLI reports scaling refusals and exits non-zero.
    out = cli(server, "streams", "split", "kafka/strict", "0", "--at", "0.3")
    assert out.returncode == 1 and "partition boundary" in out.stderr
