"""Fixed byte layouts, computed by hand from the ``writeFields``/``readFrom`` methods of Pravega's
``WireCommands.java``: they pin field order and widths, which a round trip alone cannot (a codec that
wrote two fields in the wrong order would still read them back). Also the frames older peers send,
which lack the fields added later, and Java's modified UTF-8."""

from __future__ import annotations

import uuid

import pytest

from millrace.gateway.pravega_protocol import (
    OLDEST_COMPATIBLE_VERSION,
    WIRE_VERSION,
    PravegaDecodeError,
    PravegaEncodeError,
    UnknownCommandError,
    codec,
    commands,
    table_commands,
)
from millrace.gateway.pravega_protocol.base import CommandType
from millrace.gateway.pravega_protocol.errors import AuthErrorCode, ErrorMessageCode
from millrace.gateway.pravega_protocol.primitives import decode_modified_utf8, encode_modified_utf8

WRITER = uuid.UUID("01234567-89ab-cdef-fedc-ba9876543210")
WRITER_HEX = "0123456789abcdef fedcba9876543210"  # most significant long, then least


def frame(type_code: int, payload_hex: str) -> bytes:
    payload = bytes.fromhex(payload_hex)
    return type_code.to_bytes(4, "big", signed=True) + len(payload).to_bytes(4, "big") + payload


def test_the_versions_are_pravegas() -> None:
    assert (WIRE_VERSION, OLDEST_COMPATIBLE_VERSION) == (17, 5)


def test_every_type_code_of_pravegas_wire_command_type_is_decodable() -> None:
    # WireCommandType.java, in its order; EVENT (0) is read only inside appends.
    # fmt: off
    pravega_codes = [
        -127, -1, -2, -3, -4, -5, -6, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 20, 21, 28, 29, 30, 31, 32, 33,
        34, 35, 36, 37, 38, 39, 40, 41, 42, 50, 51, 52, 53, 55, 56, 57, 58, 59, 60, 61, 68, 69, 70, 71,
        74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 100,
    ]
    # fmt: on
    assert sorted(codec.COMMANDS) == sorted(pravega_codes)
    assert all(code == cls.TYPE for code, cls in codec.COMMANDS.items())


def test_hello() -> None:
    hello = commands.Hello(high_version=WIRE_VERSION, low_version=OLDEST_COMPATIBLE_VERSION)
    assert hello.encode() == bytes.fromhex("ffffff81 00000008 00000011 00000005")


def test_keep_alive_is_a_bare_header() -> None:
    assert commands.KeepAlive().encode() == bytes.fromhex("00000064 00000000")


def test_an_event_is_type_zero_length_data() -> None:
    assert commands.Event(data=b"abc").encode() == bytes.fromhex("00000000 00000003 616263")


def test_setup_append_with_a_known_uuid() -> None:
    setup = commands.SetupAppend(
        request_id=7, writer_id=WRITER, segment="sc/st/0.#epoch.0", delegation_token=""
    )
    assert setup.encode() == frame(
        1,
        "0000000000000007"  # requestId
        + WRITER_HEX  # writerId
        + "0010"
        + b"sc/st/0.#epoch.0".hex()  # segment, writeUTF
        + "0000",  # delegationToken: "" (Java writes "" for null)
    )


def test_append_block_end_field_order() -> None:
    end = commands.AppendBlockEnd(
        writer_id=WRITER, size_of_whole_events=11, data=b"xy", num_events=2, last_event_number=9, request_id=3
    )
    assert end.encode() == frame(
        4,
        WRITER_HEX
        + " 0000000b"  # sizeOfWholeEvents
        + " 00000002 7879"  # data, its int length first
        + " 00000002"  # numEvents
        + " 0000000000000009"  # lastEventNumber
        + " 0000000000000003",  # requestId
    )


def test_data_appended_writes_the_request_id_after_the_event_numbers() -> None:
    acked = commands.DataAppended(
        request_id=1,
        writer_id=WRITER,
        event_number=5,
        previous_event_number=4,
        current_segment_write_offset=100,
    )
    assert acked.encode() == frame(
        7, WRITER_HEX + " 0000000000000005 0000000000000004 0000000000000001 0000000000000064"
    )


def test_create_segment_writes_the_rate_before_the_scale_type() -> None:
    create = commands.CreateSegment(
        request_id=2,
        segment="s",
        target_rate=1000,
        scale_type=commands.ScaleType.THROUGHPUT,
        delegation_token="t",
        rollover_size_bytes=0,
    )
    assert create.encode() == frame(20, "0000000000000002 000173 000003e8 01 000174 0000000000000000")


def test_conditional_append_embeds_a_whole_event_frame() -> None:
    append = commands.ConditionalAppend(
        writer_id=WRITER, event_number=1, expected_offset=64, event=commands.Event(data=b"e"), request_id=8
    )
    assert append.encode() == frame(
        5, WRITER_HEX + " 0000000000000001 0000000000000040 00000000 00000001 65 0000000000000008"
    )


def test_a_conditional_append_must_embed_an_event() -> None:
    bad = frame(5, WRITER_HEX + " 0000000000000001 0000000000000040 00000003 00000001 65")
    with pytest.raises(PravegaDecodeError, match="expected an EVENT"):
        codec.decode_command(bad)


def test_segment_read() -> None:
    read = commands.SegmentRead(
        segment="s", offset=16, at_tail=True, end_of_segment=False, data=b"\x00\x01", request_id=4
    )
    assert read.encode() == frame(10, "000173 0000000000000010 01 00 00000002 0001 0000000000000004")


def test_table_keys_and_values_carry_their_own_sizes() -> None:
    update = table_commands.UpdateTableEntries(
        request_id=1,
        segment="t",
        delegation_token="",
        table_entries=(
            table_commands.TableEntry(
                key=table_commands.TableKey(data=b"k", key_version=table_commands.NOT_EXISTS),
                value=table_commands.TableValue(data=b"vv"),
            ),
        ),
        table_segment_offset=-1,
    )
    assert update.encode() == frame(
        74,
        "0000000000000001 000174 0000"
        + " 00000001"  # one entry
        + " 0000000d 00000001 6b ffffffffffffffff"  # key: size 4 + 1 + 8, data length, data, version
        + " 00000006 00000002 7676"  # value: size 4 + 2, data length, data
        + " ffffffffffffffff",  # tableSegmentOffset
    )


def test_an_empty_table_key_is_written_without_its_version() -> None:
    read = table_commands.ReadTable(
        request_id=1,
        segment="t",
        delegation_token="",
        keys=(table_commands.TableKey(data=b"", key_version=5),),
    )
    encoded = read.encode()
    assert encoded == frame(78, "0000000000000001 000174 0000 00000001 0000000c 00000000")
    assert table_commands.ReadTable.decode(encoded).keys == (table_commands.TableKey(data=b""),)
    assert table_commands.ReadTable.decode(encoded).keys[0].key_version == table_commands.NO_VERSION


def test_iterator_args_write_an_empty_prefix_filter_and_skip_a_sent_one() -> None:
    args = table_commands.TableIteratorArgs(continuation_token=b"c", from_key=b"a", to_key=b"z")
    read = table_commands.ReadTableKeys(
        request_id=1, segment="t", delegation_token="", suggested_key_count=10, args=args
    )
    payload = "0000000000000001 000174 0000 0000000a "
    assert read.encode() == frame(83, payload + "00000001 63 00000000 00000001 61 00000001 7a")
    with_prefix = frame(83, payload + "00000001 63 00000002 7070 00000001 61 00000001 7a")
    assert codec.decode_command(with_prefix) == read
    # A pre-0.10 client sent only the token and the prefix: the range is empty.
    old = frame(83, payload + "00000001 63 00000000")
    assert codec.decode_command(old) == table_commands.ReadTableKeys(
        request_id=1,
        segment="t",
        delegation_token="",
        suggested_key_count=10,
        args=table_commands.TableIteratorArgs(continuation_token=b"c"),
    )


# --- what older peers send ----------------------------------------------------------------------


def test_data_appended_from_an_old_server() -> None:
    old = frame(7, WRITER_HEX + " 0000000000000005")
    assert codec.decode_command(old) == commands.DataAppended(
        writer_id=WRITER,
        event_number=5,
        previous_event_number=-1,
        request_id=-1,
        current_segment_write_offset=-1,
    )


def test_error_replies_without_a_stack_trace() -> None:
    assert codec.decode_command(frame(50, "0000000000000001 000173 000168")) == commands.WrongHost(
        request_id=1, segment="s", correct_host="h", server_stack_trace=""
    )
    assert codec.decode_command(frame(53, "0000000000000001 000173")) == commands.NoSuchSegment(
        request_id=1, segment="s", server_stack_trace="", offset=-1
    )


def test_stream_segment_info_without_a_start_offset_means_zero() -> None:
    old = frame(12, "0000000000000001 000173 01 00 00 0000000000000002 0000000000000003")
    assert codec.decode_command(old) == commands.StreamSegmentInfo(
        request_id=1,
        segment_name="s",
        exists=True,
        is_sealed=False,
        is_deleted=False,
        last_modified=2,
        write_offset=3,
        start_offset=0,
    )


def test_auth_token_check_failed_codes() -> None:
    def decoded(payload_hex: str) -> AuthErrorCode:
        command = codec.decode_command(frame(60, payload_hex))
        assert isinstance(command, commands.AuthTokenCheckFailed)
        return command.error_code

    assert decoded("0000000000000001") == AuthErrorCode.UNSPECIFIED  # no trace, no code: an old server
    assert decoded("0000000000000001 0000 00000001") == AuthErrorCode.TOKEN_EXPIRED
    assert decoded("0000000000000001 0000 00000007") == AuthErrorCode.TOKEN_CHECK_FAILED  # unknown code


def test_error_message_with_an_unknown_code_is_unspecified() -> None:
    command = codec.decode_command(frame(61, "0000000000000001 000173 00016d 00000009"))
    assert command == commands.ErrorMessage(
        request_id=1, segment="s", message="m", error_code=ErrorMessageCode.UNSPECIFIED
    )


def test_merge_segments_before_attribute_updates() -> None:
    old = frame(58, "0000000000000001 000174 000173 0000")
    assert codec.decode_command(old) == commands.MergeSegments(
        request_id=1, target="t", source="s", delegation_token="", attribute_updates=()
    )


def test_create_table_segment_from_an_old_client() -> None:
    old = frame(70, "0000000000000001 000174 0000")
    assert codec.decode_command(old) == table_commands.CreateTableSegment(
        request_id=1,
        segment="t",
        delegation_token="",
        sorted_deprecated=False,
        key_length=0,
        rollover_size_bytes=0,
    )


def test_bytes_after_the_last_field_are_ignored_as_pravega_ignores_them() -> None:
    newer = frame(29, "0000000000000001 000173 deadbeef")
    assert codec.decode_command(newer) == commands.SegmentSealed(request_id=1, segment="s")


def test_invalid_event_number_equality_ignores_the_stack_trace() -> None:
    a = commands.InvalidEventNumber(writer_id=WRITER, request_id=1, server_stack_trace="x", event_number=2)
    assert a == commands.InvalidEventNumber(
        writer_id=WRITER, request_id=1, server_stack_trace="y", event_number=2
    )


# --- decoding and encoding failures --------------------------------------------------------------


def test_a_truncated_frame_names_the_field() -> None:
    with pytest.raises(PravegaDecodeError, match=r"Hello\.low_version"):
        codec.decode_command(frame(-127, "00000011"))


def test_unknown_and_top_level_event_types_are_refused() -> None:
    with pytest.raises(UnknownCommandError) as unknown:
        codec.decode_command(frame(6, ""))
    assert unknown.value.type_code == 6
    with pytest.raises(UnknownCommandError, match="inside append data"):
        codec.decode_command(frame(CommandType.EVENT, "61"))


def test_a_frame_for_another_command_is_refused() -> None:
    with pytest.raises(PravegaDecodeError, match="type"):
        commands.Hello.decode(commands.KeepAlive().encode())


@pytest.mark.parametrize(
    "command",
    [
        commands.Hello(high_version=2**31, low_version=0),
        commands.SegmentAttribute(request_id=2**63, value=0),
        commands.CreateSegment(
            request_id=1, segment="s", target_rate=0, scale_type=128, rollover_size_bytes=0
        ),
        commands.SealSegment(request_id=1, segment="x" * 65536),
        commands.SegmentSealed(request_id=True, segment="s"),
    ],
    ids=["int", "long", "byte", "string", "bool-as-int"],
)
def test_values_out_of_their_java_range_are_refused(command: commands.WireCommand) -> None:
    with pytest.raises(PravegaEncodeError):
        command.encode()


# --- modified UTF-8 -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "encoded_hex"),
    [
        ("abc", "616263"),
        ("\x00", "c080"),  # never a zero byte
        ("é", "c3a9"),
        ("€", "e282ac"),
        ("\U0001f600", "eda0bdedb880"),  # two surrogates of 3 bytes each, not UTF-8's 4 bytes
    ],
)
def test_modified_utf8(text: str, encoded_hex: str) -> None:
    assert encode_modified_utf8(text) == bytes.fromhex(encoded_hex)
    assert decode_modified_utf8(bytes.fromhex(encoded_hex)) == text


def test_modified_utf8_reads_what_java_reads_and_refuses_what_it_refuses() -> None:
    assert decode_modified_utf8(b"a\x00b") == "a\x00b"  # a plain zero byte is read as U+0000
    assert decode_modified_utf8(bytes.fromhex("c1a1")) == "a"  # Java does not check for overlong forms
    for malformed in ("f09f9880", "80", "c3", "e282"):  # 4-byte form, stray continuation, truncated
        with pytest.raises(PravegaDecodeError):
            decode_modified_utf8(bytes.fromhex(malformed))


def test_a_string_of_65535_encoded_bytes_fits_and_one_more_does_not() -> None:
    assert len(encode_modified_utf8("é" * 32767 + "a")) == 65535
    with pytest.raises(PravegaEncodeError):
        encode_modified_utf8("é" * 32768)
