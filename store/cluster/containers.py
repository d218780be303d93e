"""A node's segment containers, started and stopped by its ``ClusterMember``: the bridge between
ownership terms and ``SegmentContainer``.

Each term gets a new container over a new durable log (a container is never restarted in place), and
the log of a term is the container's replicated log with its metadata in ZooKeeper guarded by the
term (``ZooKeeperLogMetadataStore.guarded``): opening it fences the previous owner's log on the
replicas and recovers everything that owner acknowledged, and a node whose term has ended cannot
even take a log epoch. Long-term storage must be shared by every node (S3, or one directory on one
machine): a container's checkpoints and chunks are there for whichever node owns it next.

Invariants: at most one container object per container id on this node; ``container`` raises
``ContainerOfflineError`` for a container this node does not run (a caller's cue to ask the cluster
where it is); ``stop_container`` closes cleanly (flush to long-term storage, checkpoint, truncate), so a
handover without a crash replays little.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from millrace.store.budget import ByteBudget
from millrace.store.cluster.log_metadata import ZooKeeperLogMetadataStore
from millrace.store.cluster.member import OwnershipTerm
from millrace.store.containers.config import ContainerConfig
from millrace.store.containers.container import FAILED, SegmentContainer
from millrace.store.containers.rates import RateConfig, RateRegistry
from millrace.store.durablelog.interface import DurableDataLog
from millrace.store.durablelog.replicated import ReplicatedDurableDataLog
from millrace.store.durablelog.replication_config import ReplicationConfig
from millrace.store.errors import ContainerOfflineError
from millrace.store.lts.interface import ChunkStorage
from millrace.store.scheduler import Scheduler
from millrace.store.segment_store import DEFAULT_CONTAINER_BUDGET_BYTES

log = logging.getLogger(__name__)


def container_log_name(container_id: int) -> str:
    """The same name the single-node server gives a container's replicated log."""
    return f"container-{container_id}"


def replicated_logs(metadata: ZooKeeperLogMetadataStore,
                    config: ReplicationConfig) -> Callable[[OwnershipTerm], DurableDataLog]:
    """Each term's log: the container's replicated log, its metadata changes guarded by the term."""
    return lambda term: ReplicatedDurableDataLog(container_log_name(term.container_id),
                                                 metadata.guarded(term.guard), config)


class SegmentContainerHost:
    """The containers this node runs (a ``ContainerHost`` for ``ClusterMember``)."""

    def __init__(self, storage: ChunkStorage, log_for_term: Callable[[OwnershipTerm], DurableDataLog],
                 config: ContainerConfig | None = None, rates: RateConfig | None = None,
                 container_budget_bytes: int = DEFAULT_CONTAINER_BUDGET_BYTES) -> None:
        self.storage = storage
        self.log_for_term = log_for_term
        self.config = config or ContainerConfig()
        self.rates = rates or RateConfig()  # the rate windows every container of this node measures
        self.scheduler = Scheduler()
        # Long-term storage reads block; one pool serves every container of this node.
        self._read_pool = ThreadPoolExecutor(self.config.storage_read_threads * 2, "lts-read")
        self._lock = threading.Lock()
        self._running: dict[int, tuple[OwnershipTerm, SegmentContainer]] = {}
        # Each container's byte budget, as in one process (``SegmentStore.budgets``): what it holds that
        # it cannot drop, so a flood slows to what its log and long-term storage sustain.
        self.container_budget_bytes = container_budget_bytes
        self._budgets: dict[int, ByteBudget] = {}
        # Ownership changes of this node's containers since it started, for /metrics: terms taken
        # ("acquired", a container started here) and given up ("released", stopped here).
        self.ownership_changes: collections.Counter[str] = collections.Counter()

    def start_container(self, term: OwnershipTerm) -> None:
        container = SegmentContainer(term.container_id, self.log_for_term(term), self.storage, self.config,
                                     self.scheduler, self._read_pool, rates=RateRegistry(self.rates))
        budget = ByteBudget(self.container_budget_bytes, f"container-{term.container_id}",
                            backlog=container.unflushed_bytes, call_later=self.scheduler.call_later)
        container.attach_budget(budget)
        try:
            container.start()  # fences the previous owner's log and recovers
        except BaseException:
            container.close()
            raise
        with self._lock:
            self._running[term.container_id] = (term, container)
            self._budgets[term.container_id] = budget
            self.ownership_changes["acquired"] += 1
        log.info("container %d: started in ownership epoch %d (log epoch %d)", term.container_id, term.epoch,
                 container.epoch)

    def stop_container(self, container_id: int) -> None:
        with self._lock:
            _, container = self._running.pop(container_id)
            self._budgets.pop(container_id, None)
            self.ownership_changes["released"] += 1
        container.close()
        log.info("container %d: stopped", container_id)

    def container(self, container_id: int) -> SegmentContainer:
        with self._lock:
            entry = self._running.get(container_id)
        if entry is None:
            raise ContainerOfflineError(f"container {container_id} does not run on this node")
        return entry[1]

    def budget(self, container_id: int) -> ByteBudget:
        """The byte budget of a container running here."""
        with self._lock:
            budget = self._budgets.get(container_id)
        if budget is None:
            raise ContainerOfflineError(f"container {container_id} does not run on this node")
        return budget

    def failed_containers(self) -> set[int]:
        with self._lock:
            return {cid for cid, (_, container) in self._running.items() if container.state == FAILED}

    def terms(self) -> dict[int, OwnershipTerm]:
        with self._lock:
            return {cid: term for cid, (term, _) in self._running.items()}

    def close(self) -> None:
        """Stop what still runs (``ClusterMember.close`` normally has) and the shared threads."""
        with self._lock:
            remaining = sorted(self._running)
        for container_id in remaining:
            self.stop_container(container_id)
        self._read_pool.shutdown(wait=True)
        self.scheduler.stop()
