"""The offset index's folding against a model (Hypothesis): whatever the appends, high watermarks and
prefix drops, every entry covers exactly the batches it claims (first position, last end, one segment,
batch count, largest timestamp), only durable batches ever share an entry, a shared entry is adjacent
batches within FOLD_BYTES, entries stay dense, and the running maximum and byte count stay right."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from millrace.streams.partitions import offset_index
from millrace.streams.partitions.formats import ENVELOPE
from millrace.streams.partitions.offset_index import OffsetIndex

# Small enough that short scripts fold often and hit every limit.
DENSE_TAIL = 3
FOLD_BYTES = 2000


@dataclass(frozen=True)
class Batch:
    seg: int
    base: int
    last: int
    pos: int
    length: int
    max_ts: int


# One step: append a batch (records, length, gap after the previous batch, new segment?, timestamp),
# fold at a high watermark some batches behind the end, or drop a prefix.
append = st.tuples(st.just("append"), st.integers(1, 3), st.sampled_from([60, 700, 1500, FOLD_BYTES]),
                   st.sampled_from([0, 0, 0, 7]), st.sampled_from([False] * 9 + [True]), st.integers(0, 1000))
fold = st.tuples(st.just("fold"), st.integers(0, 4 * DENSE_TAIL))
drop = st.tuples(st.just("drop"), st.integers(0, 10))
steps = st.lists(st.one_of(append, append, append, append, fold, drop), min_size=25, max_size=120)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_folded_entries_cover_exactly_their_batches(script: list[tuple]) -> None:
    with mock.patch.object(offset_index, "DENSE_TAIL", DENSE_TAIL), \
            mock.patch.object(offset_index, "FOLD_BYTES", FOLD_BYTES):
        run(script)


def run(script: list[tuple]) -> None:
    index = OffsetIndex()
    batches: list[Batch] = []  # every batch appended, oldest first
    seg = pos = offset = 0
    durable_ever = 0  # the highest high watermark fold was told
    start = 0  # the log start drop_below was given
    for step in script:
        if step[0] == "append":
            _, records, length, gap, new_segment, ts = step
            if new_segment:
                seg, pos = seg + 1, 0
            pos += ENVELOPE.size + gap
            b = Batch(seg, offset, offset + records - 1, pos, length, ts)
            batches.append(b)
            index.append(b.seg, b.base, b.last, b.pos, b.length, b.max_ts)
            pos += length
            offset += records
        elif step[0] == "fold":
            behind = step[1]
            hw = batches[max(0, len(batches) - behind) - 1].last + 1 if len(batches) > behind else 0
            durable_ever = max(durable_ever, hw)
            index.fold(hw)
        else:
            start = min(offset, start + step[1])
            index.drop_below(start)
        check(index, [b for b in batches if b.last >= first_kept(index, batches)], durable_ever)


def first_kept(index: OffsetIndex, batches: list[Batch]) -> int:
    return index.base[0] if len(index) else (batches[-1].last + 1 if batches else 0)


def check(index: OffsetIndex, kept: list[Batch], durable_ever: int) -> None:
    assert index.batches == len(kept)
    at = 0
    for i in range(len(index)):
        covered = kept[at : at + index.count[i]]
        at += index.count[i]
        first, last = covered[0], covered[-1]
        assert (index.base[i], index.last[i]) == (first.base, last.last)
        assert index.seg[i] == first.seg and all(b.seg == first.seg for b in covered)
        assert index.pos[i] == first.pos and index.pos[i] + index.length[i] == last.pos + last.length
        assert index.max_ts[i] == max(b.max_ts for b in covered)
        assert index.running_max_ts[i] == max(index.max_ts[: i + 1])
        if i:
            assert index.base[i] == index.last[i - 1] + 1
        if len(covered) > 1:
            assert last.last < durable_ever and index.length[i] <= FOLD_BYTES
            assert all(b.pos == a.pos + a.length + ENVELOPE.size for a, b in itertools.pairwise(covered))
    assert at == len(kept)
    assert index.bytes == sum(index.length)
    assert set(index.count[-DENSE_TAIL:]) <= {1}  # the dense tail is never folded
