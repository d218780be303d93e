"""TLS on the link between a node and ZooKeeper (ZooKeeper's ``secureClientPort``).

Configured per node with ``millrace serve --zookeeper-tls-truststore FILE`` (PEM: the certificate of the
CA that signed ZooKeeper's server certificate; giving it turns TLS on) and, optionally,
``--zookeeper-tls-keystore FILE`` (PEM: this node's certificate chain and private key, presented when
ZooKeeper asks for a client certificate, which a TLS ZooKeeper does by default: ``ssl.clientAuth=need``).
Named and shaped like the peer listener's ``--peer-tls-*`` flags (store/cluster/peer_tls.py) and holding
the same kind of files, so a cluster made by ``cluster keys``/``cluster up --secure`` gives each node its
own certificate and the cluster CA for both links; they are flags of their own because ZooKeeper is often
run by someone else, with a CA of its own.

The ZooKeeper's certificate is checked against the trust store's CA only (never the system's CAs) *and*
must name the host the connect string dials (an IP address SAN for ``127.0.0.1:2281``), as ZooKeeper's
own Java client checks by default (``zookeeper.ssl.hostnameVerification``). Unlike the peer links, where
the cluster CA is the membership and any node's certificate will do, ZooKeeper's trust store may well be
a CA that signs more than one ZooKeeper. TLS 1.2 at least.

kazoo's own ``use_ssl`` cannot be limited to one CA (it always loads the system's CAs too), so the socket
is made here: ``tls_handler`` is a kazoo handler whose connections are plain TCP wrapped in this
module's ``ssl.SSLContext``. The digest identity (zk_auth.py) and the ACLs are unchanged by TLS: TLS keeps
the link private and the ZooKeeper genuine, the digest says who may change the cluster's znodes.
"""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass
from typing import Any

from kazoo.handlers import utils
from kazoo.handlers.threading import SequentialThreadingHandler

from millrace.store.cluster.tls_context import pem_client_context


class ZooKeeperTlsError(ValueError):
    """ZooKeeper TLS key material that is missing or does not load (never showing a key)."""


@dataclass(frozen=True)
class ZooKeeperTls:
    """The files: ``truststore`` (the CA of ZooKeeper's certificate), ``keystore`` (this node's certificate
    chain and private key, or None to present none)."""

    truststore: str
    keystore: str | None = None

    @classmethod
    def from_flags(cls, keystore: str | None, truststore: str | None) -> ZooKeeperTls | None:
        """None without either flag; ZooKeeperTlsError for a key store without a trust store (TLS is turned
        on by the trust store: a link whose server is not checked is no secured link) or a file that is
        unreadable or does not load."""
        if not keystore and not truststore:
            return None
        if not truststore:
            raise ZooKeeperTlsError("--zookeeper-tls-keystore needs --zookeeper-tls-truststore (the CA that "
                                    "signed ZooKeeper's certificate)")
        for path, what in ((truststore, "--zookeeper-tls-truststore"), (keystore, "--zookeeper-tls-keystore")):
            if path and not os.access(path, os.R_OK):
                raise ZooKeeperTlsError(f"{what} {path}: not a readable file")
        tls = cls(os.path.abspath(truststore), os.path.abspath(keystore) if keystore else None)
        tls.context()  # loads, or fails now rather than at every attempt to reach ZooKeeper
        return tls

    def context(self) -> ssl.SSLContext:
        """How a node dials ZooKeeper: TLS 1.2 at least, ZooKeeper's certificate checked against the trust
        store's CA only and against the host dialled, this node's certificate presented if it has one."""
        return pem_client_context(self.truststore, self.keystore, check_hostname=True, error=ZooKeeperTlsError,
                                  truststore_flag="--zookeeper-tls-truststore",
                                  keystore_flag="--zookeeper-tls-keystore")

    def handler(self) -> SequentialThreadingHandler:
        """A kazoo handler (``KazooClient(handler=...)``) whose every connection is this TLS."""
        return _TlsHandler(self.context())


class _TlsHandler(SequentialThreadingHandler):
    """kazoo's threading handler with TLS of our own: a TCP connection (kazoo's, with its timeout and socket
    options), then the handshake with ``context`` before kazoo sends a byte; a failed handshake (an
    ``ssl.SSLError``, an ``OSError``) is to kazoo a dropped connection, tried again like any other.
    kazoo's own TLS arguments (``use_ssl``, ``ca``, ``certfile``...) are ignored."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self._context = context

    def create_connection(self, address: tuple[str, int], hostname: str | None = None,
                          timeout: float | None = None, **_kazoo_tls: Any) -> ssl.SSLSocket:
        sock = utils.create_tcp_connection(socket, address, hostname=hostname, timeout=timeout)
        try:
            # server_hostname: the connect string's host (kazoo's ``hostname``), checked against the certificate.
            return self._context.wrap_socket(sock, server_hostname=hostname or address[0])
        except BaseException:
            sock.close()
            raise
