"""A Kafka client of one blocking socket, built on the server's own codec: for the APIs no Python client
exposes and for requests no well-behaved client sends (the ACL matrix, the hostile-client tests).

``KafkaSocket.call`` sends any generated request class at any version and decodes its answer;
``authenticate_plain`` and ``Scram`` walk SASL through SaslHandshake v1 and SaslAuthenticate v2, as
Kafka's Java client does; ``closed`` tells whether the server hung up."""

from __future__ import annotations

import socket
import struct
from typing import Any

from millrace.gateway.kafka_protocol import codec
from millrace.gateway.kafka_protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from millrace.gateway.kafka_protocol.messages.sasl_handshake import SaslHandshakeRequest
from millrace.gateway.kafka_protocol.primitives import KafkaRequest

SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 2


class KafkaSocket:
    """One connection to a Kafka listener, one request at a time."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.correlation_id = 0
        self.unread = b""  # what ``closed`` read before the connection ended

    def send(self, request: KafkaRequest, version: int) -> int:
        """Send ``request`` without waiting; its correlation id."""
        self.correlation_id += 1
        self.sock.sendall(codec.encode_request(request.API_KEY, version, self.correlation_id, request,
                                               client_id="raw-kafka"))
        return self.correlation_id

    def call(self, request: KafkaRequest, version: int) -> Any:
        """Send ``request`` and return the decoded response body (ConnectionError if the server hangs up)."""
        correlation_id = self.send(request, version)
        header, body = codec.decode_response(request.API_KEY, version, self.read_frame())
        assert header.correlation_id == correlation_id, (header.correlation_id, correlation_id)
        return body

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._read(4))
        return self._read(size)

    def _read(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the server")
            data += chunk
        return bytes(data)

    def sasl(self, mechanism: str, token: bytes) -> Any:
        """SaslHandshake for ``mechanism`` (asserted accepted), then one SaslAuthenticate with ``token``."""
        handshake = self.call(SaslHandshakeRequest(mechanism=mechanism), SASL_HANDSHAKE_VERSION)
        assert handshake.error_code == 0, handshake
        return self.authenticate(token)

    def authenticate(self, token: bytes) -> Any:
        """One SaslAuthenticate round: the response (error_code, error_message, auth_bytes)."""
        return self.call(SaslAuthenticateRequest(auth_bytes=token), SASL_AUTHENTICATE_VERSION)

    def authenticate_plain(self, user: str, password: str) -> KafkaSocket:
        """Authenticate with PLAIN (asserted to succeed); self, for chaining."""
        answer = self.sasl("PLAIN", f"\0{user}\0{password}".encode())
        assert answer.error_code == 0, (user, answer)
        return self

    def closed(self, within: float = 5.0) -> bool:
        """Whether the server closes the connection within ``within`` seconds; anything it still sends
        first (an error answer) is kept in ``unread``."""
        self.sock.settimeout(within)
        try:
            while chunk := self.sock.recv(65536):
                self.unread += chunk
            return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
