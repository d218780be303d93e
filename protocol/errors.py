"""Errors both sides of the native protocol know, and their mapping to wire status codes.

The store raises these; the native listener answers them with a status; the client raises the same
classes again from the status, so ``except StreamNotFoundError`` reads the same on either side.
"""

from __future__ import annotations

from typing import Any

from millrace.protocol.wire import Status


class StoreError(Exception):
    """Base of every error a Millrace operation reports (server or client side)."""


class SegmentNotFoundError(StoreError):
    """The named segment does not exist (or was deleted / merged away)."""


class SegmentExistsError(StoreError):
    """A create named a segment that already exists."""


class SegmentSealedError(StoreError):
    """A modification reached a sealed segment."""


class BadOffsetError(StoreError):
    """A conditional append's expected offset did not match the segment length."""

    def __init__(self, message: str, expected: int, actual: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class BadAttributeUpdateError(StoreError):
    """A conditional attribute update's expected value did not match."""


class OffsetOutOfRangeError(StoreError):
    """A read or truncate named an offset outside [start_offset, length]."""


class SegmentTruncatedError(OffsetOutOfRangeError):
    """A read named an offset below the segment's start offset."""


class ContainerOfflineError(StoreError):
    """The container is not running (shut down, failed, or recovering)."""


class TableKeyNotFoundError(StoreError):
    """A conditional table update or removal named a key that is absent."""


class TableKeyVersionMismatchError(StoreError):
    """A conditional table update named a version that is not the key's current one."""


class KeyValueTableNotFoundError(StoreError):
    """The controller knows no such scope/key-value table."""


class StreamNotFoundError(StoreError):
    """The controller knows no such scope/stream."""


class StreamExistsError(StoreError):
    """The controller already has a stream of that name."""


class ScopeNotFoundError(StoreError):
    """The controller knows no such scope."""


class ScopeNotEmptyError(StoreError):
    """A scope still holding streams cannot be deleted."""


class StreamNotSealedError(StoreError):
    """Deleting a stream requires sealing it first (as in Pravega)."""


class StreamSealedError(StoreError):
    """The stream is sealed (or being sealed); its configuration can no longer change."""


class InvalidStreamCutError(StoreError):
    """A stream cut names unknown segments, does not cover the key space exactly once, lies past
    a segment's length, or would move the stream's head backwards."""


class ScaleConflictError(StoreError):
    """Another scale got there first: the stream is scaling differently right now, the segments to
    seal are already sealed, or the stream is no longer at the epoch the caller expected. Re-read
    the stream's current segments and decide again."""


class InvalidScaleError(StoreError, ValueError):
    """A scale request that can never succeed: unknown or non-adjacent segments, or new key ranges
    that do not cover the sealed segments' union exactly once."""


class InvalidRequestError(StoreError, ValueError):
    """The server refused a request as malformed (missing or ill-typed fields, bad values)."""


class UnknownCommandError(StoreError):
    """The server does not implement the command (an older server than the client)."""


class ServerError(StoreError):
    """The server failed unexpectedly while handling the request; its log says why."""


class RetriableError(StoreError):
    """The server cannot take the request right now (e.g. a partition reloading after a failure);
    the same request may be sent again."""


class WriterFencedError(StoreError):
    """A newer instance of the same writer id opened since this one: this one must stop."""


class EventsRefusedError(StoreError):
    """The partition refused an event batch for good (too large, out of sequence, ...). ``reason`` says
    why in the stream layer's words (``streams.errors.Reason``'s value, e.g. ``protocol.events.
    OUT_OF_ORDER_SEQUENCE``), so a client can tell the refusals apart without a wire protocol's codes."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class FormatViolationError(StoreError, ValueError):
    """Refused for everyone, super users included: the command would break the format of the stream
    that owns the segment (every stream's format is owned by the stream layer, which alone appends to,
    truncates, seals and merges its segments). The message names the rule and the command to use."""


# -- transactions of native writers (gateway/native/txn_commands.py) --------------------------------
class TxnNotFoundError(StoreError):
    """No such transaction: never begun, or completed so long ago that its record expired."""


class TxnFailedError(StoreError):
    """The transaction is no longer open: it was aborted (its lease ran out, or someone aborted it),
    it is being completed, or it completed the other way. Its events can no longer change."""


class WrongHostError(StoreError):
    """This node does not serve ``segment`` now (Pravega's WrongHost): a cluster node whose container
    of the segment runs elsewhere, or on no node yet. Nothing was done; the client asks any node for the
    segment's owner (GET_SEGMENT_OWNER) and sends the request there."""

    def __init__(self, message: str, segment: str = "") -> None:
        super().__init__(message)
        self.segment = segment


class AuthenticationError(StoreError):
    """The server refused the connection's credentials, or a command came before (or without) an
    authentication the listener requires, or after the session ended. The server closes the connection
    after answering; the message says only what any client may read (never why a password failed)."""


class AuthorizationError(StoreError):
    """The authenticated principal may not do this (the ACLs, ``gateway/native/authorization.py``).
    Nothing was done."""


class ConnectionLostError(StoreError):
    """The connection closed with requests outstanding; their outcome is unknown."""


# Most specific first: SegmentTruncatedError is an OffsetOutOfRangeError.
_STATUSES: tuple[tuple[type[StoreError], Status], ...] = (
    (SegmentNotFoundError, Status.SEGMENT_NOT_FOUND),
    (SegmentExistsError, Status.SEGMENT_EXISTS),
    (SegmentSealedError, Status.SEGMENT_SEALED),
    (BadOffsetError, Status.BAD_OFFSET),
    (BadAttributeUpdateError, Status.BAD_ATTRIBUTE_UPDATE),
    (SegmentTruncatedError, Status.SEGMENT_TRUNCATED),
    (OffsetOutOfRangeError, Status.OFFSET_OUT_OF_RANGE),
    (ContainerOfflineError, Status.CONTAINER_OFFLINE),
    (InvalidRequestError, Status.INVALID_REQUEST),
    (UnknownCommandError, Status.UNKNOWN_COMMAND),
    (ServerError, Status.INTERNAL_ERROR),
    (ScopeNotFoundError, Status.SCOPE_NOT_FOUND),
    (ScopeNotEmptyError, Status.SCOPE_NOT_EMPTY),
    (StreamNotFoundError, Status.STREAM_NOT_FOUND),
    (StreamExistsError, Status.STREAM_EXISTS),
    (StreamSealedError, Status.STREAM_SEALED),
    (StreamNotSealedError, Status.STREAM_NOT_SEALED),
    (InvalidStreamCutError, Status.INVALID_STREAM_CUT),
    (InvalidScaleError, Status.INVALID_SCALE),
    (ScaleConflictError, Status.SCALE_CONFLICT),
    (TableKeyNotFoundError, Status.TABLE_KEY_NOT_FOUND),
    (TableKeyVersionMismatchError, Status.TABLE_KEY_VERSION_MISMATCH),
    (KeyValueTableNotFoundError, Status.KV_TABLE_NOT_FOUND),
    (RetriableError, Status.RETRIABLE),
    (WriterFencedError, Status.WRITER_FENCED),
    (EventsRefusedError, Status.EVENTS_REFUSED),
    (WrongHostError, Status.WRONG_HOST),
    (FormatViolationError, Status.FORMAT_VIOLATION),
    (TxnNotFoundError, Status.TXN_NOT_FOUND),
    (TxnFailedError, Status.TXN_FAILED),
    (AuthenticationError, Status.AUTHENTICATION_FAILED),
    (AuthorizationError, Status.NOT_AUTHORIZED),
)
_ERROR_OF: dict[int, type[StoreError]] = {int(status): cls for cls, status in _STATUSES}


def status_of(exc: BaseException) -> Status:
    """The status a failed request answers with. Malformed input (the store's other errors, or a
    missing or ill-typed header field) is the caller's fault; anything else is the server's."""
    for cls, status in _STATUSES:
        if isinstance(exc, cls):
            return status
    if isinstance(exc, (StoreError, ValueError, KeyError, TypeError)):
        return Status.INVALID_REQUEST
    return Status.INTERNAL_ERROR


def error_details(exc: BaseException) -> dict[str, Any]:
    """Header fields beyond the message that let the other side rebuild ``exc`` faithfully."""
    if isinstance(exc, BadOffsetError):
        return {"expected": exc.expected, "actual": exc.actual}
    if isinstance(exc, EventsRefusedError):
        return {"reason": exc.reason}
    if isinstance(exc, WrongHostError):
        return {"segment": exc.segment}
    return {}


def error_from_status(status: int, header: dict[str, Any]) -> StoreError:
    """The exception an error response stands for (its header carries ``error``, the message)."""
    message = str(header.get("error", f"status {status}"))
    if status == Status.BAD_OFFSET:
        return BadOffsetError(message, int(header.get("expected", -1)), int(header.get("actual", -1)))
    if status == Status.EVENTS_REFUSED:
        return EventsRefusedError(message, str(header.get("reason", "")))
    if status == Status.WRONG_HOST:
        return WrongHostError(message, str(header.get("segment", "")))
    return _ERROR_OF.get(status, StoreError)(message)
