"""DescribeClientQuotas (key 48): the client quotas a filter selects, as ``kafka-configs.sh --describe
--entity-type users|clients`` and admin clients' ``describeClientQuotas`` ask.

Kafka's answers: CLUSTER_AUTHORIZATION_FAILED without DESCRIBE_CONFIGS on the cluster; INVALID_REQUEST
for a filter it refuses (a type twice, a match string with the default or any-name match, none with
an exact one, ip with user or client-id) and UNSUPPORTED_VERSION for an unknown entity type; with
``strict``, only entities of exactly the filtered types. Served from memory."""

from __future__ import annotations

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.quotas.entities import QuotaError
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType

_R = DescribeClientQuotasResponse


def _refused(code: ErrorCode, message: str) -> DescribeClientQuotasResponse:
    refused = _R(throttle_time_ms=0, error_code=code, error_message=message)
    refused.entries = None  # as Kafka's error response (the constructor would make it [])
    return refused


@api(DescribeClientQuotasRequest, 0, 1)
def handle_describe_client_quotas(ctx: RequestContext, request: DescribeClientQuotasRequest
                                  ) -> DescribeClientQuotasResponse:
    if not ctx.authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return _refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    try:
        found = ctx.broker.quotas.table.describe(
            [(c.entity_type, c.match_type, c.match) for c in request.components], request.strict)
    except QuotaError as e:
        return _refused(e.code, e.message)
    return _R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=[
        _R.EntryData(entity=[_R.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                     values=[_R.ValueData(key=k, value=v) for k, v in values.items()])
        for entity, values in found])
