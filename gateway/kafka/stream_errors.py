"""What the Kafka gateway answers for a refusal or failure of the stream layer: one table, reason to
``ErrorCode``, as Redpanda's ``map_produce_error_code``.

Kafka's own choices decide it (ReplicaManager.appendToLocalLog, DelayedProduce): a partition this broker
does not lead now is NOT_LEADER_OR_FOLLOWER, which makes the client refresh its metadata and retry; a
disk that failed is KAFKA_STORAGE_ERROR (also retriable, after a metadata refresh); a produce that timed
out is REQUEST_TIMED_OUT; any other exception is UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.streams.errors import Reason, reason_of

ERROR_CODES: dict[Reason, ErrorCode] = {
    Reason.NOT_OWNER: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    # Kafka answers this while a partition's leadership moves; a Millrace partition loading is the same
    # moment seen from the new owner.
    Reason.LOADING: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    # The stream scaled: the partition's appends go to the successor segment once it is loaded.
    Reason.SEGMENT_SEALED: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    Reason.UNKNOWN_TOPIC: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    Reason.UNKNOWN_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    Reason.TOPIC_EXISTS: ErrorCode.TOPIC_ALREADY_EXISTS,
    Reason.INVALID_TOPIC_NAME: ErrorCode.INVALID_TOPIC_EXCEPTION,
    Reason.INVALID_PARTITION_COUNT: ErrorCode.INVALID_PARTITIONS,
    Reason.INVALID_CONFIG: ErrorCode.INVALID_CONFIG,
    Reason.INVALID_REQUEST: ErrorCode.INVALID_REQUEST,
    Reason.OFFSET_OUT_OF_RANGE: ErrorCode.OFFSET_OUT_OF_RANGE,
    Reason.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
    Reason.OUT_OF_ORDER_SEQUENCE: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    Reason.UNKNOWN_PRODUCER: ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    Reason.NOT_IN_TRANSACTION: ErrorCode.INVALID_TXN_STATE,
    Reason.TRANSACTIONAL_ID_REQUIRED: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    # A client resets its producer id on this one (KIP-360): the owner never sees it, a thief stops.
    Reason.PRODUCER_NOT_OWNED: ErrorCode.UNKNOWN_PRODUCER_ID,
    Reason.COORDINATOR_FENCED: ErrorCode.TRANSACTION_COORDINATOR_FENCED,
    Reason.BUSY: ErrorCode.CONCURRENT_TRANSACTIONS,
    Reason.CORRUPT_RECORD: ErrorCode.CORRUPT_MESSAGE,
    Reason.INVALID_RECORD: ErrorCode.INVALID_RECORD,
    Reason.RECORD_TOO_LARGE: ErrorCode.MESSAGE_TOO_LARGE,
    Reason.INVALID_TIMESTAMP: ErrorCode.INVALID_TIMESTAMP,
    Reason.STORAGE_FAILURE: ErrorCode.KAFKA_STORAGE_ERROR,
    Reason.TIMEOUT: ErrorCode.REQUEST_TIMED_OUT,
    Reason.UNEXPECTED: ErrorCode.UNKNOWN_SERVER_ERROR,
}


class KafkaError(Exception):
    """A refusal already in Kafka's terms (another broker's answer), passed on as it came."""

    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code


def error_code(exc: BaseException | None) -> ErrorCode:
    """Kafka's answer for ``exc``: a stream error's reason through the table, a failure of the store
    under a partition by what it means (``reason_of``), a ``KafkaError`` as it is."""
    if isinstance(exc, KafkaError):
        return exc.error_code
    return ERROR_CODES[reason_of(exc)]
