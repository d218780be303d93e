"""A server's parts, made from its options: the one place ``ServerOptions`` are turned into things.

``millrace serve`` (gateway/commands/cli.py) parses its flags into ``ServerOptions`` and runs the embedded single
node (``server.serve``) or, with ``--zookeeper``, one node of a cluster (``cluster_server.serve_cluster``).
Those two own their lifecycles (what starts when, on which thread, how it stops); what each part is made
of is decided here, once for both: the Kafka configuration, the containers' configuration and rate
windows, long-term storage and the durable logs, the store (a ``SegmentStore``, or a ``ClusterNode`` and
its router), the Kafka and native gateways, Pravega's controller API, the auto-scaler, and the listeners
with the addresses they are advertised as. A new option is a field below, a flag in cli.py and the one
function here reading it.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar, cast

from twisted.internet import protocol, reactor
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IListeningPort, IReactorTCP

from millrace.gateway.http.site import HttpAccess
from millrace.gateway.kafka.broker import Broker, KafkaConfig
from millrace.gateway.kafka.connection import ConnectionLimit, KafkaFactory
from millrace.gateway.kafka.node_requests import NodeLink
from millrace.gateway.kafka.sessions import KafkaListener
from millrace.gateway.kafka.setup import build_kafka
from millrace.gateway.native.forwarding import NativeLink
from millrace.gateway.native.handler import NativeFactory
from millrace.gateway.native.security import NativeSecurity
from millrace.gateway.pravega.controller_service import PravegaControllerService
from millrace.gateway.pravega.listener import PravegaControllerListener
from millrace.gateway.pravega.segment_store import PravegaSegmentStoreFactory
from millrace.gateway.security.acl_table import AclTable
from millrace.gateway.security.credentials import (
    ListenerCredentials,
    ScramCredentialTable,
    read_add_scram_items,
)
from millrace.gateway.security.http_auth import HttpAuthenticator
from millrace.gateway.security.oauth import JwtValidator
from millrace.gateway.security.principal import KafkaPrincipal
from millrace.gateway.security.properties import (
    JAVA_INT_MAX,
    ConfigError,
    ListenerSettings,
    SecuritySettings,
    SslSettings,
    apply_overrides,
    connection_limits,
    load_properties,
    native_listener_settings,
    refuse_secrets_in_overrides,
    security_settings,
)
from millrace.gateway.security.sasl_client import CLIENT_MECHANISMS, SaslLogin
from millrace.gateway.security.tls import (
    ServerTls,
    TlsConfigError,
    client_ssl_context,
    client_tls,
    listen_tls,
)
from millrace.gateway.shared.limits import ConnectionGuards
from millrace.gateway.shared.options import ServerOptions
from millrace.gateway.shared.request_metrics import RequestMetrics
from millrace.store.budget import MIB
from millrace.store.cluster.containers import SegmentContainerHost
from millrace.store.cluster.layout import NodeInfo, check_node_id
from millrace.store.cluster.node import ClusterNode, ClusterNodeConfig
from millrace.store.cluster.peer_tls import PeerTls
from millrace.store.cluster.routing import ClusterSegmentStore, LocalSegments
from millrace.store.cluster.zk_auth import ZooKeeperCredentials
from millrace.store.cluster.zk_tls import ZooKeeperTls
from millrace.store.containers.config import ContainerConfig
from millrace.store.containers.rates import RateConfig
from millrace.store.contracts import SegmentService
from millrace.store.controller import Controller
from millrace.store.controller.autoscaler import AutoScaler, AutoScalerConfig
from millrace.store.durablelog.curve import CurveClientKeys
from millrace.store.durablelog.interface import DurableDataLog
from millrace.store.durablelog.kernel_sync import KernelSyncs
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.durablelog.metadata import FileLogMetadataStore
from millrace.store.durablelog.replicated import ReplicatedDurableDataLog
from millrace.store.durablelog.replication_config import ReplicationConfig
from millrace.store.durablelog.turn_commits import TurnCommits
from millrace.store.fsutil import private_directory
from millrace.store.lts.factory import chunk_storage_from_url
from millrace.store.lts.interface import ChunkStorage
from millrace.store.segment_store import SegmentStore
from millrace.store.tables import TableStore
from millrace.streams.futures import ReactorLoop
from millrace.streams.segment_gate import SegmentGate

_ANY_ADDRESS = ("0.0.0.0", "::", "")
log = logging.getLogger("millrace")


# Stores: the containers, their logs and long-term storage.

def container_config(options: ServerOptions) -> ContainerConfig:
    """Every container's configuration: the read cache budget is shared by a node's containers."""
    return replace(ContainerConfig(), cache_max_bytes=options.cache_mb * MIB // options.containers,
                   flush_age_seconds=options.flush_age_seconds)


def rate_config(options: ServerOptions) -> RateConfig:
    """The rate windows every container measures (the auto-scaler's policies read them)."""
    return RateConfig(windows=tuple(options.scale_windows))


def replication_config(options: ServerOptions) -> ReplicationConfig | None:
    """Where and how the containers' logs are replicated; None without ``--log-replicas`` (local files)."""
    if not options.log_replicas:
        return None
    replicas = tuple(a.strip() for a in options.log_replicas.split(",") if a.strip())
    return ReplicationConfig(replicas, options.write_quorum, options.ack_quorum, curve=log_curve(options))


def log_curve(options: ServerOptions) -> CurveClientKeys | None:
    """CURVE keys for the links to the log replicas (CurveKeyError, a ValueError, naming a bad file)."""
    if not options.log_curve_secret_key and not options.log_curve_server_key:
        return None
    if not (options.log_curve_secret_key and options.log_curve_server_key):
        raise ValueError("--log-curve-secret-key and --log-curve-server-key go together")
    return CurveClientKeys.load(options.log_curve_secret_key, options.log_curve_server_key)


def long_term_storage(options: ServerOptions) -> ChunkStorage:
    return chunk_storage_from_url(options.lts or os.path.join(os.path.abspath(options.data_dir), "lts"),
                                  options.s3_endpoint)


def log_factory(options: ServerOptions, data_dir: str) -> Callable[[int], DurableDataLog]:
    """The durable log of each container: local files, or replicated on the named log replicas."""
    replication = replication_config(options)
    if replication is None:
        turns = TurnCommits(ReactorLoop(), KernelSyncs.open())
        return lambda cid: FileDurableDataLog(os.path.join(data_dir, "logs", f"container-{cid}"), turns=turns)
    metadata = FileLogMetadataStore(os.path.join(data_dir, "logmeta"))
    return lambda cid: ReplicatedDurableDataLog(f"container-{cid}", metadata, replication)


def build_store(options: ServerOptions) -> SegmentStore:
    """The single node's store: every container, here."""
    data_dir = os.path.abspath(options.data_dir)
    private_directory(data_dir)
    return SegmentStore(
        options.containers,
        log_factory(options, data_dir),
        long_term_storage(options),
        container_config(options),
        rates=rate_config(options),
        container_budget_bytes=options.container_budget_mb * MIB,
    )


@dataclass(frozen=True)
class ClusterNodeSetup:
    """What a cluster node needs before it listens: its id, its logs' replication (every container's log
    must be reachable from whichever node owns it next) and the long-term storage all nodes share; on a
    secured cluster its ZooKeeper identity, the peer listener's mutual TLS and TLS to ZooKeeper."""

    node_id: str
    replication: ReplicationConfig
    storage: ChunkStorage
    zookeeper_credentials: ZooKeeperCredentials | None = None
    peer_tls: PeerTls | None = None
    zookeeper_tls: ZooKeeperTls | None = None


def cluster_node_setup(options: ServerOptions) -> ClusterNodeSetup:
    """ValueError, naming the flag, when the options cannot make a cluster node."""
    node_id = check_node_id(str(options.node_id))
    if not node_id.isdigit():
        raise ValueError(f"--node-id {node_id!r}: Kafka clients need a number")
    if not options.lts:
        raise ValueError("--lts is required with --zookeeper: long-term storage must be shared by every node")
    replication = replication_config(options)
    if replication is None:
        raise ValueError("--log-replicas is required with --zookeeper: a container's log must be reachable "
                         "from the node that owns it next")
    credentials = (ZooKeeperCredentials.load(options.zookeeper_credentials)  # ZooKeeperCredentialsError
                   if options.zookeeper_credentials else None)
    peer_tls = PeerTls.from_flags(options.peer_tls_keystore, options.peer_tls_truststore)  # PeerTlsError
    zookeeper_tls = ZooKeeperTls.from_flags(options.zookeeper_tls_keystore,  # ZooKeeperTlsError
                                            options.zookeeper_tls_truststore)
    return ClusterNodeSetup(node_id, replication, long_term_storage(options), credentials, peer_tls, zookeeper_tls)


def peer_server_tls(setup: ClusterNodeSetup) -> ServerTls | None:
    """The peer listener's TLS on a secured cluster: this node's certificate, and a certificate the cluster
    CA signed required of every connecting node (store/cluster/peer_tls.py); None: plain TCP."""
    tls = setup.peer_tls
    if tls is None:
        return None
    try:
        return ServerTls(SslSettings(keystore_location=tls.keystore, truststore_location=tls.truststore,
                                     client_auth="required"))
    except TlsConfigError as e:
        raise ValueError(f"--peer-tls-keystore/--peer-tls-truststore: {e}") from None


def build_cluster_node(options: ServerOptions, setup: ClusterNodeSetup, ports: Mapping[str, int],
                       addresses: Mapping[str, str]) -> ClusterNode:
    """A cluster node, not started: it registers with its listeners' ports and advertised addresses."""
    info = NodeInfo(setup.node_id, options.host, dict(ports), dict(addresses))
    config = ClusterNodeConfig(options.zookeeper or "", info, options.containers, setup.replication,
                               options.session_timeout_seconds, credentials=setup.zookeeper_credentials,
                               tls=setup.zookeeper_tls)
    return ClusterNode(config, setup.storage, container_config(options),
                       host_factory=partial(SegmentContainerHost, rates=rate_config(options),
                                            container_budget_bytes=options.container_budget_mb * MIB))


def cluster_router(options: ServerOptions, node: ClusterNode, local: LocalSegments,
                   peer_tls: PeerTls | None = None) -> ClusterSegmentStore:
    """A started node's store as every part of it calls it: each segment operation on its container's
    owner (over mutual TLS to the others' peer listeners with ``peer_tls``). Partitioned from ZooKeeper
    past its session, the node fails calls needing an owner at once instead of holding its clients for
    the retry bound."""
    assert node.client is not None and node.member is not None, "the node is not started"
    return ClusterSegmentStore(node.client, node.config.paths, node.config.info.node_id, local,
                               options.retry_bound_seconds, cut_off=node.member.cut_off,
                               peer_tls=None if peer_tls is None else peer_tls.client_context())


# Gateways: Kafka, native, and the controller's auto-scaler.

def kafka_config(options: ServerOptions, advertised_host: str, advertised_port: int, node_id: int = 0) -> KafkaConfig:
    """The Kafka gateway's configuration; clients are sent to ``advertised_host:advertised_port``."""
    return KafkaConfig(
        scope=options.kafka_scope,
        node_id=node_id,
        advertised_host=advertised_host,
        advertised_port=advertised_port,
        auto_create_topics=options.auto_create_topics,
        default_partitions=options.default_partitions,
        retention_check_seconds=options.retention_check_seconds,
        transaction_check_seconds=options.transaction_check_seconds,
        producer_id_expiration_ms=options.producer_id_expiration_ms,
        native_txn_retention_ms=options.native_txn_retention_ms,
        state_snapshot_bytes=options.state_snapshot_bytes,
        fetch_memory_bytes=options.fetch_budget_mb * MIB,
        group_initial_rebalance_delay_ms=options.group_initial_rebalance_delay_ms,
        log_dir=os.path.abspath(options.data_dir),
        max_request_bytes=connection_limits(kafka_properties(options)).socket_request_max_bytes,
        **quota_windows(kafka_properties(options)),
    )


def connection_guards(security: SecuritySettings) -> ConnectionGuards:
    """What every listener of this server holds its clients to, shared between them (``gateway.shared.limits``):
    ``security``'s limits, one memory pool, one count of failed logins."""
    return ConnectionGuards(security.limits, security.sasl_server_max_receive_size)


def quota_windows(props: dict[str, str]) -> dict[str, Any]:
    """Kafka's ``quota.window.num`` and ``quota.window.size.seconds`` (client quotas' rate windows), if set."""
    windows: dict[str, Any] = {}
    for prop, name, kind in (("quota.window.num", "quota_window_num", int),
                             ("quota.window.size.seconds", "quota_window_seconds", int)):
        if prop in props:
            value = kind(props[prop])
            if value < 1:
                raise ValueError(f"{prop} must be at least 1, not {value}")
            windows[name] = value
    return windows


def kafka_gateway(options: ServerOptions, store: SegmentService, controller: Controller, tables: TableStore,
                  config: KafkaConfig, pool: ThreadPoolExecutor, load_groups: bool = True,
                  ) -> tuple[Broker, KafkaFactory]:
    """Blocking (recovers the Kafka metadata, ``build_kafka``): the broker and its listener's factory."""
    broker, factory = build_kafka(store, controller, tables, config, pool, load_groups=load_groups)
    factory.connection_budget_bytes = options.connection_budget_mb * MIB
    return broker, factory


def topic_partitions(broker: Broker) -> Callable[[str, str], tuple[tuple[float, float] | None, ...] | None]:
    """``partitions_of(scope, stream)``: the partition slices of a Kafka topic or of a stream event
    writers have partitioned (None for a retired partition), None for other streams (an in-memory
    lookup, safe from any thread)."""

    def partitions_of(scope: str, stream: str) -> tuple[tuple[float, float] | None, ...] | None:
        topic = broker.topics.of_stream(scope, stream)
        if topic is None:
            return None
        return tuple(None if p in topic.retired else s for p, s in enumerate(topic.slices))

    return partitions_of


def native_gateway(options: ServerOptions, segments: SegmentService, controller: Controller, pool: ThreadPoolExecutor,
                   broker: Broker, transactions: bool = True, security: NativeSecurity | None = None) -> NativeFactory:
    """The native listener's factory over ``segments`` (a cluster node's serves native transactions
    through the owner of their table, so it passes ``transactions`` False and adds its own); ``security``:
    how its connections authenticate and are authorized (``native_security``; None: PLAINTEXT, no ACLs)."""
    return NativeFactory(segments, controller, pool, broker.scaling, topic_partitions(broker),
                         connection_budget_bytes=options.connection_budget_mb * MIB, broker=broker,
                         transactions=transactions, security=security, guards=broker.guards)


# Pravega's own default port for its segment store, served when only the controller's port is given.
PRAVEGA_DEFAULT_SEGMENT_PORT = 12345


def _refuse_secured_pravega(security: SecuritySettings, native: ListenerSettings) -> None:
    if security.authorizer_enabled or native.uses_sasl or native.ssl is not None:
        raise ValueError("the Pravega listeners have no authentication or TLS yet: they are not served where the "
                         "native listener authenticates or uses TLS, or an authorizer is on")


def pravega_segment_store(options: ServerOptions, security: SecuritySettings, native: ListenerSettings,
                          store: SegmentService, controller: Controller, broker: Broker,
                          pool: ThreadPoolExecutor, requests: RequestMetrics | None = None,
                          ) -> tuple[PravegaSegmentStoreFactory, int] | None:
    """Pravega's segment store wire protocol: its factory and the port to bind it to (None when neither
    Pravega flag is given). Over the same stream-layer gate as the native listener's raw segment
    commands (on the broker's topics, so a Kafka topic's segments refuse Pravega appends), with the
    listeners' shared guards; refused on a secured server, as the controller API is. ``requests``: the
    native listener's metrics, where its connections are counted as the listener ``PRAVEGA``."""
    if options.pravega_controller_port is None and options.pravega_segment_port is None:
        return None
    _refuse_secured_pravega(security, native)
    port = options.pravega_segment_port
    if port is None:
        port = PRAVEGA_DEFAULT_SEGMENT_PORT
    if not 0 <= port < 1 << 16:
        raise ValueError(f"--pravega-segment-port must be 0..65535, not {port}")
    gate = SegmentGate(store, broker.topics, broker.scaling.scope, controller, pool)
    return PravegaSegmentStoreFactory(gate, store, controller.tables, pool, options.connection_budget_mb * MIB,
                                      broker.guards, requests.listener("PRAVEGA") if requests is not None else None), port


def pravega_controller(options: ServerOptions, security: SecuritySettings, native: ListenerSettings,
                       store: SegmentService, controller: Controller, broker: Broker,
                       pool: ThreadPoolExecutor, segment_port: int) -> PravegaControllerListener | None:
    """Pravega's controller gRPC API on ``--pravega-controller-port`` (None when the flag is not given),
    bound, not yet serving. Over the same controller, and the same stream-layer rules (a ``SegmentGate``
    on the broker's topics) and stream deletion (the broker's) as the native listener. It has no
    authentication or TLS yet, so a server whose native listener authenticates or whose authorizer is
    on refuses it (ValueError) rather than open its streams to anyone. ``pool``: where the gate's format
    claims would block (the controller pool; the checks this API makes block on the caller's thread).
    ``getURI`` answers ``segment_port`` (the bound Pravega segment store listener) on the host the native
    listener is reached at."""
    if options.pravega_controller_port is None:
        return None
    _refuse_secured_pravega(security, native)
    given = options.advertised_native
    if given:
        segment_host = given.rpartition(":")[0].strip("[]")
    else:
        segment_host = socket.getfqdn() if options.host in _ANY_ADDRESS else options.host
    controller_host = socket.getfqdn() if options.host in _ANY_ADDRESS else options.host
    gate = SegmentGate(store, broker.topics, broker.scaling.scope, controller, pool)

    def service(port: int) -> PravegaControllerService:
        return PravegaControllerService(controller, gate, broker.topics.delete_stream, (controller_host, port),
                                        (segment_host, segment_port))

    return PravegaControllerListener(options.host, options.pravega_controller_port, service)


def native_settings(options: ServerOptions) -> ListenerSettings:
    """The native listener as the Kafka properties secure it, a listener named NATIVE on ``--host``:
    ``--native-port`` (``ConfigError`` naming the property that is wrong)."""
    return native_listener_settings(kafka_properties(options), options.host, options.native_port)


def native_security(security: SecuritySettings, settings: ListenerSettings, broker: Broker) -> NativeSecurity:
    """Blocking where the listener serves OAUTHBEARER (its JWKS is read): how native connections
    authenticate (the broker's SCRAM users, the listener's PLAIN users and token validator) and are
    authorized (the broker's ACLs, whenever ``broker.acls`` is set)."""
    assert broker.scram is not None or not settings.uses_sasl, "the SCRAM users are loaded first"
    credentials = (ListenerCredentials(settings.plain_users, broker.scram)
                   if settings.uses_sasl and broker.scram is not None else None)
    validator = JwtValidator(settings.oauthbearer) if settings.oauthbearer is not None else None
    return NativeSecurity(settings.security_protocol, settings.sasl_mechanisms, credentials, validator,
                          settings.ssl, security.connections_max_reauth_ms, security.sasl_server_max_receive_size,
                          acls=lambda: broker.acls, kafka_scope=broker.config.scope, super_users=security.super_users,
                          login_failures=broker.guards.login_failures)


def native_link(security: SecuritySettings, native: ListenerSettings, link: NodeLink) -> NativeLink:
    """How a cluster node dials the other nodes' native listeners (``forwarding.NodeLinks``: controller
    changes, native transactions, a commit's appends), as a client of the NATIVE listener the properties
    describe (every node is given the same):

    - TLS where it is SSL or SASL_SSL: the listener's certificate checked against the NATIVE listener's trust
      store (``listener.name.native.ssl.truststore.*``, else ``ssl.truststore.*``; else the system's CAs)
      and the host name dialled; its key store's certificate presented where the listener asks for one;
    - SASL where it is SASL_*: the inter-broker login (``node_link``: the mechanism of
      ``sasl.mechanism.inter.broker.protocol`` and the user of the inter-broker listener's JAAS entry), so
      a node is one principal on both links. The NATIVE listener must enable that mechanism (for PLAIN,
      list the user in its JAAS entry) and ``super.users`` must name the user: the other node believes
      the client principal a forwarded request carries (whom it authorizes, who owns a transaction) only
      from a super user.

    ConfigError naming the property that does not fit."""
    tls = None
    if native.ssl is not None:
        try:
            tls = client_ssl_context(native.ssl)
        except TlsConfigError as e:
            raise ConfigError("listener.name.native.ssl.truststore.location", None,
                              f"cluster nodes dial each other's native listener with it: {e}") from None
    login = None
    if native.uses_sasl:
        login = link.sasl
        if login is None:
            raise ConfigError("listener.security.protocol.map", "NATIVE:" + native.security_protocol,
                              f"cluster nodes log in to each other's native listener as the inter-broker user, "
                              f"and the inter-broker listener {link.listener} has no SASL login: make it SASL too")
        if login.mechanism not in native.sasl_mechanisms:
            raise ConfigError("listener.name.native.sasl.enabled.mechanisms", ",".join(native.sasl_mechanisms),
                              f"cluster nodes log in to each other's native listener with "
                              f"sasl.mechanism.inter.broker.protocol ({login.mechanism}): enable it there")
        if login.mechanism == "PLAIN" and login.username not in native.plain_users:
            raise ConfigError("listener.name.native.plain.sasl.jaas.config", None,
                              f"cluster nodes log in to each other's native listener as the inter-broker user "
                              f"{login.username!r}: add user_{login.username}=\"...\" (its password) there")
        if KafkaPrincipal("User", login.username) not in security.super_users:
            raise ConfigError("super.users", None, f"cluster nodes forward clients' native requests as User:"
                                                   f"{login.username} (the inter-broker user), and a node believes "
                                                   f"the client's principal a request carries only from a super "
                                                   f"user: name it there")
    return NativeLink(tls, login)


def native_tls(settings: ListenerSettings) -> dict[str, ServerTls | None]:
    """``listen``'s TLS for the native listener (none on PLAINTEXT and SASL_PLAINTEXT)."""
    return {"native": None if settings.ssl is None else ServerTls(settings.ssl)}


def autoscaler(options: ServerOptions, controller: Controller, store: SegmentService, broker: Broker) -> AutoScaler:
    """The controller's auto-scaler over ``store``'s segment rates, scaling Kafka topics by partition."""
    return AutoScaler(
        controller, store,
        config=AutoScalerConfig(interval=options.scale_interval_seconds, cooldown=options.scale_cooldown_seconds),
        boundaries=broker.scaling.boundaries, executor=broker.scaling.execute,
        grow_partitions=broker.scaling.grow_partitions,
    )


# Kafka listeners and their security.

def kafka_properties(options: ServerOptions) -> dict[str, str]:
    """The Kafka broker properties: ``--config``'s file, then each ``--override``. Without ``listeners``
    there, today's flags make the one: PLAINTEXT on ``--host``:``--kafka-port``."""
    props = load_properties(options.config) if options.config else {}
    refuse_secrets_in_overrides(options.overrides)
    props = apply_overrides(props, options.overrides)
    props.setdefault("listeners", f"PLAINTEXT://{_url_host(options.host)}:{options.kafka_port}")
    return props


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def kafka_security(options: ServerOptions) -> SecuritySettings:
    """The checked listener and security settings (``ConfigError`` naming the property that is wrong)."""
    return security_settings(kafka_properties(options))


def kafka_acls(security: SecuritySettings, tables: TableStore) -> AclTable | None:
    """Blocking: the ACLs every request is authorized by, when ``authorizer.class.name`` names an
    authorizer (any name: there is one, Kafka's StandardAuthorizer's semantics); None otherwise."""
    if not security.authorizer_enabled:
        return None
    acls = AclTable(tables, super_users=security.super_users,
                    allow_everyone_if_no_acl_found=security.allow_everyone_if_no_acl_found)
    acls.load()
    return acls


def add_scram_items(options: ServerOptions) -> list[str]:
    """The SCRAM users to create at start, from ``--add-scram-file`` and ``--add-scram-env``; ValueError
    naming the file or variable that does not read (read once before the store starts, to fail early)."""
    return read_add_scram_items(options.add_scram_file, options.add_scram_env, os.environ)


def scram_credentials(options: ServerOptions, tables: TableStore) -> ScramCredentialTable:
    """Blocking: the server's SCRAM credentials, with the users of ``add_scram_items`` created if missing."""
    credentials = ScramCredentialTable(tables)
    credentials.load()
    for spec in add_scram_items(options):
        created = credentials.add_if_missing(spec)
        if created is not None:
            log.info("created SCRAM credential for user %s (--add-scram-file, --add-scram-env)", created)
    return credentials


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _connection_limit(security: SecuritySettings) -> ConnectionLimit | None:
    """One count of connections per client address over every Kafka listener (None: Kafka's default,
    unlimited, counts nothing)."""
    if security.max_connections_per_ip >= JAVA_INT_MAX:
        return None
    return ConnectionLimit(security.max_connections_per_ip)


F = TypeVar("F", bound=protocol.ServerFactory[Any])


def bind_kafka_listeners(security: SecuritySettings, factory_of: Callable[[ListenerSettings], F],
                         ) -> list[tuple[ListenerSettings, IListeningPort, F]]:
    """Bind every Kafka listener, in ``listeners`` order, TLS ones with their ``ServerTls``: each with the
    factory ``factory_of`` makes for it."""
    bound: list[tuple[ListenerSettings, IListeningPort, F]] = []
    for settings in security.listeners:
        factory = factory_of(settings)
        endpoint = settings.endpoint
        if settings.ssl is not None:
            port = listen_tls(endpoint.port, factory, ServerTls(settings.ssl), endpoint.host,
                              security.limits.authentication_timeout_ms)
        else:
            port = cast(IReactorTCP, reactor).listenTCP(endpoint.port, factory, interface=endpoint.host)
        unauthenticated = not settings.uses_sasl and (settings.ssl is None or settings.ssl.client_auth != "required")
        if unauthenticated and not _loopback(endpoint.host):
            log.warning("Kafka listener %s (%s) on %s accepts clients without authentication", settings.name,
                        settings.security_protocol, endpoint.host or "every interface")
        bound.append((settings, port, factory))
    return bound


def kafka_advertised(settings: ListenerSettings, port: IListeningPort, given: str | None = None) -> tuple[str, int]:
    """Where clients reach a bound listener: ``advertised.listeners``' entry for it, else ``given``
    (``--advertised-kafka``, for the first listener), else its bind address and bound port (the machine's
    name when bound to every interface, as Kafka does)."""
    if settings.advertised == settings.endpoint and given:
        host, _, number = advertised(settings.endpoint.host, port, given).rpartition(":")
        return host, int(number)
    endpoint, chosen = settings.endpoint, settings.advertised
    host = chosen.host or (socket.getfqdn() if endpoint.host in _ANY_ADDRESS else endpoint.host)
    return host, chosen.port or bound_address(port).port


def kafka_listener(security: SecuritySettings, settings: ListenerSettings, address: tuple[str, int],
                   scram: ScramCredentialTable) -> KafkaListener:
    """What a listener's connections know of it: what Metadata advertises, how they authenticate."""
    credentials = ListenerCredentials(settings.plain_users, scram) if settings.uses_sasl else None
    return KafkaListener.from_settings(settings, *address, credentials, security.connections_max_reauth_ms,
                                       security.sasl_server_max_receive_size)


def listen_kafka(security: SecuritySettings, broker: Broker, connection_budget_bytes: int,
                 scram: ScramCredentialTable) -> list[tuple[ListenerSettings, IListeningPort]]:
    """The single node's Kafka listeners, bound and serving; each connection learns its listener. The
    first listener is also what ``KafkaConfig`` advertises where no connection is asked (a log line)."""
    limit = _connection_limit(security)
    bound = bind_kafka_listeners(security, lambda _: KafkaFactory(broker, connection_budget_bytes, limit=limit))
    for i, (settings, port, factory) in enumerate(bound):
        address = kafka_advertised(settings, port)
        factory.listener = kafka_listener(security, settings, address, scram)
        broker.requests.listener(settings.name)  # /metrics reports it from the start, with no connection yet
        if i == 0:
            broker.config.advertised_host, broker.config.advertised_port = address
    return [(settings, port) for settings, port, _ in bound]


def kafka_factories(security: SecuritySettings, broker: Broker, connection_budget_bytes: int,
                    scram: ScramCredentialTable, addresses: Mapping[str, tuple[str, int]]) -> dict[str, KafkaFactory]:
    """A cluster node's Kafka listeners' factories, by listener name (bound before the broker existed),
    each advertising its address in ``addresses``."""
    limit = _connection_limit(security)
    for settings in security.listeners:
        broker.requests.listener(settings.name)  # /metrics reports it from the start, with no connection yet
    return {settings.name: KafkaFactory(broker, connection_budget_bytes,
                                        kafka_listener(security, settings, addresses[settings.name], scram), limit)
            for settings in security.listeners}


def node_link(security: SecuritySettings) -> NodeLink:
    """How a cluster node dials the others' Kafka listeners and logs in there, as Kafka's brokers do:
    ``inter.broker.listener.name`` (else the listener named by ``security.inter.broker.protocol``,
    PLAINTEXT by default), its TLS trust and key stores, and on a SASL listener
    ``sasl.mechanism.inter.broker.protocol`` with the ``username`` and ``password`` of that mechanism's
    JAAS entry there. ConfigError naming the property that does not fit."""
    name = security.inter_broker_listener or security.inter_broker_protocol
    names = ", ".join(listener.name for listener in security.listeners)
    try:
        listener = security.listener(name)
    except KeyError:
        prop = "inter.broker.listener.name" if security.inter_broker_listener else "security.inter.broker.protocol"
        raise ConfigError(prop, name, f"cluster nodes reach each other on this listener, and none is named so "
                                      f"({names}): set inter.broker.listener.name") from None
    tls = None
    if listener.ssl is not None:
        try:
            tls = client_tls(listener.ssl)
        except TlsConfigError as e:
            raise ConfigError(f"listener.name.{name.lower()}.ssl.truststore.location", None, str(e)) from None
    login = None
    if listener.uses_sasl:
        mechanism = security.inter_broker_sasl_mechanism
        if mechanism not in listener.sasl_mechanisms or mechanism not in CLIENT_MECHANISMS:
            raise ConfigError("sasl.mechanism.inter.broker.protocol", mechanism,
                              f"the inter-broker listener {name} is SASL: name the mechanism nodes log in with "
                              f"there, one of {', '.join(m for m in listener.sasl_mechanisms if m in CLIENT_MECHANISMS)}")
        module = listener.login_modules.get(mechanism)
        username = module.options.get("username") if module else None
        password = module.options.get("password") if module else None
        if not username or password is None:
            raise ConfigError(f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config", None,
                              "needs username and password options: the login this node presents to the others")
        login = SaslLogin(mechanism, username, password)
    return NodeLink(listener.name, tls, login)


# The HTTP listener's security: the Kafka properties' listener named HTTP (``SecuritySettings.http``).

def http_access(security: SecuritySettings, broker: Broker) -> HttpAccess | None:
    """How the HTTP API authenticates and authorizes (gateway/http/site.py ``HttpAccess``): None, an open API
    as before, when the HTTP listener does not authenticate and no authorizer is configured. Blocking
    where the HTTP listener serves OAUTHBEARER (its JWKS file is read)."""
    http = security.http
    if not http.authenticates and not security.authorizer_enabled:
        return None
    scram = broker.scram
    authenticator = HttpAuthenticator(http, scram.scram if scram is not None else None) if http.authenticates else None
    return HttpAccess(authenticator, lambda: broker.acls.authorizer if broker.acls is not None else None,
                      broker.config.scope, http.authentication_required_for_reads, broker.guards.login_failures,
                      broker.guards.limits.connection_failed_authentication_delay_ms / 1000)


def http_tls(security: SecuritySettings) -> dict[str, ServerTls]:
    """``listen``'s ``tls`` for the HTTP listener: its ``ServerTls`` where it is SSL or SASL_SSL."""
    return {} if security.http.ssl is None else {"http": ServerTls(security.http.ssl)}


# Listeners.

def listen(options: ServerOptions, factories: Mapping[str, protocol.ServerFactory[Any]],
           tls: Mapping[str, ServerTls | None] | None = None, handshake_timeout_ms: int = 0,
           ) -> dict[str, IListeningPort]:
    """Bind each named listener (``kafka``, ``native``, ``peer``, ``http``) to its port on ``--host``, in
    the order given (0: any free port); one ``tls`` names a context for is bound with TLS, its clients given
    ``handshake_timeout_ms`` to finish the handshake (0: no limit)."""
    ports = {"kafka": options.kafka_port, "native": options.native_port, "peer": options.peer_port,
             "http": options.http_port}
    bound: dict[str, IListeningPort] = {}
    for name, factory in factories.items():
        context = (tls or {}).get(name)
        if context is not None:
            bound[name] = listen_tls(ports[name], factory, context, options.host, handshake_timeout_ms)
        else:
            bound[name] = reactor.listenTCP(ports[name], factory, interface=options.host)
    return bound


def bound_address(port: IListeningPort) -> IPv4Address | IPv6Address:
    """The address a TCP listener is bound to."""
    address = port.getHost()
    if not isinstance(address, IPv4Address | IPv6Address):
        raise TypeError(f"not a TCP listener: {address!r}")
    return address


def advertised(bind_host: str, port: IListeningPort, given: str | None) -> str:
    """``host:port`` to give clients and peers for a listener: ``given``, else the bind address, else
    (bound to every interface) this machine's host name, as Kafka does without advertised.listeners."""
    if given:
        host, sep, number = given.rpartition(":")
        if not sep or not host or not number.isdigit():
            raise ValueError(f"expected HOST:PORT, got {given!r}")
        return given
    host = socket.getfqdn() if bind_host in _ANY_ADDRESS else bind_host
    return f"{host}:{bound_address(port).port}"


def advertised_addresses(options: ServerOptions, listeners: Mapping[str, IListeningPort]) -> dict[str, str]:
    """What each bound listener is advertised as (``--advertised-kafka`` etc.; the HTTP one never is)."""
    given = {"kafka": options.advertised_kafka, "native": options.advertised_native, "peer": options.advertised_peer}
    return {name: advertised(options.host, port, given.get(name)) for name, port in listeners.items()}
