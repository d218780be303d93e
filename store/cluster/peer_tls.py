"""Mutual TLS between a cluster's nodes on the ``peer`` listener (``LocalSegments``, served to other nodes).

A secured cluster has a CA of its own, the *cluster CA*, that signs every node's certificate and nothing
else. The peer listener asks each connecting node for its certificate and lets in only one the cluster
CA signed; a node dialling a peer checks the listener's certificate against the same CA, so a process
without a certificate of the cluster can neither call a node's containers nor pose as a node serving
them. What a certificate names is not checked against the address dialled (any certificate of the
cluster CA is a node of the cluster: the CA is the membership), which is why it must be a CA kept for
this one purpose. TLS also keeps the records between the nodes private and unaltered.

Configured per node with ``millrace serve --peer-tls-keystore FILE`` (PEM: the node's certificate chain
and its private key, as Kafka's PEM key stores hold them) and ``--peer-tls-truststore FILE`` (PEM: the
cluster CA's certificate); both or neither. Without them the peer listener is plain TCP, as before.

The listener's side is Twisted's TLS (``gateway/security/tls.ServerTls`` with client authentication
required); this module makes the dialling side's ``ssl.SSLContext`` for ``NodeConnection``.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass

from millrace.store.cluster.tls_context import pem_client_context


class PeerTlsError(ValueError):
    """Peer TLS key material that is missing or does not load (never showing a key)."""


@dataclass(frozen=True)
class PeerTls:
    """The files: ``keystore`` (this node's certificate chain and private key), ``truststore`` (the cluster CA)."""

    keystore: str
    truststore: str

    @classmethod
    def from_flags(cls, keystore: str | None, truststore: str | None) -> PeerTls | None:
        """None without either flag; PeerTlsError when only one is given or a file is unreadable."""
        if not keystore and not truststore:
            return None
        if not (keystore and truststore):
            raise PeerTlsError("--peer-tls-keystore and --peer-tls-truststore go together")
        for path, what in ((keystore, "--peer-tls-keystore"), (truststore, "--peer-tls-truststore")):
            if not os.access(path, os.R_OK):
                raise PeerTlsError(f"{what} {path}: not a readable file")
        tls = cls(os.path.abspath(keystore), os.path.abspath(truststore))
        tls.client_context()  # loads, or fails now rather than at the first forwarded request
        return tls

    def client_context(self) -> ssl.SSLContext:
        """How this node dials a peer listener: TLS 1.2 at least, the peer's certificate checked against
        the cluster CA only (not the system's CAs), this node's certificate presented."""
        # The cluster CA is the membership: names are not checked (see the module's docstring).
        return pem_client_context(self.truststore, self.keystore, check_hostname=False, error=PeerTlsError,
                                  truststore_flag="--peer-tls-truststore", keystore_flag="--peer-tls-keystore")
