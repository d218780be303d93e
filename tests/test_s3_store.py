"""The segment store tiering to a real S3-compatible server (SeaweedFS started by the fixture)."""

from __future__ import annotations

import os
import shutil
import signal
import time

import pytest

from millrace.client.segments import SegmentClient
from millrace.store.lts.s3 import S3ChunkStorage
from tests.server_process import ServerProcess
from tests.storehelpers import open_store

pytestmark = pytest.mark.slow


def s3_storage(s3_server, prefix: str) -> S3ChunkStorage:
    return S3ChunkStorage(s3_server.bucket, prefix, client=s3_server.client())


def read_all(store, name: str) -> bytes:
    info = store.get_info(name)
    out = bytearray()
    pos = info.start_offset
    while pos < info.length:
        data = store.read(name, pos, 1 << 20).result(30).data
        out += data
        pos += len(data)
    return bytes(out)


def test_store_tiers_to_s3_and_reads_back_after_restart(s3_server, tmp_path):
    prefix = f"store-{time.time_ns()}"
    store = open_store(str(tmp_path), containers=2, storage=s3_storage(s3_server, prefix), cache_max_bytes=512 * 1024)
    payloads = {f"s3/stream/{i}": os.urandom(700_000) for i in range(3)}
    for name, data in payloads.items():
        store.create_segment(name).result(10)
        for pos in range(0, len(data), 50_000):
            store.append(name, data[pos : pos + 50_000]).result(10)
    store.truncate("s3/stream/0", 100_000).result(10)
    for name, data in payloads.items():
        expect = data[100_000:] if name.endswith("/0") else data
        assert read_all(store, name) == expect
    store.close()

    objects = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix)
    assert objects.get("KeyCount", 0) > 0, "nothing reached S3"

    store = open_store(str(tmp_path), containers=2, storage=s3_storage(s3_server, prefix))
    try:
        for name, data in payloads.items():
            info = store.get_info(name)
            assert info.storage_length == info.length  # a clean stop leaves everything in S3
            expect = data[100_000:] if name.endswith("/0") else data
            assert read_all(store, name) == expect
        assert sum(c.stats["storage_reads"] for c in store.containers) > 0
        assert sum(c.stats["cache_reads"] for c in store.containers) == 0
    finally:
        store.close()


def test_server_on_s3_restarts_with_local_data_dir_gone(s3_server, tmp_path):
    data_dir = str(tmp_path / "data")
    lts = f"s3://{s3_server.bucket}/server-{time.time_ns()}"
    args = ("--lts", lts, "--s3-endpoint", s3_server.endpoint_url, "--containers", "2")
    blob = os.urandom(3 << 20)
    server = ServerProcess(data_dir, *args, env=s3_server.env()).start()
    try:
        with SegmentClient("127.0.0.1", server.native_port) as client:
            client.create_segment("remote/a")
            for pos in range(0, len(blob), 200_000):
                client.append("remote/a", blob[pos : pos + 200_000])
            client.create_segment("remote/b")
            client.append("remote/b", b"sealed-one")
            client.seal("remote/b")
        assert server.stop(signal.SIGTERM) == 0
    finally:
        server.kill()

    shutil.rmtree(data_dir)  # the node's local disk is gone: only S3 remains

    server = ServerProcess(data_dir, *args, env=s3_server.env()).start()
    try:
        with SegmentClient("127.0.0.1", server.native_port) as client:
            got = bytearray()
            while len(got) < len(blob):
                got += client.read("remote/a", len(got), 1 << 20).data
            assert bytes(got) == blob
            info = client.get_info("remote/b")
            assert info.sealed and info.length == 10
            assert client.append("remote/a", b"tail") == len(blob)
        assert server.stop(signal.SIGTERM) == 0
    finally:
        server.kill()


def test_sigkill_with_s3_tier_keeps_acknowledged_data(s3_server, tmp_path):
    data_dir = str(tmp_path / "data")
    lts = f"s3://{s3_server.bucket}/crash-{time.time_ns()}"
    args = ("--lts", lts, "--s3-endpoint", s3_server.endpoint_url)
    acked = []
    server = ServerProcess(data_dir, *args, env=s3_server.env()).start()
    try:
        with SegmentClient("127.0.0.1", server.native_port) as client:
            client.create_segment("k/s")
            for _ in range(300):
                record = os.urandom(10_000)
                acked.append((client.append("k/s", record), record))
        server.kill()
    finally:
        server.kill()
    with ServerProcess(data_dir, *args, env=s3_server.env()) as server, \
            SegmentClient("127.0.0.1", server.native_port) as client:
        for offset, record in acked:
            assert client.read("k/s", offset, len(record)).data == record
