"""A minimal Kafka client over a raw socket, speaking our own codec, for tests.

``send`` is one request and its response. ``submit`` and ``receive`` split the two so a test can
leave a request parked on the broker (a JoinGroup waiting for a rebalance) while it drives others;
responses arrive in request order on a connection, as Kafka guarantees.
"""

from __future__ import annotations

import collections
import socket
import struct
from typing import Any

from gateway.kafka_protocol.codec import decode_response, encode_request, request_class


class KafkaWire:
    def __init__(self, host: str, port: int, client_id: str = "millrace-test", timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.client_id = client_id
        self._cid = 0
        self._inflight: collections.deque[tuple[int, int, int]] = collections.deque()

    @classmethod
    def connect(cls, bootstrap: str, **kwargs: Any) -> KafkaWire:
        host, port = bootstrap.rsplit(":", 1)
        return cls(host, int(port), **kwargs)

    def send(self, api_key: int, version: int, request: Any) -> Any:
        """Send one request and return its decoded response body."""
        self.submit(api_key, version, request)
        return self.receive()

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        """``send`` with the request built from keyword fields."""
        return self.send(api_key, version, request_class(api_key)(**fields))

    def submit(self, api_key: int, version: int, request: Any) -> int:
        """Send without waiting; returns the correlation id."""
        self._cid += 1
        self.sock.sendall(encode_request(api_key, version, self._cid, request, client_id=self.client_id))
        self._inflight.append((api_key, version, self._cid))
        return self._cid

    def receive(self, timeout: float | None = None) -> Any:
        """The response to the oldest submitted request (blocks up to ``timeout``)."""
        api_key, version, cid = self._inflight[0]
        previous = self.sock.gettimeout()
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            (size,) = struct.unpack(">i", self._recv(4))
            frame = self._recv(size)
        finally:
            self.sock.settimeout(previous)
        self._inflight.popleft()
        header, body = decode_response(api_key, version, frame)
        if header.correlation_id != cid:
            raise AssertionError(f"response to correlation id {header.correlation_id}, expected {cid}")
        return body

    def pending(self) -> int:
        return len(self._inflight)

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
