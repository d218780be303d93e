"""The console's stream list: every stream (Kafka topics and native streams, by scope) with its kind, open
segments, size, rates in and out and retention, sortable; the overview shows the busiest few.

Measured, not asked per request: ``StreamList.measure`` runs inside ``history.ConsoleHistory``'s sampling
pass on the controller pool, every ``SAMPLE_SECONDS``, sharing that pass's walk of the controller's
streams, and the reactor installs its result (``StreamList.install``). A request only sorts and cuts the
rows the last pass left (``StreamList.answer``, reactor, no controller or store call), so a console polled
by many browsers costs the server what one sampling pass costs, whatever the number of requests.

What each figure is:

- *kind*: a Kafka topic (a stream of the Kafka scope), an event stream (a native stream with a partition
  record in the topic registry: event writers partitioned it), a byte stream or a synchronizer (the
  format recorded on its segment, ``streams/segment_gate.py``), unformatted (nothing written yet: the
  first writer claims a format), or a key-value table (the controller's tables, listed beside the
  streams of their scope; their table segments stand for a stream's segments).
- *open segments*: the stream's current segments that are not sealed (0 for a sealed stream); a
  key-value table's partitions.
- *size*: the bytes its segments hold, each ``length - start_offset`` (what truncation and retention
  have not removed), sealed predecessors still held included.
- *rate in*: events/s and bytes/s appended, the store's measure (``store/containers/rates.py``), the
  shortest window, summed over the current segments.
- *rate out*: bytes/s read from the stream's segments by any reader (Kafka fetches, native reads, the
  server's own loads), from the containers' per-segment read counters (``read_bytes_by_segment``) between
  two passes; None on the first pass. Events out are not counted: the store reads bytes, not events.
- *retention*: a Kafka topic's ``cleanup.policy`` with ``retention.ms`` and ``retention.bytes`` (None:
  unlimited); a native stream's retention policy.

On a cluster, a node lists every stream, with rates in from each segment's owner, but sizes, sealed
predecessors and rates out of the segments its own containers hold (and the current segments' sizes from
their owners): ask each node's console for its own part.

Bounds: at most ``MAX_STREAMS_KEPT`` rows are kept (beyond, the busiest: by bytes in, bytes out, size),
``total`` says how many streams there are; an answer holds at most ``MAX_ROWS_ANSWERED`` rows, sorted on
the server by the asked column before the cut. The read counters kept between passes are one integer per
segment read since the last pass.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from millrace.protocol.contracts import (
    FORMAT_ATTRIBUTE,
    LEGACY_BYTE_STREAM_ATTRIBUTE,
    SegmentFormat,
    SegmentInfo,
)
from millrace.protocol.errors import KeyValueTableNotFoundError, ScopeNotFoundError
from millrace.protocol.tables import KV_TABLE_MARK
from millrace.store.controller import Controller, RetentionType, SegmentRange, StreamInfo
from millrace.store.controller.kvtables import KeyValueTables
from millrace.store.errors import SegmentNotFoundError
from millrace.streams.segment_gate import stream_of_segment
from millrace.streams.topics import deletes_old_data

if TYPE_CHECKING:
    from millrace.gateway.http.site import NodeView
    from millrace.streams.topics import TopicRegistry

MAX_STREAMS_KEPT = 10_000  # rows kept from a pass
MAX_ROWS_ANSWERED = 1_000  # rows in one answer
DEFAULT_ROWS = 500
TOP_STREAMS = 10  # the overview's busiest streams

KAFKA_TOPIC = "kafka-topic"
EVENT_STREAM = "event-stream"
BYTE_STREAM = "byte-stream"
SYNCHRONIZER = "synchronizer"
UNFORMATTED = "unformatted"
KEY_VALUE_TABLE = "key-value-table"

# (events/s, bytes/s) of each current segment, by "scope/stream" and segment id (history.StreamRates)
SegmentRatesByStream = dict[str, dict[int, tuple[float, float]]]
LiveStream = tuple[StreamInfo, list[SegmentRange]]


@dataclass(frozen=True, slots=True)
class StreamRow:
    scope: str
    stream: str
    kind: str
    state: str
    open_segments: int
    size_bytes: int
    events_in_per_s: float
    bytes_in_per_s: float
    bytes_out_per_s: float | None  # None: no earlier counters to compare with yet
    retention: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"scope": self.scope, "stream": self.stream, "kind": self.kind, "state": self.state,
                "open_segments": self.open_segments, "size_bytes": self.size_bytes,
                "events_in_per_s": self.events_in_per_s, "bytes_in_per_s": self.bytes_in_per_s,
                "bytes_out_per_s": self.bytes_out_per_s, "retention": self.retention}


def retention_key(retention: dict[str, Any]) -> tuple[float, float, str]:
    """Shortest-kept first: by time limit, then size limit (None: unlimited), then policy name. The page
    sorts by the same key (console.js)."""
    ms, size = retention.get("ms"), retention.get("bytes")
    return (float("inf") if ms is None else ms, float("inf") if size is None else size, retention["policy"])


def _by_name(row: StreamRow) -> tuple[str, str]:
    return row.scope, row.stream


SORT_KEYS: dict[str, Callable[[StreamRow], Any]] = {
    "scope": _by_name,
    "stream": lambda r: (r.stream, r.scope),
    "kind": lambda r: (r.kind, r.scope, r.stream),
    "open_segments": lambda r: r.open_segments,
    "size_bytes": lambda r: r.size_bytes,
    "events_in_per_s": lambda r: r.events_in_per_s,
    "bytes_in_per_s": lambda r: r.bytes_in_per_s,
    "bytes_out_per_s": lambda r: -1.0 if r.bytes_out_per_s is None else r.bytes_out_per_s,
    "retention": lambda r: retention_key(r.retention),
}


def busiest_first(row: StreamRow) -> tuple[float, float, int, str, str]:
    """The order the overview's top streams and the kept rows follow: bytes in, then out, then size."""
    return (-row.bytes_in_per_s, -(row.bytes_out_per_s or 0.0), -row.size_bytes, row.scope, row.stream)


def owner_of_segment(name: str) -> tuple[str, str, bool] | None:
    """(scope, stream or table, whether a key-value table) of a stream's data segment or a key-value
    table's segment (``scope/table#kvtable/partition``); None for every other name."""
    if KV_TABLE_MARK in name:
        head, _, partition = name.rpartition("/")
        scope, sep, table = head.partition("/")
        if sep and table.endswith(KV_TABLE_MARK) and partition.isdigit():
            return scope, table[: -len(KV_TABLE_MARK)], True
        return None
    stream = stream_of_segment(name)
    return None if stream is None else (*stream, False)


def _format_of(info: SegmentInfo) -> str | None:
    value = info.attributes.get(FORMAT_ATTRIBUTE)
    if value is None:
        return BYTE_STREAM if info.attributes.get(LEGACY_BYTE_STREAM_ATTRIBUTE) else None
    try:
        return {SegmentFormat.BYTES: BYTE_STREAM, SegmentFormat.SYNCHRONIZER: SYNCHRONIZER}[SegmentFormat(value)]
    except (ValueError, KeyError):
        return None


@dataclass
class _Held:
    """What this node's containers hold of one stream: its segments' infos by name."""

    segments: dict[str, SegmentInfo] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamListing:
    """One pass's result: the rows (at most ``MAX_STREAMS_KEPT``), how many streams there were, when it
    was measured, and every current segment's rate (the history keeps a bounded part of these)."""

    rows: tuple[StreamRow, ...]
    total: int
    time_ms: int
    segment_rates: SegmentRatesByStream
    rate_window_s: float | None  # the store's shortest rate window, which the rates in are over


class StreamList:
    """The last pass's rows (reactor) and the read counters between passes (the pass's thread: the
    history runs one pass at a time)."""

    def __init__(self, topics: TopicRegistry | None, kafka_scope: str) -> None:
        self.topics = topics
        self.kafka_scope = kafka_scope
        self.latest: StreamListing | None = None
        self._reads: tuple[float, dict[str, int]] | None = None  # (monotonic time, bytes read by segment)
        self._tables: KeyValueTables | None = None  # made on the pool at the first pass that lists tables
        # The last answer's order, (listing, column, descending, rows): browsers polling every 2 s a list
        # measured every 5 s mostly ask for the same order of the same rows.
        self._sorted: tuple[StreamListing, str, bool, list[StreamRow]] | None = None

    # -- the pass (controller pool) ------------------------------------------------------------------
    def measure(self, streams: Iterable[LiveStream], store: NodeView,
                controller: Controller | None = None) -> StreamListing:
        """Rows for ``streams`` (the controller's walk, ``metrics.live_streams``) and, with ``controller``,
        its key-value tables, from the store's segment infos, rates and read counters (blocking: run on
        the pool)."""
        held = self._held(store)
        out_rates = self._out_rates(store)
        rows: list[StreamRow] = []
        rates: SegmentRatesByStream = {}
        windows: list[float] = []
        for info, segments in streams:
            key = f"{info.scope}/{info.stream}"
            mine = held.pop((info.scope, info.stream), _Held())
            row, rates[key] = self._row(info, segments, mine, store, out_rates, windows)
            rows.append(row)
        if controller is not None:
            rows += self._table_rows(controller, store, out_rates)
        total = len(rows)
        if total > MAX_STREAMS_KEPT:
            rows = sorted(rows, key=busiest_first)[:MAX_STREAMS_KEPT]
        rows.sort(key=_by_name)  # here, on the pool: an answer's one sort by its column keeps ties by name
        return StreamListing(tuple(rows), total, int(time.time() * 1000), rates, windows[0] if windows else None)

    @staticmethod
    def _held(store: NodeView) -> dict[tuple[str, str], _Held]:
        """This node's stream segments by stream (in-memory infos of the local containers)."""
        held: dict[tuple[str, str], _Held] = {}
        for name in store.list_segments():
            stream = stream_of_segment(name)
            if stream is None:
                continue
            try:
                info = store.get_info(name)
            except SegmentNotFoundError:
                continue  # deleted since it was listed
            held.setdefault(stream, _Held()).segments[name] = info
        return held

    def _table_rows(self, controller: Controller, store: NodeView,
                    out_rates: dict[tuple[str, str, bool], float] | None) -> list[StreamRow]:
        """A row for each key-value table: its partitions' table segments as its segments."""
        if self._tables is None:
            self._tables = KeyValueTables(controller)
        tables = self._tables
        rows = []
        for scope in controller.list_scopes():
            try:
                names = tables.list(scope)
            except ScopeNotFoundError:
                continue  # deleted since it was listed
            for name in names:
                try:
                    table = tables.get(scope, name)
                except KeyValueTableNotFoundError:
                    continue
                size = 0
                events_in = bytes_in = 0.0
                for partition in range(table.partitions):
                    segment = table.segment(partition)
                    try:
                        info = store.get_info(segment)
                        r = store.segment_rates(segment)
                    except SegmentNotFoundError:
                        continue
                    size += max(0, info.length - info.start_offset)
                    events_in += r.events_per_s[0]
                    bytes_in += r.bytes_per_s[0]
                bytes_out = None if out_rates is None else out_rates.get((scope, name, True), 0.0)
                rows.append(StreamRow(scope, name, KEY_VALUE_TABLE, "active", table.partitions, size, events_in,
                                      bytes_in, bytes_out, {"policy": "none", "ms": None, "bytes": None}))
        return rows

    def _out_rates(self, store: NodeView) -> dict[tuple[str, str, bool], float] | None:
        """Bytes/s read from each stream's segments since the last pass (None on the first). A segment
        missing from the last pass's counters had read nothing then; a counter that went back (its
        container restarted) counts from zero."""
        now = time.monotonic()
        counters: dict[str, int] = {}
        for container in store.containers:
            counters.update(container.read_bytes_by_segment())
        previous, self._reads = self._reads, (now, counters)
        if previous is None:
            return None
        then, before = previous
        elapsed = max(now - then, 1e-3)
        out: dict[tuple[str, str, bool], float] = {}
        for name, read in counters.items():
            owner = owner_of_segment(name)
            if owner is None:
                continue
            was = before.get(name, 0)
            delta = read - was if read >= was else read
            if delta:
                out[owner] = out.get(owner, 0.0) + delta / elapsed
        return out

    def _row(self, info: StreamInfo, segments: Sequence[SegmentRange], mine: _Held, store: NodeView,
             out_rates: dict[tuple[str, str, bool], float] | None,
             windows: list[float]) -> tuple[StreamRow, dict[int, tuple[float, float]]]:
        """The stream's row and its current segments' rates; ``windows`` gets the rates' shortest window."""
        infos = dict(mine.segments)
        open_segments = 0
        events_in = bytes_in = 0.0
        rates: dict[int, tuple[float, float]] = {}
        for seg in segments:
            try:
                seg_info = infos.get(seg.name) or store.get_info(seg.name)  # another node's: from its owner
                r = store.segment_rates(seg.name)
            except SegmentNotFoundError:
                continue
            infos[seg.name] = seg_info
            rates[seg.segment_id] = (r.events_per_s[0], r.bytes_per_s[0])
            if not windows:
                windows.append(r.windows[0])
            if not seg_info.sealed:
                open_segments += 1
                events_in += r.events_per_s[0]
                bytes_in += r.bytes_per_s[0]
        size = sum(max(0, i.length - i.start_offset) for i in infos.values())
        bytes_out = None if out_rates is None else out_rates.get((info.scope, info.stream, False), 0.0)
        row = StreamRow(info.scope, info.stream, self._kind(info, infos.values()), info.state.name.lower(),
                        open_segments, size, events_in, bytes_in, bytes_out, self._retention(info))
        return row, rates

    def _kind(self, info: StreamInfo, infos: Iterable[SegmentInfo]) -> str:
        if info.scope == self.kafka_scope:
            return KAFKA_TOPIC
        if self.topics is not None and self.topics.of_stream(info.scope, info.stream) is not None:
            return EVENT_STREAM
        for seg_info in infos:
            kind = _format_of(seg_info)
            if kind is not None:
                return kind
        return UNFORMATTED

    def _retention(self, info: StreamInfo) -> dict[str, Any]:
        topic = self.topics.of_stream(info.scope, info.stream) if self.topics is not None else None
        if info.scope == self.kafka_scope and topic is not None:
            policy = topic.config("cleanup.policy")
            if not deletes_old_data(topic.configs):
                return {"policy": policy, "ms": None, "bytes": None}
            ms, size = int(topic.config("retention.ms")), int(topic.config("retention.bytes"))
            return {"policy": policy, "ms": ms if ms >= 0 else None, "bytes": size if size >= 0 else None}
        retention = info.config.retention
        if retention.type == RetentionType.TIME:
            return {"policy": "time", "ms": retention.value, "bytes": None}
        if retention.type == RetentionType.SIZE:
            return {"policy": "size", "ms": None, "bytes": retention.value}
        return {"policy": retention.type.name.lower(), "ms": None, "bytes": None}

    # -- answers (reactor) ---------------------------------------------------------------------------
    def install(self, listing: StreamListing) -> None:
        self.latest = listing

    def answer(self, sort: str = "bytes_in_per_s", descending: bool = True, limit: int = DEFAULT_ROWS) -> dict[str, Any]:
        """The last pass's rows sorted by ``sort`` (a ``SORT_KEYS`` column; ties by name), at most
        ``limit``; ValueError for an unknown column or a limit outside 1..``MAX_ROWS_ANSWERED``."""
        if sort not in SORT_KEYS:
            raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}, not {sort!r}")
        if not 1 <= limit <= MAX_ROWS_ANSWERED:
            raise ValueError(f"limit must be 1..{MAX_ROWS_ANSWERED}, not {limit}")
        listing = self.latest
        if listing is None:
            return {"time_ms": None, "total": 0, "kept": 0, "rate_window_s": None, "sort": sort,
                    "descending": descending, "streams": []}
        cached = self._sorted
        if cached is not None and cached[0] is listing and cached[1:3] == (sort, descending):
            rows = cached[3]
        else:
            # listing.rows are in name order and the sort is stable: ties stay by name, either way round
            rows = sorted(listing.rows, key=SORT_KEYS[sort], reverse=descending)
            self._sorted = (listing, sort, descending, rows)
        return {"time_ms": listing.time_ms, "total": listing.total, "kept": len(listing.rows),
                "rate_window_s": listing.rate_window_s, "sort": sort, "descending": descending,
                "streams": [r.to_json() for r in rows[:limit]]}

    def top(self, count: int = TOP_STREAMS) -> list[dict[str, Any]]:
        """The busiest ``count`` streams of the last pass (``busiest_first``)."""
        if self.latest is None:
            return []
        return [r.to_json() for r in heapq.nsmallest(count, self.latest.rows, key=busiest_first)]
