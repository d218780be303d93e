"""How a listener connection reads (``gateway.framing.BudgetedReceiver``), on a real socket pair with
Twisted's TCP transport: a large frame is read straight into a buffer of its own (a memory map past
``DIRECT_READ_MAX``) and handed over whole; small frames and what follows a large one go through the
transport's reads as before. And how frames still arriving share the memory pool
(``queued.max.request.bytes``)."""

from __future__ import annotations

import mmap
import select
import socket
import threading
from collections.abc import Iterator

import psutil
import pytest
from twisted.internet import main, reactor, tcp
from twisted.internet.interfaces import ITCPTransport
from twisted.internet.testing import StringTransport
from zope.interface import classImplements

from millrace.gateway.shared.framing import DIRECT_READ_MAX, DIRECT_READ_MIN, BudgetedReceiver
from millrace.gateway.shared.limits import ConnectionGuards, ConnectionLimits

MIB = 1 << 20


class Recorder(BudgetedReceiver):
    def __init__(self) -> None:
        super().__init__(64 << 20)
        self.frames: list[tuple[bytes, type, bool]] = []

    def stringReceived(self, frame: memoryview) -> None:  # noqa: N802 - Twisted's name
        self.frames.append((bytes(frame), type(frame.obj), frame.readonly))
        self.answered(len(frame))


def frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


@pytest.fixture
def pair() -> Iterator[tuple[Recorder, tcp.Connection, socket.socket, socket.socket]]:
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    protocol = Recorder()
    transport = tcp.Connection(ours, protocol, reactor)
    transport.connected = True
    protocol.makeConnection(transport)
    try:
        yield protocol, transport, ours, peer
    finally:
        ours.close()
        peer.close()


def read_until(protocol: Recorder, transport: tcp.Connection, ours: socket.socket, frames: int) -> int:
    """Let the reactor's read run as it would (doRead while readable) until ``frames`` arrived; the reads."""
    reads = 0
    while len(protocol.frames) < frames:
        assert select.select([ours], [], [], 5)[0], "nothing more arrived"
        assert transport.doRead() is None
        reads += 1
    return reads


def send_in_thread(peer: socket.socket, data: bytes) -> threading.Thread:
    sender = threading.Thread(target=peer.sendall, args=(data,))
    sender.start()
    return sender


def test_a_large_frame_is_read_into_its_own_buffer_and_what_follows_as_before(pair) -> None:
    protocol, transport, ours, peer = pair
    large = bytes(range(256)) * (4 * 1024 + 3)  # past DIRECT_READ_MIN, not a multiple of any read size
    assert DIRECT_READ_MIN < len(large) <= DIRECT_READ_MAX
    sender = send_in_thread(peer, frame(b"small") + frame(large) + frame(b"after") + frame(b"last"))
    read_until(protocol, transport, ours, 4)
    sender.join(5)
    assert [f[0] for f in protocol.frames] == [b"small", large, b"after", b"last"]
    # The large frame is a read-only view of its own buffer; the small ones are views of the reads.
    assert protocol.frames[1][1:] == (bytearray, True)
    assert protocol.frames[0][1] is bytes and protocol.frames[2][1] is bytes


def test_many_large_frames_back_to_back_arrive_whole_and_in_order(pair) -> None:
    protocol, transport, ours, peer = pair
    bodies = [bytes([i]) * (DIRECT_READ_MIN * (i + 1) + i) for i in range(5)]
    sender = send_in_thread(peer, b"".join(frame(b) for b in bodies))
    read_until(protocol, transport, ours, len(bodies))
    sender.join(5)
    assert [f[0] for f in protocol.frames] == bodies


def test_a_frame_past_the_direct_read_limit_is_read_into_a_memory_map(pair) -> None:
    """Its buffer is a memory map, whose pages exist only once written: a client declaring a huge frame
    and sending little of it holds no more of the server's memory than it sent."""
    protocol, transport, ours, peer = pair
    huge = b"h" * (DIRECT_READ_MAX + 1)
    sender = send_in_thread(peer, frame(huge) + frame(b"next"))
    read_until(protocol, transport, ours, 2)
    sender.join(5)
    assert [f[0] for f in protocol.frames] == [huge, b"next"]
    assert protocol.frames[0][1:] == (mmap.mmap, True)


def test_a_trickled_huge_frame_holds_only_what_was_sent_and_nothing_once_closed(pair) -> None:
    protocol, transport, ours, peer = pair
    announced, sent = 96 * MIB, 4 * MIB
    me = psutil.Process()
    before = me.memory_info().rss
    sender = send_in_thread(peer, announced.to_bytes(4, "big") + b"t" * sent)
    while protocol._frame is None or protocol._frame_fill < 4 + sent:  # noqa: SLF001 - what it holds
        assert select.select([ours], [], [], 5)[0], "nothing more arrived"
        assert transport.doRead() is None
    sender.join(5)
    # 96 MiB announced, 4 MiB sent: the server holds about what was sent.
    assert me.memory_info().rss - before < 48 * MIB
    protocol.connectionLost()
    assert protocol._frame is None  # noqa: SLF001 - the buffer went with the connection


class Pooled(Recorder):
    def __init__(self, guards: ConnectionGuards) -> None:
        BudgetedReceiver.__init__(self, 64 << 20, guards=guards)
        self.frames = []


class TcpStringTransport(StringTransport):
    """A transport as TLS gives the listener one: bytes arrive through ``dataReceived``."""


classImplements(TcpStringTransport, ITCPTransport)


def test_frames_arriving_together_wait_for_the_memory_pool_and_go_on_once_it_has_room() -> None:
    """Over TLS (bytes through ``dataReceived``): a second connection whose frame does not fit beside
    the first one's stops reading until the first frame is whole, then reads its own."""
    guards = ConnectionGuards(ConnectionLimits(queued_max_request_bytes=3 * MIB, connections_max_idle_ms=0))
    first, second = Pooled(guards), Pooled(guards)
    transports = [TcpStringTransport(), TcpStringTransport()]
    for protocol, transport in zip((first, second), transports, strict=True):
        protocol.makeConnection(transport)
    body = bytes(range(256)) * (8 * 1024)  # 2 MiB: past DIRECT_READ_MIN
    data = frame(body)
    first.dataReceived(data[:100_000])
    assert guards.pool.reserved == len(body) + 4
    second.dataReceived(data[:100_000])
    assert second.paused and second.paused_by() == "memory" and transports[1].producerState == "paused"
    first.dataReceived(data[100_000:])
    # The first frame is whole: its bytes go to the waiting connection at once, which reads again after
    # this turn (reading may return more bytes to the pool, which is busy returning these).
    assert [f[0] for f in first.frames] == [body] and guards.pool.reserved == len(body) + 4
    assert second.paused
    reactor.runUntilCurrent()
    assert not second.paused and transports[1].producerState == "producing"
    second.dataReceived(data[100_000:])
    assert [f[0] for f in second.frames] == [body] and guards.pool.reserved == 0


def test_a_connection_lost_mid_frame_returns_its_share_of_the_pool() -> None:
    guards = ConnectionGuards(ConnectionLimits(queued_max_request_bytes=3 * MIB, connections_max_idle_ms=0))
    protocol = Pooled(guards)
    protocol.makeConnection(TcpStringTransport())
    protocol.dataReceived(frame(b"x" * (2 * MIB))[:1000])
    assert guards.pool.reserved == 2 * MIB + 4
    protocol.connectionLost()
    assert guards.pool.reserved == 0


def test_a_peer_that_closes_inside_a_large_frame_ends_the_connection(pair) -> None:
    protocol, transport, ours, peer = pair
    body = b"x" * (4 * DIRECT_READ_MIN)
    peer.sendall(frame(body)[: DIRECT_READ_MIN])
    peer.shutdown(socket.SHUT_WR)
    results = []
    while not results or results[-1] is None:
        select.select([ours], [], [], 5)
        results.append(transport.doRead())
    assert results[-1] is main.CONNECTION_DONE
    assert protocol.frames == []  # the partial frame is never handed over
