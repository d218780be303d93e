"""What ``millrace serve`` is told (``ServerOptions``), apart from the server itself: the command line
builds its parser from these defaults, and importing the whole server (Twisted, the Kafka layer, the
store) for that would make every ``millrace logd`` or admin command start as slowly as a server."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServerOptions:
    """What ``millrace serve`` was asked for: each field is the flag of the same name (gateway/commands/cli.py)."""

    data_dir: str = "./millrace-data"
    # Kafka broker properties (a server.properties file, then --override key=value items), for what
    # Kafka operators configure by name: listeners, their security, SASL users, TLS key material.
    config: str | None = None
    overrides: tuple[str, ...] = ()
    # SCRAM credentials to create at start if the user has none (the first administrator of a secured
    # server), as kafka-storage.sh format's --add-scram takes them, "SCRAM-SHA-256=[name=admin,password=...]",
    # one a line: in these files, and in these environment variables. Never on the command line, which
    # every local user can read while the server runs.
    add_scram_file: tuple[str, ...] = ()
    add_scram_env: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    kafka_port: int = 9092
    native_port: int = 9090
    http_port: int = 9091
    # Pravega's controller gRPC API and segment store listener (gateway/pravega/), for Pravega's own
    # clients: their ports (None: not served; 0: any free port). The segment store is served when either
    # is given, on Pravega's default 12345 unless told; getURI answers it.
    pravega_controller_port: int | None = None
    pravega_segment_port: int | None = None
    kafka_scope: str = "kafka"
    auto_create_topics: bool = True
    default_partitions: int = 1
    retention_check_seconds: float = 30.0
    transaction_check_seconds: float = 1.0  # how often Kafka transactions past their timeout are aborted
    producer_id_expiration_ms: int = 86_400_000  # idle producers' idempotence state is forgotten after this
    native_txn_retention_ms: int = 3_600_000  # how long a finished native transaction's status is kept
    state_snapshot_bytes: int = 1 << 20  # index bytes a topic gains before its partitions' state is snapshotted
    group_initial_rebalance_delay_ms: int = 3000  # a new group's first rebalance waits for more members
    # Auto-scaling: rate windows (seconds, shortest first), how often policies are evaluated, and how
    # long a segment made by a scale is left alone.
    scale_windows: tuple[float, ...] = (2.0, 10.0, 30.0)
    scale_interval_seconds: float = 1.0
    scale_cooldown_seconds: float = 10.0
    containers: int = 4
    lts: str | None = None  # a path, file:///path or s3://bucket/prefix; default <data_dir>/lts
    s3_endpoint: str | None = None
    cache_mb: int = 256
    # A segment's un-flushed data goes to long-term storage once this old (or 8 MiB), as ContainerConfig's
    # default (Pravega's 30 s; docs/performance.md measures a trickle at 2 s and 30 s).
    flush_age_seconds: float = 30.0
    # Backpressure (store.budget): bytes one connection's requests and appends may hold, and bytes a
    # container may hold before they are durable, before the connections feeding them stop reading.
    connection_budget_mb: int = 32
    container_budget_mb: int = 64
    fetch_budget_mb: int = 16  # Fetch response bytes all connections may be reading at once
    # Replicated durable logs: "host:port,..." of `millrace logd` replicas (None: the local file log),
    # with the write and ack quorums; the logs' metadata stays in <data_dir>/logmeta for now.
    log_replicas: str | None = None
    write_quorum: int = 3
    ack_quorum: int = 2
    # CURVE on the links to the replicas (store/durablelog/curve.py): this node's key pair (a ZeroMQ
    # certificate's secret file) and the replicas' public key; both or neither.
    log_curve_secret_key: str | None = None
    log_curve_server_key: str | None = None
    # A cluster node (gateway/commands/cluster_server.py) when ``zookeeper`` is set: its id (a number, the Kafka
    # node id too), the peer listener's port, what each listener is advertised as (HOST:PORT; None: the
    # bind address), the ZooKeeper session timeout and how long a segment operation waits for an owner.
    zookeeper: str | None = None
    node_id: str | None = None
    peer_port: int = 9093
    advertised_kafka: str | None = None
    advertised_native: str | None = None
    advertised_peer: str | None = None
    session_timeout_seconds: float = 10.0
    retry_bound_seconds: float = 30.0
    # A secured cluster: the file holding the nodes' ZooKeeper digest identity (store/cluster/zk_auth.py),
    # and the peer listener's mutual TLS (store/cluster/peer_tls.py): this node's PEM certificate chain and
    # key, and the cluster CA's certificate; both or neither. TLS to ZooKeeper's secure client port
    # (store/cluster/zk_tls.py): the CA of ZooKeeper's certificate (turns TLS on) and, for ZooKeeper's
    # client authentication, this node's PEM certificate chain and key.
    zookeeper_credentials: str | None = None
    peer_tls_keystore: str | None = None
    peer_tls_truststore: str | None = None
    zookeeper_tls_keystore: str | None = None
    zookeeper_tls_truststore: str | None = None
