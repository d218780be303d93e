"""The web console and its JSON API, on the HTTP listener beside ``gateway/http/site.py``'s resources.

Pages (``static/``): ``GET /`` is the console (plain JS modules and the vendored Apache ECharts, see
``static/vendor/README.md``); ``GET /static/...`` its files. The pages only read the JSON API below and
the existing ``/api/streams`` resources (split and merge are ``POST /api/streams/SCOPE/STREAM/split|merge``).

JSON API (every answer ``application/json``; errors as gateway/http/site.py answers them, 404 for unknown
names, 400 for malformed queries, 503 when this node cannot answer now: on a cluster, the groups are
answered by the node coordinating them and a partition's records by the node leading it, and the others
answer 503 naming that node and its HTTP address):

- ``GET /api/overview``: throughput in/out over time (sampled), scopes with their streams, topics,
  storage used (durable log, cache, long-term), container health, and the busiest streams
  (``top_streams``: the stream list's rows, ``stream_list.TOP_STREAMS`` of them by bytes in).
- ``GET /api/stream-list[?sort=COLUMN][&order=asc|desc][&limit=N]``: every stream (Kafka topics and
  native streams) and key-value table with its kind, open segments, size, rates in and out and retention, as the last
  sampling pass measured them (``stream_list.py`` says what each figure is and its bounds); sorted by
  ``COLUMN`` (``stream_list.SORT_KEYS``, bytes in by default, descending) and cut to ``N`` rows (500 by
  default, at most ``stream_list.MAX_ROWS_ANSWERED``); ``total`` counts every stream.
- ``GET /api/cluster``: nodes, containers with owner, epoch and state, log replicas where known.
- ``GET /api/groups``: Kafka consumer groups with state, type, members and total lag.
- ``GET /api/groups/GROUP``: members with assignments, per partition the committed offset, log start,
  high watermark and lag, and the group's total lag over time (``lag_history``).
- ``GET /api/reader-groups[?scope=SCOPE]``: native reader groups (``gateway/http/reader_groups.py``) with
  their streams, online readers and unread bytes.
- ``GET /api/reader-groups/SCOPE/GROUP``: the group's readers with their segments and positions, every
  segment left to read with its unread bytes (successors not reached yet count whole), totals per
  stream and in all, checkpoints, and the unread bytes over time (``unread_history``).
- ``GET /api/topics``: topic names and partition counts; ``GET /api/topics/TOPIC``: partitions with
  their offsets, and the topic's configs.
- ``GET /api/topics/TOPIC/messages?partition=P[&offset=O|&timestamp=MS][&limit=N][&format=text|json|
  hex|base64][&isolation=read_committed|read_uncommitted]``: records (key, value, headers, timestamp,
  offset), read_committed unless asked otherwise, at most ``kafka_views.MAX_MESSAGES``; without an
  offset or timestamp, the newest ``limit``.
- ``GET /api/heatmap/SCOPE/STREAM``: the stream's segments over time for the heat map: each segment's
  key range, when it was created and sealed and by which epoch's reason, the epochs, and the sampled
  rates of its open segments (``history.ConsoleHistory``).

The "over time" figures (throughput, lag, unread bytes, rates) and the stream list are ``history.ConsoleHistory``'s samples:
taken on a timer from ``Console.start``, a fixed number kept, saved under the data dir and loaded again
at the next start.

Access: ``gateway/http/site.py``'s ``endpoint_permission`` names what each path needs (DESCRIBE on the
group, topic or stream; READ on the topic for its records, as a Kafka Fetch needs).

Threads: the resources answer on the reactor thread, which owns the group coordinator and partition
logs they read; controller calls and reader groups' state reads run on the controller pool
(``StreamViews.blocking``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twisted.web import resource

from millrace.gateway.http.reader_groups import ReaderGroupViews

if TYPE_CHECKING:
    from millrace.gateway.http.console.history import ConsoleHistory
    from millrace.gateway.http.console.stream_list import StreamList
    from millrace.gateway.http.site import NodeView, StreamViews
    from millrace.gateway.kafka.broker import Broker

HISTORY_DIR = "console"  # under the data dir: the history's files


@dataclass
class Console:
    """What the console reads: the node's store view, the stream views (controller and pool), the Kafka
    broker (groups, topics, partitions), ``cluster``: a blocking call describing the cluster's nodes,
    containers and log replicas (None: the embedded server, one node), and ``data_dir``: where its
    history is saved (None: in memory only). ``reader_groups`` (the native reader groups' view) is
    shared with ``/metrics``."""

    store: NodeView
    views: StreamViews
    broker: Broker
    cluster: Callable[[], dict[str, Any]] | None = None
    data_dir: str | None = None
    history: ConsoleHistory = field(init=False)
    reader_groups: ReaderGroupViews = field(init=False)
    stream_list: StreamList = field(init=False)

    def __post_init__(self) -> None:
        from millrace.gateway.http.console.history import ConsoleHistory
        from millrace.gateway.http.console.kafka_views import total_lags
        from millrace.gateway.http.console.stream_list import StreamList

        self.reader_groups = ReaderGroupViews(self.views.controller)
        self.stream_list = StreamList(self.broker.topics, self.broker.config.scope)
        directory = None if self.data_dir is None else os.path.join(self.data_dir, HISTORY_DIR)
        self.history = ConsoleHistory(self.views, self.store, lambda: total_lags(self.broker), self.reader_groups,
                                      directory, stream_list=self.stream_list)

    def start(self) -> None:
        """Load the saved history and start sampling (on the reactor thread, before or as it runs)."""
        self.history.start()

    def mount(self, root: resource.Resource, api: resource.Resource) -> None:
        """Add the pages to the site's ``root`` and the JSON resources to its ``/api``."""
        from millrace.gateway.http.console.resources import mount

        mount(self, root, api)
