"""Pravega's wire commands for connections, appends, reads and segments, their error replies and the
admin commands, each a frozen dataclass whose fields are declared in wire order. Table segment
commands are in ``table_commands``. No I/O.

Field names are Pravega's, in snake case; types follow ``WireCommands.java`` exactly (``Long`` is a
Java long, ``Int`` an int, ``Byte`` a signed byte). ``Trailing`` fields are those Pravega reads only
when the frame still has room for them, with the default it uses otherwise.
"""

from __future__ import annotations

import dataclasses
from enum import IntEnum
from typing import Annotated, TypeAlias

from millrace.gateway.pravega_protocol.base import (
    CommandType,
    StructCodec,
    WireCommand,
    WireStruct,
    wire_command,
    wire_struct,
)
from millrace.gateway.pravega_protocol.errors import (
    AuthErrorCode,
    ErrorMessageCode,
    PravegaDecodeError,
    PravegaEncodeError,
)
from millrace.gateway.pravega_protocol.primitives import (
    LONG,
    UTF,
    Bool,
    Byte,
    CodedEnum,
    DataInput,
    DataOutput,
    FieldCodec,
    Int,
    ListOf,
    Long,
    RestBytes,
    SizedBytes,
    Trailing,
    Utf,
    Uuid,
)

__all__ = [
    "AppendBlock",
    "AppendBlockEnd",
    "AppendSetup",
    "AuthTokenCheckFailed",
    "ChunkInfo",
    "ConditionalAppend",
    "ConditionalAttributeUpdate",
    "ConditionalBlockEnd",
    "ConditionalCheckFailed",
    "CreateSegment",
    "CreateTransientSegment",
    "DataAppended",
    "DeleteSegment",
    "ErrorMessage",
    "Event",
    "FlushToStorage",
    "GetSegmentAttribute",
    "GetStreamSegmentInfo",
    "Hello",
    "InvalidEventNumber",
    "KeepAlive",
    "ListStorageChunks",
    "LocateOffset",
    "MergeSegments",
    "MergeSegmentsBatch",
    "MergedSource",
    "NoSuchSegment",
    "OffsetLocated",
    "OperationUnsupported",
    "Padding",
    "PartialEvent",
    "ReadSegment",
    "ScaleType",
    "SealSegment",
    "SegmentAlreadyExists",
    "SegmentAttribute",
    "SegmentAttributeUpdated",
    "SegmentCreated",
    "SegmentDeleted",
    "SegmentIsSealed",
    "SegmentIsTruncated",
    "SegmentPolicyUpdated",
    "SegmentRead",
    "SegmentSealed",
    "SegmentTruncated",
    "SegmentsBatchMerged",
    "SegmentsMerged",
    "SetupAppend",
    "StorageChunksListed",
    "StorageFlushed",
    "StreamSegmentInfo",
    "TruncateSegment",
    "UpdateSegmentAttribute",
    "UpdateSegmentPolicy",
    "WrongHost",
]

# A long added after a command's first release: -1 when an older peer did not send it.
TrailingLong: TypeAlias = Annotated[int, Trailing(LONG, -1, min_remaining=8)]
# Error replies gained the server's stack trace later; Pravega reads it if any byte is left.
TrailingStackTrace: TypeAlias = Annotated[str, Trailing(UTF, "", min_remaining=1)]


class ScaleType(IntEnum):
    """``CreateSegment``/``UpdateSegmentPolicy`` ``scale_type`` values (Pravega's ``ScaleType``)."""

    NO_SCALING = 0
    THROUGHPUT = 1  # target rate in KiB/s
    EVENT_RATE = 2  # target rate in events/s


# ------------------------------------------------------------------------------------------------
# connection


@wire_command(CommandType.HELLO)
class Hello(WireCommand):
    """Both sides send it first: the highest and lowest wire versions they speak."""

    high_version: Int
    low_version: Int


@wire_command(CommandType.KEEP_ALIVE)
class KeepAlive(WireCommand):
    """Sent by either side on an idle connection; an empty payload."""


# ------------------------------------------------------------------------------------------------
# appends


class _PaddingBytes(FieldCodec[int]):
    """Zero bytes filling the rest of the frame, held as their count."""

    def write(self, out: DataOutput, value: int) -> None:
        if value < 0:
            raise PravegaEncodeError(f"padding length {value} is negative")
        out.write(bytes(value))

    def read(self, inp: DataInput) -> int:
        count = inp.remaining()
        inp.read_bytes(count)  # skipped: Pravega does not check that padding is zeros
        return count


@wire_command(CommandType.PADDING)
class Padding(WireCommand):
    """Fills the unused end of an append block that a client closed early (its batching timed out)."""

    length: Annotated[int, _PaddingBytes()]


@wire_command(CommandType.PARTIAL_EVENT)
class PartialEvent(WireCommand):
    """At the end of an append block: the first bytes of an event that did not fit; the rest of it is
    the data of the ``AppendBlockEnd``."""

    data: RestBytes


@wire_command(CommandType.EVENT)
class Event(WireCommand):
    """One event as a writer frames it: type 0, length, data. It never travels as a frame of its own:
    it is the unit inside append data (and stored so in the segment, where readers find the events by
    these headers) and inside a ``ConditionalAppend``."""

    data: RestBytes


class _EmbeddedEvent(FieldCodec[Event]):
    """An ``Event`` frame, header included, as a field of a ``ConditionalAppend``."""

    def write(self, out: DataOutput, value: Event) -> None:
        out.write_int(CommandType.EVENT)
        out.write_sized_bytes(value.data)

    def read(self, inp: DataInput) -> Event:
        type_code = inp.read_int()
        if type_code != CommandType.EVENT:
            raise PravegaDecodeError(f"expected an EVENT, found type {type_code}")
        return Event(data=inp.read_bytes(inp.read_int()))


@wire_command(CommandType.SETUP_APPEND)
class SetupAppend(WireCommand):
    """A writer asks to append to a segment; later appends name the writer, not the segment."""

    request_id: Long
    writer_id: Uuid
    segment: Utf
    delegation_token: Utf = ""


@wire_command(CommandType.APPEND_SETUP)
class AppendSetup(WireCommand):
    """The reply to ``SetupAppend``: the last event number the segment holds from this writer, so a
    reconnecting writer knows what to resend."""

    request_id: Long
    segment: Utf
    writer_id: Uuid
    last_event_number: Long


@wire_command(CommandType.APPEND_BLOCK)
class AppendBlock(WireCommand):
    """Opens a block of a writer's events: whole ``Event`` frames, then possibly one ``PartialEvent``
    or ``Padding`` frame. The block's frame length is declared up front, before the client knows
    which events will fill it; the ``AppendBlockEnd`` that must follow closes it."""

    writer_id: Uuid
    data: RestBytes = b""


@wire_command(CommandType.APPEND_BLOCK_END)
class AppendBlockEnd(WireCommand):
    """Closes a block: how many of its bytes are whole events, the rest of a partial event, and the
    count and last number of the events the block carried. Sent alone (with the events in ``data``)
    when a writer's events were buffered while another writer's block was open."""

    writer_id: Uuid
    size_of_whole_events: Int
    data: SizedBytes
    num_events: Int
    last_event_number: Long
    request_id: TrailingLong


@wire_command(CommandType.CONDITIONAL_APPEND)
class ConditionalAppend(WireCommand):
    """One event appended only if the segment's length is ``expected_offset``."""

    writer_id: Uuid
    event_number: Long
    expected_offset: Long
    event: Annotated[Event, _EmbeddedEvent()]
    request_id: TrailingLong


@wire_command(CommandType.CONDITIONAL_BLOCK_END)
class ConditionalBlockEnd(WireCommand):
    """A conditional append whose event data is raw bytes (already framed as events) rather than
    one embedded ``Event``."""

    writer_id: Uuid
    event_number: Long
    expected_offset: Long
    data: SizedBytes
    request_id: Long


@wire_command(CommandType.DATA_APPENDED)
class DataAppended(WireCommand):
    """Acknowledges a writer's events up to ``event_number``. The Java constructor lists
    ``request_id`` first, but the wire has it after the event numbers."""

    writer_id: Uuid
    event_number: Long
    previous_event_number: TrailingLong
    request_id: TrailingLong
    current_segment_write_offset: TrailingLong


@wire_command(CommandType.CONDITIONAL_CHECK_FAILED)
class ConditionalCheckFailed(WireCommand):
    """A conditional append refused: the segment was not at the expected offset."""

    writer_id: Uuid
    event_number: Long
    request_id: TrailingLong


# ------------------------------------------------------------------------------------------------
# reads


@wire_command(CommandType.READ_SEGMENT)
class ReadSegment(WireCommand):
    """Read a segment from ``offset``; the server may send more or fewer bytes than suggested."""

    segment: Utf
    offset: Long
    suggested_length: Int
    delegation_token: Utf = ""
    request_id: TrailingLong


@wire_command(CommandType.SEGMENT_READ)
class SegmentRead(WireCommand):
    """Bytes of a segment from ``offset``; ``at_tail``/``end_of_segment`` tell the reader whether to
    wait for more or move to the segment's successors."""

    segment: Utf
    offset: Long
    at_tail: Bool
    end_of_segment: Bool
    data: SizedBytes
    request_id: TrailingLong


# ------------------------------------------------------------------------------------------------
# segment information and attributes


@wire_command(CommandType.GET_STREAM_SEGMENT_INFO)
class GetStreamSegmentInfo(WireCommand):
    request_id: Long
    segment_name: Utf
    delegation_token: Utf = ""


@wire_command(CommandType.STREAM_SEGMENT_INFO)
class StreamSegmentInfo(WireCommand):
    request_id: Long
    segment_name: Utf
    exists: Bool
    is_sealed: Bool
    is_deleted: Bool
    last_modified: Long
    write_offset: Long
    # Added later (Pravega issue 1948); an older server's reply means "never truncated".
    start_offset: Annotated[int, Trailing(LONG, 0, min_remaining=8)]


@wire_command(CommandType.GET_SEGMENT_ATTRIBUTE)
class GetSegmentAttribute(WireCommand):
    request_id: Long
    segment_name: Utf
    attribute_id: Uuid
    delegation_token: Utf = ""


@wire_command(CommandType.SEGMENT_ATTRIBUTE)
class SegmentAttribute(WireCommand):
    """The attribute's value; ``NULL_ATTRIBUTE_VALUE`` if it has none."""

    request_id: Long
    value: Long


@wire_command(CommandType.UPDATE_SEGMENT_ATTRIBUTE)
class UpdateSegmentAttribute(WireCommand):
    """Compare-and-set of one attribute."""

    request_id: Long
    segment_name: Utf
    attribute_id: Uuid
    new_value: Long
    expected_value: Long
    delegation_token: Utf = ""


@wire_command(CommandType.SEGMENT_ATTRIBUTE_UPDATED)
class SegmentAttributeUpdated(WireCommand):
    request_id: Long
    success: Bool


@wire_command(CommandType.LOCATE_OFFSET)
class LocateOffset(WireCommand):
    request_id: Long
    segment: Utf
    target_offset: Long
    delegation_token: Utf = ""


@wire_command(CommandType.OFFSET_LOCATED)
class OffsetLocated(WireCommand):
    request_id: Long
    segment: Utf
    offset: Long


# ------------------------------------------------------------------------------------------------
# segment lifecycle


@wire_command(CommandType.CREATE_SEGMENT)
class CreateSegment(WireCommand):
    """The wire writes ``target_rate`` before ``scale_type``, unlike the Java constructor."""

    request_id: Long
    segment: Utf
    target_rate: Int
    scale_type: Byte
    delegation_token: Utf = ""
    rollover_size_bytes: Annotated[int, Trailing(LONG, 0, min_remaining=8)]


@wire_command(CommandType.SEGMENT_CREATED)
class SegmentCreated(WireCommand):
    request_id: Long
    segment: Utf


@wire_command(CommandType.CREATE_TRANSIENT_SEGMENT)
class CreateTransientSegment(WireCommand):
    """A segment that lives as long as the writer's connection (the reply is ``SegmentCreated``)."""

    request_id: Long
    writer_id: Uuid
    parent_segment: Utf
    delegation_token: Utf = ""


@wire_command(CommandType.UPDATE_SEGMENT_POLICY)
class UpdateSegmentPolicy(WireCommand):
    request_id: Long
    segment: Utf
    target_rate: Int
    scale_type: Byte
    delegation_token: Utf = ""


@wire_command(CommandType.SEGMENT_POLICY_UPDATED)
class SegmentPolicyUpdated(WireCommand):
    request_id: Long
    segment: Utf


@wire_command(CommandType.SEAL_SEGMENT)
class SealSegment(WireCommand):
    request_id: Long
    segment: Utf
    delegation_token: Utf = ""


@wire_command(CommandType.SEGMENT_SEALED)
class SegmentSealed(WireCommand):
    request_id: Long
    segment: Utf


@wire_command(CommandType.TRUNCATE_SEGMENT)
class TruncateSegment(WireCommand):
    request_id: Long
    segment: Utf
    truncation_offset: Long
    delegation_token: Utf = ""


@wire_command(CommandType.SEGMENT_TRUNCATED)
class SegmentTruncated(WireCommand):
    request_id: Long
    segment: Utf


@wire_command(CommandType.DELETE_SEGMENT)
class DeleteSegment(WireCommand):
    request_id: Long
    segment: Utf
    delegation_token: Utf = ""


@wire_command(CommandType.SEGMENT_DELETED)
class SegmentDeleted(WireCommand):
    request_id: Long
    segment: Utf


@wire_struct
class ConditionalAttributeUpdate(WireStruct):
    """An attribute update applied atomically with a merge."""

    #: ``attribute_update_type`` values (Pravega's ``AttributeUpdateType``).
    REPLACE = 1
    REPLACE_IF_EQUALS = 4

    attribute_id: Uuid
    attribute_update_type: Byte
    new_value: Long
    old_value: Long


@wire_command(CommandType.MERGE_SEGMENTS)
class MergeSegments(WireCommand):
    """Append all of sealed ``source`` to ``target`` (a transaction's commit)."""

    request_id: Long
    target: Utf
    source: Utf
    delegation_token: Utf = ""
    # Wire version 5 added the attribute updates; before, the frame ended with the token.
    attribute_updates: Annotated[
        tuple[ConditionalAttributeUpdate, ...],
        Trailing(ListOf(StructCodec(ConditionalAttributeUpdate)), (), min_remaining=1),
    ] = ()


@wire_command(CommandType.SEGMENTS_MERGED)
class SegmentsMerged(WireCommand):
    request_id: Long
    target: Utf
    source: Utf
    new_target_write_offset: Annotated[int, Trailing(LONG, -1, min_remaining=1)]


@wire_command(CommandType.MERGE_SEGMENTS_BATCH)
class MergeSegmentsBatch(WireCommand):
    request_id: Long
    target_segment_id: Utf
    source_segment_ids: Annotated[tuple[str, ...], ListOf(UTF)]
    delegation_token: Utf = ""


@wire_struct
class MergedSource(WireStruct):
    """One source of a ``SegmentsBatchMerged`` and the target's length after it was merged. Pravega
    holds these as two parallel lists but writes them interleaved, as pairs."""

    source: Utf
    new_target_write_offset: Long


@wire_command(CommandType.SEGMENTS_BATCH_MERGED)
class SegmentsBatchMerged(WireCommand):
    request_id: Long
    target: Utf
    merged: Annotated[tuple[MergedSource, ...], ListOf(StructCodec(MergedSource))]


# ------------------------------------------------------------------------------------------------
# error replies


@wire_command(CommandType.WRONG_HOST)
class WrongHost(WireCommand):
    """The segment's container is not on this server; the client asks the controller again."""

    request_id: Long
    segment: Utf
    correct_host: Utf
    server_stack_trace: TrailingStackTrace = ""


@wire_command(CommandType.SEGMENT_IS_SEALED)
class SegmentIsSealed(WireCommand):
    request_id: Long
    segment: Utf
    server_stack_trace: TrailingStackTrace = ""
    offset: TrailingLong = -1


@wire_command(CommandType.SEGMENT_IS_TRUNCATED)
class SegmentIsTruncated(WireCommand):
    request_id: Long
    segment: Utf
    start_offset: Long
    server_stack_trace: TrailingStackTrace = ""
    offset: TrailingLong = -1


@wire_command(CommandType.SEGMENT_ALREADY_EXISTS)
class SegmentAlreadyExists(WireCommand):
    request_id: Long
    segment: Utf
    server_stack_trace: TrailingStackTrace = ""


@wire_command(CommandType.NO_SUCH_SEGMENT)
class NoSuchSegment(WireCommand):
    request_id: Long
    segment: Utf
    server_stack_trace: TrailingStackTrace = ""
    offset: TrailingLong = -1


@wire_command(CommandType.INVALID_EVENT_NUMBER)
class InvalidEventNumber(WireCommand):
    """A writer's event number went backwards or its setup is gone. As in Pravega, equality ignores
    the stack trace."""

    writer_id: Uuid
    request_id: Long
    server_stack_trace: TrailingStackTrace = dataclasses.field(default="", compare=False)
    event_number: TrailingLong = -1


@wire_command(CommandType.OPERATION_UNSUPPORTED)
class OperationUnsupported(WireCommand):
    request_id: Long
    operation_name: Utf
    server_stack_trace: TrailingStackTrace = ""


@wire_command(CommandType.AUTH_TOKEN_CHECK_FAILED)
class AuthTokenCheckFailed(WireCommand):
    request_id: Long
    server_stack_trace: TrailingStackTrace = ""
    error_code: Annotated[
        AuthErrorCode,
        Trailing(CodedEnum(AuthErrorCode.from_wire), AuthErrorCode.UNSPECIFIED, min_remaining=4),
    ] = AuthErrorCode.UNSPECIFIED


@wire_command(CommandType.ERROR_MESSAGE)
class ErrorMessage(WireCommand):
    """A failure the client turns into the Java exception ``error_code`` names."""

    request_id: Long
    segment: Utf
    message: Utf
    error_code: Annotated[ErrorMessageCode, CodedEnum(ErrorMessageCode.from_wire)]


# ------------------------------------------------------------------------------------------------
# admin (Pravega's admin listener)


@wire_command(CommandType.FLUSH_TO_STORAGE)
class FlushToStorage(WireCommand):
    container_id: Int
    delegation_token: Utf
    request_id: Long


@wire_command(CommandType.FLUSHED_TO_STORAGE)
class StorageFlushed(WireCommand):
    request_id: Long


@wire_command(CommandType.LIST_STORAGE_CHUNKS)
class ListStorageChunks(WireCommand):
    segment: Utf
    delegation_token: Utf
    request_id: Long


@wire_struct
class ChunkInfo(WireStruct):
    length_in_metadata: Long
    length_in_storage: Long
    start_offset: Long
    chunk_name: Utf
    exists_in_storage: Bool


@wire_command(CommandType.STORAGE_CHUNKS_LISTED)
class StorageChunksListed(WireCommand):
    request_id: Long
    chunks: Annotated[tuple[ChunkInfo, ...], ListOf(StructCodec(ChunkInfo))]
