"""The checks every compatibility test relies on must catch what they claim to: gaps, reordering,
duplicates, changed bytes, null turned into empty."""

from __future__ import annotations

import pytest

from compat_tests.common import (
    BIG_VALUE_BYTES,
    Placed,
    Rec,
    check_consumed,
    expect_dense,
    records_to_lines,
    sample_records,
    unb64,
)

RECS = [Rec(b"a", b"1"), Rec(None, b"2", (("h", b"x"),)), Rec(b"c", None), Rec(b"d", b"4")]
PLACEMENTS = [(0, 0), (1, 0), (0, 1), (0, 2)]


def expected() -> dict[int, list[Placed]]:
    return expect_dense(RECS, PLACEMENTS)


def consumed() -> list[Placed]:
    return [Placed(p, o, r) for r, (p, o) in zip(RECS, PLACEMENTS, strict=True)]


def test_exact_round_trip_passes() -> None:
    check_consumed(expected(), consumed())
    check_consumed(expected(), [c for c in consumed() if c.offset >= 1 or c.partition == 1], start={0: 1})


@pytest.mark.parametrize("placements", [[(0, 0), (1, 0), (0, 2), (0, 3)], [(0, 1), (1, 0), (0, 0), (0, 2)],
                                        [(0, 0), (1, 1), (0, 1), (0, 2)]])
def test_producer_offsets_must_be_dense_in_send_order(placements: list[tuple[int, int]]) -> None:
    with pytest.raises(AssertionError):
        expect_dense(RECS, placements)


def _mutations() -> list[list[Placed]]:
    c = consumed()
    return [
        c[:-1],                                                   # missing
        c + [c[0]],                                               # duplicate
        [c[0], c[2], c[1], c[3]][::-1],                           # reordered within a partition
        [Placed(0, 0, Rec(b"a", b"1x"))] + c[1:],                 # changed value
        [Placed(0, 0, Rec(b"a", b"1"))] + c[1:2] + [Placed(0, 1, Rec(b"c", b""))] + c[3:],  # null -> empty
        c[:1] + [Placed(1, 0, Rec(None, b"2"))] + c[2:],          # header dropped
        c + [Placed(7, 0, Rec(b"z", b"z"))],                      # stray partition
    ]


@pytest.mark.parametrize("bad", _mutations())
def test_consumed_mismatches_are_caught(bad: list[Placed]) -> None:
    with pytest.raises(AssertionError):
        check_consumed(expected(), bad)


def test_sample_records_cover_the_shapes_and_encode_losslessly() -> None:
    recs = sample_records("t", count=16, null_header_values=True)
    assert any(r.key is None and r.value is not None for r in recs)
    assert any(r.value is None and r.key is not None for r in recs)
    assert any(r.key is None and r.value is None for r in recs)
    assert any(r.key == b"" and r.value == b"" for r in recs)
    assert any(any(v is None for _, v in r.headers) for r in recs)
    assert sum(1 for r in recs if r.value is not None and len(r.value) == BIG_VALUE_BYTES) == 1
    assert not any(r.key is None and r.value is None for r in sample_records("t", count=16, both_null=False))
    decoded = []
    for line in records_to_lines(recs).splitlines():
        f = line.split("\t")
        names = [unb64(x) for x in f[2::2]]
        decoded.append(Rec(unb64(f[0]), unb64(f[1]), tuple((n.decode(), unb64(v))  # type: ignore[union-attr]
                                                          for n, v in zip(names, f[3::2], strict=True))))
    assert decoded == recs
