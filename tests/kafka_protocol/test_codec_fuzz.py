"""Malformed input: decode_request must raise KafkaDecodeError and nothing else."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from millrace.gateway.kafka_protocol import codec
from millrace.gateway.kafka_protocol.codec import KafkaDecodeError, UnsupportedApiError

from .strategies import random_message


def _sample_frames() -> list[bytes]:
    """Valid frames of a few APIs at old, middle and flexible versions."""
    rnd = random.Random(1)
    frames = []
    for key in (0, 1, 2, 3, 8, 9, 11, 14, 18, 19, 22, 32, 60):
        info = codec.API_KEYS[key]
        for v in {info.min_version, (info.min_version + info.max_version) // 2, info.max_version}:
            name = type(codec.request_class(key)()).__name__
            for _ in range(2):
                obj = random_message(name, v, rnd)
                frames.append(codec.encode_request(key, v, rnd.randrange(2**31), obj, client_id="fz")[4:])
    return frames


FRAMES = _sample_frames()


def _decode_only_kafka_errors(frame: bytes) -> None:
    try:
        codec.decode_request(frame)
    except KafkaDecodeError as e:
        str(e)  # the message must render too


def test_every_truncation_fails_cleanly() -> None:
    for frame in FRAMES:
        for cut in range(len(frame)):
            _decode_only_kafka_errors(frame[:cut])


def test_random_mutations_fail_cleanly() -> None:
    rnd = random.Random(7)
    for frame in FRAMES:
        for _ in range(200):
            b = bytearray(frame)
            for _ in range(rnd.randint(1, 4)):
                i = rnd.randrange(len(b))
                b[i] = rnd.choice((0x00, 0xFF, 0x7F, 0x80, rnd.randrange(256)))
            _decode_only_kafka_errors(bytes(b))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=64), st.sampled_from(sorted(codec.API_KEYS)), st.integers(0, 20))
def test_random_bodies_fail_cleanly(body: bytes, api_key: int, version: int) -> None:
    header = api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + b"\x00\x00\x00\x01"
    _decode_only_kafka_errors(header + body)
    _decode_only_kafka_errors(header + b"\x00\x00" + body)


@given(st.binary(max_size=32))
def test_random_frames_fail_cleanly(frame: bytes) -> None:
    _decode_only_kafka_errors(frame)


def test_unsupported_version_carries_correlation_id() -> None:
    frame = (18).to_bytes(2, "big") + (99).to_bytes(2, "big") + (1234).to_bytes(4, "big") + b"\x00\x00"
    with pytest.raises(UnsupportedApiError) as ei:
        codec.decode_request(frame)
    assert (ei.value.api_key, ei.value.api_version, ei.value.correlation_id) == (18, 99, 1234)
    with pytest.raises(UnsupportedApiError):
        codec.decode_request(b"\x7f\x00\x00\x00")


def test_error_names_api_and_version() -> None:
    frame = codec.encode_request(3, 12, 1, codec.request_class(3)(topics=None))[4:]
    with pytest.raises(KafkaDecodeError) as ei:
        codec.decode_request(frame[:-3])
    assert ei.value.api_key == 3 and ei.value.api_version == 12
    assert "Metadata" in str(ei.value)


def test_non_bytes_input() -> None:
    with pytest.raises(KafkaDecodeError):
        codec.decode_request("not bytes")  # type: ignore[arg-type]
    with pytest.raises(KafkaDecodeError):
        codec.decode_request(None)  # type: ignore[arg-type]
