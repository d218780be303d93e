"""Segment-level access to a native listener: create, append, read, seal, merge, attributes, and the
controller's stream commands with their raw JSON answers. The stream-level API (``StreamManager``,
writers) is built above this; tools and tests use it directly.

One ``Connection`` (pipelined, answered by request id); it does not reconnect, so a lost server shows
up as ``ConnectionLostError`` on every outstanding and later call.
"""

from __future__ import annotations

from concurrent.futures import Future

from millrace.client.connection import Connection, Endpoint, Reply
from millrace.client.security import ClientSecurity
from millrace.protocol import messages as m
from millrace.protocol.contracts import AttributeUpdate, ReadResult, SegmentInfo
from millrace.protocol.errors import ConnectionLostError
from millrace.protocol.messages import Header, Request, decode_reply, from_header

__all__ = ["ConnectionLostError", "SegmentClient"]


class SegmentClient:
    def __init__(self, host: str, port: int, timeout: float = 30.0, *, tls: bool = False,
                 security: ClientSecurity | None = None) -> None:
        """``tls`` and ``security`` (credentials, CA): as a ``StreamManager``'s (``client.security``)."""
        self.timeout = timeout
        self._conn = Connection(Endpoint(host, port, tls), connect_timeout=timeout, security=security)

    # -- plumbing ---------------------------------------------------------------------------------
    def request(self, request: Request, payload: bytes = b"") -> Future[Reply]:
        return self._conn.request(request, payload)

    def call(self, request: Request, payload: bytes = b"") -> Reply:
        return self.request(request, payload).result(self.timeout)

    def call_raw(self, command: int, header: Header | None, payload: bytes = b"") -> Reply:
        """A frame with any header, unchecked (how a test sends the server a malformed one)."""
        return self._conn.send_frame(command, header, payload).result(self.timeout)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> SegmentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- segment operations -------------------------------------------------------------------------
    def create_segment(self, name: str, attributes: dict[str, int] | None = None) -> None:
        self.call(m.CreateSegment(segment=name, attributes=attributes or {}))

    def append_async(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        attributes: list[AttributeUpdate] | None = None,
    ) -> Future[int]:
        """A future of the offset ``data`` landed at, once durable."""
        request = m.AppendToSegment(segment=name, expected_offset=expected_offset, attributes=tuple(attributes or ()))
        outer: Future[int] = Future()

        def done(f: Future[Reply]) -> None:
            exc = f.exception()
            if exc is not None:
                outer.set_exception(exc)
            else:
                outer.set_result(decode_reply(m.ValueReply, f.result()[0]).value)

        self.request(request, data).add_done_callback(done)
        return outer

    def append(self, name: str, data: bytes, expected_offset: int | None = None,
               attributes: list[AttributeUpdate] | None = None) -> int:
        return self.append_async(name, data, expected_offset, attributes).result(self.timeout)

    def read(self, name: str, offset: int, max_length: int = 1 << 20, wait_ms: int = 0) -> ReadResult:
        header, payload = self.call(m.ReadSegment(segment=name, offset=offset, max_length=max_length, wait_ms=wait_ms))
        reply = decode_reply(m.ReadReply, header)
        return ReadResult(reply.offset, payload, reply.end_of_segment)

    def get_info(self, name: str) -> SegmentInfo:
        return decode_reply(SegmentInfo, self.call(m.GetSegmentInfo(segment=name))[0])

    def seal(self, name: str) -> int:
        return decode_reply(m.ValueReply, self.call(m.SealSegment(segment=name))[0]).value

    def truncate(self, name: str, offset: int) -> None:
        self.call(m.TruncateSegment(segment=name, offset=offset))

    def delete(self, name: str) -> None:
        self.call(m.DeleteSegment(segment=name))

    def merge(self, target: str, source: str) -> int:
        return decode_reply(m.ValueReply, self.call(m.MergeIntoSegment(target=target, source=source))[0]).value

    def list_segments(self) -> list[str]:
        return list(decode_reply(m.SegmentsReply, self.call(m.ListSegments())[0]).segments)

    def segment_owner(self, name: str) -> Header:
        """Where ``name`` is served: ``container``, and on a cluster the owning ``node`` and its
        ``native`` HOST:PORT (both None from a single server, which serves it itself, and while the
        container has no live owner)."""
        reply = decode_reply(m.SegmentOwnerReply, self.call(m.GetSegmentOwner(segment=name))[0])
        return {"container": reply.container, "node": reply.node, "native": reply.native}

    # -- controller -------------------------------------------------------------------------------------
    def create_scope(self, scope: str) -> bool:
        return decode_reply(m.CreatedReply, self.call(m.CreateScope(scope=scope))[0]).created

    def delete_scope(self, scope: str) -> None:
        self.call(m.DeleteScope(scope=scope))

    def list_scopes(self) -> list[str]:
        return list(decode_reply(m.ScopesReply, self.call(m.ListScopes())[0]).scopes)

    def create_stream(
        self,
        scope: str,
        stream: str,
        initial_segments: int = 1,
        scaling: Header | None = None,
        retention: Header | None = None,
    ) -> Header:
        """``scaling`` and ``retention``: the policies' fields (``protocol.messages.ScalingFields``,
        ``RetentionFields``); the stream's description."""
        request = m.CreateStream(scope=scope, stream=stream, initial_segments=initial_segments,
                                 scaling=from_header(m.ScalingFields, scaling or {}),
                                 retention=from_header(m.RetentionFields, retention or {}))
        return self.call(request)[0]

    def describe_stream(self, scope: str, stream: str) -> Header:
        return self.call(m.DescribeStream(scope=scope, stream=stream))[0]

    def list_streams(self, scope: str) -> list[str]:
        return list(decode_reply(m.StreamsReply, self.call(m.ListStreams(scope=scope))[0]).streams)

    def segment_for_key(self, scope: str, stream: str, key: str) -> Header:
        return self.call(m.GetSegmentForKey(scope=scope, stream=stream, key=key))[0]

    def seal_stream(self, scope: str, stream: str) -> None:
        self.call(m.SealStream(scope=scope, stream=stream))

    def delete_stream(self, scope: str, stream: str) -> None:
        self.call(m.DeleteStream(scope=scope, stream=stream))

    def truncate_stream(self, scope: str, stream: str, cut: dict[str, int]) -> None:
        self.call(m.TruncateStream(scope=scope, stream=stream, cut=cut))

    def split_segment(self, scope: str, stream: str, segment: int | str, pieces: int = 2,
                      at: list[float] | None = None) -> Header:
        """Split an open segment (by id, number or name); returns the stream as described after."""
        return self.call(m.SplitSegment(scope=scope, stream=stream, segment=segment, pieces=pieces,
                                        at=None if at is None else tuple(at)))[0]

    def merge_segments(self, scope: str, stream: str, segments: list[int | str]) -> Header:
        return self.call(m.MergeSegments(scope=scope, stream=stream, segments=tuple(segments)))[0]
