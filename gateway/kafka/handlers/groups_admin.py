"""Group administration: DescribeGroups (15), ListGroups (16), DeleteGroups (42)."""

from __future__ import annotations

from twisted.internet.defer import Deferred

from millrace.gateway.kafka.broker import RequestContext, get_coordinator
from millrace.gateway.kafka.group_coordinator import GroupCoordinator
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from millrace.gateway.kafka_protocol.messages.describe_groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from millrace.gateway.kafka_protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from millrace.gateway.security.acls import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType

DESCRIBE_GROUPS = DescribeGroupsRequest.API_KEY
LIST_GROUPS = ListGroupsRequest.API_KEY
DELETE_GROUPS = DeleteGroupsRequest.API_KEY
NO_OPERATIONS = AUTHORIZED_OPERATIONS_OMITTED


@api(DescribeGroupsRequest, 0, 5)
def handle_describe_groups(ctx: RequestContext,
                           request: DescribeGroupsRequest) -> DescribeGroupsResponse | Deferred[DescribeGroupsResponse]:
    version = ctx.api_version
    cls = DescribeGroupsResponse
    include_operations = version >= 3 and request.include_authorized_operations

    def operations(error: ErrorCode, group_id: str) -> int:
        # Kafka gives the principal's group operations only for a group described without error.
        if not include_operations or error is not ErrorCode.NONE:
            return NO_OPERATIONS
        return ctx.authorized_operations(ResourceType.GROUP, group_id)

    def describe(coordinator: GroupCoordinator) -> DescribeGroupsResponse:
        groups = []
        for group_id in request.groups:
            if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
                groups.append(cls.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id,
                                                 group_state="", protocol_type="", protocol_data="", members=[],
                                                 authorized_operations=NO_OPERATIONS))
                continue
            error, s = coordinator.describe_group(group_id)
            groups.append(cls.DescribedGroup(
                error_code=int(error), group_id=group_id, group_state=s.state, protocol_type=s.protocol_type,
                protocol_data=s.protocol, authorized_operations=operations(error, group_id),
                members=[cls.DescribedGroupMember(
                    member_id=m.member_id, group_instance_id=m.instance_id if version >= 4 else None,
                    client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                    member_assignment=m.assignment) for m in s.members]))
        return cls(throttle_time_ms=0, groups=groups)

    return get_coordinator(ctx.broker).call(describe)


@api(ListGroupsRequest, 0, 5)
def handle_list_groups(ctx: RequestContext,
                       request: ListGroupsRequest) -> ListGroupsResponse | Deferred[ListGroupsResponse]:
    version = ctx.api_version
    states = request.states_filter if version >= 4 else []
    types = request.types_filter if version >= 5 else []

    def list_groups(coordinator: GroupCoordinator) -> ListGroupsResponse:
        error, overviews = coordinator.list_groups(states, types)
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER):  # else the groups it may describe
            overviews = [o for o in overviews if ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, o.group_id)]
        return ListGroupsResponse(throttle_time_ms=0, error_code=int(error), groups=[
            ListGroupsResponse.ListedGroup(group_id=o.group_id, protocol_type=o.protocol_type,
                                           group_state=o.state, group_type=o.group_type)
            for o in overviews])

    return get_coordinator(ctx.broker).call(list_groups)


@api(DeleteGroupsRequest, 0, 2)
def handle_delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> Deferred[DeleteGroupsResponse]:
    cls = DeleteGroupsResponse

    denied = {g for g in request.groups_names if not ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, g)}

    def delete(coordinator: GroupCoordinator) -> Deferred[DeleteGroupsResponse]:
        allowed = [g for g in request.groups_names if g not in denied]
        return coordinator.delete_groups(allowed).addCallback(
            lambda result: cls(throttle_time_ms=0, results=[
                cls.DeletableGroupResult(group_id=g, error_code=int(
                    ErrorCode.GROUP_AUTHORIZATION_FAILED if g in denied else result[g]))
                for g in dict.fromkeys(request.groups_names)]))

    return get_coordinator(ctx.broker).call(delete)
