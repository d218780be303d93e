"""Segment-level access to a native listener: create, append, read, seal, merge, attributes, and the
controller's stream commands with their raw JSON answers. The stream-level API (``StreamManager``,
writers) is built above this; tools and tests use it directly.

One ``Connection`` (pipelined, answered by request id); it does not reconnect, so a lost server shows
up as ``ConnectionLostError`` on every outstanding and later call.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from millrace.client.connection import Connection, Endpoint, Reply
from millrace.protocol.contracts import AttributeUpdate, ReadResult, SegmentInfo
from millrace.protocol.errors import ConnectionLostError
from millrace.protocol.wire import Command

__all__ = ["ConnectionLostError", "SegmentClient"]


class SegmentClient:
    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._conn = Connection(Endpoint(host, port), connect_timeout=timeout)

    # -- plumbing ---------------------------------------------------------------------------------
    def request(self, command: Command, header: dict[str, Any] | None = None, payload: bytes = b"") -> Future[Reply]:
        return self._conn.request(command, header, payload)

    def call(self, command: Command, header: dict[str, Any] | None = None, payload: bytes = b"") -> Reply:
        return self.request(command, header, payload).result(self.timeout)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> SegmentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- segment operations -------------------------------------------------------------------------
    def create_segment(self, name: str, attributes: dict[str, int] | None = None) -> None:
        self.call(Command.CREATE_SEGMENT, {"segment": name, "attributes": attributes or {}})

    def append_async(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        attributes: list[AttributeUpdate] | None = None,
    ) -> Future:
        """A future of the offset ``data`` landed at, once durable."""
        header: dict[str, Any] = {"segment": name}
        if expected_offset is not None:
            header["expected_offset"] = expected_offset
        if attributes:
            header["attributes"] = [u.to_wire() for u in attributes]
        outer: Future[int] = Future()

        def done(f: Future[Reply]) -> None:
            exc = f.exception()
            if exc is not None:
                outer.set_exception(exc)
            else:
                outer.set_result(f.result()[0]["value"])

        self.request(Command.APPEND, header, data).add_done_callback(done)
        return outer

    def append(self, name: str, data: bytes, **kwargs: Any) -> int:
        return self.append_async(name, data, **kwargs).result(self.timeout)

    def read(self, name: str, offset: int, max_length: int = 1 << 20, wait_ms: int = 0) -> ReadResult:
        header, payload = self.call(
            Command.READ, {"segment": name, "offset": offset, "max_length": max_length, "wait_ms": wait_ms}
        )
        return ReadResult(header["offset"], payload, header["end_of_segment"])

    def get_info(self, name: str) -> SegmentInfo:
        header, _ = self.call(Command.GET_INFO, {"segment": name})
        return SegmentInfo.from_wire(header)

    def seal(self, name: str) -> int:
        return self.call(Command.SEAL, {"segment": name})[0]["value"]

    def truncate(self, name: str, offset: int) -> None:
        self.call(Command.TRUNCATE, {"segment": name, "offset": offset})

    def delete(self, name: str) -> None:
        self.call(Command.DELETE, {"segment": name})

    def merge(self, target: str, source: str) -> int:
        return self.call(Command.MERGE, {"target": target, "source": source})[0]["value"]

    def list_segments(self) -> list[str]:
        return self.call(Command.LIST_SEGMENTS)[0]["segments"]

    def segment_owner(self, name: str) -> dict[str, Any]:
        """Where ``name`` is served: ``container``, and on a cluster the owning ``node`` and its
        ``native`` HOST:PORT (both None from a single server, which serves it itself, and while the
        container has no live owner)."""
        return self.call(Command.GET_SEGMENT_OWNER, {"segment": name})[0]

    # -- controller -------------------------------------------------------------------------------------
    def create_scope(self, scope: str) -> bool:
        return self.call(Command.CREATE_SCOPE, {"scope": scope})[0]["created"]

    def delete_scope(self, scope: str) -> None:
        self.call(Command.DELETE_SCOPE, {"scope": scope})

    def list_scopes(self) -> list[str]:
        return self.call(Command.LIST_SCOPES)[0]["scopes"]

    def create_stream(
        self,
        scope: str,
        stream: str,
        initial_segments: int = 1,
        scaling: dict[str, Any] | None = None,
        retention: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        header = {"scope": scope, "stream": stream, "initial_segments": initial_segments,
                  "scaling": scaling or {}, "retention": retention or {}}
        return self.call(Command.CREATE_STREAM, header)[0]

    def describe_stream(self, scope: str, stream: str) -> dict[str, Any]:
        return self.call(Command.DESCRIBE_STREAM, {"scope": scope, "stream": stream})[0]

    def list_streams(self, scope: str) -> list[str]:
        return self.call(Command.LIST_STREAMS, {"scope": scope})[0]["streams"]

    def segment_for_key(self, scope: str, stream: str, key: str) -> dict[str, Any]:
        return self.call(Command.GET_SEGMENT_FOR_KEY, {"scope": scope, "stream": stream, "key": key})[0]

    def seal_stream(self, scope: str, stream: str) -> None:
        self.call(Command.SEAL_STREAM, {"scope": scope, "stream": stream})

    def delete_stream(self, scope: str, stream: str) -> None:
        self.call(Command.DELETE_STREAM, {"scope": scope, "stream": stream})

    def truncate_stream(self, scope: str, stream: str, cut: dict[str, int]) -> None:
        self.call(Command.TRUNCATE_STREAM, {"scope": scope, "stream": stream, "cut": cut})

    def split_segment(self, scope: str, stream: str, segment: int | str, pieces: int = 2,
                      at: list[float] | None = None) -> dict[str, Any]:
        """Split an open segment (by id, number or name); returns the stream as described after."""
        header: dict[str, Any] = {"scope": scope, "stream": stream, "segment": segment, "pieces": pieces}
        if at is not None:
            header["at"] = at
        return self.call(Command.SPLIT_SEGMENT, header)[0]

    def merge_segments(self, scope: str, stream: str, segments: list[int | str]) -> dict[str, Any]:
        return self.call(Command.MERGE_SEGMENTS, {"scope": scope, "stream": stream, "segments": segments})[0]
