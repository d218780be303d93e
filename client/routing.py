"""Which node serves a segment: Pravega's segment selector over the controller's ``getURI``.

On a cluster a segment is served by the owner of its container, which moves when a node dies or the
containers are rebalanced. ``SegmentOwners`` keeps segment -> owner endpoint, learned with
``GET_SEGMENT_OWNER`` from any node the client can reach (the endpoint it was given first, then every
node it has learned of, as an owner or from a node's HELLO), and forgets an owner when that node answers ``WrongHostError`` or its
connection dies; the next use asks again, backing off while the container is between owners. A single
server never names a node: it serves every segment itself, so the endpoint that answered is the owner.

Event writers (``writer.py``) and segment readers (``segment_reader.py``) route through it; raw segment
commands and controller commands go to any node, which forwards them.

Threads: any thread; one lock guards the maps, and no request is made under it.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from millrace.client.connection import ConnectionPool, Endpoint, Reply
from millrace.protocol import messages as m
from millrace.protocol.errors import ConnectionLostError, StoreError
from millrace.protocol.messages import decode_reply

log = logging.getLogger(__name__)

ASK_TIMEOUT = 5.0  # one GET_SEGMENT_OWNER answer (a node paused mid-request is left for the next)
CONNECT_PATIENCE = 1.0  # one node's connect during a lookup: a dead node is skipped, not waited for
BACKOFF_FIRST, BACKOFF_MAX = 0.05, 1.0


class OwnerUnknownError(ConnectionLostError):
    """No node named a live owner of the segment (or none answered) within the lookup's bound."""


class SegmentOwners:
    """segment -> the native endpoint serving it, shared by every writer and reader of one client."""

    def __init__(self, pool: ConnectionPool, endpoint: Endpoint, others: list[Endpoint] | None = None) -> None:
        self.pool = pool
        self.endpoint = endpoint
        # Asked in this order: the given ones, then the learned ones.
        self._nodes: list[Endpoint] = [endpoint, *(e for e in others or [] if e != endpoint)]
        self._owners: dict[str, Endpoint] = {}
        self._lock = threading.Lock()
        self.cluster = False  # a node named an owner: an answer without one means "none live yet"
        self.lookups = 0  # GET_SEGMENT_OWNER answers used (tests and logs)

    def cached(self, segment: str) -> Endpoint | None:
        return self._owners.get(segment)  # a dict read is atomic

    def forget(self, segment: str, endpoint: Endpoint | None = None) -> None:
        """Drop the owner of ``segment`` (only if it is still ``endpoint``, when given)."""
        with self._lock:
            if endpoint is None or self._owners.get(segment) == endpoint:
                self._owners.pop(segment, None)

    def nodes(self) -> list[Endpoint]:
        """The nodes to ask, in order: the given ones, those learned as owners, then the rest of those
        the nodes reached named (a node's HELLO lists every live node, so one given endpoint is enough)."""
        with self._lock:
            known = list(self._nodes)
        return known + [node for node in self.pool.discovered() if node not in known]

    def _learned(self, segment: str, owner: Endpoint) -> None:
        with self._lock:
            self._owners[segment] = owner
            if owner not in self._nodes:
                self._nodes.append(owner)

    def owner(self, segment: str, bound: float) -> Endpoint:
        """The owner's endpoint, cached or asked for, backing off while no node names a live owner;
        OwnerUnknownError after ``bound`` seconds."""
        known = self._owners.get(segment)
        return known if known is not None else self.lookup(segment, bound)

    def lookup(self, segment: str, bound: float) -> Endpoint:
        """Ask the nodes in turn for the owner of ``segment`` (see ``owner``)."""
        deadline = time.monotonic() + bound
        delay = BACKOFF_FIRST
        last: BaseException | None = None
        while True:
            for node in self.nodes():
                try:
                    found = self._ask(node, [segment])[0]
                except (StoreError, FutureTimeout) as exc:  # this node is away: ask the next
                    last = exc
                    continue
                if found is not None:
                    return found
                last = None
                break  # a node answered that there is no live owner now: wait, then ask again
            left = deadline - time.monotonic()
            if left <= 0:
                raise OwnerUnknownError(f"no owner of {segment} known within {bound:g} s"
                                        + (f": {last}" if last is not None else ""))
            time.sleep(min(delay, left))
            delay = min(delay * 2, BACKOFF_MAX)

    def prefetch(self, segments: list[str]) -> None:
        """Look up the owners of ``segments`` not known yet, pipelined on the first node, without waiting
        out missing owners (a writer's first batches then go straight to their owners)."""
        missing = sorted({s for s in segments if s not in self._owners})
        if not missing:
            return
        try:
            self._ask(self.nodes()[0], missing)
        except (StoreError, FutureTimeout) as exc:
            log.info("looking up segment owners failed, to be asked again on use: %s", exc)

    def _ask(self, node: Endpoint, segments: list[str]) -> list[Endpoint | None]:
        conn = self.pool.get(node, patience=CONNECT_PATIENCE)
        pending: list[Future[Reply]] = [conn.request(m.GetSegmentOwner(segment=s)) for s in segments]
        found: list[Endpoint | None] = []
        for segment, reply in zip(segments, pending, strict=True):
            answer = decode_reply(m.SegmentOwnerReply, reply.result(ASK_TIMEOUT)[0])
            self.lookups += 1
            if answer.native:
                self.cluster = True
                owner = Endpoint.parse(answer.native, tls=node.tls)  # as the node asked: TLS or not
            elif answer.node is None and not self.cluster:
                owner = node  # a single server serves every segment
            else:
                owner = None  # a cluster container between owners
            if owner is not None:
                self._learned(segment, owner)
            found.append(owner)
        return found
