"""How a listener connection writes (``gateway.framing.BudgetedReceiver.send``), on a real socket pair
with Twisted's TCP transport: a response completed outside a read goes to the socket at once when the
transport holds nothing; responses written during a read, and anything after bytes the transport still
holds, go through the transport, in order."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from twisted.internet import reactor, tcp

from millrace.gateway.shared.framing import BudgetedReceiver


class Echo(BudgetedReceiver):
    """Answers each frame with ``r:`` and the frame, as a handler answering at once would."""

    def stringReceived(self, frame: memoryview) -> None:  # noqa: N802 - Twisted's name
        self.send(b"r:" + bytes(frame))
        self.answered(len(frame))


def frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


@pytest.fixture
def pair() -> Iterator[tuple[Echo, tcp.Connection, socket.socket]]:
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    peer.settimeout(5)
    protocol = Echo(1 << 20)
    transport = tcp.Connection(ours, protocol, reactor)
    transport.connected = True
    protocol.makeConnection(transport)
    try:
        yield protocol, transport, peer
    finally:
        if transport in reactor.getWriters():
            reactor.removeWriter(transport)
        ours.close()
        peer.close()


def received(peer: socket.socket) -> bytes:
    peer.setblocking(False)
    try:
        return peer.recv(1 << 16)
    except BlockingIOError:
        return b""
    finally:
        peer.settimeout(5)


def test_outside_a_read_a_response_goes_to_the_socket_at_once(pair: tuple[Echo, tcp.Connection, socket.socket]) -> None:
    protocol, transport, peer = pair
    protocol.send(b"done")
    assert received(peer) == b"done"
    assert transport._tempDataLen == 0 and transport not in reactor.getWriters()  # noqa: SLF001


def test_responses_during_a_read_and_after_held_bytes_keep_their_order(
        pair: tuple[Echo, tcp.Connection, socket.socket]) -> None:
    protocol, transport, peer = pair
    protocol.dataReceived(frame(b"1") + frame(b"2"))  # two pipelined requests answered during the read
    assert received(peer) == b""  # held by the transport until the reactor finds the socket writable
    assert transport in reactor.getWriters()
    protocol.send(b"late")  # completed later, while the transport still holds those: queued behind them
    assert received(peer) == b""
    transport.doWrite()  # the reactor's turn
    assert received(peer) == b"r:1r:2late"
    protocol.send(b"now")
    assert received(peer) == b"now"
