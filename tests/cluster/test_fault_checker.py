"""The fault tests' checker (tests/cluster/faults.py ``tally``) counts what it must: a checker that
cannot see a lost, doubled, moved or reordered record would let every fault test pass."""

from __future__ import annotations

from millrace.client.writer import ALREADY_WRITTEN
from tests.cluster.faults import tally


def test_a_clean_history_is_ok() -> None:
    acked = {b"0:0": (0, 0), b"0:1": (0, 1), b"1:0": (1, 0)}
    read = {0: [(0, b"0:0"), (1, b"0:1")], 1: [(0, b"1:0")]}
    result = tally("t", acked, read, [])
    assert result.ok and (result.acknowledged, result.read) == (3, 3)


def test_lost_duplicated_misplaced_and_out_of_order_records_are_counted() -> None:
    acked = {b"0:0": (0, 0), b"0:1": (0, 1), b"0:2": (0, 2), b"1:0": (1, 0), b"1:1": (1, 1)}
    read = {
        0: [(0, b"0:0"), (1, b"0:2"), (2, b"0:1"), (3, b"0:2")],  # 0:1 after 0:2 (and moved), 0:2 twice
        1: [(0, b"1:0")],  # 1:1 lost
    }
    result = tally("t", acked, read, ["an error"])
    assert (result.lost, result.duplicated, result.misplaced, result.out_of_order) == (1, 1, 2, 1)
    assert not result.ok and result.read == 5 and result.errors == ["an error"]
    assert "lost 1, duplicated 1, misplaced 2, out of order 1, client errors 1" in result.line()


def test_an_event_acknowledged_as_already_written_counts_by_its_partition() -> None:
    """A native writer's resend after a failover finds the event landed and is answered ALREADY_WRITTEN
    (no offset): read once in its partition it is in place; read elsewhere, or twice, it is not."""
    acked = {b"0:0": (0, 0), b"0:1": (0, ALREADY_WRITTEN), b"1:0": (1, ALREADY_WRITTEN)}
    assert tally("t", acked, {0: [(0, b"0:0"), (1, b"0:1")], 1: [(0, b"1:0")]}, []).ok
    moved = tally("t", acked, {0: [(0, b"0:0"), (1, b"1:0")], 1: [(0, b"0:1")]}, [])
    assert (moved.misplaced, moved.resent) == (2, 2) and not moved.ok
    twice = tally("t", acked, {0: [(0, b"0:0"), (1, b"0:1"), (2, b"0:1")], 1: [(0, b"1:0")]}, [])
    assert twice.duplicated == 1 and not twice.ok


def test_an_implicit_ack_without_offset_counts_by_its_partition() -> None:
    """librdkafka acknowledges a batch waiting to be retried when a later batch of its producer is
    acknowledged (``rd_kafka_dr_implicit_ack``): confluent-kafka reports no offset (None). Read once in
    its partition it is in place; read in another, it is misplaced."""
    acked: dict[bytes, tuple[int, int | None]] = {b"0:0": (0, 0), b"0:1": (0, None), b"0:2": (0, 2)}
    in_place = tally("t", acked, {0: [(0, b"0:0"), (1, b"0:1"), (2, b"0:2")]}, [])
    assert in_place.ok and in_place.resent == 1
    moved = tally("t", acked, {0: [(0, b"0:0"), (2, b"0:2")], 1: [(0, b"0:1")]}, [])
    assert moved.misplaced == 1 and not moved.ok
