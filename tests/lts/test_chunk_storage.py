"""The ChunkStorage contract, run against every backend: filesystem and S3 (a real SeaweedFS)."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator

import pytest

from millrace.store.errors import ChunkExistsError, ChunkNotFoundError
from millrace.store.lts.filesystem import FileSystemChunkStorage
from millrace.store.lts.interface import ChunkStorage
from millrace.store.lts.s3 import S3ChunkStorage
from tests.page_cache import resident_bytes
from tests.s3server import S3Server

CHUNK = "kafka/orders/3.#epoch.0/E1-O1048576-" + "0f8e4f52-4ad5-4a3e-9b7c-2b1d7c1f0a11"


# The S3 half starts a SeaweedFS server through getfixturevalue, which tests/tiers.py cannot read: say so.
@pytest.fixture(params=["fs", pytest.param("s3", marks=pytest.mark.process)])
def storage(request: pytest.FixtureRequest, tmp_path) -> Iterator[ChunkStorage]:
    if request.param == "fs":
        backend: ChunkStorage = FileSystemChunkStorage(str(tmp_path / "lts"))
    else:
        server: S3Server = request.getfixturevalue("s3_server")
        # A fresh prefix per test keeps tests independent on the shared session server.
        backend = S3ChunkStorage(
            server.bucket,
            prefix=f"t-{uuid.uuid4().hex}",
            endpoint_url=server.endpoint_url,
            region=server.region,
            client=server.client(),
        )
    yield backend
    backend.close()


def test_write_then_read_whole_and_ranges(storage: ChunkStorage) -> None:
    data = bytes(range(256)) * 4
    storage.write(CHUNK, data)
    assert storage.read(CHUNK, 0, len(data)) == data
    assert storage.read(CHUNK, 10, 20) == data[10:30]
    assert storage.read(CHUNK, len(data) - 5, 5) == data[-5:]
    assert storage.read(CHUNK, 100, 0) == b""


def test_read_past_end_is_short_or_empty(storage: ChunkStorage) -> None:
    storage.write("a/chunk", b"0123456789")
    assert storage.read("a/chunk", 5, 100) == b"56789"
    assert storage.read("a/chunk", 10, 5) == b""
    assert storage.read("a/chunk", 1000, 5) == b""


def test_empty_chunk(storage: ChunkStorage) -> None:
    storage.write("empty", b"")
    assert storage.exists("empty")
    assert storage.read("empty", 0, 10) == b""
    assert storage.list("emp") == ["empty"]


def test_negative_range_rejected(storage: ChunkStorage) -> None:
    storage.write("a/chunk", b"x")
    with pytest.raises(ValueError):
        storage.read("a/chunk", -1, 1)
    with pytest.raises(ValueError):
        storage.read("a/chunk", 0, -1)


def test_exists_and_delete_idempotent(storage: ChunkStorage) -> None:
    assert not storage.exists(CHUNK)
    storage.write(CHUNK, b"data")
    assert storage.exists(CHUNK)
    storage.delete(CHUNK)
    assert not storage.exists(CHUNK)
    storage.delete(CHUNK)  # absent: no error
    storage.delete("never/written")
    with pytest.raises(ChunkNotFoundError):
        storage.read(CHUNK, 0, 1)


def test_name_reusable_after_delete(storage: ChunkStorage) -> None:
    storage.write("s/c", b"one")
    storage.delete("s/c")
    storage.write("s/c", b"two")
    assert storage.read("s/c", 0, 10) == b"two"


def test_read_missing_raises(storage: ChunkStorage) -> None:
    with pytest.raises(ChunkNotFoundError):
        storage.read("no/such/chunk", 0, 10)
    with pytest.raises(ChunkNotFoundError):
        storage.read("no/such/chunk", 0, 0)


def test_write_existing_raises_and_keeps_original(storage: ChunkStorage) -> None:
    storage.write(CHUNK, b"first")
    with pytest.raises(ChunkExistsError):
        storage.write(CHUNK, b"second, from a zombie")
    assert storage.read(CHUNK, 0, 100) == b"first"


def test_list_by_prefix(storage: ChunkStorage) -> None:
    names = [
        "kafka/orders/0.#epoch.0/E1-O0",
        "kafka/orders/0.#epoch.0/E1-O100",
        "kafka/orders/1.#epoch.0/E1-O0",
        "kafka/orders-eu/0.#epoch.0/E1-O0",
        "kafka/payments/0.#epoch.0/E2-O0",
        "top",
    ]
    for n in names:
        storage.write(n, b"x")
    assert storage.list() == sorted(names)
    assert storage.list("kafka/orders/") == names[:3]
    assert storage.list("kafka/orders") == sorted(names[:4])
    assert storage.list("kafka/orders/0.#epoch.0/E1-O1") == ["kafka/orders/0.#epoch.0/E1-O100"]
    assert storage.list("kafka/payments/0.#epoch.0/E2-O0") == ["kafka/payments/0.#epoch.0/E2-O0"]
    assert storage.list("nothing") == []
    assert storage.list("kafka/nothing/") == []
    storage.delete(names[0])
    assert storage.list("kafka/orders/0") == [names[1]]


def test_odd_names_round_trip(storage: ChunkStorage) -> None:
    odd = [
        "scope/stream/0.#epoch.1/E7-O0-6b1f0c2e",
        "a b/c%20d/e+f=g,h~i",
        "unicode/ströme/ß€",
        "at@sign/x@chunk",
        "deep/" + "/".join(f"l{i}" for i in range(20)),
        "a",
        "a/b",  # "a" is both a chunk and a "directory"
        ".hidden/..dots/...",
        "trailing.dot.",
    ]
    for i, name in enumerate(odd):
        storage.write(name, f"payload {i}".encode())
    for i, name in enumerate(odd):
        assert storage.exists(name)
        assert storage.read(name, 0, 100) == f"payload {i}".encode()
    assert storage.list() == sorted(odd)
    assert storage.list("a") == sorted(["a", "a b/c%20d/e+f=g,h~i", "a/b", "at@sign/x@chunk"])
    for name in odd:
        storage.delete(name)
    assert storage.list() == []


@pytest.mark.parametrize(
    "bad", ["", "/abs/path", "../escape", "a/../../b", "a/./b", "a//b", "a/", "a/..", "nul\x00"]
)
def test_invalid_names_rejected(storage: ChunkStorage, bad: str) -> None:
    with pytest.raises(ValueError):
        storage.write(bad, b"x")
    with pytest.raises(ValueError):
        storage.read(bad, 0, 1)
    with pytest.raises(ValueError):
        storage.exists(bad)
    with pytest.raises(ValueError):
        storage.delete(bad)


def _race(storage: ChunkStorage, name: str, writers: int) -> tuple[list[int], list[int]]:
    """Start ``writers`` threads writing ``name`` at once; return (winners, losers)."""
    barrier = threading.Barrier(writers)
    won: list[int] = []
    lost: list[int] = []
    errors: list[BaseException] = []

    def write(i: int) -> None:
        barrier.wait()
        try:
            storage.write(name, f"writer {i} ".encode() * 1000)
            won.append(i)
        except ChunkExistsError:
            lost.append(i)
        except BaseException as e:  # re-raised below; an exception dying with its thread hides bugs
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    return won, lost


def test_concurrent_writers_exactly_one_wins(storage: ChunkStorage) -> None:
    for round_ in range(3):
        name = f"race/{round_}"
        won, lost = _race(storage, name, writers=8)
        assert len(won) == 1, (won, lost)
        assert len(lost) == 7
        assert storage.read(name, 0, 100_000) == f"writer {won[0]} ".encode() * 1000


def test_large_chunk_round_trip(storage: ChunkStorage) -> None:
    data = os.urandom(8 << 20)
    storage.write("big/chunk", data)
    assert storage.read("big/chunk", 0, len(data)) == data
    assert storage.read("big/chunk", (4 << 20) - 3, 7) == data[(4 << 20) - 3 : (4 << 20) + 4]
    assert storage.read("big/chunk", len(data) - 10, 1 << 20) == data[-10:]


def test_a_chunk_written_in_parts_holds_them_back_to_back(storage: ChunkStorage) -> None:
    """The storage writer hands over the read cache's blocks unjoined: parts of every size, some views
    and some crossing the filesystem's 1 MiB sync steps, read back as one chunk in order."""
    sizes = [0, 1, 1000, (1 << 20) - 1001, 3, (1 << 20) + 7, 12345, 2 << 20]
    blobs = [os.urandom(n) for n in sizes]
    parts = [memoryview(b) if i % 2 else b for i, b in enumerate(blobs)]
    storage.write_parts("parts/chunk", parts)
    whole = b"".join(blobs)
    assert storage.read("parts/chunk", 0, len(whole) + 10) == whole
    with pytest.raises(ChunkExistsError):
        storage.write_parts("parts/chunk", [b"a", b"b"])


def test_a_written_file_chunk_leaves_the_page_cache(tmp_path) -> None:
    """Long-term storage's data is not the page cache's to keep: a written chunk's pages are dropped once
    they are on disk (else the cache grows by everything ever tiered), and it still reads back whole."""
    storage = FileSystemChunkStorage(str(tmp_path / "lts"))
    data = os.urandom(4 << 20)
    storage.write("kept/out", data)
    path = storage._path("kept/out")
    assert resident_bytes(path) == 0
    assert storage.read("kept/out", 0, len(data)) == data
    assert resident_bytes(path) > 0  # the check sees pages when there are some
