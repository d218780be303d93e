"""Hostile clients of a SASL listener: whatever a stranger sends before authenticating, and whatever a
broken or malicious SASL exchange looks like, is refused, its connection closed, and the server goes on
serving a legitimate client without having grown.

- a request of every API the server serves (but ApiVersions, SaslHandshake and SaslAuthenticate, which
  Kafka serves before authentication) closes the connection unanswered;
- a huge length prefix, and a SaslAuthenticate frame over ``sasl.server.max.receive.size``, close it;
- SaslAuthenticate with garbage, a PLAIN message without NULs, a SCRAM client-final before client-first:
  refused once (SASL_AUTHENTICATION_FAILED / ILLEGAL_SASL_STATE) and closed;
- a SCRAM exchange cut in half leaves nothing behind (a fresh connection authenticates), and a
  client-final recorded from a successful exchange, replayed on a new connection, fails: the server's
  nonce differs each time, so the proof does not verify."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import scramp

from compat_tests.raw_kafka import KafkaSocket
from millrace.gateway.kafka.registry import load_handlers
from millrace.gateway.kafka_protocol import codec
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.metadata import MetadataRequest
from millrace.gateway.kafka_protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from millrace.gateway.kafka_protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.server_process import ServerProcess, add_scram_args, config_args

pytestmark = pytest.mark.timeout(180)

PLAIN_USER, PLAIN_PASSWORD = "alice", "alice-secret"
SCRAM_USER, SCRAM_PASSWORD = "carol", "carol-secret"
SCRAM = "SCRAM-SHA-256"
MAX_RECEIVE = 8192  # sasl.server.max.receive.size for this server (Kafka's default is 512 KiB)
PRE_AUTHENTICATION_APIS = {"ApiVersions", "SaslHandshake", "SaslAuthenticate"}
RSS_GROWTH_LIMIT = 64 << 20  # what the whole hostile run may add to the server's resident memory


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home: Path = tmp_path_factory.mktemp("hostile")
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{PLAIN_USER}="{PLAIN_PASSWORD}";'
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    srv = ServerProcess(str(home / "data"), "--override", "listeners=SASL_PLAINTEXT://127.0.0.1:0",
                        "--override", f"sasl.enabled.mechanisms=PLAIN,{SCRAM}",
                        *config_args(home, f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}"),
                        "--override", f"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={scram}",
                        "--override", f"sasl.server.max.receive.size={MAX_RECEIVE}",
                        *add_scram_args(home, f"{SCRAM}=[name={SCRAM_USER},password={SCRAM_PASSWORD}]")).start()
    try:
        yield srv
        assert srv.proc is not None and srv.proc.poll() is None, "".join(srv.output[-100:])
        assert srv.stop(timeout=30) == 0
    finally:
        srv.kill()


def _connect(server: ServerProcess) -> KafkaSocket:
    return KafkaSocket(server.ports["kafka"], timeout=5)


def _rss(server: ServerProcess) -> int:
    assert server.proc is not None
    return int(psutil.Process(server.proc.pid).memory_info().rss)


def _serves_a_legitimate_client(server: ServerProcess) -> bool:
    """Whether a PLAIN client authenticates and gets a Metadata answer."""
    with _connect(server) as client:
        client.authenticate_plain(PLAIN_USER, PLAIN_PASSWORD)
        return client.call(MetadataRequest(topics=[]), 12).brokers != []


def _request_frame(api_key: int, version: int) -> bytes:
    """A request of ``api_key`` with every field at its default: encoded by the codec where the
    defaults are valid, else the bare header (either way the server must not get to the body)."""
    try:
        return codec.encode_request(api_key, version, 1, codec.request_class(api_key)(), client_id="stranger")
    except codec.KafkaEncodeError:
        header = struct.pack(">hhih", api_key, version, 1, len(b"stranger")) + b"stranger"
        return struct.pack(">i", len(header)) + header


def _scram_client() -> Any:
    return scramp.ScramClient([SCRAM], SCRAM_USER, SCRAM_PASSWORD)


def _scram_exchange(client: KafkaSocket) -> tuple[str, str, Any]:
    """A full, successful SCRAM exchange: (client-first, client-final, the final answer)."""
    scram = _scram_client()
    first = scram.get_client_first()
    answer = client.sasl(SCRAM, first.encode())
    assert answer.error_code == 0, answer
    scram.set_server_first(bytes(answer.auth_bytes).decode())
    final = scram.get_client_final()
    done = client.authenticate(final.encode())
    assert done.error_code == 0, done
    scram.set_server_final(bytes(done.auth_bytes).decode())  # the server proved it knows the credential
    return first, final, done


@pytest.fixture(scope="module")
def rss_before(server: ServerProcess) -> int:
    assert _serves_a_legitimate_client(server)
    return _rss(server)


API_NAMES = sorted(h.name for h in load_handlers().values() if h.name not in PRE_AUTHENTICATION_APIS)


@pytest.mark.parametrize("api", API_NAMES)
def test_a_request_before_authentication_closes_the_connection(server: ServerProcess, rss_before: int,
                                                              api: str) -> None:
    handler = next(h for h in load_handlers().values() if h.name == api)
    for version in {handler.min_version, handler.max_version}:
        with _connect(server) as stranger:
            stranger.sock.sendall(_request_frame(handler.api_key, version))
            assert stranger.closed(), f"{api} v{version} before authentication was not refused"
            assert stranger.unread == b"", f"{api} v{version} before authentication was answered"


def test_a_huge_length_prefix_before_authentication_closes_the_connection(server: ServerProcess,
                                                                         rss_before: int) -> None:
    for size in (2**31 - 1, 64 << 20, MAX_RECEIVE + 1):
        with _connect(server) as stranger:
            stranger.sock.sendall(struct.pack(">i", size) + b"\0" * 1024)
            assert stranger.closed(), size
    with _connect(server) as stranger:  # a negative size is no frame at all
        stranger.sock.sendall(struct.pack(">i", -1))
        assert stranger.closed()


def test_an_oversized_sasl_token_closes_the_connection(server: ServerProcess, rss_before: int) -> None:
    with _connect(server) as client:
        assert client.call(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        client.send(SaslAuthenticateRequest(auth_bytes=b"\0alice\0" + b"x" * (4 * MAX_RECEIVE)), 2)
        assert client.closed()


@pytest.mark.parametrize(("mechanism", "token"), [
    ("PLAIN", b"\xff\xfe garbage \x00\x01\x02"),
    ("PLAIN", b"alice-secret-without-any-separator"),
    ("PLAIN", b"\0alice\0wrong-password"),
    ("PLAIN", b""),
    (SCRAM, b"c=biws,r=abcdefghijklmnop,p=dGhpcyBpcyBub3QgYSBwcm9vZg=="),  # a client-final first
    (SCRAM, b"\x00\xff not scram at all"),
    (SCRAM, b"n,,n=carol"),  # a client-first without a nonce
], ids=["garbage", "plain-without-nuls", "plain-wrong-password", "empty", "scram-final-first", "scram-garbage",
        "scram-no-nonce"])
def test_a_malformed_sasl_token_is_refused_once_and_closed(server: ServerProcess, rss_before: int, mechanism: str,
                                                           token: bytes) -> None:
    with _connect(server) as client:
        answer = client.sasl(mechanism, token)
        assert answer.error_code in (ErrorCode.SASL_AUTHENTICATION_FAILED, ErrorCode.ILLEGAL_SASL_STATE), answer
        assert client.closed()


def test_a_scram_exchange_cut_in_half_leaves_nothing_behind(server: ServerProcess, rss_before: int) -> None:
    for _ in range(20):
        client = _connect(server)
        answer = client.sasl(SCRAM, _scram_client().get_client_first().encode())
        assert answer.error_code == 0 and bytes(answer.auth_bytes).startswith(b"r=")
        client.close()  # gone mid-exchange
    with _connect(server) as fresh:
        _scram_exchange(fresh)
        assert fresh.call(MetadataRequest(topics=[]), 12).brokers


def test_a_replayed_scram_client_final_fails(server: ServerProcess, rss_before: int) -> None:
    with _connect(server) as victim:
        first, final, _ = _scram_exchange(victim)
    with _connect(server) as attacker:
        answer = attacker.sasl(SCRAM, first.encode())  # the same client nonce...
        assert answer.error_code == 0
        server_nonce = bytes(answer.auth_bytes).decode().split(",")[0]
        assert server_nonce not in final  # ...but the server's part of the nonce is new
        refused = attacker.authenticate(final.encode())
        assert refused.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, refused
        assert attacker.closed()


def test_after_all_that_the_server_serves_and_did_not_grow(server: ServerProcess, rss_before: int) -> None:
    """Runs last (pytest keeps file order): the legitimate client is served and the resident memory is
    within ``RSS_GROWTH_LIMIT`` of what it was before the hostile clients."""
    assert _serves_a_legitimate_client(server)
    with _connect(server) as scram_client:
        _scram_exchange(scram_client)
    grown = _rss(server) - rss_before
    assert grown < RSS_GROWTH_LIMIT, f"the server's RSS grew by {grown >> 20} MiB"
