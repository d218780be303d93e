"""A partition leader's question to the transaction coordinator on another node (KIP-890): is this
partition in the producer's ongoing transaction? Asked before a transaction's first batch is admitted
there, as Kafka's AddPartitionsToTxnManager does, with AddPartitionsToTxn v4 and ``verify_only``.

The partition keeps the answer (``streams.partitions.transactions.TransactionVerifications``) until the
producer's next marker there. Questions asked in one reactor turn go to the coordinator as one request
per node. A question the coordinator cannot answer now (it moved, is loading, or cannot be reached) is
answered NOT_ENOUGH_REPLICAS, which producers retry, as Kafka does for old clients; a refusal
(INVALID_TXN_STATE: the partition is not in the transaction; INVALID_PRODUCER_EPOCH: fenced;
INVALID_PRODUCER_ID_MAPPING) is the producer's answer.

Reactor thread only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from millrace.gateway.kafka.node_requests import request_node
from millrace.gateway.kafka.stream_errors import KafkaError
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)

if TYPE_CHECKING:
    from millrace.gateway.kafka.node_requests import Peers

log = logging.getLogger(__name__)

VERIFY_VERSION = 4  # the first version brokers send, with verify_only
CLIENT_ID = "millrace-txn-verification"
VERIFY_TIMEOUT_SECONDS = 10.0
# What the coordinator says when it cannot answer now: the producer is told to retry.
_NOT_NOW = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                      ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.CONCURRENT_TRANSACTIONS,
                      ErrorCode.REQUEST_TIMED_OUT})

Producer = tuple[str, int, int]  # transactional id, producer id, epoch
TopicPartition = tuple[str, int]


class TransactionVerifier:
    """Asks the transaction coordinator's node whether partitions are in producers' ongoing transactions."""

    def __init__(self, peers: Peers, clock: IReactorTime) -> None:
        self.peers = peers  # where the coordinator is, and how to dial it
        self.clock = clock
        self._asked: dict[Producer, dict[TopicPartition, list[defer.Deferred[None]]]] = {}
        self._sending = False

    def ask(self, transactional_id: str, producer_id: int, epoch: int, topic: str,
            partition: int) -> defer.Deferred[None]:
        """Fires once the coordinator confirmed the partition is in the transaction; fails with a
        KafkaError carrying the producer's answer otherwise."""
        d: defer.Deferred[None] = defer.Deferred()
        asked = self._asked.setdefault((transactional_id, producer_id, epoch), {})
        asked.setdefault((topic, partition), []).append(d)
        if not self._sending:
            self._sending = True
            self.clock.callLater(0, self._send)
        return d

    def _send(self) -> None:
        self._sending = False
        asked, self._asked = self._asked, {}
        directory = self.peers.directory
        node = directory.transaction_coordinator() if directory is not None else None
        if node is None:
            _answer(asked, {}, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            return
        request = AddPartitionsToTxnRequest(transactions=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=True,
                topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=indexes)
                        for topic, indexes in _by_topic(partitions).items()])
            for (tid, pid, epoch), partitions in asked.items()])

        def answered(response: AddPartitionsToTxnResponse) -> None:
            top = ErrorCode(response.error_code)
            if top is not ErrorCode.NONE:
                log.warning("the transaction coordinator (node %d) refused a verification: %s", node.node_id, top.name)
            errors = {(result.transactional_id, t.name, part.partition_index): ErrorCode(part.partition_error_code)
                      for result in response.results_by_transaction for t in result.topic_results
                      for part in t.results_by_partition}
            _answer(asked, errors, top if top is not ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR)

        def unreachable(failure: Failure) -> None:
            log.info("asking the transaction coordinator (node %d) to verify a transaction failed: %s",
                     node.node_id, failure.getErrorMessage())
            _answer(asked, {}, ErrorCode.COORDINATOR_NOT_AVAILABLE)

        request_node(self.peers.link, node, request, VERIFY_VERSION, CLIENT_ID,
                     VERIFY_TIMEOUT_SECONDS).addCallbacks(answered, unreachable)


def _by_topic(partitions: dict[TopicPartition, Any]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def _answer(asked: dict[Producer, dict[TopicPartition, list[defer.Deferred[None]]]],
            errors: dict[tuple[str, str, int], ErrorCode], missing: ErrorCode) -> None:
    for (tid, _, _), partitions in asked.items():
        for (topic, partition), waiting in partitions.items():
            error = errors.get((tid, topic, partition), missing)
            for d in waiting:
                if error is ErrorCode.NONE:
                    d.callback(None)
                else:
                    answer = ErrorCode.NOT_ENOUGH_REPLICAS if error in _NOT_NOW else error
                    d.errback(KafkaError(answer, f"{topic}-{partition}: the transaction coordinator answered "
                                         f"{error.name} for {tid!r}"))
