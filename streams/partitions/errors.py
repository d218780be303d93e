"""The one error the partition storage raises to handlers."""

from __future__ import annotations

from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.protocol.records import InvalidRecordError, RecordBatchError


class PartitionError(Exception):
    """A Kafka error for one partition of a request."""

    def __init__(self, error_code: ErrorCode, message: str = "",
                 record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code
        # (index of the record in its batch, why): ProduceResponse v8+'s record_errors
        self.record_errors = record_errors


def batch_refusal(exc: RecordBatchError) -> PartitionError:
    """The partition's answer to a record blob the codec refused."""
    code = ErrorCode.INVALID_RECORD if isinstance(exc, InvalidRecordError) else ErrorCode.CORRUPT_MESSAGE
    return PartitionError(code, str(exc))
