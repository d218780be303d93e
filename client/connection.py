"""Connections to a Millrace native listener: pipelined requests answered by id, and reconnection.

A ``Connection`` is one TCP connection. Requests are written as they are made and answered by request
id, so many can be in flight; a receiver thread completes their futures. When the connection drops,
every outstanding request fails with ``ConnectionLostError`` (its outcome is unknown: the caller
decides whether a retry is safe) and the connection is finished.

A ``ConnectionPool`` keeps one live connection per endpoint and replaces a lost one on the next
request, retrying the connect with backoff for up to ``reconnect_timeout`` seconds, so a server that
restarts (or a segment whose owner moves) costs callers a failed in-flight request, not a dead client.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from urllib.parse import urlsplit

from millrace.protocol.errors import ConnectionLostError, error_from_status
from millrace.protocol.messages import Header, Hello, HelloReply, Request, decode_reply, to_header
from millrace.protocol.wire import MAX_FRAME_BYTES, PROTOCOL_VERSION, Status, decode_body, encode_frame

DEFAULT_PORT = 9090
_LEN = struct.Struct(">I")

# A reply: (header, payload); ``protocol.messages.decode_reply`` types the header.
Reply = tuple[Header, bytes]


@dataclass(frozen=True)
class Endpoint:
    """Where a native listener runs."""

    host: str
    port: int

    @classmethod
    def parse(cls, address: str) -> Endpoint:
        """``tcp://host:port``, ``host:port`` or ``host`` (port 9090)."""
        parts = urlsplit(address if "://" in address else f"tcp://{address}")
        if parts.scheme != "tcp":
            raise ValueError(f"{address!r}: only tcp:// endpoints are supported")
        if not parts.hostname:
            raise ValueError(f"{address!r} names no host")
        return cls(parts.hostname, parts.port or DEFAULT_PORT)

    def __str__(self) -> str:
        return f"tcp://{self.host}:{self.port}"


class Connection:
    """One pipelined connection. Thread-safe: any thread may send; one thread receives."""

    def __init__(self, endpoint: Endpoint, connect_timeout: float = 10.0) -> None:
        self.endpoint = endpoint
        self._sock = socket.create_connection((endpoint.host, endpoint.port), timeout=connect_timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.settimeout(None)
        self._ids = itertools.count(1)
        self._pending: dict[int, Future[Reply]] = {}
        self._send_lock = threading.Lock()
        self._closed = False
        self._receiver = threading.Thread(target=self._receive, name=f"millrace-recv-{endpoint}", daemon=True)
        self._receiver.start()
        hello = decode_reply(HelloReply, self.request(Hello()).result(connect_timeout)[0])
        if hello.version < PROTOCOL_VERSION:
            self.close()
            raise ConnectionLostError(f"{endpoint} speaks protocol {hello.version}, "
                                      f"this client needs {PROTOCOL_VERSION}")
        # A cluster node names every node's native listener; a single server names none.
        self.cluster_nodes = tuple(Endpoint.parse(address) for address in hello.nodes)

    @property
    def closed(self) -> bool:
        return self._closed

    def request(self, request: Request, payload: bytes = b"") -> Future[Reply]:
        """Send one request; its future holds (header, payload) or the typed error the server answered."""
        return self.send_frame(request.command, to_header(request), payload)

    def send_frame(self, command: int, header: Header | None, payload: bytes = b"") -> Future[Reply]:
        """``request`` with the frame's command and header as given, unchecked: what a test of the server's
        answer to a malformed header sends."""
        fut: Future[Reply] = Future()
        with self._send_lock:
            if self._closed:
                raise ConnectionLostError(f"connection to {self.endpoint} is closed")
            request_id = next(self._ids)
            self._pending[request_id] = fut
            try:
                self._sock.sendall(encode_frame(command, request_id, header, payload))
            except OSError as exc:
                self._pending.pop(request_id, None)
                raise ConnectionLostError(f"sending to {self.endpoint} failed: {exc}") from exc
        return fut

    def _receive(self) -> None:
        reader = self._sock.makefile("rb")
        try:
            while True:
                raw = reader.read(_LEN.size)
                if len(raw) < _LEN.size:
                    break
                (length,) = _LEN.unpack(raw)
                if length > MAX_FRAME_BYTES + 1024:
                    break  # not a frame we could ever have asked for: the stream is out of step
                body = reader.read(length)
                if len(body) < length:
                    break
                status, request_id, header, payload = decode_body(body)
                with self._send_lock:
                    fut = self._pending.pop(request_id, None)
                if fut is None:
                    continue
                if status == Status.OK:
                    fut.set_result((header, bytes(payload)))
                else:
                    fut.set_exception(error_from_status(status, header))
        except (OSError, ValueError):
            pass  # a reset or an undecodable frame ends the connection like a close
        finally:
            self._fail_pending()

    def _fail_pending(self) -> None:
        with self._send_lock:
            self._closed = True
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(ConnectionLostError(f"connection to {self.endpoint} lost with the "
                                                      "request outstanding"))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        if threading.current_thread() is not self._receiver:
            self._receiver.join(timeout=5)


class ConnectionPool:
    """One live connection per endpoint, reopened on demand after a loss."""

    def __init__(self, reconnect_timeout: float = 30.0, connect_timeout: float = 10.0) -> None:
        self.reconnect_timeout = reconnect_timeout
        self.connect_timeout = connect_timeout
        self._connections: dict[Endpoint, Connection] = {}
        self._connecting: dict[Endpoint, threading.Lock] = {}
        self._discovered: list[Endpoint] = []  # cluster nodes the nodes connected to named, first seen first
        self._lock = threading.Lock()
        self._closed = False

    def get(self, endpoint: Endpoint, patience: float | None = None) -> Connection:
        """A live connection to ``endpoint``, connecting (with backoff, for up to ``patience`` seconds,
        by default ``reconnect_timeout``) if there is none. Connects to different endpoints do not wait
        for each other: a client of a cluster goes on with the live nodes while a dead one is tried."""
        with self._lock:
            if self._closed:
                raise ConnectionLostError("the client is closed")
            conn = self._connections.get(endpoint)
            if conn is not None and not conn.closed:
                return conn
            connecting = self._connecting.setdefault(endpoint, threading.Lock())
        with connecting:  # one connect per endpoint at a time
            with self._lock:
                conn = self._connections.get(endpoint)
                if conn is not None and not conn.closed:
                    return conn
            conn = self._connect(endpoint, self.reconnect_timeout if patience is None else patience)
            with self._lock:
                if self._closed:
                    conn.close()
                    raise ConnectionLostError("the client is closed")
                self._connections[endpoint] = conn
                self._discovered += [node for node in conn.cluster_nodes if node not in self._discovered]
            return conn

    def discovered(self) -> list[Endpoint]:
        """Every cluster node a connected node named in its HELLO (none from a single server)."""
        with self._lock:
            return list(self._discovered)

    def _connect(self, endpoint: Endpoint, patience: float) -> Connection:
        deadline = time.monotonic() + patience
        delay = 0.05
        while True:
            try:
                return Connection(endpoint, self.connect_timeout)
            except (OSError, ConnectionLostError) as exc:
                if time.monotonic() + delay > deadline:
                    raise ConnectionLostError(f"cannot connect to {endpoint}: {exc}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def request(self, endpoint: Endpoint, request: Request, payload: bytes = b"") -> Future[Reply]:
        return self.get(endpoint).request(request, payload)

    def request_if_connected(self, endpoint: Endpoint, request: Request, payload: bytes = b"") -> Future[Reply]:
        """Like ``request``, but never waits for a connect: ConnectionLostError at once when there is no
        live connection (for callers that must not block, and reconnect elsewhere)."""
        # No lock: a connect in progress holds it, and a dict read is atomic.
        conn = self._connections.get(endpoint)
        if conn is None or conn.closed:
            raise ConnectionLostError(f"not connected to {endpoint}")
        return conn.request(request, payload)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close()
