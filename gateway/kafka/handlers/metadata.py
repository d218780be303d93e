"""Metadata (key 3): this node as the only broker, leader of every partition of every topic.

Topics are streams; their partition count and topic id come from the topic registry (in memory), so a
Metadata answer never touches the store unless it auto-creates a topic. Auto-creation follows Kafka's
broker: the topic is created (here synchronously, off the reactor) and that round answers
LEADER_NOT_AVAILABLE; the client's next refresh sees the topic with its partitions.
"""

from __future__ import annotations

import logging
import uuid

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.internal_topics import (
    INTERNAL_TOPICS,
    InternalTopic,
    internal_topic,
    internal_topic_by_id,
)
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.metadata import MetadataRequest, MetadataResponse
from millrace.gateway.security.acls import (
    AUTHORIZED_OPERATIONS_OMITTED,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    operations_bit_field,
)
from millrace.streams.errors import Reason
from millrace.streams.topics import TopicError, TopicInfo, TopicRegistry, legal_topic_name

log = logging.getLogger(__name__)

METADATA = MetadataRequest.API_KEY
ZERO_UUID = uuid.UUID(int=0)

OPERATIONS_NOT_REQUESTED = AUTHORIZED_OPERATIONS_OMITTED
# Every topic operation: what a principal may do on a topic when no authorizer is configured
ALL_TOPIC_OPERATIONS = operations_bit_field(SUPPORTED_OPERATIONS[ResourceType.TOPIC])

_R = MetadataResponse
_Topic = MetadataResponse.MetadataResponseTopic


# On a single node a topic's entry depends only on its TopicInfo (replaced on every change), the node
# and whether operations were asked for (an entry asked with them is built with every topic operation,
# and copied with the principal's own when an authorizer is configured), so it is built once per TopicInfo: clients ask for every topic
# they produce to again and again, and with thousands of partitions rebuilding the entries was most of
# a Metadata request's cost. Entries are never changed once built. Names no longer in the registry are
# pruned when the cache outgrows it.
_ENTRIES: dict[tuple[int, str, bool], tuple[TopicInfo, _Topic]] = {}


def topic_metadata(ctx: RequestContext, topic: TopicInfo, include_operations: bool) -> _Topic:
    """One topic's entry: every partition led by this node, which is also the only replica."""
    if ctx.broker.cluster is not None:
        return _cluster_topic_metadata(ctx, topic, include_operations)
    key = (ctx.broker.config.node_id, topic.name, include_operations)
    cached = _ENTRIES.get(key)
    if cached is not None and cached[0] is topic:
        return _principals_operations(ctx, cached[1], include_operations)
    entry = _single_node_topic_metadata(ctx, topic, include_operations)
    if len(_ENTRIES) > 2 * ctx.broker.topics.record_count() + 100:
        _prune(ctx.broker.topics)
    _ENTRIES[key] = (topic, entry)
    return _principals_operations(ctx, entry, include_operations)


def _topic_operations(ctx: RequestContext, name: str | None, include_operations: bool) -> int:
    """A topic entry's authorized operations: the principal's, when asked for."""
    if not include_operations or name is None:
        return OPERATIONS_NOT_REQUESTED
    return ctx.authorized_operations(ResourceType.TOPIC, name)


def _principals_operations(ctx: RequestContext, entry: _Topic, include_operations: bool) -> _Topic:
    """A cached entry (built with every topic operation) as this request's principal sees it: a copy with
    its own operations, sharing the partitions (entries are never changed)."""
    if not include_operations or ctx.broker.acls is None:
        return entry
    return _R.MetadataResponseTopic(
        error_code=entry.error_code, name=entry.name, topic_id=entry.topic_id, is_internal=entry.is_internal,
        partitions=entry.partitions, topic_authorized_operations=_topic_operations(ctx, entry.name, True))


def _prune(registry: TopicRegistry) -> None:
    for key in [key for key in _ENTRIES if registry.get(key[1]) is not _ENTRIES[key][0]]:
        del _ENTRIES[key]


def _single_node_topic_metadata(ctx: RequestContext, topic: TopicInfo, include_operations: bool) -> _Topic:
    node = ctx.broker.config.node_id
    return _R.MetadataResponseTopic(
        error_code=0, name=topic.name, topic_id=topic.topic_id, is_internal=False,
        partitions=[
            _R.MetadataResponsePartition(error_code=0, partition_index=p, leader_id=node, leader_epoch=0,
                                         replica_nodes=[node], isr_nodes=[node], offline_replicas=[])
            for p in range(topic.partition_count)
        ],
        topic_authorized_operations=ALL_TOPIC_OPERATIONS if include_operations else OPERATIONS_NOT_REQUESTED,
    )


def _cluster_topic_metadata(ctx: RequestContext, topic: TopicInfo, include_operations: bool) -> _Topic:
    """On a cluster node: each partition's leader (its only replica) is the live owner of the container
    of its open segment; LEADER_NOT_AVAILABLE while that has none, or while this node has not loaded
    the topic yet (the load starts here, so the client's next refresh finds it)."""
    broker = ctx.broker
    assert broker.cluster is not None
    partitions = []
    for p, leader in enumerate(broker.cluster.partition_leaders(broker.partitions, topic)):
        if leader < 0:
            partitions.append(_R.MetadataResponsePartition(
                error_code=int(ErrorCode.LEADER_NOT_AVAILABLE), partition_index=p, leader_id=-1, leader_epoch=-1,
                replica_nodes=[], isr_nodes=[], offline_replicas=[]))
        else:
            partitions.append(_R.MetadataResponsePartition(
                error_code=0, partition_index=p, leader_id=leader, leader_epoch=0,
                replica_nodes=[leader], isr_nodes=[leader], offline_replicas=[]))
    return _R.MetadataResponseTopic(
        error_code=0, name=topic.name, topic_id=topic.topic_id, is_internal=False, partitions=partitions,
        topic_authorized_operations=_topic_operations(ctx, topic.name, include_operations))


def internal_topic_metadata(ctx: RequestContext, topic: InternalTopic, include_operations: bool) -> _Topic:
    """An internal topic's entry (``internal_topics``): flagged internal, led by its coordinator."""
    leader = topic.leader(ctx.broker)
    replicas = [leader] if leader >= 0 else []
    return _R.MetadataResponseTopic(
        error_code=0, name=topic.name, topic_id=topic.topic_id, is_internal=True,
        partitions=[
            _R.MetadataResponsePartition(
                error_code=0 if leader >= 0 else int(ErrorCode.LEADER_NOT_AVAILABLE), partition_index=p,
                leader_id=leader, leader_epoch=0 if leader >= 0 else -1, replica_nodes=replicas,
                isr_nodes=replicas, offline_replicas=[])
            for p in range(topic.partition_count)
        ],
        topic_authorized_operations=_topic_operations(ctx, topic.name, include_operations),
    )


def _error_topic(error: ErrorCode, name: str | None, topic_id: uuid.UUID = ZERO_UUID,
                 operations: int = OPERATIONS_NOT_REQUESTED) -> _Topic:
    """A topic answered with an error. Kafka gives the principal's operations (when asked for) only for
    a topic it may describe (one missing, or being auto-created), never for a refused one."""
    return _R.MetadataResponseTopic(error_code=int(error), name=name, topic_id=topic_id, is_internal=False,
                                    partitions=[], topic_authorized_operations=operations)


def _response(ctx: RequestContext, request: MetadataRequest, topics: list[_Topic]) -> MetadataResponse:
    config = ctx.broker.config
    version = ctx.api_version
    # Cluster operations live in Metadata only in v8..v10 (DescribeCluster carries them since).
    include_cluster_ops = 8 <= version <= 10 and request.include_cluster_authorized_operations
    cluster_operations = OPERATIONS_NOT_REQUESTED
    if include_cluster_ops:  # Kafka: the principal's cluster operations, none at all without DESCRIBE on it
        cluster_operations = (ctx.authorized_operations(ResourceType.CLUSTER)
                              if ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER) else 0)
    host, port = ctx.advertised()
    this_node = _R.MetadataResponseBroker(node_id=config.node_id, host=host, port=port, rack=None)
    brokers = [this_node]
    cluster = ctx.broker.cluster
    if cluster is not None:  # every live node, this one included even before its znode is seen
        live = cluster.brokers()
        brokers = [_R.MetadataResponseBroker(node_id=n.node_id, host=node_host, port=node_port, rack=None)
                   for n in live for node_host, node_port in [ctx.node_address(n)]]
        if not any(n.node_id == config.node_id for n in live):
            brokers.append(this_node)
    return _R(
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=config.cluster_id,
        controller_id=config.node_id if cluster is None else cluster.controller_id(config.node_id),
        topics=topics,
        cluster_authorized_operations=cluster_operations,
    )


@api(MetadataRequest, 0, 12)
def handle_metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse | Deferred[MetadataResponse]:
    broker = ctx.broker
    registry = broker.topics
    version = ctx.api_version
    include_ops = version >= 8 and request.include_topic_authorized_operations

    # A null list means every topic; so does an empty one in v0, which could not say null.
    if request.topics is None or (version == 0 and not request.topics):
        # Every topic the principal may describe (Kafka leaves the others out without a word).
        names = registry.names()
        if broker.acls is not None:  # no per-topic call at all without an authorizer
            names = [name for name in names if _describable(ctx, name)]
        topics = [registry.get(name) for name in names]
        return _response(ctx, request, [topic_metadata(ctx, t, include_ops) for t in topics if t is not None]
                         + [internal_topic_metadata(ctx, t, include_ops) for t in INTERNAL_TOPICS.values()
                            if _describable(ctx, t.name)])

    # Lookups by id begin at v12; before it Kafka refuses the whole request, each topic INVALID_REQUEST.
    if version < 12 and any(t.name is None or (version >= 10 and t.topic_id != ZERO_UUID) for t in request.topics):
        return _response(ctx, request, [
            _error_topic(ErrorCode.INVALID_REQUEST, t.name or "", t.topic_id if version >= 10 else ZERO_UUID)
            for t in request.topics])

    # Kafka answers each distinct topic once, whatever the request repeats.
    answers: dict[uuid.UUID | str | None, _Topic | None] = {}
    missing: list[str] = []
    for wanted in request.topics:
        topic_id = wanted.topic_id if version >= 12 else ZERO_UUID
        if topic_id != ZERO_UUID:
            if topic_id in answers:
                continue
            topic = registry.by_id(topic_id)
            by_id = internal_topic_by_id(topic_id)
            known = topic.name if topic is not None else by_id.name if by_id is not None else None
            if known is not None and not _describable(ctx, known):
                answers[topic_id] = _error_topic(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, topic_id)
                continue
            # A topic asked for by id and not found has no name to give.
            answers[topic_id] = (topic_metadata(ctx, topic, include_ops) if topic is not None else
                                 internal_topic_metadata(ctx, by_id, include_ops) if by_id is not None else
                                 _error_topic(ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id))
            continue
        name = wanted.name
        if name in answers:
            continue
        if name is None:  # v12 with neither a name nor an id
            answers[name] = _error_topic(ErrorCode.INVALID_REQUEST, None)
            continue
        topic = registry.get(name)
        named = internal_topic(name)
        if not _describable(ctx, name):  # whether it exists or not: its existence is not told
            answers[name] = _error_topic(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name)
        elif named is not None:  # never auto-created as a plain topic
            answers[name] = internal_topic_metadata(ctx, named, include_ops)
        elif topic is not None:
            answers[name] = topic_metadata(ctx, topic, include_ops)
        elif not legal_topic_name(name):
            answers[name] = _error_topic(ErrorCode.INVALID_TOPIC_EXCEPTION, name,
                                         operations=_topic_operations(ctx, name, include_ops))
        else:
            answers[name] = None  # filled in below
            missing.append(name)

    if not missing:
        return _response(ctx, request, [a for a in answers.values() if a is not None])
    if broker.cluster is None:  # this node made every topic there is: its registry is the whole table
        return _answer_missing(ctx, request, answers, missing, include_ops)

    def after_refresh(result: object) -> MetadataResponse | Deferred[MetadataResponse]:
        if isinstance(result, Failure):
            log.warning("reading the topics table for %s failed: %s", missing, result.getErrorMessage())
        for name in list(missing):
            topic = registry.get(name)
            if topic is not None:
                answers[name] = topic_metadata(ctx, topic, include_ops)
                missing.remove(name)
        return _answer_missing(ctx, request, answers, missing, include_ops)

    # A topic another cluster node created a moment ago may not be in this node's registry yet (it reads
    # the topics table every second): read it now, so a topic created anywhere is known everywhere at once
    # (a consumer told UNKNOWN_TOPIC_OR_PARTITION may give up: kcat -e does). A failed read answers with
    # what is known.
    return broker.blocking(registry.refresh).addBoth(after_refresh)


def _answer_missing(ctx: RequestContext, request: MetadataRequest, answers: dict[uuid.UUID | str | None, _Topic | None],
                    missing: list[str], include_ops: bool) -> MetadataResponse | Deferred[MetadataResponse]:
    """The topics no node has: auto-created when the request and the broker allow it, else unknown."""
    broker = ctx.broker
    version = ctx.api_version
    # Before v4 the request could not refuse auto-creation, so the broker's setting alone decides.
    allow_create = broker.config.auto_create_topics and (version < 4 or request.allow_auto_topic_creation)
    if allow_create and missing and not ctx.authorized(AclOperation.CREATE, ResourceType.CLUSTER):
        # Auto-creation needs CREATE on the cluster or on the topic; Kafka answers the rest as denied.
        for name in [n for n in missing if not ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, n)]:
            answers[name] = _error_topic(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name)
            missing.remove(name)
    if not missing or not allow_create:
        for name in missing:
            answers[name] = _error_topic(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name,
                                         operations=_topic_operations(ctx, name, include_ops))
        return _response(ctx, request, [a for a in answers.values() if a is not None])

    def created(errors: dict[str, ErrorCode]) -> MetadataResponse:
        for name, error in errors.items():
            answers[name] = _error_topic(error, name, operations=_topic_operations(ctx, name, include_ops))
        return _response(ctx, request, [a for a in answers.values() if a is not None])

    return broker.blocking(_auto_create, broker.topics, missing, broker.config.default_partitions).addCallback(created)


def _describable(ctx: RequestContext, name: str) -> bool:
    return ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name)


def _auto_create(registry: TopicRegistry, names: list[str], partitions: int) -> dict[str, ErrorCode]:
    """Blocking: create each missing topic with the broker's defaults; the answer for this round is
    LEADER_NOT_AVAILABLE (as Kafka's broker answers while its controller creates the topic)."""
    errors: dict[str, ErrorCode] = {}
    for name in names:
        try:
            registry.create(name, partitions)
            errors[name] = ErrorCode.LEADER_NOT_AVAILABLE
        except TopicError as exc:
            # Another request created it meanwhile: it exists, the client's retry will find it.
            errors[name] = ErrorCode.LEADER_NOT_AVAILABLE if exc.reason is Reason.TOPIC_EXISTS else error_code(exc)
            if exc.reason is not Reason.TOPIC_EXISTS:
                log.warning("auto-creating topic %r failed: %s", name, exc)
        except Exception:  # noqa: BLE001 - one topic's failure must not fail the others' metadata
            log.exception("auto-creating topic %r failed", name)
            errors[name] = ErrorCode.UNKNOWN_SERVER_ERROR
    return errors
