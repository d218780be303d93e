"""Transaction markers on a partition leader: written at most once per transaction end, and sent from
the transaction coordinator to leaders on other nodes with Kafka's WriteTxnMarkers (API 27).

Why the Kafka protocol between nodes, not the peer listener: the peer listener serves segment commands
of a node's containers only, while a marker needs the partition state a leader keeps in its Kafka
gateway (open transactions, producer epochs, last stable offset); every node's advertised Kafka
listener is in the cluster view already, and WriteTxnMarkers is how Kafka's coordinator does it.

Idempotence (``MarkerWriter.write``): a coordinator retries a marker whose answer it did not get, and a
new coordinator term writes the markers of a prepared transaction again. A marker is written only while
the producer has a transaction open in the partition or the marker's epoch is newer than the one the
partition knows (a fencing abort); a marker already in flight for the producer is waited for instead of
written twice. So a repeated marker never closes a later transaction of the producer early.

Node-to-node requests go through ``gateway/kafka/node_requests.py`` (on the reactor, with a timeout).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.kafka.group_store import OffsetAndMetadata
from millrace.gateway.kafka.node_requests import SEND_TIMEOUT_SECONDS, NodeLink, request_node
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from millrace.gateway.kafka_protocol.messages.write_txn_markers import (
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from millrace.streams.errors import Reason
from millrace.streams.partitions import PartitionError

if TYPE_CHECKING:
    from millrace.gateway.kafka.nodes import KafkaNode
    from millrace.streams.partitions.partition import PartitionLog
    from millrace.streams.partitions.storage import SegmentPartitionStorage

WRITE_TXN_MARKERS = WriteTxnMarkersRequest.API_KEY
MARKERS_VERSION = 1
TXN_OFFSET_COMMIT_VERSION = 3  # the first with the group's generation and member fields
#: The client id of node-to-node requests from a transaction coordinator: WriteTxnMarkers, and the
#: TxnOffsetCommit that commits a committed transaction's offsets on the group coordinator.
CLIENT_ID = "millrace-txn-coordinator"
#: The client id of a TxnOffsetCommit the group coordinator forwards (group checks done) to the
#: transaction coordinator, which keeps the offsets with the transaction until it ends.
GROUP_COORDINATOR_CLIENT_ID = "millrace-group-coordinator"


class MarkerWriter:
    """Writes markers on this node's partitions, once per transaction end (reactor thread)."""

    def __init__(self, storage: SegmentPartitionStorage) -> None:
        self.storage = storage
        # (topic, partition, producer id) of a marker being written there now ->
        self._in_flight: dict[tuple[str, int, int], list[defer.Deferred[None]]] = {}  # their waiters

    def write(self, p: PartitionLog, producer_id: int, epoch: int, commit: bool,
              coordinator_epoch: int) -> defer.Deferred[None]:
        """Fires once the partition has closed the producer's transaction of ``epoch`` (or had nothing
        of it to close); errbacks with PartitionError (NOT_LEADER_OR_FOLLOWER ... : try again)."""
        return defer.maybeDeferred(self._write, p, producer_id, epoch, commit, coordinator_epoch)

    def _write(self, p: PartitionLog, producer_id: int, epoch: int, commit: bool,
               coordinator_epoch: int) -> defer.Deferred[None]:
        key = (p.topic, p.partition, producer_id)
        waiting = self._in_flight.get(key)
        if waiting is not None:
            waiter: defer.Deferred[None] = defer.Deferred()
            waiting.append(waiter)
            return waiter
        self.storage.check_leader(p)
        loaded = self.storage.loaded(p.topic)
        if loaded is None or p.partition >= len(loaded) or loaded[p.partition] is not p:
            raise PartitionError(Reason.LOADING, f"{p.topic}-{p.partition} is reloading")
        state = p.producers.get(producer_id)
        known_epoch = -1 if state is None else state.epoch
        if state is not None and state.coordinator_epoch > coordinator_epoch:
            # A later coordinator term wrote here already: this one is a former coordinator (Kafka's rule).
            raise PartitionError(Reason.COORDINATOR_FENCED,
                                 f"coordinator epoch {coordinator_epoch} < {state.coordinator_epoch}")
        if producer_id not in p.txns.open and known_epoch >= epoch:
            return defer.succeed(None)  # closed already (a retry), or nothing of it was written here
        if known_epoch > epoch:
            # The open transaction is of a newer epoch than this marker (a stale coordinator's retry):
            # closing it would expose or drop records the current transaction has not decided on.
            raise PartitionError(Reason.PRODUCER_FENCED,
                                 f"marker epoch {epoch} is older than producer {producer_id}'s {known_epoch}")
        waiters: list[defer.Deferred[None]] = []
        self._in_flight[key] = waiters

        def settled(result: Any) -> Any:
            del self._in_flight[key]
            for w in waiters:
                if isinstance(result, Failure):
                    w.errback(result)
                else:
                    w.callback(None)
            return result

        d = defer.maybeDeferred(self.storage.write_marker, p, producer_id, epoch, commit, coordinator_epoch)
        return d.addBoth(settled).addCallback(lambda _: None)


def send_markers(link: NodeLink, leader: KafkaNode, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                 partitions: dict[str, list[int]], timeout: float = SEND_TIMEOUT_SECONDS
                 ) -> defer.Deferred[dict[tuple[str, int], ErrorCode]]:
    """Reactor: one WriteTxnMarkers to ``leader``; fires with each partition's error."""
    request = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=epoch, transaction_result=commit,
        topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
                for name, indexes in partitions.items()],
        coordinator_epoch=coordinator_epoch)])

    def errors_of(response: WriteTxnMarkersResponse) -> dict[tuple[str, int], ErrorCode]:
        found = {(t.name, part.partition_index): ErrorCode(part.error_code)
                 for marker in response.markers for t in marker.topics for part in t.partitions}
        return {(name, i): found.get((name, i), ErrorCode.UNKNOWN_SERVER_ERROR)
                for name, indexes in partitions.items() for i in indexes}

    return request_node(link, leader, request, MARKERS_VERSION, CLIENT_ID, timeout).addCallback(errors_of)


def txn_offset_commit_request(transactional_id: str, group_id: str, producer_id: int, epoch: int,
                              offsets: dict[tuple[str, int], OffsetAndMetadata]) -> TxnOffsetCommitRequest:
    """A TxnOffsetCommit carrying ``offsets`` between nodes (no member: the group was checked already)."""
    by_topic: dict[str, list[TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition]] = {}
    for (topic, partition), om in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
            partition_index=partition, committed_offset=om.offset, committed_leader_epoch=om.leader_epoch,
            committed_metadata=om.metadata))
    return TxnOffsetCommitRequest(
        transactional_id=transactional_id, group_id=group_id, producer_id=producer_id, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=name, partitions=parts)
                for name, parts in by_topic.items()])


def offset_errors(response: TxnOffsetCommitResponse) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): ErrorCode(p.error_code) for t in response.topics for p in t.partitions}
