"""How a cluster's link security is configured, without processes: the ZooKeeper credentials file, the
peer listener's and ZooKeeper's TLS flags, the key material ``cluster keys``/``up --secure`` make, and the command lines
a secured local cluster gives its processes (paths only, never a secret)."""

from __future__ import annotations

import logging
import os
import ssl
from pathlib import Path

import pytest

from millrace.gateway.commands.cli import main
from millrace.gateway.commands.cluster_cli import node_names
from millrace.gateway.commands.cluster_keys import create_cluster_secrets
from millrace.gateway.commands.local_cluster import ClusterSettings, LocalCluster
from millrace.store.cluster.peer_tls import PeerTls, PeerTlsError
from millrace.store.cluster.zk_auth import ZooKeeperCredentials, ZooKeeperCredentialsError, access_error
from millrace.store.cluster.zk_tls import ZooKeeperTls, ZooKeeperTlsError


def test_credentials_from_username_and_password_lines() -> None:
    credentials = ZooKeeperCredentials.parse("# the nodes' identity\nusername = millrace\n\npassword=s3cret=x\n")
    assert (credentials.username, credentials.password) == ("millrace", "s3cret=x")
    assert credentials.auth_data == [("digest", "millrace:s3cret=x")]
    assert "s3cret" not in repr(credentials)
    [acl] = credentials.acl
    assert (acl.id.scheme, acl.perms) == ("digest", 31) and acl.id.id == credentials.identity
    assert credentials.identity.startswith("millrace:") and "s3cret" not in credentials.identity


def test_credentials_from_a_jaas_files_client_section() -> None:
    jaas = """
    KafkaServer {
      org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="other";
    };
    Client {
      org.apache.zookeeper.server.auth.DigestLoginModule required
      username="zk-user"
      password="pa\\"ss";
    };
    """
    credentials = ZooKeeperCredentials.parse(jaas)
    assert (credentials.username, credentials.password) == ("zk-user", 'pa"ss')


@pytest.mark.parametrize("text, message", [
    ("username=millrace\n", "no password"),
    ("password=x\n", "no username"),
    ("", "no username and no password"),
    ("username millrace\n", "line 1: expected KEY=VALUE"),
    ("username=a:b\npassword=x\n", "no ':'"),
    ("KafkaServer { x required username=\"a\" password=\"b\"; };", "Client"),
])
def test_unusable_credentials_are_refused_without_showing_a_password(text: str, message: str) -> None:
    with pytest.raises(ZooKeeperCredentialsError, match=message) as refused:
        ZooKeeperCredentials.parse(text)
    assert "=x" not in str(refused.value) and '"b"' not in str(refused.value)


def test_a_credentials_file_is_written_for_its_owner_only_and_warned_about_otherwise(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "zk.credentials"
    ZooKeeperCredentials("millrace", "pw").write(path)
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        ZooKeeperCredentials("millrace", "other").write(path)
    with caplog.at_level(logging.WARNING):
        assert ZooKeeperCredentials.load(path).password == "pw"
        assert not caplog.records
        os.chmod(path, 0o644)
        ZooKeeperCredentials.load(path)
    assert "chmod 600" in caplog.text and "pw" not in caplog.text.replace(str(path), "")
    with pytest.raises(ZooKeeperCredentialsError, match="cannot read"):
        ZooKeeperCredentials.load(tmp_path / "missing")


def test_a_refused_node_is_told_what_to_do() -> None:
    assert "has no credentials" in str(access_error("/millrace", None))
    other = str(access_error("/millrace", ZooKeeperCredentials("someone", "secret")))
    assert "'someone' is not the one" in other and "secret" not in other


def test_peer_tls_flags(tmp_path: Path) -> None:
    keys = create_cluster_secrets(tmp_path / "keys", {"1": ["127.0.0.1", "node1.example.com"]})
    assert PeerTls.from_flags(None, None) is None
    with pytest.raises(PeerTlsError, match="go together"):
        PeerTls.from_flags(str(keys.node_keystore("1")), None)
    with pytest.raises(PeerTlsError, match="not a readable file"):
        PeerTls.from_flags(str(tmp_path / "missing.pem"), str(keys.ca))
    tls = PeerTls.from_flags(str(keys.node_keystore("1")), str(keys.ca))
    assert tls is not None
    context = tls.client_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(PeerTlsError, match="--peer-tls-keystore"):  # a CA certificate alone: no key
        PeerTls.from_flags(str(keys.ca), str(keys.ca))


def test_zookeeper_tls_flags(tmp_path: Path) -> None:
    keys = create_cluster_secrets(tmp_path / "keys", {"1": ["127.0.0.1"]})
    assert ZooKeeperTls.from_flags(None, None) is None
    with pytest.raises(ZooKeeperTlsError, match="needs --zookeeper-tls-truststore"):
        ZooKeeperTls.from_flags(str(keys.node_keystore("1")), None)
    with pytest.raises(ZooKeeperTlsError, match="--zookeeper-tls-truststore .*not a readable file"):
        ZooKeeperTls.from_flags(None, str(tmp_path / "missing.pem"))
    with pytest.raises(ZooKeeperTlsError, match="--zookeeper-tls-keystore .*not a readable file"):
        ZooKeeperTls.from_flags(str(tmp_path / "missing.pem"), str(keys.ca))
    with pytest.raises(ZooKeeperTlsError, match="--zookeeper-tls-keystore"):  # a CA certificate alone: no key
        ZooKeeperTls.from_flags(str(keys.ca), str(keys.ca))
    with pytest.raises(ZooKeeperTlsError, match="--zookeeper-tls-truststore .*no CA certificate"):
        ZooKeeperTls.from_flags(None, str(keys.zookeeper_credentials))
    assert ZooKeeperTls.from_flags(None, str(keys.ca)) == ZooKeeperTls(str(keys.ca))  # no client certificate
    tls = ZooKeeperTls.from_flags(str(keys.node_keystore("1")), str(keys.ca))
    assert tls == ZooKeeperTls(str(keys.ca), str(keys.node_keystore("1")))
    context = tls.context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert [c["subject"] for c in context.get_ca_certs()] == [  # the trust store's CA only, no system CA
        ((("organizationName", "Millrace"),), (("commonName", "Millrace cluster CA"),))]


def test_cluster_keys_are_the_owners_and_never_overwritten(tmp_path: Path) -> None:
    from cryptography import x509

    keys = create_cluster_secrets(tmp_path / "keys", {"1": ["127.0.0.1", "localhost"], "2": ["node2.example.com"]})
    assert keys.directory.stat().st_mode & 0o777 == 0o700
    for secret in (keys.ca_key, keys.node_keystore("1"), keys.node_keystore("2"), keys.zookeeper_credentials,
                   keys.node_secret_key, keys.logd_secret_key):
        assert secret.stat().st_mode & 0o077 == 0, secret
    certificate = x509.load_pem_x509_certificates(keys.node_keystore("2").read_bytes())[0]
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["node2.example.com"]
    assert ZooKeeperCredentials.load(keys.zookeeper_credentials).username == "millrace"
    assert not keys.zookeeper_keystore.exists()  # ZooKeeper's certificate only when asked for
    with pytest.raises(FileExistsError):
        create_cluster_secrets(keys.directory, {"1": ["127.0.0.1"]})
    with_zookeeper = create_cluster_secrets(tmp_path / "zk", {"1": ["127.0.0.1"]}, zookeeper_names=["zk.example.com"])
    assert with_zookeeper.zookeeper_keystore.stat().st_mode & 0o077 == 0
    certificate = x509.load_pem_x509_certificates(with_zookeeper.zookeeper_keystore.read_bytes())[0]
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["zk.example.com"]


def test_node_names() -> None:
    assert node_names(["1=a.example.com, 10.0.0.1", "2=b"]) == {"1": ["a.example.com", "10.0.0.1"], "2": ["b"]}
    for bad in (["1"], ["1="], ["1=a", "1=b"], ["x/y=a"]):
        with pytest.raises(ValueError):
            node_names(bad)


def test_the_keys_command_prints_paths_and_flags_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "keys", "--dir", str(tmp_path / "k"), "--node", "1=127.0.0.1", "--node", "2=127.0.0.1"]) == 0
    out = capsys.readouterr().out
    assert "--peer-tls-keystore" in out and "--zookeeper-credentials" in out and "--curve-secret-key" in out
    password = ZooKeeperCredentials.load(tmp_path / "k" / "zookeeper.credentials").password
    assert password not in out
    assert main(["cluster", "keys", "--dir", str(tmp_path / "k"), "--node", "1=127.0.0.1"]) == 1  # not overwritten
    assert "--zookeeper-tls" not in out and not (tmp_path / "k" / "tls" / "zookeeper.pem").exists()
    assert main(["cluster", "keys", "--dir", str(tmp_path / "z"), "--node", "1=127.0.0.1",
                 "--zookeeper-host", "zk1.example.com,10.0.0.9"]) == 0
    out = capsys.readouterr().out
    ca, node1 = tmp_path / "z" / "tls" / "ca.pem", tmp_path / "z" / "tls" / "node-1.pem"
    assert f"--zookeeper-tls-keystore {node1} --zookeeper-tls-truststore {ca}" in out
    assert f"ssl.keyStore.location={tmp_path / 'z' / 'tls' / 'zookeeper.pem'}" in out and "secureClientPort" in out


def test_a_secured_local_clusters_command_lines_carry_paths_not_secrets(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.settings = ClusterSettings(nodes=2, log_replicas=2, write_quorum=2, secure=True, zookeeper_tls=True)
    admin_password = cluster._make_secrets()
    cluster._plan()
    assert cluster.settings.kafka_listener_names() == ["CLIENT", "INTERNAL"]
    admin = cluster._admin_client_properties(admin_password)
    assert admin["password"] == admin_password and Path(admin["client_properties"]).stat().st_mode & 0o077 == 0
    node2 = cluster._command(cluster.process("node-2"))
    logd = cluster._command(cluster.process("logd-1"))
    keys = cluster.keys
    assert node2[node2.index("--peer-tls-keystore") + 1] == str(keys.node_keystore("2"))
    assert node2[node2.index("--zookeeper-credentials") + 1] == str(keys.zookeeper_credentials)
    assert f"ssl.keystore.location={keys.node_keystore('2')}" in node2
    assert node2[node2.index("--config") + 1] == str(keys.directory / "server.properties")
    assert logd[logd.index("--curve-authorized-keys") + 1] == str(keys.node_authorized_keys)
    # ZooKeeper over TLS: the node presents its own certificate and trusts the cluster CA; ZooKeeper has a
    # TLS port (Netty, its certificate, client certificates required) and no plain one.
    assert node2[node2.index("--zookeeper-tls-keystore") + 1] == str(keys.node_keystore("2"))
    assert node2[node2.index("--zookeeper-tls-truststore") + 1] == str(keys.ca)
    zookeeper = cluster._command(cluster.process("zookeeper-1"))
    config = dict(line.split("=", 1) for line in Path(zookeeper[-1]).read_text().splitlines())
    assert config["secureClientPort"] == str(cluster.process("zookeeper-1").ports["client"])
    assert "clientPort" not in config and "clientPortAddress" not in config
    assert config["serverCnxnFactory"] == "org.apache.zookeeper.server.NettyServerCnxnFactory"
    assert config["ssl.keyStore.location"] == str(keys.zookeeper_keystore) and keys.zookeeper_keystore.exists()
    assert (config["ssl.trustStore.location"], config["ssl.clientAuth"]) == (str(keys.ca), "need")
    assert "netty-codec.jar" in zookeeper[zookeeper.index("-cp") + 1]
    assert cluster.zookeeper_tls() == ZooKeeperTls(str(keys.ca), str(keys.node_keystore("1")))
    secrets = [admin_password, ZooKeeperCredentials.load(keys.zookeeper_credentials).password]
    for command in (node2, logd):
        assert not any(secret in " ".join(command) for secret in secrets)
    assert (keys.directory / "server.properties").stat().st_mode & 0o077 == 0
    # Status reads with the keys; an open cluster's with none.
    assert cluster.zookeeper_credentials() is not None and cluster.curve_keys() is not None
    cluster.settings.secure = cluster.settings.zookeeper_tls = False
    assert cluster.zookeeper_credentials() is None and cluster.curve_keys() is None and cluster.zookeeper_tls() is None
    zookeeper = cluster._command(cluster.process("zookeeper-1"))  # an open cluster's (or one secured before TLS)
    assert "clientPort=" in Path(zookeeper[-1]).read_text() and "secureClientPort" not in Path(zookeeper[-1]).read_text()


def test_serve_takes_the_link_flags(tmp_path: Path) -> None:
    import argparse

    from millrace.gateway.commands.cli import _serve_parser, server_options
    from millrace.gateway.shared.assembly import build_cluster_node, cluster_node_setup

    parser = argparse.ArgumentParser()
    _serve_parser(parser.add_subparsers(dest="command"))
    keys = create_cluster_secrets(tmp_path / "keys", {"1": ["127.0.0.1"]})
    base = ["serve", "--zookeeper", "127.0.0.1:2181", "--node-id", "1", "--lts", str(tmp_path / "lts"),
            "--log-replicas", "127.0.0.1:1", "--write-quorum", "1", "--ack-quorum", "1"]
    options = server_options(parser.parse_args([*base, "--zookeeper-credentials", str(keys.zookeeper_credentials),
                                                "--peer-tls-keystore", str(keys.node_keystore("1")),
                                                "--peer-tls-truststore", str(keys.ca),
                                                "--zookeeper-tls-keystore", str(keys.node_keystore("1")),
                                                "--zookeeper-tls-truststore", str(keys.ca)]))
    setup = cluster_node_setup(options)
    assert setup.zookeeper_credentials is not None and setup.zookeeper_credentials.username == "millrace"
    assert setup.peer_tls == PeerTls(str(keys.node_keystore("1")), str(keys.ca))
    assert setup.zookeeper_tls == ZooKeeperTls(str(keys.ca), str(keys.node_keystore("1")))
    node = build_cluster_node(options, setup, {"kafka": 9092}, {"kafka": "127.0.0.1:9092"})
    assert node.config.tls == setup.zookeeper_tls and node.config.credentials == setup.zookeeper_credentials
    plain = cluster_node_setup(server_options(parser.parse_args(base)))
    assert plain.zookeeper_credentials is None and plain.peer_tls is None and plain.zookeeper_tls is None
    assert build_cluster_node(server_options(parser.parse_args(base)), plain, {}, {}).config.tls is None
    trust_only = cluster_node_setup(server_options(parser.parse_args([*base, "--zookeeper-tls-truststore",
                                                                      str(keys.ca)])))
    assert trust_only.zookeeper_tls == ZooKeeperTls(str(keys.ca))
    with pytest.raises(ValueError, match="go together"):
        cluster_node_setup(server_options(parser.parse_args([*base, "--peer-tls-truststore", str(keys.ca)])))
    with pytest.raises(ValueError, match="needs --zookeeper-tls-truststore"):
        cluster_node_setup(server_options(parser.parse_args([*base, "--zookeeper-tls-keystore",
                                                             str(keys.node_keystore("1"))])))


def test_ensure_cluster_secures_a_new_cluster_and_leaves_an_open_one_open(zk_hosts: str) -> None:
    from kazoo.security import OPEN_ACL_UNSAFE

    from millrace.store.cluster.layout import ClusterPaths
    from millrace.store.cluster.member import connect, ensure_cluster
    from millrace.store.cluster.zk_auth import ZooKeeperAccessError

    credentials = ZooKeeperCredentials("millrace", "pw")
    secured, other, stranger = ClusterPaths("/secured"), ClusterPaths("/open"), ZooKeeperCredentials("millrace", "no")
    node = connect(zk_hosts, credentials=credentials)
    plain = connect(zk_hosts)
    wrong = connect(zk_hosts, credentials=stranger)
    try:
        ensure_cluster(node, secured, 4, credentials)
        for path in (secured.root, secured.nodes, secured.logs, secured.config):
            assert [a.id.id for a in node.get_acls(path)[0]] == [credentials.identity]
        with pytest.raises(ZooKeeperAccessError, match="has no credentials"):
            ensure_cluster(plain, secured, 4)
        with pytest.raises(ZooKeeperAccessError, match="'millrace' is not the one"):
            ensure_cluster(wrong, secured, 4, stranger)
        ensure_cluster(plain, other, 4)  # without credentials: open, as before
        assert plain.get_acls(other.config)[0] == OPEN_ACL_UNSAFE
        ensure_cluster(plain, other, 4)
    finally:
        for client in (node, plain, wrong):
            client.stop()
            client.close()
