"""One segment-store node of a cluster, assembled: a ZooKeeper session, the log metadata store, the
node's containers and its membership. This is what a ``millrace serve`` in cluster mode starts.

``ClusterNode.start`` connects, registers and campaigns, and from then on runs exactly the
containers the assigner gives it (``containers.container(id)``); ``close`` stops them and leaves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from millrace.store.cluster.containers import SegmentContainerHost, replicated_logs
from millrace.store.cluster.layout import ClusterPaths, NodeInfo
from millrace.store.cluster.log_metadata import ZooKeeperLogMetadataStore
from millrace.store.cluster.member import ClusterMember, OwnershipTerm, connect
from millrace.store.cluster.zk_auth import ZooKeeperCredentials, access_error
from millrace.store.cluster.zk_tls import ZooKeeperTls
from millrace.store.containers.config import ContainerConfig
from millrace.store.durablelog.interface import DurableDataLog
from millrace.store.durablelog.replication_config import ReplicationConfig
from millrace.store.lts.interface import ChunkStorage


@dataclass(frozen=True)
class ClusterNodeConfig:
    """``zookeeper``: the connect string (``host:port,...``, optionally ending in a chroot ``/path``);
    ``replication``: where and how every container's log is replicated (the logs must be reachable
    from every node, so a replicated log is the only kind a cluster can use); ``credentials``: the
    cluster's ZooKeeper digest identity (zk_auth.py), None for an open cluster; ``tls``: TLS to
    ZooKeeper's secure client port (zk_tls.py), None for plain TCP."""

    zookeeper: str
    info: NodeInfo
    containers: int
    replication: ReplicationConfig
    session_timeout: float = 10.0
    paths: ClusterPaths = field(default_factory=ClusterPaths)
    credentials: ZooKeeperCredentials | None = None
    tls: ZooKeeperTls | None = None


HostFactory = Callable[[ChunkStorage, Callable[[OwnershipTerm], DurableDataLog], ContainerConfig | None],
                       SegmentContainerHost]


class ClusterNode:
    """A started node; ``containers`` runs what it owns. ``storage`` must be shared by all nodes."""

    def __init__(self, config: ClusterNodeConfig, storage: ChunkStorage,
                 container_config: ContainerConfig | None = None,
                 host_factory: HostFactory = SegmentContainerHost) -> None:
        self.config = config
        self.storage = storage
        self.container_config = container_config
        self.host_factory = host_factory
        self.client: KazooClient | None = None
        self.containers: SegmentContainerHost | None = None
        self.member: ClusterMember | None = None

    def start(self, timeout: float | None = 60.0) -> ClusterNode:
        """Connect, register and campaign; TimeoutError if not registered within ``timeout``,
        ZooKeeperAccessError if ZooKeeper refuses this node's changes (a secured cluster, other credentials)."""
        config = self.config
        self.client = connect(config.zookeeper, session_timeout=config.session_timeout,
                              credentials=config.credentials, tls=config.tls)
        try:
            try:
                metadata = ZooKeeperLogMetadataStore(self.client, config.paths)
            except NoAuthError:
                raise access_error(config.paths.root, config.credentials) from None
            self.containers = self.host_factory(self.storage, replicated_logs(metadata, config.replication),
                                                self.container_config)
            self.member = ClusterMember(self.client, config.info, config.containers, self.containers, config.paths,
                                        config.session_timeout, config.credentials).start(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop every container, leave the cluster, end the session (idempotent)."""
        if self.member is not None:
            self.member.close()
        if self.containers is not None:
            self.containers.close()
        if self.client is not None:
            self.client.stop()
            self.client.close()
        self.member = self.containers = self.client = None
