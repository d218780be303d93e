"""How many segments carry a new topic when it does not say (millrace.segments.initial unset or 0)."""

from __future__ import annotations

from millrace.streams.topics import _initial_segments


def test_fixed_topics_give_each_partition_a_segment() -> None:
    assert _initial_segments(4, {}) == 4
    assert _initial_segments(1, {"millrace.scaling.type": "fixed"}) == 1


def test_auto_scaled_topics_start_at_their_minimum() -> None:
    by_rate = {"millrace.scaling.type": "by_event_rate", "millrace.scaling.target": "100"}
    assert _initial_segments(4, by_rate) == 1
    assert _initial_segments(12, {**by_rate, "millrace.scaling.min.segments": "2"}) == 2
    # The fewest segments at or above the minimum that keep partitions whole: 5 does not divide 12.
    assert _initial_segments(12, {**by_rate, "millrace.scaling.min.segments": "5"}) == 6
    assert _initial_segments(3, {"millrace.scaling.type": "by_data_rate", "millrace.scaling.min.segments": "7"}) == 3
