"""Length-prefixed framing with backpressure, shared by the Kafka and native listeners.

Both protocols frame requests with a 4-byte big-endian length. ``BudgetedReceiver`` splits frames with
at most one copy of each (Twisted's ``Int32StringReceiver`` re-concatenates its whole buffer on every
read, quadratic for a large request arriving in 64 KiB reads, and slices each frame out again): a frame
that arrives inside one read is handed over as a memoryview of it; one that spans reads is joined once.

A large frame skips even that copy: once its length prefix has arrived and more than
``DIRECT_READ_MIN`` bytes of it are still to come, the rest goes straight into a buffer of the frame's
size, and a read-only view of that buffer is handed over. On a plain TCP connection the connection reads
into it itself (``recv_into``, in place of the transport's 64 KiB ``recv``s, each a new bytes object and
a ``dataReceived`` call); over TLS each decrypted read is copied into it. A buffer larger than
``DIRECT_READ_MAX`` is an anonymous memory map: the kernel gives it pages only as bytes are written into
it, so a client that announces a large frame and trickles it holds no more memory than it sent, and the
pages go back to the kernel when the frame's last view is dropped (a heap buffer of that size could stay
with the allocator after the connection closed).

Limits (``gateway.limits.ConnectionGuards``, shared by every listener): a frame longer than
``MAX_LENGTH`` (``socket.request.max.bytes``, or ``sasl.server.max.receive.size`` before the client
authenticated) closes the connection; a frame that does not arrive in one read reserves its size in
the server's ``MemoryPool`` (``queued.max.request.bytes``) until it is whole, and a connection whose
frame cannot be reserved stops reading until bytes return; a connection idle for
``connections.max.idle.ms``, or that must authenticate and has not within
``millrace.authentication.timeout.ms``, is closed.

Every connection has an ``Admission`` (``store.budget``): bytes of requests read and not yet answered
plus, through ``charging``, the bytes its appends hold until durable. When its own budget or the
budget of a container its appends went to is full, the connection stops reading from its socket
(``transport.pauseProducing``); it keeps writing responses, and resumes once those budgets drain
below their low-water marks. Requests already read are never refused or dropped. The connection is
also its transport's streaming producer: while responses wait unsent beyond the transport's buffer (a
client that does not read them), it stops reading that client's requests too, as Kafka mutes a
channel while a response is outstanding.
"""

from __future__ import annotations

import errno
import logging
import mmap
import struct

from twisted.internet import main, protocol, tcp
from twisted.internet import reactor as _reactor
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.interfaces import (
    IConsumer,
    IDelayedCall,
    IPushProducer,
    IReactorTime,
    ITCPTransport,
    ITransport,
)
from twisted.python.failure import Failure
from zope.interface import implementer

from millrace.gateway.shared.limits import (
    AUTHENTICATION_TIMEOUT_MS,
    CONNECTIONS_MAX_IDLE_MS,
    ConnectionGuards,
    MemoryPool,
)
from millrace.store.budget import CURRENT_ADMISSION, MIB, Admission, ByteBudget
from millrace.streams.futures import on_reactor

log = logging.getLogger(__name__)

# Bytes of requests (and their appends) one connection may hold before it stops reading.
DEFAULT_CONNECTION_BUDGET_BYTES = 32 * MIB
_LEN = struct.Struct(">I")
# A frame with more than this still to read is read straight into its own buffer (module docstring)...
DIRECT_READ_MIN = 128 * 1024
# ...a heap buffer up to this size (allocated and zeroed whole before its bytes arrive: at most this much
# per connection, of the order of what the kernel's receive buffer already holds), an anonymous memory
# map above it, whose pages exist only once written and return to the kernel when it is dropped.
DIRECT_READ_MAX = 2 * MIB
# An idle connection is looked at this many times per connections.max.idle.ms: it is closed after between
# 1 and 1 + 1/IDLE_CHECKS of that period without traffic (a timestamp per read would cost the hot path).
IDLE_CHECKS = 4
# A connection muted after a failed login closes once its answer is sent; this only outlasts that.
_MUTED_UNTIL_CLOSED_S = 60.0


@implementer(IPushProducer)
class BudgetedReceiver(protocol.Protocol):
    """Calls ``stringReceived(frame)`` per length-prefixed frame (a memoryview, valid as long as the
    callee keeps it) while the connection's budgets allow reading."""

    MAX_LENGTH = 100 * 1024 * 1024
    # A frame's header: HEADER_BYTES before its body, the body's length as a 4-byte big-endian integer at
    # LENGTH_AT within it. Kafka's and the native protocol's header is that length alone; Pravega's
    # WireCommands put a 4-byte type code first (``gateway/pravega/segment_store.py``), and its handler
    # wants the header handed over with the body (HEADER_DELIVERED).
    HEADER_BYTES = 4
    LENGTH_AT = 0
    HEADER_DELIVERED = False
    tcp: ITCPTransport  # the transport, typed: both listeners are TCP

    def __init__(self, budget_bytes: int, name: str = "connection", guards: ConnectionGuards | None = None) -> None:
        self.admission = Admission(ByteBudget(budget_bytes, name))
        self.paused = False  # not reading: a budget is full, the memory pool is, or responses are backed up
        self._budget_wait = False  # a budget is full; a drain callback is registered
        self._send_wait = False  # the transport holds more unsent responses than its buffer size
        self._muted: IDelayedCall | None = None  # a quota throttles the client: read again when this fires
        self._closed = False
        # Unparsed input: views and chunks holding the start of an incomplete frame.
        self._pending: list[bytes | memoryview] = []
        self._pending_len = 0
        self._want = self.HEADER_BYTES  # bytes needed before parsing can make progress
        self._parsing = False  # inside ``_parse``: responses written now wait for the end of the read
        self._socket: tcp.Connection | None = None  # the plain TCP transport, for ``send`` and direct reads
        # The large frame being read straight into its own buffer (prefix included), and its bytes so far.
        self._frame: memoryview | None = None
        self._frame_fill = 0
        # The server's limits (None: no pool, no timers, as a bare receiver in tests).
        self.guards = guards
        self._pool: MemoryPool | None = guards.pool if guards is not None else None
        self._reserved = 0  # what the frame being received holds of the pool
        self._pool_wait = 0  # the size of the frame waiting for the pool (0: none waits)
        self._active = False  # bytes came or went since the idle check last looked
        self._quiet_checks = 0
        self._idle_timer: IDelayedCall | None = None
        self._auth_timer: IDelayedCall | None = None
        self._clock = IReactorTime(_reactor)

    def makeConnection(self, transport: ITransport) -> None:  # noqa: N802 - Twisted's name
        self.tcp = ITCPTransport(transport)
        if isinstance(transport, tcp.Connection) and all(
                hasattr(transport, a) for a in ("dataBuffer", "offset", "_tempDataLen", "_writeDisconnected")):
            self._socket = transport  # (the transport's buffer as ``send`` reads it: checked, not assumed)
            # The reactor calls the transport's doRead: this one reads into a large frame's buffer when
            # there is one, and is the transport's own otherwise.
            transport.doRead = self._do_read  # type: ignore[method-assign]
        IConsumer(transport).registerProducer(self, True)
        idle_ms = self.guards.limits.connections_max_idle_ms if self.guards is not None else 0
        if idle_ms > 0:
            self._idle_timer = self._clock.callLater(idle_ms / 1000 / IDLE_CHECKS, self._idle_check)
        super().makeConnection(transport)

    # -- subclasses ----------------------------------------------------------------------------------
    def stringReceived(self, frame: memoryview) -> None:  # noqa: N802 - Twisted's name, kept for familiarity
        raise NotImplementedError

    def lengthLimitExceeded(self, length: int) -> None:  # noqa: N802 - Twisted's name
        self.close_connection()

    def require_authentication(self) -> None:
        """The client must authenticate within ``millrace.authentication.timeout.ms`` (``authenticated``
        says it did), or the connection is closed."""
        timeout_ms = self.guards.limits.authentication_timeout_ms if self.guards is not None else 0
        if timeout_ms > 0 and self._auth_timer is None and not self._closed:
            self._auth_timer = self._clock.callLater(timeout_ms / 1000, self._authentication_overdue, timeout_ms)

    def authenticated(self) -> None:
        """The client authenticated: no deadline any more."""
        if self._auth_timer is not None:
            if self._auth_timer.active():
                self._auth_timer.cancel()
            self._auth_timer = None

    def failed_authentication(self) -> float:
        """A login failed: read nothing more from the client, and answer and close after the returned
        delay in seconds (``connection.failed.authentication.delay.ms``; 0: at once). Pipelined requests
        stay unread, so none of them tells the client the outcome sooner."""
        delay_ms = self.guards.limits.connection_failed_authentication_delay_ms if self.guards is not None else 0
        if delay_ms <= 0:
            return 0.0
        # Muted past the answer: the connection closes once that is sent, and reads nothing before.
        self.mute_until(self._clock.seconds() + delay_ms / 1000 + _MUTED_UNTIL_CLOSED_S, self._clock)
        return delay_ms / 1000

    def _authentication_overdue(self, timeout_ms: int) -> None:
        self._auth_timer = None
        if not self._closed:
            log.info("closing connection from %s: not authenticated within %d ms (%s)", self._peer_name(),
                     timeout_ms, AUTHENTICATION_TIMEOUT_MS)
            self.close_connection()

    def _idle_check(self) -> None:
        """connections.max.idle.ms: a connection that moved no bytes for that long and has no request
        outstanding is closed (one still owed a response, or whose responses wait to be sent, is not idle)."""
        assert self.guards is not None
        self._idle_timer = None
        if self._closed:
            return
        if self._active or self.admission.budget.used or self._send_wait:
            self._active = False
            self._quiet_checks = 0
        else:
            self._quiet_checks += 1
            if self._quiet_checks >= IDLE_CHECKS:
                log.info("closing connection from %s: idle for %d ms (%s)", self._peer_name(),
                         self.guards.limits.connections_max_idle_ms, CONNECTIONS_MAX_IDLE_MS)
                self.close_connection()
                return
        self._idle_timer = self._clock.callLater(self.guards.limits.connections_max_idle_ms / 1000 / IDLE_CHECKS,
                                                 self._idle_check)

    def _peer_name(self) -> str:
        peer = self.tcp.getPeer()
        return f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"

    def close_connection(self) -> None:
        """Close once what was written is sent; nothing read from now on is served. This connection is its
        transport's producer until then, and Twisted's TLS transport closes (sends its close alert) only
        once no producer is registered: without unregistering, a TLS client refused or answered for the
        last time would keep its connection open."""
        self._closed = True
        IConsumer(self.transport).unregisterProducer()
        self.tcp.loseConnection()

    def paused_by(self) -> str | None:
        """Why the connection is not reading now, for /metrics: "budget" (its budget or a container's is
        full), "memory" (its next frame waits for the memory pool), "quota" (throttled), "send" (its responses wait unsent); None while it reads."""
        if not self.paused:
            return None
        if self._budget_wait:
            return "budget"
        if self._pool_wait:
            return "memory"
        return "quota" if self._muted is not None else "send"

    def send(self, data: bytes) -> None:
        """Write ``data`` after whatever the transport still holds.

        Twisted's transport only buffers a write and asks the reactor to tell it when the socket is
        writable: an epoll registration, a loop turn and a deregistration around every response. A
        response completed outside a read (by the durable log's commit, a timer) to a plain TCP
        connection holding nothing unsent goes to the socket at once instead; what the socket does not
        take, and anything written during a read (where responses to pipelined requests are sent
        together once the read is done) or over TLS, goes through the transport as before."""
        t = self._socket
        if (t is not None and not self._parsing and not t.TLS and t.connected and not t.disconnecting
                and not t._writeDisconnected and not t._tempDataLen  # noqa: SLF001 - see makeConnection
                and t.offset == len(t.dataBuffer)):
            self._active = True
            sent = t.writeSomeData(data)
            if type(sent) is int:
                if sent == len(data):
                    return
                data = data[sent:]
        self.tcp.write(data)

    def answered(self, size: int) -> None:
        """A request of ``size`` bytes (its frame) no longer holds the connection's budget."""
        self.admission.budget.release(size)

    # -- input ---------------------------------------------------------------------------------------
    def _do_read(self) -> ConnectionLost | ConnectionDone | None:
        t = self._socket
        assert t is not None  # only installed on a plain TCP transport
        self._active = True
        frame = self._frame
        if frame is None:
            return tcp.Connection.doRead(t)
        try:
            received = t.socket.recv_into(frame[self._frame_fill:])
        except OSError as e:
            return None if e.errno == errno.EWOULDBLOCK else main.CONNECTION_LOST
        if not received:
            return main.CONNECTION_DONE
        self._frame_fill += received
        if self._frame_fill == len(frame):
            self._frame = None
            self._parse(frame.toreadonly())
        return None

    def _read_into_buffer(self, start: memoryview) -> bool:
        """Whether the rest of the frame ``start`` begins (its prefix included) goes straight into a buffer
        of its own (then ``start`` is copied there, the one copy of it): by ``_do_read`` on plain TCP, by
        ``dataReceived`` otherwise."""
        size = self._want
        if size - len(start) < DIRECT_READ_MIN:
            return False
        # A memory map's pages exist once written: its size is only what the client announced.
        frame = memoryview(bytearray(size) if size <= DIRECT_READ_MAX else mmap.mmap(-1, size))
        frame[: len(start)] = start
        self._frame, self._frame_fill = frame, len(start)
        return True

    def dataReceived(self, data: bytes | memoryview) -> None:  # noqa: N802 - Twisted's name
        self._active = True
        frame = self._frame
        if frame is not None:  # (not on plain TCP, whose reads go straight into the frame: ``_do_read``)
            fill = self._frame_fill
            taken = min(len(data), len(frame) - fill)
            frame[fill : fill + taken] = memoryview(data)[:taken]
            self._frame_fill = fill + taken
            if self._frame_fill < len(frame):
                return
            self._frame = None
            self._parse(frame.toreadonly())
            if taken == len(data):
                return
            data = memoryview(data)[taken:]
        if self._pending:
            self._pending.append(data)
            self._pending_len += len(data)
            if self._pending_len < self._want or self.paused:
                return
            self._parse(self._take_pending())
            return
        self._parse(data)

    def _take_pending(self) -> bytes | memoryview:
        pending = self._pending
        self._pending, self._pending_len = [], 0
        # The one copy of a frame that spanned reads (a lone piece is already contiguous).
        return pending[0] if len(pending) == 1 else b"".join(pending)

    def _parse(self, data: bytes | memoryview) -> None:
        view = data if type(data) is memoryview else memoryview(data)
        end = len(view)
        off = 0
        admission = self.admission
        self._parsing = True
        try:
            off = self._parse_frames(view, off, end, admission)
        finally:
            self._parsing = False
        if off < end and not self._closed:
            rest = view[off:]
            # A frame has begun and will not be whole in this read: it holds its size of the pool until
            # it is (at most one frame per connection does: the first incomplete one).
            if self._want > self.HEADER_BYTES and not self._reserved and self._pool is not None:
                self._reserve(self._want)
            if not self.paused and self._read_into_buffer(rest):
                return
            self._pending = [rest]
            self._pending_len = end - off
            if self.paused:
                self._want = 0

    def _parse_frames(self, view: memoryview, off: int, end: int, admission: Admission) -> int:
        """Hand over the whole frames of ``view[off:end]`` while reading is allowed; where it stopped."""
        header = self.HEADER_BYTES
        length_at = self.LENGTH_AT
        body_from = 0 if self.HEADER_DELIVERED else header
        while not self.paused and not self._closed and end - off >= header:
            (length,) = _LEN.unpack_from(view, off + length_at)
            if length > self.MAX_LENGTH:
                self._closed = True
                self.lengthLimitExceeded(length)
                return end
            stop = off + header + length
            if stop > end:
                self._want = header + length
                break
            frame = view[off + body_from : stop]
            off = stop
            if self._reserved:  # this is the frame that held the pool while it arrived
                self._release_reservation()
            admission.budget.acquire(length)
            token = CURRENT_ADMISSION.set(admission)
            try:
                self.stringReceived(frame)
            finally:
                CURRENT_ADMISSION.reset(token)
            if not self._budget_wait:
                blocking = admission.blocking()
                if blocking is not None:
                    self._pause(blocking)
        else:
            self._want = header
        return off

    # -- the memory pool --------------------------------------------------------------------------------
    def _reserve(self, size: int) -> None:
        """Hold ``size`` bytes of the pool for the frame now arriving, or stop reading until they can be."""
        assert self._pool is not None
        if self._pool.try_reserve(size):
            self._reserved = size
            return
        self._pool_wait = size
        self._reading(False)
        self._pool.wait(self._pool_retry)

    def _pool_retry(self) -> bool:
        """The pool has bytes back: reserve the waiting frame's and read again (after this turn: the pool
        is releasing now, and reading may release more). Whether this connection is done waiting."""
        assert self._pool is not None
        if self._closed:
            return True
        if not self._pool.try_reserve(self._pool_wait):
            return False
        self._reserved, self._pool_wait = self._pool_wait, 0
        self._clock.callLater(0, self._resume_if_free)
        return True

    def _release_reservation(self) -> None:
        assert self._pool is not None
        reserved, self._reserved = self._reserved, 0
        self._pool.release(reserved)

    def _resume_if_free(self) -> None:
        if not self._budget_wait and not self._send_wait and self._muted is None and not self._pool_wait:
            self._reading(True)

    # -- backpressure --------------------------------------------------------------------------------
    def _pause(self, budget: ByteBudget) -> None:
        self._budget_wait = True
        self._reading(False)
        budget.when_drained(self._drained_elsewhere)

    def _reading(self, on: bool) -> None:
        if on == (not self.paused) or self._closed:
            return
        self.paused = not on
        transport = IPushProducer(self.transport)
        if self.paused:
            transport.pauseProducing()
            return
        transport.resumeProducing()
        if self._pending:
            self._parse(self._take_pending())

    # The transport calls these as its producer's: its buffer of unsent responses is over (or back
    # under) its size.
    def pauseProducing(self) -> None:  # noqa: N802 - Twisted's name
        self._send_wait = True
        self._reading(False)

    def resumeProducing(self) -> None:  # noqa: N802 - Twisted's name
        self._send_wait = False
        self._active = True  # the transport sent what it held
        self._resume_if_free()

    def mute_until(self, deadline: float, clock: IReactorTime | None = None) -> None:
        """Read nothing more until ``deadline`` (``clock.seconds()``): a quota's throttle (KIP-219: the
        broker mutes a throttled client's channel). A later deadline extends the mute; responses are
        still written meanwhile."""
        clock = clock or IReactorTime(_reactor)
        delay = deadline - clock.seconds()
        if delay <= 0 or self._closed:
            return
        muted = self._muted
        if muted is not None:
            if muted.getTime() < deadline:
                muted.reset(delay)
            return
        self._muted = clock.callLater(delay, self._unmute)
        self._reading(False)

    def _unmute(self) -> None:
        self._muted = None
        self._resume_if_free()

    def stopProducing(self) -> None:  # noqa: N802 - Twisted's name
        self._closed = True

    def _drained_elsewhere(self) -> None:
        # Budgets drain on log-writer threads (and sometimes here): the connection's one crossing
        # back to the reactor.
        on_reactor(self._drained)

    def _drained(self) -> None:
        if self._closed:
            return
        blocking = self.admission.blocking()
        if blocking is not None:
            blocking.when_drained(self._drained_elsewhere)
            return
        self._budget_wait = False
        self._resume_if_free()

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:  # noqa: N802
        self._closed = True
        if self._muted is not None:
            self._muted.cancel()
            self._muted = None
        self._pending = []
        self._pending_len = 0
        # A partly received frame's buffer and its share of the pool go now, not with this object.
        self._frame = None
        if self._reserved:
            self._release_reservation()
        if self._pool_wait and self._pool is not None:
            self._pool.forget(self._pool_retry)
            self._pool_wait = 0
        for timer in (self._idle_timer, self._auth_timer):
            if timer is not None and timer.active():
                timer.cancel()
        self._idle_timer = self._auth_timer = None

