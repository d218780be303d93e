"""Connections to a Millrace native listener: pipelined requests answered by id, and reconnection.

A ``Connection`` is one TCP connection. Requests are written as they are made and answered by request
id, so many can be in flight; a receiver thread completes their futures. When the connection drops,
every outstanding request fails with ``ConnectionLostError`` (its outcome is unknown: the caller
decides whether a retry is safe) and the connection is finished.

A ``ConnectionPool`` keeps one live connection per endpoint and replaces a lost one on the next
request, retrying the connect with backoff for up to ``reconnect_timeout`` seconds, so a server that
restarts (or a segment whose owner moves) costs callers a failed in-flight request, not a dead client.

Security (``client.security``): a ``tls://`` endpoint is reached over TLS, and with credentials every
connection authenticates (SASL on the native wire) right after HELLO, before the pool hands it out, and
again on the same connection before its session ends. A refused authentication raises
``AuthenticationError`` and is not retried: the same credentials would be refused again.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import ssl
import struct
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from millrace.client.security import ClientSecurity
from millrace.protocol.errors import AuthenticationError, ConnectionLostError, error_from_status
from millrace.protocol.messages import (
    Authenticate,
    AuthenticateReply,
    AuthHandshake,
    Header,
    Hello,
    HelloReply,
    Request,
    decode_reply,
    to_header,
)
from millrace.protocol.sasl import SaslClientError
from millrace.protocol.wire import MAX_FRAME_BYTES, PROTOCOL_VERSION, Status, decode_body, encode_frame

DEFAULT_PORT = 9090
_LEN = struct.Struct(">I")

# A reply: (header, payload); ``protocol.messages.decode_reply`` types the header.
Reply = tuple[Header, bytes]


@dataclass(frozen=True)
class Endpoint:
    """Where a native listener runs; ``tls``: reached over TLS."""

    host: str
    port: int
    tls: bool = False

    @classmethod
    def parse(cls, address: str, tls: bool = False) -> Endpoint:
        """``tcp://host:port``, ``tls://host:port``, ``host:port`` or ``host`` (port 9090; TLS when ``tls``)."""
        parts = urlsplit(address if "://" in address else f"{'tls' if tls else 'tcp'}://{address}")
        if parts.scheme not in ("tcp", "tls"):
            raise ValueError(f"{address!r}: only tcp:// and tls:// endpoints are supported")
        if not parts.hostname:
            raise ValueError(f"{address!r} names no host")
        return cls(parts.hostname, parts.port or DEFAULT_PORT, parts.scheme == "tls")

    def __str__(self) -> str:
        return f"{'tls' if self.tls else 'tcp'}://{self.host}:{self.port}"


class Connection:
    """One pipelined connection. Thread-safe: any thread may send; one thread receives."""

    def __init__(self, endpoint: Endpoint, connect_timeout: float = 10.0,
                 security: ClientSecurity | None = None) -> None:
        self.endpoint = endpoint
        self.security = security
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._tls: _TlsChannel | None = None
        if endpoint.tls:
            try:
                self._tls = _TlsChannel(sock, (security or ClientSecurity()).tls_context(), endpoint.host)
            except ssl.SSLCertVerificationError:
                sock.close()
                raise
            except (OSError, ssl.SSLError) as exc:
                sock.close()
                raise ConnectionLostError(f"TLS handshake with {endpoint} failed: {exc}") from exc
        self._sock.settimeout(None)
        self._ids = itertools.count(1)
        self._pending: dict[int, Future[Reply]] = {}
        self._send_lock = threading.Lock()
        self._closed = False
        self._receiver = threading.Thread(target=self._receive, name=f"millrace-recv-{endpoint}", daemon=True)
        self._receiver.start()
        self._reauth_at: float | None = None  # time.monotonic() to re-authenticate by (None: never)
        self._auth_lock = threading.Lock()
        try:
            hello = decode_reply(HelloReply, self.request(Hello()).result(connect_timeout)[0])
            if hello.version < PROTOCOL_VERSION:
                raise ConnectionLostError(f"{endpoint} speaks protocol {hello.version}, "
                                          f"this client needs {PROTOCOL_VERSION}")
            if security is not None and security.mechanism is not None:
                self._authenticate(security, connect_timeout)
        except BaseException:
            self.close()
            raise
        # A cluster node names every node's native listener; a single server names none.
        self.cluster_nodes = tuple(Endpoint.parse(address, tls=endpoint.tls) for address in hello.nodes)

    def _authenticate(self, security: ClientSecurity, timeout: float) -> None:
        """One SASL exchange on this connection (at connect, and again before the session ends)."""
        exchange = security.exchange()
        assert exchange.mechanism is not None
        try:
            self._send(AuthHandshake(mechanism=exchange.mechanism)).result(timeout)
            message = exchange.first()
            while True:
                header, answer = self._send(Authenticate(), message).result(timeout)
                reply = decode_reply(AuthenticateReply, header)
                if reply.complete:
                    exchange.done(answer)
                    break
                following = exchange.answer(answer)
                if following is None:
                    raise AuthenticationError(f"{self.endpoint} asks for more than {exchange.mechanism} says")
                message = following
        except SaslClientError as exc:  # a SCRAM server that did not prove it knows the credential
            raise AuthenticationError(f"authentication with {self.endpoint} failed: {exc}") from None
        except TimeoutError:
            raise ConnectionLostError(f"{self.endpoint} did not answer the authentication in {timeout:g} s") from None
        except ConnectionLostError as exc:  # the server closed it: what a refusal without an answer looks like
            raise AuthenticationError(f"authentication with {self.endpoint} failed: {exc}") from None
        lifetime = reply.session_lifetime_ms
        # Re-authenticate at 85 % of the session's lifetime (Kafka's clients: 85-95 %).
        self._reauth_at = None if lifetime is None else time.monotonic() + 0.85 * lifetime / 1000
    @property
    def closed(self) -> bool:
        return self._closed

    def request(self, request: Request, payload: bytes = b"") -> Future[Reply]:
        """Send one request; its future holds (header, payload) or the typed error the server answered."""
        if self._reauth_at is not None and time.monotonic() >= self._reauth_at:
            self._reauthenticate()
        return self.send_frame(request.command, to_header(request), payload)

    def _send(self, request: Request, payload: bytes = b"") -> Future[Reply]:
        return self.send_frame(request.command, to_header(request), payload)

    def _reauthenticate(self) -> None:
        """Authenticate again on this connection before the session ends (one thread does it; requests
        of other threads meanwhile still go out under the old session, which has not ended yet)."""
        if threading.current_thread() is self._receiver or not self._auth_lock.acquire(blocking=False):
            return  # the receiver thread must not wait for an answer it alone would read
        try:
            if self._reauth_at is None or time.monotonic() < self._reauth_at or self.security is None:
                return
            self._reauth_at = None
            try:
                self._authenticate(self.security, 30.0)
            except AuthenticationError:
                self.close()  # its session ends soon anyway: the pool connects (and authenticates) afresh
                raise
        finally:
            self._auth_lock.release()
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
                frame = encode_frame(command, request_id, header, payload)
                if self._tls is not None:
                    self._tls.sendall(frame)
                else:
                    self._sock.sendall(frame)
            except OSError as exc:
                self._pending.pop(request_id, None)
                raise ConnectionLostError(f"sending to {self.endpoint} failed: {exc}") from exc
        return fut

    def _receive(self) -> None:
        reader: Any = self._tls if self._tls is not None else self._sock.makefile("rb")
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


class _TlsChannel:
    """TLS over a blocking socket through memory BIOs, so one thread may receive while others send: an
    ``ssl.SSLSocket`` must not be read and written by two threads at once (OpenSSL's SSL object is not
    thread-safe), and a ``Connection`` is read by its receiver thread while any thread sends.

    ``_state`` guards the SSLObject and its BIOs (held only for memory work, never across I/O); ``_send``
    orders what goes out: bytes leave the outgoing BIO only under it and are written before it is
    released, so the records reach the socket in the order the SSLObject made them."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, host: str) -> None:
        self._sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_hostname=host)
        self._state = threading.Lock()
        self._send = threading.Lock()
        self._plain = bytearray()  # received and decrypted, not yet read
        self._ended = False
        while True:  # the handshake, before any other thread uses the connection
            try:
                self._obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._sock.sendall(self._out.read())
                data = self._sock.recv(65536)
                if not data:
                    raise ConnectionError("the server closed the connection during the TLS handshake") from None
                self._in.write(data)
        self._sock.sendall(self._out.read())

    def sendall(self, data: bytes) -> None:
        with self._send:
            with self._state:
                self._obj.write(data)
                out = self._out.read()
            self._sock.sendall(out)

    def read(self, size: int) -> bytes:
        """Exactly ``size`` bytes, fewer only at the end of the stream (as a buffered file's read)."""
        while len(self._plain) < size and not self._ended:
            data = self._sock.recv(65536)
            if not data:
                break
            with self._state:
                self._in.write(data)
                try:
                    while chunk := self._obj.read(65536):
                        self._plain += chunk
                    self._ended = True  # the server's close alert: nothing more will come
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:
                    self._ended = True
            if self._out.pending and self._send.acquire(blocking=False):  # a post-handshake answer
                try:
                    with self._state:
                        out = self._out.read()
                    self._sock.sendall(out)
                finally:
                    self._send.release()
        taken = bytes(self._plain[:size])
        del self._plain[:size]
        return taken


class ConnectionPool:
    """One live connection per endpoint, reopened on demand after a loss."""

    def __init__(self, reconnect_timeout: float = 30.0, connect_timeout: float = 10.0,
                 security: ClientSecurity | None = None) -> None:
        self.reconnect_timeout = reconnect_timeout
        self.connect_timeout = connect_timeout
        self.security = security  # TLS settings and credentials every connection uses
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
                return Connection(endpoint, self.connect_timeout, self.security)
            except ssl.SSLCertVerificationError as exc:  # the server is not who it should be: no retry
                raise ConnectionLostError(f"cannot connect to {endpoint}: {exc}") from exc
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
