"""The units behind the partition storage boundary, each against its written invariants: the offset
index, producer state (idempotence), the high watermark and acknowledgement order, long-poll waiters,
recovery's contiguity rule and retention."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import Future
from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock

from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.protocol.records import NewRecord, build_record_batch
from millrace.store.errors import ContainerOfflineError
from millrace.streams.errors import PartitionError
from millrace.streams.partitions import storage as storage_module
from millrace.streams.partitions.formats import (
    INDEX_SUFFIX,
    IndexEntry,
    batches_in_span,
    envelope,
    take_batches,
)
from millrace.streams.partitions.loading import LoadedTopic
from millrace.streams.partitions.offset_index import DENSE_TAIL, FOLD_BYTES, OffsetIndex
from millrace.streams.partitions.partition import PartitionLog
from millrace.streams.partitions.producers import PRODUCER_WINDOW, Producers
from millrace.streams.partitions.retention import (
    retained_start,
    stream_retained_starts,
    truncation_points,
)
from millrace.streams.partitions.segments import SegmentWriter
from millrace.streams.partitions.storage import RELOAD_DELAY_SECONDS, SegmentPartitionStorage
from millrace.streams.partitions.waiters import Waiters, wait_for_any
from millrace.streams.partitions.watermark import HighWatermark
from millrace.streams.topics import TopicInfo


def index_of(*batches: tuple[int, int, int]) -> OffsetIndex:
    """An index of (records, max timestamp, segment) batches laid out densely from offset 0."""
    index = OffsetIndex()
    offset = position = 0
    for records, max_ts, seg in batches:
        index.append(seg, offset, offset + records - 1, position, 100, max_ts)
        offset += records
        position += 110
    return index


def test_offset_index_finds_the_batch_holding_an_offset() -> None:
    index = index_of((3, 10, 0), (2, 20, 0), (4, 15, 1))  # offsets 0-2, 3-4, 5-8
    assert [index.entry_at(o) for o in (0, 2, 3, 4, 5, 8, 9)] == [0, 0, 1, 1, 2, 2, 3]
    assert index.next_offset == 9 and index.bytes == 300
    assert index.entries_below(5) == 2 and index.entries_below(6) == 3
    assert index.first_in_segment(1) == 2 and index.first_in_segment(2) is None


def test_offset_index_timestamps_stay_searchable_after_dropping_a_prefix() -> None:
    index = index_of((1, 50, 0), (1, 10, 0), (1, 30, 0), (1, 40, 0))
    assert list(index.running_max_ts) == [50, 50, 50, 50]
    assert index.first_reaching_timestamp(20) == 0
    index.drop_below(1)  # the batch with timestamp 50 goes: the running maximum must forget it
    assert list(index.base) == [1, 2, 3] and list(index.running_max_ts) == [10, 30, 40]
    assert index.first_reaching_timestamp(20) == 1 and index.first_reaching_timestamp(41) == 3
    assert index.bytes == 300


def test_durable_entries_beyond_the_dense_tail_fold_into_runs_of_adjacent_batches() -> None:
    """Folding keeps the newest DENSE_TAIL entries one batch each and folds older durable ones into the
    entry before them when they lie right behind it in one segment, up to FOLD_BYTES, a DENSE_TAIL of
    entries at a time; every offset, timestamp and byte count stays where it was."""
    index = OffsetIndex()
    batches = 2 * DENSE_TAIL + 10
    for n in range(batches):  # batches of 2 records, 100 bytes, back to back behind 10-byte envelopes
        index.append(0, 2 * n, 2 * n + 1, 10 + 110 * n, 100, 1000 + n)
    index.fold(durable_end=6)  # only the first three batches are durable
    assert list(index.count[:2]) == [3, 1] and len(index) == batches - 2
    assert (index.base[0], index.last[0], index.pos[0], index.length[0]) == (0, 5, 10, 320)
    index.fold(durable_end=10 ** 9)
    folded = batches - DENSE_TAIL
    assert len(index) == DENSE_TAIL + 1 and index.count[0] == folded and set(index.count[1:]) == {1}
    assert index.length[0] == folded * 110 - 10 and index.bytes == sum(index.length)
    end = 2 * folded
    assert [index.entry_at(o) for o in (0, end - 1, end, end + 1)] == [0, 0, 1, 1]
    assert index.running_max_ts[0] == index.max_ts[0] == 1000 + folded - 1
    assert index.first_reaching_timestamp(1000 + folded - 1) == 0 and index.first_reaching_timestamp(1000 + folded) == 1
    assert index.batches == batches
    index.fold(durable_end=10 ** 9)  # nothing more until another DENSE_TAIL of entries has come
    assert len(index) == DENSE_TAIL + 1


def test_folding_stops_at_a_gap_a_segment_change_and_the_fold_size() -> None:
    index = OffsetIndex()
    index.append(0, 0, 0, 10, 100, 1)
    index.append(0, 1, 1, 130, 100, 1)  # another partition's batch lies between: not adjacent
    index.append(1, 2, 2, 10, 100, 1)  # the next segment
    index.append(1, 3, 3, 120, FOLD_BYTES - 50, 1)  # adjacent, but the run would exceed FOLD_BYTES
    for n in range(2 * DENSE_TAIL):
        index.append(1, 4 + n, 4 + n, 10 ** 6 + 200 * n, 100, 1)  # gaps between them too
    index.fold(durable_end=10 ** 9)
    assert set(index.count) == {1} and len(index) == 2 * DENSE_TAIL + 4


def test_a_span_of_folded_batches_walks_batch_by_batch() -> None:
    """``batches_in_span``: a span starts at a batch and runs through envelope + batch pairs; a span cut
    short ends at its last whole batch."""
    batches = [build_record_batch([NewRecord(key=None, value=b"v%d" % i)] * (i + 1), base_offset=offset)
               for i, offset in enumerate((0, 1, 3))]
    span = batches[0] + b"".join(envelope(0, len(b)) + b for b in batches[1:])
    walked = list(batches_in_span(memoryview(span)))
    assert [(base, last) for base, last, _ in walked] == [(0, 0), (1, 2), (3, 5)]
    assert [bytes(b) for _, _, b in walked] == batches
    assert [(base, last) for base, last, _ in batches_in_span(memoryview(span[:-5]))] == [(0, 0), (1, 2)]
    # take_batches: from the batch holding an offset, below an end, within a budget (the first batch free).
    sizes = [len(b) for b in batches]
    parts: list[memoryview] = []
    assert take_batches(memoryview(span), 2, 10, 10 ** 6, False, parts) == sizes[1] + sizes[2]
    assert [bytes(p) for p in parts] == batches[1:]
    parts = []
    assert take_batches(memoryview(span), 0, 3, 10 ** 6, False, parts) == -1 - sizes[0] - sizes[1]  # ends at 3
    parts = []
    assert take_batches(memoryview(span), 1, 10, 1, True, parts) == -1 - sizes[1] and len(parts) == 1
    parts = []
    assert take_batches(memoryview(span), 1, 10, 1, False, parts) == -1 and parts == []


def test_producers_detect_duplicates_gaps_and_fenced_epochs() -> None:
    producers = Producers()
    state, duplicate = producers.check(7, 0, 0, 4)
    assert duplicate is None
    state.batches.append((0, 4, 100))
    _, duplicate = producers.check(7, 0, 0, 4)  # a retry of an acknowledged batch: its original offset
    assert duplicate is not None and duplicate.result == 100
    with pytest.raises(PartitionError) as gap:
        producers.check(7, 0, 6, 6)
    assert error_code(gap.value) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert producers.check(7, 0, 5, 5)[1] is None  # the next sequence is accepted
    with pytest.raises(PartitionError) as epoch_gap:
        producers.check(7, 1, 3, 3)
    assert error_code(epoch_gap.value) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert producers.check(7, 1, 0, 0)[1] is None  # a new epoch starts at sequence 0
    with pytest.raises(PartitionError) as fenced:
        producers.check(7, 0, 6, 6)
    assert error_code(fenced.value) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_retry_of_a_batch_in_flight_gets_the_originals_outcome() -> None:
    producers = Producers()
    state, _ = producers.check(1, 0, 0, 0)
    state.batches.append((0, 0, 42))
    retries: list[defer.Deferred[int]] = []
    state.in_flight[42] = retries
    _, duplicate = producers.check(1, 0, 0, 0)
    assert duplicate is not None and not duplicate.called and retries == [duplicate]


def test_idle_producers_expire_unless_in_flight_or_in_an_open_transaction() -> None:
    producers = Producers()
    for pid in (1, 2, 3):
        state, _ = producers.check(pid, 0, 0, 0)
        state.last_ms = 1000
    producers.recovered(4, 0, 0, 0, 10, timestamp_ms=5000)  # recent: stays
    producers.get(2).in_flight[7] = []  # type: ignore[union-attr]  # an append in flight: stays
    assert producers.expire(2000, keep={3}) == 1  # 3 holds an open transaction: stays
    assert producers.get(1) is None and len(producers) == 3
    # A forgotten producer starts over: its next batch is accepted as a new producer's.
    state, duplicate = producers.check(1, 0, 5, 5)
    assert duplicate is None and not state.batches
    # A marker refreshes the producer it fences.
    producers.fence(4, 1, now_ms=9000, coordinator_epoch=0)
    assert producers.expire(6000, keep=set()) == 2 and producers.get(4) is not None


def test_producer_window_and_sequence_wrap_after_recovery() -> None:
    producers = Producers()
    for i in range(PRODUCER_WINDOW + 2):
        producers.recovered(3, 0, i, i, 10 + i, 1000 + i)
    state = producers.get(3)
    assert state is not None and len(state.batches) == PRODUCER_WINDOW
    _, duplicate = producers.check(3, 0, 2, 2)  # the oldest batch still in the window
    assert duplicate is not None and duplicate.result == 12
    with pytest.raises(PartitionError) as forgotten:
        producers.check(3, 0, 1, 1)  # out of the window: no longer recognised, and out of sequence
    assert error_code(forgotten.value) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    wrapped = Producers()
    wrapped.recovered(4, 0, 0x7FFFFFFE, 0x7FFFFFFF, 0, 0)
    assert wrapped.check(4, 0, 0, 0)[1] is None  # sequences wrap at 2**31


def test_the_high_watermark_passes_only_durable_prefixes_in_order() -> None:
    hw = HighWatermark(10)
    first, second, third = hw.track(12), hw.track(13), hw.track(17)
    assert hw.made_durable(second) == [] and hw.offset == 10  # an earlier append is still in flight
    assert hw.made_durable(first) == [first.acked, second.acked] and hw.offset == 14
    assert hw.made_durable(third) == [third.acked] and hw.offset == 18


def test_a_failed_append_fails_every_later_one() -> None:
    hw = HighWatermark(0)
    first, second, third = hw.track(0), hw.track(1), hw.track(2)
    assert hw.failed(second) == [second, third]
    assert hw.made_durable(third) == []  # already failed: never acknowledged
    assert hw.failed(third) == []
    assert hw.made_durable(first) == [first.acked] and hw.offset == 1


def test_waiters_wake_or_time_out() -> None:
    clock = Clock()
    a, b = Waiters(), Waiters()
    woken = wait_for_any(clock, [a, b], 5.0)
    b.wake()
    assert woken.called and len(a) == 0 and len(b) == 0 and not clock.getDelayedCalls()
    timed_out = wait_for_any(clock, [a], 5.0)
    clock.advance(4.9)
    assert not timed_out.called
    clock.advance(0.2)
    assert timed_out.called and len(a) == 0


def entry(partition: int, base: int, records: int, position: int, producer: int = -1, seq: int = 0) -> IndexEntry:
    return IndexEntry(partition, base, position, 100, records - 1, 1000 + base, producer, 0, seq, 0)


def writer(name: str, tail: int = 0) -> SegmentWriter:
    return SegmentWriter(None, Clock(), name, tail, 0)  # no store: these tests never append


def test_recovery_keeps_contiguous_offsets_only() -> None:
    old, new = writer("s.#epoch.0", 400), writer("s.#epoch.1", 200)
    p = PartitionLog("t", 0)
    p.recovered(old, entry(0, 0, 2, 10, producer=5, seq=0))
    p.recovered(old, entry(0, 0, 2, 10, producer=5, seq=0))  # repeated by a crash between index appends
    p.recovered(old, entry(0, 2, 1, 120, producer=5, seq=2))
    p.recovered(new, entry(0, 5, 1, 10))  # durable in the successor past a gap: never acknowledged
    p.recovered(new, entry(0, 3, 1, 120))
    p.write_to(new)
    p.open_at(0)
    assert list(p.index.base) == [0, 2, 3] and list(p.index.seg) == [0, 0, 1]
    assert (p.log_start, p.next_offset, p.high_watermark) == (0, 4, 4)
    assert p.producers.check(5, 0, 2, 2)[1] is not None  # the recovered window recognises a retry


def test_a_stored_log_start_past_the_data_moves_the_next_offset() -> None:
    p = PartitionLog("t", 0, writer("s"))
    p.open_at(7)
    assert (p.log_start, p.next_offset, p.high_watermark) == (7, 7, 7)


def test_retention_by_time_and_size_moves_whole_durable_batches() -> None:
    p = PartitionLog("t", 0, writer("s", 500))
    for base in range(4):
        p.recovered(p.segments[0], entry(0, base, 1, 10 + base * 110))
    p.open_at(0)
    assert retained_start(p, -1, -1, now_ms=10_000) == 0
    assert retained_start(p, 8_998, -1, now_ms=10_000) == 2  # timestamps 1000..1003: two are too old
    assert retained_start(p, -1, 300, now_ms=10_000) == 1  # 4 batches of 100 bytes down to 300
    assert retained_start(p, -1, 250, now_ms=10_000) == 2  # whole batches: down to 200
    p.watermark = HighWatermark(1)  # only durable batches may go
    assert retained_start(p, 0, -1, now_ms=10_000) == 1


def test_stream_size_retention_drops_the_oldest_batches_across_partitions() -> None:
    """A native stream's size policy covers the whole stream: the oldest durable batches go first,
    whichever partition holds them, each partition only from its front."""

    def stream() -> tuple[PartitionLog, PartitionLog]:
        shared = writer("shared", 1000)
        a, b = PartitionLog("t", 0, shared), PartitionLog("t", 1, shared)
        for base in range(4):  # timestamps 1000..1003
            a.recovered(shared, entry(0, base, 1, 10 + base * 110))
        for base in range(2):  # newer: timestamps 1500, 1501
            b.recovered(shared, IndexEntry(1, base, 500 + base * 110, 100, 0, 1500 + base, -1, 0, 0, 0))
        a.open_at(0)
        b.open_at(0)
        return a, b

    a, b = stream()
    assert stream_retained_starts([a, b], -1, -1, now_ms=10_000) == [0, 0]
    assert stream_retained_starts([a, b], -1, 300, now_ms=10_000) == [3, 0]  # 600 bytes: a's three oldest go
    assert retained_start(a, -1, 300, now_ms=10_000) == 1  # where a topic's per-partition limit would stop
    assert stream_retained_starts([a, b], -1, 150, now_ms=10_000) == [4, 1]
    assert stream_retained_starts([a, b], 8_998, 300, now_ms=10_000) == [3, 0]  # time first, then size
    a.watermark = HighWatermark(2)  # only durable batches may go: b's older one goes instead
    assert stream_retained_starts([a, b], -1, 300, now_ms=10_000) == [2, 1]


def test_a_segment_is_truncated_below_the_first_batch_any_partition_needs() -> None:
    shared = writer("shared", 1000)
    a, b = PartitionLog("t", 0, shared), PartitionLog("t", 1, shared)
    a.recovered(shared, entry(0, 0, 1, 10))
    a.recovered(shared, entry(0, 1, 1, 230))
    b.recovered(shared, entry(1, 0, 1, 120))
    a.open_at(1)
    b.open_at(0)
    assert truncation_points([a, b]) == {"shared": 110}  # b still needs its batch at 120 (envelope at 110)
    b.open_at(1)
    assert truncation_points([a, b]) == {"shared": 220}


class _Tables:
    def exists(self, name: str) -> bool:
        return True


class _Topics:
    def __init__(self, topic: TopicInfo) -> None:
        self.topic = topic

    def record(self, name: str) -> TopicInfo | None:
        return self.topic if name == self.topic.name else None


def loaded_topic(topic: TopicInfo, segment_of: list[str]) -> LoadedTopic:
    writers = {name: writer(name) for name in set(segment_of)}
    return LoadedTopic(topic, [PartitionLog(topic.name, p, writers[name]) for p, name in enumerate(segment_of)],
                       writers)


def test_a_second_load_keeps_the_installed_partitions_and_adopts_only_new_ones() -> None:
    two = TopicInfo("t", uuid.uuid4(), ((0.0, 0.5), (0.5, 1.0)))
    three = TopicInfo("t", two.topic_id, ((0.0, 0.5), (0.5, 0.75), (0.75, 1.0)))
    storage = SegmentPartitionStorage(None, _Topics(three), _Tables(), None, Clock(), 1 << 20)  # fakes: only the install path runs
    first = storage._install(loaded_topic(two, ["s0", "s1"]))
    installed = list(first)
    again = storage._install(loaded_topic(three, ["s0", "s1", "s1"]))  # a request's load racing a topic event
    assert again is first and again[:2] == installed  # appends in flight on them stay where they are
    assert len(again) == 3 and again[2].writer is installed[1].writer  # one writer per segment
    reloaded = storage._install(loaded_topic(three, ["s0", "s1", "s1"]), True)  # after a failed append
    assert reloaded is not first and storage.loaded("t") is reloaded


def test_a_load_of_a_topic_deleted_and_created_again_meanwhile_is_not_installed() -> None:
    old = TopicInfo("t", uuid.uuid4(), ((0.0, 1.0),))
    new = TopicInfo("t", uuid.uuid4(), ((0.0, 1.0),))
    storage = SegmentPartitionStorage(None, _Topics(new), _Tables(), None, Clock(), 1 << 20)  # fakes: only the install path runs
    storage._install(loaded_topic(old, ["s0"]))
    assert storage.loaded("t") is None


class _HeldStore:
    """A segment store whose data appends wait until the test answers them (index appends land at once)."""

    def __init__(self) -> None:
        self.held: list[Future[int]] = []

    def append(self, name: str, data: Any, **_: Any) -> Future[int]:
        future: Future[int] = Future()
        if name.endswith(INDEX_SUFFIX):
            future.set_result(0)
        else:
            self.held.append(future)
        return future


def _answered_at_once(fut: Future[Any]) -> defer.Deferred[Any]:
    """``to_deferred`` for a test whose thread plays the reactor's: fires where the future completes."""
    d: defer.Deferred[Any] = defer.Deferred()
    fut.add_done_callback(lambda f: d.errback(f.exception()) if f.exception() else d.callback(f.result()))
    return d


def _held_storage(monkeypatch: pytest.MonkeyPatch) -> tuple[SegmentPartitionStorage, _HeldStore, Clock, TopicInfo]:
    monkeypatch.setattr(storage_module, "to_deferred", _answered_at_once)
    topic = TopicInfo("t", uuid.uuid4(), ((0.0, 1.0),))
    clock = Clock()
    clock.advance(time.time())
    store = _HeldStore()
    storage = SegmentPartitionStorage(store, _Topics(topic), _Tables(), defer.maybeDeferred,  # type: ignore[arg-type]
                                      clock, 1 << 20)
    storage._install(loaded_topic(topic, ["s0"]))
    return storage, store, clock, topic


def _produce_batches(storage: SegmentPartitionStorage, topic: TopicInfo, producer_id: int, count: int,
                     first_sequence: int = 0) -> list[Any]:
    """Append ``count`` one-record batches of ``producer_id`` (sequences ``first_sequence``, and on); their
    outcomes, as they come."""
    (p,) = storage.loaded(topic.name) or []
    outcomes: list[Any] = []
    for seq in range(first_sequence, first_sequence + count):
        batch = build_record_batch([NewRecord(key=None, value=b"v")], producer_id=producer_id, producer_epoch=0,
                                   base_sequence=seq)
        defer.maybeDeferred(storage.append, topic, p, batch).addBoth(outcomes.append)
    return outcomes


def test_a_reload_waits_until_every_append_in_flight_is_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    """An append failed because one before it failed may still land; a reload that read the segment
    before it did would lose its producer state, and the retry of that batch would be written twice."""
    storage, store, clock, topic = _held_storage(monkeypatch)
    loads: list[int] = []

    def load(info: TopicInfo) -> LoadedTopic:
        loads.append(sum(not f.done() for f in store.held))  # appends still in flight when the load reads
        return loaded_topic(topic, ["s0"])

    monkeypatch.setattr(storage, "_load", load)
    plain = _produce_batches(storage, topic, -1, 1)  # no producer id: refused at once
    _produce_batches(storage, topic, 7, 2)
    store.held[0].set_exception(ContainerOfflineError("container 0 moved"))
    assert [type(o.value) for o in plain] == [PartitionError]
    clock.advance(10 * RELOAD_DELAY_SECONDS)
    assert loads == []  # the idempotent appends' outcomes are still unknown: no load may read yet
    store.held[1].set_exception(ContainerOfflineError("container 0 moved"))
    assert loads == []  # nor while the third is in flight
    store.held[2].set_result(0)
    assert loads == [0]


@pytest.mark.parametrize("stored", [(), (0,), (0, 1)])
def test_a_failed_idempotent_append_is_answered_by_what_the_store_holds(monkeypatch: pytest.MonkeyPatch,
                                                                       stored: tuple[int, ...]) -> None:
    """A container that failed mid-append recovers what its log had: an idempotent batch whose append
    failed may be stored all the same. A refusal would tell the client it was not written (librdkafka
    writes it again as a new batch after it bumps its epoch), so it is answered after the reload:
    its stored offset when the store holds it, the refusal when not."""
    storage, store, clock, topic = _held_storage(monkeypatch)
    reloaded = loaded_topic(topic, ["s0"])
    for seq in stored:  # what the container recovered: batches 0 and 1 of producer 7 at offsets 0 and 1
        reloaded.partitions[0].producers.recovered(7, 0, seq, seq, seq, 0)
    monkeypatch.setattr(storage, "_load", lambda info: reloaded)
    outcomes = _produce_batches(storage, topic, 7, 2)
    for held in store.held:
        held.set_exception(ContainerOfflineError("container 0 failed"))
    assert outcomes == []  # their fate is unknown until the reload
    clock.advance(RELOAD_DELAY_SECONDS)
    answers = [o if isinstance(o, int) else error_code(o.value) for o in outcomes]
    assert answers == [*stored, *[ErrorCode.NOT_LEADER_OR_FOLLOWER] * (2 - len(stored))]


def test_a_batch_behind_one_refused_while_loading_is_not_out_of_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client pipelines batches. When the first is refused while the partition reloads and the next
    arrives once the reload is done, the next one's sequence skips the refused one's. Answered out of
    sequence, librdkafka bumps its epoch and resends every batch it holds unacknowledged as a new one
    (a duplicate of any that a partition stored without the client hearing so): it is refused as
    retriable too, until the client resends from the refused batch."""
    storage, store, clock, topic = _held_storage(monkeypatch)
    reloaded = loaded_topic(topic, ["s0"])
    reloaded.partitions[0].producers.recovered(7, 0, 0, 0, 0, 0)  # batch 0, stored before the reload
    monkeypatch.setattr(storage, "_load", lambda info: reloaded)
    first = _produce_batches(storage, topic, 7, 1)
    store.held[0].set_result(0)
    assert first == [0]
    storage.reload(topic.name)  # a takeover of its container, say
    refused = _produce_batches(storage, topic, 7, 1, first_sequence=1)
    assert [error_code(o.value) for o in refused] == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    clock.advance(RELOAD_DELAY_SECONDS)  # the reload is done
    behind = _produce_batches(storage, topic, 7, 1, first_sequence=2)
    assert [error_code(o.value) for o in behind] == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    resent = _produce_batches(storage, topic, 7, 2, first_sequence=1)
    for held in store.held[1:]:
        held.set_result(0)
    assert len(resent) == 2 and resent[1] == resent[0] + 1  # both stored, in order
    gap = _produce_batches(storage, topic, 7, 1, first_sequence=5)  # a gap nothing here explains
    assert [error_code(o.value) for o in gap] == [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
