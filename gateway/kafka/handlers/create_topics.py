"""CreateTopics (key 19): each topic becomes a stream in the Kafka scope.

Checks follow Kafka's controller: duplicate names in one request are INVALID_REQUEST, an existing topic
is TOPIC_ALREADY_EXISTS, and since this is a single-node cluster a replication factor above 1 (or a
manual assignment naming another broker) cannot be met. The stream creation itself blocks on table and
controller I/O, so it runs on the broker's worker pool.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from twisted.internet.defer import Deferred

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.cluster import NOT_CONTROLLER_MESSAGE, not_controller
from millrace.gateway.kafka.handlers.configs import topic_config_values
from millrace.gateway.kafka.internal_topics import internal_topic
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.streams.topics import TopicError, TopicInfo, TopicRegistry, legal_topic_name

log = logging.getLogger(__name__)

CREATE_TOPICS = CreateTopicsRequest.API_KEY
_R = CreateTopicsResponse


@dataclass
class _Plan:
    name: str
    partitions: int = 0
    configs: dict[str, str] = field(default_factory=dict)
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    topic: TopicInfo | None = None


def _fail(plan: _Plan, error: ErrorCode, message: str) -> _Plan:
    plan.error, plan.message = error, message
    return plan


def replica_assignment_error(node: int, broker_ids: list[int]) -> str | None:
    """Why a manual replica list cannot be placed on this one-node cluster, or None if it can."""
    if not broker_ids:
        return "the manual partition assignment includes an empty replica list"
    if len(set(broker_ids)) != len(broker_ids):
        return f"the manual partition assignment includes a broker more than once: {broker_ids}"
    others = [b for b in broker_ids if b != node]
    if others:
        return f"the manual partition assignment includes broker {others[0]}, but no such broker is registered"
    return None


def _plan(ctx: RequestContext, t: CreateTopicsRequest.CreatableTopic) -> _Plan:
    config = ctx.broker.config
    plan = _Plan(t.name)
    if not_controller(ctx.broker.cluster):
        return _fail(plan, ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE)
    if not legal_topic_name(t.name):
        return _fail(plan, ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal topic name {t.name!r}: 1-249 characters "
                     "of [A-Za-z0-9._-], not '.' or '..'")
    if ctx.broker.topics.get(t.name) is not None or internal_topic(t.name) is not None:
        return _fail(plan, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} already exists")
    if t.assignments:
        # Kafka's controller checks in this order, with these two different errors.
        if t.replication_factor != -1:
            return _fail(plan, ErrorCode.INVALID_REPLICATION_FACTOR, "a manual partition assignment was "
                         "specified, but replication factor was not set to -1")
        if t.num_partitions != -1:
            return _fail(plan, ErrorCode.INVALID_REQUEST, "a manual partition assignment was specified, but "
                         "num_partitions was not set to -1")
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            return _fail(plan, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "partitions should be a consecutive 0-based integer sequence")
        for a in t.assignments:
            problem = replica_assignment_error(config.node_id, list(a.broker_ids))
            if problem:
                return _fail(plan, ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
        plan.partitions = len(indexes)
    else:
        plan.partitions = config.default_partitions if t.num_partitions == -1 else t.num_partitions
        if plan.partitions <= 0:
            return _fail(plan, ErrorCode.INVALID_PARTITIONS,
                         f"number of partitions was set to an invalid non-positive value ({t.num_partitions})")
        if t.replication_factor == 0 or t.replication_factor < -1:
            return _fail(plan, ErrorCode.INVALID_REPLICATION_FACTOR,
                         "replication factor must be larger than 0, or -1 to use the default value")
        if t.replication_factor > 1:
            return _fail(plan, ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"unable to replicate the partition {t.replication_factor} time(s): only 1 broker is "
                         "registered (Millrace's durability comes from its replicated segment store log)")
    nulls = [c.name for c in t.configs if c.value is None]
    if nulls:
        return _fail(plan, ErrorCode.INVALID_CONFIG, f"null value not supported for topic configs: {', '.join(nulls)}")
    plan.configs = {c.name: c.value for c in t.configs if c.value is not None}  # none are None by now
    return plan


def _create_all(registry: TopicRegistry, plans: list[_Plan], validate_only: bool) -> None:
    """Blocking: create (or just validate) every topic that passed the checks."""
    for plan in plans:
        if plan.error:
            continue
        try:
            plan.topic = registry.create(plan.name, plan.partitions, plan.configs, validate_only)
        except TopicError as exc:
            _fail(plan, error_code(exc), str(exc))
        except Exception as exc:  # noqa: BLE001 - one topic's failure must not fail the others
            log.exception("creating topic %r failed", plan.name)
            _fail(plan, ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))


def _result(ctx: RequestContext, plan: _Plan, version: int) -> CreateTopicsResponse.CreatableTopicResult:
    result = _R.CreatableTopicResult(name=plan.name, error_code=int(plan.error), error_message=plan.message)
    if plan.topic is not None and not plan.error:
        result.topic_id = plan.topic.topic_id
        # v5+ tells the client what it got, so it need not describe the topic afterwards; as Kafka's
        # controller does, only to a principal that may describe the topic's configs.
        if version >= 5 and not ctx.authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, plan.name):
            result.topic_config_error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        elif version >= 5:
            result.num_partitions = plan.topic.partition_count
            result.replication_factor = 1
            result.configs = [
                _R.CreatableTopicConfigs(name=v.name, value=v.value, read_only=v.read_only, config_source=v.source,
                                         is_sensitive=False)
                for v in topic_config_values(plan.topic)
            ]
    return result


@api(CreateTopicsRequest, 0, 7)
def handle_create_topics(ctx: RequestContext,
                         request: CreateTopicsRequest) -> CreateTopicsResponse | Deferred[CreateTopicsResponse]:
    version = ctx.api_version
    counts = Counter(t.name for t in request.topics)
    plans: list[_Plan] = []
    reported_duplicates: set[str] = set()
    cluster_create = ctx.authorized(AclOperation.CREATE, ResourceType.CLUSTER)  # else CREATE on each topic
    for t in request.topics:
        if counts[t.name] > 1:
            # Kafka answers a repeated name once, with INVALID_REQUEST, and creates nothing for it.
            if t.name not in reported_duplicates:
                reported_duplicates.add(t.name)
                plans.append(_fail(_Plan(t.name), ErrorCode.INVALID_REQUEST, "duplicate topic name"))
            continue
        if not cluster_create and not ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, t.name):
            plans.append(_fail(_Plan(t.name), ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."))
            continue
        plans.append(_plan(ctx, t))
    validate_only = version >= 1 and request.validate_only

    def respond(_: object = None) -> CreateTopicsResponse:
        return _R(throttle_time_ms=0, topics=[_result(ctx, p, version) for p in plans])

    if all(p.error for p in plans):
        return respond()
    return ctx.broker.blocking(_create_all, ctx.broker.topics, plans, validate_only).addCallback(respond)
