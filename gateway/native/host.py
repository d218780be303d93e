"""What the native gateway needs of the process hosting it, named here so the native adapter does not
import the Kafka adapter: the stream layer (``streams.host.StreamHost``), the store and its tables, a
few settings, the cluster view a cluster node has, and the writer-id leases. The server's broker
(``gateway.kafka.broker.Broker``) provides all of it; the native side depends on this shape only."""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.defer import Deferred

from millrace.store.cluster.layout import NodeInfo
from millrace.store.contracts import SegmentService
from millrace.store.tables import TableStore
from millrace.streams.host import StreamHost


class NativeConfig(Protocol):
    @property
    def scope(self) -> str:
        """The scope whose streams are Kafka topics."""
        ...

    @property
    def native_txn_retention_ms(self) -> int:
        """How long a finished native transaction's status is kept."""
        ...

    @property
    def transaction_check_seconds(self) -> float:
        """How often transactions past their timeout are looked for."""
        ...


class NativeCluster(Protocol):
    """A cluster node's view of the cluster: which containers run here, who owns a segment."""

    @property
    def node_id(self) -> str: ...

    def terms(self) -> dict[int, int]:
        """Container id -> ownership epoch, for the containers running here now."""
        ...

    def container_of(self, segment: str) -> int: ...

    def other_nodes(self) -> list[NodeInfo]: ...

    def segment_owner(self, segment: str) -> dict[str, Any]:
        """The GET_SEGMENT_OWNER answer: container, live owner node and its native listener."""
        ...


class WriterLeases(Protocol):
    """Producer ids with epochs for writer ids (the transaction coordinator's InitProducerId on the id),
    each lease fencing an older instance of the same writer."""

    def lease_writer(self, transactional_id: str, lease_ms: int) -> Deferred[tuple[int, int]]:
        """Fires with (producer id, epoch), or fails with a ``streams.errors.StreamError``."""
        ...


class NativeHost(StreamHost, Protocol):
    @property
    def store(self) -> SegmentService: ...

    @property
    def tables(self) -> TableStore: ...

    @property
    def config(self) -> NativeConfig: ...

    @property
    def cluster(self) -> NativeCluster | None:
        """None in one process: every segment is served here."""
        ...

    @property
    def transactions(self) -> WriterLeases: ...
