"""Every request and response of every API round-trips at every valid version."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from millrace.gateway.kafka_protocol import codec

from .strategies import message_strategy

_SETTINGS = settings(
    max_examples=int(os.environ.get("MILLRACE_CODEC_EXAMPLES", "4")),  # each example covers every version
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _versions(api_key: int) -> range:
    info = codec.API_KEYS[api_key]
    return range(info.min_version, info.max_version + 1)


@pytest.mark.parametrize("api_key", list(codec.API_KEYS), ids=lambda k: codec.API_KEYS[k].name)
@_SETTINGS
@given(data=st.data())
def test_request_round_trip(api_key: int, data: st.DataObject) -> None:
    name = type(codec.request_class(api_key)()).__name__
    for v in _versions(api_key):
        req = data.draw(message_strategy(name, v), label=f"v{v}")
        frame = codec.encode_request(api_key, v, 1234, req, client_id="cli")
        assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
        hdr, got = codec.decode_request(frame[4:])
        assert (hdr.request_api_key, hdr.request_api_version, hdr.correlation_id) == (api_key, v, 1234)
        assert hdr.client_id == ("cli" if codec.request_header_version(api_key, v) > 0 else "")
        assert got == req
        assert codec.encode_request(api_key, v, 1234, got, client_id="cli") == frame


@pytest.mark.parametrize("api_key", list(codec.API_KEYS), ids=lambda k: codec.API_KEYS[k].name)
@_SETTINGS
@given(data=st.data())
def test_response_round_trip(api_key: int, data: st.DataObject) -> None:
    name = type(codec.response_class(api_key)()).__name__
    for v in _versions(api_key):
        resp = data.draw(message_strategy(name, v), label=f"v{v}")
        frame = codec.encode_response(api_key, v, 99, resp)
        hdr, got = codec.decode_response(api_key, v, frame[4:])
        assert hdr.correlation_id == 99
        assert got == resp
        parts = codec.encode_response_parts(api_key, v, 99, got)
        assert b"".join(parts) == frame


@pytest.mark.parametrize("api_key", list(codec.API_KEYS), ids=lambda k: codec.API_KEYS[k].name)
def test_default_objects_round_trip(api_key: int) -> None:
    for v in _versions(api_key):
        req = codec.request_class(api_key)()
        assert codec.decode_request(codec.encode_request(api_key, v, 7, req)[4:])[1] == req
        resp = codec.response_class(api_key)()
        assert codec.decode_response(api_key, v, codec.encode_response(api_key, v, 7, resp, framed=False))[1] == resp
