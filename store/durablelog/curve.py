"""ZeroMQ CURVE on the log replica links: encryption and authentication between the nodes (clients) and
the log replicas (``millrace logd``, servers), as BookKeeper secures its bookies' links.

A cluster has two key pairs, kept as ZeroMQ certificate files (``zmq.auth``'s format: ``NAME.key``
holds the public key, ``NAME.key_secret`` both): the replicas' (``logd``), whose public key every node
checks the replica it talks to against, and the nodes' (``node``), whose public key is the one a replica
lets in (its ZAP handler accepts the public keys in an authorized-keys directory, nothing else). A
process without the nodes' secret key cannot complete the handshake, so it can neither append, fence,
read nor truncate; one without the replicas' secret key cannot pose as a replica.

``create_cluster_keys`` makes the layout ``millrace logd``/``serve`` read (``--curve-*`` flags):

    DIR/logd/logd.key, DIR/logd/logd.key_secret     the replicas' pair (logd: --curve-secret-key)
    DIR/nodes/node.key, DIR/nodes/node.key_secret   the nodes' pair (serve: --log-curve-secret-key)

with ``DIR/nodes`` as the replicas' authorized keys (``--curve-authorized-keys``) and ``DIR/logd/logd.key``
as what the nodes trust (``--log-curve-server-key``). Secret files are readable by their owner only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

REPLICA_NAME, NODE_NAME = "logd", "node"


class CurveKeyError(ValueError):
    """A key file that is missing or holds no CURVE key (never showing a secret)."""


def _load(path: str | os.PathLike[str], want_secret: bool) -> tuple[bytes, bytes | None]:
    try:
        public, secret = zmq.auth.load_certificate(os.fspath(path))
    except (OSError, ValueError) as e:
        raise CurveKeyError(f"cannot read a CURVE certificate from {path}: {e}") from None
    if want_secret and not secret:
        raise CurveKeyError(f"{path} holds no secret key (the NAME.key_secret file is needed)")
    return public, secret


@dataclass(frozen=True)
class CurveClientKeys:
    """A node's side: its key pair, and the replicas' public key it insists on."""

    public: bytes
    secret: bytes = field(repr=False)
    server_public: bytes

    @classmethod
    def load(cls, secret_file: str | os.PathLike[str], server_public_file: str | os.PathLike[str]) -> CurveClientKeys:
        public, secret = _load(secret_file, want_secret=True)
        server_public, _ = _load(server_public_file, want_secret=False)
        assert secret is not None
        return cls(public, secret, server_public)

    def apply(self, socket: zmq.Socket[Any]) -> None:
        """Before ``connect``: the socket speaks CURVE as a client of the replicas."""
        socket.curve_publickey = self.public
        socket.curve_secretkey = self.secret
        socket.curve_serverkey = self.server_public


@dataclass(frozen=True)
class CurveServerKeys:
    """A replica's side: its key pair and the directory of the public keys it lets in."""

    public: bytes
    secret: bytes = field(repr=False)
    authorized_keys: str

    @classmethod
    def load(cls, secret_file: str | os.PathLike[str], authorized_keys: str | os.PathLike[str]) -> CurveServerKeys:
        public, secret = _load(secret_file, want_secret=True)
        assert secret is not None
        directory = os.fspath(authorized_keys)
        if not os.path.isdir(directory) or not any(Path(directory).glob("*.key")):
            raise CurveKeyError(f"{directory}: no public key (NAME.key) to let in")
        return cls(public, secret, directory)

    def serve(self, context: zmq.Context[Any], socket: zmq.Socket[Any]) -> ThreadAuthenticator:
        """Before ``bind``: the socket speaks CURVE as a server, and a ZAP handler (a thread, returned: stop
        it when the socket closes) lets in only the authorized public keys."""
        authenticator = ThreadAuthenticator(context)
        authenticator.start()
        authenticator.configure_curve(domain="*", location=self.authorized_keys)
        socket.curve_server = True
        socket.curve_publickey = self.public
        socket.curve_secretkey = self.secret
        return authenticator


def create_cluster_keys(directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Make the replicas' and the nodes' key pairs under ``directory`` (refusing to overwrite any); returns
    the paths the flags take."""
    root = Path(directory)
    made: dict[str, Path] = {}
    for name, sub in ((REPLICA_NAME, "logd"), (NODE_NAME, "nodes")):
        place = root / sub
        place.mkdir(parents=True, exist_ok=True)
        if (place / f"{name}.key_secret").exists():
            raise FileExistsError(f"{place / f'{name}.key_secret'} exists: not overwriting a cluster's keys")
        public_file, secret_file = zmq.auth.create_certificates(str(place), name)
        os.chmod(secret_file, 0o600)
        made[f"{name}_public"], made[f"{name}_secret"] = Path(public_file), Path(secret_file)
    return made
