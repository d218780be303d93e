"""A blocking, pipelined native-protocol connection from one cluster node to another.

The store may not import the client (the client is a peer of the server, not a part of it), so a
node forwarding segment operations has this small connection of its own over ``protocol/wire.py``:
any thread sends (one lock around ``sendall``), one reader thread completes each request's
``StoreFuture`` by request id, so many requests are in flight at once and callers never block on
the socket.

Invariants: a request that ``request`` accepted completes exactly once: with the answer, with the
error class its status stands for (``protocol/errors.py``), or with ``ConnectionLostError`` when the
connection closed first (its outcome unknown). A request ``request`` refused with ``NotSentError``
never reached the peer whole, so sending it elsewhere cannot apply it twice.

With ``tls`` (``peer_tls.PeerTls.client_context``: a secured cluster's peer listeners) the connection
is mutual TLS, checked against the cluster CA before any request goes out. TLS runs over memory BIOs
(``_TlsChannel``): OpenSSL does not allow one connection's reads and writes from two threads at once,
so the reader thread and the senders each take the one lock around the ``SSLObject``, and never hold it
while they wait on the socket.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import ssl
import struct
import threading

from millrace.protocol.errors import ConnectionLostError, error_from_status
from millrace.protocol.messages import Header, Request, encode_request
from millrace.protocol.wire import MAX_FRAME_BYTES, Status, WireError, decode_body
from millrace.store.futures import StoreFuture

log = logging.getLogger(__name__)

_LEN = struct.Struct(">I")
Answer = tuple[Header, bytes]


class NotSentError(ConnectionError):
    """The request was not sent whole (connection closed or refused): safe to send elsewhere."""


class _PlainChannel:
    def __init__(self, sock: socket.socket) -> None:
        self.sendall = sock.sendall
        self.recv = sock.recv


class _TlsChannel:
    """TLS over a blocking socket through memory BIOs. ``_tls_lock`` guards the ``SSLObject`` and its BIOs
    (held only for in-memory work); ``_send_lock`` orders what goes out on the socket, so records leave
    in the order OpenSSL made them, whichever thread made them."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str | None = None) -> None:
        self._sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_side=False, server_hostname=server_hostname)
        self._tls_lock = threading.Lock()
        self._send_lock = threading.Lock()
        while True:  # the handshake, before any other thread uses the connection
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                data = sock.recv(1 << 16)
                if not data:
                    raise ConnectionResetError("the peer closed the connection during the TLS handshake") from None
                self._in.write(data)
        self._flush()

    def _flush(self) -> None:
        """Send what OpenSSL has made (the caller holds ``_send_lock``, or is the only thread)."""
        with self._tls_lock:
            data = self._out.read()
        if data:
            self._sock.sendall(data)

    def sendall(self, data: bytes) -> None:
        with self._send_lock:
            with self._tls_lock:
                self._tls.write(data)
            self._flush()

    def recv(self, n: int) -> bytes:
        while True:
            with self._tls_lock:
                try:
                    data: bytes | None = self._tls.read(n)
                except ssl.SSLWantReadError:
                    data = None
                except ssl.SSLZeroReturnError:  # the peer's close_notify
                    data = b""
                answer = self._out.pending > 0  # e.g. a TLS 1.3 key update to acknowledge
            if answer:
                with self._send_lock:
                    self._flush()
            if data is not None:
                return data
            raw = self._sock.recv(1 << 16)
            if not raw:
                return b""
            with self._tls_lock:
                self._in.write(raw)


class NodeConnection:
    """One TCP connection to a node's native (peer) listener, mutual TLS with ``tls``; ``request`` may be
    called from any thread. ``tls_hostname``: the name the listener's certificate is checked against when
    the context checks host names (the peer listeners' does not: the cluster CA is the membership)."""

    def __init__(self, host: str, port: int, connect_timeout: float = 5.0, tls: ssl.SSLContext | None = None,
                 tls_hostname: str | None = None) -> None:
        self.address = f"{host}:{port}"
        try:
            self._sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as exc:
            raise NotSentError(f"cannot connect to {self.address}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._io: _PlainChannel | _TlsChannel = _PlainChannel(self._sock)
        if tls is not None:
            try:
                self._io = _TlsChannel(self._sock, tls, tls_hostname)  # within connect_timeout
            except OSError as exc:  # ssl.SSLError among them: e.g. a certificate the cluster CA did not sign
                self._sock.close()
                raise NotSentError(f"TLS with {self.address} failed: {exc}") from exc
        self._sock.settimeout(None)  # a READ may wait at a segment's tail for as long as it asked
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._pending: dict[int, StoreFuture[Answer]] = {}
        self._pending_lock = threading.Lock()
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop, name=f"node-conn-{self.address}", daemon=True)
        self._reader.start()

    @property
    def closed(self) -> bool:
        return self._closed

    def request(self, request: Request, payload: bytes = b"") -> StoreFuture[Answer]:
        """Send one request; the future gives the answer's (header, payload). NotSentError if the
        connection is closed or the send failed (the peer never received the whole frame)."""
        fut: StoreFuture[Answer] = StoreFuture()
        with self._send_lock:
            with self._pending_lock:
                if self._closed:
                    raise NotSentError(f"connection to {self.address} is closed")
                request_id = next(self._ids)
                self._pending[request_id] = fut
            try:
                self._io.sendall(encode_request(request_id, request, payload))
            except OSError as exc:
                # sendall failing means the frame did not all go out: the peer cannot have parsed it.
                with self._pending_lock:
                    self._pending.pop(request_id, None)
                self._shut(f"send failed: {exc}")
                raise NotSentError(f"send to {self.address} failed: {exc}") from exc
        return fut

    def close(self) -> None:
        self._shut("closed")
        self._reader.join(10)

    def _shut(self, reason: str) -> None:
        with self._pending_lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(OSError):  # already gone
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the reader thread
        log.debug("connection to %s: %s", self.address, reason)

    def _recv_exactly(self, n: int) -> bytes | None:
        chunks = []
        while n:
            chunk = self._io.recv(min(n, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _read_loop(self) -> None:
        reason = "peer closed the connection"
        try:
            while True:
                head = self._recv_exactly(_LEN.size)
                if head is None:
                    break
                (length,) = _LEN.unpack(head)
                if length > MAX_FRAME_BYTES:
                    reason = f"answer of {length} bytes exceeds {MAX_FRAME_BYTES}"
                    break
                body = self._recv_exactly(length)
                if body is None:
                    break
                status, request_id, header, payload = decode_body(body)
                with self._pending_lock:
                    fut = self._pending.pop(request_id, None)
                if fut is None:
                    reason = f"answer to unknown request {request_id}"
                    break
                if status == Status.OK:
                    fut.set_result((header, bytes(payload)))
                else:
                    fut.set_exception(error_from_status(status, header))
        except (OSError, WireError) as exc:
            reason = str(exc)
        self._shut(reason)
        with self._pending_lock:
            orphans, self._pending = self._pending, {}
        for fut in orphans.values():
            fut.set_exception(ConnectionLostError(f"connection to {self.address} lost ({reason}); outcome unknown"))
        self._sock.close()
