"""What every Kafka handler can reach: the broker's identity and configuration, the store, the
controller, and the Kafka views built over them (topics, partition logs, consumer groups)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from twisted.internet.defer import Deferred

from millrace.gateway.kafka.config import KafkaConfig
from millrace.gateway.kafka.node_requests import NodeLink, Peers
from millrace.gateway.kafka.quotas.enforcement import ClientQuotas
from millrace.gateway.security.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    client_host,
    operations_bit_field,
)
from millrace.gateway.security.principal import ANONYMOUS, KafkaPrincipal
from millrace.gateway.shared.limits import ConnectionGuards
from millrace.gateway.shared.request_metrics import KafkaTraffic, RequestMetrics
from millrace.store.budget import ByteBudget
from millrace.store.contracts import SegmentService
from millrace.store.controller import Controller
from millrace.store.tables import TableStore
from millrace.streams.futures import to_deferred

if TYPE_CHECKING:
    from millrace.gateway.kafka.cluster import KafkaCluster
    from millrace.gateway.kafka.group_coordinator import GroupCoordinator
    from millrace.gateway.kafka.nodes import KafkaNode
    from millrace.gateway.kafka.sessions import KafkaListener, Session
    from millrace.gateway.kafka.transactions import TransactionCoordinator
    from millrace.gateway.security.acl_table import AclTable
    from millrace.gateway.security.credentials import ScramCredentialTable
    from millrace.streams.partitions import SegmentPartitionStorage
    from millrace.streams.producer_ids import ProducerIdAllocator
    from millrace.streams.scaling import StreamScaling
    from millrace.streams.topics import TopicRegistry

P = ParamSpec("P")
T = TypeVar("T")


_ALL_OPERATIONS = {resource_type: operations_bit_field(operations)
                   for resource_type, operations in SUPPORTED_OPERATIONS.items()}


@dataclass
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    # The listener the request came in on (None: the server's one PLAINTEXT listener, as ``KafkaConfig``
    # advertises it) and the connection's session there (None on PLAINTEXT: ANONYMOUS, unchecked).
    listener: KafkaListener | None = None
    session: Session | None = None
    # Calls the connection makes once the response has left for the socket, or the connection is gone
    sent_callbacks: list[Callable[[], None]] | None = None
    # Authorized-operation bit fields already computed for this request, by resource: a Metadata answer
    # may name a resource more than once, and each costs one decision per supported operation.
    _operations: dict[tuple[ResourceType, str], int] | None = field(default=None, repr=False)

    @property
    def principal(self) -> KafkaPrincipal:
        """Who sent the request: the session's principal, ANONYMOUS on a PLAINTEXT listener."""
        return ANONYMOUS if self.session is None else self.session.principal

    def authorized(self, operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        """Whether the request's principal, from its address, may do ``operation`` on the resource (the
        cluster by default); always, when no authorizer is configured."""
        acls = self.broker.acls
        if acls is None:
            return True
        return acls.authorizer.authorize(self.principal, self.host, operation, resource_type, name)

    def authorized_operations(self, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
        """Kafka's authorized-operations bit field for the resource: the operations the resource type
        supports that the request's principal may perform (all of them without an authorizer)."""
        acls = self.broker.acls
        if acls is None:
            return _ALL_OPERATIONS[resource_type]
        if self._operations is None:
            self._operations = {}
        key = (resource_type, name)
        bits = self._operations.get(key)
        if bits is None:
            bits = self._operations[key] = operations_bit_field(
                acls.authorizer.authorized_operations(self.principal, self.host, resource_type, name))
        return bits

    @functools.cached_property
    def host(self) -> str:
        """The client's IP address, as ACLs name hosts (Java's spelling: IPv6 in eight groups); worked out
        once per request, which may ask the authorizer many times."""
        address = self.peer.rpartition(":")[0].strip("[]")
        try:
            return client_host(address)
        except ValueError:  # not an IP connection (a test's fake peer)
            return address

    def advertised(self) -> tuple[str, int]:
        """Where clients of this request's listener reach this node: Kafka advertises to a client the
        address of the listener it came in on."""
        if self.listener is not None:
            return self.listener.advertised_host, self.listener.advertised_port
        return self.broker.config.advertised_host, self.broker.config.advertised_port

    def node_address(self, node: KafkaNode) -> tuple[str, int]:
        """Where clients of this request's listener reach another node: its listener of the same name."""
        return node.on(None if self.listener is None else self.listener.name)

    def when_sent(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once this request's response is sent (handed to the socket, not merely queued in the
        transport), or the connection closes without sending it: for memory a response holds."""
        if self.sent_callbacks is None:
            self.sent_callbacks = []
        self.sent_callbacks.append(fn)


class Broker:
    # The Kafka views, attached by gateway.kafka.setup.build_kafka (before the listener opens) so each
    # stays a separate unit.
    topics: TopicRegistry
    partitions: SegmentPartitionStorage
    groups: GroupCoordinator
    producer_ids: ProducerIdAllocator
    scaling: StreamScaling
    transactions: TransactionCoordinator
    # The SCRAM credentials SASL listeners check and the SCRAM admin APIs change (None: not loaded)
    scram: ScramCredentialTable | None = None
    # The ACLs requests are authorized by (None: no authorizer configured, everything is allowed)
    acls: AclTable | None = None
    # What every listener holds its clients to (``gateway.shared.limits``): set from the properties at start;
    # the defaults until then
    guards: ConnectionGuards

    def __init__(
        self, store: SegmentService, controller: Controller, tables: TableStore, config: KafkaConfig,
        pool: ThreadPoolExecutor,
    ) -> None:
        self.store = store
        # How this node reaches the others (``cluster``, ``node_link``), shared with the transaction coordinator
        self.peers = Peers()
        self._cluster: KafkaCluster | None = None
        self.guards = ConnectionGuards()
        self.controller = controller
        self.tables = tables
        self.config = config
        self._pool = pool
        # Record bytes that Fetch responses hold: a fetch takes what it plans from here and gives it back
        # once its response has left for the socket (``RequestContext.when_sent``), and plans no more than
        # is left (at least one batch), so many consumers asking for large fetches at once, or reading
        # them slowly, cannot make the server hold more than this.
        self.fetch_memory = ByteBudget(config.fetch_memory_bytes, "kafka-fetch")
        # Client quotas (empty, so inactive, until loaded or altered: ``gateway.kafka.setup.build_kafka``)
        self.quotas = ClientQuotas(tables, window_num=config.quota_window_num,
                                   window_seconds=config.quota_window_seconds)
        # What /metrics reports of the Kafka listeners (reactor): request latencies and open connections per
        # listener, bytes in and out per topic, produce and fetch errors by code.
        self.requests = RequestMetrics()
        self.traffic = KafkaTraffic()

    @property
    def cluster(self) -> KafkaCluster | None:
        """On a cluster node: live brokers, partition leaders and coordinators (None: this node is all of them)."""
        return self._cluster

    @cluster.setter
    def cluster(self, cluster: KafkaCluster | None) -> None:
        self._cluster = cluster
        self.peers.directory = cluster

    @property
    def node_link(self) -> NodeLink:
        """How this node's requests to other nodes dial them and log in (Kafka's inter-broker listener)."""
        return self.peers.link

    @node_link.setter
    def node_link(self, link: NodeLink) -> None:
        self.peers.link = link

    def blocking(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Deferred[T]:
        """Run ``fn`` (which blocks on table-segment or store I/O) on the worker pool; the Deferred
        fires on the reactor thread."""
        return to_deferred(self._pool.submit(fn, *args, **kwargs))


def get_coordinator(broker: Broker) -> GroupCoordinator:
    """``broker.groups``, created (and loaded in the background) on first use if setup did not."""
    if broker.groups is None:
        from millrace.gateway.kafka.group_coordinator import GroupCoordinator
        from millrace.gateway.kafka.group_store import GroupStore

        broker.groups = GroupCoordinator(broker.config, GroupStore(broker.tables, broker.blocking), broker.topics,
                                         broker.blocking)
        # A failed load is logged; the next request tries again.
        broker.groups.start_loading().addErrback(lambda _: None)
    return broker.groups
