"""The embedded single-node server: segment store + controller + the Twisted listeners."""

from __future__ import annotations

import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from twisted.internet import reactor
from twisted.internet.interfaces import IListeningPort

from millrace.gateway.http.console import Console
from millrace.gateway.http.site import StreamViews, http_site
from millrace.gateway.kafka.setup import start_background
from millrace.gateway.shared.assembly import (
    add_scram_items,
    autoscaler,
    bound_address,
    build_store,
    connection_guards,
    http_access,
    http_tls,
    kafka_acls,
    kafka_config,
    kafka_gateway,
    kafka_security,
    listen,
    listen_kafka,
    native_gateway,
    native_security,
    native_settings,
    native_tls,
    pravega_controller,
    pravega_segment_store,
    scram_credentials,
    topic_partitions,
)
from millrace.gateway.shared.metrics import MetricsSources
from millrace.gateway.shared.options import ServerOptions
from millrace.store.controller import Controller
from millrace.store.process_output import print_line
from millrace.store.tables import TableStore
from millrace.streams.futures import check_reactor_waits

log = logging.getLogger("millrace")


def announce(what: str, port: IListeningPort) -> None:
    address = bound_address(port)
    print_line(f"millrace: {what} listening on {address.host}:{address.port}")


def serve(options: ServerOptions) -> int:
    """Run until SIGINT/SIGTERM; returns the process exit status."""
    try:
        security = kafka_security(options)
        native = native_settings(options)  # the native listener, secured as a listener named NATIVE
    except (OSError, ValueError) as exc:  # ConfigError names the property; an unreadable --config file
        print(f"millrace: bad Kafka configuration: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        add_scram_items(options)
    except ValueError as exc:  # names the file or variable, never a password
        print(f"millrace: {exc}", file=sys.stderr, flush=True)
        return 2
    log.info("Kafka listeners:\n%s", security.describe())
    store = build_store(options)
    # Controller and Kafka metadata calls block on table-segment I/O; they run here, never on the reactor.
    controller_pool = ThreadPoolExecutor(8, "controller")
    try:
        store.start()
        tables = TableStore(store)
        controller = Controller(store, tables)
        config = kafka_config(options, options.host, options.kafka_port)
        broker, kafka_factory = kafka_gateway(options, store, controller, tables, config, controller_pool)
        broker.scram = scram = scram_credentials(options, tables)
        broker.acls = kafka_acls(security, tables)
        broker.guards = connection_guards(security)
    except Exception as exc:  # noqa: BLE001 - report why the store cannot start, then exit non-zero
        print(f"millrace: cannot start the segment store: {exc}", file=sys.stderr, flush=True)
        controller_pool.shutdown(wait=False)
        store.close()
        return 1
    views = StreamViews(controller, controller_pool, broker.scaling, topic_partitions(broker))
    try:
        kafka_listeners = listen_kafka(security, broker, kafka_factory.connection_budget_bytes, scram)
        native_factory = native_gateway(options, store, controller, controller_pool, broker,
                                        security=native_security(security, native, broker))
        console = Console(store, views, broker, data_dir=os.path.abspath(options.data_dir))
        metrics = MetricsSources(store, broker, native_factory.requests, reader_groups=console.reader_groups)
        listeners = listen(options, {"native": native_factory,
                                     "http": http_site(store, views, http_access(security, broker), console,
                                                       metrics, guards=broker.guards)},
                           {**http_tls(security), **native_tls(native)},
                           handshake_timeout_ms=security.limits.authentication_timeout_ms)
        # Pravega's segment store on the reactor, then its controller API (grpcio's server on threads of
        # its own), whose getURI answers the segment store's bound port.
        segment_store = pravega_segment_store(options, security, native, store, controller, broker, controller_pool,
                                              native_factory.requests)
        pravega_segments = None
        if segment_store is not None:
            segment_factory, segment_port = segment_store
            pravega_segments = reactor.listenTCP(segment_port, segment_factory, interface=options.host)
        pravega = pravega_controller(options, security, native, store, controller, broker, controller_pool,
                                     bound_address(pravega_segments).port if pravega_segments is not None else 0)
    except Exception as exc:  # noqa: BLE001 - e.g. a port in use
        print(f"millrace: cannot listen: {exc}", file=sys.stderr, flush=True)
        controller_pool.shutdown(wait=False)
        store.close()
        return 1
    if pravega is not None:
        pravega.start()
    start_background(broker)
    console.start()
    scaler = autoscaler(options, controller, store, broker)
    scaler.start(reactor)
    for i, (settings, port) in enumerate(kafka_listeners):
        announce("kafka" if i == 0 else f"kafka:{settings.name}", port)
    for name, port in listeners.items():
        announce(name, port)
    if pravega is not None:
        print_line(f"millrace: pravega controller listening on {pravega.host}:{pravega.port}")
    if pravega_segments is not None:
        announce("pravega segment store", pravega_segments)
    print_line(f"millrace: ready (data dir {os.path.abspath(options.data_dir)})")
    check_reactor_waits()
    # Twisted's own signal handlers stop the reactor on SIGINT and SIGTERM.
    reactor.run()
    if pravega is not None:
        pravega.stop()  # calls under way finish (or are cancelled) before the controller's pool and store close
    scaler.stop()
    controller_pool.shutdown(wait=True)
    store.close()
    print_line("millrace: stopped cleanly")
    return 0
