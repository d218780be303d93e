"""SIGKILL a real server while several writers append; every acknowledged append must survive."""

from __future__ import annotations

import os
import signal
import struct
import threading
import time
import zlib
from collections import deque

import pytest

from millrace.client.segments import ConnectionLostError, SegmentClient
from tests.server_process import ServerProcess

pytestmark = pytest.mark.slow

# A self-describing record, so a reader can tell a whole record from garbage or a torn one.
_HEAD = struct.Struct(">IHII")  # magic, writer, sequence, payload length; then payload, crc32
MAGIC = 0x4D524345


def make_record(writer: int, seq: int) -> bytes:
    payload = os.urandom(16 + (seq * 7919 + writer * 31) % 900)
    body = _HEAD.pack(MAGIC, writer, seq, len(payload)) + payload
    return body + struct.pack(">I", zlib.crc32(body))


def parse_records(data: bytes) -> list[tuple[int, int, bytes]]:
    out, pos = [], 0
    while pos < len(data):
        magic, writer, seq, size = _HEAD.unpack_from(data, pos)
        assert magic == MAGIC, f"garbage at {pos}"
        end = pos + _HEAD.size + size + 4
        body = data[pos : end - 4]
        assert struct.unpack(">I", data[end - 4 : end])[0] == zlib.crc32(body), f"torn record at {pos}"
        out.append((writer, seq, data[pos:end]))
        pos = end
    return out


def read_segment(client: SegmentClient, name: str) -> bytes:
    info = client.get_info(name)
    out = bytearray()
    while len(out) < info.length:
        out += client.read(name, len(out), 1 << 20).data
    return bytes(out)


def run_writers(port: int, segments: list[str], writers_per_segment: int, stop: threading.Event,
                acked: dict[str, list[tuple[int, bytes]]], first_writer_id: int) -> list[threading.Thread]:
    """Each writer pipelines up to 16 appends and records (offset, record) for every ack."""
    lock = threading.Lock()

    def writer(w: int, segment: str) -> None:
        try:
            client = SegmentClient("127.0.0.1", port)
        except OSError:
            return
        inflight: deque = deque()
        seq = 0
        try:
            while not stop.is_set():
                record = make_record(w, seq)
                seq += 1
                inflight.append((client.append_async(segment, record), record))
                while len(inflight) >= 16 or (inflight and inflight[0][0].done()):
                    fut, rec = inflight.popleft()
                    offset = fut.result(30)
                    with lock:
                        acked[segment].append((offset, rec))
        except (ConnectionLostError, OSError, TimeoutError):
            pass  # the server died under us: what was acked is what counts

    threads = []
    for i, segment in enumerate(segments):
        for j in range(writers_per_segment):
            t = threading.Thread(target=writer, args=(first_writer_id + i * writers_per_segment + j, segment), daemon=True)
            t.start()
            threads.append(t)
    return threads


def check_segment(content: bytes, acked: list[tuple[int, bytes]]) -> int:
    records = parse_records(content)  # whole records only: nothing half-written shows
    last_seq: dict[int, int] = {}
    for writer, seq, _ in records:
        assert seq > last_seq.get(writer, -1), "a writer's appends came back out of order"
        last_seq[writer] = seq
    for offset, record in acked:
        assert content[offset : offset + len(record)] == record, f"acknowledged append at {offset} lost"
    return len(records)


def test_sigkill_while_writing_loses_no_acknowledged_append(tmp_path):
    data_dir = str(tmp_path / "data")
    segments = [f"crash/stream/{i}" for i in range(3)]
    acked: dict[str, list[tuple[int, bytes]]] = {s: [] for s in segments}
    for round_no in range(2):
        server = ServerProcess(data_dir, "--containers", "2").start()
        try:
            with SegmentClient("127.0.0.1", server.native_port) as admin:
                for s in segments:
                    if round_no == 0:
                        admin.create_segment(s)
                    check_segment(read_segment(admin, s), acked[s])
            stop = threading.Event()
            threads = run_writers(server.native_port, segments, 2, stop, acked, first_writer_id=round_no * 100)
            time.sleep(2.5)
            server.kill()  # SIGKILL mid-stream
            stop.set()
            for t in threads:
                t.join(30)
        finally:
            server.kill()
        assert all(acked[s] for s in segments), "writers made no progress"

    server = ServerProcess(data_dir, "--containers", "2").start()
    try:
        with SegmentClient("127.0.0.1", server.native_port) as client:
            total = 0
            for s in segments:
                total += check_segment(read_segment(client, s), acked[s])
            assert total >= sum(len(a) for a in acked.values())
            # The store keeps working after recovery.
            record = make_record(999, 0)
            offset = client.append(segments[0], record)
            assert client.read(segments[0], offset, len(record)).data == record
        assert server.stop(signal.SIGTERM) == 0
    finally:
        server.kill()


def test_clean_shutdown_on_sigint_and_sigterm_then_recovery(tmp_path):
    data_dir = str(tmp_path / "data")
    for sig in (signal.SIGINT, signal.SIGTERM):
        server = ServerProcess(data_dir).start()
        try:
            with SegmentClient("127.0.0.1", server.native_port) as client:
                name = f"clean/{sig.name}"
                client.create_segment(name)
                client.append(name, b"x" * 1000)
            assert server.stop(sig) == 0
            assert "stopped cleanly" in "".join(server.output)
        finally:
            server.kill()
    with ServerProcess(data_dir) as server, SegmentClient("127.0.0.1", server.native_port) as client:
        user_segments = [s for s in client.list_segments() if not s.startswith("_system/")]
        assert sorted(user_segments) == ["clean/SIGINT", "clean/SIGTERM"]
        assert client.read("clean/SIGINT", 0, 2000).data == b"x" * 1000


def test_second_server_on_same_data_dir_is_refused(tmp_path):
    data_dir = str(tmp_path / "data")
    with ServerProcess(data_dir):
        second = ServerProcess(data_dir)
        with pytest.raises(RuntimeError, match="cannot start"):
            second.start(timeout=30)
