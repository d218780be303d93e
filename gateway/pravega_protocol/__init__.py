"""Pravega's segment store wire protocol (``WireCommands``), so Pravega's own clients and tools can
talk to Millrace unchanged: a pure codec, no I/O.

| module | what it owns |
| --- | --- |
| ``primitives`` | Java ``DataInput``/``DataOutput`` (big-endian, modified UTF-8), the field codecs |
| ``base`` | the frame, ``WIRE_VERSION`` and the other constants, ``CommandType``, the command base and registration |
| ``commands`` | connection, append, read, segment, error-reply and admin commands |
| ``table_commands`` | table segment commands, keys, values, iterator arguments |
| ``codec`` | ``COMMANDS`` (type code -> class), one-frame decoding, ``FrameDecoder`` (incremental, size-bounded) |
| ``appends`` | event framing, ``AppendAssembler`` (Pravega's ``AppendDecoder``), ``RequestStreamDecoder`` |
| ``errors`` | the codec's exceptions, the error codes two replies carry |

Every command is a frozen, keyword-only dataclass: ``cmd.encode()`` gives its whole frame,
``Cmd.decode(frame)`` reads one back and ``codec.decode_command(frame)`` reads any.
"""

from millrace.gateway.pravega_protocol.appends import (
    Append,
    AppendAssembler,
    RequestStreamDecoder,
    encode_append,
    encode_event,
    split_events,
)
from millrace.gateway.pravega_protocol.base import (
    MAX_WIRECOMMAND_SIZE,
    OLDEST_COMPATIBLE_VERSION,
    WIRE_VERSION,
    CommandType,
    WireCommand,
)
from millrace.gateway.pravega_protocol.codec import COMMANDS, FrameDecoder, decode_command
from millrace.gateway.pravega_protocol.errors import (
    FrameTooLargeError,
    InvalidAppendError,
    PravegaCodecError,
    PravegaDecodeError,
    PravegaEncodeError,
    UnknownCommandError,
)

__all__ = [
    "COMMANDS",
    "MAX_WIRECOMMAND_SIZE",
    "OLDEST_COMPATIBLE_VERSION",
    "WIRE_VERSION",
    "Append",
    "AppendAssembler",
    "CommandType",
    "FrameDecoder",
    "FrameTooLargeError",
    "InvalidAppendError",
    "PravegaCodecError",
    "PravegaDecodeError",
    "PravegaEncodeError",
    "RequestStreamDecoder",
    "UnknownCommandError",
    "WireCommand",
    "decode_command",
    "encode_append",
    "encode_event",
    "split_events",
]
