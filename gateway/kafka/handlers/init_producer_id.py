"""InitProducerId (key 22): a fresh producer id for an idempotent producer (epoch 0). Transactional
producers are refused until transactions arrive."""

from __future__ import annotations

from twisted.internet.defer import Deferred

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)

INIT_PRODUCER_ID = InitProducerIdRequest.API_KEY
Response = InitProducerIdResponse


@api(InitProducerIdRequest, 0, 5)
def handle_init_producer_id(ctx: RequestContext,
                            request: InitProducerIdRequest) -> Response | Deferred[Response]:
    if request.transactional_id is not None:
        return Response(error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), producer_id=-1,
                        producer_epoch=-1)
    return ctx.broker.blocking(ctx.broker.producer_ids.allocate).addCallback(
        lambda pid: Response(error_code=int(ErrorCode.NONE), producer_id=pid, producer_epoch=0))
