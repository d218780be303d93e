"""What the Kafka gateway of a cluster node knows about the cluster: the live brokers, each
partition's leader, the group coordinator, and which containers this node runs in which term.

Kafka keeps a partition's offset index, producer states and high watermark in its leader only, and so
does Millrace: they live in one gateway's reactor (``SegmentPartitionStorage``). The leader of a
partition is the node that owns the container of the partition's open segment (``containers/<id>`` in
ZooKeeper, the same hash on every node), as a Pravega segment is served by its container's owner; the
group coordinator is the owner of the groups table's container, the transaction coordinator the owner
of the transactions table's container. Every other node answers
NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR, which clients retry after a metadata refresh.

A node serves a partition (or the groups) only from state it loaded during its *current* term of the
container: another node may have appended in an earlier term, so a new term means a reload first
(``SegmentPartitionStorage.check_leader``, ``GroupCoordination``, ``TransactionCoordination``).

Threads: ZooKeeper watches update the broker list and the assignments on kazoo's threads; the reactor
reads them (whole-value replacements of plain dicts, so a reader sees one version or the next).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import ZnodeStat
from twisted.python.failure import Failure

from millrace.gateway.kafka.group_store import GROUPS_TABLE
from millrace.gateway.kafka.nodes import KafkaNode
from millrace.gateway.kafka.transactions.state import TRANSACTIONS_TABLE
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.store.cluster.assignment import Assignment
from millrace.store.cluster.containers import SegmentContainerHost
from millrace.store.cluster.layout import (
    ClusterPaths,
    NodeInfo,
    candidate_sequence,
    decode_assignment,
    native_endpoint,
)
from millrace.store.errors import SegmentNotFoundError, StreamNotFoundError
from millrace.store.segment_store import container_index
from millrace.streams.topics import TopicInfo

if TYPE_CHECKING:
    from millrace.gateway.kafka.group_coordinator import GroupCoordinator
    from millrace.gateway.kafka.transactions import TransactionCoordinator
    from millrace.store.contracts import SegmentService
    from millrace.streams.partitions import SegmentPartitionStorage
    from millrace.streams.topics import TopicRegistry

KAFKA_LISTENER_PREFIX = "kafka:"  # a node registers each named Kafka listener's address under this prefix

log = logging.getLogger(__name__)


def kafka_node_id(node_id: str) -> int | None:
    """A cluster node's Kafka id: its node id, which a node serving Kafka must spell as a number."""
    return int(node_id) if node_id.isdigit() else None


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def kafka_address(info: NodeInfo) -> tuple[str, int] | None:
    """Where Kafka clients reach a node: its advertised ``kafka`` listener, else bind host + port."""
    advertised = info.advertised.get("kafka")
    if advertised:
        return _host_port(advertised)
    port_number = info.ports.get("kafka")
    return None if port_number is None else (info.host, port_number)


def kafka_listeners(info: NodeInfo) -> dict[str, tuple[str, int]]:
    """Each named Kafka listener a node advertises (registered as ``kafka:<NAME>``)."""
    return {name.partition(":")[2]: _host_port(address) for name, address in info.advertised.items()
            if name.startswith(KAFKA_LISTENER_PREFIX)}


class KafkaCluster:
    """The cluster as one node's Kafka gateway sees it (also its ``Leadership``)."""

    def __init__(self, client: KazooClient, paths: ClusterPaths, node_id: str, host: SegmentContainerHost,
                 container_count: int) -> None:
        self.client = client
        self.paths = paths
        self.node_id = node_id
        self.host = host
        self.container_count = container_count
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[int, NodeInfo]] = {}  # live node id -> (incarnation, what it registered)
        self._assignments: dict[int, Assignment] = {}
        self._controller: str | None = None  # the elected node (the assigner): the controller

    def start(self) -> KafkaCluster:
        """Watch ``nodes/`` and every ``containers/<id>`` (the first answers arrive before this returns)."""
        self.client.ensure_path(self.paths.nodes)
        self.client.ensure_path(self.paths.containers)
        self.client.ChildrenWatch(self.paths.nodes, self._nodes_changed)
        self.client.ensure_path(self.paths.leader)
        self.client.ChildrenWatch(self.paths.leader, self._candidates_changed)
        for container_id in range(self.container_count):
            self.client.DataWatch(self.paths.container(container_id), self._assignment_watcher(container_id))
        return self

    # -- watches (kazoo threads) --------------------------------------------------------------------
    def _nodes_changed(self, children: list[str]) -> None:
        nodes: dict[str, tuple[int, NodeInfo]] = {}
        for name in children:
            try:
                data, stat = self.client.get(f"{self.paths.nodes}/{name}")
            except NoNodeError:
                continue
            except KazooException as exc:
                log.warning("reading node %s failed: %s", name, exc)
                continue
            info = NodeInfo.decode(data)
            nodes[info.node_id] = (stat.czxid, info)
        with self._lock:
            # A registration read meanwhile by _know_owner may be newer (a later zxid) than ours.
            for node_id, (czxid, _) in list(nodes.items()):
                known = self._nodes.get(node_id)
                if known is not None and known[0] > czxid:
                    nodes[node_id] = known
            self._nodes = nodes

    def _candidates_changed(self, children: list[str]) -> None:
        """The lowest candidate is the elected node, which runs the controller (as the assigner)."""
        for name in sorted(children, key=candidate_sequence):
            try:
                self._controller = self.client.get(f"{self.paths.leader}/{name}")[0].decode()
                return
            except NoNodeError:
                continue  # gone meanwhile: the next one is elected
            except KazooException as exc:
                log.warning("reading election candidate %s failed: %s", name, exc)
                return
        self._controller = None

    def _assignment_watcher(self, container_id: int) -> Any:
        def changed(data: bytes | None, stat: ZnodeStat | None) -> None:
            assignment = decode_assignment(data) if data else None
            if assignment is not None:
                self._know_owner(assignment)
            with self._lock:
                assignments = dict(self._assignments)
                if assignment is not None:
                    assignments[container_id] = assignment
                else:
                    assignments.pop(container_id, None)
                self._assignments = assignments
        return changed

    def _know_owner(self, assignment: Assignment) -> None:
        """Read the owner's registration if ours is of another incarnation. ``nodes/`` children alone
        do not show a node that registered again under its id (a zombie back from a pause, a quick
        restart) when its old and new znodes fall between two reads of the children."""
        node = assignment.node
        if node is None:
            return
        known = self._nodes.get(node)
        if known is not None and known[0] == assignment.incarnation:
            return
        try:
            data, stat = self.client.get(self.paths.node(node))
        except NoNodeError:
            return  # gone already: the assigner moves its containers
        except KazooException as exc:
            log.warning("reading node %s failed: %s", node, exc)
            return
        with self._lock:
            known = self._nodes.get(node)
            if known is None or known[0] < stat.czxid:
                nodes = dict(self._nodes)
                nodes[node] = (stat.czxid, NodeInfo.decode(data))
                self._nodes = nodes

    # -- reads (any thread) -------------------------------------------------------------------------
    def brokers(self) -> list[KafkaNode]:
        """Every live node with a Kafka listener, by id."""
        nodes = (_kafka_node(info) for _, info in self._nodes.values())
        return sorted((n for n in nodes if n is not None), key=lambda n: n.node_id)

    def native_endpoints(self) -> list[str]:
        """Every live node's native listener (this one's included), by node id: what HELLO tells clients,
        so one given endpoint is enough to find the others when it dies."""
        found = (native_endpoint(info) for _, (_, info) in sorted(self._nodes.items()))
        return [endpoint for endpoint in found if endpoint is not None]

    def other_nodes(self) -> list[NodeInfo]:
        """What every other live node registered."""
        return [info for node, (_, info) in sorted(self._nodes.items()) if node != self.node_id]

    def owner_info(self, container_id: int) -> NodeInfo | None:
        """What the container's live owner registered, None while it has none (or its owner died)."""
        assignment = self._assignments.get(container_id)
        if assignment is None or assignment.node is None:
            return None
        entry = self._nodes.get(assignment.node)
        if entry is None or entry[0] != assignment.incarnation:
            return None
        return entry[1]

    def assignment(self, container_id: int) -> Assignment | None:
        """The container's owner and ownership epoch as ZooKeeper holds them now (None: never assigned)."""
        return self._assignments.get(container_id)

    def owner(self, container_id: int) -> KafkaNode | None:
        """The container's live owner as a Kafka broker."""
        info = self.owner_info(container_id)
        return None if info is None else _kafka_node(info)

    def segment_owner(self, segment: str) -> dict[str, Any]:
        """The GET_SEGMENT_OWNER answer: the segment's container, its live owner and that owner's
        advertised native listener (clients' segment commands are served there without a hop)."""
        container = self.container_of(segment)
        info = self.owner_info(container)
        return {"container": container, "node": None if info is None else info.node_id,
                "native": None if info is None else native_endpoint(info)}

    def leader(self, segment: str) -> KafkaNode | None:
        """The node serving the partitions whose open segment is ``segment``."""
        return self.owner(self.container_of(segment))

    def partition_leaders(self, partitions: SegmentPartitionStorage, topic: TopicInfo) -> list[int]:
        """Reactor: each partition's leader id (-1: none yet). The open segments are the ones this node
        loaded; a topic not loaded here yet starts loading and has no leaders this time."""
        loaded = partitions.loaded(topic.name)
        if loaded is None or len(loaded) < topic.partition_count:
            partitions.open_topic(topic).addErrback(
                lambda f: log.warning("loading %s failed: %s", topic.name, f.getErrorMessage()))
        leaders = []
        for p in range(topic.partition_count):
            writer = loaded[p].writer if loaded is not None and p < len(loaded) else None
            leader = self.leader(writer.name) if writer is not None else None
            leaders.append(-1 if leader is None else leader.node_id)
        return leaders

    def controller_info(self) -> NodeInfo | None:
        """The elected node while it is live: the controller, whose admin operations no other node runs."""
        elected = self._controller
        entry = self._nodes.get(elected) if elected is not None else None
        return None if entry is None else entry[1]

    def controller(self) -> KafkaNode | None:
        info = self.controller_info()
        return None if info is None else _kafka_node(info)

    def is_controller(self) -> bool:
        return self._controller == self.node_id

    def controller_id(self, own_id: int) -> int:
        """The controller's Kafka id for Metadata and DescribeCluster: clients send CreateTopics and the
        like there (this node's own id while no election is seen yet: it answers NOT_CONTROLLER if it is
        not, and the client asks again)."""
        node = self.controller()
        return own_id if node is None else node.node_id

    def group_coordinator(self) -> KafkaNode | None:
        return self.leader(GROUPS_TABLE)

    def transaction_coordinator(self) -> KafkaNode | None:
        return self.leader(TRANSACTIONS_TABLE)

    # -- Leadership ----------------------------------------------------------------------------------
    def terms(self) -> dict[int, int]:
        return {cid: term.epoch for cid, term in self.host.terms().items()}

    def container_of(self, segment: str) -> int:
        return container_index(segment, self.container_count)


def out_of_date_topics(topics: TopicRegistry, partitions: SegmentPartitionStorage, store: SegmentService) -> list[str]:
    """Blocking (worker): the topics (and partitioned streams) this node loaded whose partitions' open
    segments the controller has since moved on from (another node scaled them), counted only once the
    old segment is sealed, so every append to it has settled and a reload reads all of them."""
    stale = []
    for name in topics.record_keys():
        topic = topics.record(name)
        parts = partitions.loaded(name)
        if topic is None or not parts:
            continue
        try:
            current = topics.current_segments(name)
        except (StreamNotFoundError, SegmentNotFoundError):
            continue  # deleted meanwhile
        for p in parts[:topic.partition_count]:
            if p.writer is None:
                continue
            if p.writer.name == topics.segment_of_partition(topic, p.partition, current).name:
                continue
            try:
                sealed = store.get_info(p.writer.name).sealed
            except SegmentNotFoundError:
                sealed = True
            if sealed:
                stale.append(name)
                break
    return stale


NOT_CONTROLLER_MESSAGE = "this node is not the controller: ask the controller Metadata names"


def not_controller(cluster: KafkaCluster | None) -> bool:
    """Whether a topic admin request (CreateTopics, DeleteTopics, CreatePartitions) is to be refused with
    NOT_CONTROLLER: on a cluster only the elected node runs them, as only Kafka's active controller does;
    clients refresh Metadata (whose controller_id names it) and send them there."""
    return cluster is not None and not cluster.is_controller()


def _kafka_node(info: NodeInfo) -> KafkaNode | None:
    number, address = kafka_node_id(info.node_id), kafka_address(info)
    return None if number is None or address is None else KafkaNode(number, *address, kafka_listeners(info))


class GroupCoordination:
    """Keeps the group coordinator's state for the current term of the groups table's container only:
    dropped (timers and all) when the container runs elsewhere, so a former coordinator never expires
    members or writes records over its successor's, and reloaded when a new term starts here."""

    def __init__(self, cluster: KafkaCluster, groups: GroupCoordinator) -> None:
        self.cluster = cluster
        self.groups = groups
        self.loaded_term: int | None = None  # None: loaded in no term of ours (at start-up, or dropped)

    def check(self) -> ErrorCode | None:
        """Reactor: None when this node coordinates with current state, else the error to answer."""
        term = self.cluster.terms().get(self.cluster.container_of(GROUPS_TABLE))
        if term is None:
            if self.loaded_term is not None or self.groups.groups:
                self._drop()
            return ErrorCode.NOT_COORDINATOR
        if term != self.loaded_term and not self.groups.loading:
            self._drop()
            self.loaded_term = term  # before the load reads: state of this term (or a later one)
            self.groups.loaded = False
            self.groups.start_loading().addErrback(lambda f: log.warning("loading groups failed: %s",
                                                                        f.getErrorMessage()))
        if self.groups.loading or not self.groups.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    def _drop(self) -> None:
        self.groups.shutdown()
        self.groups.groups = {}
        self.loaded_term = None


class TransactionCoordination:
    """Keeps the transaction coordinator's state for the current term of the transactions table's
    container only, as ``GroupCoordination`` does for the groups: dropped when the container runs
    elsewhere (its retries stop, so a former coordinator writes no marker or record after its successor
    started), reloaded when a new term starts here, after which every transaction the table shows
    prepared is completed again (Kafka's new coordinator does the same). The term is the coordinator
    epoch in the markers this node writes."""

    def __init__(self, cluster: KafkaCluster, transactions: TransactionCoordinator) -> None:
        self.cluster = cluster
        self.transactions = transactions
        self.loaded_term: int | None = None  # the term whose state is held (or loading)
        self.loading = False
        container = cluster.container_of(TRANSACTIONS_TABLE)
        # Read on the worker pool before each transaction record is written (whole-value reads).
        transactions.fence_writes(lambda: cluster.terms().get(container) == self.loaded_term)

    def check(self) -> ErrorCode | None:
        """Reactor: None when this node coordinates with state of its current term, else the error."""
        term = self.cluster.terms().get(self.cluster.container_of(TRANSACTIONS_TABLE))
        if term is None:
            if self.loaded_term is not None:
                log.info("the transactions table's container runs elsewhere: dropping transaction state")
                self.loaded_term = None
                self.transactions.reset()
            return ErrorCode.NOT_COORDINATOR
        if term != self.loaded_term and not self.loading:
            log.info("term %d of the transactions table's container: loading transaction state", term)
            self.loaded_term = term  # before the load reads: state of this term (or a later one)
            self.loading = True
            self.transactions.coordinator_epoch = term
            self.transactions.reload().addBoth(self._loaded, term)
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None if term == self.loaded_term else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    def _loaded(self, result: Any, term: int) -> None:
        self.loading = False
        if isinstance(result, Failure):
            log.warning("loading transaction state failed: %s", result.getErrorMessage())
            self.loaded_term = None  # the next check loads again
            return
        if self.loaded_term == term and self.check() is None:
            self.transactions.resume()
