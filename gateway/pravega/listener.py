"""The Pravega controller listener: grpcio's server, on threads of its own, serving
``PravegaControllerService``.

grpcio runs its own event loop and calls each method on a thread of its pool, so nothing here touches
the Twisted reactor, and a slow controller call (table-segment I/O) holds one of these threads, never a
listener of the reactor's.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc

from millrace.gateway.pravega.controller_service import Address, PravegaControllerService
from millrace.gateway.pravega.proto import controller_pb2_grpc as pb_grpc

# Threads answering calls at once: the controller blocks on table I/O, so a few let slow calls overlap
# without competing with the native listener's worker pool for the store.
WORKERS = 8


def _bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class PravegaControllerListener:
    """Bound at construction (``port`` is the bound one, 0 picks a free one), serving from ``start``
    until ``stop``. ``service(bound_port)`` makes the service, told the port it is reached on."""

    def __init__(self, host: str, port: int, service: Callable[[int], PravegaControllerService]) -> None:
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="pravega-controller")
        # grpc's default SO_REUSEPORT would let a second server bind a port already served, and share
        # its clients: a port in use must fail here, as every other listener's does.
        self._server = grpc.server(self._pool, options=[("grpc.so_reuseport", 0)])
        try:
            bound = self._server.add_insecure_port(_bind_address(host, port))
        except RuntimeError as exc:  # grpcio raises where older versions answered 0
            self._pool.shutdown(wait=False)
            raise OSError(f"cannot bind the Pravega controller listener to {_bind_address(host, port)}: {exc}") from None
        if bound == 0:
            self._pool.shutdown(wait=False)
            raise OSError(f"cannot bind the Pravega controller listener to {_bind_address(host, port)}")
        self.host = host
        self.port = bound
        pb_grpc.add_ControllerServiceServicer_to_server(service(bound), self._server)

    @property
    def address(self) -> Address:
        return self.host, self.port

    def start(self) -> None:
        self._server.start()

    def stop(self, grace_seconds: float = 5.0) -> None:
        """Refuse new calls, let those under way finish for ``grace_seconds``, then cancel the rest and
        wait for the server's threads."""
        self._server.stop(grace_seconds).wait()
        self._pool.shutdown(wait=True)
