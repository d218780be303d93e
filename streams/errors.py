"""Why the stream layer refuses or fails something, in its own terms.

The partition logs and the topics registry raise ``PartitionError`` and ``TopicError``, each naming a
``Reason``; they never name a wire protocol's code. Each protocol adapter turns a reason into its own
answer in one table: the Kafka gateway into an ``ErrorCode`` (``gateway/kafka/stream_errors.py``), the native
gateway into a native error (``gateway/native/stream_errors.py``). A failure of the segment store under a
partition becomes a reason here too (``store_failure``), so an adapter never has to guess what a store
exception means: an ownership change is not a broken disk.
"""

from __future__ import annotations

import enum

from millrace.protocol import events
from millrace.protocol.errors import (
    BadOffsetError,
    ConnectionLostError,
    ContainerOfflineError,
    RetriableError,
    SegmentNotFoundError,
    SegmentSealedError,
    StoreError,
    WrongHostError,
)
from millrace.protocol.records import InvalidRecordError, RecordBatchError
from millrace.store.cluster.log_metadata import OwnershipLostError
from millrace.store.errors import DataLogWriterFencedError


class Reason(enum.Enum):
    """What went wrong, from the stream layer's side. Retriable ones say so (``retriable``)."""

    # This node does not serve the partition now: its segment's container runs elsewhere, moved, or was
    # taken over since the partition's state was loaded. Ask who does and try there.
    NOT_OWNER = "not owner"
    # The partition is loading or reloading (after a failed append, a takeover or a grow): try again.
    LOADING = "loading"
    # The partition's open segment was sealed (the stream scaled): its successor takes the appends.
    SEGMENT_SEALED = "segment sealed"
    UNKNOWN_TOPIC = "unknown topic"
    UNKNOWN_PARTITION = "unknown partition"
    TOPIC_EXISTS = "topic exists"
    INVALID_TOPIC_NAME = "invalid topic name"
    INVALID_PARTITION_COUNT = "invalid partition count"
    INVALID_CONFIG = "invalid config"
    INVALID_REQUEST = "invalid request"
    OFFSET_OUT_OF_RANGE = "offset out of range"
    # Idempotent and transactional producers (and native writers, which append under producer ids)
    PRODUCER_FENCED = "producer fenced"  # an older epoch than the partition or coordinator knows
    OUT_OF_ORDER_SEQUENCE = events.OUT_OF_ORDER_SEQUENCE  # the native writer retries on this one
    UNKNOWN_PRODUCER = "unknown producer"  # a transactional batch of a producer id no transaction has
    NOT_IN_TRANSACTION = "not in transaction"  # the partition is not in the producer's ongoing one
    # A transactional batch sent without its transactional id (Kafka refuses the whole request)
    TRANSACTIONAL_ID_REQUIRED = "transactional id required"
    # An idempotent batch under a producer id issued to another principal (``producer_ids``)
    PRODUCER_NOT_OWNED = "producer id not owned"
    COORDINATOR_FENCED = "coordinator fenced"  # a marker of a former transaction coordinator term
    # Another operation on the same producer or writer id is completing (a transaction ends): try again.
    BUSY = "busy"
    # Records
    CORRUPT_RECORD = "corrupt record"  # truncated, bad length, CRC mismatch, undecodable compression
    INVALID_RECORD = "invalid record"  # well-formed but against the rules (control batch, no key, ...)
    RECORD_TOO_LARGE = "record too large"
    INVALID_TIMESTAMP = "invalid timestamp"
    # The store under the partition
    STORAGE_FAILURE = "storage failure"  # the store could not keep or read the data (I/O, corruption)
    TIMEOUT = "timeout"
    UNEXPECTED = "unexpected"  # a bug or a failure nothing above names

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE


_RETRIABLE = frozenset({Reason.NOT_OWNER, Reason.LOADING, Reason.SEGMENT_SEALED, Reason.BUSY,
                        Reason.STORAGE_FAILURE, Reason.TIMEOUT})


class StreamError(Exception):
    """A refusal or failure of the stream layer, with its ``reason``."""

    def __init__(self, reason: Reason, message: str = "") -> None:
        super().__init__(message or reason.value)
        self.reason = reason


class PartitionError(StreamError):
    """A refusal or failure for one partition of a request."""

    def __init__(self, reason: Reason, message: str = "",
                 record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(reason, message)
        # (index of the record in its batch, why): ProduceResponse v8+'s record_errors
        self.record_errors = record_errors


class TopicError(StreamError):
    """A refusal of the topics registry (create, grow, configure, delete)."""


def batch_refusal(exc: RecordBatchError) -> PartitionError:
    """The partition's answer to a record blob the codec refused."""
    reason = Reason.INVALID_RECORD if isinstance(exc, InvalidRecordError) else Reason.CORRUPT_RECORD
    return PartitionError(reason, str(exc))


def store_failure(exc: BaseException | None, what: str) -> PartitionError:
    """The reason the segment store failed ``what`` (an append, a read) of a partition. The original
    exception stays the ``__cause__``: the native protocol, which speaks the store's errors, passes it on."""
    if isinstance(exc, PartitionError):
        return exc
    reason = reason_of(exc)
    error = PartitionError(reason, f"{what}: {exc}" if str(exc) else f"{what}: {type(exc).__name__}")
    error.__cause__ = exc
    return error


def reason_of(exc: BaseException | None) -> Reason:
    """The reason of a stream error, or what a failure of the segment store (or anything else) means."""
    if isinstance(exc, StreamError):
        return exc.reason
    if isinstance(exc, SegmentSealedError):
        return Reason.SEGMENT_SEALED
    # The container stopped or moved (ContainerOfflineError), the node asked does not serve it (WrongHost),
    # a newer owner fenced this one's log or took its ownership znode, the owner's link broke mid-call, or
    # the segment grew under a conditional append (another node wrote): all say another node serves the
    # partition now, or will. So does a link to the owner that could not be opened (ConnectionError; an
    # OSError, so before the storage failures below).
    if isinstance(exc, (ContainerOfflineError, WrongHostError, DataLogWriterFencedError, OwnershipLostError,
                        ConnectionLostError, ConnectionError, BadOffsetError)):
        return Reason.NOT_OWNER
    if isinstance(exc, RetriableError):
        return Reason.LOADING  # the owner cannot take it right now (a partition reloading there): again
    if isinstance(exc, SegmentNotFoundError):
        return Reason.UNKNOWN_PARTITION  # deleted with its topic meanwhile
    if isinstance(exc, TimeoutError):
        return Reason.TIMEOUT
    if isinstance(exc, (StoreError, OSError)):
        return Reason.STORAGE_FAILURE
    return Reason.UNEXPECTED
