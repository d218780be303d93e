"""The partition side of transactions against a model: random interleavings of producers' transactional
batches, plain batches, commits and aborts, with the high watermark trailing the log, must give the
last stable offset and the aborted-transaction list that a direct reading of the log gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from millrace.streams.partitions.transactions import AbortedTxn, PartitionTransactions

# An operation: (kind, producer) with kind 0 = transactional batch, 1 = commit marker, 2 = abort marker,
# 3 = non-transactional batch; sizes are records per batch.
ops = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(1, 5)), max_size=60)


def _model(log: list[tuple[int, int, int, int]], hw: int) -> tuple[int, list[AbortedTxn]]:
    """Read the log directly: (last stable offset, aborted transactions) when only markers below ``hw``
    are durable. ``log`` holds (kind, producer, base offset, last offset) in offset order."""
    first: dict[int, int] = {}
    aborted = []
    for kind, pid, base, _last in log:
        if kind == 0:
            first.setdefault(pid, base)
        elif kind in (1, 2) and base < hw and pid in first:
            began = first.pop(pid)
            if kind == 2:
                aborted.append(AbortedTxn(pid, began, base))
    return min([hw, *first.values()]), aborted


@settings(max_examples=300, deadline=None)
@given(ops, st.data())
def test_last_stable_offset_and_aborted_index_match_the_log(operations: list[tuple[int, int, int]],
                                                            data: st.DataObject) -> None:
    txns = PartitionTransactions()
    log: list[tuple[int, int, int, int]] = []
    next_offset = 0
    hw = 0
    pending_markers: list[tuple[int, int, bool]] = []  # markers appended, not yet durable
    for kind, pid, size in operations:
        if kind == 0 and any(marker_pid == pid for marker_pid, _, _ in pending_markers):
            continue  # the coordinator starts a producer's next transaction only once its markers are durable
        if kind in (1, 2):
            size = 1
        base, last = next_offset, next_offset + size - 1
        next_offset = last + 1
        log.append((kind, pid, base, last))
        if kind == 0:
            txns.batch(pid, base)
        elif kind in (1, 2):
            pending_markers.append((pid, base, kind == 1))
        # The high watermark moves forward to some batch end; markers it passes close their transactions.
        ends = [entry[3] + 1 for entry in log if entry[3] + 1 > hw]
        hw = data.draw(st.sampled_from([hw, *ends]))
        while pending_markers and pending_markers[0][1] < hw:
            marker_pid, offset, commit = pending_markers.pop(0)
            txns.marker(marker_pid, offset, commit)
        expected_lso, expected_aborted = _model(log, hw)
        assert txns.last_stable(hw) == expected_lso
        assert txns.aborted == expected_aborted
        # A read_committed fetch of [start, lso) is told exactly the aborted ones overlapping it.
        lso = txns.last_stable(hw)
        start = data.draw(st.integers(0, max(lso, 0)))
        assert txns.aborted_between(start, lso) == [
            a for a in expected_aborted if a.last_offset >= start and a.first_offset < lso]
        # Each offset a producer wrote is in one of its aborted transactions exactly when the model says so.
        for _kind, pid, base, _last in log:
            assert txns.in_aborted(pid, base) == any(
                a.producer_id == pid and a.first_offset <= base <= a.last_offset for a in expected_aborted)
    cut = data.draw(st.integers(0, next_offset))
    txns.drop_below(cut)
    assert txns.aborted == [a for a in _model(log, hw)[1] if a.last_offset >= cut]
    for _kind, pid, base, _last in log:
        assert txns.in_aborted(pid, base) == any(a.producer_id == pid and a.first_offset <= base <= a.last_offset
                                                 for a in txns.aborted)
