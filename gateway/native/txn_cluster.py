"""Native transactions on a cluster: one node serves them, commits land on each partition's leader.

As the Kafka transaction coordinator is the owner of its table's container (``kafka/cluster.py``),
native transactions are served by the node that owns the container of their table segment
(``_system/_tables/native_transactions``), from records it loaded in its *current* term of that
container: a node whose term ended serves nothing more (its lease checks and merges stop), and a new
term reloads the records and finishes what a predecessor left COMMITTING or ABORTING.

- Other nodes forward the transaction commands to that node's native listener and relay its answer
  (``forwarding``; clients need not know where the transactions live). Every transaction command is
  idempotent (the client chooses the transaction id, appends are conditional on event numbers, ends and
  pings answer the same again), so a forward whose connection died answers retriably and the client
  resends.
- A commit appends each batch to its partition through this node's partition storage when this node
  leads the partition, else as ``APPEND_EVENTS`` (writer ``txn:<uuid>``, the batch's index as its event
  number) to the leader's native listener: the leader assigns offsets and, as for any numbered writer,
  answers a batch landed before ALREADY_WRITTEN, so a merge resumed after a crash or a move lands
  every batch once. After the commit the merge writer's numbers are forgotten on every node
  (``FORGET_TXN_WRITER``), as the single server forgets them in its partitions.

Threads: the reactor (``forwarding`` says how connections are made).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.native.dispatch import Handlers, handlers, serve
from millrace.gateway.native.event_commands import stream_key
from millrace.gateway.native.forwarding import HERE, NodeLinks, forwarding
from millrace.gateway.native.host import NativeCluster, NativeHost
from millrace.gateway.native.txn_commands import NativeTransactions
from millrace.gateway.native.txn_merge import local_batch_appender
from millrace.gateway.native.txn_state import WRITER_PREFIX
from millrace.protocol import messages as m
from millrace.protocol.errors import InvalidRequestError
from millrace.protocol.messages import decode_reply
from millrace.store.cluster.layout import native_endpoint
from millrace.store.controller.transactions import NATIVE_TXNS_TABLE, TxnRecord
from millrace.streams.errors import Reason
from millrace.streams.partitions import PartitionError, PartitionLog
from millrace.streams.partitions.writer_events import WriterEvents
from millrace.streams.topics import TopicInfo

log = logging.getLogger(__name__)


class NativeTxnCoordination:
    """Serves the native transactions in this node's terms of their table's container only."""

    def __init__(self, cluster: NativeCluster, transactions: NativeTransactions) -> None:
        self.cluster = cluster
        self.transactions = transactions
        self.loaded_term: int | None = None  # the term whose records are held (or loading)
        self.loading = False

    def check(self) -> bool:
        """Reactor: whether this node serves the transactions now, with records of its current term."""
        term = self.cluster.terms().get(self.cluster.container_of(NATIVE_TXNS_TABLE))
        if term is None:
            if self.loaded_term is not None:
                log.info("the native transactions' table runs elsewhere: no longer serving them")
                self.loaded_term = None
                self.transactions.stop()
            return False
        if term != self.loaded_term and not self.loading:
            log.info("term %d of the native transactions' table: loading them", term)
            self.loaded_term = term
            self.loading = True
            self.transactions.reload().addBoth(self._loaded, term)
        return not self.loading and term == self.loaded_term

    def _loaded(self, result: Any, term: int) -> None:
        self.loading = False
        if isinstance(result, Failure):
            log.warning("loading the native transactions failed: %s", result.getErrorMessage())
            self.loaded_term = None  # the next check loads again
            self.transactions.stop()


def cluster_txn_handlers(broker: NativeHost, cluster: NativeCluster,
                         links: NodeLinks) -> tuple[Handlers, Callable[[], bool]]:
    """The transaction commands of a cluster node, and the check to run periodically (it starts and
    stops serving as the table's container comes and goes)."""
    transactions = NativeTransactions(broker, load=False)
    transactions.stop()  # nothing until a term of the table's container begins here
    transactions.merge.append_batch = leader_batch_appender(broker, cluster, links)

    def forget_elsewhere(record: TxnRecord, writer_id: str) -> None:
        request = m.ForgetTxnWriter(scope=record.scope, stream=record.stream, writer_id=writer_id)

        def missed(failure: Failure, node: str) -> None:
            # It keeps one attribute per partition of the stream it leads; a later load reads it back.
            log.info("node %s did not forget %s: %s", node, writer_id, failure.getErrorMessage())

        for info in cluster.other_nodes():
            address = native_endpoint(info)
            if address is not None:
                links.request(address, request).addErrback(missed, info.node_id)

    def forget(r: m.ForgetTxnWriter, _payload: bytes) -> None:
        """Another node's committed transaction: drop its merge writer's numbers from partitions led here."""
        if not r.writer_id.startswith(WRITER_PREFIX):
            raise InvalidRequestError(f"{r.writer_id!r} is not a transaction's merge writer")
        broker.partitions.forget_writer(stream_key(broker, r.scope, r.stream), r.writer_id)

    transactions.forget_elsewhere = forget_elsewhere
    coordination = NativeTxnCoordination(cluster, transactions)

    def place() -> str | None:
        if coordination.check():
            return HERE
        if coordination.loaded_term is not None:
            return None  # ours, loading: the client retries
        return cluster.segment_owner(NATIVE_TXNS_TABLE)["native"]

    routed: Handlers = {command: forwarding(handler, place, links, "the native transactions' node")
                        for command, handler in transactions.handlers().items()}
    routed.update(handlers(serve(m.ForgetTxnWriter, forget)))
    return routed, coordination.check


def leader_batch_appender(broker: NativeHost, cluster: NativeCluster,
                          links: NodeLinks) -> Callable[[TopicInfo, PartitionLog, bytes, WriterEvents],
                                                        defer.Deferred[int]]:
    """A commit's appends: here when this node leads the partition, else APPEND_EVENTS to its leader.

    A partition's remote appends go one at a time, each only once the one before landed: the leader
    answers a number at or below the last it recorded ALREADY_WRITTEN, so had a later batch landed
    while an earlier one failed, the earlier one's retry would be taken as written and lost."""
    local = local_batch_appender(broker)
    tails: dict[tuple[str, int], defer.Deferred[bool]] = {}  # partition -> fires once its last append settled

    def append(topic: TopicInfo, partition: PartitionLog, batch: bytes, events: WriterEvents) -> defer.Deferred[int]:
        writer = partition.writer
        owner = cluster.segment_owner(writer.name) if writer is not None else None
        if owner is None or owner["node"] == cluster.node_id:
            return local(topic, partition, batch, events)
        scope, stream = broker.topics.stream_of(topic.name)
        request = m.AppendEvents(scope=scope, stream=stream, partition=partition.partition,
                                 writer_id=events.writer_id, first_event=events.first_event,
                                 last_event=events.last_event)
        key = (topic.name, partition.partition)
        previous = tails.get(key)
        settled: defer.Deferred[bool] = defer.Deferred()
        tails[key] = settled

        def send(landed_before: bool) -> defer.Deferred[int]:
            address = cluster.segment_owner(writer.name)["native"] if writer is not None else None
            if not landed_before or address is None:
                raise PartitionError(Reason.NOT_OWNER,
                                     f"{topic.name}-{partition.partition}: no leader, or a batch before failed")
            return links.request(address, request, batch).addCallback(
                lambda answer: decode_reply(m.OffsetReply, answer[0]).offset)

        def settle(outcome: Any) -> Any:
            if tails.get(key) is settled:
                del tails[key]
            settled.callback(not isinstance(outcome, Failure))
            return outcome

        return (previous if previous is not None else defer.succeed(True)).addCallback(send).addBoth(settle)

    return append
