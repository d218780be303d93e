"""How a writer's events travel: the event framing, ``AppendAssembler`` (the semantics of Pravega's
``AppendDecoder``: append commands in, whole ``Append``s out) and ``RequestStreamDecoder``, a server's
inbound side from bytes to requests. No I/O.

A writer sends ``SetupAppend`` once per segment, then for each batch of events either

* ``AppendBlock(writer_id, data)`` and ``AppendBlockEnd(...)``: the block's data is whole ``Event``
  frames (``size_of_whole_events`` bytes of them), then possibly a ``PartialEvent`` frame holding the
  start of an event that did not fit, whose rest is the block end's ``data``, or a ``Padding`` frame
  when the client closed the block early; nothing else may come between the two; or
* ``AppendBlockEnd`` alone, its ``data`` holding the events (a batch buffered while the connection
  carried another writer's block); or
* ``ConditionalAppend`` / ``ConditionalBlockEnd``: events appended only at an expected offset.

Each becomes one ``Append`` whose data is the events exactly as the segment stores them, headers
included (readers find the events by those headers).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from millrace.gateway.pravega_protocol.base import (
    FRAME_HEADER,
    MAX_WIRECOMMAND_SIZE,
    TYPE_PLUS_LENGTH_SIZE,
    CommandType,
    WireCommand,
)
from millrace.gateway.pravega_protocol.codec import FrameDecoder
from millrace.gateway.pravega_protocol.commands import (
    AppendBlock,
    AppendBlockEnd,
    ConditionalAppend,
    ConditionalBlockEnd,
    Event,
    Padding,
    SetupAppend,
)
from millrace.gateway.pravega_protocol.errors import InvalidAppendError, PravegaDecodeError
from millrace.gateway.pravega_protocol.primitives import Buffer

__all__ = [
    "Append",
    "AppendAssembler",
    "RequestStreamDecoder",
    "encode_append",
    "encode_event",
    "split_events",
]

def encode_event(data: Buffer) -> bytes:
    """One event as a writer frames it (type 0, length, data)."""
    return Event(data=bytes(data)).encode()


def split_events(data: Buffer) -> list[bytes]:
    """The events of append data (a run of ``Event`` frames), without their headers."""
    view = memoryview(data)
    events = []
    pos = 0
    while pos < view.nbytes:
        if view.nbytes - pos < TYPE_PLUS_LENGTH_SIZE:
            raise PravegaDecodeError(f"{view.nbytes - pos} bytes after the last event are no event header")
        type_code, length = FRAME_HEADER.unpack_from(view, pos)
        if type_code != CommandType.EVENT:
            raise PravegaDecodeError(f"expected an EVENT at byte {pos}, found type {type_code}")
        start = pos + TYPE_PLUS_LENGTH_SIZE
        if length < 0 or length > view.nbytes - start:
            raise PravegaDecodeError(
                f"event at byte {pos} declares {length} bytes, {view.nbytes - start} left"
            )
        events.append(bytes(view[start : start + length]))
        pos = start + length
    return events


def encode_append(
    writer_id: uuid.UUID, events: Sequence[Buffer], last_event_number: int, request_id: int
) -> bytes:
    """The frames a Pravega client sends for ``events`` when no block is open and it does not batch:
    a block exactly their size, closed by a block end with no data of its own."""
    data = b"".join(encode_event(event) for event in events)
    block = AppendBlock(writer_id=writer_id, data=data)
    end = AppendBlockEnd(
        writer_id=writer_id,
        size_of_whole_events=len(data),
        data=b"",
        num_events=len(events),
        last_event_number=last_event_number,
        request_id=request_id,
    )
    return block.encode() + end.encode()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Append:
    """Events of one writer for its segment, ready to append (Pravega's ``Append``).

    ``event_number`` is the number of the last event in ``data``; ``expected_offset`` is set for a
    conditional append only."""

    segment: str
    writer_id: uuid.UUID
    event_number: int
    event_count: int
    data: bytes
    expected_offset: int | None
    request_id: int


@dataclasses.dataclass(slots=True)
class _Writer:
    segment: str
    # Java's field default: a writer's event numbers may not go below 0 before its first append.
    last_event_number: int = 0


class AppendAssembler:
    """Follows one connection's append commands and turns them into ``Append``s.

    ``process`` returns the ``SetupAppend`` itself (the server answers it), an ``Append`` when a block
    end or conditional append completes one, ``None`` for an ``AppendBlock`` (held until its end) or
    ``Padding``, and any other command unchanged. Out-of-order or inconsistent input raises
    ``InvalidAppendError``; the connection must then close, as the open block is dropped.
    """

    __slots__ = ("_writers", "_open_block")

    def __init__(self) -> None:
        self._writers: dict[uuid.UUID, _Writer] = {}
        self._open_block: AppendBlock | None = None

    def process(self, command: WireCommand) -> WireCommand | Append | None:
        try:
            return self._process(command)
        except InvalidAppendError:
            self._open_block = None
            raise

    def _process(self, command: WireCommand) -> WireCommand | Append | None:
        # Any command but the block's end breaks an open block, append command or not, as in Pravega's
        # AppendDecoder (its client ends a block before it sends anything else).
        if self._open_block is not None and not isinstance(command, AppendBlockEnd):
            raise InvalidAppendError(f"{command.TYPE.name} arrived while an append block was open")
        step = _STEPS.get(type(command))
        if step is None:
            return command  # not an append command: Pravega's AppendDecoder lets it through too
        return step(self, command)

    def _setup(self, setup: SetupAppend) -> SetupAppend:
        self._writers[setup.writer_id] = _Writer(setup.segment)
        return setup

    def _open(self, block: AppendBlock) -> None:
        self._writer(block.writer_id)
        self._open_block = block

    def _padding(self, padding: Padding) -> None:
        """Padding between blocks: nothing to do."""

    def _conditional_append(self, append: ConditionalAppend) -> Append:
        # The append's data is the event with its header, as the segment stores events.
        return self._conditional(
            append.writer_id, append.event_number, append.expected_offset, append.event.encode(), append.request_id
        )

    def _conditional_block_end(self, end: ConditionalBlockEnd) -> Append:
        return self._conditional(end.writer_id, end.event_number, end.expected_offset, end.data, end.request_id)

    def _writer(self, writer_id: uuid.UUID) -> _Writer:
        writer = self._writers.get(writer_id)
        if writer is None:
            raise InvalidAppendError(f"writer {writer_id} appends before its SetupAppend")
        return writer

    def _conditional(
        self, writer_id: uuid.UUID, event_number: int, expected_offset: int, data: bytes, request_id: int
    ) -> Append:
        writer = self._writer(writer_id)
        if event_number < writer.last_event_number:
            raise InvalidAppendError(
                f"writer {writer_id}: event number {event_number} went back from {writer.last_event_number}"
            )
        writer.last_event_number = event_number
        return Append(
            segment=writer.segment,
            writer_id=writer_id,
            event_number=event_number,
            event_count=1,
            data=data,
            expected_offset=expected_offset,
            request_id=request_id,
        )

    def _end_block(self, end: AppendBlockEnd) -> Append:
        writer = self._writer(end.writer_id)
        if end.num_events <= 0:
            raise InvalidAppendError(f"writer {end.writer_id}: a block of {end.num_events} events")
        if end.last_event_number < writer.last_event_number:
            raise InvalidAppendError(
                f"writer {end.writer_id} on {writer.segment!r}: last event number {end.last_event_number} "
                f"went back from {writer.last_event_number}"
            )
        block = self._open_block
        data = end.data if block is None else self._block_data(block, end)
        writer.last_event_number = end.last_event_number
        self._open_block = None
        return Append(
            segment=writer.segment,
            writer_id=end.writer_id,
            event_number=end.last_event_number,
            event_count=end.num_events,
            data=data,
            expected_offset=None,
            request_id=end.request_id,
        )

    @staticmethod
    def _block_data(block: AppendBlock, end: AppendBlockEnd) -> bytes:
        if block.writer_id != end.writer_id:
            raise InvalidAppendError(f"block of writer {block.writer_id} ended by writer {end.writer_id}")
        whole = end.size_of_whole_events
        if not 0 <= whole <= len(block.data):
            raise InvalidAppendError(f"{whole} bytes of whole events in a block of {len(block.data)} bytes")
        rest = memoryview(block.data)[whole:]
        if not rest:
            # The block was exactly full: the end carries no data (and Pravega ignores any it has).
            return block.data[:whole]
        if rest.nbytes < TYPE_PLUS_LENGTH_SIZE:
            raise InvalidAppendError(f"{rest.nbytes} bytes after the block's whole events are no frame")
        type_code, length = FRAME_HEADER.unpack_from(rest)
        if length < 0 or length > rest.nbytes - TYPE_PLUS_LENGTH_SIZE:
            raise InvalidAppendError(f"the frame after the block's whole events declares {length} bytes")
        if type_code == CommandType.PARTIAL_EVENT:
            partial = rest[TYPE_PLUS_LENGTH_SIZE : TYPE_PLUS_LENGTH_SIZE + length]
            return b"".join((block.data[:whole], partial, end.data))
        if type_code == CommandType.PADDING:
            if end.data:
                raise InvalidAppendError("a padded block's end carries data")
            return block.data[:whole]
        raise InvalidAppendError(
            f"type {type_code} at the end of a block; expected a partial event or padding"
        )


# Each append command's step, by its class (the commands are final: no subclass reaches here).
_STEPS: dict[type[WireCommand], Callable[[AppendAssembler, Any], WireCommand | Append | None]] = {
    SetupAppend: AppendAssembler._setup,
    AppendBlock: AppendAssembler._open,
    AppendBlockEnd: AppendAssembler._end_block,
    Padding: AppendAssembler._padding,
    ConditionalAppend: AppendAssembler._conditional_append,
    ConditionalBlockEnd: AppendAssembler._conditional_block_end,
}


class RequestStreamDecoder:
    """A server's inbound side: bytes in, requests out (``Append``s for the append commands, every
    other command as decoded). Pravega's ``LengthFieldBasedFrameDecoder``, ``CommandDecoder`` and
    ``AppendDecoder`` in one; ``max_frame_size`` as in ``FrameDecoder``. After an error, close the
    connection: further input is refused. A ``feed`` that raises returns nothing, not even what it
    decoded before the bad bytes: none of it was acknowledged, so the writer resends it elsewhere."""

    __slots__ = ("_frames", "_appends", "_failed")

    def __init__(self, max_frame_size: int = MAX_WIRECOMMAND_SIZE) -> None:
        self._frames = FrameDecoder(max_frame_size)
        self._appends = AppendAssembler()
        self._failed = False

    @property
    def buffered(self) -> int:
        return self._frames.buffered

    def feed(self, data: Buffer) -> list[WireCommand | Append]:
        if self._failed:
            raise PravegaDecodeError("the decoder failed earlier; the stream cannot be resynchronised")
        try:
            return list(self._assemble(self._frames.feed(data)))
        except PravegaDecodeError:
            self._failed = True
            raise

    def _assemble(self, commands: Iterable[WireCommand]) -> Iterable[WireCommand | Append]:
        for command in commands:
            result = self._appends.process(command)
            if result is not None:
                yield result
