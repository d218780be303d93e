"""Partition-state snapshots (``streams.partitions.snapshots``): a load that starts from a snapshot and
replays the batches after it builds exactly what a full load builds: offset index, offsets, producer
windows, open and aborted transactions. Batches the index had not reached when the snapshot was taken,
and index entries written after it for batches it scanned, are neither lost nor taken twice. A snapshot
that no longer matches the store (a segment gone, another topic of the same name) is not used."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock

from millrace.protocol.records import (
    ControlRecordType,
    NewRecord,
    build_control_batch,
    build_record_batch,
    iter_batches,
)
from millrace.store.controller import Controller
from millrace.store.segment_store import SegmentStore
from millrace.store.tables.table_store import TableStore
from millrace.streams.partitions.compaction import COMPACTIONS_TABLE
from millrace.streams.partitions.formats import ENVELOPE, INDEX_ENTRY_SIZE, INDEX_SUFFIX, IndexEntry, envelope
from millrace.streams.partitions.loading import (
    LOG_STARTS_TABLE,
    LoadedTopic,
    _load_topic,
    load_topic,
    take_snapshot,
)
from millrace.streams.partitions.partition import PartitionLog
from millrace.streams.partitions.snapshots import read_snapshot, state_segment
from millrace.streams.topics import TopicInfo, TopicRegistry
from tests.storehelpers import open_store

NEVER_EXPIRES = -1


@dataclass
class Topic:
    """A topic whose batches the test writes straight into its segments, as the gateway lays them out."""

    store: SegmentStore
    registry: TopicRegistry
    tables: TableStore
    info: TopicInfo
    next_offset: dict[int, int] = field(default_factory=dict)
    unindexed: dict[str, list[IndexEntry]] = field(default_factory=dict)  # entries the index has yet to get

    def segment(self, partition: int) -> str:
        current = self.registry.current_segments(self.info.name)
        return self.registry.segment_of_partition(self.info, partition, current).name

    def append(self, partition: int, batch: bytes, indexed: bool = True) -> None:
        name = self.segment(partition)
        head = next(iter_batches(batch)).header
        at = self.store.get_info(name).length
        self.store.append(name, envelope(partition, len(batch)) + batch, expected_offset=at).result(10)
        entry = IndexEntry.of_batch(partition, head.base_offset, at + ENVELOPE.size, head)
        self.next_offset[partition] = head.last_offset + 1
        waiting = self.unindexed.setdefault(name, [])
        waiting.append(entry)
        if indexed:
            self.index_pending(name)

    def index_pending(self, name: str) -> None:
        """Write the index entries a segment's data is ahead by (the gateway's index flush)."""
        entries = self.unindexed.pop(name, [])
        if entries:
            index = name + INDEX_SUFFIX
            self.store.append(index, b"".join(e.pack() for e in entries),
                              expected_offset=self.store.get_info(index).length).result(10)

    def offset(self, partition: int) -> int:
        return self.next_offset.get(partition, 0)

    def load(self) -> LoadedTopic:
        return load_topic(self.store, Clock(), self.registry, self.tables, self.info)

    def full_load(self) -> LoadedTopic:
        return _load_topic(self.store, Clock(), self.registry, self.tables, self.info, from_snapshot=False)

    def snapshot(self) -> bool:
        return take_snapshot(self.store, Clock(), self.registry, self.tables, self.info, NEVER_EXPIRES)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SegmentStore]:
    opened = open_store(str(tmp_path))
    yield opened
    opened.close()


def make_topic(store: SegmentStore, name: str = "orders", partitions: int = 4, segments: int = 2) -> Topic:
    tables = TableStore(store)
    for table in (LOG_STARTS_TABLE, COMPACTIONS_TABLE):  # as the partition storage makes them at start
        if not tables.exists(table):
            tables.create_table(table)
    registry = TopicRegistry(Controller(store, tables), tables, "kafka")
    info = registry.create(name, partitions, {"millrace.segments.initial": str(segments)})
    topic = Topic(store, registry, tables, info)
    for p in range(partitions):  # the index segments the gateway creates with the data segments
        index = topic.segment(p) + INDEX_SUFFIX
        if not store.exists(index):
            store.create_segment(index).result(10)
    return topic


def state(p: PartitionLog) -> dict[str, Any]:
    """Everything a load builds for a partition, with segments by name."""
    index = p.index
    return {
        "entries": [(index.base[i], index.last[i], p.segments[index.seg[i]].name, index.pos[i], index.length[i],
                     index.max_ts[i], index.running_max_ts[i], index.count[i]) for i in range(len(index))],
        "bytes": index.bytes,
        "offsets": (p.log_start, p.next_offset, p.high_watermark, p.offsets().last_stable),
        "writer": p.writer.name if p.writer is not None else None,
        "producers": sorted(map(repr, p.producers.snapshot())),
        "open": dict(p.txns.open),
        "aborted": list(p.txns.aborted),
    }


def assert_loads_agree(topic: Topic) -> None:
    assert read_snapshot(topic.store, Clock(), topic.info, state_segment("kafka", topic.info.name)) is not None
    quick = _load_topic(topic.store, Clock(), topic.registry, topic.tables, topic.info, from_snapshot=True)
    full = topic.full_load()
    assert [state(p) for p in quick.partitions] == [state(p) for p in full.partitions]
    assert {n: (w.tail, w.index_tail) for n, w in quick.writers.items()} == \
        {n: (w.tail, w.index_tail) for n, w in full.writers.items()}
    topic.unindexed.clear()  # a load indexes what the index lacked, as a restarted gateway's does
    for name in quick.writers:  # what the loads appended to an index segment left it without a gap
        raw = topic.store.read(name + INDEX_SUFFIX, 0, 1 << 24).result(10).data
        entries = [IndexEntry.unpack_from(raw, at) for at in range(0, len(raw), INDEX_ENTRY_SIZE)]
        assert all(b.position - ENVELOPE.size == a.end for a, b in zip(entries, entries[1:], strict=False)), name


def write_traffic(topic: Topic, rng: random.Random, batches: int, sequences: dict[tuple[int, int], int],
                  open_txn: set[int], indexed_share: float = 0.9) -> None:
    """Plain, idempotent and transactional batches and markers, spread over the partitions; a share of
    them left for the index to catch up with later."""
    for _ in range(batches):
        p = rng.randrange(topic.info.partition_count)
        kind = rng.random()
        base = topic.offset(p)
        records = [NewRecord(key=b"k", value=bytes(rng.randrange(1, 300))) for _ in range(rng.randint(1, 3))]
        if kind < 0.3:
            batch = build_record_batch(records, base_offset=base)
        elif kind < 0.7:
            pid = rng.choice([11, 12])
            seq = sequences.get((pid, p), 0)
            batch = build_record_batch(records, base_offset=base, producer_id=pid, producer_epoch=0, base_sequence=seq)
            sequences[(pid, p)] = seq + len(records)
        elif kind < 0.85 or p not in open_txn:
            seq = sequences.get((21, p), 0)
            batch = build_record_batch(records, base_offset=base, producer_id=21, producer_epoch=0, base_sequence=seq,
                                       transactional=True)
            sequences[(21, p)] = seq + len(records)
            open_txn.add(p)
        else:
            marker = ControlRecordType.COMMIT if rng.random() < 0.5 else ControlRecordType.ABORT
            batch = build_control_batch(marker, producer_id=21, producer_epoch=0, base_offset=base)
            open_txn.discard(p)
        topic.append(p, batch, indexed=rng.random() < indexed_share)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_load_from_a_snapshot_builds_what_a_full_load_builds(store: SegmentStore, seed: int) -> None:
    rng = random.Random(seed)
    topic = make_topic(store)
    sequences: dict[tuple[int, int], int] = {}
    open_txn: set[int] = set()
    for _ in range(6):
        write_traffic(topic, rng, rng.randint(20, 120), sequences, open_txn)
        write_traffic(topic, rng, rng.randint(0, 6), sequences, open_txn, indexed_share=0.0)
        assert topic.snapshot()
        # The gateway's index flush catches up with some of what the snapshot scanned past the index.
        for name in list(topic.unindexed):
            if rng.random() < 0.5:
                topic.index_pending(name)
        write_traffic(topic, rng, rng.randint(0, 10), sequences, open_txn, indexed_share=0.0)  # then a crash
        assert_loads_agree(topic)
    write_traffic(topic, rng, 50, sequences, open_txn)
    assert_loads_agree(topic)


def test_a_load_from_a_snapshot_reads_only_the_index_past_it(store: SegmentStore) -> None:
    topic = make_topic(store, partitions=1, segments=1)
    for offset in range(300):
        topic.append(0, build_record_batch([NewRecord(key=None, value=b"x")], base_offset=offset))
    assert topic.snapshot()
    topic.append(0, build_record_batch([NewRecord(key=None, value=b"y")], base_offset=300))
    reads: list[tuple[str, int]] = []
    original = store.read

    def read(name: str, offset: int, max_length: int, *args: Any) -> Any:
        reads.append((name, offset))
        return original(name, offset, max_length, *args)

    store.read = read  # type: ignore[method-assign]
    try:
        (p,) = topic.load().partitions
    finally:
        store.read = original  # type: ignore[method-assign]
    assert p.next_offset == 301 and p.index.batches == 301
    index_reads = [offset for name, offset in reads if name.endswith(INDEX_SUFFIX)]
    assert index_reads == [300 * INDEX_ENTRY_SIZE]  # the entry of the one batch written since


def test_a_snapshot_of_another_topic_of_the_same_name_is_not_used(store: SegmentStore) -> None:
    topic = make_topic(store, partitions=1, segments=1)
    for offset in range(10):
        topic.append(0, build_record_batch([NewRecord(key=None, value=b"x")], base_offset=offset))
    assert topic.snapshot()
    payload = store.read(state_segment("kafka", "orders"), 0, 1 << 20).result(10).data
    topic.registry.delete("orders")
    again = make_topic(store, partitions=1, segments=1)
    state_name = state_segment("kafka", "orders")
    if not store.exists(state_name):
        store.create_segment(state_name).result(10)
    store.append(state_name, payload).result(10)  # as if the old topic's snapshot had survived
    (p,) = again.load().partitions
    assert p.next_offset == 0 and len(p.index) == 0


def test_a_snapshot_covering_more_than_the_store_holds_falls_back_to_a_full_load(store: SegmentStore) -> None:
    topic = make_topic(store, partitions=2, segments=2)
    for offset in range(20):
        for p in range(2):
            topic.append(p, build_record_batch([NewRecord(key=None, value=b"x")], base_offset=offset))
    assert topic.snapshot()
    index = topic.segment(1) + INDEX_SUFFIX
    store.delete(index).result(10)  # an index segment lost: recovery rebuilds it from the data
    store.create_segment(index).result(10)
    loaded = topic.load()
    assert [p.next_offset for p in loaded.partitions] == [20, 20]
    assert [p.index.batches for p in loaded.partitions] == [20, 20]
