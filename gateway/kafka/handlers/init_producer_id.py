"""InitProducerId (key 22): a fresh producer id for an idempotent producer (epoch 0), or, with a
transactional id, the transaction coordinator's id and (bumped) epoch for that transactional id,
which fences any older instance of it."""

from __future__ import annotations

from twisted.internet.defer import Deferred

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType

INIT_PRODUCER_ID = InitProducerIdRequest.API_KEY
Response = InitProducerIdResponse


@api(InitProducerIdRequest, 0, 5)
def handle_init_producer_id(ctx: RequestContext,
                            request: InitProducerIdRequest) -> Response | Deferred[Response]:
    if request.transactional_id is not None:
        if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return Response(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
                            producer_epoch=-1)
        # v3+ names the producer's current id and epoch (KIP-360); before v4 a fenced producer is told
        # INVALID_PRODUCER_EPOCH, as Kafka tells it.
        named = ctx.api_version >= 3
        elsewhere = ctx.broker.transactions.check()  # on a cluster: another node coordinates, or loading
        if elsewhere is not None:
            return Response(error_code=int(elsewhere), producer_id=-1, producer_epoch=-1)
        d = ctx.broker.transactions.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms,
            request.producer_id if named else -1, request.producer_epoch if named else -1)

        def respond(outcome: tuple[ErrorCode, int, int]) -> Response:
            error, pid, epoch = outcome
            if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
                error = ErrorCode.INVALID_PRODUCER_EPOCH
            return Response(error_code=int(error), producer_id=pid, producer_epoch=epoch)

        return d.addCallback(respond)
    if not _may_write_idempotently(ctx):
        return Response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    return ctx.broker.blocking(ctx.broker.producer_ids.allocate_for, str(ctx.principal)).addCallback(
        lambda pid: Response(error_code=int(ErrorCode.NONE), producer_id=pid, producer_epoch=0))


def _may_write_idempotently(ctx: RequestContext) -> bool:
    """Kafka's rule for an idempotent producer's id: IDEMPOTENT_WRITE on the cluster, or WRITE on at least
    one topic (authorizeByResourceType)."""
    acls = ctx.broker.acls
    if acls is None or ctx.authorized(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER):
        return True
    return acls.authorizer.authorize_by_resource_type(ctx.principal, ctx.host, AclOperation.WRITE, ResourceType.TOPIC)
