"""The embedded single-node server: segment store + controller + the Twisted listeners."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from twisted.internet import reactor
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IListeningPort

from millrace.gateway.http import StreamViews, http_site
from millrace.gateway.kafka.broker import Broker, KafkaConfig
from millrace.gateway.kafka.setup import build_kafka, start_background
from millrace.gateway.native.handler import NativeFactory
from millrace.gateway.options import ServerOptions
from millrace.store.budget import MIB
from millrace.store.containers.config import ContainerConfig
from millrace.store.containers.rates import RateConfig
from millrace.store.controller import Controller
from millrace.store.controller.autoscaler import AutoScaler, AutoScalerConfig
from millrace.store.durablelog.interface import DurableDataLog
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.durablelog.metadata import FileLogMetadataStore
from millrace.store.durablelog.replicated import ReplicatedDurableDataLog, ReplicationConfig
from millrace.store.lts.factory import chunk_storage_from_url
from millrace.store.segment_store import SegmentStore
from millrace.store.tables import TableStore

log = logging.getLogger("millrace")


def log_factory(options: ServerOptions, data_dir: str) -> Callable[[int], DurableDataLog]:
    """The durable log of each container: local files, or replicated on the named log replicas."""
    if not options.log_replicas:
        return lambda cid: FileDurableDataLog(os.path.join(data_dir, "logs", f"container-{cid}"))
    replicas = tuple(a.strip() for a in options.log_replicas.split(",") if a.strip())
    config = ReplicationConfig(replicas, options.write_quorum, options.ack_quorum)
    metadata = FileLogMetadataStore(os.path.join(data_dir, "logmeta"))
    return lambda cid: ReplicatedDurableDataLog(f"container-{cid}", metadata, config)


def build_store(options: ServerOptions) -> SegmentStore:
    data_dir = os.path.abspath(options.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    storage = chunk_storage_from_url(options.lts or os.path.join(data_dir, "lts"), options.s3_endpoint)
    config = replace(ContainerConfig(), cache_max_bytes=options.cache_mb * 1024 * 1024 // options.containers)
    return SegmentStore(
        options.containers,
        log_factory(options, data_dir),
        storage,
        config,
        rates=RateConfig(windows=tuple(options.scale_windows)),
        container_budget_bytes=options.container_budget_mb * MIB,
    )


def bound_address(port: IListeningPort) -> IPv4Address | IPv6Address:
    """The address a TCP listener is bound to."""
    address = port.getHost()
    if not isinstance(address, IPv4Address | IPv6Address):
        raise TypeError(f"not a TCP listener: {address!r}")
    return address


def announce(what: str, port: IListeningPort) -> None:
    address = bound_address(port)
    print(f"millrace: {what} listening on {address.host}:{address.port}", flush=True)


def topic_partitions(broker: Broker) -> Callable[[str, str], tuple[tuple[float, float], ...] | None]:
    """``partitions_of(scope, stream)``: the partition slices of a Kafka topic or of a stream event
    writers have partitioned, None for other streams (an in-memory lookup, safe from any thread)."""

    def partitions_of(scope: str, stream: str) -> tuple[tuple[float, float], ...] | None:
        topic = broker.topics.of_stream(scope, stream)
        return None if topic is None else topic.slices

    return partitions_of


def serve(options: ServerOptions) -> int:
    """Run until SIGINT/SIGTERM; returns the process exit status."""
    if options.zookeeper:
        from millrace.gateway.cluster_server import serve_cluster

        return serve_cluster(options)
    store = build_store(options)
    # Controller and Kafka metadata calls block on table-segment I/O; they run here, never on the reactor.
    controller_pool = ThreadPoolExecutor(8, "controller")
    try:
        store.start()
        tables = TableStore(store)
        controller = Controller(store, tables)
        kafka_config = KafkaConfig(
            scope=options.kafka_scope,
            advertised_host=options.host,
            auto_create_topics=options.auto_create_topics,
            default_partitions=options.default_partitions,
            retention_check_seconds=options.retention_check_seconds,
            transaction_check_seconds=options.transaction_check_seconds,
            producer_id_expiration_ms=options.producer_id_expiration_ms,
            native_txn_retention_ms=options.native_txn_retention_ms,
            log_dir=os.path.abspath(options.data_dir),
        )
        broker, kafka_factory = build_kafka(store, controller, tables, kafka_config, controller_pool)
        kafka_factory.connection_budget_bytes = options.connection_budget_mb * MIB
    except Exception as exc:  # noqa: BLE001 - report why the store cannot start, then exit non-zero
        print(f"millrace: cannot start the segment store: {exc}", file=sys.stderr, flush=True)
        controller_pool.shutdown(wait=False)
        store.close()
        return 1
    try:
        kafka = reactor.listenTCP(options.kafka_port, kafka_factory, interface=options.host)
        # The port clients must be told about in Metadata is the one actually bound (0 = any).
        kafka_config.advertised_port = bound_address(kafka).port
        partitions_of = topic_partitions(broker)
        native_factory = NativeFactory(store, controller, controller_pool, broker.scaling, partitions_of,
                                       connection_budget_bytes=options.connection_budget_mb * MIB,
                                       broker=broker)
        native = reactor.listenTCP(options.native_port, native_factory, interface=options.host)
        views = StreamViews(controller, controller_pool, broker.scaling, partitions_of)
        # Twisted declares listenTCP's factory as an invariant ServerFactory[_ProtoWithFactory], which its
        # own Site (a ServerFactory[HTTPChannel]) does not match.
        http = reactor.listenTCP(options.http_port, http_site(store, views),  # type: ignore[arg-type]
                                 interface=options.host)
    except Exception as exc:  # noqa: BLE001 - e.g. a port in use
        print(f"millrace: cannot listen: {exc}", file=sys.stderr, flush=True)
        controller_pool.shutdown(wait=False)
        store.close()
        return 1
    start_background(broker)
    autoscaler = AutoScaler(
        controller, store,
        config=AutoScalerConfig(interval=options.scale_interval_seconds, cooldown=options.scale_cooldown_seconds),
        boundaries=broker.scaling.boundaries, executor=broker.scaling.execute,
        grow_partitions=broker.scaling.grow_partitions,
    )
    autoscaler.start(reactor)
    announce("kafka", kafka)
    announce("native", native)
    announce("http", http)
    print(f"millrace: ready (data dir {os.path.abspath(options.data_dir)})", flush=True)
    # Twisted's own signal handlers stop the reactor on SIGINT and SIGTERM.
    reactor.run()
    autoscaler.stop()
    controller_pool.shutdown(wait=True)
    store.close()
    print("millrace: stopped cleanly", flush=True)
    return 0
