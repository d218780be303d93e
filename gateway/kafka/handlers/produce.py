"""Produce (key 0): record batches appended as sent, acknowledged once durable (acks 1 and all alike:
nothing is acknowledged before it is durable); acks=0 gets no response at all. Transactional batches
too (see ``partitions.storage``)."""

from __future__ import annotations

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import Broker, RequestContext
from millrace.gateway.kafka.partitions import PartitionError, PartitionLog
from millrace.gateway.kafka.registry import NO_RESPONSE, NoResponse, api
from millrace.gateway.kafka.resolve import topic_logs
from millrace.gateway.kafka.topics import TopicInfo
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.produce import ProduceRequest, ProduceResponse

PRODUCE = ProduceRequest.API_KEY
Response = ProduceResponse


def _partition_result(index: int, error: int, base_offset: int = -1, log_start: int = -1,
                      message: str | None = None) -> ProduceResponse.PartitionProduceResponse:
    return Response.PartitionProduceResponse(
        index=index, error_code=int(error), base_offset=base_offset, log_append_time_ms=-1,
        log_start_offset=log_start, error_message=message,
    )


def _produce_topic(ctx: RequestContext, topic_data: ProduceRequest.TopicProduceData) -> defer.Deferred:
    broker = ctx.broker

    def with_logs(found: tuple[TopicInfo, list[PartitionLog]] | None) -> defer.Deferred:
        if found is None:
            return defer.succeed([
                _partition_result(pd.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                for pd in topic_data.partition_data])
        topic, parts = found
        results: list[defer.Deferred] = []
        for pd in topic_data.partition_data:
            results.append(_produce_partition(broker, topic, parts, pd))
        return defer.gatherResults(results)

    return topic_logs(broker, topic_data.name, auto_create=True).addCallback(with_logs)


def _produce_partition(broker: Broker, topic: TopicInfo, parts: list[PartitionLog],
                       pd: ProduceRequest.PartitionProduceData) -> defer.Deferred:
    if not 0 <= pd.index < len(parts) or pd.records is None:
        return defer.succeed(_partition_result(pd.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    p = parts[pd.index]
    storage = broker.partitions
    try:
        d = storage.append(topic, p, pd.records)
    except PartitionError as exc:
        return defer.succeed(_partition_result(pd.index, exc.error_code, message=str(exc)))

    def ok(base: int) -> ProduceResponse.PartitionProduceResponse:
        return _partition_result(pd.index, ErrorCode.NONE, base, storage.offsets(p).log_start)

    def failed(failure: Failure) -> ProduceResponse.PartitionProduceResponse:
        # The store refused or failed the append: nothing was acknowledged; the client retries.
        return _partition_result(pd.index, ErrorCode.NOT_LEADER_OR_FOLLOWER, message=failure.getErrorMessage())

    return d.addCallbacks(ok, failed)


@api(ProduceRequest, 3, 11)
def handle_produce(ctx: RequestContext,
                   request: ProduceRequest) -> defer.Deferred[ProduceResponse] | NoResponse:
    # A transactional batch is admitted by its partition only inside its producer's ongoing transaction
    # (the partition storage asks the transaction coordinator), whatever transactional id is named here.
    per_topic = [_produce_topic(ctx, td) for td in request.topic_data]
    gathered = defer.gatherResults(per_topic, consumeErrors=True)
    if request.acks == 0:
        gathered.addErrback(lambda f: None)  # no one to tell; errors are logged where they happen
        return NO_RESPONSE
    return gathered.addCallback(lambda results: Response(responses=[
        Response.TopicProduceResponse(name=td.name, partition_responses=partitions)
        for td, partitions in zip(request.topic_data, results, strict=True)
    ]))
