"""``GET /metrics``: every series the HTTP listener exports, built with ``prometheus_client`` at scrape.

``docs/metrics.md`` is the table of the series (name, type, labels, meaning); ``tests/test_metrics.py``
checks that the table and a live server's /metrics agree.

Nothing here runs on a data path. The values the store and the gateway already track (containers'
counters and gauges, byte budgets, the cache, long-term-storage backlog, log replication, committed
offsets and high watermarks) are read when scraped, by custom collectors; what must be counted as it
happens (request latencies, bytes in and out, errors) is counted in plain ints by its owner
(``gateway/shared/request_metrics.py``, ``store/latency.py``) and folded into Prometheus families here.

Threads: a scrape reads reactor-owned state (connections, partitions, groups), so ``reactor_families``
runs on the reactor; the stream series call the controller, which blocks on table reads, so
``stream_families`` runs on the HTTP site's worker pool (computed for every scrape rather than cached by
a periodic refresh: a scrape is never staler than itself, and nothing runs when nobody scrapes; the cost
is a few table reads per stream, which the table index serves from memory), and so do the reader
groups' (their state segments are read and folded, ``gateway/http/reader_groups.py``: only what was appended
since the last look). Values other threads write
(containers' stats, a replicated log's acknowledgements) are read as the single ints they are.

A series that cannot be computed in a mode is left out there rather than exported as a constant: the
replicated log's series exist only for containers on a replicated log, ZooKeeper's and ownership
changes only on a cluster node, consumer lag only for partitions whose high watermark this node serves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from millrace.gateway.kafka.classic_groups.group import GroupState
from millrace.gateway.kafka.registry import REGISTRY
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.shared.request_metrics import RequestMetrics
from millrace.protocol.wire import Command
from millrace.store.containers.container import SegmentContainer
from millrace.store.controller import Controller, SegmentRange, StreamInfo
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.durablelog.replicated import ReplicatedDurableDataLog
from millrace.store.errors import ScopeNotFoundError, SegmentNotFoundError, StreamNotFoundError
from millrace.store.latency import HistogramSnapshot

if TYPE_CHECKING:
    from collections import Counter

    from millrace.gateway.http.reader_groups import ReaderGroupViews
    from millrace.gateway.kafka.broker import Broker
    from millrace.store.containers.rates import SegmentRates
    from millrace.store.contracts import SegmentInfo

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format, as generate_latest writes it


class ContainerView(Protocol):
    """The containers running on this node (read on the reactor), and any segment's info and rates (on
    the worker pool): what ``gateway.http.NodeView`` offers."""

    @property
    def containers(self) -> Sequence[SegmentContainer]: ...

    def get_info(self, name: str) -> SegmentInfo: ...

    def segment_rates(self, name: str) -> SegmentRates: ...


class ZooKeeperSession(Protocol):
    """A kazoo client as far as /metrics reads it."""

    @property
    def state(self) -> str: ...


@dataclass
class ClusterSources:
    """What only a cluster node has: its ZooKeeper client as it is now (None before it connected) and the
    counts of container ownership changes on this node (``SegmentContainerHost.ownership_changes``)."""

    zookeeper: Callable[[], ZooKeeperSession | None]
    ownership_changes: Counter[str]


@dataclass
class MetricsSources:
    """Everything /metrics reads: the node's containers, the Kafka gateway (None: no Kafka listener),
    the native listener's request metrics (None: none), on a cluster node ``cluster``, and the native
    reader groups' view (None: not shown)."""

    store: ContainerView
    broker: Broker | None = None
    native: RequestMetrics | None = None
    cluster: ClusterSources | None = None
    reader_groups: ReaderGroupViews | None = None


class _Families:
    """A finished scrape's families, in the shape ``generate_latest`` reads (a registry's ``collect``)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def render(families: Iterable[Metric]) -> bytes:
    """Prometheus' text exposition of ``families``; one with no samples (nothing to report in this mode,
    or no labelled value yet) is left out rather than shown empty."""
    return generate_latest(_Families(f for f in families if f.samples))  # a registry: anything with collect()


def _process_registry() -> CollectorRegistry:
    """The process' own standard series (process_*, python_info): CPU, memory, open files."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


_PROCESS = _process_registry()


def _histogram(family: HistogramMetricFamily, labels: list[str], snapshot: HistogramSnapshot) -> None:
    """Add ``snapshot`` (per-bucket counts) to ``family`` as Prometheus' cumulative buckets."""
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip((*snapshot.bounds, float("inf")), snapshot.counts, strict=True):
        running += count
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
    family.add_metric(labels, buckets, snapshot.total)


# -- reactor-thread families ---------------------------------------------------------------------------

def _counter(name: str, doc: str) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=["container"])


def _gauge(name: str, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=["container"])


def container_families(containers: Sequence[SegmentContainer]) -> list[Metric]:
    """Per container: the store's counters and gauges, the cache, the byte budget, long-term-storage
    backlog, recovery, and (on a replicated log) replication health."""
    appends = _counter("millrace_container_appends_total", "Appends made durable.")
    append_bytes = _counter("millrace_container_append_bytes_total", "Bytes appended.")
    cache_reads = _counter("millrace_container_cache_reads_total",
                         "Reads served from the read cache.")
    storage_reads = _counter("millrace_container_storage_reads_total",
                           "Reads that had to go to long-term storage.")
    chunks = _counter("millrace_container_chunks_written_total",
                    "Chunks written to long-term storage.")
    flushed = _counter("millrace_container_flushed_bytes_total",
                     "Bytes flushed to long-term storage.")
    cache_bytes = _gauge("millrace_container_cache_bytes", "Bytes in the read cache.")
    cache_limit = _gauge("millrace_container_cache_limit_bytes", "The read cache's budget.")
    hit_ratio = _gauge("millrace_container_cache_hit_ratio",
                       "Reads served from the cache / all reads, since start (absent before the first read).")
    log_bytes = _gauge("millrace_container_log_bytes", "Bytes in the durable log.")
    segments = _gauge("millrace_container_segments", "Segments in the container.")
    unflushed = _gauge("millrace_container_lts_unflushed_bytes",
                       "Durable bytes not yet in long-term storage.")
    unflushed_age = _gauge("millrace_container_lts_unflushed_age_seconds",
                           "Age of the oldest durable byte not yet in long-term storage (0: none).")
    recovery = _gauge("millrace_container_recovery_seconds",
                      "How long the container's last start took to open its log and recover.")
    held = _gauge("millrace_container_budget_held_bytes",
                  "Bytes held against the container's byte budget (queued, not durable or not in LTS).")
    limit = _gauge("millrace_container_budget_limit_bytes", "The container's byte budget.")
    under = _gauge("millrace_log_under_replicated_fragments",
                   "Fragments of the container's replicated log on fewer replicas than the write quorum.")
    replica_lag = GaugeMetricFamily("millrace_log_replica_lag_entries",
                                    "Entries sent to a replica of the container's log it has not acknowledged yet.",
                                    labels=["container", "replica"])
    commits = CounterMetricFamily("millrace_log_commits_total",
                                  "Writes and fdatasyncs of the container's local durable log, by the thread that ran "
                                  "them.", labels=["container", "thread"])
    acks = HistogramMetricFamily("millrace_log_ack_latency_seconds",
                                 "From an entry's first send to its ack quorum (replicated logs).",
                                 labels=["container"])
    for c in containers:
        label = [str(c.container_id)]
        stats = c.stats
        appends.add_metric(label, stats["appends"])
        append_bytes.add_metric(label, stats["append_bytes"])
        cached, stored = stats["cache_reads"], stats["storage_reads"]
        cache_reads.add_metric(label, cached)
        storage_reads.add_metric(label, stored)
        if cached + stored:
            hit_ratio.add_metric(label, cached / (cached + stored))
        chunks.add_metric(label, c.writer.chunks_written)
        flushed.add_metric(label, c.writer.bytes_written)
        index = c.read_index()
        cache_bytes.add_metric(label, index.total_bytes)
        cache_limit.add_metric(label, index.max_bytes)
        log_bytes.add_metric(label, c.log_size_bytes)
        segments.add_metric(label, len(c.segment_names()))
        unflushed.add_metric(label, c.unflushed_bytes())
        unflushed_age.add_metric(label, c.unflushed_age())
        recovery.add_metric(label, c.recovery_seconds)
        if c.budget is not None:
            held.add_metric(label, c.budget.held())
            limit.add_metric(label, c.budget.limit)
        durable_log = c.durable_log
        if isinstance(durable_log, FileDurableDataLog):
            log_stats = durable_log.stats
            commits.add_metric([*label, "reactor"], log_stats.turn_commits)
            commits.add_metric([*label, "writer"], log_stats.writer_commits)
        if isinstance(durable_log, ReplicatedDurableDataLog):
            under.add_metric(label, durable_log.under_replicated_fragments())
            for replica, behind in durable_log.replica_lag().items():
                replica_lag.add_metric([*label, replica], behind)
            _histogram(acks, label, durable_log.ack_latency.snapshot())
    return [appends, append_bytes, cache_reads, storage_reads, chunks, flushed, cache_bytes, cache_limit,
            hit_ratio, log_bytes, segments, unflushed, unflushed_age, recovery, held, limit, commits, under,
            replica_lag, acks]


def _connection_families(protocols: Sequence[RequestMetrics]) -> list[Metric]:
    """Open connections, paused ones by why, and the bytes held against their budgets, per listener."""
    open_ = GaugeMetricFamily("millrace_connections", "Open client connections.", labels=["listener"])
    paused = GaugeMetricFamily("millrace_connections_paused",
                               "Connections not reading now, by why: budget (a byte budget is full), "
                               "memory (its next frame waits for queued.max.request.bytes), quota (throttled), "
                               "send (responses wait unsent).", labels=["listener", "reason"])
    held = GaugeMetricFamily("millrace_connection_budget_held_bytes",
                             "Bytes of unanswered requests and not-yet-durable appends the listener's "
                             "connections hold against their budgets.", labels=["listener"])
    for metrics in protocols:
        for name, listener in sorted(metrics.listeners.items()):
            reasons = {"budget": 0, "memory": 0, "quota": 0, "send": 0}
            total = 0
            for connection in listener.connections:
                why = connection.paused_by()
                if why is not None:
                    reasons[why] += 1
                total += connection.admission.budget.used
            open_.add_metric([name], len(listener.connections))
            for reason, count in reasons.items():
                paused.add_metric([name, reason], count)
            held.add_metric([name], total)
    return [open_, paused, held]


def _api_name(api_key: int) -> str:
    handler = REGISTRY.get(api_key)
    return handler.name if handler is not None else str(api_key)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _command_name(code: int) -> str:
    try:
        return Command(code).name
    except ValueError:
        return str(code)


def kafka_families(broker: Broker) -> list[Metric]:
    """The Kafka gateway's: request latency per listener and API, bytes in and out per topic, errors by
    code, the fetch memory budget, and consumer-group lag."""
    latency = HistogramMetricFamily("millrace_kafka_request_duration_seconds",
                                    "Kafka requests, from arrival to response ready to write (its _count: "
                                    "requests served).", labels=["listener", "api"])
    for name, listener in sorted(broker.requests.listeners.items()):
        for api_key, histogram in sorted(listener.latency.items()):
            _histogram(latency, [name, _api_name(api_key)], histogram.snapshot())
    traffic = broker.traffic
    bytes_in = CounterMetricFamily("millrace_kafka_topic_bytes_in_total",
                                   "Record batch bytes appended by Produce.", labels=["topic"])
    for topic, n in sorted(traffic.bytes_in.items()):
        bytes_in.add_metric([topic], n)
    bytes_out = CounterMetricFamily("millrace_kafka_topic_bytes_out_total",
                                    "Record bytes returned by Fetch.", labels=["topic"])
    for topic, n in sorted(traffic.bytes_out.items()):
        bytes_out.add_metric([topic], n)
    errors = CounterMetricFamily("millrace_kafka_errors_total",
                                 "Produce and Fetch partitions answered with an error, by API and code.",
                                 labels=["api", "error"])
    for (api_key, code), n in sorted(traffic.errors.items()):
        errors.add_metric([_api_name(api_key), _error_name(code)], n)
    fetch_memory = broker.fetch_memory
    fetch_held = GaugeMetricFamily("millrace_kafka_fetch_budget_held_bytes",
                                   "Fetch response bytes held until sent (the fetch budget's fill).",
                                   value=fetch_memory.used)
    fetch_limit = GaugeMetricFamily("millrace_kafka_fetch_budget_limit_bytes", "The fetch budget.",
                                    value=fetch_memory.limit)
    return [latency, bytes_in, bytes_out, errors, fetch_held, fetch_limit, _consumer_lag(broker)]


def _consumer_lag(broker: Broker) -> Metric:
    """Per group and partition: high watermark minus committed offset, for partitions this node serves."""
    lag = GaugeMetricFamily("millrace_kafka_consumer_group_lag",
                            "High watermark minus the group's committed offset, per partition.",
                            labels=["group", "topic", "partition"])
    groups = getattr(broker, "groups", None)
    if groups is None or not groups.loaded:
        return lag
    partitions = broker.partitions
    leadership = partitions.leadership
    terms = leadership.terms() if leadership is not None else None
    for group_id, group in sorted(groups.groups.items()):
        if group.is_(GroupState.DEAD):
            continue
        for (topic, index), committed in sorted(group.offsets.items()):
            logs = partitions.loaded(topic)
            if committed.offset < 0 or logs is None or not 0 <= index < len(logs):
                continue
            p = logs[index]
            if leadership is not None and terms is not None and (
                    p.writer is None or leadership.container_of(p.writer.name) not in terms):
                continue  # another node serves it: this copy's high watermark may be stale
            high_watermark = partitions.offsets(p).high_watermark
            lag.add_metric([group_id, topic, str(index)], max(0, high_watermark - committed.offset))
    return lag


def native_families(native: RequestMetrics) -> list[Metric]:
    """The native listener's request latency per command."""
    latency = HistogramMetricFamily("millrace_native_request_duration_seconds",
                                    "Native commands, from arrival to reply written (its _count: requests "
                                    "served).", labels=["listener", "command"])
    for name, listener in sorted(native.listeners.items()):
        for code, histogram in sorted(listener.latency.items()):
            _histogram(latency, [name, _command_name(code)], histogram.snapshot())
    return [latency]


ZOOKEEPER_STATES = ("CONNECTED", "SUSPENDED", "LOST")


def cluster_families(cluster: ClusterSources) -> list[Metric]:
    """A cluster node's: its ZooKeeper session state and container ownership changes."""
    out: list[Metric] = []
    session = cluster.zookeeper()
    if session is not None:
        state = GaugeMetricFamily("millrace_zookeeper_session_state",
                                  "1 for the state the node's ZooKeeper session is in, 0 for the others.",
                                  labels=["state"])
        now = str(session.state)
        for name in ZOOKEEPER_STATES:
            state.add_metric([name], 1 if now == name else 0)
        out.append(state)
    changes = CounterMetricFamily("millrace_container_ownership_changes_total",
                                  "Containers this node started (acquired) and stopped (released).",
                                  labels=["change"])
    for change in ("acquired", "released"):
        changes.add_metric([change], cluster.ownership_changes[change])
    out.append(changes)
    return out


def reactor_families(sources: MetricsSources) -> list[Metric]:
    """Every family read from reactor-owned state (call on the reactor)."""
    families = container_families(sources.store.containers)
    protocols = []
    if sources.broker is not None:
        families += kafka_families(sources.broker)
        protocols.append(sources.broker.requests)
    if sources.native is not None:
        families += native_families(sources.native)
        protocols.append(sources.native)
    families += _connection_families(protocols)
    if sources.cluster is not None:
        families += cluster_families(sources.cluster)
    families += _PROCESS.collect()
    return families


# -- worker-pool families ------------------------------------------------------------------------------

def live_streams(controller: Controller) -> Iterator[tuple[StreamInfo, list[SegmentRange]]]:
    """Every stream with its current segments (blocking: controller calls), skipping scopes and streams
    deleted while listed."""
    for scope in controller.list_scopes():
        try:
            streams = controller.list_streams(scope)
        except ScopeNotFoundError:
            continue  # deleted since it was listed
        for stream in streams:
            try:
                yield controller.get_stream(scope, stream), controller.get_current_segments(scope, stream)
            except StreamNotFoundError:
                continue


def stream_families(controller: Controller, store: ContainerView) -> list[Metric]:
    """The per-stream and per-segment series (blocking: controller calls)."""
    counts = GaugeMetricFamily("millrace_stream_segments", "Open segments of the stream.",
                               labels=["scope", "stream"])
    epochs = GaugeMetricFamily("millrace_stream_epoch", "The stream's current epoch (scales so far).",
                               labels=["scope", "stream"])
    seg_labels = ["scope", "stream", "segment", "window"]
    events = GaugeMetricFamily("millrace_segment_events_per_second",
                               "Durable events appended per second (moving average).", labels=seg_labels)
    nbytes = GaugeMetricFamily("millrace_segment_bytes_per_second",
                               "Durable bytes appended per second (moving average).", labels=seg_labels)
    for info, segments in live_streams(controller):
        scope, stream = info.scope, info.stream
        open_segments = 0
        for seg in segments:
            try:
                sealed = store.get_info(seg.name).sealed
                rates = store.segment_rates(seg.name)
            except SegmentNotFoundError:
                continue
            if sealed:
                continue  # a sealed stream's last segments: nothing flows, nothing to show
            open_segments += 1
            for w, ev, by in zip(rates.windows, rates.events_per_s, rates.bytes_per_s, strict=True):
                labels = [scope, stream, seg.name, f"{w:g}s"]
                events.add_metric(labels, ev)
                nbytes.add_metric(labels, by)
        counts.add_metric([scope, stream], open_segments)
        epochs.add_metric([scope, stream], info.current_epoch)
    return [counts, epochs, events, nbytes]


def reader_group_families(groups: ReaderGroupViews) -> list[Metric]:
    """Each native reader group's unread bytes per stream it reads (blocking: segment reads, controller
    calls)."""
    unread = GaugeMetricFamily("millrace_reader_group_unread_bytes",
                               "Bytes of the stream the reader group has not read past yet (from its readers' "
                               "recorded positions; successors not reached yet count whole).",
                               labels=["scope", "group", "stream"])
    for scope, group, stream, n in groups.unread_by_stream():
        unread.add_metric([scope, group, stream], n)
    return [unread]


def worker_families(controller: Controller, sources: MetricsSources) -> list[Metric]:
    """Every family that needs blocking calls (call on a worker pool)."""
    families = stream_families(controller, sources.store)
    if sources.reader_groups is not None:
        try:
            families += reader_group_families(sources.reader_groups)
        except Exception as exc:  # noqa: BLE001 - the stream series still help; say why these are missing
            log.warning("reader group metrics unavailable: %s", exc)
    return families
