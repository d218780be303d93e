"""Kafka topics as Millrace streams.

A topic is the stream of the same name in the Kafka scope. Its partitions divide the routing-key
space into slices, equal at creation (partition p of N owns [p/N, (p+1)/N)). Adding partitions splits
existing slices (the widest first) and never moves data: old data stays tagged with its partition.
Segment boundaries always fall on slice boundaries, so at any moment each partition's new data goes
to exactly one open segment, which may carry several whole partitions.

The Kafka-only facts (topic id, slices, configs) are kept in a table segment; the stream itself is
the controller's. Streams of other scopes that native writers append to have the same record, keyed
``scope/stream`` (a '/' no Kafka topic name can hold, so the keys never collide and Kafka topics keep
their bare names, and their stored records, unchanged); ``key`` makes the key of a (scope, stream).
A native stream's partitions follow its segments instead (``carve``): it starts with one partition per
segment, and a split at a point inside a partition's slice retires that partition and adds one per
piece. A retired partition keeps its slice and its data (readers read segments, which hold it) but
takes no more appends; native writers that route to it are refused and route again. Slices are never
changed once made, so the partitions that ever held a key are exactly those whose slices contain its
hash: how a writer opened again finds the event numbers it wrote before (``client/writer.py``). Kafka
topics never retire partitions: their clients see partitions, not segments.

Threads: changes (create, delete, grow, configs) and the segment lookups block on table and controller
I/O, so they run on the worker pool, one writer at a time under the registry's lock; they replace
immutable ``TopicInfo`` records whole, so the in-memory reads (``get``, ``by_id``, ``names``) are safe
from any thread, the reactor included. Listeners are called on the changing worker thread and hop to
the reactor themselves.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from millrace.protocol.contracts import FORMAT_ATTRIBUTE, LEGACY_BYTE_STREAM_ATTRIBUTE
from millrace.protocol.names import INTERNAL_STREAM_PREFIXES, is_internal_stream_name
from millrace.store.controller import (
    Controller,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    SegmentRange,
    StreamConfiguration,
    StreamNotSealedError,
    StreamState,
    key_hash,
    segment_name,
)
from millrace.store.errors import (
    SegmentExistsError,
    StreamExistsError,
    StreamNotFoundError,
    TableKeyVersionMismatchError,
)
from millrace.store.tables import NOT_EXISTS, TableStore
from millrace.streams import topic_configs
from millrace.streams.errors import Reason, TopicError

TOPICS_TABLE = "_system/_tables/kafka_topics"

# Every topic config (Kafka 4.0's and Millrace's own) with its default: ``topic_configs`` has the
# types, valid values and broker synonyms.
DEFAULT_CONFIGS: dict[str, str] = topic_configs.DEFAULTS
SCALING_TYPES = {
    "fixed": ScalingType.FIXED_NUM_SEGMENTS,
    "by_event_rate": ScalingType.BY_RATE_IN_EVENTS_PER_SEC,
    "by_data_rate": ScalingType.BY_RATE_IN_KBYTES_PER_SEC,
}
READ_ONLY_CONFIGS = topic_configs.READ_ONLY

# Kafka's rule (org.apache.kafka.common.internals.Topic): ASCII letters, digits, '.', '_', '-'; at most
# 249 characters; not "." or "..". str.isalnum() would let non-ASCII letters through, which Kafka
# refuses and the controller's stream names cannot hold.
_LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def legal_topic_name(name: str | None) -> bool:
    """True if Kafka would accept ``name`` as a topic name."""
    return name is not None and name not in (".", "..") and _LEGAL_TOPIC.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class AppendRules:
    """The configs an append (and a partition's load and compaction) checks, read once per ``TopicInfo``
    (a config change makes a new one), so a produce request does not look each up per batch."""

    log_append_time: bool  # message.timestamp.type: the broker stamps batches
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    compacted: bool  # cleanup.policy holds compact: every record needs a key
    compression: str  # compression.type
    max_message_bytes: int
    min_insync_replicas: int


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    slices: tuple[tuple[float, float], ...]  # partition -> [start, end) of the key space
    configs: dict[str, str] = field(default_factory=dict)  # only what was set explicitly
    created_ms: int = 0
    retired: frozenset[int] = frozenset()  # a native stream's partitions that take no more appends

    @property
    def partition_count(self) -> int:
        return len(self.slices)

    @property
    def kafka_view(self) -> bool:
        """A Kafka topic (its clients see its partitions); else a native stream of another scope, whose
        partitions follow its segments."""
        return "/" not in self.name

    def config(self, key: str) -> str:
        return self.configs.get(key, DEFAULT_CONFIGS.get(key, ""))

    @functools.cached_property
    def append_rules(self) -> AppendRules:
        config = self.config
        return AppendRules(
            log_append_time=config("message.timestamp.type") == "LogAppendTime",
            timestamp_before_max_ms=int(config("message.timestamp.before.max.ms")),
            timestamp_after_max_ms=int(config("message.timestamp.after.max.ms")),
            compacted="compact" in topic_configs.parse_list(config("cleanup.policy")),
            compression=config("compression.type"),
            max_message_bytes=int(config("max.message.bytes")),
            min_insync_replicas=int(config("min.insync.replicas")))

    def partition_for_key(self, routing_key: str) -> int:
        """The partition whose slice holds ``key_hash(routing_key)``: how native writers land in
        the same partitions Kafka consumers read."""
        h = key_hash(routing_key)
        for p, (lo, hi) in enumerate(self.slices):
            if lo <= h < hi and p not in self.retired:
                return p
        raise AssertionError(f"slices do not cover {h}")

    def pieces_of(self, partition: int) -> tuple[int, ...]:
        """The partitions the carve that retired ``partition`` made of its slice, in key order (none for a
        live one): a carve appends one partition per piece, consecutively, before any later carve cuts
        them, so they are the first later partition inside its slice and those after it up to its end."""
        if partition not in self.retired:
            return ()
        lo, hi = self.slices[partition]
        later = range(partition + 1, len(self.slices))
        first = next((q for q in later if lo <= self.slices[q][0] and self.slices[q][1] <= hi), None)
        if first is None:
            raise AssertionError(f"{self.name}: retired partition {partition} has no pieces")
        pieces: list[int] = []
        for q in range(first, len(self.slices)):
            pieces.append(q)
            if self.slices[q][1] >= hi:
                break
        return tuple(pieces)

    def view(self, count: int) -> TopicInfo:
        """A native stream's record as it stood when it had ``count`` partitions. Slices are only
        appended and a partition retires in the carve that appends its pieces, so partition p < ``count``
        was retired then exactly when its first piece is below ``count``. (A Kafka topic's slices halve
        as it grows, but none retires: its view retires none either.)"""
        if not 0 < count <= len(self.slices):
            raise ValueError(f"{self.name} has {len(self.slices)} partitions: no view at {count}")
        if count == len(self.slices):
            return self
        retired = frozenset(p for p in self.retired if p < count and self.pieces_of(p)[0] < count)
        return replace(self, slices=self.slices[:count], retired=retired)

    def encode(self) -> bytes:
        fields: dict[str, Any] = {
            "id": str(self.topic_id), "slices": self.slices, "configs": self.configs, "created": self.created_ms}
        if self.retired:
            fields["retired"] = sorted(self.retired)
        return json.dumps(fields).encode()

    @classmethod
    def decode(cls, name: str, raw: bytes) -> TopicInfo:
        d = json.loads(raw)
        return cls(name, uuid.UUID(d["id"]), tuple(tuple(s) for s in d["slices"]), d["configs"], d["created"],
                   frozenset(d.get("retired", ())))


def carve_slices(topic: TopicInfo, points: list[float]) -> TopicInfo:
    """``topic`` with every live partition whose slice holds one of ``points`` strictly inside retired
    and replaced by one new partition per piece (appended, so no partition changes its number); the
    topic itself when no point falls inside a live slice."""
    slices = list(topic.slices)
    retired = set(topic.retired)
    for p, (lo, hi) in enumerate(topic.slices):
        inside = sorted({x for x in points if lo < x < hi})
        if p in retired or not inside:
            continue
        retired.add(p)
        bounds = [lo, *inside, hi]
        slices += zip(bounds, bounds[1:], strict=False)
    if len(slices) == len(topic.slices):
        return topic
    return replace(topic, slices=tuple(slices), retired=frozenset(retired))


def split_slices(slices: tuple[tuple[float, float], ...], total: int,
                 split_from: int | None = None) -> tuple[tuple[float, float], ...]:
    """Grow to ``total`` partitions by halving the widest slice (lowest partition first on ties), or
    first the slice of ``split_from``; the upper half becomes the new partition, so no existing
    partition changes its start."""
    out = [list(s) for s in slices]
    while len(out) < total:
        if split_from is not None:
            widest, split_from = split_from, None
        else:
            widest = max(range(len(out)), key=lambda i: (out[i][1] - out[i][0], -i))
        lo, hi = out[widest]
        mid = lo + (hi - lo) / 2
        out[widest][1] = mid
        out.append([mid, hi])
    return tuple((lo, hi) for lo, hi in out)


def _validate_configs(configs: Mapping[str, str | None]) -> None:
    """Refuse, with INVALID_CONFIG and Kafka's message, an unknown config or a value of the wrong type
    or out of range (None, a deletion, is always valid)."""
    for key, value in configs.items():
        try:
            if value is None:
                if key not in DEFAULT_CONFIGS:
                    raise topic_configs.ConfigValueError(topic_configs.unknown_config_message(key))
            else:
                topic_configs.validate(key, value)
        except topic_configs.ConfigValueError as exc:
            raise TopicError(Reason.INVALID_CONFIG, str(exc)) from None


def _validate_effective(configs: Mapping[str, str]) -> None:
    try:
        topic_configs.validate_together(dict(configs))
    except topic_configs.ConfigValueError as exc:
        raise TopicError(Reason.INVALID_CONFIG, str(exc)) from None


def _initial_segments(partitions: int, configs: dict[str, str]) -> int:
    """Segments of a new topic that does not set millrace.segments.initial. A fixed topic gives each
    partition its own segment; an auto-scaled one starts small, as a Pravega stream starts at its minimum,
    and splits as load demands: at the fewest segments, at least min.segments, that divide the partitions."""
    policy = scaling_policy(configs)
    if policy.type is ScalingType.FIXED_NUM_SEGMENTS or policy.min_segments >= partitions:
        return partitions
    return next(n for n in range(max(1, policy.min_segments), partitions + 1) if partitions % n == 0)


def scaling_policy(configs: dict[str, str]) -> ScalingPolicy:
    """The stream scaling policy a topic's millrace.scaling.* configs ask for."""

    def get(key: str) -> str:
        return configs.get(key, DEFAULT_CONFIGS[key])

    return ScalingPolicy(SCALING_TYPES[get("millrace.scaling.type")], int(get("millrace.scaling.target")),
                         int(get("millrace.scaling.factor")), int(get("millrace.scaling.min.segments")))


def deletes_old_data(configs: Mapping[str, str]) -> bool:
    """Whether retention.ms / retention.bytes apply: cleanup.policy holds "delete"."""
    return "delete" in topic_configs.parse_list(configs.get("cleanup.policy", DEFAULT_CONFIGS["cleanup.policy"]))


def retention_policy(configs: dict[str, str]) -> RetentionPolicy:
    """The stream retention policy equivalent to a topic's retention configs (time wins over size,
    as the stream policy has one dimension; the Kafka layer enforces both per partition). A
    cleanup.policy without "delete" keeps everything, as in Kafka."""
    if not deletes_old_data(configs):
        return RetentionPolicy()
    ms = int(configs.get("retention.ms", "-1"))
    if ms >= 0:
        return RetentionPolicy(RetentionType.TIME, ms)
    size = int(configs.get("retention.bytes", "-1"))
    if size >= 0:
        return RetentionPolicy(RetentionType.SIZE, size)
    return RetentionPolicy()


class _Records(dict[str, TopicInfo]):
    """The registry's records by key, with the Kafka topics also by topic id (requests since Fetch v13
    and Metadata v12 name topics by id: a lookup must not walk every topic). Written only through
    ``[key] = record`` and ``del [key]``, under the registry's lock."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[uuid.UUID, TopicInfo] = {}

    def __setitem__(self, key: str, topic: TopicInfo) -> None:
        old = self.get(key)
        super().__setitem__(key, topic)
        if old is not None and self.by_id.get(old.topic_id) is old:
            del self.by_id[old.topic_id]
        if "/" not in key:  # a native stream of another scope is no Kafka topic
            self.by_id[topic.topic_id] = topic

    def __delitem__(self, key: str) -> None:
        old = self[key]
        super().__delitem__(key)
        if self.by_id.get(old.topic_id) is old:
            del self.by_id[old.topic_id]


class TopicRegistry:
    """Every topic's record, kept in a table segment and cached in memory."""

    def __init__(self, controller: Controller, tables: TableStore, scope: str) -> None:
        self.controller = controller
        self.tables = tables
        self.scope = scope
        self._lock = threading.Lock()  # one writer of topic records at a time in this process
        self._cache = _Records()
        # The topics table's (start, length) when ``refresh`` last read it: any write moves its length.
        self._refreshed_at: tuple[int, int] | None = None
        self.listeners: list[Any] = []  # called with (event, TopicInfo) after create/delete/grow/configs
        if not tables.exists(TOPICS_TABLE):
            with contextlib.suppress(SegmentExistsError):
                tables.create_table(TOPICS_TABLE)
        controller.create_scope(scope)
        for entry in tables.entries(TOPICS_TABLE):
            topic = TopicInfo.decode(entry.key.decode(), entry.value)
            self._cache[topic.name] = topic

    # -- keys ------------------------------------------------------------------------------------
    def key(self, scope: str, stream: str) -> str:
        """The record key of a stream: a Kafka topic's bare name, ``scope/stream`` in other scopes."""
        return stream if scope == self.scope else f"{scope}/{stream}"

    def stream_of(self, name: str) -> tuple[str, str]:
        """The (scope, stream) of a record key."""
        scope, sep, stream = name.partition("/")
        return (scope, stream) if sep else (self.scope, name)

    # -- reads (in memory) -----------------------------------------------------------------------
    def get(self, name: str) -> TopicInfo | None:
        """The Kafka topic ``name``: what Kafka requests may see (never a stream of another scope)."""
        return None if "/" in name else self._cache.get(name)

    def record(self, key: str) -> TopicInfo | None:
        """The record under a key: a Kafka topic's name, or ``scope/stream``."""
        return self._cache.get(key)

    def of_stream(self, scope: str, stream: str) -> TopicInfo | None:
        return self.record(self.key(scope, stream))

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._cache.by_id.get(topic_id)

    def names(self) -> list[str]:
        """The Kafka topics (native streams of other scopes are not topics)."""
        return sorted(n for n in self._cache if "/" not in n)

    def record_count(self) -> int:
        """How many records the registry holds (topics and partitioned streams of other scopes)."""
        return len(self._cache)

    def record_keys(self) -> list[str]:
        """Every record's key: the Kafka topics and the partitioned streams of other scopes."""
        return sorted(self._cache)

    def current_segments(self, name: str) -> list[SegmentRange]:
        return self.controller.get_current_segments(*self.stream_of(name))

    def segment_history(self, name: str) -> list[str]:
        """Every segment the topic's stream ever had, oldest epoch first (blocking)."""
        scope, stream = self.stream_of(name)
        return [
            segment_name(scope, stream, sid)
            for epoch in self.controller.get_epoch_history(scope, stream)
            for sid in epoch.created_ids
        ]

    def segment_of_partition(self, topic: TopicInfo, partition: int, segments: list[SegmentRange]) -> SegmentRange:
        """The open segment carrying ``partition``'s new data."""
        start = topic.slices[partition][0]
        for seg in segments:
            if seg.contains(start):
                return seg
        raise AssertionError(f"no segment holds {topic.name}-{partition}")

    # -- changes (blocking) ------------------------------------------------------------------------
    def create(self, name: str, partitions: int, configs: dict[str, str] | None = None,
               validate_only: bool = False) -> TopicInfo:
        configs = {k: v for k, v in (configs or {}).items() if v is not None}
        if not legal_topic_name(name):
            raise TopicError(Reason.INVALID_TOPIC_NAME, f"illegal topic name {name!r}")
        if is_internal_stream_name(name):
            # The topic's stream would be taken for a reader group's state or a stream's marks.
            raise TopicError(Reason.INVALID_TOPIC_NAME, f"topic name {name!r}: names starting with "
                             f"{' or '.join(INTERNAL_STREAM_PREFIXES)} are reserved for Millrace's own streams")
        if partitions < 1 or partitions > 1 << 16:
            raise TopicError(Reason.INVALID_PARTITION_COUNT, f"partition count {partitions} must be 1..65536")
        _validate_configs(configs)
        _validate_effective(configs)
        segments = int(configs.get("millrace.segments.initial", "0")) or _initial_segments(partitions, configs)
        if segments < 1 or partitions % segments:
            raise TopicError(Reason.INVALID_CONFIG,
                             f"millrace.segments.initial={segments} must divide the partition count {partitions}")
        with self._lock:
            if name in self._cache:
                raise TopicError(Reason.TOPIC_EXISTS, f"topic {name!r} already exists")
            topic = TopicInfo(name, uuid.uuid4(), tuple((p / partitions, (p + 1) / partitions)
                                                       for p in range(partitions)), configs,
                              time.time_ns() // 1_000_000)
            if validate_only:
                return topic
            # A stream of that name without a topic record is an interrupted create: adopt it.
            with contextlib.suppress(StreamExistsError):
                self.controller.create_stream(self.scope, name, StreamConfiguration(
                    initial_segments=segments, scaling=scaling_policy(configs), retention=retention_policy(configs)))
            try:
                self.tables.put(TOPICS_TABLE, [(name.encode(), topic.encode(), NOT_EXISTS)])
                made_here = True
            except TableKeyVersionMismatchError:
                made_here = False  # another cluster node made the record first: the topic exists, as it made it
            if made_here:
                self._cache[name] = topic
        if not made_here:
            self.refresh()
            raise TopicError(Reason.TOPIC_EXISTS, f"topic {name!r} already exists")
        self._notify("created", topic)
        return topic

    def adopt_stream(self, scope: str, stream: str) -> TopicInfo:
        """Blocking: the record of an existing stream outside the Kafka scope, made on first use with one
        partition per open segment (its slice that segment's key range): a stream scaled any way before
        its first writer takes events. A stream whose segments already hold bytes, or carry the
        byte-stream mark, is refused."""
        name = self.key(scope, stream)
        with self._lock:
            found = self._cache.get(name)
            if found is not None:
                return found
            ranges = sorted((seg.key_start, seg.key_end) for seg in self.controller.get_current_segments(scope, stream))
            self._refuse_non_event_data(name)
            topic = TopicInfo(name, uuid.uuid4(), tuple(ranges), {}, time.time_ns() // 1_000_000)
            self.tables.put(TOPICS_TABLE, [(name.encode(), topic.encode(), NOT_EXISTS)])
            self._cache[name] = topic
            try:
                # A byte writer marks the segment and then looks for this record; looking again
                # after making it means one of the two always sees the other.
                self._refuse_non_event_data(name)
            except TopicError:
                self.tables.remove(TOPICS_TABLE, [name.encode()])
                del self._cache[name]
                raise
        self._notify("created", topic)
        return topic

    def _refuse_non_event_data(self, name: str) -> None:
        """Blocking: refuse to partition a stream whose segments hold bytes written before any event
        writer (a byte stream, or raw appends) or carry the byte-stream mark: event data and other
        data must never share a segment."""
        store = self.controller.store
        for segment in self.segment_history(name):
            if not store.exists(segment):
                continue
            info = store.get_info(segment)
            if FORMAT_ATTRIBUTE in info.attributes or LEGACY_BYTE_STREAM_ATTRIBUTE in info.attributes:
                raise TopicError(Reason.INVALID_REQUEST, f"{name} has a format of its own (a byte stream, a "
                                 "synchronizer, or Pravega's event framing from Pravega's writers): it cannot "
                                 "take Millrace's events")
            if info.length > 0:
                raise TopicError(Reason.INVALID_REQUEST,
                                 f"{name}: segment {segment} holds {info.length} bytes not written as events")

    def delete(self, name: str) -> TopicInfo:
        with self._lock:
            topic = self._cache.get(name)
            if topic is None:
                raise TopicError(Reason.UNKNOWN_TOPIC, f"unknown topic {name!r}")
            # The record goes first: a crash after it leaves a stream that a re-create adopts.
            self.tables.remove(TOPICS_TABLE, [name.encode()])
            del self._cache[name]
        self._notify("deleted", topic)
        with contextlib.suppress(StreamNotFoundError):
            self.controller.seal_stream(*self.stream_of(name))
            self.controller.delete_stream(*self.stream_of(name))
        return topic

    def delete_stream(self, scope: str, stream: str) -> None:
        """Blocking: the native DELETE_STREAM. A sealed stream's record, if event writers gave it one,
        goes before the stream (listeners drop its partitions, log starts and index segments), so a
        stream re-created under the name starts without partitions and is adopted afresh. A crash
        in between leaves a sealed stream without a record, which the next delete finishes."""
        name = self.key(scope, stream)
        if self.controller.get_stream(scope, stream).state not in (StreamState.SEALED, StreamState.DELETING):
            raise StreamNotSealedError(f"{scope}/{stream}")  # before the record goes: it still serves
        with self._lock:
            topic = self._cache.get(name)
            if topic is not None:
                self.tables.remove(TOPICS_TABLE, [name.encode()])
                del self._cache[name]
        if topic is not None:
            self._notify("deleted", topic)
        self.controller.delete_stream(scope, stream)

    def add_partitions(self, name: str, total: int, validate_only: bool = False,
                       split_from: int | None = None) -> TopicInfo:
        with self._lock:
            topic = self._cache.get(name)
            if topic is None:
                raise TopicError(Reason.UNKNOWN_TOPIC, f"unknown topic {name!r}")
            if total <= topic.partition_count:
                raise TopicError(Reason.INVALID_PARTITION_COUNT,
                                 f"topic {name!r} has {topic.partition_count} partitions; {total} is not more")
            if total > 1 << 16:
                raise TopicError(Reason.INVALID_PARTITION_COUNT, f"partition count {total} must be at most 65536")
            grown = replace(topic, slices=split_slices(topic.slices, total, split_from))
            if validate_only:
                return grown
            self.tables.put(TOPICS_TABLE, [(name.encode(), grown.encode())])
            self._cache[name] = grown
        self._notify("grown", grown)
        return grown

    def carve(self, name: str, points: list[float]) -> TopicInfo:
        """Blocking: make every point a slice boundary of the native stream ``name`` before its segments
        split there (``carve_slices``), recorded before the split so no successor ever starts inside a
        live partition; listeners hear "grown". A no-op when the points are boundaries already. The
        stored record is read and replaced conditionally on its version: two cluster nodes scaling the
        stream at once (an operator's split, the elected auto-scaler's) never lose each other's carve."""
        if "/" not in name:
            raise TopicError(Reason.INVALID_REQUEST, f"{name} is a Kafka topic: its partitions stay")
        key = name.encode()
        with self._lock:
            while True:
                (entry,) = self.tables.get(TOPICS_TABLE, [key])
                if entry is None:
                    raise TopicError(Reason.UNKNOWN_TOPIC, f"unknown stream {name!r}")
                topic = TopicInfo.decode(name, entry.value)
                carved = carve_slices(topic, points)
                if carved is not topic:
                    try:
                        self.tables.put(TOPICS_TABLE, [(key, carved.encode(), entry.version)])
                    except TableKeyVersionMismatchError:
                        continue  # another node carved it meanwhile: carve what it stored
                grown = carved.partition_count > (self._cache[name].partition_count if name in self._cache else 0)
                self._cache[name] = carved
                break
        if grown:
            self._notify("grown", carved)
        return carved

    def alter_configs(self, name: str, changes: dict[str, str | None], replace_all: bool,
                      validate_only: bool = False) -> TopicInfo:
        """Apply config changes (None deletes a key, reverting to the default). ``replace_all`` is the
        legacy AlterConfigs semantics: keys not named revert to their defaults."""
        _validate_configs(changes)
        for key in changes:
            if key in READ_ONLY_CONFIGS:
                raise TopicError(Reason.INVALID_CONFIG, f"{key} can only be set at creation")
        with self._lock:
            topic = self._cache.get(name)
            if topic is None:
                raise TopicError(Reason.UNKNOWN_TOPIC, f"unknown topic {name!r}")
            base = {k: v for k, v in topic.configs.items() if k in READ_ONLY_CONFIGS} if replace_all else dict(
                topic.configs)
            for key, value in changes.items():
                if value is None:
                    base.pop(key, None)
                else:
                    base[key] = value
            _validate_effective(base)
            updated = replace(topic, configs=base)
            if validate_only:
                return updated
            self.tables.put(TOPICS_TABLE, [(name.encode(), updated.encode())])
            self._cache[name] = updated
            stream = self.controller.get_stream(*self.stream_of(name))
            self.controller.update_stream(*self.stream_of(name), replace(
                stream.config, scaling=scaling_policy(base), retention=retention_policy(base)))
        self._notify("configs", updated)
        return updated

    def refresh(self) -> None:
        """Blocking: take the records other cluster nodes wrote (new topics are announced "created",
        ones with more partitions "grown"; other changes replace the record). A record gone from the
        table is forgotten without an event: the node that deleted it dropped the stored state. The
        table is read under the writers' lock: a read taken before this node's own create and applied
        after it dropped the new topic from the cache for a second (a CreatePartitions right after
        CreateTopics found no topic). A table whose length has not moved since the last read is not read
        again: a node refreshes every second, and reading every record each time would cost in
        proportion to the number of topics."""
        events: list[tuple[str, TopicInfo]] = []
        with self._lock:
            table = self.tables.get_info(TOPICS_TABLE)  # brings this node's index of the table up to date
            if (table.start_offset, table.length) == self._refreshed_at:
                return
            stored = {e.key.decode(): TopicInfo.decode(e.key.decode(), e.value)
                      for e in self.tables.entries(TOPICS_TABLE)}
            self._refreshed_at = (table.start_offset, table.length)  # later writes make the next one read
            for name in [n for n in self._cache if n not in stored]:
                del self._cache[name]
            for name, topic in stored.items():
                known = self._cache.get(name)
                if known == topic:
                    continue
                self._cache[name] = topic
                if known is None or known.topic_id != topic.topic_id:
                    events.append(("created", topic))
                elif topic.partition_count > known.partition_count:
                    events.append(("grown", topic))
        for event, topic in events:
            self._notify(event, topic)

    def _notify(self, event: str, topic: TopicInfo) -> None:
        for listener in self.listeners:
            listener(event, topic)
