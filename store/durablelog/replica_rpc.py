"""Blocking calls to log replicas over ZeroMQ, for one thread (opening, reading, re-replicating).

ZeroMQ sockets belong to the thread that uses them, so every thread that talks to replicas owns its
own ``ReplicaRpc``. ``call`` sends one request to each named replica and waits until every one has
answered or the timeout passed; a replica that did not answer is simply absent from the result.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import zmq

from millrace.store.durablelog.curve import CurveClientKeys
from millrace.store.durablelog.zmq_frames import recv_frames, send_frames
from millrace.store.logd import wire

Reply = tuple[dict[str, Any], list[bytes]]


def connect_dealer(context: zmq.Context[Any], address: str, curve: CurveClientKeys | None = None) -> zmq.Socket[Any]:
    """A DEALER socket to ``host:port`` that never blocks a sender and drops its queue on close; with
    ``curve``, encrypted and authenticated (a replica without the expected key is never talked to)."""
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    if curve is not None:
        curve.apply(socket)
    socket.connect(f"tcp://{address}")
    return socket


class ReplicaRpc:
    def __init__(self, context: zmq.Context[Any] | None = None, curve: CurveClientKeys | None = None) -> None:
        self._context = context or zmq.Context.instance()
        self._curve = curve
        self._sockets: dict[str, zmq.Socket[Any]] = {}
        self._ids = itertools.count(1)

    def _socket(self, address: str) -> zmq.Socket[Any]:
        socket = self._sockets.get(address)
        if socket is None:
            socket = self._sockets[address] = connect_dealer(self._context, address, self._curve)
        return socket

    def call(self, requests: dict[str, tuple[dict[str, Any], list[bytes]]], timeout: float,
             enough: int | None = None, grace: float = 0.0) -> dict[str, Reply]:
        """Send each replica its request; return the replies that arrived. With ``enough``, stop
        waiting ``grace`` seconds after that many replicas answered."""
        waiting: dict[str, int] = {}
        unsent = False  # a replica not connected now: it cannot answer, and the call still lasts its time
        for address, (header, payloads) in requests.items():
            request_id = next(self._ids)
            socket = self._socket(address)
            if send_frames(socket, [wire.encode_header({**header, "id": request_id}), *payloads]):
                waiting[address] = request_id
            else:
                unsent = True
        replies: dict[str, Reply] = {}
        poller = zmq.Poller()
        by_socket = {self._sockets[a]: a for a in waiting}
        for socket in by_socket:
            poller.register(socket, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while waiting or unsent:
            now = time.monotonic()
            if enough is not None and len(replies) >= enough:
                deadline = min(deadline, now + grace)
            if now >= deadline:
                break
            if not by_socket:  # nothing was sent (ZeroMQ's poll of no sockets returns at once)
                time.sleep(deadline - now)
                continue
            for socket, _ in poller.poll(max(1, int((deadline - now) * 1000))):
                address = by_socket[socket]
                frames = recv_frames(socket)  # the poller said a message waits
                header = wire.decode_header(frames[0])
                if waiting.get(address) == header.get("id"):
                    del waiting[address]
                    replies[address] = (header, frames[1:])
                # anything else is a late answer to an earlier call that gave up on it
        for address in waiting:
            # A replica that never answered may answer late; a fresh socket keeps that out of later calls.
            self._sockets.pop(address).close(0)
        return replies

    def call_one(self, address: str, header: dict[str, Any], payloads: list[bytes], timeout: float) -> Reply | None:
        return self.call({address: (header, payloads)}, timeout).get(address)

    def close(self) -> None:
        for socket in self._sockets.values():
            socket.close(0)
        self._sockets.clear()
