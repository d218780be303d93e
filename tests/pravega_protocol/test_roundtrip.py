"""Every command round-trips: encoding then decoding gives the same value, and re-encoding the same
bytes, for random field values."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from millrace.gateway.pravega_protocol import codec, commands
from millrace.gateway.pravega_protocol.base import FRAME_HEADER, WireCommand

from .strategies import struct_strategy

_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Event is no frame of its own (codec.COMMANDS leaves it out), but it has the same frame layout.
_ALL_COMMANDS = [*codec.COMMANDS.values(), commands.Event]


@pytest.mark.parametrize("command_type", _ALL_COMMANDS, ids=lambda cls: cls.__name__)
@_SETTINGS
@given(data=st.data())
def test_every_command_round_trips(command_type: type[WireCommand], data: st.DataObject) -> None:
    command = data.draw(struct_strategy(command_type))
    frame = command.encode()
    type_code, length = FRAME_HEADER.unpack_from(frame)
    assert (type_code, length) == (command_type.TYPE, len(frame) - 8)
    decoded = command_type.decode(frame)
    assert decoded == command
    assert decoded.encode() == frame
    if command_type is not commands.Event:
        assert codec.decode_command(frame) == command


@pytest.mark.parametrize("command_type", list(codec.COMMANDS.values()), ids=lambda cls: cls.__name__)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_a_frame_decoder_fed_in_random_pieces_gives_each_command(
    command_type: type[WireCommand], data: st.DataObject
) -> None:
    values = data.draw(st.lists(struct_strategy(command_type), min_size=1, max_size=3))
    stream = b"".join(value.encode() for value in values)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    decoder = codec.FrameDecoder()
    decoded: list[WireCommand] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        decoded += decoder.feed(stream[start:end])
    assert decoded == values
    assert decoder.buffered == 0
