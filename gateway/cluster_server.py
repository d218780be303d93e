"""``millrace serve --zookeeper HOST:PORT[/chroot] --node-id N``: one segment-store node of a cluster.

What differs from the embedded server (``server.serve``, which stays as it is):

- the node's containers are the ones ZooKeeper assigns it (``ClusterNode``), each over its replicated
  log (``--log-replicas``; a container's log must be reachable from whichever node owns it next), with
  long-term storage shared by every node (``--lts``, required);
- the controller, the tables and the gateways call a ``ClusterSegmentStore``: each segment operation
  runs on the owner of the segment's container;
- a third listener, ``peer``, serves the node's own containers to the other nodes (``LocalSegments``):
  a forwarded request is never forwarded again, and a node that no longer runs the container answers
  CONTAINER_OFFLINE. Clients' native segment commands, on the native listener, use the router;
- Kafka: Metadata lists every live node and each partition's leader (the owner of the container of
  its open segment); other nodes answer NOT_LEADER_OR_FOLLOWER, and the group coordinator is the owner
  of the groups table's container (``gateway/kafka/cluster.py``);
- each listener is advertised (in ``nodes/<id>`` and to Kafka clients) as ``--advertised-kafka`` etc.,
  as Kafka's advertised.listeners: a node bound to 0.0.0.0 must not send clients to 0.0.0.0.

The listeners are bound first (their ports go into the node's registration), and accept connections
only once the node and its gateways are built (``LateFactory``).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from twisted.internet import protocol, reactor, task
from twisted.internet.interfaces import IListeningPort

from millrace.gateway.kafka.broker import KafkaConfig
from millrace.gateway.kafka.cluster import GroupCoordination, KafkaCluster, out_of_date_topics
from millrace.gateway.kafka.setup import build_kafka, start_background
from millrace.gateway.native.handler import NativeFactory, NativeProtocol
from millrace.gateway.server import topic_partitions
from millrace.protocol.wire import Command
from millrace.store.budget import MIB
from millrace.store.cluster.containers import SegmentContainerHost
from millrace.store.cluster.layout import NodeInfo, check_node_id
from millrace.store.cluster.node import ClusterNode, ClusterNodeConfig
from millrace.store.cluster.routing import ClusterSegmentStore, LocalSegments
from millrace.store.containers.config import ContainerConfig
from millrace.store.containers.rates import RateConfig
from millrace.store.controller import Controller
from millrace.store.controller.autoscaler import AutoScaler, AutoScalerConfig
from millrace.store.durablelog.replicated import ReplicationConfig
from millrace.store.lts.factory import chunk_storage_from_url
from millrace.store.tables import TableStore

if TYPE_CHECKING:
    from millrace.gateway.server import ServerOptions

log = logging.getLogger("millrace")

_ANY_ADDRESS = ("0.0.0.0", "::", "")


class LateFactory(protocol.ServerFactory):
    """A listener bound before what serves it exists: connections are closed until ``inner`` is set."""

    inner: protocol.ServerFactory | None = None

    def buildProtocol(self, addr: Any) -> Any:  # noqa: N802 - Twisted's name
        return None if self.inner is None else self.inner.buildProtocol(addr)


class PeerFactory(protocol.ServerFactory):
    """The peer listener: the node's own containers only (``LocalSegments``), segment commands only."""

    local: LocalSegments | None = None

    def buildProtocol(self, addr: Any) -> NativeProtocol | None:  # noqa: N802 - Twisted's name
        if self.local is None:
            return None
        # NativeProtocol is typed to SegmentStore; LocalSegments offers the segment commands it calls.
        return NativeProtocol(self.local, {})  # type: ignore[arg-type]


def advertised(bind_host: str, port: IListeningPort, given: str | None) -> str:
    """``host:port`` to give clients and peers for a listener: ``given``, else the bind address, else
    (bound to every interface) this machine's host name, as Kafka does without advertised.listeners."""
    if given:
        host, sep, number = given.rpartition(":")
        if not sep or not host or not number.isdigit():
            raise ValueError(f"expected HOST:PORT, got {given!r}")
        return given
    host = socket.getfqdn() if bind_host in _ANY_ADDRESS else bind_host
    return f"{host}:{port.getHost().port}"  # type: ignore[attr-defined]


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
        node_id = check_node_id(str(options.node_id))
        if not node_id.isdigit():
            raise ValueError(f"--node-id {node_id!r}: Kafka clients need a number")
        if not options.lts:
            raise ValueError("--lts is required with --zookeeper: long-term storage must be shared by every node")
        if not options.log_replicas:
            raise ValueError("--log-replicas is required with --zookeeper: a container's log must be reachable "
                             "from the node that owns it next")
        replicas = tuple(a.strip() for a in options.log_replicas.split(",") if a.strip())
        replication = ReplicationConfig(replicas, options.write_quorum, options.ack_quorum)
        storage = chunk_storage_from_url(options.lts, options.s3_endpoint)
    except ValueError as exc:
        print(f"millrace: {exc}", file=sys.stderr, flush=True)
        return 2

    kafka_front, native_front, peer_factory = LateFactory(), LateFactory(), PeerFactory()
    try:
        kafka = reactor.listenTCP(options.kafka_port, kafka_front, interface=options.host)
        native = reactor.listenTCP(options.native_port, native_front, interface=options.host)
        peer = reactor.listenTCP(options.peer_port, peer_factory, interface=options.host)
        addresses = {"kafka": advertised(options.host, kafka, options.advertised_kafka),
                     "native": advertised(options.host, native, options.advertised_native),
                     "peer": advertised(options.host, peer, options.advertised_peer)}
    except Exception as exc:  # noqa: BLE001 - e.g. a port in use, a malformed address
        print(f"millrace: cannot listen: {exc}", file=sys.stderr, flush=True)
        return 1
    ports = {name: p.getHost().port for name, p in (("kafka", kafka), ("native", native), ("peer", peer))}  # type: ignore[attr-defined]
    info = NodeInfo(node_id, options.host, ports, addresses)
    config = ClusterNodeConfig(options.zookeeper or "", info, options.containers, replication,
                               options.session_timeout_seconds)
    container_config = replace(ContainerConfig(), cache_max_bytes=options.cache_mb * MIB // options.containers)
    pool = ThreadPoolExecutor(8, "controller")
    rates = RateConfig(windows=tuple(options.scale_windows))
    node = ClusterNode(config, storage, container_config, host_factory=partial(SegmentContainerHost, rates=rates))
    router: ClusterSegmentStore | None = None
    try:
        node.start()
        assert node.client is not None and node.containers is not None
        local = LocalSegments(node.containers, options.containers)
        peer_factory.local = local  # peers reach this node's containers from now on
        router = ClusterSegmentStore(node.client, config.paths, node_id, local, options.retry_bound_seconds)
        cluster = KafkaCluster(node.client, config.paths, node_id, node.containers, options.containers).start()
        # The controller, tables and Kafka views call only SegmentService operations on this store
        # (docs/architecture.md lists the gateway parts that still need a SegmentStore: not started here).
        store: Any = router
        tables = TableStore(router)
        controller = Controller(store, tables)
        kafka_host, kafka_port = _split(addresses["kafka"])
        kafka_config = KafkaConfig(
            scope=options.kafka_scope, node_id=int(node_id), advertised_host=kafka_host, advertised_port=kafka_port,
            auto_create_topics=options.auto_create_topics, default_partitions=options.default_partitions,
            retention_check_seconds=options.retention_check_seconds,
            transaction_check_seconds=options.transaction_check_seconds,
            producer_id_expiration_ms=options.producer_id_expiration_ms,
            native_txn_retention_ms=options.native_txn_retention_ms, log_dir=os.path.abspath(options.data_dir))
        broker, kafka_factory = build_kafka(store, controller, tables, kafka_config, pool)
    except Exception as exc:  # noqa: BLE001 - report why the node cannot start, then exit non-zero
        print(f"millrace: cannot start the cluster node: {exc}", file=sys.stderr, flush=True)
        pool.shutdown(wait=False)
        if router is not None:
            router.close()
        node.close()
        return 1
    broker.cluster = cluster
    broker.partitions.leadership = cluster
    groups = GroupCoordination(cluster, broker.groups)
    broker.groups.coordinator_check = groups.check
    kafka_factory.connection_budget_bytes = options.connection_budget_mb * MIB
    kafka_front.inner = kafka_factory
    native_factory = NativeFactory(store, controller, pool, broker.scaling, topic_partitions(broker),
                                   connection_budget_bytes=options.connection_budget_mb * MIB, broker=broker)
    # Pravega's getURI: which node serves a segment (from the watched assignments: no I/O on the reactor).
    native_factory.controller_commands[Command.GET_SEGMENT_OWNER] = lambda h, p: cluster.segment_owner(h["segment"])
    native_front.inner = native_factory
    retention = start_background(broker)
    # Each second: topics created through other nodes (their records are in the topics table), and topics
    # other nodes scaled (their partitions' open segments moved on): those are read again.
    def refresh() -> list[str]:
        broker.topics.refresh()
        return out_of_date_topics(broker)

    def reload(stale: list[str]) -> None:
        for name in stale:
            log.info("%s was scaled elsewhere: reloading it", name)
            broker.partitions.reload(name)

    topics = task.LoopingCall(lambda: broker.blocking(refresh).addCallback(reload).addErrback(
        lambda f: log.warning("refreshing topics failed: %s", f.getErrorMessage())))
    topics.start(1.0, now=False)
    # Drops the groups as soon as their container moves away (not only at the next group request).
    coordination = task.LoopingCall(groups.check)
    coordination.start(0.5, now=False)
    # The controller's timers run on one node at a time: the auto-scaler follows the assigner election
    # (rates of other nodes' segments come over the wire: SEGMENT_RATES).
    autoscaler = AutoScaler(
        controller, router,
        config=AutoScalerConfig(interval=options.scale_interval_seconds, cooldown=options.scale_cooldown_seconds),
        boundaries=broker.scaling.boundaries, executor=broker.scaling.execute,
        grow_partitions=broker.scaling.grow_partitions)
    controller_role = ControllerRole(node, autoscaler)
    election = task.LoopingCall(controller_role.follow)
    election.start(0.5, now=True)
    for name in ("kafka", "native", "peer"):
        print(f"millrace: {name} listening on {options.host}:{ports[name]} (advertised {addresses[name]})", flush=True)
    print(f"millrace: ready (cluster node {node_id})", flush=True)
    reactor.run()
    for loop in (election, coordination, topics, retention):
        if loop.running:
            loop.stop()
    autoscaler.stop()
    broker.transactions.stop()
    pool.shutdown(wait=True)
    router.close()
    node.close()
    print("millrace: stopped cleanly", flush=True)
    return 0
