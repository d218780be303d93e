"""AlterClientQuotas (key 49): set or remove client quotas (``quotas.table.QuotaTable``), as
``kafka-configs.sh --alter --entity-type users|clients --add-config producer_byte_rate=...`` and admin
clients' ``alterClientQuotas`` do.

Kafka's answers: CLUSTER_AUTHORIZATION_FAILED for every entry without ALTER_CONFIGS on the cluster;
per entry, INVALID_REQUEST for an entity or key Kafka refuses (an unknown key, a value not above 0, a
fraction for an integral key, a key or entity given twice). ``validate_only`` checks and writes nothing.
Changes are durable before they are answered; every node applies them within a second."""

from __future__ import annotations

from twisted.internet import defer

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.quotas.table import Alteration
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType

_Entry = AlterClientQuotasResponse.EntryData
_Entity = AlterClientQuotasResponse.EntityData


def _answer(request: AlterClientQuotasRequest, results: list[tuple[ErrorCode, str | None]]) -> AlterClientQuotasResponse:
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
        _Entry(error_code=code, error_message=message,
               entity=[_Entity(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
        for entry, (code, message) in zip(request.entries, results, strict=True)])


@api(AlterClientQuotasRequest, 0, 1)
def handle_alter_client_quotas(ctx: RequestContext, request: AlterClientQuotasRequest
                               ) -> defer.Deferred[AlterClientQuotasResponse]:
    if not ctx.authorized(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER):
        return defer.succeed(_answer(request, [(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
                                               for _ in request.entries]))
    alterations = [Alteration([(e.entity_type, e.entity_name) for e in entry.entity],
                              [(op.key, None if op.remove else op.value) for op in entry.ops])
                   for entry in request.entries]
    table = ctx.broker.quotas.table
    return ctx.broker.blocking(table.alter, alterations, request.validate_only).addCallback(
        lambda results: _answer(request, results))
