"""The console's Twisted resources (``gateway/http/console/__init__.py`` lists the paths and answers)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from twisted.internet import defer
from twisted.web import resource, server, static

from millrace.gateway.http.console import kafka_views
from millrace.gateway.http.console.kafka_views import Browse, ConsoleNotFoundError, NotServedHereError
from millrace.gateway.http.console.stream_list import DEFAULT_ROWS
from millrace.gateway.http.reader_groups import ReaderGroupNotFoundError
from millrace.gateway.http.site import _error_status, _json, answer_later
from millrace.protocol.names import segment_number
from millrace.store.durablelog.replicated import ReplicatedDurableDataLog

if TYPE_CHECKING:
    from millrace.gateway.http.console import Console

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"


def _status(exc: BaseException | None) -> int:
    if isinstance(exc, ConsoleNotFoundError | ReaderGroupNotFoundError):
        return 404
    if isinstance(exc, NotServedHereError):
        return 503
    return _error_status(exc)


def _answer(request: server.Request, make: Callable[[], Any]) -> int:
    """Finish ``request`` with the JSON ``make`` gives (a value or a Deferred), or a JSON error."""
    request.setHeader(b"cache-control", b"no-store")  # live data: a poll must never see a cached answer
    return answer_later(request, defer.maybeDeferred(make), _status)


def _path(request: server.Request) -> list[str]:
    return [unquote(p.decode()) for p in request.postpath or () if p]


def _arg(request: server.Request, name: str) -> str | None:
    values = (request.args or {}).get(name.encode())
    return values[0].decode() if values else None


def _int_arg(request: server.Request, name: str) -> int | None:
    raw = _arg(request, name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, not {raw!r}") from None


class _ConsoleResource(resource.Resource):
    isLeaf = True

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console

    def render_GET(self, request: server.Request) -> int:  # noqa: N802 - Twisted's name
        path = _path(request)
        return _answer(request, lambda: self.get(request, path))

    def get(self, request: server.Request, path: list[str]) -> Any:
        raise NotImplementedError


class _Groups(_ConsoleResource):
    """``/api/groups[/GROUP]``."""

    def get(self, request: server.Request, path: list[str]) -> Any:
        broker = self.console.broker
        if not path:
            return kafka_views.list_groups(broker).addCallback(lambda groups: {"groups": groups})
        if len(path) == 1:
            history = self.console.history
            return kafka_views.describe_group(broker, path[0]).addCallback(
                lambda d: {**d, "lag_history": history.group_lag(path[0])})
        raise ConsoleNotFoundError(f"no resource {request.path.decode()}")


class _ReaderGroups(_ConsoleResource):
    """``/api/reader-groups[/SCOPE/GROUP]``: native reader groups, folded from their state segments on
    the controller pool (``gateway/http/reader_groups.py``)."""

    def get(self, request: server.Request, path: list[str]) -> Any:
        views, groups = self.console.views, self.console.reader_groups
        if not path:
            return views.blocking(groups.summaries, _arg(request, "scope")).addCallback(
                lambda listed: {"reader_groups": listed})
        if len(path) == 2:
            scope, group = path
            history = self.console.history
            return views.blocking(groups.describe, scope, group).addCallback(
                lambda d: {**d, "sample_seconds": history.interval,
                           "unread_history": history.reader_group_unread(scope, group)})
        raise ConsoleNotFoundError(f"no resource {request.path.decode()}")


class _Topics(_ConsoleResource):
    """``/api/topics[/TOPIC[/messages]]``."""

    def get(self, request: server.Request, path: list[str]) -> Any:
        broker = self.console.broker
        if not path:
            topics = []
            for name in sorted(broker.topics.names()):
                info = broker.topics.get(name)
                if info is not None:
                    topics.append({"topic": name, "partition_count": info.partition_count})
            return {"scope": broker.config.scope, "topics": topics}
        if len(path) == 1:
            return kafka_views.describe_topic(broker, path[0])
        if len(path) == 2 and path[1] == "messages":
            partition = _int_arg(request, "partition")
            isolation = _arg(request, "isolation") or "read_committed"
            if isolation not in ("read_committed", "read_uncommitted"):
                raise ValueError("isolation must be read_committed or read_uncommitted")
            limit = _int_arg(request, "limit")
            browse = Browse(path[0], 0 if partition is None else partition, offset=_int_arg(request, "offset"),
                            timestamp=_int_arg(request, "timestamp"), limit=50 if limit is None else limit,
                            value_format=_arg(request, "format") or "text",
                            read_committed=isolation == "read_committed")
            return kafka_views.browse(broker, browse)
        raise ConsoleNotFoundError(f"no resource {request.path.decode()}")


def heatmap(description: dict[str, Any]) -> dict[str, Any]:
    """Every segment the stream ever had as a band of the key space over time, from its epoch history:
    created by one epoch (its time and reason), sealed by a later one (None: still open)."""
    bands: dict[int, dict[str, Any]] = {}
    for epoch in description["history"]:
        for r in epoch["created"]:
            bands[r["segment_id"]] = {
                "segment_id": r["segment_id"], "name": r["name"], "number": segment_number(r["segment_id"]),
                "key_start": r["key_start"], "key_end": r["key_end"], "created_ms": epoch["created_ms"],
                "created_epoch": epoch["epoch"], "created_by": epoch["reason"],
                "sealed_ms": None, "sealed_epoch": None, "sealed_by": None}
        for sid in epoch["sealed_ids"]:
            band = bands.get(sid)
            if band is not None:
                band.update(sealed_ms=epoch["created_ms"], sealed_epoch=epoch["epoch"], sealed_by=epoch["reason"])
    epochs = [{"epoch": e["epoch"], "created_ms": e["created_ms"], "reason": e["reason"],
               "sealed_ids": e["sealed_ids"], "created_ids": e["created_ids"]} for e in description["history"]]
    return {"scope": description["scope"], "stream": description["stream"], "state": description["state"],
            "epoch": description["epoch"], "epochs": epochs,
            "segments": sorted(bands.values(), key=lambda b: (b["created_ms"], b["key_start"] or 0.0))}


class _Heatmap(_ConsoleResource):
    """``/api/heatmap/SCOPE/STREAM``."""

    def get(self, request: server.Request, path: list[str]) -> Any:
        if len(path) != 2:
            raise ConsoleNotFoundError(f"no resource {request.path.decode()}")
        scope, stream = path
        views, history = self.console.views, self.console.history

        def answer(description: dict[str, Any]) -> dict[str, Any]:
            return {**heatmap(description), "description": description,
                    "sample_seconds": history.interval, "rates": history.segment_rates(scope, stream)}

        return views.blocking(views.describe, scope, stream).addCallback(answer)


def node_cluster(console: Console) -> dict[str, Any]:
    """The embedded server's cluster: this one node, owning every container (reactor thread)."""
    config = console.broker.config
    containers = [{"id": c.container_id, "owner": config.node_id, "epoch": c.epoch, "state": c.state,
                   "log_bytes": c.log_size_bytes} for c in console.store.containers]
    return {"mode": "embedded",
            "nodes": [{"id": config.node_id, "host": config.advertised_host, "kafka_port": config.advertised_port,
                       "live": True, "containers": [c["id"] for c in containers]}],
            "containers": containers, "log_replicas": []}


def local_logs(console: Console) -> list[dict[str, Any]]:
    """The replicated durable logs of the containers running here: ensemble, epoch and fragments kept on
    fewer replicas than the write quorum (reactor thread; none on the local file log)."""
    out = []
    for c in console.store.containers:
        log = c.durable_log
        if isinstance(log, ReplicatedDurableDataLog):
            out.append({"container": c.container_id, "epoch": log.epoch, "ensemble": list(log.current_ensemble()),
                        "under_replicated_fragments": log.under_replicated_fragments(),
                        "replica_lag": log.replica_lag()})
    return out


class _Cluster(_ConsoleResource):
    """``/api/cluster``."""

    def get(self, request: server.Request, path: list[str]) -> Any:
        if path:
            raise ConsoleNotFoundError(f"no resource {request.path.decode()}")
        if self.console.cluster is None:
            return node_cluster(self.console)
        return self.console.views.blocking(self.console.cluster).addCallback(
            lambda described: {**described, "log_replicas": local_logs(self.console)})


def _storage(console: Console) -> dict[str, int]:
    """Bytes held by this node's containers: durable log not yet truncated, read cache, long-term storage."""
    store = console.store
    log_bytes = cache_bytes = 0
    for c in store.containers:
        log_bytes += c.log_size_bytes
        cache_bytes += c.read_index().total_bytes
    long_term = 0
    for name in store.list_segments():
        info = store.get_info(name)
        long_term += max(0, info.storage_length - info.start_offset)
    return {"log_bytes": log_bytes, "cache_bytes": cache_bytes, "long_term_bytes": long_term}


class _Overview(_ConsoleResource):
    """``/api/overview``."""

    def get(self, request: server.Request, path: list[str]) -> Any:
        if path:
            raise ConsoleNotFoundError(f"no resource {request.path.decode()}")
        console = self.console
        controller = console.views.controller

        def scopes() -> list[dict[str, Any]]:
            out = []
            for scope in controller.list_scopes():
                try:
                    out.append({"scope": scope, "streams": sorted(controller.list_streams(scope))})
                except LookupError:
                    continue  # deleted since it was listed
            return out

        def answer(listed: list[dict[str, Any]]) -> dict[str, Any]:
            containers = {str(c.container_id): c.state for c in console.store.containers}
            return {"scopes": listed, "kafka_scope": console.broker.config.scope,
                    "topics": len(console.broker.topics.names()), "storage": _storage(console),
                    "containers": containers, "healthy": all(s == "running" for s in containers.values()),
                    "sample_seconds": console.history.interval, "throughput": console.history.throughput(),
                    "top_streams": console.stream_list.top()}

        return console.views.blocking(scopes).addCallback(answer)


class _StreamList(_ConsoleResource):
    """``/api/stream-list``: the last sampling pass's rows, sorted and cut here (no store or controller
    call per request: ``stream_list.py``)."""

    def get(self, request: server.Request, path: list[str]) -> Any:
        if path:
            raise ConsoleNotFoundError(f"no resource {request.path.decode()}")
        order = _arg(request, "order") or "desc"
        if order not in ("asc", "desc"):
            raise ValueError(f"order must be asc or desc, not {order!r}")
        limit = _int_arg(request, "limit")
        answer = self.console.stream_list.answer(_arg(request, "sort") or "bytes_in_per_s", order == "desc",
                                                 DEFAULT_ROWS if limit is None else limit)
        return {**answer, "kafka_scope": self.console.broker.config.scope,
                "sample_seconds": self.console.history.interval}


class _Index(resource.Resource):
    """``/``: the console's page."""

    isLeaf = True

    def render_GET(self, request: server.Request) -> bytes:  # noqa: N802 - Twisted's name
        if request.postpath and any(request.postpath):
            request.setResponseCode(404)
            return _json(request, 404, {"error": f"no resource {request.path.decode()}", "type": "NotFound"})
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return (STATIC / "index.html").read_bytes()


class _StaticFiles(static.File):
    """The pages' files; a directory is neither listed nor answered by its index.html."""

    indexNames: list[str] = []

    def directoryListing(self) -> resource.Resource:  # noqa: N802 - Twisted's name
        return resource.NoResource()


def mount(console: Console, root: resource.Resource, api: resource.Resource) -> None:
    root.putChild(b"", _Index())
    files = _StaticFiles(str(STATIC))
    files.contentTypes = {**files.contentTypes, ".js": "text/javascript", ".mjs": "text/javascript"}
    root.putChild(b"static", files)
    api.putChild(b"overview", _Overview(console))
    api.putChild(b"cluster", _Cluster(console))
    api.putChild(b"groups", _Groups(console))
    api.putChild(b"reader-groups", _ReaderGroups(console))
    api.putChild(b"topics", _Topics(console))
    api.putChild(b"heatmap", _Heatmap(console))
    api.putChild(b"stream-list", _StreamList(console))
