"""Bad input on the Kafka listener: malformed, truncated, oversized and random frames get a Kafka
error or a closed connection, never a crash; other connections keep being served and nothing already
acknowledged is lost."""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from millrace.gateway.kafka_protocol.codec import encode_request, request_class
from tests.kafka.test_data_path import batch, records_of
from tests.kafka.wire import local
from tests.server_process import ServerProcess

P = request_class(0)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServerProcess(str(tmp_path_factory.mktemp("robust") / "data")).start()
    yield srv
    srv.kill()


def send_raw(port: int, payload: bytes, wait: float = 0.5) -> bytes:
    """Send ``payload`` and return what comes back until the server closes or ``wait`` passes.
    (No half-close: a peer's FIN ends a Twisted connection before a buffered reply goes out.)"""
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.settimeout(wait)
        try:
            sock.sendall(payload)
            while chunk := sock.recv(65536):
                out += chunk
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            pass
    return out


def valid_produce_frame(correlation_id: int = 7) -> bytes:
    return encode_request(0, 9, correlation_id, P(acks=-1, timeout_ms=1000, topic_data=[
        P.TopicProduceData(name="robust", partition_data=[P.PartitionProduceData(index=0, records=batch([b"r"]))])]))


def assert_still_serving(server: ServerProcess, acknowledged: list[bytes]) -> None:
    assert server.proc.poll() is None, "the server died"
    c = local(server.kafka_port)
    assert [r.value for r in records_of(c.fetch("robust", 0, 0))][: len(acknowledged)] == acknowledged


def test_fixed_bad_frames(server):
    c = local(server.kafka_port)
    c.produce("robust", 0, batch([b"keep-me"]))
    acknowledged = [b"keep-me"]
    frame = valid_produce_frame()
    bad = [
        b"\x00\x00\x00\x02\x00",  # length says 2, only 1 byte follows
        b"\xff\xff\xff\xff",  # negative length
        struct.pack(">i", 1 << 30) + b"x" * 100,  # oversized
        struct.pack(">i", 4) + b"\x00\x00\x00\x00",  # too short for a header
        struct.pack(">i", 8) + struct.pack(">hhi", 999, 0, 1),  # unknown api key
        struct.pack(">i", 8) + struct.pack(">hhi", 0, 99, 1),  # produce v99
        frame[:-5],  # truncated body with its full length prefix
        frame[:4] + b"\xff" * (len(frame) - 4),  # garbage body
    ]
    for payload in bad:
        send_raw(server.kafka_port, payload, wait=0.2)
        assert_still_serving(server, acknowledged)
    # An ApiVersions request of an unknown version gets UNSUPPORTED_VERSION with a v0 body.
    reply = send_raw(server.kafka_port, struct.pack(">i", 10) + struct.pack(">hhih", 18, 99, 42, -1))
    assert reply[4:8] == struct.pack(">i", 42) and struct.unpack(">h", reply[8:10])[0] == 35


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_frames_never_crash_the_server(server, data):
    frame = valid_produce_frame()
    choice = data.draw(st.sampled_from(["random", "mutate", "truncate"]))
    if choice == "random":
        body = data.draw(st.binary(max_size=300))
        payload = struct.pack(">i", len(body)) + body
    elif choice == "mutate":
        raw = bytearray(frame)
        for _ in range(data.draw(st.integers(1, 8))):
            raw[data.draw(st.integers(4, len(raw) - 1))] = data.draw(st.integers(0, 255))
        payload = bytes(raw)
    else:
        payload = frame[: data.draw(st.integers(0, len(frame) - 1))]
    send_raw(server.kafka_port, payload, wait=0.05)
    assert server.proc.poll() is None, "the server died"


def test_still_healthy_after_fuzzing(server):
    c = local(server.kafka_port)
    offset = c.produce("robust", 0, batch([b"after"])).base_offset
    assert records_of(c.fetch("robust", 0, offset))[0].value == b"after"
