"""The console's history survives a restart: samples (throughput, consumer-group lag, reader groups'
unread bytes, segment rates) are taken on a timer, saved under the data dir and loaded at the next start,
after a crash (the last save) as after a clean stop (saved once more on the way out). The history stays
bounded: a fixed number of samples, and in each a bounded number of groups and segment rates."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from millrace.gateway.http.console import HISTORY_DIR
from millrace.gateway.http.console.history import (
    FILES,
    MAX_GROUPS,
    HistoryFiles,
    Sample,
    bounded_rates,
    largest,
    read_saved,
)
from tests.server_process import ServerProcess, create_topic


def sample(t: int) -> Sample:
    return Sample(t, float(t), None, {"g": t}, {"kafka/t": {1 << 32: (1.5, 200.0)}}, {"iot/rg": 42})


def test_samples_round_trip_through_the_files(tmp_path: Path) -> None:
    files = HistoryFiles(str(tmp_path / "console"), kept=10)
    samples = [sample(1000), Sample(6000, 10.0, 20.5)]
    files.append(samples)
    assert HistoryFiles(str(tmp_path / "console"), kept=10).load() == samples
    assert read_saved(str(tmp_path / "absent")) == []


def test_the_files_keep_the_newest_samples_and_stay_bounded(tmp_path: Path) -> None:
    """Two files of at most ``kept`` samples each: writing on never grows them, and the newest ``kept``
    samples are always there, in order, in a new instance (a restart) too."""
    directory = str(tmp_path / "console")
    files = HistoryFiles(directory, kept=5)
    written = []
    for t in range(23):
        files.append([sample(t)])
        written.append(sample(t))
        assert [s.time_ms for s in read_saved(directory, kept=5)] == [s.time_ms for s in written[-5:]]
        lines = [len(Path(directory, name).read_text().splitlines()) for name in FILES
                 if Path(directory, name).exists()]
        assert all(n <= 1 + 5 for n in lines) and sum(lines) <= 2 * (1 + 5)
        files = HistoryFiles(directory, kept=5)  # as after a restart: load, then append on
        assert files.load() == written[-5:]


def test_a_line_cut_short_is_dropped_and_a_bad_file_is_set_aside(tmp_path: Path) -> None:
    directory = str(tmp_path / "console")
    HistoryFiles(directory, kept=10).append([sample(1), sample(2)])
    current = os.path.join(directory, FILES[0])
    with open(current, "a") as f:
        f.write('{"time_ms": 3, "bytes_in')  # a crash in the middle of a write
    assert [s.time_ms for s in read_saved(directory)] == [1, 2]
    files = HistoryFiles(directory, kept=10)
    assert [s.time_ms for s in files.load()] == [1, 2]  # and the cut line is gone from the file
    files.append([sample(4)])
    assert [s.time_ms for s in read_saved(directory)] == [1, 2, 4]
    with open(current, "w") as f:
        f.write('{"version": 99}\n')
    with pytest.raises(ValueError, match="version 99"):
        read_saved(directory)
    assert HistoryFiles(directory, kept=10).load() == [] and not os.path.exists(current)


def test_each_sample_is_bounded_however_many_groups_and_segments() -> None:
    lags = {f"group-{i:05}": i for i in range(MAX_GROUPS * 5)}
    kept = largest(lags, MAX_GROUPS)
    assert len(kept) == MAX_GROUPS and min(kept.values()) == MAX_GROUPS * 4  # the most lagging
    assert largest({"a": 1}, MAX_GROUPS) == {"a": 1}
    rates = {f"s/{i}": {sid: (1.0, 1.0) for sid in range(i % 7 + 1)} for i in range(1000)}
    bounded = bounded_rates(rates, 500)
    assert 0 < sum(len(v) for v in bounded.values()) <= 500
    assert all(bounded[k] == rates[k] for k in bounded)  # whole streams only


def get(server: ServerProcess, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}{path}", timeout=30) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        raise AssertionError(f"{path}: {err.code} {err.read()!r}") from None


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def saved(server: ServerProcess) -> list[dict[str, Any]]:
    return [s.to_json() for s in read_saved(os.path.join(server.data_dir, HISTORY_DIR))]


def test_history_is_served_again_after_a_crash_and_after_a_clean_stop(tmp_path: Path) -> None:
    from millrace.client.manager import StreamManager

    server = ServerProcess(str(tmp_path / "data")).start()
    try:
        create_topic(server, "kept", 1)
        producer = Producer({"bootstrap.servers": server.bootstrap})
        for i in range(25):
            producer.produce("kept", f"v{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "keeper", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("kept", 0, 5)], asynchronous=False)  # lag 20
        consumer.close()
        with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
            sm.create_scope("kept")
            sm.create_stream("kept", "events", initial_segments=1)
            with sm.create_writer("kept", "events") as writer:
                for _ in range(10):
                    writer.write_event(b"k" * 100, routing_key="a").result()
            sm.create_reader_group("keepers", "kept", "events").close()

        # Nobody opened the console: sampling runs anyway, and the file gets what was sampled.
        on_disk = wait_for(lambda: [s for s in saved(server) if s["group_lag"].get("keeper") == 20
                                    and s["reader_group_unread"].get("kept/keepers", 0) > 1000], "a saved sample")
        lag_before = get(server, "/api/groups/keeper")["lag_history"]
        unread_before = get(server, "/api/reader-groups/kept/keepers")["unread_history"]
        assert {"time_ms": on_disk[0]["time_ms"], "lag": 20} in lag_before

        server.kill()  # a crash: what the last save holds comes back
        crashed_at = time.time() * 1000
        server.start()
        lag_after = get(server, "/api/groups/keeper")["lag_history"]
        assert {"time_ms": on_disk[0]["time_ms"], "lag": 20} in lag_after
        old = [x for x in lag_after if x["time_ms"] < crashed_at]  # then the samples of this run
        assert old == lag_before[:len(old)] and len(old) >= len(on_disk)
        unread_after = get(server, "/api/reader-groups/kept/keepers")["unread_history"]
        old_unread = [x for x in unread_after if x["time_ms"] < crashed_at]
        assert old_unread and old_unread == unread_before[:len(old_unread)]

        # A clean stop saves once more: every sample served before the stop is served after it, the
        # newest one too, which no periodic save wrote yet.
        def unsaved() -> list[dict[str, Any]] | None:
            served = get(server, "/api/groups/keeper")["lag_history"]
            on_file = {s["time_ms"] for s in saved(server)}
            return served if served[-1]["time_ms"] not in on_file else None

        served = wait_for(unsaved, "a sample not saved yet")
        assert server.stop(signal.SIGTERM) == 0
        server.start()
        again = get(server, "/api/groups/keeper")["lag_history"]
        assert again[:len(served)] == served
        throughput = get(server, "/api/overview")["throughput"]
        assert throughput and throughput[0]["time_ms"] < crashed_at
    finally:
        server.kill()
