"""Segment operations through a real SegmentStore (file logs, filesystem long-term storage)."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from millrace.store.contracts import AttributeUpdate
from millrace.store.contracts import AttributeUpdateType as T
from millrace.store.errors import (
    BadAttributeUpdateError,
    BadOffsetError,
    OffsetOutOfRangeError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentTruncatedError,
    StoreError,
)
from tests.storehelpers import open_store


@pytest.fixture
def store(tmp_path):
    s = open_store(str(tmp_path))
    yield s
    s.close()


def read_all(store, name: str, start: int | None = None) -> bytes:
    info = store.get_info(name)
    pos = info.start_offset if start is None else start
    out = bytearray()
    while pos < info.length:
        r = store.read(name, pos, 1 << 20).result(10)
        assert r.data, f"empty read at {pos} of {info.length}"
        out += r.data
        pos += len(r.data)
    return bytes(out)


def test_create_append_read_info(store):
    store.create_segment("s/a/0", {"k": 1}).result(5)
    assert store.append("s/a/0", b"hello").result(5) == 0
    assert store.append("s/a/0", b" world").result(5) == 5
    info = store.get_info("s/a/0")
    assert (info.length, info.start_offset, info.sealed, info.attributes) == (11, 0, False, {"k": 1})
    assert store.read("s/a/0", 0, 100).result(5).data == b"hello world"
    assert store.read("s/a/0", 6, 3).result(5).data == b"wor"
    with pytest.raises(SegmentExistsError):
        store.create_segment("s/a/0").result(5)
    with pytest.raises(SegmentNotFoundError):
        store.append("nope", b"x").result(5)
    with pytest.raises(OffsetOutOfRangeError):
        store.read("s/a/0", 12, 1).result(5)


def test_conditional_append_and_attributes(store):
    store.create_segment("c").result(5)
    store.append("c", b"abc", expected_offset=0).result(5)
    with pytest.raises(BadOffsetError) as err:
        store.append("c", b"x", expected_offset=0).result(5)
    assert err.value.actual == 3
    store.append("c", b"d", attributes=[AttributeUpdate("writer", 1, T.REPLACE_IF_EQUALS, None)]).result(5)
    # A failing attribute condition rejects the whole append: data and attributes.
    with pytest.raises(BadAttributeUpdateError):
        store.append("c", b"zz", attributes=[AttributeUpdate("writer", 5, T.REPLACE_IF_EQUALS, 0)]).result(5)
    assert store.get_info("c").length == 4
    store.update_attributes("c", [AttributeUpdate("writer", 3, T.REPLACE_IF_GREATER)]).result(5)
    with pytest.raises(BadAttributeUpdateError):
        store.update_attributes("c", [AttributeUpdate("writer", 2, T.REPLACE_IF_GREATER)]).result(5)
    store.update_attributes("c", [AttributeUpdate("m", 7, T.ACCUMULATE_MAX),
                                  AttributeUpdate("m", 4, T.ACCUMULATE_MAX)]).result(5)
    assert store.get_info("c").attributes == {"writer": 3, "m": 7}
    store.update_attributes("c", [AttributeUpdate("m", type=T.REMOVE)]).result(5)
    assert store.get_info("c").attributes == {"writer": 3}


def test_seal(store):
    store.create_segment("x").result(5)
    store.append("x", b"12345").result(5)
    assert store.seal("x").result(5) == 5
    assert store.seal("x").result(5) == 5  # idempotent
    with pytest.raises(SegmentSealedError):
        store.append("x", b"6").result(5)
    end = store.read("x", 5, 10, wait_timeout=5).result(5)
    assert end.end_of_segment and end.data == b""


def test_truncate(store):
    store.create_segment("t").result(5)
    for i in range(10):
        store.append("t", bytes([i]) * 10).result(5)
    store.truncate("t", 35).result(5)
    info = store.get_info("t")
    assert (info.start_offset, info.length) == (35, 100)
    with pytest.raises(SegmentTruncatedError):
        store.read("t", 34, 10).result(5)
    assert store.read("t", 35, 5).result(5).data == bytes([3]) * 5
    store.truncate("t", 20).result(5)  # below the start: a no-op
    assert store.get_info("t").start_offset == 35
    with pytest.raises(OffsetOutOfRangeError):
        store.truncate("t", 101).result(5)


def test_delete(store):
    store.create_segment("d").result(5)
    store.append("d", b"data").result(5)
    store.delete("d").result(5)
    assert not store.exists("d")
    with pytest.raises(SegmentNotFoundError):
        store.get_info("d")
    store.create_segment("d").result(5)  # the name can be reused
    assert store.get_info("d").length == 0


def test_merge_moves_data_atomically(store):
    store.create_segment("scope/stream/0.#epoch.0").result(5)
    txn = "scope/stream/0.#epoch.0#transaction.abc"
    store.create_segment(txn).result(5)
    store.append("scope/stream/0.#epoch.0", b"AAAA").result(5)
    store.append(txn, b"tx-1").result(5)
    store.append(txn, b"tx-2").result(5)
    with pytest.raises(StoreError):
        store.merge("scope/stream/0.#epoch.0", txn).result(5)  # source not sealed
    store.seal(txn).result(5)
    assert store.merge("scope/stream/0.#epoch.0", txn).result(10) == 4
    assert not store.exists(txn)
    store.append("scope/stream/0.#epoch.0", b"BB").result(5)
    assert read_all(store, "scope/stream/0.#epoch.0") == b"AAAAtx-1tx-2BB"


def test_tail_read_waits_for_next_append(store):
    store.create_segment("w").result(5)
    pending = store.read("w", 0, 100, wait_timeout=10)
    time.sleep(0.05)
    assert not pending.done()
    store.append("w", b"wake").result(5)
    assert pending.result(5).data == b"wake"
    started = time.monotonic()
    empty = store.read("w", 4, 100, wait_timeout=0.2).result(5)
    assert empty.data == b"" and not empty.end_of_segment
    assert time.monotonic() - started >= 0.15


def test_tail_waiter_woken_by_seal(store):
    store.create_segment("ws").result(5)
    pending = store.read("ws", 0, 100, wait_timeout=10)
    store.seal("ws").result(5)
    assert pending.result(5).end_of_segment


def test_concurrent_writers_keep_every_append(store):
    store.create_segment("many").result(5)
    per_writer = 200
    results: dict[int, list[tuple[int, bytes]]] = {}

    def writer(w: int) -> None:
        mine = []
        for i in range(per_writer):
            data = f"<{w}:{i}>".encode()
            mine.append((store.append("many", data).result(10), data))
        results[w] = mine

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    content = read_all(store, "many")
    for mine in results.values():
        offsets = [off for off, _ in mine]
        assert offsets == sorted(offsets)  # one writer's appends stay in order
        for off, data in mine:
            assert content[off : off + len(data)] == data
    assert len(content) == sum(len(d) for m in results.values() for _, d in m)


def test_restart_recovers_everything(tmp_path):
    store = open_store(str(tmp_path))
    store.create_segment("r/1").result(5)
    store.create_segment("r/2").result(5)
    blob = os.urandom(300_000)
    store.append("r/1", blob).result(5)
    store.append("r/2", b"small").result(5)
    store.update_attributes("r/2", [AttributeUpdate("a", 9)]).result(5)
    store.seal("r/2").result(5)
    store.truncate("r/1", 1000).result(5)
    store.close()

    store = open_store(str(tmp_path))
    try:
        assert read_all(store, "r/1") == blob[1000:]
        info = store.get_info("r/2")
        assert info.sealed and info.attributes == {"a": 9} and info.length == 5
        assert store.append("r/1", b"more").result(5) == 300_000
    finally:
        store.close()


def test_segment_far_beyond_cache_and_log(tmp_path):
    """8 MiB through a 1 MiB cache: old data comes back from long-term storage, and the log
    stays small because it is truncated behind flushed checkpoints."""
    store = open_store(str(tmp_path), containers=1, cache_max_bytes=1 << 20, checkpoint_every_bytes=256 * 1024)
    try:
        store.create_segment("big").result(5)
        chunks = [os.urandom(64 * 1024) for _ in range(128)]
        for c in chunks:
            store.append("big", c).result(10)
        container = store.containers[0]
        deadline = time.monotonic() + 20
        while container.log_size_bytes > 2 << 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert container.log_size_bytes <= 2 << 20
        assert store.containers[0].read_index().total_bytes <= 2 << 20
        assert read_all(store, "big") == b"".join(chunks)
        assert container.stats["storage_reads"] > 0
    finally:
        store.close()


def test_a_cache_full_of_flushed_data_does_not_make_every_append_a_chunk(tmp_path):
    """Small appends under a cache that flushed data fills: they wait for the flush age or size like any
    other. When the full cache counted as pressure, each append was flushed as a chunk of its own, and
    each chunk left a reference in memory for as long as the segment lived."""
    store = open_store(str(tmp_path), containers=1, cache_max_bytes=1 << 20, flush_age_seconds=3600.0,
                       flush_threshold_bytes=8 << 20)
    try:
        store.create_segment("old").result(5)
        for _ in range(16):
            store.append("old", os.urandom(64 * 1024)).result(10)
        store.seal("old").result(10)  # a sealed segment is flushed whole: the cache is full of clean data
        deadline = time.monotonic() + 20
        while store.get_info("old").storage_length < 16 * 64 * 1024 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.containers[0].read_index().total_bytes > (1 << 20) // 2
        store.create_segment("hot").result(5)
        appends = [store.append("hot", b"%05d" % i + bytes(95)) for i in range(2000)]
        for append in appends:
            append.result(10)
        time.sleep(1.0)  # many storage writer rounds (it polls every 50 ms here)
        hot_chunks = tmp_path / "lts" / "containers" / "0" / "hot"
        assert not hot_chunks.exists() or not list(hot_chunks.iterdir())
        assert store.get_info("hot").storage_length == 0
    finally:
        store.close()


def test_restart_reads_old_data_from_long_term_storage(tmp_path):
    store = open_store(str(tmp_path), containers=2)
    store.create_segment("old").result(5)
    payload = os.urandom(2 << 20)
    for i in range(0, len(payload), 100_000):
        store.append("old", payload[i : i + 100_000]).result(5)
    store.close()
    store = open_store(str(tmp_path), containers=2)
    try:
        assert store.get_info("old").storage_length == len(payload)
        assert read_all(store, "old") == payload
    finally:
        store.close()


def test_orphan_chunks_are_swept_on_start(tmp_path):
    store = open_store(str(tmp_path), containers=1)
    store.create_segment("o").result(5)
    store.append("o", b"x" * 1000).result(5)
    store.storage.write("containers/0/o/E1-O999-orphan", b"junk")
    store.close()
    store = open_store(str(tmp_path), containers=1)
    try:
        deadline = time.monotonic() + 5
        while store.storage.exists("containers/0/o/E1-O999-orphan") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not store.storage.exists("containers/0/o/E1-O999-orphan")
        assert read_all(store, "o") == b"x" * 1000
    finally:
        store.close()


def test_containers_are_independent(tmp_path):
    store = open_store(str(tmp_path), containers=4)
    try:
        names = [f"seg-{i}" for i in range(32)]
        for n in names:
            store.create_segment(n).result(5)
        used = {store.container_for(n).container_id for n in names}
        assert used == {0, 1, 2, 3}
        # transaction segments live with their parent
        assert store.container_for("a/b/1.#epoch.0#transaction.x") is store.container_for("a/b/1.#epoch.0")
        assert sorted(store.list_segments()) == sorted(names)
    finally:
        store.close()


def test_clean_close_leaves_metadata_in_long_term_storage(tmp_path):
    """After a clean shutdown, losing the durable logs loses nothing: the checkpoint each container
    published to long-term storage restores every segment."""
    store = open_store(str(tmp_path), containers=2)
    blob = os.urandom(500_000)
    store.create_segment("m/1").result(5)
    store.append("m/1", blob).result(5)
    store.create_segment("m/2", {"w": 1}).result(5)
    store.seal("m/2").result(5)
    store.close()
    shutil.rmtree(tmp_path / "logs")
    store = open_store(str(tmp_path), containers=2)
    try:
        assert read_all(store, "m/1") == blob
        info = store.get_info("m/2")
        assert info.sealed and info.attributes == {"w": 1}
        store.create_segment("m/3").result(5)  # ids continue: no clash with restored segments
        assert store.append("m/1", b"!").result(5) == len(blob)
    finally:
        store.close()
