"""One segment-store node in a cluster: registers itself, takes part in the assigner election, assigns
containers while elected, and starts/stops the containers assigned to it.

Coordination runs in one thread per node as a level-triggered loop: every ZooKeeper watch and every
session state change only wakes it, and each pass re-reads what it needs and converges (register if
the session is new, campaign, assign if elected, follow the assignments). A missed or duplicated event
therefore costs one pass, never a wrong state. Starting and stopping containers (log recovery, a
clean close) can take seconds, so those transitions run on a small pool, at most one per container at
a time, and wake the loop when done: a slow container holds up neither the others nor the assigner.

Invariants:
- a node owns container c in term e only while ``containers/c`` names this node, this registration's
  incarnation and epoch e; it is told ``start_container`` once per such term and ``stop_container``
  when the term ends (reassigned, handed over, session lost, or ``close``); one container's
  transitions never overlap (its stop completes before its next start);
- a container moves away from a live node only through a handover: the assigner asks
  (``handovers/c`` for epoch e), the owner stops the container and marks the request released, and
  only then does the assigner give c to the new owner, so two live members never run it at once;
- only the elected assigner writes ``containers/``, each write a transaction that also checks its
  candidate znode, so an assigner whose session expired (its candidate deleted, a successor elected)
  can change nothing;
- when the session is lost (expired, or suspended for longer than the session timeout by this node's
  clock) every container is stopped before anything else happens; the node then registers again
  under a new incarnation and the assigner gives it containers in new terms. That is the liveness
  side; safety against a node that does not notice in time is the log's fencing (the new owner's
  ``open()`` fences the replicas, and ``OwnerGuard`` stops a stale node from taking a log epoch).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NoAuthError, NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent
from kazoo.retry import KazooRetry

from millrace.store.cluster.assignment import Assignment, balance, plan_handovers
from millrace.store.cluster.layout import (
    ClusterPaths,
    Handover,
    NodeInfo,
    candidate_sequence,
    decode_assignment,
    encode_assignment,
)
from millrace.store.cluster.log_metadata import OwnerGuard
from millrace.store.cluster.zk_auth import ZooKeeperCredentials, access_error
from millrace.store.cluster.zk_tls import ZooKeeperTls

log = logging.getLogger(__name__)

SLOW_TRANSITION_SECONDS = 60.0


class _SlowTransitionAlarm:
    """Warns, with the stack it is stuck at, each ``after`` seconds a container's start or stop runs.
    A stop that never ends holds a handover (the container is offline until it is released) and a start
    that never ends keeps the container offline; neither says so on its own."""

    def __init__(self, what: str, after: float) -> None:
        self.what = what
        self.after = after
        self.began = time.monotonic()
        self._thread_id = threading.get_ident()
        self._lock = threading.Lock()
        self._done = False
        self._timer: threading.Timer | None = None
        self._arm()

    def _arm(self) -> None:
        self._timer = threading.Timer(self.after, self._warn)
        self._timer.daemon = True
        self._timer.start()

    def _warn(self) -> None:
        frame = sys._current_frames().get(self._thread_id)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(thread gone)\n"
        with self._lock:
            if self._done:
                return
            log.warning("%s: still running after %.0f s, at\n%s", self.what, time.monotonic() - self.began,
                        stack.rstrip())
            self._arm()

    def cancel(self) -> None:
        with self._lock:
            self._done = True
            if self._timer is not None:
                self._timer.cancel()


@dataclass(frozen=True)
class OwnershipTerm:
    """This node owns ``container_id`` at ``epoch``; ``guard`` is its ownership znode at the version of
    this term (give it to ``ZooKeeperLogMetadataStore.guarded`` for the container's log)."""

    container_id: int
    epoch: int
    guard: OwnerGuard


class ContainerHost(Protocol):
    """What the member drives. Starts and stops come from the member's pool threads, concurrently for
    different containers, never two at once for one container."""

    def start_container(self, term: OwnershipTerm) -> None: ...

    def stop_container(self, container_id: int) -> None: ...

    def failed_containers(self) -> set[int]:
        """Containers started here that stopped serving on their own (their durable log failed)."""
        ...


# Between attempts to reach ZooKeeper, kazoo by default doubles its wait up to an hour, and an attempt
# refused at once (ZooKeeper down, a partition answered by a reset) costs nothing, so a node cut off for
# half a minute would go on waiting for the better part of another one after the link came back, its
# containers stopped all that time. A second is cheap for ZooKeeper and brings a node back at once.
# The same holds for commands kazoo retries itself: a DataWatch or ChildrenWatch reading its znode again
# after an event or a reconnection, on kazoo's event thread (every other watch waits behind it), would
# otherwise sleep up to an hour between tries, the node's view of owners and members stale meanwhile.
_RECONNECT_MAX_DELAY = 1.0


def _retry_every_second() -> KazooRetry:
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=_RECONNECT_MAX_DELAY)


def connect(hosts: str, session_timeout: float = 10.0, connect_timeout: float = 30.0,
            credentials: ZooKeeperCredentials | None = None, tls: ZooKeeperTls | None = None) -> KazooClient:
    """A started kazoo client (``hosts`` may end in a chroot, ``host:port,.../path``) that keeps trying
    to reach ZooKeeper (and to retry a watch's read) at least every ``_RECONNECT_MAX_DELAY`` seconds while
    it cannot. With
    ``credentials`` (zk_auth.py) every connection authenticates with the digest and every znode it
    creates is that identity's alone; with ``tls`` (zk_tls.py) every connection is TLS (``hosts`` must
    then be ZooKeeper's ``secureClientPort``s)."""
    secured: dict[str, Any] = {}
    if credentials is not None:
        secured = {"auth_data": credentials.auth_data, "default_acl": credentials.acl}
    if tls is not None:
        secured |= {"handler": tls.handler(), "use_ssl": True}  # use_ssl: only for kazoo's log lines
    client = KazooClient(hosts=hosts, timeout=session_timeout, connection_retry=_retry_every_second(),
                         command_retry=_retry_every_second(), **secured)
    client.start(timeout=connect_timeout)
    return client


def ensure_cluster(client: KazooClient, paths: ClusterPaths, container_count: int,
                   credentials: ZooKeeperCredentials | None = None) -> None:
    """Create the cluster's znodes, fixing its container count; a different count is refused (containers
    are the unit of ownership and of segment placement: their number cannot change under a cluster).
    ZooKeeperAccessError when ZooKeeper refuses (NoAuth): a secured cluster, other or no credentials."""
    try:
        _ensure_cluster(client, paths, container_count)
    except NoAuthError:
        raise access_error(paths.root, credentials) from None
    if credentials is not None:
        acl, _ = client.get_acls(paths.root)
        if any(entry.id.scheme != "digest" or entry.id.id != credentials.identity for entry in acl):
            log.warning("the cluster's root %s was created without these credentials (its ACL: %s): znodes made "
                        "before remain open; only those created from now on are this identity's alone",
                        paths.root, ", ".join(f"{a.id.scheme}:{a.id.id}" for a in acl))


def _ensure_cluster(client: KazooClient, paths: ClusterPaths, container_count: int) -> None:
    for path in (paths.nodes, paths.leader, paths.containers, paths.handovers, paths.logs):
        client.ensure_path(path)
    try:
        client.create(paths.config, json.dumps({"containers": container_count}).encode())
    except NodeExistsError:
        data, _ = client.get(paths.config)
        existing = int(json.loads(data)["containers"])
        if existing != container_count:
            raise ValueError(f"the cluster at {paths.root} has {existing} containers, "
                             f"this node was configured with {container_count}") from None


def live_nodes(client: KazooClient, paths: ClusterPaths,
               watch: Callable[[WatchedEvent], None] | None = None) -> dict[str, tuple[NodeInfo, int]]:
    """Registered nodes: node id -> (info, incarnation)."""
    result = {}
    for name in client.get_children(paths.nodes, watch=watch):
        try:
            data, stat = client.get(paths.node(name))
        except NoNodeError:
            continue  # left between the listing and the read
        result[name] = (NodeInfo.decode(data), stat.czxid)
    return result


def read_assignments(client: KazooClient, paths: ClusterPaths, container_count: int,
                     watch: Callable[[WatchedEvent], None] | None = None
                     ) -> dict[int, tuple[Assignment, int | None]]:
    """Every container's assignment and its znode version (None: not written yet)."""
    result: dict[int, tuple[Assignment, int | None]] = {}
    for cid in range(container_count):
        path = paths.container(cid)
        try:
            data, stat = client.get(path, watch=watch)
        except NoNodeError:
            if watch is not None and client.exists(path, watch=watch) is not None:
                data, stat = client.get(path, watch=watch)  # created meanwhile
            else:
                result[cid] = (Assignment(), None)
                continue
        result[cid] = (decode_assignment(data), stat.version)
    return result


def read_handovers(client: KazooClient, paths: ClusterPaths, container_count: int,
                   watch: Callable[[WatchedEvent], None] | None = None) -> dict[int, tuple[Handover, int]]:
    """Pending and released handover requests with their znode versions (with ``watch``, also watch
    for requests still to be created)."""
    result: dict[int, tuple[Handover, int]] = {}
    for cid in range(container_count):
        path = paths.handover(cid)
        try:
            data, stat = client.get(path, watch=watch)
        except NoNodeError:
            if watch is None or client.exists(path, watch=watch) is None:
                continue
            try:
                data, stat = client.get(path, watch=watch)  # created meanwhile
            except NoNodeError:
                continue
        result[cid] = (Handover.decode(data), stat.version)
    return result


def elected_leader(client: KazooClient, paths: ClusterPaths) -> str | None:
    """The node id of the current assigner (None while nobody campaigns)."""
    for name in sorted(client.get_children(paths.leader), key=candidate_sequence):
        try:
            return client.get(f"{paths.leader}/{name}")[0].decode()
        except NoNodeError:
            continue
    return None


class ClusterMember:
    """One node's membership; ``start`` registers it, ``close`` leaves (its containers stopped first)."""

    # How often running containers are checked for having failed on their own (a local check).
    health_check_seconds = 1.0
    slow_transition_seconds = SLOW_TRANSITION_SECONDS

    def __init__(self, client: KazooClient, info: NodeInfo, container_count: int, host: ContainerHost,
                 paths: ClusterPaths | None = None, session_timeout: float = 10.0,
                 credentials: ZooKeeperCredentials | None = None) -> None:
        self.client = client
        self.credentials = credentials
        self.info = info
        self.container_count = container_count
        self.host = host
        self.paths = paths or ClusterPaths()
        self.session_timeout = session_timeout
        self._wake = threading.Event()
        self._registered = threading.Event()  # set once the first registration and candidacy exist
        self._closing = False
        self._thread: threading.Thread | None = None
        self._session: int | None = None  # the session the registration and candidate belong to
        self._incarnation: int | None = None
        self._candidate: str | None = None
        self._lost = False
        self._suspended_since: float | None = None
        # Containers: what runs (started, not yet being stopped), which have a transition in flight, and
        # terms whose start failed: (container, epoch) -> (failures, when to try again); all under
        # _containers, whose condition says "a transition ended".
        self._containers = threading.Condition()
        self._running: dict[int, OwnershipTerm] = {}
        self._busy: set[int] = set()
        self._failed_terms: dict[tuple[int, int], tuple[int, float]] = {}
        self._transitions = ThreadPoolExecutor(max(1, min(container_count, 8)),
                                               f"containers:{info.node_id}")
        self._state_lock = threading.Lock()  # guards is_leader
        self._is_leader = False

    # -- public views (any thread) -------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        with self._state_lock:
            return self._is_leader

    @property
    def owned(self) -> dict[int, OwnershipTerm]:
        """Containers this node runs now (started, and not being stopped)."""
        with self._containers:
            return dict(self._running)

    @property
    def incarnation(self) -> int | None:
        return self._incarnation

    def cut_off(self) -> bool:
        """Whether this node cannot reach ZooKeeper and its session is over by its own clock (lost, or
        suspended for the session timeout): it holds no term and cannot learn who does until the link is
        back, so work waiting for an owner may as well fail now."""
        suspended = self._suspended_since
        return not self.client.connected and (
            self._lost or (suspended is not None and time.monotonic() - suspended >= self.session_timeout))

    # -- life cycle ----------------------------------------------------------------------------------
    def start(self, timeout: float | None = 60.0) -> ClusterMember:
        """Start the loop and wait until this node is registered and campaigning (so nodes started one
        after another stand for election in that order). That can take up to the session timeout when
        a previous incarnation of this node id is still registered; TimeoutError after ``timeout``."""
        ensure_cluster(self.client, self.paths, self.container_count, self.credentials)
        self.client.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._run, name=f"cluster-member:{self.info.node_id}", daemon=True)
        self._thread.start()
        self._wake.set()
        if not self._registered.wait(timeout):
            raise TimeoutError(f"cluster member {self.info.node_id}: not registered after {timeout} s")
        return self

    def close(self) -> None:
        """Stop the loop and every container, then leave: deleting our znodes lets the assigner move
        our containers at once instead of after the session timeout."""
        self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self.client.remove_listener(self._on_state)
        self._stop_all()
        self._transitions.shutdown(wait=True)
        if self.client.connected and self._session == self._session_id():
            for path in (self._candidate, self.paths.node(self.info.node_id)):
                if path is None:
                    continue
                # Gone already, or the connection dropped: the session's expiry removes it then.
                with contextlib.suppress(NoNodeError, KazooException):
                    self.client.delete(path)
        with self._state_lock:
            self._is_leader = False

    # -- events (kazoo's threads: never block here) -------------------------------------------------
    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._lost = True
        elif state == KazooState.SUSPENDED:
            self._suspended_since = time.monotonic()
        else:
            self._suspended_since = None
        self._wake.set()

    def _on_watch(self, event: WatchedEvent | Any) -> None:
        self._wake.set()

    # -- the loop ------------------------------------------------------------------------------------
    def _run(self) -> None:
        retry_after: float | None = None
        while True:
            # While suspended, wake in time to notice the session timeout passing on our own clock.
            timeout = retry_after
            retry_at = self._next_start_retry()
            if retry_at is not None:
                # Never a zero wait: a pass that cannot retry yet (disconnected) must not spin.
                until = max(0.1, retry_at - time.monotonic())
                timeout = until if timeout is None else min(timeout, until)
            if self._suspended_since is not None:
                timeout = min(timeout or self.session_timeout, 0.2)
            # Running containers are checked for failures every second; that alone needs no pass (no
            # ZooKeeper reads): the restart's transition wakes the loop when it is done.
            wait = timeout
            if self.owned:
                wait = self.health_check_seconds if wait is None else min(wait, self.health_check_seconds)
            began = time.monotonic()
            woken = self._wake.wait(wait)
            self._wake.clear()
            if self._closing:
                return
            try:
                self._restart_failed()
                if not woken and (timeout is None or time.monotonic() - began < timeout):
                    continue
                self._pass()
                retry_after = None
            except KazooException as exc:
                log.info("cluster member %s: %s; retrying", self.info.node_id, exc)
                retry_after = 0.5
            except Exception:  # noqa: BLE001 - the loop must outlive any one pass
                log.exception("cluster member %s: pass failed; retrying", self.info.node_id)
                retry_after = 1.0

    def _session_id(self) -> int | None:
        client_id = self.client.client_id
        return None if client_id is None else int(client_id[0])

    def _pass(self) -> None:
        suspended = self._suspended_since
        if self._lost or (suspended is not None and time.monotonic() - suspended >= self.session_timeout):
            # Our ephemeral znodes are gone or about to be: someone else may own our containers now.
            self._lost = False
            self._stop_all()
            self._session = None
            with self._state_lock:
                self._is_leader = False
        if not self.client.connected:
            return
        session = self._session_id()
        if session != self._session:
            self._stop_all()  # a new session is a new incarnation: terms of the old one are over
            if not self._register(session):
                return
            self._campaign(session)
            self._session = session
            self._registered.set()
        leader = self._elected()
        with self._state_lock:
            self._is_leader = leader
        if leader:
            self._assign()
        self._follow()

    def _register(self, session: int | None) -> bool:
        """Create our ephemeral node znode; False while a previous incarnation's znode still exists
        (a restart faster than the old session's expiry: wait for it to go)."""
        path = self.paths.node(self.info.node_id)
        with contextlib.suppress(NodeExistsError):  # ours from a create whose answer was lost, or an old one
            self.client.create(path, self.info.encode(), ephemeral=True)
        stat = self.client.exists(path, watch=self._on_watch)
        if stat is None:
            self._wake.set()  # vanished between create and exists: try again
            return False
        if stat.owner_session_id != session:
            log.warning("cluster member %s: a previous registration (session %x) still holds %s; waiting "
                        "for it to expire", self.info.node_id, stat.owner_session_id, path)
            return False
        self._incarnation = stat.czxid
        log.info("cluster member %s: registered, incarnation %x", self.info.node_id, stat.czxid)
        return True

    def _campaign(self, session: int | None) -> None:
        """Our candidate znode, named after the session so a create whose answer was lost is found again."""
        prefix = f"{session:x}-"
        for name in self.client.get_children(self.paths.leader):
            if name.startswith(prefix):
                self._candidate = f"{self.paths.leader}/{name}"
                return
        self._candidate = self.client.create(f"{self.paths.leader}/{prefix}", self.info.node_id.encode(),
                                             ephemeral=True, sequence=True)

    def _elected(self) -> bool:
        names = sorted(self.client.get_children(self.paths.leader, watch=self._on_watch), key=candidate_sequence)
        return bool(names) and f"{self.paths.leader}/{names[0]}" == self._candidate

    def _assign(self) -> None:
        """As the assigner: balance containers over the live nodes, in one guarded transaction."""
        assert self._candidate is not None
        live = {name: incarnation
                for name, (_, incarnation) in live_nodes(self.client, self.paths, self._on_watch).items()}
        current = read_assignments(self.client, self.paths, self.container_count)
        handovers = read_handovers(self.client, self.paths, self.container_count, self._on_watch)
        assignments = {cid: a for cid, (a, _) in current.items()}
        released = {cid: h.epoch for cid, (h, _) in handovers.items() if h.released}
        target = balance(assignments, self.container_count, live)
        write, release = plan_handovers(assignments, target, live, released)
        transaction = self.client.transaction()
        transaction.check(self._candidate, 0)
        changes = 0
        for cid, assignment in write.items():
            version = current[cid][1]
            data = encode_assignment(assignment)
            if version is None:
                transaction.create(self.paths.container(cid), data)
            else:
                transaction.set_data(self.paths.container(cid), data, version=version)
            changes += 1
        for cid in release:
            request = Handover(assignments[cid].epoch).encode()
            if cid not in handovers:
                transaction.create(self.paths.handover(cid), request)
                changes += 1
            elif handovers[cid][0].epoch != assignments[cid].epoch:
                transaction.set_data(self.paths.handover(cid), request, version=handovers[cid][1])
                changes += 1
        for cid, (_, version) in handovers.items():
            if cid not in release:  # done (moved or restarted above), cancelled, or of an older term
                transaction.delete(self.paths.handover(cid), version=version)
                changes += 1
        if not changes:
            return
        results = transaction.commit()
        if any(isinstance(r, Exception) for r in results):
            log.info("cluster member %s: assignment transaction refused (%s); re-reading", self.info.node_id,
                     results)
            self._wake.set()
            return
        for cid, assignment in write.items():
            log.info("cluster: container %d -> %s (epoch %d)", cid, assignment.node, assignment.epoch)
        for cid in release:
            log.info("cluster: container %d: asking %s to release epoch %d", cid, assignments[cid].node,
                     assignments[cid].epoch)

    def _follow(self) -> None:
        """Stop what is no longer ours or is to be handed over, mark the handovers released, then start
        what newly is ours."""
        handovers = read_handovers(self.client, self.paths, self.container_count, self._on_watch)
        mine: dict[int, OwnershipTerm] = {}
        releasing: dict[int, tuple[Handover, int]] = {}
        for cid, (a, version) in read_assignments(self.client, self.paths, self.container_count,
                                                  self._on_watch).items():
            if version is None or a.node != self.info.node_id or a.incarnation != self._incarnation:
                continue
            pending = handovers.get(cid)
            if pending is not None and pending[0].epoch == a.epoch:
                releasing[cid] = pending  # this term is over: stop and say so, never start
                continue
            mine[cid] = OwnershipTerm(cid, a.epoch, OwnerGuard(self.paths.container(cid), version))
        with self._containers:
            running, busy = dict(self._running), set(self._busy)
        for cid, term in sorted(running.items()):
            if cid not in busy and mine.get(cid) != term:
                self._begin(cid, self._stop, cid)
        for cid, (request, version) in sorted(releasing.items()):
            if request.released or cid in running or cid in busy:
                continue  # answered already, or not stopped yet (the stop wakes us when done)
            # A cancelled request (gone, or rewritten) is seen on the next pass.
            with contextlib.suppress(NoNodeError, BadVersionError):
                self.client.set(self.paths.handover(cid), Handover(request.epoch, True).encode(), version=version)
                log.info("cluster member %s: released container %d (epoch %d)", self.info.node_id, cid,
                         request.epoch)
        now = time.monotonic()
        with self._containers:
            # Failures of terms that are over no longer matter.
            for key in [k for k in self._failed_terms if mine.get(k[0]) is None or mine[k[0]].epoch != k[1]]:
                del self._failed_terms[key]
            failed = dict(self._failed_terms)
        for cid, term in sorted(mine.items()):
            retry = failed.get((cid, term.epoch))
            if cid not in running and cid not in busy and (retry is None or retry[1] <= now):
                self._begin(cid, self._start, term)

    def _note_failure(self, term: OwnershipTerm) -> None:
        """Start the term again later (e.g. log replicas briefly unreachable), backing off up to 30 s."""
        key = (term.container_id, term.epoch)
        with self._containers:
            failures = self._failed_terms.get(key, (0, 0.0))[0] + 1
            self._failed_terms[key] = (failures, time.monotonic() + min(30.0, 0.5 * 2 ** (failures - 1)))

    def _restart_failed(self) -> None:
        """Close containers that failed on their own; ``_follow`` starts them again after a back-off.
        Safe even if the term is over: the guard refuses the new start's log epoch."""
        failed = self.host.failed_containers()
        with self._containers:
            broken = [term for cid, term in self._running.items() if cid in failed and cid not in self._busy]
        for term in broken:
            log.warning("cluster member %s: container %d (epoch %d) failed; restarting it", self.info.node_id,
                        term.container_id, term.epoch)
            self._begin(term.container_id, self._stop_failed, term)

    def _stop_failed(self, term: OwnershipTerm) -> None:
        self._stop(term.container_id)
        self._note_failure(term)

    def _next_start_retry(self) -> float | None:
        with self._containers:
            return min((at for _, at in self._failed_terms.values()), default=None)

    def _begin(self, container_id: int, transition: Callable[[Any], None], argument: object) -> None:
        """Run one container's start or stop on the pool; marked busy until it ends."""
        with self._containers:
            self._busy.add(container_id)
        self._transitions.submit(self._transition, container_id, transition, argument)

    def _transition(self, container_id: int, transition: Callable[[Any], None], argument: object) -> None:
        alarm = _SlowTransitionAlarm(
            f"cluster member {self.info.node_id}: {transition.__name__.strip('_')} of container {container_id}",
            self.slow_transition_seconds)
        try:
            transition(argument)
        finally:
            alarm.cancel()
            with self._containers:
                self._busy.discard(container_id)
                self._containers.notify_all()
            self._wake.set()

    def _start(self, term: OwnershipTerm) -> None:
        try:
            self.host.start_container(term)
        except Exception:  # noqa: BLE001 - one container failing must not take the others down
            log.exception("cluster member %s: container %d (epoch %d) failed to start", self.info.node_id,
                          term.container_id, term.epoch)
            self._note_failure(term)
            return
        with self._containers:
            self._running[term.container_id] = term

    def _stop(self, container_id: int) -> None:
        with self._containers:
            del self._running[container_id]
        try:
            self.host.stop_container(container_id)
        except Exception:  # noqa: BLE001 - stopping the others matters more
            log.exception("cluster member %s: container %d failed to stop", self.info.node_id, container_id)

    def _stop_all(self) -> None:
        """Stop every container and wait until all are stopped (starts in flight finish first)."""
        with self._containers:
            self._containers.wait_for(lambda: not self._busy)
            running = sorted(self._running)
        for cid in running:
            self._begin(cid, self._stop, cid)
        with self._containers:
            self._containers.wait_for(lambda: not self._busy)
