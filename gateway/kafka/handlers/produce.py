"""Produce (key 0): record batches appended as sent, acknowledged once durable (acks 1 and all alike:
nothing is acknowledged before it is durable); acks=0 gets no response at all. Transactional batches
too (see ``partitions.storage``). Clients may not append to the internal topics (``internal_topics``)."""

from __future__ import annotations

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import Broker, RequestContext
from millrace.gateway.kafka.internal_topics import internal_topic
from millrace.gateway.kafka.registry import NO_RESPONSE, NoResponse, api
from millrace.gateway.kafka.resolve import topic_logs
from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.produce import ProduceRequest, ProduceResponse
from millrace.streams.partitions import PartitionError, PartitionLog
from millrace.streams.topics import TopicInfo

PRODUCE = ProduceRequest.API_KEY
Response = ProduceResponse


def _partition_result(index: int, error: int, base_offset: int = -1, log_start: int = -1,
                      message: str | None = None, log_append_time: int = -1,
                      record_errors: tuple[tuple[int, str], ...] = ()) -> ProduceResponse.PartitionProduceResponse:
    return Response.PartitionProduceResponse(
        index=index, error_code=int(error), base_offset=base_offset, log_append_time_ms=log_append_time,
        log_start_offset=log_start, error_message=message,
        record_errors=[Response.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=why)
                       for i, why in record_errors],
    )


def _produce_topic(ctx: RequestContext, topic_data: ProduceRequest.TopicProduceData, acks: int) -> defer.Deferred:
    broker = ctx.broker
    if internal_topic(topic_data.name) is not None:
        # Kafka's ReplicaManager refuses clients' appends to internal topics.
        return defer.succeed([
            _partition_result(pd.index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                              message=f"Cannot append to internal topic {topic_data.name}")
            for pd in topic_data.partition_data])

    def with_logs(found: tuple[TopicInfo, list[PartitionLog]] | None) -> defer.Deferred:
        if found is None:
            return defer.succeed([
                _partition_result(pd.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                for pd in topic_data.partition_data])
        topic, parts = found
        results: list[defer.Deferred] = []
        for pd in topic_data.partition_data:
            results.append(_produce_partition(broker, topic, parts, pd, acks))
        return defer.gatherResults(results)

    return topic_logs(broker, topic_data.name, auto_create=True).addCallback(with_logs)


def _produce_partition(broker: Broker, topic: TopicInfo, parts: list[PartitionLog],
                       pd: ProduceRequest.PartitionProduceData, acks: int) -> defer.Deferred:
    if not 0 <= pd.index < len(parts) or pd.records is None:
        return defer.succeed(_partition_result(pd.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    p = parts[pd.index]
    min_insync = int(topic.config("min.insync.replicas"))
    if acks == -1 and min_insync > 1:
        # A partition has one replica, so its ISR is this node alone: Kafka's answer on one broker.
        return defer.succeed(_partition_result(
            pd.index, ErrorCode.NOT_ENOUGH_REPLICAS,
            message=f"The size of the current ISR Set({broker.config.node_id}) is insufficient to satisfy the "
                    f"min.isr requirement of {min_insync} for partition {topic.name}-{pd.index}"))
    storage = broker.partitions
    now_ms = storage.now_ms()
    append_time = now_ms if topic.config("message.timestamp.type") == "LogAppendTime" else -1
    try:
        d = storage.append(topic, p, pd.records, now_ms)
    except PartitionError as exc:
        return defer.succeed(_partition_result(pd.index, error_code(exc), message=str(exc),
                                               record_errors=exc.record_errors))

    def ok(base: int) -> ProduceResponse.PartitionProduceResponse:
        return _partition_result(pd.index, ErrorCode.NONE, base, storage.offsets(p).log_start,
                                 log_append_time=append_time)

    def failed(failure: Failure) -> ProduceResponse.PartitionProduceResponse:
        # The store refused or failed the append: nothing was acknowledged. The reason says whether the
        # client should look for the partition elsewhere (NOT_LEADER_OR_FOLLOWER) or the store failed.
        return _partition_result(pd.index, error_code(failure.value), message=failure.getErrorMessage())

    return d.addCallbacks(ok, failed)


@api(ProduceRequest, 3, 11)
def handle_produce(ctx: RequestContext,
                   request: ProduceRequest) -> defer.Deferred[ProduceResponse] | NoResponse:
    # A transactional batch is admitted by its partition only inside its producer's ongoing transaction
    # (the partition storage asks the transaction coordinator), whatever transactional id is named here.
    per_topic = [_produce_topic(ctx, td, request.acks) for td in request.topic_data]
    gathered = defer.gatherResults(per_topic, consumeErrors=True)
    if request.acks == 0:
        gathered.addErrback(lambda f: None)  # no one to tell; errors are logged where they happen
        return NO_RESPONSE
    return gathered.addCallback(lambda results: Response(responses=[
        Response.TopicProduceResponse(name=td.name, partition_responses=partitions)
        for td, partitions in zip(request.topic_data, results, strict=True)
    ]))
