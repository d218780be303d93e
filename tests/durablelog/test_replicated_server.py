"""``millrace serve --log-replicas``: the segment store on replicated logs, with replicas and the server
SIGKILLed under load; every acknowledged append must survive."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from millrace.client.segments import SegmentClient
from millrace.store.durablelog.metadata import FileLogMetadataStore
from tests.durablelog.logd_process import Replicas
from tests.server_process import ServerProcess
from tests.test_crash import check_segment, read_segment, run_writers

pytestmark = pytest.mark.slow


def test_logd_and_server_sigkill_under_load_lose_nothing_acknowledged(tmp_path: Path) -> None:
    replicas = Replicas(tmp_path / "replicas", 4).start()
    data_dir = str(tmp_path / "data")
    args = ("--containers", "2", "--log-replicas", ",".join(replicas.addresses),
            "--write-quorum", "3", "--ack-quorum", "2")
    segments = [f"replicated/stream/{i}" for i in range(3)]
    acked: dict[str, list[tuple[int, bytes]]] = {s: [] for s in segments}
    victim = replicas.logds[0]  # the first three replicas form every container's first ensemble
    try:
        server = ServerProcess(data_dir, *args).start()
        try:
            with SegmentClient("127.0.0.1", server.native_port) as admin:
                for s in segments:
                    admin.create_segment(s)
            stop = threading.Event()
            threads = run_writers(server.native_port, segments, 2, stop, acked, first_writer_id=0)
            time.sleep(1.5)
            victim.kill()  # a replica dies mid-load: the ack quorum still holds
            at_kill = {s: len(a) for s, a in acked.items()}
            time.sleep(2.5)
            progressed = {s: len(a) - at_kill[s] for s, a in acked.items()}
            server.kill()  # then the server itself crashes mid-load
            stop.set()
            for t in threads:
                t.join(30)
        finally:
            server.kill()
        assert all(n > 0 for n in progressed.values()), f"appends stalled after the replica died: {progressed}"

        server = ServerProcess(data_dir, *args).start()
        try:
            with SegmentClient("127.0.0.1", server.native_port) as client:
                for s in segments:
                    check_segment(read_segment(client, s), acked[s])
                offset = client.append(segments[0], b"after-recovery")
                assert client.read(segments[0], offset, 14).data == b"after-recovery"
            assert server.stop(signal.SIGTERM) == 0  # a clean shutdown closes the replicated logs too
        finally:
            server.kill()
        metadata = FileLogMetadataStore(str(Path(data_dir) / "logmeta"))
        for cid in range(2):
            record = metadata.read(f"container-{cid}")
            assert record.epoch >= 2
            assert victim.address not in record.fragments[-1].ensemble
    finally:
        replicas.close()
