"""TLS between the nodes and ZooKeeper, against a real ZooKeeper (Debian's) serving a TLS port only, with a
certificate of a cluster CA and client certificates of that CA required (as ``cluster up --secure`` runs
it): ``connect(..., tls=ZooKeeperTls(...))`` gets a session and works, with the digest identity on top;
a plain client, a TLS client without a certificate, one whose certificate another CA signed, and one
that trusts another CA get none; and a node checks the certificate names the host it dialled."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from millrace.gateway.commands.cluster_keys import ClusterKeys, create_cluster_secrets, issue, make_ca
from millrace.gateway.commands.local_cluster import zookeeper_tls_missing
from millrace.store.cluster.layout import ClusterPaths
from millrace.store.cluster.member import connect, ensure_cluster
from millrace.store.cluster.zk_auth import ZooKeeperCredentials
from millrace.store.cluster.zk_tls import ZooKeeperTls
from tests.cluster.zookeeper_process import (
    ZooKeeperProcess,
    four_letter_word,
    tls_context,
    zookeeper_available,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> ClusterKeys:
    return create_cluster_secrets(tmp_path_factory.mktemp("zk-tls-keys"), {"1": ["127.0.0.1"]},
                                  zookeeper_names=["127.0.0.1"])


@pytest.fixture(scope="module")
def tls_zookeeper(tmp_path_factory: pytest.TempPathFactory, keys: ClusterKeys) -> Iterator[ZooKeeperProcess]:
    missing = zookeeper_available() or zookeeper_tls_missing()
    if missing:
        pytest.skip(missing)
    server = ZooKeeperProcess(tmp_path_factory.mktemp("zk-tls"), tls=keys).start()
    try:
        yield server
    finally:
        server.stop()


def _foreign(home: Path) -> Path:
    """A key store (and its CA certificate next to it, ``.ca.pem``) for 127.0.0.1 from another CA."""
    from cryptography.hazmat.primitives import serialization

    ca, ca_key = make_ca("Not the cluster's CA")
    certificate, key = issue(ca, ca_key, "node-1", ["127.0.0.1"])
    path = home / "foreign.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())
                     + certificate.public_bytes(serialization.Encoding.PEM))
    (home / "foreign.ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return path


def _gets_a_session(hosts: str, tls: ZooKeeperTls | None = None, within: float = 3.0, **kazoo: object) -> bool:
    """Whether a client gets a session ``within`` seconds (it is refused every time it tries otherwise)."""
    if tls is not None:
        kazoo |= {"handler": tls.handler()}
    client = KazooClient(hosts=hosts, timeout=4.0, **kazoo)  # type: ignore[arg-type]
    try:
        client.start(timeout=within)
    except KazooTimeoutError:
        return False
    finally:
        client.stop()
        client.close()
    return True


def test_a_node_with_the_tls_flags_works_over_the_tls_port(tls_zookeeper: ZooKeeperProcess, keys: ClusterKeys) -> None:
    tls = ZooKeeperTls.from_flags(str(keys.node_keystore("1")), str(keys.ca))
    credentials = ZooKeeperCredentials.load(keys.zookeeper_credentials)
    client = connect(tls_zookeeper.hosts, session_timeout=4.0, connect_timeout=15, credentials=credentials, tls=tls)
    try:
        assert isinstance(client._connection._socket, ssl.SSLSocket)  # noqa: SLF001 - the session's link is TLS
        paths = ClusterPaths("/tls-cluster")
        ensure_cluster(client, paths, 4, credentials)
        assert [a.id.id for a in client.get_acls(paths.config)[0]] == [credentials.identity]
        assert client.get(paths.config)[0] == b'{"containers": 4}'
    finally:
        client.stop()
        client.close()
    assert four_letter_word(tls_zookeeper.port, b"ruok", tls=tls_context(keys)) == b"imok"


def test_no_plain_client_nor_a_stranger_gets_a_session(tls_zookeeper: ZooKeeperProcess, keys: ClusterKeys,
                                                       tmp_path: Path) -> None:
    hosts = tls_zookeeper.hosts
    foreign = _foreign(tmp_path)
    assert not _gets_a_session(hosts)  # plain TCP: the port speaks TLS only
    with pytest.raises(OSError):  # nor answers a plain four-letter word
        four_letter_word(tls_zookeeper.port, b"ruok")
    assert not _gets_a_session(hosts, ZooKeeperTls(str(keys.ca)))  # no client certificate
    assert not _gets_a_session(hosts, ZooKeeperTls(str(keys.ca), str(foreign)))  # another CA's certificate
    # A node that trusts another CA never talks to this ZooKeeper (kazoo's own TLS, which also trusts the
    # system's CAs, is refused likewise without a certificate of the cluster CA).
    assert not _gets_a_session(hosts, ZooKeeperTls(str(tmp_path / "foreign.ca.pem"), str(keys.node_keystore("1"))))
    assert not _gets_a_session(hosts, use_ssl=True, ca=str(keys.ca))
    # The node's own certificate and the cluster CA: a session (so the refusals above are TLS's doing).
    assert _gets_a_session(hosts, ZooKeeperTls(str(keys.ca), str(keys.node_keystore("1"))), within=15)


def test_zookeepers_certificate_must_name_the_host_dialled(tls_zookeeper: ZooKeeperProcess, keys: ClusterKeys) -> None:
    context = ZooKeeperTls(str(keys.ca), str(keys.node_keystore("1"))).context()
    for name, accepted in (("127.0.0.1", True), ("zookeeper.example.com", False)):
        with socket.create_connection(("127.0.0.1", tls_zookeeper.port), timeout=5) as plain:
            try:
                context.wrap_socket(plain, server_hostname=name).close()
                verified = True
            except ssl.SSLCertVerificationError:
                verified = False
        assert verified is accepted, name
