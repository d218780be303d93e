"""Recovery on open(): torn tails are cut, everything else that is damaged raises DataCorruptionError."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millrace.store.durablelog import framing
from millrace.store.durablelog.interface import LogAddress
from millrace.store.errors import DataCorruptionError
from tests.durablelog.helpers import log_files, open_log, read_payloads


def write_entries(path: Path | str, payloads: list[bytes], **kwargs: int) -> None:
    log = open_log(path, **kwargs)
    for p in payloads:
        log.append(p).result(timeout=10)
    log.close()


def frame_ends(payloads: list[bytes]) -> list[int]:
    ends, pos = [], 0
    for p in payloads:
        pos += framing.HEADER_SIZE + len(p)
        ends.append(pos)
    return ends


def only_log_file(path: Path | str) -> str:
    (name,) = log_files(path)
    return os.path.join(path, name)


def check_prefix_recovered(path: str, payloads: list[bytes], expected_count: int) -> None:
    """Reopen: exactly the first ``expected_count`` entries come back and appends continue after them."""
    log = open_log(path)
    assert [(e.address.sequence, e.payload) for e in log.read_all()] == [
        (i + 1, p) for i, p in enumerate(payloads[:expected_count])
    ]
    assert log.append(b"after-recovery").result(timeout=10) == LogAddress(expected_count + 1)
    log.close()
    assert read_payloads(path)[-1] == (expected_count + 1, b"after-recovery")


def test_torn_tail_at_every_byte(tmp_path: Path) -> None:
    payloads = [b"alpha", b"", b"gamma" * 7]
    source = tmp_path / "source"
    write_entries(source, payloads)
    original = Path(only_log_file(source)).read_bytes()
    ends = frame_ends(payloads)
    assert ends[-1] == len(original)
    for cut in range(len(original) + 1):
        case = tmp_path / f"cut{cut}"
        write_entries(case, [])
        Path(only_log_file(case)).write_bytes(original[:cut])
        check_prefix_recovered(str(case), payloads, sum(1 for e in ends if e <= cut))
        # the torn bytes were cut, so the file holds the whole frames plus the new one
        good = max([0] + [e for e in ends if e <= cut])
        assert os.path.getsize(only_log_file(case)) == good + len(framing.encode_frame(1, b"after-recovery"))


@settings(max_examples=60, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=15),
    cut_fraction=st.floats(min_value=0.0, max_value=1.0),
    zero_fill=st.integers(min_value=0, max_value=600),
)
def test_torn_tail_property(payloads: list[bytes], cut_fraction: float, zero_fill: int) -> None:
    """Write N entries, cut the file at a random byte and pad with zeros: a prefix comes back."""
    with tempfile.TemporaryDirectory() as directory:
        write_entries(directory, payloads)
        path = only_log_file(directory)
        original = Path(path).read_bytes()
        cut = int(len(original) * cut_fraction)
        damaged = original[:cut] + bytes(zero_fill)
        Path(path).write_bytes(damaged)
        # A frame survives iff its bytes are intact (zeros can legitimately complete a zero-ending payload).
        expected = 0
        start = 0
        for end in frame_ends(payloads):
            if damaged[start:end] != original[start:end]:
                break
            expected += 1
            start = end
        check_prefix_recovered(directory, payloads, expected)


def test_zero_filled_tail_is_torn(tmp_path: Path) -> None:
    payloads = [b"one", b"two", b"three"]
    write_entries(tmp_path, payloads)
    path = only_log_file(tmp_path)
    with open(path, "ab") as f:
        f.write(bytes(4096))
    check_prefix_recovered(str(tmp_path), payloads, 3)


def test_zeroed_last_frame_is_torn(tmp_path: Path) -> None:
    payloads = [b"one", b"two", b"three"]
    write_entries(tmp_path, payloads)
    path = only_log_file(tmp_path)
    data = bytearray(Path(path).read_bytes())
    start = frame_ends(payloads)[1]
    data[start:] = bytes(len(data) - start)
    Path(path).write_bytes(bytes(data))
    check_prefix_recovered(str(tmp_path), payloads, 2)


def test_bad_crc_on_last_frame_is_torn(tmp_path: Path) -> None:
    payloads = [b"one", b"two", b"three"]
    write_entries(tmp_path, payloads)
    path = only_log_file(tmp_path)
    data = bytearray(Path(path).read_bytes())
    data[-1] ^= 0x01
    Path(path).write_bytes(bytes(data))
    check_prefix_recovered(str(tmp_path), payloads, 2)


@pytest.mark.parametrize("offset_in_frame", [0, 5, 12, 17, framing.HEADER_SIZE + 1])
def test_mid_file_corruption_raises(tmp_path: Path, offset_in_frame: int) -> None:
    payloads = [b"first-entry", b"second-entry", b"third-entry"]
    write_entries(tmp_path, payloads)
    path = only_log_file(tmp_path)
    data = bytearray(Path(path).read_bytes())
    position = frame_ends(payloads)[0]
    data[position + offset_in_frame] ^= 0x40
    Path(path).write_bytes(bytes(data))
    with pytest.raises(DataCorruptionError) as info:
        open_log(tmp_path)
    assert path in str(info.value)
    assert f"byte {position}" in str(info.value)
    # nothing was cut: the evidence stays on disk for an operator
    assert Path(path).read_bytes() == bytes(data)


def test_zeroed_region_followed_by_valid_frame_raises(tmp_path: Path) -> None:
    payloads = [b"a" * 40, b"b" * 40, b"c" * 40]
    write_entries(tmp_path, payloads)
    path = only_log_file(tmp_path)
    data = bytearray(Path(path).read_bytes())
    start, end = frame_ends(payloads)[0], frame_ends(payloads)[1]
    data[start:end] = bytes(end - start)
    Path(path).write_bytes(bytes(data))
    with pytest.raises(DataCorruptionError, match=f"byte {start}"):
        open_log(tmp_path)


def test_damage_at_end_of_non_last_file_raises(tmp_path: Path) -> None:
    write_entries(tmp_path, [b"x" * 100 for _ in range(10)], max_file_bytes=250)
    names = log_files(tmp_path)
    assert len(names) >= 3
    path = os.path.join(tmp_path, names[0])
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    with pytest.raises(DataCorruptionError, match=names[0]):
        open_log(tmp_path, max_file_bytes=250)


def test_truncated_non_last_file_raises(tmp_path: Path) -> None:
    write_entries(tmp_path, [b"x" * 100 for _ in range(10)], max_file_bytes=250)
    path = os.path.join(tmp_path, log_files(tmp_path)[0])
    os.truncate(path, os.path.getsize(path) - 3)
    with pytest.raises(DataCorruptionError):
        open_log(tmp_path, max_file_bytes=250)


def test_missing_middle_file_raises(tmp_path: Path) -> None:
    write_entries(tmp_path, [b"x" * 100 for _ in range(10)], max_file_bytes=250)
    names = log_files(tmp_path)
    os.unlink(os.path.join(tmp_path, names[1]))
    with pytest.raises(DataCorruptionError, match="sequence gap"):
        open_log(tmp_path, max_file_bytes=250)


def test_missing_first_file_raises(tmp_path: Path) -> None:
    write_entries(tmp_path, [b"x" * 100 for _ in range(10)], max_file_bytes=250)
    os.unlink(os.path.join(tmp_path, log_files(tmp_path)[0]))
    with pytest.raises(DataCorruptionError, match="missing"):
        open_log(tmp_path, max_file_bytes=250)


def test_sequence_gap_inside_a_file_raises(tmp_path: Path) -> None:
    write_entries(tmp_path, [])
    path = only_log_file(tmp_path)
    frames = [framing.encode_frame(s, b"entry") for s in (1, 2, 4)]
    Path(path).write_bytes(b"".join(frames))
    with pytest.raises(DataCorruptionError, match=f"byte {2 * len(frames[0])}"):
        open_log(tmp_path)


def test_corrupt_epoch_file_raises(tmp_path: Path) -> None:
    write_entries(tmp_path, [b"a"])
    epoch = tmp_path / "epoch"
    data = bytearray(epoch.read_bytes())
    data[9] ^= 1
    epoch.write_bytes(bytes(data))
    with pytest.raises(DataCorruptionError, match="epoch"):
        open_log(tmp_path)


def test_stale_temp_files_are_ignored_and_removed(tmp_path: Path) -> None:
    write_entries(tmp_path, [b"a", b"b"])
    (tmp_path / "truncation.tmp").write_bytes(b"half-written")
    assert [p for _, p in read_payloads(tmp_path)] == [b"a", b"b"]
    assert not (tmp_path / "truncation.tmp").exists()


def test_truncation_record_beyond_durable_tail(tmp_path: Path) -> None:
    """A truncation point may outrun what reached disk (a crash); sequences resume after it."""
    write_entries(tmp_path, [b"a", b"b", b"c"])
    log = open_log(tmp_path)
    log.truncate(LogAddress(3))
    log.close()
    # Simulate the crash: the file loses its last frame, but the truncation record says 3.
    path = only_log_file(tmp_path)
    os.truncate(path, frame_ends([b"a", b"b"])[-1])
    log = open_log(tmp_path)
    assert list(log.read_all()) == []
    assert log.append(b"d").result(timeout=10) == LogAddress(4)
    log.close()
