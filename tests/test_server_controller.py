"""Scopes and streams through a real server: native client, CLI, restart."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from millrace import BytesSerializer, StreamManager
from millrace.client.segments import SegmentClient
from millrace.store.controller.errors import StreamNotSealedError
from millrace.store.errors import ScopeNotEmptyError, StreamExistsError, StreamNotFoundError
from tests.server_process import ServerProcess


def cli(port: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "millrace", *args, "--server", f"127.0.0.1:{port}"],
                          capture_output=True, text=True, timeout=60)


def test_stream_lifecycle_survives_restart(tmp_path):
    data_dir = str(tmp_path / "data")
    with ServerProcess(data_dir) as server, SegmentClient("127.0.0.1", server.native_port) as client:
        assert client.create_scope("iot")
        assert not client.create_scope("iot")
        desc = client.create_stream("iot", "sensors", initial_segments=4)
        assert [(s["key_start"], s["key_end"]) for s in desc["segments"]] == [
            (0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
        assert len({s["container"] for s in desc["segments"]}) > 1  # spread over containers
        with pytest.raises(StreamExistsError):
            client.create_stream("iot", "sensors")
        seg = client.segment_for_key("iot", "sensors", "device-17")
        assert seg["key_start"] <= 0.999 and seg["name"].startswith("iot/sensors/")
        with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm, sm.create_writer(
                "iot", "sensors", BytesSerializer()) as writer:  # events: raw bytes never enter a stream
            writer.write_event(b"reading", routing_key="device-17").result(30)
        length = sum(s["length"] for s in client.describe_stream("iot", "sensors")["segments"])
        with pytest.raises(ScopeNotEmptyError):
            client.delete_scope("iot")
        with pytest.raises(StreamNotSealedError):
            client.delete_stream("iot", "sensors")
        assert server.stop() == 0

    with ServerProcess(data_dir) as server, SegmentClient("127.0.0.1", server.native_port) as client:
        assert client.list_scopes() == ["iot", "kafka"]  # "kafka" holds the streams of Kafka topics
        assert client.list_streams("iot") == ["sensors"]
        desc = client.describe_stream("iot", "sensors")
        assert sum(s["length"] for s in desc["segments"]) == length > len(b"reading")
        assert client.segment_for_key("iot", "sensors", "device-17")["name"] == seg["name"]

        out = cli(server.native_port, "streams", "describe", "iot/sensors", "--json")
        assert out.returncode == 0, out.stderr
        assert len(json.loads(out.stdout)["segments"]) == 4
        out = cli(server.native_port, "streams", "describe", "iot/sensors")
        assert "iot/sensors/0.#epoch.0" in out.stdout

        client.seal_stream("iot", "sensors")
        assert all(s["sealed"] for s in client.describe_stream("iot", "sensors")["segments"])
        client.delete_stream("iot", "sensors")
        with pytest.raises(StreamNotFoundError):
            client.describe_stream("iot", "sensors")
        assert cli(server.native_port, "streams", "describe", "iot/sensors").returncode == 1
        client.delete_scope("iot")
        assert client.list_scopes() == ["kafka"]


def test_cli_creates_and_lists(tmp_path):
    with ServerProcess(str(tmp_path / "data")) as server:
        assert cli(server.native_port, "scopes", "create", "s1").returncode == 0
        out = cli(server.native_port, "streams", "create", "s1/t", "--segments", "3", "--retention-ms", "60000")
        assert out.returncode == 0, out.stderr
        assert "3 open segments" in out.stdout and "time 60000" in out.stdout
        assert cli(server.native_port, "streams", "list", "s1").stdout.split() == ["t"]


def test_http_health_metrics_and_segments(tmp_path):
    import urllib.request

    with ServerProcess(str(tmp_path / "data")) as server, SegmentClient("127.0.0.1", server.native_port) as client:
        client.create_segment("h/1")
        client.append("h/1", b"x" * 123)
        base = f"http://127.0.0.1:{server.http_port}"
        health = json.loads(urllib.request.urlopen(f"{base}/health", timeout=10).read())
        assert health["healthy"] and set(health["containers"].values()) == {"running"}
        metrics = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
        appended = sum(float(line.split()[-1]) for line in metrics.splitlines()
                       if line.startswith("millrace_container_append_bytes_total{"))
        assert appended >= 123
        segments = json.loads(urllib.request.urlopen(f"{base}/api/segments", timeout=10).read())["segments"]
        assert {"name": "h/1", "length": 123}.items() <= next(s for s in segments if s["name"] == "h/1").items()
