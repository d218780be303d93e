"""CreateAcls (key 30), DescribeAcls (key 29) and DeleteAcls (key 31): the server's ACLs
(``security.acl_table.AclTable``), as ``kafka-acls.sh`` and admin clients manage them.

Kafka's answers: SECURITY_DISABLED when no authorizer is configured; CLUSTER_AUTHORIZATION_FAILED
without DESCRIBE (DescribeAcls) or ALTER (the others) on the cluster; per binding or filter, Kafka's
validation errors. Creations and deletions are durable before they are answered, and every later
request is authorized by them."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from twisted.internet import defer

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from millrace.gateway.kafka_protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from millrace.gateway.kafka_protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from millrace.gateway.security.acls import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    validate_filter,
)

_NO_AUTHORIZER = "No Authorizer is configured."
_CLUSTER_DENIED = "Cluster authorization failed."


def _filter(item: Any) -> AclBindingFilter:
    """A DescribeAcls request or DeleteAcls filter as an AclBindingFilter (unknown codes stay UNKNOWN)."""
    return AclBindingFilter(
        ResourcePatternFilter(ResourceType(item.resource_type_filter), item.resource_name_filter,
                              PatternType(item.pattern_type_filter)),
        AccessControlEntryFilter(item.principal_filter, item.host_filter, AclOperation(item.operation),
                                 AclPermissionType(item.permission_type)))


def _refusal(ctx: RequestContext, operation: AclOperation) -> tuple[ErrorCode, str] | None:
    """Kafka's answer when no authorizer is configured, or the principal may not do ``operation`` on the
    cluster (DESCRIBE to list ACLs, ALTER to change them); None to go on."""
    if ctx.broker.acls is None:
        return ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER
    if not ctx.authorized(operation, ResourceType.CLUSTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_DENIED
    return None


def _error(e: AclError) -> ErrorCode:
    return ErrorCode[e.code]


@api(DescribeAclsRequest, 0, 3)
def handle_describe_acls(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    def refused(code: ErrorCode, message: str) -> DescribeAclsResponse:
        return DescribeAclsResponse(throttle_time_ms=0, error_code=code, error_message=message, resources=[])

    acls = ctx.broker.acls
    denied = _refusal(ctx, AclOperation.DESCRIBE)
    if acls is None or denied is not None:
        return refused(*(denied or (ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)))
    acl_filter = _filter(request)
    try:
        validate_filter(acl_filter)
    except AclError as e:
        return refused(_error(e), e.message)
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = defaultdict(list)
    for binding in acls.describe(acl_filter):
        by_pattern[binding.pattern].append(binding.entry)
    resource = DescribeAclsResponse.DescribeAclsResource
    description = DescribeAclsResponse.AclDescription
    return DescribeAclsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, resources=[
        resource(resource_type=pattern.resource_type, resource_name=pattern.name, pattern_type=pattern.pattern_type,
                 acls=[description(principal=e.principal, host=e.host, operation=e.operation,
                                   permission_type=e.permission_type) for e in entries])
        for pattern, entries in by_pattern.items()])


@api(CreateAclsRequest, 0, 3)
def handle_create_acls(ctx: RequestContext, request: CreateAclsRequest) -> defer.Deferred[CreateAclsResponse]:
    result = CreateAclsResponse.AclCreationResult

    def answer(results: list[Any]) -> CreateAclsResponse:
        return CreateAclsResponse(throttle_time_ms=0, results=results)

    acls = ctx.broker.acls
    refused = _refusal(ctx, AclOperation.ALTER)
    if acls is None or refused is not None:
        code, message = refused or (ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
        return defer.succeed(answer([result(error_code=code, error_message=message) for _ in request.creations]))
    bindings = [AclBinding(ResourcePattern(ResourceType(c.resource_type), c.resource_name,
                                           PatternType(c.resource_pattern_type)),
                           AccessControlEntry(c.principal, c.host, AclOperation(c.operation),
                                              AclPermissionType(c.permission_type)))
                for c in request.creations]
    return ctx.broker.blocking(acls.create, bindings).addCallback(lambda errors: answer([
        result(error_code=ErrorCode.NONE, error_message=None) if e is None else
        result(error_code=_error(e), error_message=e.message) for e in errors]))


@api(DeleteAclsRequest, 0, 3)
def handle_delete_acls(ctx: RequestContext, request: DeleteAclsRequest) -> defer.Deferred[DeleteAclsResponse]:
    filter_result = DeleteAclsResponse.DeleteAclsFilterResult
    matching = DeleteAclsResponse.DeleteAclsMatchingAcl

    def answer(results: list[Any]) -> DeleteAclsResponse:
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)

    acls = ctx.broker.acls
    refused = _refusal(ctx, AclOperation.ALTER)
    if acls is None or refused is not None:
        code, message = refused or (ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
        return defer.succeed(answer([filter_result(error_code=code, error_message=message, matching_acls=[])
                                     for _ in request.filters]))

    def deleted(outcomes: list[list[AclBinding] | AclError]) -> DeleteAclsResponse:
        return answer([
            filter_result(error_code=_error(o), error_message=o.message, matching_acls=[])
            if isinstance(o, AclError) else
            filter_result(error_code=ErrorCode.NONE, error_message=None, matching_acls=[
                matching(error_code=ErrorCode.NONE, error_message=None, resource_type=b.pattern.resource_type,
                         resource_name=b.pattern.name, pattern_type=b.pattern.pattern_type,
                         principal=b.entry.principal, host=b.entry.host, operation=b.entry.operation,
                         permission_type=b.entry.permission_type) for b in o])
            for o in outcomes])

    return ctx.broker.blocking(acls.delete, [_filter(f) for f in request.filters]).addCallback(deleted)
