"""The native protocol's typed messages: every command has one, each survives the wire, and a header that
does not hold its command's request is refused with the error the client raises again."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import types
import typing
import uuid

import pytest

from millrace.protocol import messages as m
from millrace.protocol.errors import (
    InvalidRequestError,
    ServerError,
    UnknownCommandError,
    error_from_status,
    status_of,
)
from millrace.protocol.wire import Command, Status, decode_body


def sample(annotation: object) -> object:
    """A value of ``annotation`` that is not its field's default, so a lost field shows."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return sample(next(a for a in args if a is not type(None)))
    if annotation is bool:
        return True
    if annotation is int:
        return 7
    if annotation is float:
        return 0.25
    if annotation is str:
        return "s/t"
    if annotation is object:
        return {"any": [1, "json"]}
    if annotation is uuid.UUID:
        return uuid.UUID("12345678-1234-5678-1234-567812345678")
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return list(annotation)[-1]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return (sample(args[0]), sample(args[0]))
        return tuple(sample(a) for a in args)
    if origin is dict:
        return {"k": sample(args[1])}
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return filled(annotation)
    raise AssertionError(f"no sample for {annotation!r}")


def filled(cls: type) -> object:
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: sample(hints[f.name]) for f in dataclasses.fields(cls) if f.init})


REPLIES = [cls for _, cls in inspect.getmembers(m, inspect.isclass)
           if dataclasses.is_dataclass(cls) and cls.__module__ == m.__name__ and not issubclass(cls, m.Request)]


def test_every_command_has_its_request_class() -> None:
    assert set(m.REQUESTS) == set(Command)
    for command, cls in m.REQUESTS.items():
        assert cls.command == command


@pytest.mark.parametrize("command", list(Command), ids=lambda c: c.name)
def test_every_request_round_trips_through_a_frame(command: Command) -> None:
    request = filled(m.REQUESTS[command])
    assert isinstance(request, m.Request)
    frame = m.encode_request(41, request, b"payload")
    code, request_id, header, payload = decode_body(frame[4:])
    assert (code, request_id, bytes(payload)) == (command, 41, b"payload")
    assert m.decode_request(code, header) == request


@pytest.mark.parametrize("reply", REPLIES, ids=lambda cls: cls.__name__)
def test_every_reply_round_trips(reply: type) -> None:
    message = filled(reply)
    assert m.decode_reply(reply, m.to_header(message)) == message


def test_defaults_and_nones_stay_off_the_wire() -> None:
    header = m.to_header(m.AppendEvents(scope="s", stream="t", partition=0))
    assert header == {"scope": "s", "stream": "t", "partition": 0}
    assert m.decode_request(Command.APPEND_EVENTS, header) == m.AppendEvents(scope="s", stream="t", partition=0)
    assert m.to_header(m.CreateScope(scope="s", forwarded=True))["forwarded"] is True


def test_a_description_keeps_one_shape_with_nulls_where_unknown() -> None:
    """The CLI and the HTTP API print the description as it comes, so unknown values stay as null."""
    segment = m.SegmentDescription(segment_id=1, name="s/t/1", number=1, epoch=0, key_start=0, key_end=1,
                                   container=0, partitions=None, length=None, storage_length=None,
                                   start_offset=None, sealed=None, rates=())
    described = m.StreamDescriptionReply(
        scope="s", stream="t", state="active", epoch=0, created_ms=5,
        config=m.StreamConfigFields(initial_segments=1, scaling=m.ScalingFields(), retention=m.RetentionFields()),
        truncation={}, partition_count=None, rate_windows=(60.0,), segments=(segment,), history=(),
        pending_scale=None)
    header = m.to_header(described)
    assert header["partition_count"] is None and header["pending_scale"] is None
    assert {k for k, v in header["segments"][0].items() if v is None} == {
        "partitions", "length", "storage_length", "start_offset", "sealed"}
    assert m.decode_reply(m.StreamDescriptionReply, header) == described
    # Stream tags came later: an untagged stream's description and create leave them out, so clients
    # and servers from before them (which refuse fields they do not know) still read these.
    assert "tags" not in header and "tags" not in header["config"]
    assert "tags" not in m.to_header(m.CreateStream(scope="s", stream="t"))
    tagged = dataclasses.replace(described, tags=("iot",))
    assert m.decode_reply(m.StreamDescriptionReply, m.to_header(tagged)).tags == ("iot",)


@pytest.mark.parametrize(("header", "complaint"), [
    ({"stream": "t", "txn_id": str(uuid.uuid4()), "lease_ms": 1}, "missing field 'scope'"),
    ({"scope": "s", "stream": "t", "txn_id": "not-a-uuid", "lease_ms": 1}, "is not a UUID"),
    ({"scope": "s", "stream": "t", "txn_id": str(uuid.uuid4()), "lease_ms": "1"}, "lease_ms: '1' is not int"),
    ({"scope": "s", "stream": "t", "txn_id": str(uuid.uuid4()), "lease_ms": True}, "lease_ms: True is not int"),
    ({"scope": "s", "stream": "t", "txn_id": str(uuid.uuid4()), "lease_ms": 1, "lease": 2}, "unknown field(s) lease"),
])
def test_a_malformed_header_is_an_invalid_request(header: m.Header, complaint: str) -> None:
    with pytest.raises(InvalidRequestError, match="BEGIN_TXN") as refused:
        m.decode_request(Command.BEGIN_TXN, header)
    assert complaint in str(refused.value)
    # The status the listener answers, and the error the client raises from it again.
    assert status_of(refused.value) == Status.INVALID_REQUEST
    again = error_from_status(Status.INVALID_REQUEST, {"error": str(refused.value)})
    assert type(again) is InvalidRequestError


def test_nested_fields_are_checked_too() -> None:
    with pytest.raises(InvalidRequestError, match=r"attributes\[0\]: missing field 'key'"):
        m.decode_request(Command.APPEND, {"segment": "x", "attributes": [{"value": 1}]})
    with pytest.raises(InvalidRequestError, match=r"segments\[0\]: 1.5 is not"):
        m.decode_request(Command.MERGE_SEGMENTS, {"scope": "s", "stream": "t", "segments": [1.5]})


def test_an_unknown_command_is_refused_as_such() -> None:
    with pytest.raises(UnknownCommandError):
        m.decode_request(250, {})
    assert status_of(UnknownCommandError("x")) == Status.UNKNOWN_COMMAND


def test_a_malformed_reply_is_a_server_error() -> None:
    with pytest.raises(ServerError, match="OffsetReply"):
        m.decode_reply(m.OffsetReply, {"offset": "zero"})
