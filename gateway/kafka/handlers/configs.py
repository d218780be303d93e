"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Topic configs are the topic registry's: every Kafka 4.0 topic config and Millrace's own
(``topic_configs``), set explicitly (source DYNAMIC_TOPIC_CONFIG) or not (DEFAULT_CONFIG), with the
broker synonym that supplies the default. Changing retention.ms / retention.bytes updates the stream's
retention policy through the registry. Broker configs describe this node's static settings (command
line options) and are read-only: altering one is refused with INVALID_REQUEST, as Kafka refuses a
config that cannot be updated dynamically.

On a cluster, topic configs change on the controller only (as Kafka 4.0 brokers forward AlterConfigs
and IncrementalAlterConfigs to the active controller, KIP-590): a node that is not the controller sends
the request's TOPIC resources there with ``node_requests`` and answers with the controller's results,
BROKER resources answered by itself. Clients never see NOT_CONTROLLER from these APIs: while the
controller is unknown or does not answer, each forwarded resource answers REQUEST_TIMED_OUT (retriable),
which is what Kafka's ForwardingManager answers when a forward times out. A forwarded request is marked
by its client id and never forwarded again: a node that is not the controller (any more) answers it
NOT_CONTROLLER, as Kafka's inactive controllers do.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import KafkaConfig, RequestContext
from millrace.gateway.kafka.cluster import NOT_CONTROLLER_MESSAGE, not_controller
from millrace.gateway.kafka.node_requests import request_node
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from millrace.gateway.kafka_protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from millrace.gateway.kafka_protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.streams import topic_configs
from millrace.streams.errors import Reason
from millrace.streams.topics import (
    DEFAULT_CONFIGS,
    READ_ONLY_CONFIGS,
    TopicError,
    TopicInfo,
    TopicRegistry,
    legal_topic_name,
)

log = logging.getLogger(__name__)

DESCRIBE_CONFIGS = DescribeConfigsRequest.API_KEY
ALTER_CONFIGS = AlterConfigsRequest.API_KEY
INCREMENTAL_ALTER_CONFIGS = IncrementalAlterConfigsRequest.API_KEY

# ConfigResource.Type
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

# ConfigEntry.ConfigSource
TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# DescribeConfigsResponse.ConfigType
BOOLEAN, STRING, INT, LONG, LIST = topic_configs.BOOLEAN, topic_configs.STRING, topic_configs.INT, \
    topic_configs.LONG, topic_configs.LIST

# AlterConfigOp.OpType
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

LIST_CONFIGS = topic_configs.LIST_CONFIGS

#: Client id prefix of an alter a node forwards to the controller (followed by the sender's node id).
FORWARDED_CLIENT_ID = "millrace-config-forward-from-"


@dataclass(frozen=True)
class ConfigValue:
    name: str
    value: str | None
    source: int
    read_only: bool
    type: int
    doc: str
    synonyms: tuple[tuple[str, str | None, int], ...] = ()  # (name, value, source), highest precedence first


def topic_config_values(topic: TopicInfo) -> list[ConfigValue]:
    """Every config of ``topic`` with where its value comes from, sorted by name: DYNAMIC_TOPIC_CONFIG
    when the topic sets it, else DEFAULT_CONFIG; the synonyms (Kafka's order, highest precedence
    first) are the topic's own value and the broker config that supplies the default."""
    out = []
    for name in sorted(topic_configs.TOPIC_CONFIGS):
        d = topic_configs.TOPIC_CONFIGS[name]
        synonyms: list[tuple[str, str | None, int]] = []
        if name in topic.configs:
            synonyms.append((name, topic.configs[name], TOPIC_CONFIG))
        if d.synonyms:
            synonyms.append((d.synonyms[0], d.default, DEFAULT_CONFIG))
        source = TOPIC_CONFIG if name in topic.configs else DEFAULT_CONFIG
        out.append(ConfigValue(name, topic.config(name), source, d.read_only, d.type, d.doc, tuple(synonyms)))
    return out


def broker_config_values(config: KafkaConfig) -> list[ConfigValue]:
    """This node's settings under Kafka's broker config names; all fixed at start (read-only)."""
    def entry(name: str, value: Any, type_: int, doc: str, explicit: bool = False) -> ConfigValue:
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        source = STATIC_BROKER_CONFIG if explicit else DEFAULT_CONFIG
        return ConfigValue(name, text, source, True, type_, doc, ((name, text, source),))

    entries = [
        entry("broker.id", config.node_id, INT, "This node's id.", True),
        entry("node.id", config.node_id, INT, "This node's id.", True),
        entry("advertised.listeners", f"PLAINTEXT://{config.advertised_host}:{config.advertised_port}", LIST,
              "Where clients reach this node.", True),
        entry("num.partitions", config.default_partitions, INT,
              "Partitions of auto-created topics (--default-partitions).", config.default_partitions != 1),
        entry("auto.create.topics.enable", config.auto_create_topics, BOOLEAN,
              "Whether Metadata requests create unknown topics (--no-auto-create-topics).",
              not config.auto_create_topics),
        entry("default.replication.factor", 1, INT,
              "Replication factor of new topics: a partition is one stream slice; durability comes from the "
              "segment store's log, not from Kafka replicas."),
        entry("delete.topic.enable", True, BOOLEAN, "Topics can be deleted (their streams go away)."),
        entry("message.max.bytes", config.max_message_bytes, INT, "Largest record batch accepted."),
        entry("socket.request.max.bytes", config.max_request_bytes, INT, "Largest request accepted."),
        entry("group.initial.rebalance.delay.ms", config.group_initial_rebalance_delay_ms, INT,
              "Delay of a new group's first rebalance."),
        entry("group.min.session.timeout.ms", config.group_min_session_timeout_ms, INT,
              "Smallest session timeout a consumer may ask for."),
        entry("group.max.session.timeout.ms", config.group_max_session_timeout_ms, INT,
              "Largest session timeout a consumer may ask for."),
    ]
    # Defaults of topic configs, under their broker names.
    for d in topic_configs.TOPIC_CONFIGS.values():
        if d.synonyms and d.synonyms[0] not in {e.name for e in entries}:
            entries.append(entry(d.synonyms[0], d.default, d.type, d.doc))
    return sorted(entries, key=lambda e: e.name)


def _broker_name_error(ctx: RequestContext, name: str) -> tuple[ErrorCode, str] | None:
    """Kafka accepts the receiving broker's own id, or "" for the cluster-wide dynamic defaults."""
    if name == "" or name == str(ctx.broker.config.node_id):
        return None
    return ErrorCode.INVALID_REQUEST, (f"unexpected broker id {name!r}: expected "
                                       f"{ctx.broker.config.node_id} or the empty string")


# ---------------------------------------------------------------------------------------------- describe

_D = DescribeConfigsResponse


@api(DescribeConfigsRequest, 0, 4)
def handle_describe_configs(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    """In memory only: topic configs are cached by the registry, broker configs are the node's own."""
    version = ctx.api_version
    synonyms = version >= 1 and request.include_synonyms
    docs = version >= 3 and request.include_documentation
    results = []
    for resource in request.resources:
        result = _D.DescribeConfigsResult(error_code=0, error_message=None, resource_type=resource.resource_type,
                                          resource_name=resource.resource_name, configs=[])
        values: list[ConfigValue] = []
        refused = _config_refusal(ctx, AclOperation.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name)
        if refused is not None:
            result.error_code, result.error_message = refused
        elif resource.resource_type == TOPIC_RESOURCE:
            topic = ctx.broker.topics.get(resource.resource_name)
            if topic is not None:
                values = topic_config_values(topic)
            elif not legal_topic_name(resource.resource_name):
                result.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
                result.error_message = f"illegal topic name {resource.resource_name!r}"
            else:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"topic {resource.resource_name!r} does not exist"
        elif resource.resource_type == BROKER_RESOURCE:
            problem = _broker_name_error(ctx, resource.resource_name)
            if problem:
                result.error_code, result.error_message = problem
            elif resource.resource_name:
                values = broker_config_values(ctx.broker.config)
            # "" = cluster-wide dynamic defaults: Millrace has none, so an empty list.
        else:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"resource type {resource.resource_type} is not supported"
        keys = resource.configuration_keys
        if keys:  # null or empty = every key, as Kafka's ConfigHelper reads it
            wanted = set(keys)
            values = [v for v in values if v.name in wanted]
        result.configs = [_describe_entry(v, version, synonyms, docs) for v in values]
        results.append(result)
    return _D(throttle_time_ms=0, results=results)


def _describe_entry(v: ConfigValue, version: int, synonyms: bool,
                    docs: bool) -> DescribeConfigsResponse.DescribeConfigsResourceResult:
    return _D.DescribeConfigsResourceResult(
        name=v.name, value=v.value, read_only=v.read_only,
        is_default=version == 0 and v.source == DEFAULT_CONFIG,
        config_source=v.source, is_sensitive=False,
        synonyms=[_D.DescribeConfigsSynonym(name=n, value=val, source=s) for n, val, s in v.synonyms]
        if synonyms else [],
        config_type=v.type, documentation=v.doc if docs else None,
    )


# ---------------------------------------------------------------------------------------------- alter

@dataclass
class _Outcome:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


def _alter_response(cls: Any, resources: list[Any], outcomes: list[_Outcome]) -> Any:
    return cls(throttle_time_ms=0, responses=[
        cls.AlterConfigsResourceResponse(error_code=int(o.error), error_message=o.message,
                                         resource_type=r.resource_type, resource_name=r.resource_name)
        for r, o in zip(resources, outcomes, strict=True)
    ])


def _config_refusal(ctx: RequestContext, operation: AclOperation, resource_type: int,
                    name: str) -> tuple[ErrorCode, str] | None:
    """Kafka's refusal of a config resource the principal may not describe or alter: a topic's needs the
    operation on the topic, a broker's on the cluster."""
    if resource_type == TOPIC_RESOURCE and not ctx.authorized(operation, ResourceType.TOPIC, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."
    if resource_type == BROKER_RESOURCE and not ctx.authorized(operation, ResourceType.CLUSTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    return None


def _check_resources(ctx: RequestContext, resources: list[Any]) -> list[_Outcome | None]:
    """The refusals that need no store I/O; None where the resource is a topic to alter."""
    seen = Counter((r.resource_type, r.resource_name) for r in resources)
    out: list[_Outcome | None] = []
    for r in resources:
        names = Counter(c.name for c in r.configs)
        refused = _config_refusal(ctx, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name)
        if refused is not None:
            out.append(_Outcome(*refused))
        elif seen[(r.resource_type, r.resource_name)] > 1:
            out.append(_Outcome(ErrorCode.INVALID_REQUEST, "the resource appears more than once in the request"))
        elif any(n > 1 for n in names.values()):
            dup = sorted(k for k, n in names.items() if n > 1)
            out.append(_Outcome(ErrorCode.INVALID_REQUEST, f"duplicate config keys: {', '.join(dup)}"))
        elif r.resource_type == TOPIC_RESOURCE:
            if not legal_topic_name(r.resource_name):
                out.append(_Outcome(ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal topic name {r.resource_name!r}"))
            elif ctx.broker.topics.get(r.resource_name) is None:
                out.append(_Outcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    f"topic {r.resource_name!r} does not exist"))
            else:
                out.append(None)
        elif r.resource_type == BROKER_RESOURCE:
            problem = _broker_name_error(ctx, r.resource_name)
            if problem:
                out.append(_Outcome(*problem))
            elif r.configs:
                names_list = ", ".join(c.name for c in r.configs)
                out.append(_Outcome(ErrorCode.INVALID_REQUEST,
                                    f"cannot update these configs dynamically: {names_list} (Millrace broker "
                                    "configs are set on the command line)"))
            else:
                out.append(_Outcome())  # nothing to change is a success
        else:
            out.append(_Outcome(ErrorCode.INVALID_REQUEST, f"resource type {r.resource_type} is not supported"))
    return out


def _run_alters(registry: TopicRegistry, jobs: list[tuple[int, str, Any]], validate_only: bool) -> dict[int, _Outcome]:
    """Blocking: apply each topic's change; ``jobs`` are (index, topic, fn(TopicInfo) -> (changes,
    replace_all)). The changes are computed here, from the topic as it is now, not as it was when the
    request arrived."""
    out: dict[int, _Outcome] = {}
    for index, name, plan in jobs:
        try:
            topic = registry.get(name)
            if topic is None:
                raise TopicError(Reason.UNKNOWN_TOPIC, f"topic {name!r} does not exist")
            changes, replace_all = plan(topic)
            registry.alter_configs(name, changes, replace_all, validate_only)
            out[index] = _Outcome()
        except TopicError as exc:
            out[index] = _Outcome(error_code(exc), str(exc))
        except Exception as exc:  # noqa: BLE001 - one resource's failure must not fail the others
            log.exception("altering configs of topic %r failed", name)
            out[index] = _Outcome(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
    return out


# The two alter APIs share their shape but not their generated classes, hence ``Any`` for those here.
def _alter(ctx: RequestContext, request: AlterConfigsRequest | IncrementalAlterConfigsRequest, cls: Any,
           planner: Any) -> Any:
    resources: list[Any] = list(request.resources)
    if not not_controller(ctx.broker.cluster) or not any(r.resource_type == TOPIC_RESOURCE for r in resources):
        outcomes = _alter_here(ctx, resources, request.validate_only, planner)
        if isinstance(outcomes, Deferred):
            return outcomes.addCallback(lambda done: _alter_response(cls, resources, done))
        return _alter_response(cls, resources, outcomes)
    # Not the controller: its topic resources go there, the others are answered here.
    topics = [i for i, r in enumerate(resources) if r.resource_type == TOPIC_RESOURCE]
    others = [i for i, r in enumerate(resources) if r.resource_type != TOPIC_RESOURCE]
    local = _alter_here(ctx, [resources[i] for i in others], request.validate_only, planner)
    here = local if isinstance(local, Deferred) else defer.succeed(local)
    there = _alter_on_controller(ctx, request, [resources[i] for i in topics])

    def merged(results: list[list[_Outcome]]) -> Any:
        outcomes: list[_Outcome] = [_Outcome()] * len(resources)
        for indexes, answered in zip((others, topics), results, strict=True):
            for i, outcome in zip(indexes, answered, strict=True):
                outcomes[i] = outcome
        return _alter_response(cls, resources, outcomes)

    return defer.gatherResults([here, there], consumeErrors=True).addCallback(merged)


def _alter_here(ctx: RequestContext, resources: list[Any], validate_only: bool,
                planner: Any) -> list[_Outcome] | Deferred[list[_Outcome]]:
    """Each resource's outcome, altered by this node (at once when no topic is to be written)."""
    checks = _check_resources(ctx, resources)
    outcomes: list[_Outcome] = [c or _Outcome() for c in checks]
    jobs = []
    for i, (r, check) in enumerate(zip(resources, checks, strict=True)):
        if check is not None:
            continue
        problem = planner.validate(r.configs)
        if problem is not None:
            outcomes[i] = problem
        else:
            jobs.append((i, r.resource_name, planner.plan(r.configs)))
    if not jobs:
        return outcomes

    def done(results: dict[int, _Outcome]) -> list[_Outcome]:
        for i, outcome in results.items():
            outcomes[i] = outcome
        return outcomes

    return ctx.broker.blocking(_run_alters, ctx.broker.topics, jobs, validate_only).addCallback(done)


def _alter_on_controller(ctx: RequestContext, request: Any, resources: list[Any]) -> Deferred[list[_Outcome]]:
    """Reactor: the outcomes of ``resources`` (topics) altered by the controller, as the request asked
    (same API, version and validate_only); REQUEST_TIMED_OUT each while the controller cannot be asked."""
    broker = ctx.broker
    if (ctx.client_id or "").startswith(FORWARDED_CLIENT_ID):
        # Sent here as the controller, which this node is not (any more): the sender asks again.
        return defer.succeed([_Outcome(ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE) for _ in resources])
    node = broker.cluster.controller() if broker.cluster is not None else None
    if node is None:
        return defer.succeed([_Outcome(ErrorCode.REQUEST_TIMED_OUT, "no controller is elected now: try again")
                              for _ in resources])
    forward = type(request)(resources=resources, validate_only=request.validate_only)

    def answered(response: Any) -> Any:
        found = {(r.resource_type, r.resource_name): _Outcome(ErrorCode(r.error_code), r.error_message)
                 for r in response.responses}
        outcomes = []
        for r in resources:
            outcome = found.get((r.resource_type, r.resource_name),
                                _Outcome(ErrorCode.UNKNOWN_SERVER_ERROR, "the controller did not answer it"))
            if outcome.error == ErrorCode.NOT_CONTROLLER:  # it was not the controller any more
                outcome = _Outcome(ErrorCode.REQUEST_TIMED_OUT, "the controller changed meanwhile: try again")
            outcomes.append(outcome)
        if request.validate_only or all(o.error != ErrorCode.NONE for o in outcomes):
            return outcomes
        # So a DescribeConfigs after it (on this connection, say) finds the change here too.
        return broker.blocking(broker.topics.refresh).addBoth(_after_refresh, outcomes)

    def unreachable(failure: Failure) -> list[_Outcome]:
        log.info("forwarding %s to the controller (node %d) failed: %s", type(request).__name__, node.node_id,
                 failure.getErrorMessage())
        return [_Outcome(ErrorCode.REQUEST_TIMED_OUT,
                         f"the controller (node {node.node_id}) did not answer: try again") for _ in resources]

    d = request_node(broker.node_link, node, forward, ctx.api_version,
                     f"{FORWARDED_CLIENT_ID}{broker.config.node_id}")
    return d.addCallback(answered).addErrback(unreachable)


def _after_refresh(result: Any, outcomes: list[_Outcome]) -> list[_Outcome]:
    if isinstance(result, Failure):  # the next periodic refresh brings the change
        log.info("reading the topics table after a forwarded config change failed: %s", result.getErrorMessage())
    return outcomes


class _ReplaceAll:
    """Legacy AlterConfigs: the given set replaces the topic's explicit configs entirely."""

    @staticmethod
    def validate(configs: list[Any]) -> _Outcome | None:
        nulls = [c.name for c in configs if c.value is None]
        if nulls:
            return _Outcome(ErrorCode.INVALID_REQUEST, f"null value not supported for: {', '.join(nulls)}")
        return None

    @staticmethod
    def plan(configs: list[Any]) -> Any:
        changes = {c.name: c.value for c in configs}

        def apply(topic: TopicInfo) -> tuple[dict[str, str | None], bool]:
            # Set-at-creation configs cannot be altered, but a full replace that restates them unchanged
            # (describe, edit one value, alter) is not an alteration of them.
            return {k: v for k, v in changes.items()
                    if not (k in READ_ONLY_CONFIGS and v == topic.config(k))}, True

        return apply


class _Incremental:
    """IncrementalAlterConfigs: SET and DELETE on any topic config; APPEND and SUBTRACT on lists."""

    @staticmethod
    def validate(configs: list[Any]) -> _Outcome | None:
        for c in configs:
            if c.config_operation not in (SET, DELETE, APPEND, SUBTRACT):
                return _Outcome(ErrorCode.INVALID_REQUEST, f"unknown config operation {c.config_operation}")
            if c.config_operation != DELETE and c.value is None:
                return _Outcome(ErrorCode.INVALID_REQUEST, f"null value not supported for: {c.name}")
            if c.name not in DEFAULT_CONFIGS:
                return _Outcome(ErrorCode.INVALID_CONFIG, topic_configs.unknown_config_message(c.name))
            if c.config_operation in (APPEND, SUBTRACT) and c.name not in LIST_CONFIGS:
                verb = "APPEND" if c.config_operation == APPEND else "SUBTRACT"
                return _Outcome(ErrorCode.INVALID_CONFIG,
                                f"Can't {verb} to key {c.name} because its type is not LIST.")
        return None

    @staticmethod
    def plan(configs: list[Any]) -> Any:
        ops = [(c.name, c.config_operation, c.value) for c in configs]

        def apply(topic: TopicInfo) -> tuple[dict[str, str | None], bool]:
            changes: dict[str, str | None] = {}
            for name, op, value in ops:
                if op == SET:
                    changes[name] = value
                elif op == DELETE:
                    changes[name] = None
                else:
                    # Lists start from the current value, the default included (as Kafka does).
                    current = topic_configs.parse_list(topic.config(name))
                    items = topic_configs.parse_list(value)
                    if op == APPEND:
                        current += [x for x in items if x not in current]
                    else:
                        current = [x for x in current if x not in items]
                    changes[name] = ",".join(current)
            return changes, False

        return apply


@api(AlterConfigsRequest, 0, 2)
def handle_alter_configs(ctx: RequestContext,
                         request: AlterConfigsRequest) -> AlterConfigsResponse | Deferred[AlterConfigsResponse]:
    return _alter(ctx, request, AlterConfigsResponse, _ReplaceAll)


@api(IncrementalAlterConfigsRequest, 0, 1)
def handle_incremental_alter_configs(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse | Deferred[IncrementalAlterConfigsResponse]:
    return _alter(ctx, request, IncrementalAlterConfigsResponse, _Incremental)
