"""Segment operations on a cluster node: each goes to the node that owns the segment's container.

As Pravega's segment-store clients do, a node never assumes it holds a segment: the segment's
container (``segment_store.container_index``, the same hash on every node) names an owner in
ZooKeeper (``containers/<id>``: node and incarnation), the owner's ``nodes/<id>`` znode gives its
native listener, and the operation runs there. Two views:

- ``LocalSegments``: this node's containers only (``SegmentContainerHost``), ``ContainerOfflineError``
  for any other. A node's native listener serves this view to its peers, so a forwarded request is
  never forwarded again (no loops, and a stale owner answers CONTAINER_OFFLINE instead of guessing).
- ``ClusterSegmentStore``: the ``SegmentService`` the controller, table store and gateways use on a
  cluster node. Local containers are called directly; others over a ``NodeConnection`` per peer.

Retry rule: an attempt that provably did not run (the owner answered CONTAINER_OFFLINE, the owner's
node is not live, the connection was refused or closed before the request went out, or the local host
does not run the container yet) forgets the cached owner, looks it up again and retries, backing off,
until ``retry_bound`` seconds have passed since the call, or at once while this node is cut off from
ZooKeeper past its session timeout (it can find no owner); then ``ContainerOfflineError``. An attempt
whose request was sent and whose connection then died may have run: reads and other queries retry,
mutations fail with ``ConnectionLostError`` (outcome unknown), as a native client's would. Every
other answer is the owner's, returned as the same typed exception a local call raises.

Threads: the first attempt runs on the caller's thread when that cannot block (the owner is cached and
is this node or has a connection open); otherwise, and for retries after their back-off, on this
router's retry pool (an owner lookup is a ZooKeeper read, bounded, and refused at once while this node
is disconnected from ZooKeeper: kazoo would hold it until the link is back). First attempts waiting for
one container's owner are made in arrival order. Results are ``StoreFuture``s either way.
"""

from __future__ import annotations

import contextvars
import logging
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from millrace.protocol import messages as m
from millrace.protocol.contracts import AttributeUpdate, ReadResult, SegmentInfo
from millrace.protocol.errors import ConnectionLostError, ContainerOfflineError, SegmentNotFoundError
from millrace.protocol.messages import decode_reply
from millrace.store.budget import current_admission
from millrace.store.cluster.connection import Answer, NodeConnection, NotSentError
from millrace.store.cluster.containers import SegmentContainerHost
from millrace.store.cluster.layout import ClusterPaths, NodeInfo, decode_assignment
from millrace.store.containers.container import SegmentContainer
from millrace.store.containers.rates import RateConfig, SegmentRates
from millrace.store.futures import StoreFuture, mapped, settled
from millrace.store.scheduler import Scheduler
from millrace.store.segment_store import container_index

log = logging.getLogger(__name__)

T = TypeVar("T")
U = TypeVar("U")

DEFAULT_RETRY_BOUND = 30.0  # a SIGKILLed owner's containers move after its session timeout (default 10 s)
_FIRST_BACKOFF, _MAX_BACKOFF = 0.05, 1.0
_LOOKUP_TIMEOUT = 2.0  # one ZooKeeper read for an owner; a slower one counts as failed (retried)


def _charged(fut: StoreFuture[T], size: int) -> StoreFuture[T]:
    """Hold ``size`` bytes of the dispatching connection's budget (``store.budget.charging``) until
    ``fut`` completes, as ``SegmentStore.append`` does, so forwarded appends slow their writer too."""
    admission = current_admission()
    if admission is not None:
        admission.budget.acquire(size)
        fut.add_done_callback(lambda _: admission.budget.release(size))
    return fut


def _gathered(futs: list[StoreFuture[T]], fn: Callable[[list[T]], U]) -> StoreFuture[U]:
    """``fn`` of every result once all are in; the first failure otherwise."""
    out: StoreFuture[U] = StoreFuture()
    remaining = [len(futs)]
    lock = threading.Lock()

    def done(f: StoreFuture[T]) -> None:
        exc = f.exception()
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
            if out.done():
                return
            if exc is not None:
                out.set_exception(exc)
                return
        if last:
            try:
                out.set_result(fn([g.result() for g in futs]))
            except Exception as error:  # noqa: BLE001 - a malformed answer fails this call only
                out.set_exception(error)

    if not futs:
        out.set_result(fn([]))
    for fut in futs:
        fut.add_done_callback(done)
    return out


class LocalSegments:
    """The ``SegmentService`` of the containers this node runs (in memory, as a ``SegmentStore``'s);
    ``ContainerOfflineError`` for segments of any other container."""

    def __init__(self, host: SegmentContainerHost, container_count: int) -> None:
        self.host = host
        self.container_count = container_count

    def container_id_of(self, name: str) -> int:
        return container_index(name, self.container_count)

    def container_for(self, name: str) -> SegmentContainer:
        return self.host.container(self.container_id_of(name))

    def create_segment(self, name: str, attributes: dict[str, int] | None = None) -> StoreFuture[None]:
        return self.container_for(name).create_segment(name, attributes or {})

    def append(self, name: str, data: bytes, expected_offset: int | None = None,
               attributes: Sequence[AttributeUpdate] = (), events: int = 1) -> StoreFuture[int]:
        return _charged(self.container_for(name).append(name, data, expected_offset, attributes, events), len(data))

    def read(self, name: str, offset: int, max_length: int, wait_timeout: float = 0.0) -> StoreFuture[ReadResult]:
        return self.container_for(name).read(name, offset, max_length, wait_timeout)

    def get_info(self, name: str) -> SegmentInfo:
        return self.container_for(name).get_info(name)

    def get_info_future(self, name: str) -> StoreFuture[SegmentInfo]:
        return settled(lambda: self.get_info(name))

    def segment_rates(self, name: str) -> SegmentRates:
        return self.container_for(name).segment_rates(name)

    def segment_rates_future(self, name: str) -> StoreFuture[SegmentRates]:
        return settled(lambda: self.segment_rates(name))

    @property
    def rate_config(self) -> RateConfig:
        return self.host.rates

    def exists(self, name: str) -> bool:
        return self.container_for(name).exists(name)

    def seal(self, name: str) -> StoreFuture[int]:
        return self.container_for(name).seal(name)

    def merge(self, target: str, source: str) -> StoreFuture[int]:
        return self.container_for(target).merge(target, source)

    def truncate(self, name: str, offset: int) -> StoreFuture[None]:
        return self.container_for(name).truncate(name, offset)

    def delete(self, name: str) -> StoreFuture[None]:
        return self.container_for(name).delete(name)

    def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> StoreFuture[None]:
        return self.container_for(name).update_attributes(name, updates)

    def list_segments(self) -> list[str]:
        """The segments of the containers running here (a peer's ``ClusterSegmentStore`` unions them)."""
        names: list[str] = []
        for container_id in self.host.terms():
            try:
                names.extend(self.host.container(container_id).segment_names())
            except ContainerOfflineError:
                continue  # stopped since terms() was read: its next owner lists it
        return sorted(names)

    def list_segments_future(self) -> StoreFuture[list[str]]:
        return settled(self.list_segments)


@dataclass(frozen=True)
class Owner:
    """A container's live owner: a node id and where its native listener is."""

    node_id: str
    host: str
    port: int


def native_address(info: NodeInfo) -> tuple[str, int] | None:
    """Where peers reach a node's ``LocalSegments``: its ``peer`` listener (``millrace serve
    --zookeeper`` has one apart from the clients' native listener, whose segment commands route), else
    a ``native`` listener serving only local segments; the advertised address, else bind host + port."""
    for listener in ("peer", "native"):
        advertised = info.advertised.get(listener)
        if advertised:
            host, _, port = advertised.rpartition(":")
            return host, int(port)
        port_number = info.ports.get(listener)
        if port_number is not None:
            return info.host, port_number
    return None


class _Retry(Exception):
    """An attempt that did not run: look the owner up again and retry."""


class _Call:
    """One routed operation: its attempts until an answer or ``deadline``."""

    def __init__(self, router: ClusterSegmentStore, container_id: int,
                 local: Callable[[LocalSegments], StoreFuture[Any]],
                 remote: Callable[[NodeConnection], StoreFuture[Any]], idempotent: bool) -> None:
        self.router = router
        self.container_id = container_id
        self.local = local
        self.remote = remote
        self.idempotent = idempotent
        self.deadline = time.monotonic() + router.retry_bound
        self.backoff = _FIRST_BACKOFF
        self.result: StoreFuture[Any] = StoreFuture()
        self.last_reason = "no attempt"

    def attempt(self) -> None:
        try:
            fut = self._start()
        except _Retry as why:
            self._again(str(why))
            return
        except BaseException as exc:  # noqa: BLE001 - the operation's own failure is the caller's answer
            self.result.set_exception(exc)
            return
        fut.add_done_callback(self._answered)

    def _start(self) -> StoreFuture[Any]:
        owner = self.router.owner_of(self.container_id)
        if owner is None:
            raise _Retry(f"container {self.container_id} has no live owner")
        if owner.node_id == self.router.node_id:
            try:
                return self.local(self.router.local)
            except ContainerOfflineError as exc:  # assigned here but not started yet, or just stopped
                raise _Retry(str(exc)) from exc
        try:
            return self.remote(self.router.connection_to(owner))
        except NotSentError as exc:
            self.router.drop_connection(owner, exc)
            raise _Retry(str(exc)) from exc

    def _answered(self, fut: StoreFuture[Any]) -> None:
        exc = fut.exception()
        if exc is None:
            self.result.set_result(fut.result())
        elif isinstance(exc, ContainerOfflineError) or (isinstance(exc, ConnectionLostError) and self.idempotent):
            self._again(str(exc))  # did not run (or, a query, may run again harmlessly)
        else:
            self.result.set_exception(exc)

    def _again(self, reason: str) -> None:
        self.last_reason = reason
        self.router.forget_owner(self.container_id)
        if self.router.cut_off():
            # Partitioned from ZooKeeper past the session timeout: no owner can be found before the link
            # heals, and a client told now goes to the other nodes (it did not run: safe to fail).
            self.result.set_exception(ContainerOfflineError(
                f"container {self.container_id}: this node is cut off from ZooKeeper ({reason})"))
            return
        delay = min(self.backoff, self.deadline - time.monotonic())
        if delay <= 0:
            self.result.set_exception(ContainerOfflineError(
                f"container {self.container_id}: no owner answered within {self.router.retry_bound:g} s "
                f"({reason})"))
            return
        self.backoff = min(self.backoff * 2, _MAX_BACKOFF)
        self.router.later(delay, self)


def _stopped(call: _Call) -> ContainerOfflineError:
    return ContainerOfflineError(f"this node is stopping: container {call.container_id} has no owner it can "
                                 f"reach ({call.last_reason})")


class ClusterSegmentStore:
    """The ``SegmentService`` of a cluster node: each operation runs on its container's owner.

    ``client`` is the node's ZooKeeper session, ``node_id`` this node's id (its own containers are
    served from ``local`` without a network hop). ``retry_bound``: how long an operation may wait for
    its container to get a live owner (see the module docstring); ``cut_off`` (``ClusterMember.cut_off``)
    says when waiting is pointless: calls that need an owner fail at once while it is true; ``peer_tls``
    (``peer_tls.PeerTls.client_context``): how the other nodes' peer listeners are dialled on a secured
    cluster (mutual TLS), None for plain TCP."""

    def __init__(self, client: KazooClient, paths: ClusterPaths, node_id: str, local: LocalSegments,
                 retry_bound: float = DEFAULT_RETRY_BOUND, cut_off: Callable[[], bool] = lambda: False,
                 peer_tls: ssl.SSLContext | None = None) -> None:
        self.client = client
        self.peer_tls = peer_tls
        self.cut_off = cut_off
        self.paths = paths
        self.node_id = node_id
        self.local = local
        self.container_count = local.container_count
        self.retry_bound = retry_bound
        self._lock = threading.Lock()
        self._owners: dict[int, Owner] = {}
        self._connections: dict[str, NodeConnection] = {}
        self._closed = False
        self._stopping = False  # set by stop_waiting(): no call waits for an owner any more
        self._waiting: set[_Call] = set()  # calls between a failed attempt and their retry
        # Containers whose owner is being looked up for a first attempt: the calls waiting for it, in
        # arrival order (made in that order once it is known, so appends to a segment stay in order).
        self._pending: dict[int, list[tuple[_Call, contextvars.Context]]] = {}
        self._scheduler = Scheduler("cluster-routing-timer")
        # Retries look owners up in ZooKeeper and connect: blocking work kept off the timer thread.
        self._retries = ThreadPoolExecutor(2, "cluster-routing-retry")
        client.ensure_path(paths.nodes)
        client.ChildrenWatch(paths.nodes, self._nodes_changed)

    def _nodes_changed(self, children: list[str]) -> bool | None:
        """ZooKeeper watch (kazoo's thread): a node whose session ended may be paused, not dead, and
        then its connection keeps every request sent to it waiting forever. So connections to nodes
        no longer live are closed (their requests fail: queries retry at the container's next owner,
        mutations report an unknown outcome) and owners on them are forgotten. False stops the watch."""
        live = set(children)
        with self._lock:
            if self._closed:
                return False
            gone = [key for key in self._connections if key.split("@", 1)[0] not in live]
            connections = [self._connections.pop(key) for key in gone]
            self._owners = {cid: owner for cid, owner in self._owners.items() if owner.node_id in live}
            for conn in connections:
                log.info("node of %s left the cluster: closing the connection to it", conn.address)
                # close() joins the reader thread: not on kazoo's event thread.
                self._retries.submit(conn.close)
        return None

    # -- owners and connections -------------------------------------------------------------------
    def owner_of(self, container_id: int) -> Owner | None:
        """The container's live owner (cached until an attempt at it fails), or None."""
        with self._lock:
            cached = self._owners.get(container_id)
        if cached is not None:
            return cached
        owner = self._look_up(container_id)
        if owner is not None:
            with self._lock:
                self._owners[container_id] = owner
        return owner

    def _look_up(self, container_id: int) -> Owner | None:
        """Ask ZooKeeper, never waiting long: while this node is cut off from it (a partition, ZooKeeper
        down) kazoo holds a request until the connection is back, which would hold the calling thread
        just as long; None then, and the call retries until its bound."""
        if not self.client.connected:
            log.info("owner of container %d: not connected to ZooKeeper", container_id)
            return None
        try:
            data, _ = self.client.get_async(self.paths.container(container_id)).get(timeout=_LOOKUP_TIMEOUT)
            assignment = decode_assignment(data)
            if assignment.node is None:
                return None
            node_data, stat = self.client.get_async(self.paths.node(assignment.node)).get(timeout=_LOOKUP_TIMEOUT)
        except NoNodeError:
            return None  # never assigned, or its owner's session has ended
        except (KazooException, self.client.handler.timeout_exception) as exc:
            log.info("owner of container %d: ZooKeeper lookup failed: %s", container_id, exc)
            return None
        if stat.czxid != assignment.incarnation:
            return None  # the node restarted since: the owner named is dead, a new term is coming
        info = NodeInfo.decode(node_data)
        address = native_address(info)
        if address is None and info.node_id != self.node_id:
            return None  # a node with no native listener cannot serve peers
        host, port = address if address is not None else ("", 0)
        return Owner(info.node_id, host, port)

    def forget_owner(self, container_id: int) -> None:
        with self._lock:
            self._owners.pop(container_id, None)

    def connection_to(self, owner: Owner) -> NodeConnection:
        key = f"{owner.node_id}@{owner.host}:{owner.port}"
        with self._lock:
            conn = self._connections.get(key)
            if conn is not None and not conn.closed:
                return conn
        fresh = NodeConnection(owner.host, owner.port, tls=self.peer_tls)  # NotSentError if refused
        with self._lock:
            conn = self._connections.get(key)
            if conn is not None and not conn.closed:
                spare = fresh
            else:
                self._connections[key], conn, spare = fresh, fresh, None
        if spare is not None:
            spare.close()
        return conn

    def drop_connection(self, owner: Owner, reason: BaseException) -> None:
        key = f"{owner.node_id}@{owner.host}:{owner.port}"
        with self._lock:
            conn = self._connections.pop(key, None)
        if conn is not None:
            log.info("dropping connection to node %s: %s", owner.node_id, reason)
            conn.close()

    def later(self, delay: float, call: _Call) -> None:
        """Attempt ``call`` again after ``delay`` on the retry pool (refused once the node is stopping)."""
        with self._lock:
            if not self._closed and not self._stopping:
                self._waiting.add(call)
                self._scheduler.call_later(delay, lambda: self._retry(call))
                return
        call.result.set_exception(_stopped(call))

    def _retry(self, call: _Call) -> None:
        with self._lock:
            if call not in self._waiting:
                return  # failed by close() meanwhile
            self._waiting.discard(call)
            self._retries.submit(call.attempt)

    def stop_waiting(self) -> None:
        """The node is stopping: from now on a call is answered by the owner it finds at once or fails
        with ContainerOfflineError, and calls waiting to retry fail now. Otherwise a thread of this node
        waiting for a container another node just released holds this node's stop up for the retry
        bound, and when every node stops together (``cluster down``) no new owner ever comes."""
        with self._lock:
            self._stopping = True
            waiting, self._waiting = self._waiting, set()
        for call in waiting:
            call.result.set_exception(_stopped(call))

    def close(self) -> None:
        """Close connections and threads (not the local containers: the ``ClusterNode`` owns them).
        Calls waiting for a retry fail with ContainerOfflineError instead of never completing."""
        self.stop_waiting()
        with self._lock:
            self._closed = True
        self._scheduler.stop()
        self._retries.shutdown(wait=True)
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close()

    # -- routing ----------------------------------------------------------------------------------
    def _route(self, name: str, local: Callable[[LocalSegments], StoreFuture[T]],
               remote: Callable[[NodeConnection], StoreFuture[T]], idempotent: bool) -> StoreFuture[T]:
        call = _Call(self, container_index(name, self.container_count), local, remote, idempotent)
        self._first_attempt(call)
        return call.result

    def _first_attempt(self, call: _Call) -> None:
        """Make the call's first attempt here only when that cannot block: its owner is known and is this
        node or has a connection open. Otherwise (a ZooKeeper lookup, a connect) the retry pool makes it:
        callers include the reactor, which must never wait on the network. Calls waiting for the same
        container's owner are attempted in arrival order, in the caller's context (its byte budget)."""
        cid = call.container_id
        with self._lock:
            if self._closed:
                inline = True  # fails at once: later() refuses it
            elif cid in self._pending:
                self._pending[cid].append((call, contextvars.copy_context()))
                return
            else:
                owner = self._owners.get(cid)
                inline = owner is not None and (owner.node_id == self.node_id or self._open_connection(owner))
                if not inline:
                    self._pending[cid] = [(call, contextvars.copy_context())]
        if inline:
            call.attempt()
            return
        try:
            self._retries.submit(self._attempt_pending, cid)
        except RuntimeError:  # the router closed meanwhile: the attempts fail at once (later() refuses them)
            self._attempt_pending(cid)

    def _open_connection(self, owner: Owner) -> bool:
        conn = self._connections.get(f"{owner.node_id}@{owner.host}:{owner.port}")
        return conn is not None and not conn.closed

    def _attempt_pending(self, container_id: int) -> None:
        """(Retry pool) the first attempts of the calls waiting for ``container_id``'s owner, in order; the
        first one looks it up (a failed attempt retries on its own, as any)."""
        while True:
            with self._lock:
                queue = self._pending.get(container_id)
                if not queue:
                    self._pending.pop(container_id, None)
                    return
                call, context = queue.pop(0)
            context.run(call.attempt)

    # -- the SegmentService operations --------------------------------------------------------------
    def create_segment(self, name: str, attributes: dict[str, int] | None = None) -> StoreFuture[None]:
        request = m.CreateSegment(segment=name, attributes=attributes or {})
        return self._route(name, lambda s: s.create_segment(name, attributes),
                           lambda c: mapped(c.request(request), _nothing), False)

    def append(self, name: str, data: bytes, expected_offset: int | None = None,
               attributes: Sequence[AttributeUpdate] = (), events: int = 1) -> StoreFuture[int]:
        request = m.AppendToSegment(segment=name, expected_offset=expected_offset, attributes=tuple(attributes),
                                    events=events)
        return self._route(
            name, lambda s: s.append(name, data, expected_offset, attributes, events),
            lambda c: _charged(mapped(c.request(request, data), _value_int), len(data)), False)

    def read(self, name: str, offset: int, max_length: int, wait_timeout: float = 0.0) -> StoreFuture[ReadResult]:
        request = m.ReadSegment(segment=name, offset=offset, max_length=max_length, wait_ms=wait_timeout * 1000)
        return self._route(name, lambda s: s.read(name, offset, max_length, wait_timeout),
                           lambda c: mapped(c.request(request), _read_result), True)

    def get_info(self, name: str) -> SegmentInfo:
        """Blocks (up to the retry bound plus the owner's answer): call it off the reactor."""
        return self.get_info_future(name).result()

    def get_info_future(self, name: str) -> StoreFuture[SegmentInfo]:
        """``get_info`` without waiting (what a listener on the reactor calls)."""
        return self._route(name, lambda s: s.get_info_future(name),
                           lambda c: mapped(c.request(m.GetSegmentInfo(segment=name)), _segment_info),
                           True)

    def exists(self, name: str) -> bool:
        try:
            self.get_info(name)
        except SegmentNotFoundError:
            return False
        return True

    def segment_rates(self, name: str) -> SegmentRates:
        """The segment's ingest rates, measured by its container's owner. Blocks, as ``get_info``."""
        return self.segment_rates_future(name).result()

    def segment_rates_future(self, name: str) -> StoreFuture[SegmentRates]:
        """``segment_rates`` without waiting (what a listener on the reactor calls)."""
        return self._route(name, lambda s: s.segment_rates_future(name),
                           lambda c: mapped(c.request(m.GetSegmentRates(segment=name)), _segment_rates),
                           True)

    @property
    def rate_config(self) -> RateConfig:
        """The rate windows (every node is configured alike)."""
        return self.local.rate_config

    def container_id_of(self, name: str) -> int:
        return container_index(name, self.container_count)

    def seal(self, name: str) -> StoreFuture[int]:
        return self._route(name, lambda s: s.seal(name),
                           lambda c: mapped(c.request(m.SealSegment(segment=name)), _value_int), False)

    def merge(self, target: str, source: str) -> StoreFuture[int]:
        request = m.MergeIntoSegment(target=target, source=source)
        return self._route(target, lambda s: s.merge(target, source),
                           lambda c: mapped(c.request(request), _value_int), False)

    def truncate(self, name: str, offset: int) -> StoreFuture[None]:
        request = m.TruncateSegment(segment=name, offset=offset)
        return self._route(name, lambda s: s.truncate(name, offset),
                           lambda c: mapped(c.request(request), _nothing), False)

    def delete(self, name: str) -> StoreFuture[None]:
        return self._route(name, lambda s: s.delete(name),
                           lambda c: mapped(c.request(m.DeleteSegment(segment=name)), _nothing), False)

    def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> StoreFuture[None]:
        request = m.UpdateSegmentAttributes(segment=name, attributes=tuple(updates))
        return self._route(name, lambda s: s.update_attributes(name, updates),
                           lambda c: mapped(c.request(request), _nothing), False)

    def list_segments(self) -> list[str]:
        """Every segment in the cluster: each container's owner asked once (a container with no live
        owner within the bound: ContainerOfflineError). A snapshot: containers may move meanwhile."""
        return self.list_segments_future().result()

    def list_segments_future(self) -> StoreFuture[list[str]]:
        """``list_segments`` without waiting (what a listener on the reactor calls)."""
        asked: dict[str, StoreFuture[list[str]]] = {}
        for container_id in range(self.container_count):
            call = _Call(self, container_id, lambda s: s.list_segments_future(),
                         lambda c: mapped(c.request(m.ListSegments()), _segment_names), True)
            owner = self.owner_of(container_id)
            key = owner.node_id if owner is not None else f"unowned-{container_id}"
            if key not in asked:
                call.attempt()
                asked[key] = call.result
        return _gathered(list(asked.values()), lambda answers: sorted({name for names in answers for name in names}))


def _nothing(_: Answer) -> None:
    return None


def _value_int(answer: Answer) -> int:
    return decode_reply(m.ValueReply, answer[0]).value


def _read_result(answer: Answer) -> ReadResult:
    header, payload = answer
    reply = decode_reply(m.ReadReply, header)
    return ReadResult(reply.offset, payload, reply.end_of_segment)


def _segment_info(answer: Answer) -> SegmentInfo:
    return decode_reply(SegmentInfo, answer[0])


def _segment_rates(answer: Answer) -> SegmentRates:
    reply = decode_reply(m.SegmentRatesReply, answer[0])
    return SegmentRates(reply.windows, reply.events_per_s, reply.bytes_per_s, reply.age_s)


def _segment_names(answer: Answer) -> list[str]:
    return list(decode_reply(m.SegmentsReply, answer[0]).segments)
