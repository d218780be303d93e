"""Produce (key 0): record batches appended as sent, acknowledged once durable (acks 1 and all alike:
nothing is acknowledged before it is durable); acks=0 gets no response at all. Transactional batches
too (see ``partitions.storage``). Clients may not append to the internal topics (``internal_topics``)."""

from __future__ import annotations

from typing import cast

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import Broker, RequestContext
from millrace.gateway.kafka.internal_topics import internal_topic
from millrace.gateway.kafka.outcome import NO_RESPONSE, NoResponse
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka.resolve import Unloadable, loaded_topic_logs, topic_logs_or_error
from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.produce import ProduceRequest, ProduceResponse
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.gateway.security.principal import KafkaPrincipal
from millrace.gateway.shared.request_metrics import KafkaTraffic
from millrace.streams.partitions import PartitionError, PartitionLog, SegmentPartitionStorage
from millrace.streams.partitions.formats import TRANSACTIONAL_ATTRIBUTE
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


PartitionAnswer = ProduceResponse.PartitionProduceResponse


class _Answers:
    """One Produce request's partition answers in request order, filled in as each partition's append
    settles; ``done`` fires with the response once the last is in. (``gatherResults`` per topic and per
    request would do the same with two DeferredLists; a small request's cost is the hot path.)"""

    def __init__(self, request: ProduceRequest, traffic: KafkaTraffic) -> None:
        self.request = request
        self.traffic = traffic
        self.results: list[list[PartitionAnswer | None]] = [[None] * len(td.partition_data)
                                                            for td in request.topic_data]
        self.waiting = 1  # the handler's own hold, released once every partition is on its way
        self.done: defer.Deferred[ProduceResponse] = defer.Deferred()

    def wait(self, d: defer.Deferred[PartitionAnswer], t: int, i: int) -> None:
        self.waiting += 1
        d.addCallbacks(self.put, self.fail, callbackArgs=(t, i))

    def hold_until(self, d: defer.Deferred[None]) -> None:
        """Answer only once ``d`` (a topic's resolution, which starts its partitions' appends) fired."""
        self.waiting += 1
        d.addCallbacks(lambda _: self.release(), self.fail)

    def put(self, answer: PartitionAnswer, t: int, i: int) -> None:
        self.results[t][i] = answer
        self.release()

    def release(self) -> None:
        self.waiting -= 1
        if self.waiting == 0:
            self._count()
            self.done.callback(Response(responses=[
                # Every slot is filled by now.
                Response.TopicProduceResponse(name=td.name, partition_responses=cast("list[PartitionAnswer]", partitions))
                for td, partitions in zip(self.request.topic_data, self.results, strict=True)]))

    def _count(self) -> None:
        """Kafka's BytesInPerSec per topic (the batches of partitions that took them) and the errors
        the partitions answered, for /metrics."""
        traffic = self.traffic
        for td, answers in zip(self.request.topic_data, self.results, strict=True):
            appended = 0
            for pd, answer in zip(td.partition_data, answers, strict=True):
                code = answer.error_code if answer is not None else 0
                if code:
                    traffic.errors[PRODUCE, code] += 1
                elif pd.records is not None:
                    appended += len(pd.records)
            if appended:
                traffic.bytes_in[td.name] += appended

    def fail(self, failure: Failure) -> None:
        # A bug, not a refusal (refusals are answers): the connection logs it and closes.
        if self.waiting > 0:
            self.waiting = 0
            self.done.errback(failure)


def _produce_topic(ctx: RequestContext, t: int, answers: _Answers) -> None:
    topic_data = answers.request.topic_data[t]
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, topic_data.name):
        answers.results[t] = [_partition_result(pd.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                              for pd in topic_data.partition_data]
        return
    if internal_topic(topic_data.name) is not None:
        # Kafka's ReplicaManager refuses clients' appends to internal topics.
        answers.results[t] = [
            _partition_result(pd.index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                              message=f"Cannot append to internal topic {topic_data.name}")
            for pd in topic_data.partition_data]
        return

    def with_logs(found: tuple[TopicInfo, list[PartitionLog]] | Unloadable | None) -> None:
        if found is None or isinstance(found, Unloadable):
            error = found.error if found is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            answers.results[t] = [_partition_result(pd.index, error) for pd in topic_data.partition_data]
            return
        topic, parts = found
        request = answers.request
        acks, txn_id, principal = request.acks, request.transactional_id, ctx.principal
        for i, pd in enumerate(topic_data.partition_data):
            answer = _produce_partition(ctx.broker, topic, parts, pd, acks, txn_id, principal)
            if isinstance(answer, defer.Deferred):
                answers.wait(answer, t, i)
            else:
                answers.results[t][i] = answer

    ready = loaded_topic_logs(ctx.broker, topic_data.name)
    if ready is not None:
        with_logs(ready)  # the common case: no Deferred to wait on
        return
    answers.hold_until(topic_logs_or_error(ctx.broker, topic_data.name, auto_create=True).addCallback(with_logs))


def _produce_partition(broker: Broker, topic: TopicInfo, parts: list[PartitionLog],
                       pd: ProduceRequest.PartitionProduceData, acks: int, transactional_id: str | None,
                       principal: KafkaPrincipal) -> PartitionAnswer | defer.Deferred[PartitionAnswer]:
    if not 0 <= pd.index < len(parts) or pd.records is None:
        return _partition_result(pd.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    p = parts[pd.index]
    rules = topic.append_rules
    if acks == -1 and rules.min_insync_replicas > 1:
        # A partition has one replica, so its ISR is this node alone: Kafka's answer on one broker.
        return _partition_result(
            pd.index, ErrorCode.NOT_ENOUGH_REPLICAS,
            message=f"The size of the current ISR Set({broker.config.node_id}) is insufficient to satisfy the "
                    f"min.isr requirement of {rules.min_insync_replicas} for partition {topic.name}-{pd.index}")
    storage = broker.partitions
    now_ms = storage.now_ms()
    append_time = now_ms if rules.log_append_time else -1
    try:
        d = storage.append(topic, p, pd.records, now_ms, transactional_id=transactional_id,
                           producer_owner=str(principal))
    except PartitionError as exc:
        return _partition_result(pd.index, error_code(exc), message=str(exc), record_errors=exc.record_errors)
    return d.addCallbacks(_appended, _refused, callbackArgs=(pd.index, storage, p, append_time),
                          errbackArgs=(pd.index,))


def _appended(base: int, index: int, storage: SegmentPartitionStorage, p: PartitionLog,
              append_time: int) -> PartitionAnswer:
    return _partition_result(index, ErrorCode.NONE, base, storage.offsets(p).log_start, log_append_time=append_time)


def _refused(failure: Failure, index: int) -> PartitionAnswer:
    # The store refused or failed the append: nothing was acknowledged. The reason says whether the
    # client should look for the partition elsewhere (NOT_LEADER_OR_FOLLOWER) or the store failed.
    return _partition_result(index, error_code(failure.value), message=failure.getErrorMessage())


def _has_transactional_records(request: ProduceRequest) -> bool:
    """Whether any partition's batch is marked transactional (its attributes, read in place)."""
    for td in request.topic_data:
        for pd in td.partition_data:
            records = pd.records
            if records is not None and len(records) >= _ATTRIBUTES_END and (
                    records[_ATTRIBUTES_END - 1] & TRANSACTIONAL_ATTRIBUTE):
                return True
    return False


# The low byte of a RecordBatch v2's attributes (offset 21, two bytes): where the transactional bit is.
_ATTRIBUTES_END = 23


@api(ProduceRequest, 3, 11)
def handle_produce(ctx: RequestContext,
                   request: ProduceRequest) -> defer.Deferred[ProduceResponse] | NoResponse:
    # A transactional batch is admitted by its partition only inside its producer's ongoing transaction
    # (the partition storage asks the transaction coordinator), whatever transactional id is named here.
    answers = _Answers(request, ctx.broker.traffic)
    txn_id = request.transactional_id
    if (txn_id is None and _has_transactional_records(request)) or (
            txn_id is not None and not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)):
        # Kafka's KafkaApis: transactional records need a transactional id the principal may write.
        # Kafka refuses the whole request: every partition carries the error.
        answers.results = [[_partition_result(pd.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                            for pd in td.partition_data] for td in request.topic_data]
    else:
        for t in range(len(request.topic_data)):
            _produce_topic(ctx, t, answers)
    answers.release()
    if request.acks == 0:
        answers.done.addErrback(lambda f: None)  # no one to tell; errors are logged where they happen
        return NO_RESPONSE
    return answers.done
