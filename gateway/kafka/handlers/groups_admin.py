"""Group administration: DescribeGroups (15), ListGroups (16), DeleteGroups (42)."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from millrace.gateway.kafka.groups import GROUP_AUTHORIZED_OPERATIONS, GroupCoordinator, get_coordinator
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.codec import response_class

DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42
NO_OPERATIONS = -(2**31)  # Kafka's "authorized operations not requested"


@api(DESCRIBE_GROUPS, 0, 5)
def handle_describe_groups(ctx: Any, request: Any) -> Any:
    version = ctx.api_version
    cls = response_class(DESCRIBE_GROUPS)
    # No authorizer is configured, so every group operation is authorized (Kafka answers the same).
    operations = GROUP_AUTHORIZED_OPERATIONS if version >= 3 and request.include_authorized_operations \
        else NO_OPERATIONS

    def describe(coordinator: GroupCoordinator) -> Any:
        groups = []
        for group_id in request.groups:
            error, s = coordinator.describe_group(group_id)
            groups.append(cls.DescribedGroup(
                error_code=int(error), group_id=group_id, group_state=s.state, protocol_type=s.protocol_type,
                protocol_data=s.protocol, authorized_operations=operations,
                members=[cls.DescribedGroupMember(
                    member_id=m.member_id, group_instance_id=m.instance_id if version >= 4 else None,
                    client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                    member_assignment=m.assignment) for m in s.members]))
        return cls(throttle_time_ms=0, groups=groups)

    return get_coordinator(ctx.broker).call(describe)


@api(LIST_GROUPS, 0, 5)
def handle_list_groups(ctx: Any, request: Any) -> Any:
    version = ctx.api_version
    cls = response_class(LIST_GROUPS)
    states = request.states_filter if version >= 4 else []
    types = request.types_filter if version >= 5 else []

    def list_groups(coordinator: GroupCoordinator) -> Any:
        error, overviews = coordinator.list_groups(states, types)
        return cls(throttle_time_ms=0, error_code=int(error), groups=[
            cls.ListedGroup(group_id=o.group_id, protocol_type=o.protocol_type, group_state=o.state,
                            group_type=o.group_type) for o in overviews])

    return get_coordinator(ctx.broker).call(list_groups)


@api(DELETE_GROUPS, 0, 2)
def handle_delete_groups(ctx: Any, request: Any) -> Any:
    cls = response_class(DELETE_GROUPS)

    def delete(coordinator: GroupCoordinator) -> Deferred:
        return coordinator.delete_groups(list(request.groups_names)).addCallback(
            lambda result: cls(throttle_time_ms=0, results=[
                cls.DeletableGroupResult(group_id=g, error_code=int(result[g])) for g in dict.fromkeys(
                    request.groups_names)]))

    return get_coordinator(ctx.broker).call(delete)
