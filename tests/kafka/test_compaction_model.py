"""Log compaction's cleaning rules against a model (Hypothesis): the latest record per key is kept,
tombstones expire after delete.retention.ms, records newer than min.compaction.lag.ms are never
cleaned, offsets never change, cleaned batches keep their base and last offsets and stay CRC-valid."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from millrace.protocol.records import (
    Compression,
    ControlRecordType,
    NewRecord,
    build_control_batch,
    build_record_batch,
    iter_batches,
)
from millrace.streams.partitions.compaction import (
    CleaningPlan,
    CleaningResult,
    clean_batches,
    cleaning_point,
    latest_offsets,
    needs_cleaning,
)
from millrace.streams.partitions.partition import PartitionLog
from millrace.streams.partitions.segments import SegmentWriter
from millrace.streams.partitions.watermark import HighWatermark

NOW = 10_000_000
RETENTION = 1_000

record = st.tuples(st.sampled_from([b"a", b"b", b"c", b"d"]), st.one_of(st.none(), st.binary(max_size=3)),
                   st.integers(NOW - 3 * RETENTION, NOW))
batches = st.lists(st.tuples(st.lists(record, min_size=1, max_size=4), st.sampled_from([0, Compression.GZIP])),
                   min_size=1, max_size=12)


def headers_of(value: bytes | None) -> list[tuple[str, bytes | None]]:
    """Some records carry headers (kept byte for byte by a rebuilt batch), derived from the value."""
    return [("h", value), ("n", None)] if value and len(value) % 2 else []


def build(spec: list) -> tuple[list[bytes], list[tuple[int, bytes, bytes | None, int]]]:
    """Stored batches (consecutive offsets) and every record as (offset, key, value, timestamp)."""
    out, records, offset = [], [], 0
    for recs, codec in spec:
        out.append(build_record_batch([NewRecord(k, v, headers_of(v), ts) for k, v, ts in recs], base_offset=offset,
                                      compression=codec))
        records += [(offset + i, k, v, ts) for i, (k, v, ts) in enumerate(recs)]
        offset += len(recs)
    return out, records


def partition_of(stored: list[bytes]) -> PartitionLog:
    p = PartitionLog("t", 0, SegmentWriter(None, None, "seg", 0, 0))  # type: ignore[arg-type]
    for data in stored:
        h = next(iter_batches(data)).header
        p.index.append(0, h.base_offset, h.last_offset, 0, h.size, h.max_timestamp)
    p.next_offset = p.index.next_offset or 0
    p.watermark = HighWatermark(p.next_offset)
    return p


@settings(max_examples=150, deadline=None)
@given(batches, st.integers(0, 3 * RETENTION))
def test_cleaning_keeps_the_latest_per_key_and_never_moves_offsets(spec, min_lag) -> None:
    stored, records = build(spec)
    p = partition_of(stored)
    end = cleaning_point(p, NOW, min_lag)
    plan = CleaningPlan("t", 0, 1, "seg", end, [], [], frozenset(), NOW, RETENTION)
    views = [next(iter_batches(b)) for b in stored]
    cleaned_views = [v for v in views if v.header.base_offset < end]
    result = CleaningResult(plan)
    latest = latest_offsets(cleaned_views, plan)
    out = [next(iter_batches(c.data)) for c in clean_batches(cleaned_views, latest, plan, result)]
    out += [v for v in views if v.header.base_offset >= end]

    # Model: below the cleaning point, exactly the latest record of each key in that range, unless a
    # tombstone older than delete.retention.ms; from it on, everything.
    last_of = {k: o for o, k, _, _ in records if o < end}
    expected = [(o, k, v, ts) for o, k, v, ts in records
                if o >= end or (last_of[k] == o and not (v is None and ts < NOW - RETENTION))]
    got = [(r.offset, r.key, r.value, r.timestamp) for b in out for r in b.records()]
    assert got == expected
    assert all(r.headers == headers_of(r.value) for b in out for r in b.records())
    # The end is never cleaned past the last batch, nor past a batch younger than the lag.
    assert end <= views[-1].header.base_offset
    assert all(o >= end for o, _, _, ts in records if ts > NOW - min_lag) or min_lag == 0
    by_base = {v.header.base_offset: v.header for v in views}
    for b in out:
        assert b.crc_valid()
        original = by_base[b.header.base_offset]  # batches keep their base and last offsets
        assert b.header.last_offset_delta == original.last_offset_delta
        assert b.header.compression == original.compression or b.header.record_count == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([b"a", b"b"]), st.binary(max_size=2)), min_size=2, max_size=8))
def test_a_producers_last_batch_stays_even_when_emptied(recs) -> None:
    """Idempotence survives compaction: the last batch of a producer the partition still knows stays,
    with no records, its offsets and sequence intact (Kafka's writeEmptyHeader)."""
    stored = [build_record_batch([NewRecord(k, v, (), NOW)], base_offset=i, producer_id=7, producer_epoch=0,
                                 base_sequence=i) for i, (k, v) in enumerate(recs)]
    stored.append(build_record_batch([NewRecord(recs[0][0], b"newest", (), NOW)], base_offset=len(recs)))
    plan = CleaningPlan("t", 0, 1, "seg", len(recs) + 1, [], [], frozenset({7}), NOW, RETENTION)
    views = [next(iter_batches(b)) for b in stored]
    out = [next(iter_batches(c.data)).header
           for c in clean_batches(views, latest_offsets(views, plan), plan, CleaningResult(plan))]
    mine = [h for h in out if h.producer_id == 7]
    assert mine and mine[-1].base_offset == len(recs) - 1 and mine[-1].base_sequence == len(recs) - 1


# A transaction: its records (key, value), then whether it commits, and its marker's age past the horizon.
transaction = st.tuples(st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c"]), st.binary(max_size=2)),
                                 min_size=1, max_size=3),
                        st.booleans(), st.booleans())


@settings(max_examples=120, deadline=None)
@given(st.lists(transaction, min_size=1, max_size=8))
def test_aborted_records_go_and_markers_go_with_the_last_of_their_data(txns) -> None:
    """Aborted transactions' records are removed and never shadow a committed record of their key; a
    marker stays while a batch of its transaction does or while younger than delete.retention.ms."""
    stored: list[bytes] = []
    aborted: list[tuple[int, int, int]] = []
    records: list[tuple[int, bytes, bytes, bool, int]] = []  # offset, key, value, committed, txn number
    markers: list[tuple[int, int, bool]] = []  # offset, txn number, old enough to go
    offset = 0
    for n, (recs, commit, old) in enumerate(txns):
        first = offset
        stored.append(build_record_batch([NewRecord(k, v, (), NOW) for k, v in recs], base_offset=offset,
                                         producer_id=1, producer_epoch=0, base_sequence=offset, transactional=True))
        records += [(offset + i, k, v, commit, n) for i, (k, v) in enumerate(recs)]
        offset += len(recs)
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        stored.append(build_control_batch(kind, producer_id=1, producer_epoch=0, base_offset=offset,
                                          timestamp=NOW - 2 * RETENTION if old else NOW))
        markers.append((offset, n, old))
        if not commit:
            aborted.append((1, first, offset))
        offset += 1
    plan = CleaningPlan("t", 0, 1, "seg", offset, [], aborted, frozenset(), NOW, RETENTION)
    views = [next(iter_batches(b)) for b in stored]
    result = CleaningResult(plan)
    out = [next(iter_batches(c.data)) for c in clean_batches(views, latest_offsets(views, plan), plan, result)]

    latest = {k: o for o, k, _, committed, _ in records if committed}
    kept = [(o, k, v) for o, k, v, committed, _ in records if committed and latest[k] == o]
    assert [(r.offset, r.key, r.value) for b in out if not b.header.is_control for r in b.records()] == kept
    kept_offsets = {o for o, _, _ in kept}
    surviving = {n for o, _, _, _, n in records if o in kept_offsets}
    expected_markers = [o for o, n, old in markers if n in surviving or not old]
    assert [b.header.base_offset for b in out if b.header.is_control] == expected_markers
    assert result.removed_markers == {o for o, _, _ in markers} - set(expected_markers)


def test_a_round_starts_on_the_dirty_ratio_or_once_a_record_is_older_than_max_compaction_lag() -> None:
    stored, _ = build([([(b"a", b"1", NOW - 5000)], 0)] * 9 + [([(b"a", b"2", NOW - 100)], 0)] * 2)
    p = partition_of(stored)
    never = 1 << 62
    # Offsets 0-8 cleaned already; 9 is dirty (1 of 11 batches), 10 is the last batch (never cleaned).
    assert not needs_cleaning(p, 9, 10, NOW, 0.5, never)
    assert needs_cleaning(p, 9, 10, NOW, 0.05, never)  # the ratio is reached
    assert needs_cleaning(p, 9, 10, NOW, 0.5, 50)  # offset 9 is older than max.compaction.lag.ms
    assert not needs_cleaning(p, 9, 10, NOW, 0.5, 500)
    assert not needs_cleaning(p, 10, 10, NOW, 0.0, 1)  # nothing dirty below the cleaning point


def expected_after_cleaning(records: list, end: int) -> list:
    last_of = {k: o for o, k, _, _ in records if o < end}
    return [(o, k, v, ts) for o, k, v, ts in records
            if o >= end or (last_of[k] == o and not (v is None and ts < NOW - RETENTION))]


def run_round(views: list, end: int, dirty_start: int, max_keys: int = 1 << 30) -> tuple[list, int]:
    """One round over ``views`` (below ``end``): the batches after it, and where it cleaned below."""
    plan = CleaningPlan("t", 0, 1, "seg", end, [], [], frozenset(), NOW, RETENTION, dirty_start)
    below = [v for v in views if v.header.base_offset < end]
    offsets = latest_offsets(below, plan, max_keys)
    stop = end if offsets.end is None else offsets.end
    cleaned = [next(iter_batches(c.data)) for c in clean_batches(
        [v for v in below if v.header.base_offset < stop], offsets, plan, CleaningResult(plan))]
    return cleaned + [v for v in views if v.header.base_offset >= stop], stop


@settings(max_examples=150, deadline=None)
@given(batches, st.data())
def test_rounds_that_map_only_the_dirty_part_agree_with_one_round(spec, data) -> None:
    """The key map holds only the dirty part's keys (the previous generation has each key once): two
    rounds, or rounds cut short by a full map, end where one round over everything ends."""
    stored, records = build(spec)
    views = [next(iter_batches(b)) for b in stored]
    end = views[-1].header.base_offset  # the last batch is never cleaned
    mid = data.draw(st.integers(0, end))
    first, stop = run_round(views, mid, 0)
    assert stop == mid
    second, stop = run_round(first, end, mid)
    assert stop == end
    got = [(r.offset, r.key, r.value, r.timestamp) for b in second for r in b.records()]
    assert got == expected_after_cleaning(records, end)

    # A map that fills after a few keys cleans less per round but gets there round by round.
    max_keys = data.draw(st.integers(1, 3))
    current, cleaned_end = views, 0
    for _ in range(len(views) + 1):
        if cleaned_end >= end:
            break
        current, cleaned_end = run_round(current, end, cleaned_end, max_keys)
        assert [(r.offset, r.key, r.value, r.timestamp) for b in current for r in b.records()] == (
            expected_after_cleaning(records, cleaned_end))
    assert cleaned_end == end
