"""What the native gateway answers for a refusal or failure of the stream layer: one table, reason to
the protocol error whose status goes on the wire.

The native protocol speaks the segment store's own errors, so a partition failure caused by the store
(``streams.errors.store_failure``: a container offline or moved, a sealed segment, a store I/O failure)
is answered with that store error itself, as before the stream layer named reasons: the native client
already knows what each means (a moved container: look up the owner again). Every other refusal goes
through the table.
"""

from __future__ import annotations

from collections.abc import Callable

from millrace.protocol.errors import (
    EventsRefusedError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RetriableError,
    StoreError,
    StreamExistsError,
    StreamNotFoundError,
    WriterFencedError,
)
from millrace.streams.errors import Reason, StreamError

REFUSALS: dict[Reason, Callable[[str], StoreError]] = {
    # Try again: the same node once it loaded the partition, or the owner the client looks up.
    Reason.NOT_OWNER: RetriableError,
    Reason.LOADING: RetriableError,
    Reason.SEGMENT_SEALED: RetriableError,
    Reason.BUSY: RetriableError,
    Reason.STORAGE_FAILURE: RetriableError,
    Reason.TIMEOUT: RetriableError,
    Reason.UNEXPECTED: RetriableError,
    Reason.UNKNOWN_TOPIC: StreamNotFoundError,
    Reason.UNKNOWN_PARTITION: StreamNotFoundError,
    Reason.TOPIC_EXISTS: StreamExistsError,
    Reason.INVALID_TOPIC_NAME: InvalidRequestError,
    Reason.INVALID_PARTITION_COUNT: InvalidRequestError,
    Reason.INVALID_CONFIG: InvalidRequestError,
    Reason.INVALID_REQUEST: InvalidRequestError,
    Reason.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    # A newer instance of the writer id took over its producer id: this one must stop.
    Reason.PRODUCER_FENCED: WriterFencedError,
    # Refused for good: the same batch would be refused again.
    Reason.OUT_OF_ORDER_SEQUENCE: EventsRefusedError,
    Reason.UNKNOWN_PRODUCER: EventsRefusedError,
    Reason.NOT_IN_TRANSACTION: EventsRefusedError,
    Reason.TRANSACTIONAL_ID_REQUIRED: EventsRefusedError,
    Reason.PRODUCER_NOT_OWNED: EventsRefusedError,
    Reason.COORDINATOR_FENCED: EventsRefusedError,
    Reason.CORRUPT_RECORD: EventsRefusedError,
    Reason.INVALID_RECORD: EventsRefusedError,
    Reason.RECORD_TOO_LARGE: EventsRefusedError,
    Reason.INVALID_TIMESTAMP: EventsRefusedError,
}


def native_refusal(exc: StreamError) -> Exception:
    """The native answer to ``exc``: the store's own error when the store caused it, else the table's (a
    refusal for good names its reason, which the writer reads)."""
    if isinstance(exc.__cause__, StoreError):
        return exc.__cause__
    error = REFUSALS[exc.reason]
    if error is EventsRefusedError:
        return EventsRefusedError(str(exc), exc.reason.value)
    return error(str(exc))
