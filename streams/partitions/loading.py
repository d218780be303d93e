"""Loading a topic's partitions from the store: blocking, run on a worker thread (or before the
reactor starts). It builds fresh partition objects that nothing else references yet; the reactor
takes them over when it installs the result (``SegmentPartitionStorage._install``).

A partition's data runs through every segment of its stream's history, sealed predecessors first, so
segments are recovered oldest epoch first and each partition keeps only contiguous offsets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from twisted.internet.interfaces import IReactorTime

from millrace.protocol.records import ControlRecordType, iter_batches, parse_control_record
from millrace.store.contracts import SegmentService
from millrace.store.tables import TableStore
from millrace.streams.partitions.compaction import COMPACTIONS_TABLE, load_compacted
from millrace.streams.partitions.formats import CONTROL_ATTRIBUTE, IndexEntry
from millrace.streams.partitions.partition import PartitionLog
from millrace.streams.partitions.segments import (
    Coverage,
    RecoveredSegment,
    SegmentWriter,
    StaleCoverage,
    read_fully,
    recover_segment,
)
from millrace.streams.partitions.snapshots import (
    StaleSnapshot,
    encode,
    read_snapshot,
    state_segment,
    write_snapshot,
)
from millrace.streams.topics import TopicInfo, TopicRegistry

LOG_STARTS_TABLE = "_system/_tables/kafka_log_starts"
log = logging.getLogger(__name__)


@dataclass
class LoadedTopic:
    topic: TopicInfo
    partitions: list[PartitionLog]
    writers: dict[str, SegmentWriter]  # every segment of the topic's history that still exists
    # On a cluster node: container -> ownership epoch of this node's containers before the load read
    terms: dict[int, int] = field(default_factory=dict)


def log_start_key(topic: str, partition: int) -> bytes:
    return topic.encode() + b"\0" + str(partition).encode()


def load_topic(store: SegmentService, clock: IReactorTime, topics: TopicRegistry, tables: TableStore,
               topic: TopicInfo) -> LoadedTopic:
    """Blocking: rebuild every partition of ``topic`` from its snapshot (if it has a usable one), its
    segments past it, and its stored log starts."""
    topic = current_record(topics, topic)
    try:
        return _load_topic(store, clock, topics, tables, topic, from_snapshot=True)
    except (StaleSnapshot, StaleCoverage) as e:
        log.info("the snapshot of %s is stale (%s); loading it in full", topic.name, e)
        return _load_topic(store, clock, topics, tables, topic, from_snapshot=False)


def _load_topic(store: SegmentService, clock: IReactorTime, topics: TopicRegistry, tables: TableStore,
                topic: TopicInfo, from_snapshot: bool) -> LoadedTopic:
    folds = not topic.append_rules.compacted
    parts = [PartitionLog(topic.name, p, folds=folds) for p in range(topic.partition_count)]
    current = topics.current_segments(topic.name)
    log_starts = log_starts_of(tables, topic.name)
    writers: dict[str, SegmentWriter] = {}
    # A compacted partition's cleaned prefix comes first (``compaction``), then its data segments past it.
    scope, stream = topics.stream_of(topic.name)
    load_compacted(store, clock, tables, topic.name, scope, stream, parts, marker_is_commit)
    snapshot = None
    if from_snapshot and folds and all(p.compaction is None for p in parts):
        snapshot = read_snapshot(store, clock, topic, state_segment(scope, stream))
    if snapshot is not None:
        parts[:len(snapshot.partitions)] = snapshot.partitions[:len(parts)]
    covered = snapshot.covered if snapshot is not None else {}
    for name in topics.segment_history(topic.name):
        if not store.exists(name):
            continue
        found = recover_segment(store, name, covered.get(name))
        writer = writers[name] = SegmentWriter(store, clock, name, found.tail, found.index_tail)
        replay(store, parts, writer, found, attributes=True)
    for p in parts:
        p.write_to(writers[topics.segment_of_partition(topic, p.partition, current).name])
        p.open_at(log_starts.get(p.partition, 0))
        if snapshot is not None and not p.forget_segments({w.name for w in p.segments} - writers.keys()):
            raise StaleSnapshot(f"partition {p.partition} still needs a segment that is gone")
    return LoadedTopic(topic, parts, writers)


def current_record(topics: TopicRegistry, topic: TopicInfo) -> TopicInfo:
    """Blocking: ``topic``, or the registry's record read again from its table when this node's copy is
    out of date. A native stream's partitions are carved before its segments split there, so an open
    segment that starts inside a live slice means another node carved it since this node's last
    refresh; loading from the old record would point the old partition at one piece of its slice."""
    if topic.kafka_view:
        return topic
    starts = [seg.key_start for seg in topics.current_segments(topic.name)]
    if any(lo < x < hi for p, (lo, hi) in enumerate(topic.slices) if p not in topic.retired for x in starts):
        topics.refresh()
        return topics.record(topic.name) or topic
    return topic


def replay(store: SegmentService, parts: list[PartitionLog], writer: SegmentWriter, found: RecoveredSegment,
           attributes: bool) -> None:
    """Add what recovery found in one segment to the partitions (segments oldest first); with
    ``attributes``, its writer attributes too (a load; a snapshot leaves them to the load, which reads
    every segment's anyway)."""
    for p in parts:
        p.adopt(writer)
    for entry in found.entries:
        if entry.partition < len(parts):
            commit = marker_is_commit(store, found.name, entry) if entry.attributes & CONTROL_ATTRIBUTE else None
            parts[entry.partition].recovered(writer, entry, commit)
    if attributes and found.attributes:
        for p in parts:
            p.recovered_attributes(found.attributes, found.name)


def take_snapshot(store: SegmentService, clock: IReactorTime, topics: TopicRegistry, tables: TableStore,
                  topic: TopicInfo, expire_before_ms: int) -> bool:
    """Blocking (a worker): store a snapshot of ``topic``'s partitions as a load would build them now,
    from its last snapshot and what its segments hold past it (``snapshots``). False when the topic
    cannot have one now: compacted, or a batch a load would drop (a predecessor's append may still land
    before it; the next round looks again)."""
    if topic.append_rules.compacted or any(True for _ in tables.entries(COMPACTIONS_TABLE, topic.name.encode() + b"\0")):
        return False
    scope, stream = topics.stream_of(topic.name)
    segment = state_segment(scope, stream)
    snapshot = read_snapshot(store, clock, topic, segment)
    parts = snapshot.partitions if snapshot is not None else []
    parts += [PartitionLog(topic.name, p) for p in range(len(parts), topic.partition_count)]
    covered = snapshot.covered if snapshot is not None else {}
    now: dict[str, Coverage] = {}
    for name in topics.segment_history(topic.name):
        if not store.exists(name):
            continue
        found = recover_segment(store, name, covered.get(name), persist=False)
        replay(store, parts, SegmentWriter(store, clock, name, 0, 0), found, attributes=False)
        now[name] = found.covered
    log_starts = log_starts_of(tables, topic.name)
    for p in parts:
        if p.dropped_in is not None or not p.forget_segments({w.name for w in p.segments} - now.keys()):
            return False
        p.trim_for_snapshot(log_starts.get(p.partition, 0))
        p.producers.expire(expire_before_ms, p.txns.open)
    write_snapshot(store, segment, encode(topic, parts, now))
    return True


def log_starts_of(tables: TableStore, topic: str) -> dict[int, int]:
    """The log starts stored for ``topic``'s partitions (partition -> offset)."""
    return {int(e.key.split(b"\0")[1]): int(e.value) for e in tables.entries(LOG_STARTS_TABLE, topic.encode() + b"\0")}


def marker_is_commit(store: SegmentService, segment: str, entry: IndexEntry) -> bool:
    """Blocking: whether the stored marker batch of ``entry`` commits (else it aborts). Markers are a
    few dozen bytes and the index does not keep their kind, so recovery reads each one."""
    batch = next(iter_batches(read_fully(store, segment, entry.position, entry.length)))
    kind, _ = parse_control_record(next(iter(batch.records())))
    return kind == ControlRecordType.COMMIT


def segments_of_partitions(topics: TopicRegistry, topic: TopicInfo) -> list[str]:
    """Blocking: the open segment of each partition of ``topic`` (for partitions just added)."""
    current = topics.current_segments(topic.name)
    return [topics.segment_of_partition(topic, p, current).name for p in range(topic.partition_count)]
