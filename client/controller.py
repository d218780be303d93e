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
from typing import Any

from millrace.client.connection import ConnectionPool, Endpoint, Reply
from millrace.client.routing import CONNECT_PATIENCE, SegmentOwners
from millrace.client.streams import Segment, StreamConfiguration, StreamCut, StreamDescription
from millrace.protocol.errors import ConnectionLostError
from millrace.protocol.wire import Command


class ControllerClient:
    def __init__(self, endpoint: Endpoint, pool: ConnectionPool, timeout: float = 30.0,
                 others: list[Endpoint] | None = None) -> None:
        """``others``: more nodes of the cluster, asked when ``endpoint`` cannot be reached."""
        self.endpoint = endpoint
        self.pool = pool
        self.timeout = timeout
        # Where event appends and reads go: each segment's owner (``routing.py``); these calls go here.
        self.owners = SegmentOwners(pool, endpoint, others)

    def call(self, command: Command, header: dict[str, Any] | None = None, payload: bytes = b"", *,
             retry: bool = False, timeout: float | None = None) -> Reply:
        """One request, waited for (``timeout``: instead of the client's, e.g. for a long poll).
        ``retry``: resend once on a new connection if the first was lost."""
        wait = self.timeout if timeout is None else timeout
        try:
            return self._send(command, header, payload).result(wait)
        except ConnectionLostError:
            if not retry:
                raise
            return self._send(command, header, payload).result(wait)

    def _send(self, command: Command, header: dict[str, Any] | None, payload: bytes) -> Future[Reply]:
        """Send to the endpoint; on a cluster whose other nodes the client knows, to the first of them that
        can be reached when it cannot (any node serves these calls; nothing reached the unreachable one,
        so this is safe for every request), which then becomes the endpoint, until the pool's reconnect
        timeout runs out."""
        nodes = self.owners.nodes()
        if len(nodes) < 2:
            return self.pool.request(self.endpoint, command, header, payload)
        deadline = time.monotonic() + self.pool.reconnect_timeout
        lost = ConnectionLostError("no node of the cluster reached")
        while True:
            for node in [self.endpoint, *(n for n in nodes if n != self.endpoint)]:
                try:
                    sent = self.pool.get(node, patience=CONNECT_PATIENCE).request(command, header, payload)
                except ConnectionLostError as exc:
                    lost = exc
                    continue
                self.endpoint = node
                return sent
            if time.monotonic() > deadline:
                raise lost
            time.sleep(0.5)

    # -- scopes ---------------------------------------------------------------------------------------
    def create_scope(self, scope: str) -> bool:
        return bool(self.call(Command.CREATE_SCOPE, {"scope": scope}, retry=True)[0]["created"])

    def delete_scope(self, scope: str) -> None:
        self.call(Command.DELETE_SCOPE, {"scope": scope})

    def list_scopes(self) -> list[str]:
        return list(self.call(Command.LIST_SCOPES, retry=True)[0]["scopes"])

    # -- key-value tables -------------------------------------------------------------------------------
    def create_kv_table(self, scope: str, table: str, partitions: int) -> tuple[bool, int]:
        """(created, the table's partition count)."""
        reply = self.call(Command.CREATE_KV_TABLE, {"scope": scope, "table": table, "partitions": partitions},
                          retry=True)[0]
        return bool(reply["created"]), int(reply["partitions"])

    def kv_table_partitions(self, scope: str, table: str) -> int:
        return int(self.call(Command.GET_KV_TABLE, {"scope": scope, "table": table}, retry=True)[0]["partitions"])

    def delete_kv_table(self, scope: str, table: str) -> None:
        self.call(Command.DELETE_KV_TABLE, {"scope": scope, "table": table}, retry=True)

    def list_kv_tables(self, scope: str) -> list[str]:
        return list(self.call(Command.LIST_KV_TABLES, {"scope": scope}, retry=True)[0]["tables"])

    # -- streams --------------------------------------------------------------------------------------
    def create_stream(self, scope: str, stream: str, config: StreamConfiguration) -> StreamDescription:
        header = {"scope": scope, "stream": stream, **config.to_wire()}
        return StreamDescription.from_wire(self.call(Command.CREATE_STREAM, header)[0])

    def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        self.call(Command.UPDATE_STREAM, {"scope": scope, "stream": stream, **config.to_wire()}, retry=True)

    def describe_stream(self, scope: str, stream: str) -> StreamDescription:
        reply = self.call(Command.DESCRIBE_STREAM, {"scope": scope, "stream": stream}, retry=True)
        return StreamDescription.from_wire(reply[0])

    def list_streams(self, scope: str) -> list[str]:
        return list(self.call(Command.LIST_STREAMS, {"scope": scope}, retry=True)[0]["streams"])

    def segment_for_key(self, scope: str, stream: str, routing_key: str) -> Segment:
        reply = self.call(Command.GET_SEGMENT_FOR_KEY, {"scope": scope, "stream": stream, "key": routing_key},
                          retry=True)
        return Segment.from_wire(reply[0])

    def seal_stream(self, scope: str, stream: str) -> None:
        self.call(Command.SEAL_STREAM, {"scope": scope, "stream": stream}, retry=True)

    def delete_stream(self, scope: str, stream: str) -> None:
        self.call(Command.DELETE_STREAM, {"scope": scope, "stream": stream})

    def truncate_stream(self, cut: StreamCut) -> None:
        # Truncating at the same cut twice is the same as once, so a lost answer may be resent.
        self.call(Command.TRUNCATE_STREAM, {"scope": cut.scope, "stream": cut.stream, "cut": cut.to_wire()},
                  retry=True)

    def split_segment(self, scope: str, stream: str, segment: Segment, pieces: int = 2) -> StreamDescription:
        # By name: a bare number could be an id or a number in the current epoch.
        reply = self.call(Command.SPLIT_SEGMENT,
                          {"scope": scope, "stream": stream, "segment": segment.name, "pieces": pieces})
        return StreamDescription.from_wire(reply[0])

    def merge_segments(self, scope: str, stream: str, segments: list[Segment]) -> StreamDescription:
        reply = self.call(Command.MERGE_SEGMENTS,
                          {"scope": scope, "stream": stream, "segments": [s.name for s in segments]})
        return StreamDescription.from_wire(reply[0])
