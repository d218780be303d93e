"""The stream layer's reasons and the two adapters' tables: every reason has an answer in each protocol,
and a produce the store fails is answered by what the failure means, not always NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.python import threadable
from twisted.python.failure import Failure

from millrace.gateway.kafka.handlers.produce import _produce_partition
from millrace.gateway.kafka.stream_errors import ERROR_CODES, error_code
from millrace.gateway.kafka.transactions.coordinator import TransactionCoordinator
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.produce import ProduceRequest, ProduceResponse
from millrace.gateway.native.stream_errors import REFUSALS, native_refusal
from millrace.gateway.security.principal import ANONYMOUS
from millrace.protocol.errors import (
    BadOffsetError,
    ConnectionLostError,
    ContainerOfflineError,
    EventsRefusedError,
    InvalidRequestError,
    RetriableError,
    SegmentNotFoundError,
    SegmentSealedError,
    StoreError,
    WriterFencedError,
    WrongHostError,
    error_details,
    error_from_status,
    status_of,
)
from millrace.protocol.events import OUT_OF_ORDER_SEQUENCE
from millrace.protocol.records import NewRecord, build_record_batch
from millrace.store.cluster.log_metadata import OwnershipLostError
from millrace.store.errors import DataCorruptionError, DataLogWriterFencedError
from millrace.streams.errors import PartitionError, Reason, StreamError, reason_of, store_failure
from millrace.streams.partitions.storage import SegmentPartitionStorage
from millrace.streams.topics import TopicInfo
from tests.kafka.test_partition_units import _Tables, _Topics, loaded_topic


def test_the_kafka_table_answers_every_reason() -> None:
    assert set(ERROR_CODES) == set(Reason)
    assert ErrorCode.NONE not in ERROR_CODES.values()


def test_the_native_table_answers_every_reason() -> None:
    assert set(REFUSALS) == set(Reason)
    for reason, refusal in REFUSALS.items():
        assert isinstance(refusal(reason.value), StoreError)


@pytest.mark.parametrize(("exc", "reason"), [
    (ContainerOfflineError("container 3 is closed"), Reason.NOT_OWNER),
    (DataLogWriterFencedError("a newer owner took the log"), Reason.NOT_OWNER),
    (OwnershipLostError("container 1's ownership znode changed"), Reason.NOT_OWNER),
    (ConnectionLostError("the owner went away"), Reason.NOT_OWNER),
    (ConnectionRefusedError("no owner listening"), Reason.NOT_OWNER),
    (WrongHostError("container 2 runs elsewhere", "s"), Reason.NOT_OWNER),
    (RetriableError("s is reloading there"), Reason.LOADING),
    (BadOffsetError("s: expected offset 10, length is 20", 10, 20), Reason.NOT_OWNER),
    (SegmentSealedError("s"), Reason.SEGMENT_SEALED),
    (SegmentNotFoundError("s"), Reason.UNKNOWN_PARTITION),
    (TimeoutError("no answer"), Reason.TIMEOUT),
    (DataCorruptionError("bad frame"), Reason.STORAGE_FAILURE),
    (StoreError("long-term storage read failed"), Reason.STORAGE_FAILURE),
    (OSError(28, "No space left on device"), Reason.STORAGE_FAILURE),
    (RuntimeError("a bug"), Reason.UNEXPECTED),
    (None, Reason.UNEXPECTED),
])
def test_a_store_failure_gets_the_reason_it_means(exc: BaseException | None, reason: Reason) -> None:
    assert reason_of(exc) is reason
    assert store_failure(exc, "append to t-0").reason is reason


@pytest.fixture
def reactor_thread() -> Iterator[None]:
    """This thread plays the reactor's: a store future completed already fires at once (to_deferred)."""
    previous = threadable.ioThread
    threadable.registerAsIOThread()
    yield
    threadable.ioThread = previous


class _FailingStore:
    """A segment store whose every append fails with ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def append(self, name: str, data: Any, **_: Any) -> Future[int]:
        future: Future[int] = Future()
        future.set_exception(self.error)
        return future


def _produce(error: BaseException) -> ProduceResponse.PartitionProduceResponse:
    topic = TopicInfo("t", uuid.uuid4(), ((0.0, 1.0),))
    clock = Clock()
    clock.advance(time.time())  # the batch's records are stamped now: within the topic's timestamp bounds
    storage = SegmentPartitionStorage(_FailingStore(error), _Topics(topic), _Tables(), None, clock, 1 << 20)
    parts = storage._install(loaded_topic(topic, ["s0"]))
    broker = SimpleNamespace(partitions=storage, config=SimpleNamespace(node_id=0))
    data = build_record_batch([NewRecord(key=b"k", value=b"v")])
    answered: list[Any] = []
    _produce_partition(broker, topic, parts, ProduceRequest.PartitionProduceData(index=0, records=data),  # type: ignore[arg-type]
                       acks=1, transactional_id=None, principal=ANONYMOUS).addCallback(answered.append)
    (result,) = answered
    return result


@pytest.mark.parametrize(("error", "code"), [
    (StoreError("long-term storage write failed"), ErrorCode.KAFKA_STORAGE_ERROR),
    (OSError(5, "Input/output error"), ErrorCode.KAFKA_STORAGE_ERROR),
    (DataCorruptionError("bad frame"), ErrorCode.KAFKA_STORAGE_ERROR),
    (TimeoutError("no answer in time"), ErrorCode.REQUEST_TIMED_OUT),
    (RuntimeError("a bug"), ErrorCode.UNKNOWN_SERVER_ERROR),
    # An ownership change or a scaled stream: the client refreshes its metadata and retries elsewhere.
    (ContainerOfflineError("container 0 moved"), ErrorCode.NOT_LEADER_OR_FOLLOWER),
    (SegmentSealedError("s0"), ErrorCode.NOT_LEADER_OR_FOLLOWER),
])
def test_produce_answers_a_failed_append_by_its_cause(reactor_thread: None, error: BaseException,
                                                      code: ErrorCode) -> None:
    result = _produce(error)
    assert ErrorCode(result.error_code) is code
    assert result.base_offset == -1


def test_the_native_adapter_passes_the_store_error_on() -> None:
    """The native wire carries the store's errors: a moved container stays CONTAINER_OFFLINE there."""
    offline = ContainerOfflineError("container 0 moved")
    assert native_refusal(store_failure(offline, "append to t-0")) is offline
    assert isinstance(native_refusal(store_failure(TimeoutError(), "append to t-0")), RetriableError)
    assert isinstance(native_refusal(PartitionError(Reason.PRODUCER_FENCED)), WriterFencedError)
    refused = native_refusal(PartitionError(Reason.OUT_OF_ORDER_SEQUENCE, "sequence 5, expected 3"))
    assert isinstance(refused, EventsRefusedError) and str(refused) == "sequence 5, expected 3"


def test_a_native_refusal_names_its_reason_on_the_wire() -> None:
    """The writer resends a batch refused as out of sequence behind one that failed, and gives up on any
    other refusal: the reason must reach it, in the stream layer's words, not as a Kafka code."""
    refused = native_refusal(PartitionError(Reason.OUT_OF_ORDER_SEQUENCE, "sequence 5, expected 3"))
    status = status_of(refused)
    header = {"error": str(refused), **error_details(refused)}
    received = error_from_status(status, json.loads(json.dumps(header)))
    assert isinstance(received, EventsRefusedError) and received.reason == OUT_OF_ORDER_SEQUENCE
    too_large = native_refusal(PartitionError(Reason.RECORD_TOO_LARGE, "2 MB"))
    assert isinstance(too_large, EventsRefusedError) and too_large.reason == "record too large"


@pytest.mark.parametrize(("code", "native"), [
    (ErrorCode.CONCURRENT_TRANSACTIONS, RetriableError),  # the id's old transaction is being fenced
    (ErrorCode.NOT_COORDINATOR, RetriableError),
    (ErrorCode.COORDINATOR_NOT_AVAILABLE, RetriableError),
    (ErrorCode.PRODUCER_FENCED, WriterFencedError),
    (ErrorCode.INVALID_TRANSACTION_TIMEOUT, InvalidRequestError),
    (ErrorCode.UNKNOWN_SERVER_ERROR, RetriableError),
])
def test_a_refused_writer_lease_is_answered_in_native_terms(code: ErrorCode, native: type[Exception]) -> None:
    """OPEN_WRITER leases the writer id from the transaction coordinator, whose answers are Kafka codes;
    the native writer gets the stream layer's reason through the native table instead."""
    coordinator = TransactionCoordinator.__new__(TransactionCoordinator)
    coordinator.init_producer_id = lambda *_: defer.succeed((code, -1, -1))  # type: ignore[method-assign]
    failures: list[Failure] = []
    coordinator.lease_writer("millrace.writer:w", 60_000).addErrback(failures.append)
    (failure,) = failures
    assert isinstance(failure.value, StreamError)
    assert isinstance(native_refusal(failure.value), native)


def test_kafka_answers_a_refusal_by_its_reason() -> None:
    assert error_code(PartitionError(Reason.LOADING)) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert error_code(PartitionError(Reason.PRODUCER_FENCED)) is ErrorCode.INVALID_PRODUCER_EPOCH
    assert error_code(ContainerOfflineError("not wrapped")) is ErrorCode.NOT_LEADER_OR_FOLLOWER
