"""A state synchronizer's entries folded by a reader that never writes (``protocol/synchronizer.Fold``, what
the server uses to show reader groups): fed in any pieces, a reader group's entries give the state the
client's model computes; a snapshot replaces what came before; bad bytes are an error, never skipped."""

from __future__ import annotations

import pytest

from millrace.protocol import reader_group_state as rgs
from millrace.protocol.reader_group_state import ReaderGroupState, SegmentPosition
from millrace.protocol.synchronizer import (
    KIND_SNAPSHOT,
    KIND_STATE,
    KIND_UPDATES,
    Fold,
    StateCorruptError,
    encode_entry,
    pack_snapshot,
    pack_updates,
)

A = "iot/readings/0.#epoch.0"
B = "iot/readings/1.#epoch.0"


def group_entries() -> tuple[bytes, ReaderGroupState]:
    """A group's segment (initial state, then updates in two entries) and the state they make."""
    initial = rgs.initial_state(["iot/readings"], {A: SegmentPosition(0), B: SegmentPosition(0)})
    first = [rgs.add_reader("r1"), rgs.acquire("r1", 0, [A, B])]
    second = [rgs.record_positions("r1", 0, {A: SegmentPosition(120, 2)}), rgs.release("r1", 0, B, SegmentPosition(40))]
    data = (encode_entry(KIND_STATE, b"n" * 8, rgs.encode_state(initial))
            + encode_entry(KIND_UPDATES, b"o" * 8, pack_updates(rgs.encode_update(u) for u in first))
            + encode_entry(KIND_UPDATES, b"p" * 8, pack_updates(rgs.encode_update(u) for u in second)))
    expected = initial
    for update in first + second:
        expected = rgs.apply(expected, update)
    return data, expected


def fold() -> Fold[ReaderGroupState, rgs.Update]:
    return Fold(rgs.decode_state, rgs.apply, rgs.decode_update)


@pytest.mark.parametrize("piece", [1, 7, 1 << 20])
def test_entries_fed_in_pieces_fold_to_the_models_state(piece: int) -> None:
    data, expected = group_entries()
    f = fold()
    for i in range(0, len(data), piece):
        f.feed(data[i:i + piece])
    assert f.state == expected and f.revision == f.read_to == len(data)
    assert expected.readers == {"r1": {A: SegmentPosition(120, 2)}} and expected.unassigned == {B: SegmentPosition(40)}


def test_a_partial_entry_waits_and_a_snapshot_replaces_the_state() -> None:
    data, expected = group_entries()
    f = fold()
    assert f.feed(data[:-3]) == 2  # the last entry is not whole yet
    assert f.read_to == len(data) - 3 and f.revision < f.read_to
    f.feed(data[-3:])
    assert f.state == expected
    snapshot = rgs.initial_state(["iot/other"], {})
    at = len(data)
    f.feed(encode_entry(KIND_SNAPSHOT, b"q" * 8, pack_snapshot(0, [b"n" * 8], rgs.encode_state(snapshot))))
    assert f.state == snapshot
    f.restart(at)  # compaction truncated before the snapshot: fold again from it
    assert f.state is None and f.read_to == at


def test_bad_bytes_and_updates_without_a_state_are_errors() -> None:
    with pytest.raises(StateCorruptError, match="no synchronizer entry"):
        fold().feed(b"\x00" * 64)
    updates = encode_entry(KIND_UPDATES, b"u" * 8, pack_updates([rgs.encode_update(rgs.add_reader("r"))]))
    with pytest.raises(StateCorruptError, match="precede any state"):
        fold().feed(updates)
    entry = bytearray(group_entries()[0])
    entry[-1] ^= 0xFF
    with pytest.raises(StateCorruptError, match="CRC"):
        fold().feed(bytes(entry))
