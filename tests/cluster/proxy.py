"""A TCP proxy for fault tests: a network link that can be cut and healed without root (no iptables).

``TcpProxy(target)`` listens on a free 127.0.0.1 port and forwards every connection to ``target``, one
thread per direction. ``cut()`` makes the link behave as a dropped network: every byte either way is
read and thrown away, a close on one side is not passed to the other, and new connections are accepted
but never reach the target. Nobody sees an error; each side only stops hearing from the other and must
notice by its own timeouts, as with a partition (a refused or reset connection is noticed at once, which
a real partition never gives). ``cut(reset=True)`` is that other kind: every connection closed and new
ones closed on accept. ``heal()`` forwards new connections again; connections that lived through a cut
are closed then (bytes were dropped from their streams, so neither end could go on with them; a real
peer answers a late segment of a connection it has given up with a reset).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Self


class _Link:
    """One accepted connection and its connection to the target (None: accepted during a cut)."""

    def __init__(self, client: socket.socket, upstream: socket.socket | None) -> None:
        self.client = client
        self.upstream = upstream
        self.cut = upstream is None

    def close(self) -> None:
        for s in (self.client, self.upstream):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target`` until cut; ``address`` is ``host:port`` for a command line."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()  # guards _links, _cut, _reset
        self._links: list[_Link] = []
        self._cut = False
        self._reset = False
        self._closed = False
        self.accepted = 0  # connections accepted, cut or not (a test can see a client trying again)
        self._acceptor = threading.Thread(target=self._accept, name=f"proxy:{self.port}", daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        with self._lock:
            return self._cut

    def cut(self, reset: bool = False) -> None:
        """Drop everything from now on (``reset``: close every connection, and each new one at once)."""
        with self._lock:
            self._cut, self._reset = True, reset
            links = list(self._links)
            for link in links:
                link.cut = True
            if reset:
                self._links.clear()
        if reset:
            for link in links:
                link.close()

    def heal(self) -> None:
        """Forward new connections again; close those a cut broke."""
        with self._lock:
            self._cut = self._reset = False
            broken = [link for link in self._links if link.cut]
            self._links = [link for link in self._links if not link.cut]
        for link in broken:
            link.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            links, self._links = self._links, []
        with contextlib.suppress(OSError):
            self._listener.close()
        for link in links:
            link.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- threads ------------------------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                self.accepted += 1
                closed, cut, reset = self._closed, self._cut, self._reset
            if closed or reset:
                client.close()
                continue
            upstream = None
            if not cut:
                try:
                    upstream = socket.create_connection(self.target, timeout=5)
                    upstream.settimeout(None)
                except OSError:
                    client.close()  # the target is down: the client sees what it would see directly
                    continue
            link = _Link(client, upstream)
            with self._lock:
                self._links.append(link)
            threading.Thread(target=self._pump, args=(link, client, upstream), daemon=True).start()
            if upstream is not None:
                threading.Thread(target=self._pump, args=(link, upstream, client), daemon=True).start()

    def _pump(self, link: _Link, source: socket.socket, sink: socket.socket | None) -> None:
        """Copy ``source`` to ``sink`` while the link is whole; during a cut, read and drop."""
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            if link.cut or sink is None:
                continue
            try:
                sink.sendall(data)
            except OSError:
                break
        if link.cut:
            # A close during a cut reaches nobody; the other side finds out when the link heals.
            with contextlib.suppress(OSError):
                source.close()
            return
        with self._lock:
            if link in self._links:
                self._links.remove(link)
        link.close()
