"""``FrameDecoder``: frames fed in any pieces come out whole and in order; the size limit and bad
headers fail from the header alone."""

from __future__ import annotations

import uuid

import pytest

from millrace.gateway.pravega_protocol import (
    MAX_WIRECOMMAND_SIZE,
    FrameDecoder,
    FrameTooLargeError,
    PravegaDecodeError,
    UnknownCommandError,
    commands,
)
from millrace.gateway.pravega_protocol.base import FRAME_HEADER, WireCommand

WRITER = uuid.UUID(int=42)

STREAM: list[WireCommand] = [
    commands.Hello(high_version=17, low_version=5),
    commands.SetupAppend(request_id=1, writer_id=WRITER, segment="scope/stream/0.#epoch.0"),
    commands.AppendBlock(writer_id=WRITER, data=commands.Event(data=b"event").encode()),
    commands.AppendBlockEnd(
        writer_id=WRITER, size_of_whole_events=13, data=b"", num_events=1, last_event_number=0, request_id=1
    ),
    commands.KeepAlive(),
    commands.ReadSegment(segment="scope/stream/0.#epoch.0", offset=0, suggested_length=1024, request_id=2),
]


def test_fed_byte_by_byte_each_command_comes_out_when_its_last_byte_arrives() -> None:
    decoder = FrameDecoder()
    frames = [command.encode() for command in STREAM]
    for command, encoded in zip(STREAM, frames, strict=True):
        for byte in encoded[:-1]:
            assert decoder.feed(bytes([byte])) == []
        assert decoder.feed(encoded[-1:]) == [command]
        assert decoder.buffered == 0


def test_fed_at_once_every_command_comes_out_in_order() -> None:
    assert FrameDecoder().feed(b"".join(command.encode() for command in STREAM)) == STREAM


def test_the_default_limit_is_pravegas() -> None:
    assert FrameDecoder().max_frame_size == MAX_WIRECOMMAND_SIZE == 0xFFFFFF


def test_a_frame_at_the_limit_is_accepted() -> None:
    block = commands.AppendBlock(writer_id=WRITER, data=b"\x00" * 100)
    encoded = block.encode()
    assert FrameDecoder(max_frame_size=len(encoded)).feed(encoded) == [block]


def test_a_frame_over_the_limit_fails_from_its_header_alone() -> None:
    encoded = commands.AppendBlock(writer_id=WRITER, data=b"\x00" * 100).encode()
    decoder = FrameDecoder(max_frame_size=len(encoded) - 1)
    assert decoder.feed(encoded[:7]) == []
    with pytest.raises(FrameTooLargeError) as too_large:
        decoder.feed(encoded[7:8])  # the header's last byte: no payload was sent yet
    assert (too_large.value.frame_size, too_large.value.max_frame_size) == (len(encoded), len(encoded) - 1)


def test_a_header_declaring_gigabytes_fails_without_buffering_them() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLargeError):
        decoder.feed(FRAME_HEADER.pack(3, 2**31 - 1))


def test_a_negative_length_fails() -> None:
    with pytest.raises(PravegaDecodeError, match="negative"):
        FrameDecoder().feed(FRAME_HEADER.pack(100, -1))


def test_an_unknown_type_fails_from_its_header() -> None:
    with pytest.raises(UnknownCommandError):
        FrameDecoder().feed(FRAME_HEADER.pack(6, 1000))


def test_after_an_error_the_decoder_refuses_input() -> None:
    decoder = FrameDecoder()
    with pytest.raises(UnknownCommandError):
        decoder.feed(FRAME_HEADER.pack(6, 0))
    with pytest.raises(PravegaDecodeError, match="resynchronised"):
        decoder.feed(commands.KeepAlive().encode())


def test_a_malformed_payload_fails() -> None:
    truncated_hello = FRAME_HEADER.pack(-127, 4) + b"\x00\x00\x00\x11"
    with pytest.raises(PravegaDecodeError, match="low_version"):
        FrameDecoder().feed(truncated_hello)


def test_the_limit_must_leave_room_for_a_header() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_size=7)
