"""The key material of a secured cluster, made in one place: ``millrace cluster keys`` for a real
deployment, and ``millrace cluster up --secure`` for a local one.

    DIR/                          mode 0700
      tls/ca.pem                  the cluster CA's certificate: every node's --peer-tls-truststore, and
                                  the Kafka listeners' ssl.truststore.location (clients trust it too)
      tls/ca.key                  the CA's private key (0600): only to sign more nodes; keep it offline
      tls/node-<ID>.pem           node ID's private key and certificate chain (0600), for the names and
                                  addresses it is reached at: its --peer-tls-keystore, ssl.keystore.location
                                  and, when ZooKeeper is TLS, its --zookeeper-tls-keystore
      tls/zookeeper.pem           ZooKeeper's private key and certificate chain (0600), for the names and
                                  addresses it is reached at (only when asked for): its ssl.keyStore.location
                                  on the secureClientPort; the nodes' --zookeeper-tls-truststore is tls/ca.pem
      curve/logd/, curve/nodes/   the log replica links' CURVE key pairs (store/durablelog/curve.py)
      zookeeper.credentials       the nodes' ZooKeeper digest identity (0600): --zookeeper-credentials

Certificates are made with the ``cryptography`` library: an EC P-256 CA valid ten years, node
certificates valid two years with serverAuth and clientAuth (a node is a TLS server to its peers and
Kafka clients, a TLS client to its peers' listeners and to ZooKeeper). Nothing here is ever printed; the secret
files are created readable by their owner only and never overwritten.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from millrace.store.cluster.zk_auth import ZooKeeperCredentials
from millrace.store.durablelog.curve import create_cluster_keys

ZOOKEEPER_USER = "millrace"


def password() -> str:
    """A random password (192 bits, URL-safe text)."""
    return secrets.token_urlsafe(24)


def _write(path: Path, data: bytes, secret: bool) -> None:
    """Create ``path`` (never over an existing file); secret files are the owner's only from the start."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if secret else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_ca(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Millrace"),
                         x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return certificate, key


def issue(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, common_name: str,
          names: list[str]) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A node certificate for ``names`` (host names and IP addresses), for TLS servers and clients."""
    if not names:
        raise ValueError(f"{common_name}: a node certificate needs at least one host name or address")
    key = ec.generate_private_key(ec.SECP256R1())
    alternatives: list[x509.GeneralName] = []
    for name in names:
        try:
            alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternatives.append(x509.DNSName(name))
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Millrace"),
                                 x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=730))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return certificate, key


@dataclass(frozen=True)
class ClusterKeys:
    """Where ``create_cluster_secrets`` put everything (paths only: no secret is held here)."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "tls" / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.directory / "tls" / "ca.key"

    def node_keystore(self, node_id: str) -> Path:
        return self.directory / "tls" / f"node-{node_id}.pem"

    @property
    def zookeeper_keystore(self) -> Path:
        return self.directory / "tls" / "zookeeper.pem"

    @property
    def zookeeper_credentials(self) -> Path:
        return self.directory / "zookeeper.credentials"

    @property
    def logd_secret_key(self) -> Path:
        return self.directory / "curve" / "logd" / "logd.key_secret"

    @property
    def logd_public_key(self) -> Path:
        return self.directory / "curve" / "logd" / "logd.key"

    @property
    def node_secret_key(self) -> Path:
        return self.directory / "curve" / "nodes" / "node.key_secret"

    @property
    def node_authorized_keys(self) -> Path:
        return self.directory / "curve" / "nodes"

    def node_flags(self, node_id: str, zookeeper_tls: bool = False) -> list[str]:
        """``millrace serve`` flags of node ``node_id`` (besides the Kafka listeners' properties); with
        ``zookeeper_tls`` TLS to ZooKeeper too (its certificate the cluster CA's, the node's presented)."""
        tls = ["--zookeeper-tls-keystore", str(self.node_keystore(node_id)),
               "--zookeeper-tls-truststore", str(self.ca)] if zookeeper_tls else []
        return ["--zookeeper-credentials", str(self.zookeeper_credentials), *tls,
                "--peer-tls-keystore", str(self.node_keystore(node_id)), "--peer-tls-truststore", str(self.ca),
                "--log-curve-secret-key", str(self.node_secret_key),
                "--log-curve-server-key", str(self.logd_public_key)]

    def zookeeper_tls_properties(self) -> list[str]:
        """What a ZooKeeper (3.5.7 or later: PEM stores) needs in its zoo.cfg for TLS clients with this
        cluster's keys, besides ``secureClientPort``: Netty (the NIO factory has no TLS), its certificate,
        and client certificates of the cluster CA required."""
        return ["serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                f"ssl.keyStore.location={self.zookeeper_keystore}", "ssl.keyStore.type=PEM",
                f"ssl.trustStore.location={self.ca}", "ssl.trustStore.type=PEM", "ssl.clientAuth=need"]

    def logd_flags(self) -> list[str]:
        """``millrace logd`` flags."""
        return ["--curve-secret-key", str(self.logd_secret_key),
                "--curve-authorized-keys", str(self.node_authorized_keys)]


def create_cluster_secrets(directory: str | os.PathLike[str], nodes: dict[str, list[str]],
                           zookeeper_user: str = ZOOKEEPER_USER,
                           zookeeper_names: list[str] | None = None) -> ClusterKeys:
    """Make the cluster CA, a certificate for each node (node id -> its host names and addresses), the
    CURVE key pairs and the ZooKeeper identity under ``directory`` (which must not hold them already);
    with ``zookeeper_names`` (ZooKeeper's host names and addresses) a certificate for ZooKeeper's TLS port."""
    keys = ClusterKeys(Path(directory))
    if keys.ca_key.exists() or keys.zookeeper_credentials.exists():
        raise FileExistsError(f"{directory} holds a cluster's keys already: not overwriting them")
    (keys.directory / "tls").mkdir(parents=True, exist_ok=True)
    os.chmod(keys.directory, 0o700)
    ca, ca_key = make_ca("Millrace cluster CA")
    _write(keys.ca_key, _key_pem(ca_key), secret=True)
    _write(keys.ca, ca.public_bytes(serialization.Encoding.PEM), secret=False)
    for node_id, names in nodes.items():
        certificate, key = issue(ca, ca_key, f"node-{node_id}", names)
        chain = certificate.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM)
        _write(keys.node_keystore(node_id), _key_pem(key) + chain, secret=True)
    if zookeeper_names:
        certificate, key = issue(ca, ca_key, "zookeeper", zookeeper_names)
        chain = certificate.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM)
        _write(keys.zookeeper_keystore, _key_pem(key) + chain, secret=True)
    create_cluster_keys(keys.directory / "curve")
    ZooKeeperCredentials(zookeeper_user, password()).write(keys.zookeeper_credentials)
    return keys
