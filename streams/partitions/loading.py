"""Loading a topic's partitions from the store: blocking, run on a worker thread (or before the
reactor starts). It builds fresh partition objects that nothing else references yet; the reactor
takes them over when it installs the result (``SegmentPartitionStorage._install``).

A partition's data runs through every segment of its stream's history, sealed predecessors first, so
segments are recovered oldest epoch first and each partition keeps only contiguous offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twisted.internet.interfaces import IReactorTime

from millrace.protocol.records import ControlRecordType, iter_batches, parse_control_record
from millrace.store.contracts import SegmentService
from millrace.store.tables import TableStore
from millrace.streams.partitions.compaction import load_compacted
from millrace.streams.partitions.formats import CONTROL_ATTRIBUTE, IndexEntry
from millrace.streams.partitions.partition import PartitionLog
from millrace.streams.partitions.segments import SegmentWriter, read_fully, recover_segment
from millrace.streams.topics import TopicInfo, TopicRegistry

LOG_STARTS_TABLE = "_system/_tables/kafka_log_starts"


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
    """Blocking: rebuild every partition of ``topic`` from its segments and stored log starts."""
    folds = not topic.append_rules.compacted
    parts = [PartitionLog(topic.name, p, folds=folds) for p in range(topic.partition_count)]
    current = topics.current_segments(topic.name)
    log_starts = {
        int(e.key.split(b"\0")[1]): int(e.value)
        for e in tables.entries(LOG_STARTS_TABLE, topic.name.encode() + b"\0")
    }
    writers: dict[str, SegmentWriter] = {}
    # A compacted partition's cleaned prefix comes first (``compaction``), then its data segments past it.
    load_compacted(store, clock, tables, topic.name, *topics.stream_of(topic.name), parts, marker_is_commit)
    for name in topics.segment_history(topic.name):
        if not store.exists(name):
            continue
        found = recover_segment(store, name)
        writer = writers[name] = SegmentWriter(store, clock, name, found.tail, found.index_tail)
        for entry in found.entries:
            if entry.partition < len(parts):
                commit = marker_is_commit(store, name, entry) if entry.attributes & CONTROL_ATTRIBUTE else None
                parts[entry.partition].recovered(writer, entry, commit)
        if found.attributes:
            for p in parts:
                p.recovered_attributes(found.attributes, name)
    for p in parts:
        p.write_to(writers[topics.segment_of_partition(topic, p.partition, current).name])
        p.open_at(log_starts.get(p.partition, 0))
    return LoadedTopic(topic, parts, writers)


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
