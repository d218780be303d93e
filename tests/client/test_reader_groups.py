"""Reader groups against a real server: the first calls as written, a group of readers through
repeated splits and merges with readers joining, leaving and a restart from a checkpoint (every
event exactly once, per-key order), readers in separate processes, and a Kafka topic written by a
Kafka producer read by a group while the topic scales."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from millrace import (
    CheckpointFailedError,
    EventRead,
    EventStreamReader,
    JsonSerializer,
    Position,
    ReaderAlreadyOnlineError,
    ReaderGroup,
    ReaderGroupNotFoundError,
    ReaderNotInReaderGroupError,
    ReinitializationRequiredError,
    StreamCut,
    StreamManager,
)
from millrace.client import reader_group
from tests.server_process import ServerProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def sm(uri: str) -> Any:
    with StreamManager(uri) as manager:
        yield manager


def test_first_calls(sm: StreamManager) -> None:
    sm.create_scope("iot")
    sm.create_stream("iot", "readings", initial_segments=2)
    writer = sm.create_writer("iot", "readings")
    writer.write_event(b"21.5", routing_key="sensor-7").result()
    writer.flush(); writer.close()  # noqa: E702 - as the first-calls snippet writes it
    group = sm.create_reader_group("dashboard", "iot", "readings")   # from the head of the stream
    reader = group.create_reader("reader-1")
    event = reader.read_next_event(timeout=5.0)              # None on timeout
    assert event.data == b"21.5"
    assert event.routing_key == "sensor-7" and event.stream == "readings" and event.kafka_offset == 0
    assert reader.read_next_event(timeout=0.3) is None
    assert group.online_readers() == ["reader-1"]
    reader.close()
    assert group.online_readers() == []


class App:
    """The application around a group's readers: each reader runs in a thread, and every event it
    returns is recorded together with its position (as one step, as an application stores a result
    with the position it came from), checkpoint events as marks."""

    def __init__(self, group: ReaderGroup[Any], pace: float = 0.0) -> None:
        self.group = group
        self.pace = pace  # seconds of "work" per event
        self.lock = threading.Lock()
        self.records: list[tuple[str, str, int]] = []  # reader, key, sequence number
        self.marks: dict[str, dict[str, int]] = {}  # checkpoint -> reader -> records before its mark
        self.last_position: dict[str, Position] = {}
        self.readers: dict[str, EventStreamReader[Any]] = {}
        self.threads: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self.errors: list[BaseException] = []

    def start(self, reader_id: str, reader: EventStreamReader[Any] | None = None) -> None:
        self.readers[reader_id] = reader or self.group.create_reader(reader_id)
        stop = threading.Event()
        thread = threading.Thread(target=self._loop, args=(reader_id, self.readers[reader_id], stop), daemon=True)
        self.threads[reader_id] = (thread, stop)
        thread.start()

    def stop(self, reader_id: str) -> EventStreamReader[Any]:
        thread, stop = self.threads.pop(reader_id)
        stop.set()
        thread.join(30)
        assert not thread.is_alive()
        return self.readers[reader_id]

    def _loop(self, reader_id: str, reader: EventStreamReader[Any], stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                event = reader.read_next_event(timeout=0.2)
                if event is None:
                    continue
                with self.lock:
                    if event.is_checkpoint:
                        assert event.checkpoint_name is not None
                        self.marks.setdefault(event.checkpoint_name, {})[reader_id] = len(self.records)
                    else:
                        body = event.data if isinstance(event.data, dict) else json.loads(event.data)
                        assert event.routing_key == body["key"]
                        self.records.append((reader_id, body["key"], body["seq"]))
                        self.last_position[reader_id] = event.position
                if self.pace:
                    time.sleep(self.pace)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.errors.append(exc)

    def count(self) -> int:
        with self.lock:
            return len(self.records)

    def roll_back_to(self, checkpoint: str) -> None:
        """What the application had processed when each reader returned the checkpoint (a reader
        that went offline before it had processed everything it recorded)."""
        with self.lock:
            marks = self.marks[checkpoint]
            self.records = [r for i, r in enumerate(self.records) if r[0] not in marks or i < marks[r[0]]]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def check_exactly_once_in_key_order(records: list[tuple[str, str, int]], written: Counter[str]) -> None:
    seen: dict[str, int] = {}
    for _, key, seq in records:
        assert seq == seen.get(key, 0) + 1, f"{key}: {seq} after {seen.get(key, 0)}"
        seen[key] = seq
    assert seen == dict(written)


def scale_once(sm: StreamManager, scope: str, stream: str, step: int) -> None:
    """Even steps split the widest segment, odd steps merge the two narrowest neighbours."""
    current = [s.segment for s in sm.describe_stream(scope, stream).segments]
    if step % 2 == 0 or len(current) < 2:
        sm.split_segment(scope, stream, max(current, key=lambda s: s.key_end - s.key_start))
    else:
        pairs = list(zip(current, current[1:], strict=False))
        left, right = min(pairs, key=lambda p: p[1].key_end - p[0].key_start)
        sm.merge_segments(scope, stream, [left, right])


def test_group_of_three_through_splits_merges_offline_and_a_reset(sm: StreamManager,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Compact the group's state stream often, so readers also restart from snapshots under way.
    monkeypatch.setattr(reader_group, "COMPACT_EVERY", 10)
    scope, stream, keys, total = "rg", "keyed", 16, 2400
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=2)
    # The writer opens first: READ_EVENTS on a stream no writer has opened yet can fail while the
    # first OPEN_WRITER creates its partitions (reported; not the reader group's to work around).
    writer_handle = sm.create_writer(scope, stream)
    group = sm.create_reader_group("app", scope, stream)
    app = App(group)
    app.start("r1")
    app.start("r2")

    written: Counter[str] = Counter()
    progress = [0]
    # The writer waits at each of these counts until the stream has scaled there, so every scale
    # happens under the writer and the successors take events (a writer running ahead of the scales
    # left only empty successors for the reader that joined last, which then read nothing).
    scale_at = [200, 400, 600, 800, 1000, 1200, 1600, 2000]
    scales = 0

    def write() -> None:
        with writer_handle as writer:
            for i in range(total):
                key = f"k{i % keys}"
                written[key] += 1
                writer.write_event(json.dumps({"key": key, "seq": written[key]}).encode(), routing_key=key)
                if i % 50 == 49:
                    writer.flush()
                    progress[0] = i + 1
                    if i + 1 in scale_at:
                        wait_for(lambda: scales > scale_at.index(i + 1), f"the scale at {i + 1}")  # noqa: B023
            writer.flush()
            progress[0] = total

    writer = threading.Thread(target=write, daemon=True)
    writer.start()

    def scale_when_written(count: int) -> None:
        nonlocal scales
        assert count == scale_at[scales]
        wait_for(lambda: progress[0] >= count, f"{count} events written")
        scale_once(sm, scope, stream, scales)
        scales += 1

    scale_when_written(200)
    app.start("r3")
    scale_when_written(400)
    wait_for(lambda: app.count() >= 300 and "r2" in app.last_position, "r2 reading")
    app.stop("r2")  # r2 "crashes"; the application knows the last position it processed
    group.reader_offline("r2", app.last_position["r2"])
    assert group.online_readers() == ["r1", "r3"]
    scale_when_written(600)
    app.start("r2")  # back under the same id
    scale_when_written(800)
    checkpoint = group.initiate_checkpoint("cp1", timeout=60)
    # Complete once every reader recorded it; each returns its checkpoint event right after that.
    wait_for(lambda: set(app.marks.get("cp1", {})) == {"r1", "r2", "r3"}, "every reader's checkpoint event")
    assert checkpoint.cuts[f"{scope}/{stream}"].positions
    scale_when_written(1000)
    scale_when_written(1200)
    wait_for(lambda: app.count() >= 1300, "reading past the checkpoint")
    # Restart from the checkpoint: the readers pause, the application goes back to what it had at
    # the checkpoint, the group goes back to the checkpoint's positions, which takes every reader
    # offline (as Pravega's reset): the old ones refuse to read on, and readers created again go on.
    paused = {r: app.stop(r) for r in ("r1", "r2", "r3")}
    app.roll_back_to("cp1")
    group.reset_to(checkpoint)
    for reader_id, reader in paused.items():
        with pytest.raises(ReinitializationRequiredError):
            reader.read_next_event(timeout=0.5)
        reader.close()  # offline already: changes nothing
        app.start(reader_id)
    scale_when_written(1600)
    scale_when_written(2000)
    writer.join(120)
    assert not writer.is_alive() and progress[0] == total
    sm.seal_stream(scope, stream)
    # Sealed: the group is done when every segment was read to its end and completed.
    wait_for(lambda: not group.state().frontier(), "the group to finish the sealed stream")
    for reader_id in list(app.threads):
        app.stop(reader_id)
    assert not app.errors, app.errors
    assert scales == 8
    assert sm.describe_stream(scope, "_RGapp").truncation, "the state stream was never compacted"
    check_exactly_once_in_key_order(app.records, written)
    assert {r for r, _, _ in app.records} == {"r1", "r2", "r3"}


def read_lines(path: str) -> list[dict[str, Any]]:
    """The whole lines a reader process wrote (a torn last line never counted)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        data = f.read()
    return [json.loads(line) for line in data.split("\n")[:-1]]


class ReaderProcesses:
    def __init__(self, uri: str, scope: str, group: str, directory: str) -> None:
        self.uri, self.scope, self.group, self.directory = uri, scope, group, directory
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def path(self, reader_id: str) -> str:
        return os.path.join(self.directory, f"{reader_id}.jsonl")

    def start(self, reader_id: str) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.client.reader_group_process", self.uri, self.scope, self.group,
             reader_id, self.path(reader_id)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        self.procs[reader_id] = proc

    def kill(self, reader_id: str) -> None:
        proc = self.procs.pop(reader_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def lines(self) -> int:
        return sum(len(read_lines(self.path(r))) for r in self.all_ids())

    def all_ids(self) -> list[str]:
        return sorted(f[:-6] for f in os.listdir(self.directory) if f.endswith(".jsonl"))

    def close(self) -> None:
        for reader_id in list(self.procs):
            self.kill(reader_id)


def test_readers_in_processes_killed(uri: str, sm: StreamManager, tmp_path: Any) -> None:
    """Three reader processes while the stream splits and merges. The busiest is SIGKILLed and
    declared offline at the last position its file holds (a fourth takes over): nothing is read twice
    on its account. Later the busiest again is SIGKILLed and declared offline without a position (a
    fifth takes over): events are read again only if that reader had read them, at most twice. Every
    event is read, and each process reads in per-key order."""
    scope, stream, keys, total = "rgp", "keyed", 12, 1500
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=3)
    writer = sm.create_writer(scope, stream)  # opened before any read (see the test above)
    group = sm.create_reader_group("procs", scope, stream)
    procs = ReaderProcesses(uri, scope, "procs", str(tmp_path))
    try:
        for reader_id in ("p1", "p2", "p3"):
            procs.start(reader_id)
        written: Counter[str] = Counter()
        for i in range(total):
            key = f"k{i % keys}"
            written[key] += 1
            writer.write_event(json.dumps({"key": key, "seq": written[key]}).encode(), routing_key=key)
            if i in (300, 700, 1100):
                writer.flush()
                scale_once(sm, scope, stream, (300, 700, 1100).index(i))
            if i == 500:
                writer.flush()
                # The busiest reader dies (which one holds data depends on how segments fell).
                wait_for(lambda: procs.lines() > 100, "the readers reading")
                victim = max(procs.procs, key=lambda r: len(read_lines(procs.path(r))))
                procs.kill(victim)
                last = read_lines(procs.path(victim))[-1]
                group.reader_offline(victim, Position.from_json(last["position"]))
                procs.start("p4")
            if i == 900:
                writer.flush()
                wait_for(lambda: procs.lines() > 400, "the readers reading on")
                lost = max(procs.procs, key=lambda r: len(read_lines(procs.path(r))))
                procs.kill(lost)
                group.reader_offline(lost, None)  # from its last recorded positions: at least once
                procs.start("p5")
        writer.flush()
        writer.close()
        sm.seal_stream(scope, stream)
        wait_for(lambda: not group.state().frontier(), "the group to finish the sealed stream")
    finally:
        procs.close()
    seen: Counter[tuple[str, int]] = Counter()
    for reader_id in procs.all_ids():
        last_seq: dict[str, int] = {}
        for line in read_lines(procs.path(reader_id)):
            assert line["seq"] > last_seq.get(line["key"], 0), f"{reader_id}: {line} out of key order"
            last_seq[line["key"]] = line["seq"]
            seen[(line["key"], line["seq"])] += 1
    assert procs.all_ids() == ["p1", "p2", "p3", "p4", "p5"]
    assert set(seen) == {(k, s) for k, n in written.items() for s in range(1, n + 1)}
    read_by_lost = {(line["key"], line["seq"]) for line in read_lines(procs.path(lost))}
    again = {event for event, count in seen.items() if count > 1}
    assert again <= read_by_lost and max(seen.values()) <= 2, (again - read_by_lost, max(seen.values()))


def test_kafka_topic_read_by_a_group_while_it_scales(server: ServerProcess, sm: StreamManager) -> None:
    """A Kafka producer writes keyed records to a topic; a reader group (kept in another scope) reads
    the topic's stream while it splits and merges: every record once, per key in order."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    topic, keys, total = "scaled-readings", 10, 1200
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=8, replication_factor=1,
                                  topic_configs={"millrace.segments.initial": "2"})])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all")
    producer.send(topic, key=b"k0", value=json.dumps({"key": "k0", "seq": 1}).encode()).get(30)
    written: Counter[str] = Counter({"k0": 1})
    sm.create_scope("kafka-readers")
    group = sm.create_reader_group("dashboards", "kafka-readers", f"kafka/{topic}",
                                   serializer=JsonSerializer())
    app = App(group)
    app.start("k1")
    app.start("k2")
    try:
        for i in range(1, total):
            key = f"k{i % keys}"
            written[key] += 1
            producer.send(topic, key=key.encode(), value=json.dumps({"key": key, "seq": written[key]}).encode())
            if i % 300 == 0:
                producer.flush()
                scale_once(sm, "kafka", topic, i // 300 - 1)  # split, merge, split
        producer.flush()
        producer.close()
        # A Kafka topic is never sealed (streams/segment_gate.py): the group is done when it read all.
        wait_for(lambda: len(app.records) >= total, "the group to read every record")
    finally:
        for reader_id in list(app.threads):
            app.stop(reader_id)
    assert not app.errors, app.errors
    epochs = sm.describe_stream("kafka", topic).history
    assert [e.reason for e in epochs].count("manual") == 3
    check_exactly_once_in_key_order(app.records, written)


def test_several_streams_restart_cuts_and_housekeeping(uri: str, sm: StreamManager) -> None:
    """A group over two streams (one in another scope); an application that restarts opens the group
    by name and goes on where it was; a checkpoint's cuts cover each stream and reset_to(cuts)
    replays from them; readers joining twice, unknown groups and deletion are refused or done."""
    sm.create_scope("multi")
    sm.create_scope("other")
    sm.create_stream("multi", "temps", initial_segments=2)
    sm.create_stream("other", "winds", initial_segments=1)
    temps, winds = sm.create_writer("multi", "temps"), sm.create_writer("other", "winds")
    for i in range(40):
        temps.write_event(f"t{i}".encode(), routing_key=f"room-{i % 4}")
        winds.write_event(f"w{i}".encode(), routing_key="mast")
    temps.flush()
    winds.flush()
    group = sm.create_reader_group("both", "multi", ["temps", "other/winds"])
    assert group.streams == ["multi/temps", "other/winds"]
    assert group.unread_bytes() > 0
    reader = group.create_reader("a")
    with pytest.raises(ReaderAlreadyOnlineError):
        group.create_reader("a")
    first = [reader.read_next_event(timeout=5.0) for _ in range(30)]
    assert all(e is not None and not e.is_checkpoint for e in first)
    reader.close()  # offline at the position of the last event returned

    # The application restarts: a new manager opens the group by name and reads the rest once.
    with StreamManager(uri) as again:
        reopened = again.reader_group("both", "multi")
        assert reopened.online_readers() == []
        reader = reopened.create_reader("a")
        rest = drain(reader)
        seen = sorted(e.data for e in first if e is not None) + sorted(e.data for e in rest)
        assert sorted(seen) == sorted([f"t{i}".encode() for i in range(40)] + [f"w{i}".encode() for i in range(40)])
        assert {e.stream for e in rest} | {e.stream for e in first if e is not None} == {"temps", "winds"}
        assert reopened.unread_bytes() == 0

        # A checkpoint taken with a reader running in another thread: its cuts cover each stream.
        for i in range(40, 50):
            temps.write_event(f"t{i}".encode(), routing_key=f"room-{i % 4}")
        temps.flush()
        got: list[EventRead[Any]] = []
        stop = threading.Event()

        def run() -> None:
            while not stop.is_set():
                event = reader.read_next_event(timeout=0.2)
                if event is not None:
                    got.append(event)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        checkpoint = reopened.initiate_checkpoint("after-restart", timeout=30)
        wait_for(lambda: any(e.is_checkpoint for e in got), "the checkpoint event")
        stop.set()
        thread.join(30)
        assert [e.checkpoint_name for e in got if e.is_checkpoint] == ["after-restart"]
        assert set(checkpoint.cuts) == {"multi/temps", "other/winds"}
        temps_cut = checkpoint.cuts["multi/temps"]
        assert isinstance(temps_cut, StreamCut) and len(temps_cut.positions) == 2
        with pytest.raises(CheckpointFailedError):
            reopened.initiate_checkpoint("after-restart", timeout=1)
        # What follows the checkpoint: what the thread read after its event, and the rest.
        after = [e.data for e in got[[e.is_checkpoint for e in got].index(True) + 1:] + drain(reader)]

        # reset_to(cuts): the reader is taken offline; created again it returns what followed them again.
        reopened.reset_to(list(checkpoint.cuts.values()))
        assert reopened.online_readers() == []
        with pytest.raises(ReinitializationRequiredError):
            reader.read_next_event(timeout=0.5)
        with pytest.raises(ReinitializationRequiredError):  # and stays so
            reader.read_next_event(timeout=0.5)
        reader = reopened.create_reader("a")
        replay = [e.data for e in drain(reader)]
        assert sorted(replay) == sorted(after)
        # A reader that never reads holds a checkpoint up; cancelling it frees the group.
        idle = reopened.create_reader("idle")
        with pytest.raises(TimeoutError):
            reopened.initiate_checkpoint("stuck", timeout=0.5)
        reopened.cancel_checkpoints()
        assert reopened.state().checkpoints == []
        # Declared offline by someone else, a reader learns it at its next read.
        reopened.reader_offline("idle", None)
        with pytest.raises(ReaderNotInReaderGroupError):
            idle.read_next_event(timeout=0.5)
        reader.close()
    groups = sm.reader_group_manager("multi")
    assert groups.list_reader_groups() == ["both"]
    groups.delete_reader_group("both")
    assert sm.list_reader_groups("multi") == []
    with pytest.raises(ReaderGroupNotFoundError):
        groups.reader_group("both")


def drain(reader: EventStreamReader[Any]) -> list[EventRead[Any]]:
    """Every event the reader has to give now (a short timeout ends it: what was written is durable)."""
    out: list[EventRead[Any]] = []
    while (event := reader.read_next_event(timeout=1.0)) is not None:
        if not event.is_checkpoint:
            out.append(event)
    return out


def test_group_reads_through_a_server_crash(tmp_path: Any) -> None:
    """The server is SIGKILLed while two readers read; it restarts on the same data and more is
    written: the readers go on by themselves and every event comes exactly once, per key in order."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = str(tmp_path / "data")
    server = ServerProcess(data, "--native-port", str(port)).start()
    try:
        sm = StreamManager(f"tcp://127.0.0.1:{port}", reconnect_timeout=60.0)
        sm.create_scope("crash")
        sm.create_stream("crash", "keyed", initial_segments=2)
        written: Counter[str] = Counter()

        def write(count: int) -> None:
            with sm.create_writer("crash", "keyed") as writer:
                for i in range(count):
                    key = f"k{i % 8}"
                    written[key] += 1
                    writer.write_event(json.dumps({"key": key, "seq": written[key]}).encode(), routing_key=key)
                writer.flush()

        write(2000)
        group = sm.create_reader_group("survivors", "crash", "keyed")
        app = App(group, pace=0.002)  # about two seconds of reading: the kill lands mid-stream
        app.start("a")
        app.start("b")
        wait_for(lambda: app.count() >= 200, "reading before the crash")
        server.kill()
        assert app.count() < 2000, "the kill should land while the readers read"
        server = ServerProcess(data, "--native-port", str(port)).start()
        write(400)
        sm.seal_stream("crash", "keyed")
        wait_for(lambda: not group.state().frontier(), "the group to finish after the restart")
        for reader_id in list(app.threads):
            app.stop(reader_id)
        assert not app.errors, app.errors
        check_exactly_once_in_key_order(app.records, written)
        sm.close()
    finally:
        server.kill()
