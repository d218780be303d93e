"""Filesystem-only properties: confinement to the root, on-disk layout, crash leftovers."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from millrace.store.lts.factory import chunk_storage_from_url
from millrace.store.lts.filesystem import FileSystemChunkStorage
from millrace.store.lts.s3 import S3ChunkStorage


@pytest.mark.parametrize("bad", ["../outside", "a/../../outside", "/etc/passwd", "..", "a/.."])
def test_path_traversal_rejected(tmp_path: Path, bad: str) -> None:
    fs = FileSystemChunkStorage(str(tmp_path / "root"))
    with pytest.raises(ValueError, match="chunk name"):
        fs.write(bad, b"x")
    assert not (tmp_path / "outside").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


def test_list_prefix_cannot_escape_root(tmp_path: Path) -> None:
    (tmp_path / "secret@chunk").write_bytes(b"not a chunk of this storage")
    fs = FileSystemChunkStorage(str(tmp_path / "root"))
    fs.write("inside", b"x")
    assert fs.list("../") == []
    assert fs.list("../secret") == []


def test_files_stay_under_root_and_names_are_readable(tmp_path: Path) -> None:
    root = tmp_path / "root"
    fs = FileSystemChunkStorage(str(root))
    fs.write("kafka/orders/3.#epoch.0/E1-O1048576-abc", b"x")
    fs.write("weird/%2F@..x", b"y")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == ["kafka/orders/3.#epoch.0/E1-O1048576-abc@chunk", "weird/%252F%40..x@chunk"]
    assert fs.list() == ["kafka/orders/3.#epoch.0/E1-O1048576-abc", "weird/%2F@..x"]


def test_leftover_temp_files_are_not_chunks(tmp_path: Path) -> None:
    root = tmp_path / "root"
    fs = FileSystemChunkStorage(str(root))
    fs.write("seg/c1", b"x")
    # What a crash between creating the temp file and linking it leaves behind.
    (root / "seg" / "c2@chunk@tmp-deadbeef").write_bytes(b"partial")
    assert fs.list() == ["seg/c1"]
    assert not fs.exists("seg/c2")
    fs.write("seg/c2", b"whole")
    assert fs.read("seg/c2", 0, 10) == b"whole"


def test_delete_prunes_empty_directories(tmp_path: Path) -> None:
    root = tmp_path / "root"
    fs = FileSystemChunkStorage(str(root))
    fs.write("s/stream/0/c1", b"x")
    fs.write("s/other/c", b"x")
    fs.delete("s/stream/0/c1")
    assert not (root / "s" / "stream").exists()
    assert (root / "s" / "other").is_dir()
    assert root.is_dir()


def test_survives_reopen(tmp_path: Path) -> None:
    fs = FileSystemChunkStorage(str(tmp_path / "root"))
    fs.write("a/b", b"durable")
    again = FileSystemChunkStorage(str(tmp_path / "root"))
    assert again.read("a/b", 0, 100) == b"durable"
    assert again.list() == ["a/b"]


def test_factory_paths_and_urls(tmp_path: Path) -> None:
    plain = chunk_storage_from_url(str(tmp_path / "p"))
    assert isinstance(plain, FileSystemChunkStorage) and plain.root == str(tmp_path / "p")
    url = chunk_storage_from_url(f"file://{tmp_path}/u%20v")
    assert isinstance(url, FileSystemChunkStorage) and url.root == f"{tmp_path}/u v"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        rel = chunk_storage_from_url("relative/dir")
        assert isinstance(rel, FileSystemChunkStorage) and rel.root == str(tmp_path / "relative" / "dir")
    finally:
        os.chdir(cwd)


def test_factory_s3_url() -> None:
    s3 = chunk_storage_from_url("s3://my-bucket/some/prefix/", s3_endpoint="http://127.0.0.1:1")
    assert isinstance(s3, S3ChunkStorage)
    assert (s3.bucket, s3.prefix, s3.endpoint_url) == ("my-bucket", "some/prefix/", "http://127.0.0.1:1")
    bare = chunk_storage_from_url("s3://my-bucket", s3_endpoint="http://127.0.0.1:1")
    assert isinstance(bare, S3ChunkStorage) and bare.prefix == ""
    s3.close()
    bare.close()


@pytest.mark.parametrize(
    "bad", ["", "s3://", "s3:///prefix", "http://host/x", "file://otherhost/x", "s3://b/p?x=1"]
)
def test_factory_rejects_bad_urls(bad: str) -> None:
    with pytest.raises(ValueError):
        chunk_storage_from_url(bad)


def test_concurrent_write_and_delete_in_one_directory(tmp_path: Path) -> None:
    # Deletes prune empty directories while other writers are creating files in them.
    fs = FileSystemChunkStorage(str(tmp_path / "root"))
    errors: list[BaseException] = []

    def churn(tag: str) -> None:
        try:
            for i in range(300):
                name = f"seg/0.#epoch.0/{tag}-{i}"
                fs.write(name, b"x")
                fs.delete(name)
        except BaseException as e:  # re-raised below
            errors.append(e)

    threads = [threading.Thread(target=churn, args=(t,)) for t in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    assert fs.list() == []


_component = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", ".."))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.sets(st.lists(_component, min_size=1, max_size=4).map("/".join), min_size=1, max_size=8))
def test_any_valid_name_round_trips(tmp_path_factory: pytest.TempPathFactory, names: set[str]) -> None:
    fs = FileSystemChunkStorage(str(tmp_path_factory.mktemp("prop")))
    for n in names:
        fs.write(n, n.encode())
    assert fs.list() == sorted(names)
    for n in names:
        assert fs.read(n, 0, 1000) == n.encode()
        assert fs.list(n) == sorted(m for m in names if m.startswith(n))


def test_a_chunk_is_made_durable_a_step_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole chunk synced at once stalls every durable log's fdatasync on the disk behind it: a chunk
    is synced a step (1 MiB) at a time as it is written, and still reads back whole."""
    from millrace.store.lts import filesystem

    synced: list[int] = []
    fdatasync = os.fdatasync

    def counted(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        fdatasync(fd)

    monkeypatch.setattr(filesystem.os, "fdatasync", counted)
    storage = FileSystemChunkStorage(str(tmp_path))
    data = os.urandom(3 * filesystem._SYNC_STEP + 100)
    storage.write("s/chunk", data)
    assert synced == [filesystem._SYNC_STEP, 2 * filesystem._SYNC_STEP, 3 * filesystem._SYNC_STEP]
    assert storage.read("s/chunk", 0, len(data)) == data
