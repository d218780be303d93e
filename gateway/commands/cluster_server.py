"""``millrace serve --zookeeper HOST:PORT[/chroot] --node-id N``: one segment-store node of a cluster.

What differs from the embedded server (``server.serve``; both are made of the parts
``gateway/shared/assembly.py`` builds from the options):

- the node's containers are the ones ZooKeeper assigns it (``ClusterNode``), each over its replicated
  log (``--log-replicas``; a container's log must be reachable from whichever node owns it next), with
  long-term storage shared by every node (``--lts``, required);
- the controller, the tables and the gateways call a ``ClusterSegmentStore``: each segment operation
  runs on the owner of the segment's container;
- a third listener, ``peer``, serves the node's own containers to the other nodes (``LocalSegments``):
  a forwarded request is never forwarded again, and a node that no longer runs the container answers
  CONTAINER_OFFLINE. Clients' native segment commands, on the native listener, use the router;
- Kafka: Metadata lists every live node and each partition's leader (the owner of the container of
  its open segment); other nodes answer NOT_LEADER_OR_FOLLOWER, and the group (transaction) coordinator
  is the owner of the groups (transactions) table's container (``gateway/kafka/cluster.py``);
- the native listener is secured as a single server's (the properties' listener NATIVE: TLS, SASL, the
  ACLs); a node forwards native commands to another node's native listener over its TLS, logged in as
  the inter-broker user, carrying the client's principal, which that node authorizes (``forwarding``);
- each listener is advertised (in ``nodes/<id>`` and to Kafka clients) as ``--advertised-kafka`` etc.,
  as Kafka's advertised.listeners: a node bound to 0.0.0.0 must not send clients to 0.0.0.0.

The listeners are bound first (their ports go into the node's registration), and accept connections
only once the node and its gateways are built (``LateFactory``). The reactor runs from the start and the
node is built on a worker thread, so its peer listener serves as soon as the node has joined: nodes
started together read the tables on each other's containers while they build.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from twisted.internet import protocol, reactor, task, threads
from twisted.python.failure import Failure

from millrace.gateway.http.console import Console
from millrace.gateway.http.console.cluster_view import describe_cluster
from millrace.gateway.http.site import StreamViews, http_site
from millrace.gateway.kafka.broker import Broker
from millrace.gateway.kafka.cluster import (
    KAFKA_LISTENER_PREFIX,
    GroupCoordination,
    KafkaCluster,
    TransactionCoordination,
    native_endpoint,
    out_of_date_topics,
)
from millrace.gateway.kafka.connection import KafkaFactory
from millrace.gateway.kafka.node_requests import NodeLink
from millrace.gateway.kafka.setup import start_background
from millrace.gateway.native.dispatch import Handlers, handlers, serve
from millrace.gateway.native.forwarding import HERE, PLAINTEXT_NATIVE_LINK, NativeLink, NodeLinks, forwarding
from millrace.gateway.native.handler import NativeFactory, NativeProtocol
from millrace.gateway.native.security import NativeSecurity
from millrace.gateway.native.txn_cluster import cluster_txn_handlers
from millrace.gateway.security.properties import ListenerSettings, SecuritySettings
from millrace.gateway.shared.assembly import (
    ClusterNodeSetup,
    ServerOptions,
    add_scram_items,
    advertised_addresses,
    autoscaler,
    bind_kafka_listeners,
    bound_address,
    build_cluster_node,
    cluster_node_setup,
    cluster_router,
    connection_guards,
    http_access,
    http_tls,
    kafka_acls,
    kafka_advertised,
    kafka_config,
    kafka_factories,
    kafka_gateway,
    kafka_security,
    listen,
    native_gateway,
    native_link,
    native_security,
    native_settings,
    native_tls,
    node_link,
    peer_server_tls,
    scram_credentials,
    topic_partitions,
)
from millrace.gateway.shared.metrics import ClusterSources, MetricsSources
from millrace.protocol import messages as m
from millrace.protocol.contracts import SegmentInfo
from millrace.protocol.wire import PROTOCOL_VERSION, Command
from millrace.store.cluster.node import ClusterNode
from millrace.store.cluster.routing import ClusterSegmentStore, LocalSegments
from millrace.store.containers.container import SegmentContainer
from millrace.store.containers.rates import SegmentRates
from millrace.store.controller import Controller
from millrace.store.controller.autoscaler import AutoScaler
from millrace.store.errors import ContainerOfflineError, SegmentNotFoundError
from millrace.store.fsutil import private_directory
from millrace.store.process_output import print_line
from millrace.store.tables import TableStore
from millrace.streams.futures import check_reactor_waits, every

log = logging.getLogger("millrace")

# Native commands that change the controller's metadata: the elected node runs them (as Kafka's active
# controller runs topic changes); reads and table-segment data commands are served by any node.
CONTROLLER_CHANGES = (Command.CREATE_SCOPE, Command.DELETE_SCOPE, Command.CREATE_STREAM, Command.UPDATE_STREAM,
                      Command.SEAL_STREAM, Command.DELETE_STREAM, Command.TRUNCATE_STREAM, Command.SPLIT_SEGMENT,
                      Command.MERGE_SEGMENTS, Command.CREATE_KV_TABLE, Command.DELETE_KV_TABLE,
                      Command.UPDATE_SUBSCRIBER_CUT)

_BUILD_ATTEMPTS = 10


class LateFactory(protocol.ServerFactory):
    """A listener bound before what serves it exists: connections are closed until ``inner`` is set."""

    # Any protocol: the HTTP listener's is a Site (a ServerFactory[HTTPChannel]).
    inner: protocol.ServerFactory[Any] | None = None

    def buildProtocol(self, addr: Any) -> Any:  # noqa: N802 - Twisted's name
        return None if self.inner is None else self.inner.buildProtocol(addr)


class PeerFactory(protocol.ServerFactory):
    """The peer listener: the node's own containers only (``LocalSegments``), segment commands only. On a
    secured cluster it is bound with TLS requiring a certificate of the cluster CA (``peer_server_tls``):
    a connection without one never gets past the handshake, so never reaches a ``NativeProtocol``."""

    local: LocalSegments | None = None

    def buildProtocol(self, addr: Any) -> NativeProtocol | None:  # noqa: N802 - Twisted's name
        if self.local is None:
            return None
        return NativeProtocol(self.local, {})


class NodeHttpView:
    """The ``NodeView`` the HTTP site (gateway/http/site.py) reads on a cluster node: its own containers
    (health, container series, /api/segments: read on the reactor, so local only) and, through the
    router, any segment's info and rates (the stream series and views, on the worker pool)."""

    def __init__(self, local: LocalSegments, router: ClusterSegmentStore) -> None:
        self.local = local
        self.router = router

    @property
    def containers(self) -> list[SegmentContainer]:
        running = []
        for container_id in sorted(self.local.host.terms()):
            try:
                running.append(self.local.host.container(container_id))
            except ContainerOfflineError:
                continue  # stopped since terms() was read
        return running

    def list_segments(self) -> list[str]:
        return self.local.list_segments()

    def get_info(self, name: str) -> SegmentInfo:
        try:
            return self.local.get_info(name)
        except ContainerOfflineError:
            return self.router.get_info(name)

    def segment_rates(self, name: str) -> SegmentRates:
        return self.router.segment_rates(name)

    def container_id_of(self, name: str) -> int:
        return self.router.container_id_of(name)


class ControllerRole:
    """The controller's timers (the auto-scaler) run on the elected assigner only, so a scale is
    decided once; they start when this node is elected and stop when it is not any more (reactor)."""

    def __init__(self, node: ClusterNode, autoscaler: AutoScaler) -> None:
        self.node = node
        self.autoscaler = autoscaler
        self.active = False

    def follow(self) -> None:
        elected = self.node.member is not None and self.node.member.is_leader
        if elected and not self.active:
            log.info("elected: this node runs the controller's timers (auto-scaler)")
            self.autoscaler.start(reactor)
        elif self.active and not elected:
            log.info("no longer elected: the auto-scaler stops here")
            self.autoscaler.stop()
        self.active = elected


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def serve_cluster(options: ServerOptions) -> int:
    """Run one cluster node until SIGINT/SIGTERM; returns the process exit status."""
    try:
        setup = cluster_node_setup(options)
        add_scram_items(options)  # read again when the node's tables are up; here to fail before joining
    except ValueError as exc:
        print(f"millrace: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        security = kafka_security(options)
        link = node_link(security)
        native = native_settings(options)
        # Forwarded native commands go to the other nodes' NATIVE listener, over its TLS and logged in as
        # the inter-broker user; the client's principal they carry is what the serving node authorizes.
        native_to_nodes = native_link(security, native, link)
    except (OSError, ValueError) as exc:  # ConfigError names the property; an unreadable --config file
        print(f"millrace: bad Kafka configuration: {exc}", file=sys.stderr, flush=True)
        return 2
    log.info("Kafka listeners:\n%s", security.describe())
    private_directory(os.path.abspath(options.data_dir))  # the node's log metadata and console history
    try:
        server = ClusterServer(options, setup, security, link, native, native_to_nodes)
    except ValueError as exc:  # the peer listener's TLS key material does not load
        print(f"millrace: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        server.listen()
    except Exception as exc:  # noqa: BLE001 - e.g. a port in use, a malformed address
        print(f"millrace: cannot listen: {exc}", file=sys.stderr, flush=True)
        return 1
    # The reactor runs from the start, so this node's peer listener answers while the node is built:
    # two nodes starting together each read tables held by the other's containers.
    reactor.callWhenRunning(server.start)
    check_reactor_waits()
    reactor.run()
    server.close()
    if server.failed:
        return 1
    print_line("millrace: stopped cleanly")
    return 0


@dataclass
class _Built:
    """What ``ClusterServer.build`` makes on its worker thread: everything whose making reads or writes the
    store. ``serve`` only wires it up on the reactor."""

    broker: Broker
    kafka_factory: KafkaFactory
    cluster: KafkaCluster
    controller: Controller
    native_factory: NativeFactory
    links: NodeLinks  # connections to the other nodes' native listeners, for forwarded commands
    txn_commands: Handlers  # the native transaction commands, served through their table's owner
    native_txns: Callable[[], bool]  # their coordination check


class ClusterServer:
    """One node's parts: bound listeners first, then (on a worker thread) the node and its gateways,
    then (on the reactor) the listeners' factories and the periodic work."""

    def __init__(self, options: ServerOptions, setup: ClusterNodeSetup, security: SecuritySettings,
                 link: NodeLink, native: ListenerSettings | None = None,
                 native_to_nodes: NativeLink = PLAINTEXT_NATIVE_LINK) -> None:
        self.options = options
        self.node_id = setup.node_id
        self.setup = setup
        self.security = security
        self.link = link
        # The native listener, secured as the Kafka properties' listener NATIVE (as a single server's), and
        # how this node reaches the others' (``native_link``).
        self.native = native if native is not None else native_settings(options)
        self.native_to_nodes = native_to_nodes
        self.native_security: NativeSecurity | None = None  # made with the broker (its SCRAM users, ACLs)
        # One per Kafka listener, by name, as ``listeners`` orders them; each advertised as kafka_addresses says
        self.kafka_fronts: dict[str, LateFactory] = {}
        self.kafka_addresses: dict[str, tuple[str, int]] = {}
        self.native_front, self.peer_factory = LateFactory(), PeerFactory()
        # A secured cluster's peer listener is mutual TLS: only nodes the cluster CA signed get in.
        self.peer_tls = peer_server_tls(setup)
        self.http_front = LateFactory()
        self.addresses: dict[str, str] = {}
        self.ports: dict[str, int] = {}
        self.pool = ThreadPoolExecutor(8, "controller")
        self.node: ClusterNode | None = None
        self.router: ClusterSegmentStore | None = None
        self.broker: Broker | None = None
        self.loops: list[task.LoopingCall] = []
        self.links: NodeLinks | None = None  # connections to other nodes' native listeners
        self.autoscaler: AutoScaler | None = None
        self.failed = False

    def listen(self) -> None:
        """Bind every listener. The Kafka ones register as ``kafka:<NAME>`` (Metadata gives each client the
        other nodes' listener of the name it came in on), the first also as ``kafka`` (the native side's
        and tools' one Kafka address)."""
        kafka = bind_kafka_listeners(self.security, lambda s: self.kafka_fronts.setdefault(s.name, LateFactory()))
        listeners = listen(self.options, {"native": self.native_front, "peer": self.peer_factory,
                                          "http": self.http_front},
                           tls={"peer": self.peer_tls, **http_tls(self.security), **native_tls(self.native)},
                           handshake_timeout_ms=self.security.limits.authentication_timeout_ms)
        self.ports = {name: bound_address(port).port for name, port in listeners.items()}
        self.addresses = advertised_addresses(self.options, listeners)
        for i, (settings, port, _) in enumerate(kafka):
            host, number = kafka_advertised(settings, port, self.options.advertised_kafka if i == 0 else None)
            self.kafka_addresses[settings.name] = (host, number)
            names = [f"{KAFKA_LISTENER_PREFIX}{settings.name}"] + (["kafka"] if i == 0 else [])
            for name in names:
                self.ports[name] = bound_address(port).port
                self.addresses[name] = f"{host}:{number}"

    def start(self) -> None:
        """Reactor: build on a worker thread, then serve; a failure of either stops the reactor (exit 1)
        instead of leaving a node that never says ready."""
        threads.deferToThread(self.build).addCallback(self.serve).addErrback(self._start_failed)

    def _start_failed(self, failure: Failure) -> None:
        log.error("starting the cluster node failed:\n%s", failure.getTraceback())
        print(f"millrace: cannot start the cluster node: {type(failure.value).__name__}: {failure.getErrorMessage()}",
              file=sys.stderr, flush=True)
        self.failed = True
        if reactor.running:  # not if a signal is stopping it already
            reactor.stop()

    def build(self) -> _Built:
        """Blocking (worker thread): join the cluster, then build the controller, the Kafka views and the
        native listener's handlers. Whatever reads or writes a table is made here, never on the reactor:
        a table's container may be another node's, whose peer listener runs on that node's reactor, and
        two nodes started together would each wait there for the other (seen: the system tables the
        native handlers create, asked for from both reactors at once, and neither node ever ready)."""
        options, node_id = self.options, self.node_id
        self.node = node = build_cluster_node(options, self.setup, self.ports, self.addresses)
        node.start()
        assert node.client is not None and node.containers is not None
        local = LocalSegments(node.containers, options.containers)
        self.peer_factory.local = local  # peers reach this node's containers from now on
        self.router = router = cluster_router(options, node, local, self.setup.peer_tls)
        cluster = KafkaCluster(node.client, node.config.paths, node_id, node.containers, options.containers).start()
        # The controller, tables, Kafka views and the clients' native listener call the router (the
        # listener its never-blocking queries); the HTTP site reads this node's containers (NodeHttpView).
        kafka_host, kafka_port = _split(self.addresses["kafka"])
        config = kafka_config(options, kafka_host, kafka_port, node_id=int(node_id))
        for attempt in itertools.count(1):
            try:
                tables = TableStore(router)
                controller = Controller(router, tables)
                # The groups load on the reactor when first asked for (their timers are the reactor's), and
                # only on the node coordinating them (GroupCoordination).
                broker, kafka_factory = kafka_gateway(options, router, controller, tables, config, self.pool,
                                                      load_groups=False)
                broker.scram = scram_credentials(options, tables)
                broker.acls = kafka_acls(self.security, tables)
                broker.guards = connection_guards(self.security)
                broker.node_link = self.link
                # Blocking where the native listener serves OAUTHBEARER (its JWKS is read): here, not on the reactor.
                self.native_security = native_security(self.security, self.native, broker)
                # The native handlers create the subscriber, key-value and transaction tables they miss.
                native_factory = native_gateway(options, router, controller, self.pool, broker, transactions=False,
                                                security=self.native_security)
                # Native transactions: served by the owner of their table's container, forwarded there by the others.
                links = NodeLinks(broker, self.native_to_nodes)
                txn_commands, native_txns = cluster_txn_handlers(broker, cluster, links)
                break
            except SegmentNotFoundError as exc:
                # Nodes starting together each make the system tables they find missing: a table
                # another node is creating right now answers "exists" to our create and "not found" to
                # our read until its creation is applied. What the attempt wrote is idempotent (creates
                # that tolerate an existing table, puts conditional on absence): build again.
                if attempt >= _BUILD_ATTEMPTS or not str(exc).startswith("_system/"):
                    raise
                log.info("system table %s is being created elsewhere: building again", exc)
                time.sleep(0.2 * attempt)
        self.broker, self.links = broker, links
        return _Built(broker, kafka_factory, cluster, controller, native_factory, links, txn_commands, native_txns)

    def serve(self, built: _Built) -> None:
        """Reactor: open the listeners to clients and start the periodic work (nothing here may wait for
        the store: see ``build``)."""
        broker, kafka_factory, cluster, controller = built.broker, built.kafka_factory, built.cluster, built.controller
        native_factory, native_txns = built.native_factory, built.native_txns
        options = self.options
        assert self.node is not None and self.router is not None
        # Before the reactor joins its threads (an auto-scaler round, a login check) and ``close`` the
        # worker pool: a call waiting for a container's owner fails then instead of holding the stop up.
        reactor.addSystemEventTrigger("before", "shutdown", self.router.stop_waiting)
        broker.cluster = cluster
        broker.partitions.leadership = cluster
        groups = GroupCoordination(cluster, broker.groups)
        broker.groups.coordinator_check = groups.check
        # Before start_background: the transactions are served (and prepared ones completed) only in a
        # term of the transactions table's container here.
        transactions = TransactionCoordination(cluster, broker.transactions)
        broker.transactions.coordination = transactions.check
        assert broker.scram is not None  # loaded by build
        fronts = kafka_factories(self.security, broker, kafka_factory.connection_budget_bytes, broker.scram,
                                 self.kafka_addresses)
        for name, front in self.kafka_fronts.items():
            front.inner = fronts[name]
        native_factory.controller_commands.update(built.txn_commands)
        # Scope, stream and table changes run on the elected controller only; the other nodes send them there.

        def controller_place() -> str | None:
            if cluster.is_controller():
                return HERE
            info = cluster.controller_info()
            return None if info is None else native_endpoint(info)

        for command in CONTROLLER_CHANGES:
            native_factory.controller_commands[command] = forwarding(
                native_factory.controller_commands[command], controller_place, built.links, "the controller")

        def owner(r: m.GetSegmentOwner, _payload: bytes) -> m.SegmentOwnerReply:
            found = cluster.segment_owner(r.segment)
            return m.SegmentOwnerReply(container=found["container"], node=found["node"], native=found["native"])

        native_factory.controller_commands.update(handlers(
            # Clients learn every node from the first they reach (the Kafka side's Metadata does the same).
            serve(m.Hello, lambda r, p: m.HelloReply(version=PROTOCOL_VERSION,
                                                     nodes=tuple(cluster.native_endpoints()))),
            # Pravega's getURI: which node serves a segment (from the watched assignments: no I/O on the
            # reactor).
            serve(m.GetSegmentOwner, owner),
        ))
        self.native_front.inner = native_factory
        views = StreamViews(controller, self.pool, broker.scaling, topic_partitions(broker))
        node_view = NodeHttpView(self.router.local, self.router)
        node = self.node
        console = Console(node_view, views, broker,
                          cluster=lambda: describe_cluster(cluster, self.options.containers),
                          data_dir=os.path.abspath(self.options.data_dir))
        metrics = MetricsSources(node_view, broker, native_factory.requests,
                                 ClusterSources(lambda: node.client, self.router.local.host.ownership_changes),
                                 reader_groups=console.reader_groups)
        self.http_front.inner = http_site(node_view, views, http_access(self.security, broker), console,
                                          metrics=metrics, guards=broker.guards)
        console.start()
        self.loops.append(start_background(broker))

        # Each second: topics created through other nodes (their records are in the topics table), and
        # topics other nodes scaled (their partitions' open segments moved on): those are read again.
        def refresh() -> list[str]:
            broker.topics.refresh()
            if broker.scram is not None:
                broker.scram.load()  # SCRAM users another node changed
            broker.quotas.load()  # client quotas another node changed
            if broker.acls is not None:
                broker.acls.load()  # ACLs another node changed
            return out_of_date_topics(broker.topics, broker.partitions, broker.store)

        def reload(stale: list[str]) -> None:
            for name in stale:
                log.info("%s was scaled elsewhere: reloading it", name)
                broker.partitions.reload(name)

        self._every(1.0, lambda: broker.blocking(refresh).addCallback(reload).addErrback(
            lambda f: log.warning("refreshing topics failed: %s", f.getErrorMessage())), "refreshing topics")
        # Drops the groups as soon as their container moves away (not only at the next group request).
        self._every(0.5, groups.check, "the group coordination check")
        self._every(0.5, native_txns, "the native transactions' coordination check")
        # Likewise the transactions; and a new coordinator completes prepared transactions unasked.
        self._every(0.5, transactions.check, "the transaction coordination check")
        # The controller's timers run on one node at a time: the auto-scaler follows the assigner
        # election (rates of other nodes' segments come over the wire: SEGMENT_RATES).
        self.autoscaler = autoscaler(options, controller, self.router, broker)
        self._every(0.5, ControllerRole(self.node, self.autoscaler).follow, "following the controller election")
        for i, settings in enumerate(self.security.listeners):
            name = "kafka" if i == 0 else f"{KAFKA_LISTENER_PREFIX}{settings.name}"
            print_line(f"millrace: {name} listening on {settings.endpoint.host}:{self.ports[name]} "
                       f"(advertised {self.addresses[name]})")
        for name in ("native", "peer", "http"):
            print_line(f"millrace: {name} listening on {options.host}:{self.ports[name]} "
                       f"(advertised {self.addresses[name]})")
        print_line(f"millrace: ready (cluster node {self.node_id})")

    def _every(self, seconds: float, fn: Callable[[], object], what: str) -> None:
        self.loops.append(every(seconds, fn, what))

    def close(self) -> None:
        """After the reactor stopped: the periodic work, the router, the worker pool, the node (its
        containers close). The router stopped waiting for owners when the shutdown began (``serve``), and
        closes before the pool is joined, so no worker waits for a container nobody will take."""
        for loop in self.loops:
            if loop.running:
                loop.stop()
        if self.autoscaler is not None:
            self.autoscaler.stop()
        if self.broker is not None:
            self.broker.transactions.stop()
        if self.router is not None:
            self.router.close()
        self.pool.shutdown(wait=True)
        if self.links is not None:
            self.links.close()
        if self.node is not None:
            self.node.close()
