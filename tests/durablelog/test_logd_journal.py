"""The logd journal on its own: replay, file roll-over and deletion, torn tails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from millrace.store.errors import DataCorruptionError
from millrace.store.logd.journal import Journal, StoredEntry, entry_record, value_record
from tests.page_cache import resident_bytes


def put(journal: Journal, name: str, sequence: int, epoch: int, payload: bytes) -> None:
    record, offset = entry_record(name, sequence, epoch, 0, payload)
    journal.write([(name, sequence, StoredEntry(epoch, 0, 0, len(payload), 0), record, offset)])


def payloads(journal: Journal, name: str) -> dict[int, bytes]:
    state = journal.log(name)
    return {s: journal.read(e) for s, e in sorted(state.entries.items())}


def test_replay_restores_entries_fences_truncation_and_deletes_dead_files(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path), max_file_bytes=4096)
    journal.open()
    for sequence in range(1, 201):
        put(journal, "a", sequence, 1, b"x%d" % sequence * 20)
        put(journal, "b", sequence, 1, b"y%d" % sequence)
    journal.write([("a", 0, None, value_record(b"F", "a", 7), 0), ("a", 0, None, value_record(b"T", "a", 150), 0)])
    journal.truncate(journal.log("a"), 150)
    files_before = len(list(tmp_path.glob("*.journal")))
    journal.write([("b", 0, None, value_record(b"T", "b", 200), 0)])
    journal.truncate(journal.log("b"), 200)
    files_after = len(list(tmp_path.glob("*.journal")))
    assert files_after < files_before  # files holding only truncated entries are gone
    journal.close()

    again = Journal(str(tmp_path), max_file_bytes=4096)
    again.open()
    state = again.log("a")
    assert (state.fenced, state.truncated) == (7, 150)  # restated in newer files, so it survived deletion
    assert payloads(again, "a") == {s: b"x%d" % s * 20 for s in range(151, 201)}
    assert payloads(again, "b") == {}
    assert again.log("a").prefix_end(1, 1) == 200
    again.close()


def test_a_torn_tail_is_cut_and_damage_before_it_is_refused(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path))
    journal.open()
    for sequence in range(1, 11):
        put(journal, "a", sequence, 1, b"entry-%d" % sequence)
    journal.close()
    (last,) = sorted(tmp_path.glob("*.journal"))[-1:]
    data = last.read_bytes()
    last.write_bytes(data[:-3])  # a crash mid-write of the last record
    torn = Journal(str(tmp_path))
    torn.open()
    assert sorted(torn.log("a").entries) == list(range(1, 10))
    torn.close()
    files = sorted(tmp_path.glob("*.journal"))
    damaged = next(f for f in files if b"entry-3" in f.read_bytes())
    raw = bytearray(damaged.read_bytes())
    raw[raw.find(b"entry-3")] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    with pytest.raises(DataCorruptionError):
        Journal(str(tmp_path)).open()


def test_written_records_leave_the_page_cache(tmp_path: Path) -> None:
    """A replica reads an entry back only for a recovery or a copy: once durable its pages are dropped (all
    but the 2 MiB still being written), and it still reads back."""
    journal = Journal(str(tmp_path))
    journal.open()
    data = {sequence: os.urandom(256 << 10) for sequence in range(1, 25)}
    for sequence, payload in data.items():
        put(journal, "a", sequence, 1, payload)
    (path,) = tmp_path.glob("*.journal")
    assert path.stat().st_size > 6 << 20
    assert resident_bytes(path) <= 2 << 20
    assert payloads(journal, "a") == data
    journal.close()


def test_a_crash_leaves_allocated_zeros_only_in_the_last_file(tmp_path: Path) -> None:
    """Records go into space allocated ahead of them; a file is cut to its records before the next one
    starts, so a crash image replays whole and its last file's zero-filled tail is cut."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    journal = Journal(str(live), max_file_bytes=4096, preallocate_bytes=64 << 10)
    journal.open()
    for sequence in range(1, 101):
        put(journal, "a", sequence, 1, b"entry-%d" % sequence * 10)
    files = sorted(live.glob("*.journal"))
    assert len(files) > 2
    assert files[-1].stat().st_size > 64 << 10  # allocated ahead
    crashed.mkdir()
    for path in files:  # the files as a crash leaves them
        (crashed / path.name).write_bytes(path.read_bytes())
    journal.close()
    assert files[-1].stat().st_size < 64 << 10  # a clean close cuts the tail
    replayed = Journal(str(crashed), max_file_bytes=4096)
    replayed.open()
    assert payloads(replayed, "a") == {s: b"entry-%d" % s * 10 for s in range(1, 101)}
    assert (crashed / files[-1].name).stat().st_size < 64 << 10
    replayed.close()
