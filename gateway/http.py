"""The HTTP listener: health, Prometheus metrics and a JSON view of segments."""

from __future__ import annotations

import json

from twisted.web import resource, server

from store.segment_store import SegmentStore


class _Health(resource.Resource):
    isLeaf = True

    def __init__(self, store: SegmentStore) -> None:
        super().__init__()
        self.store = store

    def render_GET(self, request: server.Request) -> bytes:  # noqa: N802 - Twisted's name
        states = {c.container_id: c.state for c in self.store.containers}
        healthy = all(s == "running" for s in states.values())
        request.setResponseCode(200 if healthy else 503)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps({"healthy": healthy, "containers": states}).encode()


class _Metrics(resource.Resource):
    isLeaf = True

    def __init__(self, store: SegmentStore) -> None:
        super().__init__()
        self.store = store

    def render_GET(self, request: server.Request) -> bytes:  # noqa: N802 - Twisted's name
        request.setHeader(b"content-type", b"text/plain; version=0.0.4")
        lines = []
        gauges = {
            "millrace_container_appends_total": lambda c: c.stats["appends"],
            "millrace_container_append_bytes_total": lambda c: c.stats["append_bytes"],
            "millrace_container_cache_reads_total": lambda c: c.stats["cache_reads"],
            "millrace_container_storage_reads_total": lambda c: c.stats["storage_reads"],
            "millrace_container_cache_bytes": lambda c: c.read_index().total_bytes,
            "millrace_container_log_bytes": lambda c: c.log_size_bytes,
            "millrace_container_chunks_written_total": lambda c: c.writer.chunks_written,
            "millrace_container_flushed_bytes_total": lambda c: c.writer.bytes_written,
            "millrace_container_segments": lambda c: len(c.segment_names()),
        }
        for metric, value in gauges.items():
            kind = "counter" if metric.endswith("_total") else "gauge"
            lines.append(f"# TYPE {metric} {kind}")
            for c in self.store.containers:
                lines.append(f'{metric}{{container="{c.container_id}"}} {value(c)}')
        return ("\n".join(lines) + "\n").encode()


class _Segments(resource.Resource):
    isLeaf = True

    def __init__(self, store: SegmentStore) -> None:
        super().__init__()
        self.store = store

    def render_GET(self, request: server.Request) -> bytes:  # noqa: N802 - Twisted's name
        request.setHeader(b"content-type", b"application/json")
        out = []
        for name in self.store.list_segments():
            info = self.store.get_info(name)
            out.append({
                "name": name,
                "container": self.store.container_for(name).container_id,
                "start_offset": info.start_offset,
                "length": info.length,
                "storage_length": info.storage_length,
                "sealed": info.sealed,
            })
        return json.dumps({"segments": out}).encode()


def http_site(store: SegmentStore) -> server.Site:
    root = resource.Resource()
    root.putChild(b"health", _Health(store))
    root.putChild(b"metrics", _Metrics(store))
    api = resource.Resource()
    root.putChild(b"api", api)
    api.putChild(b"segments", _Segments(store))
    return server.Site(root)
