"""The append stream: ``AppendAssembler`` follows Pravega's ``AppendDecoder`` (blocks, partial events,
padding, conditional appends and the refusals), and ``RequestStreamDecoder`` does it from bytes."""

from __future__ import annotations

import uuid

import pytest

from millrace.gateway.pravega_protocol import (
    Append,
    AppendAssembler,
    FrameTooLargeError,
    InvalidAppendError,
    PravegaDecodeError,
    RequestStreamDecoder,
    commands,
    encode_append,
    encode_event,
    split_events,
)
from millrace.gateway.pravega_protocol.base import WireCommand

WRITER = uuid.UUID("01234567-89ab-cdef-fedc-ba9876543210")
OTHER_WRITER = uuid.UUID(int=7)
SEGMENT = "scope/stream/0.#epoch.0"
SETUP = commands.SetupAppend(request_id=1, writer_id=WRITER, segment=SEGMENT)


def block_end(
    *,
    size_of_whole_events: int,
    data: bytes = b"",
    num_events: int = 1,
    last_event_number: int = 1,
    writer_id: uuid.UUID = WRITER,
) -> commands.AppendBlockEnd:
    return commands.AppendBlockEnd(
        writer_id=writer_id,
        size_of_whole_events=size_of_whole_events,
        data=data,
        num_events=num_events,
        last_event_number=last_event_number,
        request_id=9,
    )


def assembled(*sequence: WireCommand) -> list[WireCommand | Append]:
    assembler = AppendAssembler()
    results = [assembler.process(command) for command in sequence]
    return [result for result in results if result is not None]


def test_event_framing() -> None:
    framed = encode_event(b"one") + encode_event(b"") + encode_event(b"three")
    assert framed[:8] == bytes.fromhex("0000000000000003")
    assert split_events(framed) == [b"one", b"", b"three"]
    with pytest.raises(PravegaDecodeError):
        split_events(framed[:-1])
    with pytest.raises(PravegaDecodeError, match="EVENT"):
        split_events(commands.PartialEvent(data=b"x").encode())


def test_a_full_block_becomes_one_append_of_the_framed_events() -> None:
    events = encode_event(b"a") + encode_event(b"bb")
    block = commands.AppendBlock(writer_id=WRITER, data=events)
    results = assembled(
        SETUP, block, block_end(size_of_whole_events=len(events), num_events=2, last_event_number=2)
    )
    assert results == [
        SETUP,
        Append(
            segment=SEGMENT,
            writer_id=WRITER,
            event_number=2,
            event_count=2,
            data=events,
            expected_offset=None,
            request_id=9,
        ),
    ]


def test_a_partial_event_is_completed_by_the_block_end() -> None:
    first, second = encode_event(b"first"), encode_event(b"second event")
    block = commands.AppendBlock(
        writer_id=WRITER, data=first + commands.PartialEvent(data=second[:5]).encode()
    )
    (append,) = assembled(
        SETUP, block, block_end(size_of_whole_events=len(first), data=second[5:], num_events=2)
    )[1:]
    assert isinstance(append, Append)
    assert append.data == first + second
    assert split_events(append.data) == [b"first", b"second event"]


def test_a_block_closed_early_ends_in_padding() -> None:
    first = encode_event(b"first")
    block = commands.AppendBlock(writer_id=WRITER, data=first + commands.Padding(length=20).encode())
    (append,) = assembled(SETUP, block, block_end(size_of_whole_events=len(first)))[1:]
    assert isinstance(append, Append)
    assert append.data == first


def test_a_padded_block_end_may_carry_no_data() -> None:
    first = encode_event(b"first")
    block = commands.AppendBlock(writer_id=WRITER, data=first + commands.Padding(length=3).encode())
    with pytest.raises(InvalidAppendError, match="padded"):
        assembled(SETUP, block, block_end(size_of_whole_events=len(first), data=b"x"))


def test_a_block_end_alone_carries_the_events() -> None:
    events = encode_event(b"buffered")
    (append,) = assembled(SETUP, block_end(size_of_whole_events=0, data=events))[1:]
    assert isinstance(append, Append)
    assert append.data == events


def test_conditional_appends() -> None:
    event = commands.Event(data=b"if at 64")
    conditional = commands.ConditionalAppend(
        writer_id=WRITER, event_number=3, expected_offset=64, event=event, request_id=5
    )
    block_end = commands.ConditionalBlockEnd(
        writer_id=WRITER, event_number=4, expected_offset=80, data=encode_event(b"raw"), request_id=6
    )
    assert assembled(SETUP, conditional, block_end)[1:] == [
        Append(
            segment=SEGMENT,
            writer_id=WRITER,
            event_number=3,
            event_count=1,
            data=event.encode(),
            expected_offset=64,
            request_id=5,
        ),
        Append(
            segment=SEGMENT,
            writer_id=WRITER,
            event_number=4,
            event_count=1,
            data=encode_event(b"raw"),
            expected_offset=80,
            request_id=6,
        ),
    ]


def test_other_commands_and_padding_between_blocks_pass_as_pravega_passes_them() -> None:
    read = commands.ReadSegment(segment=SEGMENT, offset=0, suggested_length=10, request_id=3)
    assert assembled(read, commands.Padding(length=4), commands.KeepAlive()) == [read, commands.KeepAlive()]


def test_each_writer_appends_to_its_own_segment() -> None:
    other_setup = commands.SetupAppend(request_id=2, writer_id=OTHER_WRITER, segment="other")
    results = assembled(
        SETUP,
        other_setup,
        block_end(writer_id=OTHER_WRITER, size_of_whole_events=0, data=encode_event(b"o")),
        block_end(size_of_whole_events=0, data=encode_event(b"w")),
    )
    assert [(r.segment, split_events(r.data)) for r in results[2:] if isinstance(r, Append)] == [
        ("other", [b"o"]),
        (SEGMENT, [b"w"]),
    ]


@pytest.mark.parametrize(
    ("sequence", "message"),
    [
        ([commands.AppendBlock(writer_id=WRITER, data=b"")], "before its SetupAppend"),
        ([block_end(size_of_whole_events=0)], "before its SetupAppend"),
        ([SETUP, commands.AppendBlock(writer_id=WRITER, data=b""), SETUP], "while an append block was open"),
        ([SETUP, commands.AppendBlock(writer_id=WRITER, data=b""), commands.Padding(length=0)], "open"),
        ([SETUP, commands.AppendBlock(writer_id=WRITER, data=b""), commands.KeepAlive()], "open"),
        (
            [
                SETUP,
                block_end(size_of_whole_events=0, last_event_number=5),
                block_end(size_of_whole_events=0, last_event_number=4),
            ],
            "went back",
        ),
        ([SETUP, block_end(size_of_whole_events=0, last_event_number=-1)], "went back"),
        ([SETUP, block_end(size_of_whole_events=0, num_events=0)], "a block of 0 events"),
        (
            [
                SETUP,
                commands.SetupAppend(request_id=2, writer_id=OTHER_WRITER, segment="o"),
                commands.AppendBlock(writer_id=WRITER, data=b""),
                block_end(writer_id=OTHER_WRITER, size_of_whole_events=0),
            ],
            "ended by writer",
        ),
        (
            [
                SETUP,
                commands.AppendBlock(writer_id=WRITER, data=encode_event(b"x")),
                block_end(size_of_whole_events=10),
            ],
            "bytes of whole events",
        ),
        (
            [
                SETUP,
                commands.AppendBlock(writer_id=WRITER, data=encode_event(b"x") + encode_event(b"y")),
                block_end(size_of_whole_events=9),
            ],
            "expected a partial event or padding",
        ),
        (
            [
                SETUP,
                commands.AppendBlock(writer_id=WRITER, data=encode_event(b"x") + b"\x00\x00"),
                block_end(size_of_whole_events=9),
            ],
            "no frame",
        ),
        (
            [
                SETUP,
                commands.AppendBlock(writer_id=WRITER, data=commands.PartialEvent(data=b"abc").encode()[:-1]),
                block_end(size_of_whole_events=0),
            ],
            "declares 3 bytes",
        ),
        (
            [
                SETUP,
                commands.ConditionalAppend(
                    writer_id=WRITER,
                    event_number=3,
                    expected_offset=0,
                    event=commands.Event(data=b""),
                    request_id=1,
                ),
                commands.ConditionalBlockEnd(
                    writer_id=WRITER, event_number=2, expected_offset=0, data=b"", request_id=2
                ),
            ],
            "went back",
        ),
    ],
    ids=[
        "block-before-setup",
        "end-before-setup",
        "setup-inside-block",
        "padding-inside-block",
        "keep-alive-inside-block",
        "event-number-backwards",
        "below-zero-before-first-append",
        "no-events",
        "writer-mismatch",
        "whole-events-beyond-block",
        "whole-event-after-whole-events",
        "truncated-trailer",
        "partial-event-overruns-block",
        "conditional-backwards",
    ],
)
def test_refusals(sequence: list[WireCommand], message: str) -> None:
    with pytest.raises(InvalidAppendError, match=message):
        assembled(*sequence)


def test_the_request_stream_decoder_fed_byte_by_byte() -> None:
    first, second = encode_event(b"first"), encode_event(b"second")
    stream = b"".join(
        (
            commands.Hello(high_version=17, low_version=5).encode(),
            SETUP.encode(),
            # A Java client that batches: the block's frame is declared for more than the first
            # event, and the second event straddles its end.
            commands.AppendBlock(
                writer_id=WRITER, data=first + commands.PartialEvent(data=second[:4]).encode()
            ).encode(),
            block_end(
                size_of_whole_events=len(first), data=second[4:], num_events=2, last_event_number=2
            ).encode(),
            encode_append(WRITER, [b"third", b"fourth"], last_event_number=4, request_id=10),
        )
    )
    decoder = RequestStreamDecoder()
    results: list[WireCommand | Append] = []
    for byte in stream:
        results += decoder.feed(bytes([byte]))
    assert results[:2] == [commands.Hello(high_version=17, low_version=5), SETUP]
    appends = results[2:]
    assert all(isinstance(append, Append) for append in appends)
    assert [
        (a.event_number, a.event_count, split_events(a.data)) for a in appends if isinstance(a, Append)
    ] == [
        (2, 2, [b"first", b"second"]),
        (4, 2, [b"third", b"fourth"]),
    ]
    assert decoder.buffered == 0


def test_the_request_stream_decoder_bounds_frames_and_refuses_input_after_an_error() -> None:
    decoder = RequestStreamDecoder(max_frame_size=64)
    assert decoder.feed(SETUP.encode()) == [SETUP]
    with pytest.raises(FrameTooLargeError):
        decoder.feed(commands.AppendBlock(writer_id=WRITER, data=b"\x00" * 41).encode()[:8])
    with pytest.raises(PravegaDecodeError, match="resynchronised"):
        decoder.feed(commands.KeepAlive().encode())


def test_an_append_refusal_also_stops_the_request_stream_decoder() -> None:
    decoder = RequestStreamDecoder()
    with pytest.raises(InvalidAppendError):
        decoder.feed(block_end(size_of_whole_events=0).encode())
    with pytest.raises(PravegaDecodeError, match="resynchronised"):
        decoder.feed(SETUP.encode())
