"""The controller's commands as typed, blocking calls over a connection pool.

Every call goes to the controller endpoint (any node of a cluster answers them; event appends and
reads go to each segment's owner instead: ``owners``, ``routing.py``); on a cluster, when that node
cannot be reached, to another node the client knows (given, learned as a segment's owner, or named in
a node's HELLO). A call whose connection drops is retried
once on a fresh connection when it is idempotent or answers the same either way (reads, and creates
that report "already there"); others raise ``ConnectionLostError`` and leave the decision to the caller.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import TypeVar

from millrace.client.connection import ConnectionPool, Endpoint, Reply
from millrace.client.routing import CONNECT_PATIENCE, SegmentOwners
from millrace.client.streams import Segment, StreamConfiguration, StreamCut, StreamDescription
from millrace.protocol import messages as m
from millrace.protocol.contracts import SegmentInfo
from millrace.protocol.errors import ConnectionLostError
from millrace.protocol.messages import Request, decode_reply
from millrace.protocol.names import parse_segment_name

_Reply = TypeVar("_Reply")


class ControllerClient:
    def __init__(self, endpoint: Endpoint, pool: ConnectionPool, timeout: float = 30.0,
                 others: list[Endpoint] | None = None) -> None:
        """``others``: more nodes of the cluster, asked when ``endpoint`` cannot be reached."""
        self.endpoint = endpoint
        self.pool = pool
        self.timeout = timeout
        # Where event appends and reads go: each segment's owner (``routing.py``); these calls go here.
        self.owners = SegmentOwners(pool, endpoint, others)

    def call(self, request: Request, payload: bytes = b"", *, retry: bool = False,
             timeout: float | None = None) -> Reply:
        """One request, waited for (``timeout``: instead of the client's, e.g. for a long poll).
        ``retry``: resend once on a new connection if the first was lost."""
        wait = self.timeout if timeout is None else timeout
        try:
            return self._send(request, payload).result(wait)
        except ConnectionLostError:
            if not retry:
                raise
            return self._send(request, payload).result(wait)

    def ask(self, request: Request, reply: type[_Reply], payload: bytes = b"", *, retry: bool = False) -> _Reply:
        """``call``, its answer's header as ``reply``."""
        return decode_reply(reply, self.call(request, payload, retry=retry)[0])

    def _send(self, request: Request, payload: bytes) -> Future[Reply]:
        """Send to the endpoint; on a cluster whose other nodes the client knows, to the first of them that
        can be reached when it cannot (any node serves these calls; nothing reached the unreachable one,
        so this is safe for every request), which then becomes the endpoint, until the pool's reconnect
        timeout runs out."""
        nodes = self.owners.nodes()
        if len(nodes) < 2:
            return self.pool.request(self.endpoint, request, payload)
        deadline = time.monotonic() + self.pool.reconnect_timeout
        lost = ConnectionLostError("no node of the cluster reached")
        while True:
            for node in [self.endpoint, *(n for n in nodes if n != self.endpoint)]:
                try:
                    sent = self.pool.get(node, patience=CONNECT_PATIENCE).request(request, payload)
                except ConnectionLostError as exc:
                    lost = exc
                    continue
                self.endpoint = node
                return sent
            if time.monotonic() > deadline:
                raise lost
            time.sleep(0.5)

    def segment_info(self, segment: str) -> SegmentInfo:
        """The segment's facts (a read: resent once if the connection was lost)."""
        return self.ask(m.GetSegmentInfo(segment=segment), SegmentInfo, retry=True)

    # -- scopes ---------------------------------------------------------------------------------------
    def create_scope(self, scope: str) -> bool:
        return self.ask(m.CreateScope(scope=scope), m.CreatedReply, retry=True).created

    def delete_scope(self, scope: str) -> None:
        self.call(m.DeleteScope(scope=scope))

    def list_scopes(self) -> list[str]:
        return list(self.ask(m.ListScopes(), m.ScopesReply, retry=True).scopes)

    # -- key-value tables -------------------------------------------------------------------------------
    def create_kv_table(self, scope: str, table: str, partitions: int) -> tuple[bool, int]:
        """(created, the table's partition count)."""
        reply = self.ask(m.CreateKvTable(scope=scope, table=table, partitions=partitions), m.KvTableCreatedReply,
                         retry=True)
        return reply.created, reply.partitions

    def kv_table_partitions(self, scope: str, table: str) -> int:
        return self.ask(m.GetKvTable(scope=scope, table=table), m.KvTableReply, retry=True).partitions

    def delete_kv_table(self, scope: str, table: str) -> None:
        self.call(m.DeleteKvTable(scope=scope, table=table), retry=True)

    def list_kv_tables(self, scope: str) -> list[str]:
        return list(self.ask(m.ListKvTables(scope=scope), m.KvTablesReply, retry=True).tables)

    # -- streams --------------------------------------------------------------------------------------
    def create_stream(self, scope: str, stream: str, config: StreamConfiguration) -> StreamDescription:
        request = m.CreateStream(scope=scope, stream=stream, initial_segments=config.initial_segments,
                                 scaling=_scaling(config), retention=_retention(config), tags=tuple(config.tags) or None)
        return self._described(request)

    def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        self.call(m.UpdateStream(scope=scope, stream=stream, initial_segments=config.initial_segments,
                                 scaling=_scaling(config), retention=_retention(config), tags=tuple(config.tags) or None),
                  retry=True)

    def describe_stream(self, scope: str, stream: str) -> StreamDescription:
        return self._described(m.DescribeStream(scope=scope, stream=stream), retry=True)

    def list_streams(self, scope: str, tag: str | None = None) -> list[str]:
        return list(self.ask(m.ListStreams(scope=scope, tag=tag), m.StreamsReply, retry=True).streams)

    def segment_for_key(self, scope: str, stream: str, routing_key: str) -> Segment:
        reply = self.ask(m.GetSegmentForKey(scope=scope, stream=stream, key=routing_key), m.SegmentRangeReply,
                         retry=True)
        return Segment(reply.segment_id, reply.name, reply.key_start, reply.key_end)

    def seal_stream(self, scope: str, stream: str) -> None:
        self.call(m.SealStream(scope=scope, stream=stream), retry=True)

    def delete_stream(self, scope: str, stream: str) -> None:
        self.call(m.DeleteStream(scope=scope, stream=stream))

    def truncate_stream(self, cut: StreamCut) -> None:
        # Truncating at the same cut twice is the same as once, so a lost answer may be resent.
        self.call(m.TruncateStream(scope=cut.scope, stream=cut.stream, cut=cut.to_wire()), retry=True)

    def update_subscriber_cut(self, scope: str, stream: str, subscriber: str, cut: StreamCut | None) -> None:
        # Setting the same cut twice is the same as once, so a lost answer may be resent.
        self.call(m.UpdateSubscriberCut(scope=scope, stream=stream, subscriber=subscriber,
                                        cut=None if cut is None else cut.to_wire()), retry=True)

    def subscriber_cuts(self, scope: str, stream: str) -> dict[str, StreamCut]:
        reply = self.ask(m.ListSubscriberCuts(scope=scope, stream=stream), m.SubscriberCutsReply, retry=True)
        return {name: StreamCut(scope, stream, {parse_segment_name(seg)[2]: off for seg, off in cut.items()})
                for name, cut in reply.cuts.items()}

    def split_segment(self, scope: str, stream: str, segment: Segment, pieces: int = 2,
                      at: list[float] | None = None) -> StreamDescription:
        # By name: a bare number could be an id or a number in the current epoch.
        return self._described(m.SplitSegment(scope=scope, stream=stream, segment=segment.name, pieces=pieces,
                                              at=None if at is None else tuple(at)))

    def merge_segments(self, scope: str, stream: str, segments: list[Segment]) -> StreamDescription:
        return self._described(m.MergeSegments(scope=scope, stream=stream, segments=tuple(s.name for s in segments)))

    def _described(self, request: Request, *, retry: bool = False) -> StreamDescription:
        """``call`` for a request answered by the stream's description."""
        return StreamDescription.from_reply(self.ask(request, m.StreamDescriptionReply, retry=retry))


def _scaling(config: StreamConfiguration) -> m.ScalingFields:
    s = config.scaling
    return m.ScalingFields(type=s.type.value, target_rate=s.target_rate, scale_factor=s.scale_factor,
                           min_segments=s.min_segments)


def _retention(config: StreamConfiguration) -> m.RetentionFields:
    return m.RetentionFields(type=config.retention.type.value, value=config.retention.value)
