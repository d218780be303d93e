"""A cluster made by ``millrace cluster up --secure``: every link between its processes is secured, and a
process without the cluster's keys gets nowhere.

- A Kafka client reaches it over SASL_SSL with the super user's credentials ``up`` printed (and kept in
  DIR/secrets/admin.properties); a wrong password is refused.
- ZooKeeper serves TLS only, client certificates of the cluster CA required: no plain client, TLS client
  without a certificate or with another CA's gets a session (the nodes, and ``status``, get one with theirs).
- ZooKeeper: a session without the nodes' digest can neither create, change nor delete anything under the
  cluster's root, and cannot read it either (ACLs give the nodes' identity everything and nobody else
  anything; only ``exists`` is never checked by ZooKeeper); the nodes' identity can.
- A log replica answers no ZeroMQ client without the nodes' CURVE key (a client with it gets answers).
- A node's peer listener lets in neither a plain TCP client nor a TLS client whose certificate another CA
  signed, and a node never talks to a listener whose certificate the cluster CA did not sign; a node's
  own certificate gets answers.
- ``cluster status`` reads ZooKeeper and the replicas with the keys, and the nodes' HTTPS API with the
  cluster CA, and shows no secret.
- The native listener is SASL_SSL and the ACLs rule it on every node, as on a single server: the super
  user's changes made on one node are written and read through the other (nodes forward to each other
  logged in as the inter-broker user); a principal without ACLs is refused on either node, an
  unauthenticated client is not served; a principal a client puts in its requests is not believed (only
  a super user's, which is what a forwarding node is); an ACL made with Kafka's CreateAcls rules the
  native commands on both nodes, and the principal a forwarded request carries is the client's (a
  transaction begun through a node that forwards it belongs to its client alone)."""

from __future__ import annotations

import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace.gateway.commands.cluster_keys import ClusterKeys, issue, make_ca
from millrace.gateway.commands.local_cluster import zookeeper_missing
from tests.cluster.local_cluster import LocalClusterCli, millrace

pytestmark = [pytest.mark.skipif(zookeeper_missing() is not None, reason=str(zookeeper_missing())),
              pytest.mark.timeout(300)]


class Secured:
    def __init__(self, cli: LocalClusterCli) -> None:
        self.cli = cli
        self.admin: dict[str, Any] = cli.summary["admin"]
        self.keys = ClusterKeys(cli.directory / "secrets")

    def processes(self, role: str) -> list[dict[str, Any]]:
        return [p for p in self.cli.summary["processes"] if p["role"] == role]

    @property
    def zookeeper(self) -> str:
        return str(self.cli.summary["zookeeper"])

    def kafka(self, password: str | None = None) -> dict[str, Any]:
        """librdkafka's configuration for the super user (``password``: another one)."""
        return {"bootstrap.servers": self.cli.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                "sasl.username": self.admin["username"], "sasl.password": password or self.admin["password"],
                "ssl.ca.location": self.admin["ca"]}

    def secrets(self) -> list[str]:
        """Every secret of the cluster as text that could leak: passwords, CURVE secret keys, private keys."""
        found = [self.admin["password"]]
        for line in self.keys.zookeeper_credentials.read_text().splitlines():
            if line.startswith("password="):
                found.append(line.split("=", 1)[1])
        found += re.findall(r'password="([^"]+)"', (self.keys.directory / "server.properties").read_text())
        for secret_file in (self.keys.node_secret_key, self.keys.logd_secret_key):
            found += re.findall(r'secret-key = "([^"]+)"', secret_file.read_text())
        for pem in (self.keys.ca_key, self.keys.node_keystore("1")):
            body = pem.read_text().split("-----BEGIN PRIVATE KEY-----")[1].split("-----END")[0]
            found.append(body.strip().splitlines()[0])
        assert len(found) >= 6, found
        return found


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    home = tmp_path_factory.mktemp("secure-cluster")
    cli = LocalClusterCli(home / "cluster", "--secure", "--nodes", "2", "--log-replicas", "2", "--write-quorum", "2",
                          "--ack-quorum", "2", "--containers", "4")
    with cli:
        yield Secured(cli)


def test_a_kafka_client_gets_in_over_sasl_ssl_with_the_printed_admin_credentials(secured: Secured) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    properties = Path(secured.admin["client_properties"])
    assert properties.stat().st_mode & 0o077 == 0, "admin.properties must be readable by its owner only"
    assert f'password="{secured.admin["password"]}"' in properties.read_text()
    topic = "secured-topic"
    admin = AdminClient(secured.kafka())
    admin.create_topics([NewTopic(topic, 4)])[topic].result(30)
    producer = Producer({**secured.kafka(), "enable.idempotence": True, "message.timeout.ms": 30000})
    for partition in range(4):  # partitions on both nodes: records cross the peer links too
        producer.produce(topic, f"v{partition}".encode(), partition=partition)
    assert producer.flush(30) == 0
    consumer = Consumer({**secured.kafka(), "group.id": "secured-group", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
    values: list[bytes] = []
    for _ in range(60):
        message = consumer.poll(1.0)
        if message is not None and message.error() is None and message.value() is not None:
            values.append(bytes(message.value() or b""))
        if len(values) == 4:
            break
    consumer.close()
    assert sorted(values) == [f"v{p}".encode() for p in range(4)]
    stranger = AdminClient(secured.kafka(password="not-the-password"))
    with pytest.raises(KafkaException):
        stranger.list_topics(timeout=10)


def _zookeeper_session(secured: Secured, tls: Any, auth: Any = None, within: float = 30.0) -> Any:
    """A started kazoo client of the cluster's ZooKeeper (``tls``: a ZooKeeperTls, or None for plain TCP),
    or None if it got no session ``within`` seconds."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    client = KazooClient(hosts=secured.zookeeper, auth_data=auth, timeout=4.0,
                         **({} if tls is None else {"handler": tls.handler()}))
    try:
        client.start(timeout=within)
    except KazooTimeoutError:
        client.stop()
        client.close()
        return None
    return client


def test_zookeeper_serves_tls_only_and_only_to_certificates_of_the_cluster_ca(secured: Secured,
                                                                              tmp_path: Path) -> None:
    from millrace.store.cluster.zk_tls import ZooKeeperTls

    assert secured.cli.summary["zookeeper_tls"] is True
    keys = secured.keys
    host, port = secured.zookeeper.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as plain:  # no plain four-letter word either
        try:
            plain.sendall(b"ruok")
            answer = plain.recv(16)
        except OSError:
            answer = b""
        assert answer == b""
    for stranger in (None, ZooKeeperTls(str(keys.ca)), ZooKeeperTls(str(keys.ca), str(_foreign_keystore(tmp_path)))):
        assert _zookeeper_session(secured, stranger, within=3.0) is None, stranger
    client = _zookeeper_session(secured, ZooKeeperTls(str(keys.ca), str(keys.node_keystore("2"))))
    assert client is not None  # a node's certificate: a session (so the refusals above are TLS's doing)
    client.stop()
    client.close()


def test_zookeeper_lets_only_the_nodes_identity_change_or_read_the_cluster(secured: Secured) -> None:
    from kazoo.exceptions import NoAuthError

    from millrace.store.cluster.zk_auth import ZooKeeperCredentials
    from millrace.store.cluster.zk_tls import ZooKeeperTls

    tls = ZooKeeperTls(str(secured.keys.ca), str(secured.keys.node_keystore("1")))  # the link; the digest rules

    changes = [lambda c: c.create("/millrace/nodes/9", b"{}", ephemeral=True),
               lambda c: c.create("/millrace/intruder", b""),
               lambda c: c.set("/millrace/cluster", b'{"containers": 1}'),
               lambda c: c.set("/millrace/containers/0", b'{"node": "9", "incarnation": 0, "epoch": 99}'),
               lambda c: c.delete("/millrace/containers/0"),
               lambda c: c.delete("/millrace/logs/container-0")]
    reads = [lambda c: c.get("/millrace/containers/0"), lambda c: c.get_children("/millrace/nodes")]
    good = ZooKeeperCredentials.load(secured.keys.zookeeper_credentials)
    for auth in (None, [("digest", f"{good.username}:guessed")], [("digest", "admin:admin")]):
        client = _zookeeper_session(secured, tls, auth)
        assert client is not None
        try:
            assert client.exists("/millrace/containers/0") is not None  # never checked by ZooKeeper
            for attempt in changes + reads:
                with pytest.raises(NoAuthError):
                    attempt(client)
        finally:
            client.stop()
            client.close()
    client = _zookeeper_session(secured, tls, good.auth_data)
    assert client is not None
    try:  # the nodes' identity reads, and its znodes carry that identity's ACL alone
        assert sorted(client.get_children("/millrace/nodes")) == ["1", "2"]
        for path in ("/millrace", "/millrace/containers/0", "/millrace/logs/container-0", "/millrace/nodes/1"):
            acl, _ = client.get_acls(path)
            assert [(a.id.scheme, a.id.id, a.perms) for a in acl] == [("digest", good.identity, 31)], path
    finally:
        client.stop()
        client.close()


def test_a_log_replica_answers_no_client_without_the_nodes_key(secured: Secured) -> None:
    from millrace.store.durablelog.curve import CurveClientKeys
    from millrace.store.durablelog.replica_rpc import ReplicaRpc

    address = f"127.0.0.1:{secured.processes('logd')[0]['ports']['zmq']}"
    request: dict[str, tuple[dict[str, Any], list[bytes]]] = {
        address: ({"op": "last_confirmed", "log": "container-0"}, [])}
    stranger = ReplicaRpc()
    try:
        assert stranger.call(request, timeout=3.0) == {}
    finally:
        stranger.close()
    node = ReplicaRpc(curve=CurveClientKeys.load(secured.keys.node_secret_key, secured.keys.logd_public_key))
    try:
        assert node.call(request, timeout=10.0)[address][0]["status"] == "ok"
    finally:
        node.close()


def _ask_peer(port: int, tls: ssl.SSLContext | None) -> str:
    """What a GetSegmentInfo to a peer listener gets: ``answered`` (any answer of the node, an error
    included), else the failure's class."""
    from millrace.protocol.errors import ConnectionLostError
    from millrace.protocol.messages import GetSegmentInfo
    from millrace.store.cluster.connection import NodeConnection, NotSentError

    try:
        conn = NodeConnection("127.0.0.1", port, tls=tls)
    except NotSentError:
        return "not connected"
    try:
        conn.request(GetSegmentInfo(segment="kafka/secured-probe/0.#epoch.0")).result(15)
        return "answered"
    except (ConnectionLostError, NotSentError) as exc:
        return type(exc).__name__
    except Exception:  # noqa: BLE001 - an error answer of the node (the segment does not exist, or is not here)
        return "answered"
    finally:
        conn.close()


def _client_context(keystore: Path | None, ca: Path | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    if ca is None:
        context.verify_mode = ssl.CERT_NONE
    else:
        context.load_verify_locations(cafile=str(ca))
    if keystore is not None:
        context.load_cert_chain(str(keystore))
    return context


def _foreign_keystore(home: Path) -> Path:
    """A certificate for 127.0.0.1 that another CA signed (a would-be node of no cluster's)."""
    from cryptography.hazmat.primitives import serialization

    ca, ca_key = make_ca("Not the cluster's CA")
    certificate, key = issue(ca, ca_key, "node-1", ["127.0.0.1"])
    path = home / "foreign.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())
                     + certificate.public_bytes(serialization.Encoding.PEM))
    return path


def test_a_peer_listener_lets_in_only_nodes_of_the_cluster_ca(secured: Secured, tmp_path: Path) -> None:
    port = secured.processes("node")[0]["ports"]["peer"]
    keys = secured.keys
    assert _ask_peer(port, None) in ("ConnectionLostError", "NotSentError")  # plain TCP
    assert _ask_peer(port, _client_context(None, None)) != "answered"  # TLS without a certificate
    foreign = _foreign_keystore(tmp_path)
    assert _ask_peer(port, _client_context(foreign, None)) != "answered"  # a certificate of another CA
    # A node's own certificate: answered (so the refusals above are the listener's doing).
    assert _ask_peer(port, _client_context(keys.node_keystore("2"), keys.ca)) == "answered"


def test_a_node_never_talks_to_a_listener_the_cluster_ca_did_not_sign(secured: Secured, tmp_path: Path) -> None:
    from millrace.store.cluster.peer_tls import PeerTls

    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(_foreign_keystore(tmp_path)))
    listener = socket.create_server(("127.0.0.1", 0))
    got_request = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server.wrap_socket(conn, server_side=True) as tls:
                if tls.recv(4):
                    got_request.set()
        except (OSError, ssl.SSLError):
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    node = PeerTls(str(secured.keys.node_keystore("1")), str(secured.keys.ca)).client_context()
    assert _ask_peer(listener.getsockname()[1], node) == "not connected"
    thread.join(10)
    listener.close()
    assert not got_request.is_set()


def test_status_reads_everything_and_shows_no_secret(secured: Secured) -> None:
    status = secured.cli.status()
    assert status["controller"] in ("1", "2")
    assert all(c["owner_live"] for c in status["containers"])
    assert status["logs"] and all(r["answered"] for log in status["logs"] for r in log["replicas"])
    # Each node's /health, read over TLS with the cluster CA (the HTTP listener is SASL_SSL).
    assert all(node["health"] is not None for node in status["nodes"]), status["nodes"]
    text = millrace("cluster", "status", "--dir", str(secured.cli.directory), timeout=60)
    assert text.returncode == 0, text.stderr
    assert "NO LIVE OWNER" not in text.stdout and "no answer" not in text.stdout
    shown = [text.stdout, text.stderr, str(status), (secured.cli.directory / "cluster.json").read_text()]
    shown += [p.read_text(errors="replace") for p in secured.cli.directory.glob("*/out.log")]
    for secret in secured.secrets():
        assert not any(secret in place for place in shown)


# -- the native listener ---------------------------------------------------------------------------------
USERS = {"carol": "carol-native-secret", "dave": "dave-native-secret"}  # SCRAM-SHA-512, made by `millrace users`


def _native_uri(secured: Secured, node: int) -> str:
    return f"tls://127.0.0.1:{secured.processes('node')[node - 1]['ports']['native']}"


def _manager(secured: Secured, node: int, user: str | None = None) -> Any:
    from millrace import StreamManager

    if user is None:
        return StreamManager(_native_uri(secured, node), ca_file=secured.admin["ca"], reconnect_timeout=5)
    if user == "admin":
        return StreamManager(_native_uri(secured, node), username="admin", password=secured.admin["password"],
                             mechanism="PLAIN", ca_file=secured.admin["ca"], reconnect_timeout=5)
    return StreamManager(_native_uri(secured, node), username=user, password=USERS[user],
                         mechanism="SCRAM-SHA-512", ca_file=secured.admin["ca"], reconnect_timeout=5)


def _connection(secured: Secured, node: int, user: str | None = None) -> Any:
    """A raw native connection to ``node`` (authenticated as ``user``: sends any request as it is)."""
    from millrace.client.connection import Connection, Endpoint
    from millrace.client.security import ClientSecurity

    port = secured.processes("node")[node - 1]["ports"]["native"]
    security = ClientSecurity.of(username=user, password=USERS.get(user or ""), mechanism="SCRAM-SHA-512",
                                 ca_file=secured.admin["ca"]) if user else ClientSecurity(ca_file=secured.admin["ca"])
    return Connection(Endpoint("127.0.0.1", port, tls=True), connect_timeout=10, security=security)


def _eventually(check: Callable[[], Any], seconds: float = 20.0) -> Any:
    """``check()``'s value once it stops raising (users and ACLs reach the other nodes within a second or so)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return check()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@pytest.fixture(scope="module")
def native_users(secured: Secured, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """carol and dave, SCRAM users without any ACL, known to both nodes' native listeners."""
    home = tmp_path_factory.mktemp("native-users")
    for user, secret in USERS.items():
        password_file = home / f"{user}.password"
        password_file.write_text(secret + "\n")
        made = millrace("users", "--bootstrap-server", secured.cli.bootstrap.split(",")[0], "--command-config",
                        secured.admin["client_properties"], "set", user, "--mechanism", "SCRAM-SHA-512",
                        "--password-file", str(password_file), timeout=60)
        assert made.returncode == 0, made.stderr
    for node in (1, 2):
        for user in USERS:
            _eventually(lambda node=node, user=user: _connection(secured, node, user).close())
    return USERS


def test_native_changes_made_on_one_node_are_written_and_read_through_the_other(secured: Secured) -> None:
    from millrace.client.streams import ScalingPolicy

    for made_on, used_on in ((1, 2), (2, 1)):  # one of the two forwards the changes to the controller
        scope = f"native{made_on}"
        with _manager(secured, made_on, "admin") as admin:
            assert admin.create_scope(scope)
            assert admin.create_stream(scope, "events", scaling=ScalingPolicy.fixed(4))  # segments on both nodes
        with _manager(secured, used_on, "admin") as admin:
            with admin.create_writer(scope, "events") as writer:
                for i in range(8):
                    writer.write_event(f"e{i}".encode(), routing_key=f"k{i}").result(30)
            group = admin.create_reader_group("readers", scope, "events")
            read = []
            with group.create_reader("r") as reader:
                while len(read) < 8:
                    event = reader.read_next_event(timeout=15)
                    assert event is not None, f"read {read} only"
                    read.append(event.data)
            assert sorted(read) == sorted(f"e{i}".encode() for i in range(8))
            assert scope in admin.list_scopes()


def test_native_refuses_a_principal_without_acls_and_serves_no_unauthenticated_client(
        secured: Secured, native_users: dict[str, str]) -> None:
    from millrace import AuthenticationError, AuthorizationError
    from millrace.client.connection import Connection, Endpoint
    from millrace.protocol.errors import ConnectionLostError

    with _manager(secured, 1, "admin") as admin:
        admin.create_scope("guarded")
        admin.create_stream("guarded", "events")
    for node in (1, 2):
        with _manager(secured, node, "carol") as carol:
            with pytest.raises(AuthorizationError):
                carol.create_scope(f"carols{node}")
            with pytest.raises(AuthorizationError):
                carol.create_stream("guarded", f"mine{node}")
            with pytest.raises(AuthorizationError):
                carol.create_writer("guarded", "events").write_event(b"no", routing_key="k").result(30)
            with pytest.raises(AuthorizationError):
                carol.delete_scope("guarded")
        with _manager(secured, node) as anonymous, pytest.raises(AuthenticationError):
            anonymous.create_scope(f"anonymous{node}")
        port = secured.processes("node")[node - 1]["ports"]["native"]
        with pytest.raises(ConnectionLostError):  # plain TCP: the listener speaks TLS only
            Connection(Endpoint("127.0.0.1", port), connect_timeout=3)
    with _manager(secured, 2, "admin") as admin:
        assert not any(s.startswith(("carols", "anonymous")) for s in admin.list_scopes())
        assert admin.list_streams("guarded") == ["events"]


def test_a_principal_in_a_clients_request_is_not_believed(secured: Secured, native_users: dict[str, str]) -> None:
    from millrace import AuthenticationError, AuthorizationError
    from millrace.protocol import messages as m

    for node in (1, 2):
        carol = _connection(secured, node, "carol")
        try:
            for forged in (m.CreateScope(scope=f"forged{node}", principal="User:admin"),
                           m.CreateScope(scope=f"forged{node}", principal="User:admin", forwarded=True),
                           m.CreateScope(scope=f"forged{node}", principal="User:broker", forwarded=True)):
                with pytest.raises(AuthorizationError, match="carol"):
                    carol.request(forged).result(30)
        finally:
            carol.close()
        anonymous = _connection(secured, node)
        try:
            with pytest.raises(AuthenticationError):
                anonymous.request(m.CreateScope(scope=f"forged{node}", principal="User:admin",
                                                forwarded=True)).result(30)
        finally:
            anonymous.close()
    # A super user's (a forwarding node's) principal is believed, so the refusals above are the rule's:
    # the super user asserting carol is refused what carol may not do.
    with _manager(secured, 1, "admin") as admin:
        connection = admin.pool.get(admin.controller.endpoint)
        with pytest.raises(AuthorizationError, match="carol"):
            connection.request(m.CreateScope(scope="forged-for-carol", principal="User:carol",
                                             forwarded=True)).result(30)
        assert not any(s.startswith("forged") for s in admin.list_scopes())


def test_kafka_acls_rule_native_commands_on_both_nodes(secured: Secured, native_users: dict[str, str]) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    from millrace import AuthorizationError

    with _manager(secured, 1, "admin") as admin:
        admin.create_scope("shared")
        admin.create_stream("shared", "orders")
        admin.create_stream("shared", "other")
    allowed = [(user, ResourceType.TOPIC, "shared/orders", ResourcePatternType.LITERAL, AclOperation.WRITE)
               for user in USERS]
    allowed += [("carol", ResourceType.TOPIC, f"owned{node}/", ResourcePatternType.PREFIXED, AclOperation.ALL)
                for node in (1, 2)]
    kafka = AdminClient(secured.kafka())
    for future in kafka.create_acls([AclBinding(rt, name, pattern, f"User:{user}", "*", operation,
                                                AclPermissionType.ALLOW)
                                     for user, rt, name, pattern, operation in allowed]).values():
        future.result(30)
    for node in (1, 2):
        with _manager(secured, node, "carol") as carol:
            def write(carol: Any = carol) -> None:
                with carol.create_writer("shared", "orders") as writer:
                    writer.write_event(b"by carol", routing_key="k").result(30)

            _eventually(write)  # once this node has loaded the new ACLs
            with pytest.raises(AuthorizationError):  # the ACL names one stream
                carol.create_writer("shared", "other").write_event(b"no", routing_key="k").result(30)
            # A PREFIXED owned<N>/ ACL owns that scope: made through either node (one forwards it).
            assert _eventually(lambda carol=carol, node=node: carol.create_scope(f"owned{node}"))
            assert carol.create_stream(f"owned{node}", "mine")
    # The principal a forwarded transaction command carries is its client's: a transaction carol begins
    # through a node belongs to carol on the node serving the transactions, and dave, allowed to write the
    # stream, may not commit it through the same node (through the node that forwards, a lost principal
    # would make both of them the forwarding node's).
    for node in (1, 2):
        with _manager(secured, node, "carol") as carol, _manager(secured, node, "dave") as dave:
            txn = carol.create_transaction_writer("shared", "orders").begin_txn()
            txn.write_event(b"in a transaction", routing_key="k")
            txn.flush()
            with pytest.raises(AuthorizationError):
                dave.create_transaction_writer("shared", "orders").get_txn(txn.txn_id).commit()
            txn.commit()
            assert str(txn.check_status()).endswith("COMMITTED")
