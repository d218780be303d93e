"""The stream layer's reasons and the two adapters' tables: every reason has an answer in each protocol."""

from __future__ import annotations

import pytest

from millrace.gateway.kafka.stream_errors import ERROR_CODES, error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.native.stream_errors import REFUSALS, native_refusal
from millrace.protocol.errors import (
    BadOffsetError,
    ConnectionLostError,
    ContainerOfflineError,
    EventsRefusedError,
    RetriableError,
    SegmentNotFoundError,
    SegmentSealedError,
    StoreError,
    WriterFencedError,
    WrongHostError,
)
from millrace.store.errors import DataCorruptionError, DataLogWriterFencedError
from millrace.streams.errors import PartitionError, Reason, reason_of, store_failure


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


def test_the_native_adapter_passes_the_store_error_on() -> None:
    """The native wire carries the store's errors: a moved container stays CONTAINER_OFFLINE there."""
    offline = ContainerOfflineError("container 0 moved")
    assert native_refusal(store_failure(offline, "append to t-0")) is offline
    assert isinstance(native_refusal(store_failure(TimeoutError(), "append to t-0")), RetriableError)
    assert isinstance(native_refusal(PartitionError(Reason.PRODUCER_FENCED)), WriterFencedError)
    refused = native_refusal(PartitionError(Reason.OUT_OF_ORDER_SEQUENCE, "sequence 5, expected 3"))
    assert isinstance(refused, EventsRefusedError) and str(refused) == "sequence 5, expected 3"


def test_kafka_answers_a_refusal_by_its_reason() -> None:
    assert error_code(PartitionError(Reason.LOADING)) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert error_code(PartitionError(Reason.PRODUCER_FENCED)) is ErrorCode.INVALID_PRODUCER_EPOCH
    assert error_code(ContainerOfflineError("not wrapped")) is ErrorCode.NOT_LEADER_OR_FOLLOWER
