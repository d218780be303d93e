from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from millrace.store.controller import (
    key_hash,
    parse_segment_name,
    segment_epoch,
    segment_id,
    segment_name,
    segment_number,
)
from millrace.store.controller.records import equal_split


def test_key_hash_is_pinned() -> None:
    # Native clients in other languages must agree bit for bit: these values are the contract.
    assert key_hash("") == 0.8931675160897388
    assert key_hash("user-42") == 0.4360472144288924
    assert key_hash("ключ") == 0.3001125794412679


@given(st.text())
def test_key_hash_in_unit_interval(key: str) -> None:
    h = key_hash(key)
    assert 0.0 <= h < 1.0
    assert h == key_hash(key)


def test_key_hash_spreads() -> None:
    buckets = [0] * 10
    for i in range(10_000):
        buckets[int(key_hash(f"key-{i}") * 10)] += 1
    assert min(buckets) > 800


@given(st.integers(1, 300))
def test_equal_split_tiles_unit_interval(n: int) -> None:
    ranges = equal_split(n)
    assert ranges[0][0] == 0.0 and ranges[-1][1] == 1.0
    for (_, hi), (lo, _) in zip(ranges, ranges[1:], strict=False):
        assert hi == lo


def test_segment_ids_and_names() -> None:
    sid = segment_id(7, 3)
    assert sid == (3 << 32) | 7
    assert (segment_number(sid), segment_epoch(sid)) == (7, 3)
    assert segment_name("sc", "st", sid) == "sc/st/7.#epoch.3"
    assert parse_segment_name("sc/st/7.#epoch.3") == ("sc", "st", sid)
