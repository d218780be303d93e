"""The Pravega codec's exceptions, and the error codes two of Pravega's replies carry on the wire.

Decoding raises only ``PravegaDecodeError`` (or a subclass), encoding only ``PravegaEncodeError``, so a
connection can tell a peer's bad bytes from its own bad values. After a decode error the byte stream
cannot be resynchronised (frames carry no marker to find the next one): the connection must close,
as Pravega's own server does when its decoders throw.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "AuthErrorCode",
    "ErrorMessageCode",
    "FrameTooLargeError",
    "InvalidAppendError",
    "PravegaCodecError",
    "PravegaDecodeError",
    "PravegaEncodeError",
    "UnknownCommandError",
]


class PravegaCodecError(Exception):
    """Base of the codec's errors."""


class PravegaDecodeError(PravegaCodecError):
    """Input bytes are truncated or malformed (Pravega's ``InvalidMessageException`` and EOF cases)."""


class UnknownCommandError(PravegaDecodeError):
    """A frame names a type code that no command has (or one that never travels as a frame of its own)."""

    def __init__(self, type_code: int, detail: str = "") -> None:
        super().__init__(f"unknown wire command type {type_code}" + (f": {detail}" if detail else ""))
        self.type_code = type_code


class FrameTooLargeError(PravegaDecodeError):
    """A frame's header declares more bytes than the decoder was told to accept.

    Raised from the header alone, before the payload is buffered, so the limit bounds the memory one
    connection can make a server hold (Netty's ``TooLongFrameException`` in Pravega's server).
    """

    def __init__(self, frame_size: int, max_frame_size: int) -> None:
        super().__init__(
            f"frame of {frame_size} bytes (header included) exceeds the limit of {max_frame_size}"
        )
        self.frame_size = frame_size
        self.max_frame_size = max_frame_size


class InvalidAppendError(PravegaDecodeError):
    """Append commands arrived in an order or with values that form no valid append (Pravega's
    ``AppendDecoder`` refusals: no SetupAppend for the writer, event numbers going backwards, a block
    left open, a block end that does not match its block)."""


class PravegaEncodeError(PravegaCodecError):
    """A value cannot be written: an integer out of its Java type's range, a string whose modified
    UTF-8 form exceeds 65535 bytes, or a value of the wrong type."""


class AuthErrorCode(IntEnum):
    """``AuthTokenCheckFailed.ErrorCode``: why a delegation token was refused."""

    UNSPECIFIED = -1  # sent by servers older than the field; also what a reply without it decodes to
    TOKEN_CHECK_FAILED = 0
    TOKEN_EXPIRED = 1

    @classmethod
    def from_wire(cls, code: int) -> AuthErrorCode:
        # Pravega maps a code it does not know to a general check failure, not to UNSPECIFIED.
        try:
            return cls(code)
        except ValueError:
            return cls.TOKEN_CHECK_FAILED


class ErrorMessageCode(IntEnum):
    """``ErrorMessage.ErrorCode``: which Java exception the client raises for an ``ErrorMessage``."""

    UNSPECIFIED = -1  # RuntimeException
    ILLEGAL_ARGUMENT_EXCEPTION = 0  # IllegalArgumentException

    @classmethod
    def from_wire(cls, code: int) -> ErrorMessageCode:
        try:
            return cls(code)
        except ValueError:
            return cls.UNSPECIFIED
