"""The consumer group protocol's APIs (KIP-848): ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).
The decisions are ``consumer_groups.coordinator``'s; this module only maps the wire to and from it."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from millrace.gateway.kafka.broker import RequestContext, get_coordinator
from millrace.gateway.kafka.consumer_groups.assignors import Assignment
from millrace.gateway.kafka.consumer_groups.coordinator import HeartbeatRequest, HeartbeatResult
from millrace.gateway.kafka.group_coordinator import GroupCoordinator
from millrace.gateway.kafka.handlers.groups import client_host
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from millrace.gateway.kafka_protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from millrace.gateway.security.acls import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType

CONSUMER_GROUP_HEARTBEAT = ConsumerGroupHeartbeatRequest.API_KEY
CONSUMER_GROUP_DESCRIBE = ConsumerGroupDescribeRequest.API_KEY
NO_OPERATIONS = AUTHORIZED_OPERATIONS_OMITTED


@api(ConsumerGroupHeartbeatRequest, 0, 1)
def handle_consumer_group_heartbeat(
        ctx: RequestContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse | Deferred[ConsumerGroupHeartbeatResponse]:
    cls = ConsumerGroupHeartbeatResponse
    refused: tuple[ErrorCode, str] | None = None
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        refused = ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."
    elif any(not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
             for name in request.subscribed_topic_names or ()):
        refused = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."
    if refused is not None:
        return cls(throttle_time_ms=0, error_code=refused[0], error_message=refused[1], member_id=None,
                   member_epoch=0, heartbeat_interval_ms=0)
    owned = None if request.topic_partitions is None else {
        tp.topic_id: frozenset(tp.partitions) for tp in request.topic_partitions}
    req = HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex if ctx.api_version >= 1 else None,
        server_assignor=request.server_assignor, owned=owned)

    def respond(result: HeartbeatResult) -> ConsumerGroupHeartbeatResponse:
        if result.error is not ErrorCode.NONE:
            # Kafka answers errors with the other fields at their defaults.
            return cls(throttle_time_ms=0, error_code=int(result.error), error_message=result.message,
                       member_id=None, member_epoch=0, heartbeat_interval_ms=0)
        assignment = None if result.assignment is None else cls.Assignment(topic_partitions=[
            cls.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(
                result.assignment.items(), key=lambda kv: str(kv[0])) if ps])
        return cls(throttle_time_ms=0, error_code=0, error_message=None, member_id=result.member_id,
                   member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
                   assignment=assignment)

    def beat(coordinator: GroupCoordinator) -> Any:
        outcome = coordinator.consumer.heartbeat(req, ctx.api_version, ctx.client_id or "", client_host(ctx))
        if isinstance(outcome, Deferred):
            return outcome.addCallback(respond)
        return respond(outcome)

    return get_coordinator(ctx.broker).call(beat)


@api(ConsumerGroupDescribeRequest, 0, 0)
def handle_consumer_group_describe(
        ctx: RequestContext, request: ConsumerGroupDescribeRequest
) -> ConsumerGroupDescribeResponse | Deferred[ConsumerGroupDescribeResponse]:
    cls = ConsumerGroupDescribeResponse
    topics = ctx.broker.topics

    def assignment(a: Assignment) -> ConsumerGroupDescribeResponse.Assignment:
        parts = []
        for topic_id, partitions in a.items():
            info = topics.by_id(topic_id)
            if info is not None and partitions:  # a deleted topic's partitions are no longer shown
                parts.append(cls.TopicPartitions(topic_id=topic_id, topic_name=info.name,
                                                 partitions=sorted(partitions)))
        return cls.Assignment(topic_partitions=sorted(parts, key=lambda p: p.topic_name))

    def describe(coordinator: GroupCoordinator) -> ConsumerGroupDescribeResponse:
        groups = []
        for group_id in request.group_ids:
            if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
                groups.append(cls.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id,
                                                 error_message="Group authorization failed.", group_state="",
                                                 authorized_operations=NO_OPERATIONS))
                continue
            error, message, cg = coordinator.consumer.describe(group_id)
            if cg is None:
                groups.append(cls.DescribedGroup(error_code=int(error), error_message=message, group_id=group_id,
                                                 group_state="Dead" if error is ErrorCode.GROUP_ID_NOT_FOUND else "",
                                                 authorized_operations=NO_OPERATIONS))
                continue
            groups.append(cls.DescribedGroup(
                error_code=0, group_id=group_id, group_state=cg.state().value, group_epoch=cg.group_epoch,
                assignment_epoch=cg.assignment_epoch, assignor_name=cg.assignor or coordinator.consumer.assignors[0],
                # Kafka gives the principal's operations only for a group described without error.
                authorized_operations=ctx.authorized_operations(ResourceType.GROUP, group_id)
                if request.include_authorized_operations else NO_OPERATIONS,
                members=[cls.Member(
                    member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.epoch,
                    client_id=m.client_id, client_host=m.client_host,
                    subscribed_topic_names=list(m.subscribed_names), subscribed_topic_regex=m.subscribed_regex,
                    assignment=assignment(m.assignment.assigned),
                    target_assignment=assignment(cg.target.get(m.member_id, {})))
                    for m in cg.members.values()]))
        return cls(throttle_time_ms=0, groups=groups)

    return get_coordinator(ctx.broker).call(describe)
