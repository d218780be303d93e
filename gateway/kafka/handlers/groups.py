"""Classic group membership: JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14).

The logic is the coordinator's (``gateway.kafka.group_coordinator``); these handlers translate each version's
request and response fields.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred

from millrace.gateway.kafka.broker import RequestContext, get_coordinator
from millrace.gateway.kafka.classic_groups.group import JoinResult, SyncResult
from millrace.gateway.kafka.group_coordinator import GroupCoordinator
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from millrace.gateway.kafka_protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from millrace.gateway.kafka_protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from millrace.gateway.kafka_protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from millrace.gateway.security.acls import AclOperation, ResourceType

JOIN_GROUP = JoinGroupRequest.API_KEY
HEARTBEAT = HeartbeatRequest.API_KEY
LEAVE_GROUP = LeaveGroupRequest.API_KEY
SYNC_GROUP = SyncGroupRequest.API_KEY


def group_denied(ctx: RequestContext, group_id: str) -> bool:
    """Whether the principal lacks READ on the group (GROUP_AUTHORIZATION_FAILED), as every classic
    membership and offset request needs."""
    return not ctx.authorized(AclOperation.READ, ResourceType.GROUP, group_id)


def client_host(ctx: RequestContext) -> str:
    """Kafka reports a member's host as the client's address with a leading slash."""
    return "/" + ctx.host


@api(JoinGroupRequest, 0, 9)
def handle_join_group(ctx: RequestContext,
                      request: JoinGroupRequest) -> JoinGroupResponse | Deferred[JoinGroupResponse]:
    version = ctx.api_version
    if group_denied(ctx, request.group_id):
        return join_response(version, JoinResult(request.member_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))

    def join(coordinator: GroupCoordinator) -> Deferred[JoinGroupResponse]:
        # v0 has no rebalance timeout: the session timeout serves as both.
        rebalance_timeout = request.session_timeout_ms if version == 0 else request.rebalance_timeout_ms
        return coordinator.membership.join_group(
            request.group_id, request.member_id, request.group_instance_id,
            require_known_member_id=version >= 4 and request.group_instance_id is None,
            supports_skip_assignment=version >= 9, client_id=ctx.client_id or "", client_host=client_host(ctx),
            rebalance_timeout_ms=rebalance_timeout, session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in request.protocols], reason=request.reason,
        ).addCallback(lambda result: join_response(version, result))

    return get_coordinator(ctx.broker).call(join)


def join_response(version: int, r: JoinResult) -> JoinGroupResponse:
    cls = JoinGroupResponse
    return cls(
        throttle_time_ms=0,
        error_code=int(r.error),
        generation_id=r.generation_id,
        protocol_type=r.protocol_type if version >= 7 else None,
        # Before v7 the protocol name is not nullable: "" stands for none.
        protocol_name=r.protocol_name if version >= 7 else (r.protocol_name or ""),
        leader=r.leader_id,
        skip_assignment=r.skip_assignment and version >= 9,
        member_id=r.member_id,
        members=[cls.JoinGroupResponseMember(member_id=mid, group_instance_id=iid, metadata=meta)
                 for mid, iid, meta in r.members],
    )


@api(SyncGroupRequest, 0, 5)
def handle_sync_group(ctx: RequestContext,
                      request: SyncGroupRequest) -> SyncGroupResponse | Deferred[SyncGroupResponse]:
    version = ctx.api_version
    if version >= 5 and (request.protocol_type is None or request.protocol_name is None):
        # From v5 the client must name both; a request without them is inconsistent.
        return sync_response(version, SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
    if group_denied(ctx, request.group_id):
        return sync_response(version, SyncResult(ErrorCode.GROUP_AUTHORIZATION_FAILED))

    def sync(coordinator: GroupCoordinator) -> Deferred[SyncGroupResponse]:
        assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
        return coordinator.membership.sync_group(
            request.group_id, request.generation_id, request.member_id, request.group_instance_id,
            request.protocol_type, request.protocol_name, assignments,
        ).addCallback(lambda result: sync_response(version, result))

    return get_coordinator(ctx.broker).call(sync)


def sync_response(version: int, r: SyncResult) -> SyncGroupResponse:
    return SyncGroupResponse(
        throttle_time_ms=0, error_code=int(r.error),
        protocol_type=r.protocol_type if version >= 5 else None,
        protocol_name=r.protocol_name if version >= 5 else None,
        assignment=r.assignment,
    )


@api(HeartbeatRequest, 0, 4)
def handle_heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse | Deferred[HeartbeatResponse]:
    if group_denied(ctx, request.group_id):
        return HeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)

    def beat(coordinator: GroupCoordinator) -> HeartbeatResponse:
        error = coordinator.membership.heartbeat(request.group_id, request.member_id, request.group_instance_id,
                                      request.generation_id)
        return HeartbeatResponse(throttle_time_ms=0, error_code=int(error))

    return get_coordinator(ctx.broker).call(beat)


@api(LeaveGroupRequest, 0, 5)
def handle_leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse | Deferred[LeaveGroupResponse]:
    version = ctx.api_version
    cls = LeaveGroupResponse
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    if group_denied(ctx, request.group_id):
        return cls(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])

    def leave(coordinator: GroupCoordinator) -> LeaveGroupResponse:
        error, member_errors = coordinator.membership.leave_group(request.group_id, leaving)
        if version < 3:
            # One member, one error: the group's, else the member's.
            if error is ErrorCode.NONE and member_errors:
                error = member_errors[0]
            return cls(throttle_time_ms=0, error_code=int(error))
        return cls(throttle_time_ms=0, error_code=int(error), members=[
            cls.MemberResponse(member_id=mid, group_instance_id=iid, error_code=int(e))
            for (mid, iid), e in zip(leaving, member_errors, strict=False)
        ])

    return get_coordinator(ctx.broker).call(leave)
