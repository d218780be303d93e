"""Frames in and out: the registry of commands by type code, one-frame decoding, and ``FrameDecoder``,
which cuts a byte stream into commands incrementally under a frame size limit. No I/O.

This is Pravega's ``LengthFieldBasedFrameDecoder`` + ``CommandDecoder`` pair; ``appends`` adds its
``AppendDecoder`` on top for a server's inbound side.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# The command modules register their classes when imported.
from millrace.gateway.pravega_protocol import commands as _commands  # noqa: F401
from millrace.gateway.pravega_protocol import table_commands as _table_commands  # noqa: F401
from millrace.gateway.pravega_protocol.base import (
    FRAME_HEADER,
    MAX_WIRECOMMAND_SIZE,
    TYPE_PLUS_LENGTH_SIZE,
    CommandType,
    WireCommand,
    registered_commands,
)
from millrace.gateway.pravega_protocol.errors import (
    FrameTooLargeError,
    PravegaDecodeError,
    UnknownCommandError,
)
from millrace.gateway.pravega_protocol.primitives import Buffer

__all__ = ["COMMANDS", "FrameDecoder", "command_class", "decode_command", "decode_payload"]

#: The command class of every type code that travels as a frame of its own. ``EVENT`` is absent:
#: Pravega only ever reads it inside append data (its ``WireCommandType`` has no reader for it).
COMMANDS: Mapping[int, type[WireCommand]] = MappingProxyType(
    {code: cls for code, cls in sorted(registered_commands().items()) if code != CommandType.EVENT}
)


def command_class(type_code: int) -> type[WireCommand]:
    """The class decoding frames of ``type_code``; ``UnknownCommandError`` if none does."""
    try:
        return COMMANDS[type_code]
    except KeyError:
        detail = "EVENT appears only inside append data" if type_code == CommandType.EVENT else ""
        raise UnknownCommandError(type_code, detail) from None


def decode_payload(type_code: int, payload: Buffer) -> WireCommand:
    """The command of ``type_code`` from its payload (the frame without its 8-byte header)."""
    return command_class(type_code).decode_payload(payload)


def decode_command(frame: Buffer) -> WireCommand:
    """One whole frame, header included, whatever its command."""
    view = memoryview(frame)
    if view.nbytes < TYPE_PLUS_LENGTH_SIZE:
        raise PravegaDecodeError(f"a frame needs {TYPE_PLUS_LENGTH_SIZE} header bytes, got {view.nbytes}")
    type_code, _ = FRAME_HEADER.unpack_from(view)
    return command_class(type_code).decode(view)


class FrameDecoder:
    """Turns the bytes of one connection, fed as they arrive, into commands.

    ``max_frame_size`` bounds a frame *including* its header, as Pravega's server does with
    ``MAX_WIRECOMMAND_SIZE``. A header that declares more, a negative length or an unknown type code
    fails at once, from the header alone, before any of the payload is held; so at most one frame
    below the limit, plus the unconsumed tail of the latest ``feed``, is ever buffered. After an
    error the decoder refuses further input: the stream cannot be resynchronised, close the
    connection.
    """

    __slots__ = ("max_frame_size", "_buffer", "_failed")

    def __init__(self, max_frame_size: int = MAX_WIRECOMMAND_SIZE) -> None:
        if max_frame_size < TYPE_PLUS_LENGTH_SIZE:
            raise ValueError(f"max_frame_size must be at least {TYPE_PLUS_LENGTH_SIZE}")
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._failed = False

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a whole frame."""
        return len(self._buffer)

    def feed(self, data: Buffer) -> list[WireCommand]:
        """The commands completed by ``data``, in order (none if it only extended a partial frame)."""
        if self._failed:
            raise PravegaDecodeError("the decoder failed earlier; the stream cannot be resynchronised")
        self._buffer += data
        try:
            return self._drain()
        except PravegaDecodeError:
            self._failed = True
            raise

    def _drain(self) -> list[WireCommand]:
        commands: list[WireCommand] = []
        buffer = self._buffer
        pos = 0
        # Decoded commands copy what they keep, so the view can be released before the buffer shrinks.
        with memoryview(buffer) as view:
            while len(buffer) - pos >= TYPE_PLUS_LENGTH_SIZE:
                type_code, length = FRAME_HEADER.unpack_from(view, pos)
                cls = self._check_header(type_code, length)
                end = pos + TYPE_PLUS_LENGTH_SIZE + length
                if len(buffer) < end:
                    break
                with view[pos + TYPE_PLUS_LENGTH_SIZE : end] as payload:
                    commands.append(cls.decode_payload(payload))
                pos = end
        del buffer[:pos]
        return commands

    def _check_header(self, type_code: int, length: int) -> type[WireCommand]:
        if length < 0:
            raise PravegaDecodeError(f"frame of type {type_code} declares a negative length {length}")
        if TYPE_PLUS_LENGTH_SIZE + length > self.max_frame_size:
            raise FrameTooLargeError(TYPE_PLUS_LENGTH_SIZE + length, self.max_frame_size)
        return command_class(type_code)
