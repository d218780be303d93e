"""Transactions (KIP-98/447): AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
TxnOffsetCommit (28), DescribeTransactions (65) and ListTransactions (66). The coordinator's rules are
in ``gateway.kafka.transactions.coordinator``; here requests are checked against the topic registry
and answered in each version's shape.

Versions are those of the classic ("v1") transaction protocol: the newer one (KIP-890 part 2: Produce
v12, EndTxn v5, AddPartitionsToTxn v4+ which are broker-to-broker) is not served, and clients fall
back to v1 because ApiVersions advertises neither those versions nor the transaction.version feature.
Before version 2 of AddPartitionsToTxn, AddOffsetsToTxn and EndTxn (and before TxnOffsetCommit v3) a
fenced producer is told INVALID_PRODUCER_EPOCH, as Kafka tells it, since PRODUCER_FENCED did not exist.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import RequestContext, get_coordinator
from millrace.gateway.kafka.group_coordinator import GroupCoordinator
from millrace.gateway.kafka.group_store import OffsetAndMetadata
from millrace.gateway.kafka.node_requests import request_node
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka.transactions import TransactionCoordinator, TxnState
from millrace.gateway.kafka.transactions.markers import (
    CLIENT_ID,
    GROUP_COORDINATOR_CLIENT_ID,
    TXN_OFFSET_COMMIT_VERSION,
    offset_errors,
    txn_offset_commit_request,
)
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)
from millrace.gateway.kafka_protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)
from millrace.gateway.kafka_protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from millrace.gateway.kafka_protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from millrace.gateway.kafka_protocol.messages.list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from millrace.gateway.kafka_protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType

log = logging.getLogger(__name__)


def _coordinator(ctx: RequestContext) -> TransactionCoordinator:
    return ctx.broker.transactions


def _may_write(ctx: RequestContext, transactional_id: str) -> bool:
    return ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _fenced(ctx: RequestContext, first_version: int = 2) -> ErrorCode:
    return ErrorCode.PRODUCER_FENCED if ctx.api_version >= first_version else ErrorCode.INVALID_PRODUCER_EPOCH


@api(AddPartitionsToTxnRequest, 0, 5)
def handle_add_partitions_to_txn(ctx: RequestContext,
                                 request: AddPartitionsToTxnRequest) -> defer.Deferred[AddPartitionsToTxnResponse]:
    if ctx.api_version >= 4:
        return _add_partitions_between_nodes(ctx, request)
    cls = AddPartitionsToTxnResponse
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    unknown = set()
    for topic, partition in wanted:
        info = ctx.broker.topics.get(topic)
        if info is None or not 0 <= partition < info.partition_count:
            unknown.add((topic, partition))

    def respond(errors: dict[tuple[str, int], ErrorCode]) -> AddPartitionsToTxnResponse:
        by_topic: dict[str, list[AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult]] = {}
        for topic, partition in wanted:
            by_topic.setdefault(topic, []).append(cls.AddPartitionsToTxnPartitionResult(
                partition_index=partition, partition_error_code=int(errors[(topic, partition)])))
        return cls(results_by_topic_v3_and_below=[
            cls.AddPartitionsToTxnTopicResult(name=name, results_by_partition=parts) for name, parts in by_topic.items()])

    if not _may_write(ctx, request.v3_and_below_transactional_id):
        return defer.succeed(respond(dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)))
    denied = {tp for tp in wanted if not ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, tp[0])}
    if denied:  # as Kafka: nothing is added, the others were not attempted
        return defer.succeed(respond({tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp in denied
                                      else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in wanted}))
    elsewhere = _coordinator(ctx).check()
    if elsewhere is not None:
        return defer.succeed(respond(dict.fromkeys(wanted, elsewhere)))
    if unknown:
        # As Kafka: nothing is added when any partition is unknown; the others were not attempted.
        return defer.succeed(respond({tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                                      else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in wanted}))
    d = _coordinator(ctx).add_partitions(request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                                         request.v3_and_below_producer_epoch, wanted, _fenced(ctx))
    return d.addCallback(lambda error: respond({tp: error for tp in wanted}))


def _add_partitions_between_nodes(ctx: RequestContext,
                                  request: AddPartitionsToTxnRequest) -> defer.Deferred[AddPartitionsToTxnResponse]:
    """Versions 4 and up, which only brokers send (Kafka requires CLUSTER_ACTION): transactions in a batch,
    each either added to (as below) or, with verify_only, checked: a partition leader on another node
    asks whether its partition is in the producer's ongoing transaction before admitting its first
    batch (KIP-890, ``transactions.verification``)."""
    cls = AddPartitionsToTxnResponse

    def result(transactional_id: str, errors: dict[tuple[str, int], ErrorCode]) -> Any:
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append(cls.AddPartitionsToTxnPartitionResult(
                partition_index=partition, partition_error_code=int(error)))
        return cls.AddPartitionsToTxnResult(transactional_id=transactional_id, topic_results=[
            cls.AddPartitionsToTxnTopicResult(name=name, results_by_partition=parts) for name, parts in by_topic.items()])

    if not ctx.authorized(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return defer.succeed(cls(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)))
    coordinator = _coordinator(ctx)
    elsewhere = coordinator.check()
    answers: list[defer.Deferred[Any]] = []
    for txn in request.transactions:
        wanted = [(t.name, p) for t in txn.topics for p in t.partitions]
        if elsewhere is not None:
            answers.append(defer.succeed(result(txn.transactional_id, dict.fromkeys(wanted, elsewhere))))
        elif txn.verify_only:
            answers.append(defer.succeed(result(txn.transactional_id, coordinator.verify(
                txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted))))
        else:
            added = coordinator.add_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted,
                                               ErrorCode.PRODUCER_FENCED)
            answers.append(added.addCallback(_each_partition, txn.transactional_id, wanted, result))
    return defer.gatherResults(answers).addCallback(lambda results: cls(results_by_transaction=results))


def _each_partition(error: ErrorCode, transactional_id: str, partitions: list[tuple[str, int]],
                    result: Callable[[str, dict[tuple[str, int], ErrorCode]], Any]) -> Any:
    return result(transactional_id, dict.fromkeys(partitions, error))


@api(AddOffsetsToTxnRequest, 0, 4)
def handle_add_offsets_to_txn(ctx: RequestContext,
                              request: AddOffsetsToTxnRequest) -> defer.Deferred[AddOffsetsToTxnResponse]:
    if not _may_write(ctx, request.transactional_id):
        return defer.succeed(AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return defer.succeed(AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
    elsewhere = _coordinator(ctx).check()
    if elsewhere is not None:
        return defer.succeed(AddOffsetsToTxnResponse(error_code=int(elsewhere)))
    if not request.group_id:
        return defer.succeed(AddOffsetsToTxnResponse(error_code=int(ErrorCode.INVALID_GROUP_ID)))
    d = _coordinator(ctx).add_offsets(request.transactional_id, request.producer_id, request.producer_epoch,
                                      request.group_id, _fenced(ctx))
    return d.addCallback(lambda error: AddOffsetsToTxnResponse(error_code=int(error)))


@api(EndTxnRequest, 0, 4)
def handle_end_txn(ctx: RequestContext, request: EndTxnRequest) -> defer.Deferred[EndTxnResponse]:
    if not _may_write(ctx, request.transactional_id):
        return defer.succeed(EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
                                            producer_epoch=-1))
    elsewhere = _coordinator(ctx).check()
    if elsewhere is not None:
        return defer.succeed(EndTxnResponse(error_code=int(elsewhere), producer_id=-1, producer_epoch=-1))
    d = _coordinator(ctx).end_txn(request.transactional_id, request.producer_id, request.producer_epoch,
                                  request.committed, _fenced(ctx))
    return d.addCallback(lambda error: EndTxnResponse(error_code=int(error), producer_id=-1, producer_epoch=-1))


@api(TxnOffsetCommitRequest, 0, 4)
def handle_txn_offset_commit(ctx: RequestContext,
                             request: TxnOffsetCommitRequest) -> defer.Deferred[TxnOffsetCommitResponse]:
    cls = TxnOffsetCommitResponse
    now = int(time.time() * 1000)
    requested = [(t.name, p) for t in request.topics for p in t.partitions]
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    errors: dict[tuple[str, int], ErrorCode] = {}
    # Between nodes (the client ids below) the request was authorized where the client sent it.
    internal = ctx.client_id in (CLIENT_ID, GROUP_COORDINATOR_CLIENT_ID)
    refused = None if internal else (
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if not _may_write(ctx, request.transactional_id) else
        ErrorCode.GROUP_AUTHORIZATION_FAILED if not ctx.authorized(AclOperation.READ, ResourceType.GROUP,
                                                                   request.group_id) else None)
    for topic, p in requested:
        if refused is not None or not (internal or ctx.authorized(AclOperation.READ, ResourceType.TOPIC, topic)):
            errors[(topic, p.partition_index)] = refused or ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        info = ctx.broker.topics.get(topic)
        if info is None or not 0 <= p.partition_index < info.partition_count:
            errors[(topic, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        offsets[(topic, p.partition_index)] = OffsetAndMetadata(
            offset=p.committed_offset, leader_epoch=p.committed_leader_epoch if ctx.api_version >= 2 else -1,
            metadata=p.committed_metadata or "", commit_timestamp=now)

    def respond(error: ErrorCode) -> TxnOffsetCommitResponse:
        by_topic: dict[str, list[TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition]] = {}
        for topic, p in requested:
            tp = (topic, p.partition_index)
            by_topic.setdefault(topic, []).append(cls.TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=int(errors.get(tp, error))))
        return cls(topics=[cls.TxnOffsetCommitResponseTopic(name=name, partitions=parts)
                           for name, parts in by_topic.items()])

    if not offsets:
        return defer.succeed(respond(ErrorCode.NONE))
    if ctx.client_id == CLIENT_ID:
        return _commit_ended(ctx, request, offsets)
    if ctx.client_id == GROUP_COORDINATOR_CLIENT_ID:
        # Forwarded by the group coordinator, which checked the member: kept with the transaction here.
        elsewhere = _coordinator(ctx).check()
        if elsewhere is not None:
            return defer.succeed(respond(elsewhere))
        return _coordinator(ctx).txn_offset_commit(request.transactional_id, request.group_id, request.producer_id,
                                                   request.producer_epoch, offsets).addCallback(respond)
    member_id = request.member_id if ctx.api_version >= 3 else ""
    instance_id = request.group_instance_id if ctx.api_version >= 3 else None
    generation = request.generation_id if ctx.api_version >= 3 else -1

    def commit(groups: GroupCoordinator) -> defer.Deferred[ErrorCode]:
        group_error = groups.offsets.validate_transactional_commit(request.group_id, member_id, instance_id, generation)
        if group_error is not None:
            return defer.succeed(group_error)
        if _coordinator(ctx).check() is not None:
            return _forward(ctx, request, offsets)
        return _coordinator(ctx).txn_offset_commit(request.transactional_id, request.group_id, request.producer_id,
                                                   request.producer_epoch, offsets)

    d: defer.Deferred[Any] = defer.maybeDeferred(get_coordinator(ctx.broker).call, commit)
    fenced = _fenced(ctx, first_version=3)
    return d.addCallback(lambda error: respond(fenced if error is ErrorCode.PRODUCER_FENCED else error))


def _forward(ctx: RequestContext, request: TxnOffsetCommitRequest,
             offsets: dict[tuple[str, int], OffsetAndMetadata]) -> defer.Deferred[ErrorCode]:
    """A cluster's group coordinator passes a checked TxnOffsetCommit on to the transaction coordinator
    (Kafka's group coordinator keeps such offsets in its log until the marker; here the transaction
    keeps them, and its coordinator commits them in the group when the transaction commits)."""
    cluster = ctx.broker.cluster
    node = cluster.transaction_coordinator() if cluster is not None else None
    if node is None:
        return defer.succeed(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    forwarded = txn_offset_commit_request(request.transactional_id, request.group_id, request.producer_id,
                                          request.producer_epoch, offsets)

    def answered(errors: dict[tuple[str, int], ErrorCode]) -> ErrorCode:
        return next(iter(errors.values()), ErrorCode.NONE)

    def unreachable(failure: Failure) -> ErrorCode:
        log.info("forwarding TxnOffsetCommit to node %s failed: %s", node.node_id, failure.getErrorMessage())
        return ErrorCode.NOT_COORDINATOR  # the client looks the transaction coordinator up again

    d = request_node(ctx.broker.node_link, node, forwarded, TXN_OFFSET_COMMIT_VERSION, GROUP_COORDINATOR_CLIENT_ID)
    return d.addCallback(offset_errors).addCallbacks(answered, unreachable)


def _commit_ended(ctx: RequestContext, request: TxnOffsetCommitRequest,
                  offsets: dict[tuple[str, int], OffsetAndMetadata]) -> defer.Deferred[TxnOffsetCommitResponse]:
    """The transaction coordinator (another node) commits a committed transaction's offsets in the group
    coordinated here, as Kafka's group coordinator does when the commit marker reaches its log."""
    cls = TxnOffsetCommitResponse

    def answer(errors: dict[tuple[str, int], ErrorCode]) -> TxnOffsetCommitResponse:
        by_topic: dict[str, list[TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition]] = {}
        for (topic, partition) in offsets:
            by_topic.setdefault(topic, []).append(cls.TxnOffsetCommitResponsePartition(
                partition_index=partition, error_code=int(errors.get((topic, partition), ErrorCode.NONE))))
        return cls(topics=[cls.TxnOffsetCommitResponseTopic(name=name, partitions=parts)
                           for name, parts in by_topic.items()])

    d = defer.maybeDeferred(get_coordinator(ctx.broker).call,
                            lambda groups: groups.offsets.commit_transactional_offsets(request.group_id, offsets))
    return d.addCallback(answer)


@api(DescribeTransactionsRequest, 0, 0)
def handle_describe_transactions(ctx: RequestContext,
                                 request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    cls = DescribeTransactionsResponse
    states = []
    elsewhere = _coordinator(ctx).check()  # on a cluster: another node coordinates (or this one loads)
    for transactional_id in request.transactional_ids:
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            states.append(cls.TransactionState(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                               transactional_id=transactional_id, transaction_state="",
                                               transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1))
            continue
        if elsewhere is not None:
            states.append(cls.TransactionState(error_code=int(elsewhere), transactional_id=transactional_id,
                                               transaction_state="", transaction_start_time_ms=-1,
                                               producer_id=-1, producer_epoch=-1))
            continue
        meta = _coordinator(ctx).txns.get(transactional_id)
        if meta is None:
            states.append(cls.TransactionState(error_code=int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND),
                                               transactional_id=transactional_id, transaction_state="",
                                               transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(partition)
        states.append(cls.TransactionState(
            error_code=0, transactional_id=transactional_id, transaction_state=str(meta.state),
            transaction_timeout_ms=meta.timeout_ms, transaction_start_time_ms=meta.start_ms,
            producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
            topics=[cls.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
    return cls(throttle_time_ms=0, transaction_states=states)


@api(ListTransactionsRequest, 0, 1)
def handle_list_transactions(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    cls = ListTransactionsResponse
    known = {str(s) for s in TxnState}
    unknown = [s for s in request.state_filters if s not in known]
    wanted_states = {s for s in request.state_filters if s in known}
    wanted_pids = set(request.producer_id_filters)
    min_duration = request.duration_filter if ctx.api_version >= 1 else -1
    now = int(time.time() * 1000)
    found = []
    for meta in _coordinator(ctx).txns.values():
        if request.state_filters and str(meta.state) not in wanted_states:
            continue
        if wanted_pids and meta.producer_id not in wanted_pids:
            continue
        if min_duration >= 0 and (meta.start_ms < 0 or now - meta.start_ms <= min_duration):
            continue
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, meta.transactional_id):
            continue  # Kafka lists only the transactional ids the principal may describe
        found.append(cls.TransactionState(transactional_id=meta.transactional_id, producer_id=meta.producer_id,
                                          transaction_state=str(meta.state)))
    return cls(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown, transaction_states=found)
