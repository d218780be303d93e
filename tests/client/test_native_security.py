"""The native listener secured by the same ``--config`` as the Kafka listeners (a listener named NATIVE:
SASL_SSL here), against the real native client: TLS with a test CA, SASL PLAIN, SCRAM-SHA-256/512 and
OAUTHBEARER (a JWT signed by a key of a JWKS file) with right and wrong credentials, and the one
Authorizer deciding native commands by ACLs made through Kafka's CreateAcls
(``gateway/native/authorization.py`` maps the resources)."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace import AuthenticationError, AuthorizationError, StreamManager
from millrace.client.connection import Connection, ConnectionLostError, Endpoint
from millrace.client.security import ClientSecurity
from millrace.protocol import messages as m
from tests.server_process import ServerProcess, add_scram_args
from tests.tls_files import make_certificates

pytestmark = pytest.mark.timeout(180)

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"  # super user, SCRAM-SHA-512
READER, WRITER, OTHER = "reader", "writer", "other"  # SCRAM-SHA-512 users, password "<name>-secret"
CAROL = "carol"  # SCRAM-SHA-256
PAULA = "paula"  # PLAIN, from the listener's JAAS entry
AUDIENCE, ISSUER = "millrace", "https://idp.example.com"


def _jaas(module: str, options: str = "") -> str:
    return f"org.apache.kafka.common.security.{module} required {options};"


class Secured:
    def __init__(self, server: ServerProcess, ca: Path, home: Path, key: Any) -> None:
        self.server, self.ca, self.home, self.key = server, ca, home, key
        self._admin: Any = None

    @property
    def uri(self) -> str:
        return f"tls://127.0.0.1:{self.server.native_port}"

    def manager(self, user: str | None = None, password: str | None = None, **kwargs: Any) -> StreamManager:
        if user is not None and password is None:
            password = f"{user}-secret" if user != ADMIN else ADMIN_PASSWORD
        return StreamManager(self.uri, username=user, password=password, ca_file=str(self.ca),
                             reconnect_timeout=5, **kwargs)

    def token(self, subject: str, expires_in: float = 300, audience: str = AUDIENCE) -> str:
        import jwt

        now = int(time.time())
        claims = {"sub": subject, "aud": audience, "iss": ISSUER, "iat": now, "exp": int(now + expires_in)}
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "test"})

    def kafka_admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient({
                "bootstrap.servers": f"127.0.0.1:{self.server.ports['kafka']}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": ADMIN, "sasl.password": ADMIN_PASSWORD})
        return self._admin

    def allow(self, principal: str, resource_type: str, name: str, operation: str, prefixed: bool = False) -> None:
        """An ALLOW ACL, made through Kafka's CreateAcls (the one Authorizer serves both protocols)."""
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        binding = AclBinding(getattr(ResourceType, resource_type), name,
                             ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL,
                             f"User:{principal}", "*", getattr(AclOperation, operation), AclPermissionType.ALLOW)
        for future in self.kafka_admin().create_acls([binding]).values():
            future.result(30)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    home = tmp_path_factory.mktemp("native-security")
    certificates = make_certificates(home)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    entry = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())) | {"kid": "test"}
    (home / "jwks.json").write_text(json.dumps({"keys": [entry]}))
    native = "listener.name.native."
    lines = [
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,NATIVE:SASL_SSL",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "sasl.jaas.config=" + _jaas("scram.ScramLoginModule"),
        f"{native}sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        f"{native}plain.sasl.jaas.config=" + _jaas("plain.PlainLoginModule", f'user_{PAULA}="{PAULA}-secret"'),
        f"{native}oauthbearer.sasl.jaas.config=" + _jaas("oauthbearer.OAuthBearerLoginModule"),
        f"{native}oauthbearer.sasl.server.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        f"{native}sasl.oauthbearer.jwks.endpoint.url=file:{home / 'jwks.json'}",
        f"sasl.oauthbearer.expected.audience={AUDIENCE}", f"sasl.oauthbearer.expected.issuer={ISSUER}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={certificates.server_pem}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        f"super.users=User:{ADMIN}",
    ]
    (home / "server.properties").write_text("\n".join(lines) + "\n")
    users = [f"SCRAM-SHA-512=[name={ADMIN},password={ADMIN_PASSWORD}]",
             *(f"SCRAM-SHA-512=[name={u},password={u}-secret]" for u in (READER, WRITER, OTHER)),
             f"SCRAM-SHA-256=[name={CAROL},password={CAROL}-secret]"]
    server = ServerProcess(str(home / "data"), "--config", str(home / "server.properties"),
                           *add_scram_args(home, *users)).start()
    try:
        yield Secured(server, certificates.ca_pem, home, key)
        assert not any("-secret" in line or "eyJ" in line for line in server.output), "a secret reached the log"
    finally:
        server.kill()


# -- authentication ------------------------------------------------------------------------------------
def test_scram_sha_512_and_256_and_plain_authenticate(secured: Secured) -> None:
    with secured.manager(ADMIN) as sm:
        assert sm.create_scope("auth") in (True, False)
        assert "auth" in sm.list_scopes()
    for user, mechanism in ((CAROL, "SCRAM-SHA-256"), (PAULA, "PLAIN"), (READER, "SCRAM-SHA-512")):
        with secured.manager(user, f"{user}-secret", mechanism=mechanism) as sm:
            sm.list_scopes()  # authenticated (an empty answer: no ACL lets them describe a scope)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_wrong_password_is_refused(secured: Secured, mechanism: str) -> None:
    user = {"SCRAM-SHA-512": READER, "SCRAM-SHA-256": CAROL, "PLAIN": PAULA}[mechanism]
    with pytest.raises(AuthenticationError) as refused:
        secured.manager(user, "wrong", mechanism=mechanism)
    assert "wrong" not in str(refused.value)
    with pytest.raises(AuthenticationError):
        secured.manager("nobody", "wrong", mechanism=mechanism)


def test_oauthbearer_token_right_expired_and_foreign(secured: Secured) -> None:
    with StreamManager(secured.uri, token=secured.token(ADMIN), ca_file=str(secured.ca)) as sm:
        sm.create_scope("oauth")
    calls: list[int] = []

    def provider() -> str:
        calls.append(1)
        return secured.token(ADMIN)

    with StreamManager(secured.uri, token_provider=provider, ca_file=str(secured.ca)) as sm:
        assert "oauth" in sm.list_scopes()
    assert calls
    with pytest.raises(AuthenticationError, match="invalid_token"):
        StreamManager(secured.uri, token=secured.token(ADMIN, expires_in=-3600), ca_file=str(secured.ca))
    with pytest.raises(AuthenticationError):
        StreamManager(secured.uri, token=secured.token(ADMIN, audience="someone-else"), ca_file=str(secured.ca))


def test_short_lived_token_re_authenticates_on_the_connection(secured: Secured) -> None:
    """A session lasts no longer than its token: the client re-authenticates before it ends, with a
    fresh token from its provider, and goes on using its connection."""
    tokens: list[str] = []

    def provider() -> str:
        tokens.append(secured.token(ADMIN, expires_in=2.5))
        return tokens[-1]

    with StreamManager(secured.uri, token_provider=provider, ca_file=str(secured.ca)) as sm:
        conn = sm.pool.get(sm.endpoint)
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            sm.list_scopes()
            time.sleep(0.3)
        assert sm.pool.get(sm.endpoint) is conn, "the connection was kept"
        assert len(tokens) >= 2


def test_tls_needs_the_right_ca(secured: Secured, tmp_path: Path) -> None:
    other = make_certificates(tmp_path)  # another CA: the server's certificate does not check out
    with pytest.raises(ConnectionLostError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        StreamManager(secured.uri, username=ADMIN, password=ADMIN_PASSWORD, ca_file=str(other.ca_pem),
                      reconnect_timeout=2)
    # Plain TCP to a TLS listener gets no answer it can read.
    with pytest.raises(ConnectionLostError):
        Connection(Endpoint("127.0.0.1", secured.server.native_port), connect_timeout=3)


def test_unauthenticated_client_gets_an_authentication_error(secured: Secured) -> None:
    conn = Connection(Endpoint("127.0.0.1", secured.server.native_port, tls=True), connect_timeout=10,
                      security=ClientSecurity(ca_file=str(secured.ca)))
    hello = conn.request(m.Hello()).result(10)[0]
    assert hello["authentication"] is True and "SCRAM-SHA-512" in hello["mechanisms"]
    with pytest.raises(AuthenticationError, match="before authentication"):
        conn.request(m.ListScopes()).result(10)
    deadline = time.monotonic() + 10
    while not conn.closed and time.monotonic() < deadline:  # the server closed the connection
        time.sleep(0.05)
    assert conn.closed
    conn.close()
    # The same through the manager: nothing but an authentication error.
    with StreamManager(secured.uri, ca_file=str(secured.ca)) as sm, pytest.raises(AuthenticationError):
        sm.create_scope("anonymous")


def test_a_large_frame_before_authentication_closes_the_connection(secured: Secured) -> None:
    import ssl

    context = ssl.create_default_context(cafile=str(secured.ca))
    with socket.create_connection(("127.0.0.1", secured.server.native_port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall((10 * 1024 * 1024).to_bytes(4, "big") + b"x" * 1024)
        assert tls.recv(1) == b""  # closed without an answer
    with secured.manager(ADMIN) as sm:  # and the server serves everyone else
        sm.list_scopes()


# -- authorization -------------------------------------------------------------------------------------
def test_reader_reads_its_stream_only(secured: Secured) -> None:
    with secured.manager(ADMIN) as admin:
        admin.create_scope("iot")
        admin.create_stream("iot", "readings")
        admin.create_stream("iot", "other")
        with admin.create_writer("iot", "readings") as writer:
            writer.write_event(b"r1", routing_key="k").result(30)
        with admin.create_writer("iot", "other") as writer:
            writer.write_event(b"o1", routing_key="k").result(30)
    secured.allow(READER, "TOPIC", "iot/readings", "READ")
    secured.allow(READER, "GROUP", "iot/", "READ", prefixed=True)
    with secured.manager(READER) as sm:
        assert sm.list_streams("iot") == ["readings"]  # what it may describe only
        group = sm.create_reader_group("rg", "iot", "readings")
        with group.create_reader("r") as reader:
            event = reader.read_next_event(timeout=10)
            assert event is not None and event.data == b"r1"
        with pytest.raises(AuthorizationError):
            sm.create_writer("iot", "readings").write_event(b"no", routing_key="k").result(30)
        with pytest.raises(AuthorizationError):
            sm.create_reader_group("rg2", "iot", "other")
        with pytest.raises(AuthorizationError):
            sm.describe_stream("iot", "other")
        with pytest.raises(AuthorizationError):
            sm.create_scope("mine")
        with pytest.raises(AuthorizationError):
            sm.create_stream("iot", "new")
        with pytest.raises(AuthorizationError):
            sm.seal_stream("iot", "readings")
        with pytest.raises(AuthorizationError):
            sm.delete_scope("iot")


def test_writer_cannot_commit_another_principals_transaction(secured: Secured) -> None:
    with secured.manager(ADMIN) as admin:
        admin.create_scope("tx")
        admin.create_stream("tx", "orders")
    for user in (WRITER, OTHER):
        secured.allow(user, "TOPIC", "tx/orders", "WRITE")
    with secured.manager(WRITER) as wm, secured.manager(OTHER) as om:
        txn = wm.create_transaction_writer("tx", "orders").begin_txn()
        txn.write_event(b"e1", routing_key="k")
        txn.flush()
        # The other principal names the same transaction: refused, whatever it tries.
        other = om.create_transaction_writer("tx", "orders")
        with pytest.raises(AuthorizationError):
            other.get_txn(txn.txn_id).commit()
        txn.commit()
        assert str(txn.check_status()).endswith("COMMITTED")


def test_kv_table_read_versus_write(secured: Secured) -> None:
    with secured.manager(ADMIN) as admin:
        admin.create_scope("kv")
        table = admin.create_key_value_table("kv", "settings")
        table.put("colour", b"blue")
    secured.allow(READER, "TOPIC", "kv/settings", "READ")
    with secured.manager(READER) as sm:
        table = sm.key_value_table("kv", "settings")
        assert table.get("colour") is not None and table.get("colour")[0] == b"blue"
        with pytest.raises(AuthorizationError):
            table.put("colour", b"red")
        with pytest.raises(AuthorizationError):
            sm.key_value_table("kv", "secrets")


def test_a_prefixed_scope_acl_owns_the_scope(secured: Secured) -> None:
    """PREFIXED ``team/`` on TOPIC: the scope, its streams, its tables; nothing of another scope."""
    for operation in ("CREATE", "WRITE", "READ", "DELETE"):
        secured.allow(OTHER, "TOPIC", "team/", operation, prefixed=True)
    with secured.manager(OTHER) as sm:
        sm.create_scope("team")
        sm.create_stream("team", "s1")
        with sm.create_writer("team", "s1") as writer:
            writer.write_event(b"x", routing_key="k").result(30)
        assert sm.list_streams("team") == ["s1"]
        assert "team" in sm.list_scopes() and "iot" not in sm.list_scopes()
        sm.seal_stream("team", "s1")
        sm.delete_stream("team", "s1")
        with pytest.raises(AuthorizationError):
            sm.create_scope("teams")


def test_kafka_and_native_rights_agree(secured: Secured) -> None:
    """ACLs made through Kafka's CreateAcls on topic ``T`` (the Kafka scope's stream ``T``): before them
    the principal reads it through neither protocol, after them through both, and writes it through
    neither."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import NewTopic

    topic = f"shared-{uuid.uuid4().hex[:8]}"
    for future in secured.kafka_admin().create_topics([NewTopic(topic, 1)]).values():
        future.result(30)
    with secured.manager(ADMIN) as admin, admin.create_writer("kafka", topic) as writer:
        writer.write_event(b"both", routing_key="k").result(30)
    with secured.manager(WRITER) as sm, pytest.raises(AuthorizationError):
        sm.describe_stream("kafka", topic)
    secured.allow(WRITER, "TOPIC", topic, "READ")
    secured.allow(WRITER, "GROUP", "kafka/", "READ", prefixed=True)  # native reader groups of the scope
    secured.allow(WRITER, "GROUP", "g-", "READ", prefixed=True)  # Kafka consumer groups
    with secured.manager(WRITER) as sm:
        group = sm.create_reader_group("w", "kafka", topic)
        with group.create_reader("r") as reader:
            event = reader.read_next_event(timeout=10)
            assert event is not None and event.data == b"both"
        with pytest.raises(AuthorizationError):
            sm.create_writer("kafka", topic).write_event(b"no", routing_key="k").result(30)
    conf = {"bootstrap.servers": f"127.0.0.1:{secured.server.ports['kafka']}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": WRITER, "sasl.password": f"{WRITER}-secret"}
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = None
    deadline = time.monotonic() + 30
    while got is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got = msg.value()
    consumer.close()
    assert got == b"both"
    producer = Producer({**conf, "message.timeout.ms": 5000})
    errors: list[Any] = []
    producer.produce(topic, b"no", on_delivery=lambda e, _m: errors.append(e))
    producer.flush(10)
    assert errors and errors[0] is not None and "AUTHORIZATION" in errors[0].name(), errors


def test_pool_reconnects_and_re_authenticates(secured: Secured) -> None:
    with secured.manager(ADMIN) as sm:
        conn = sm.pool.get(sm.endpoint)
        conn.close()
        assert sm.list_scopes() is not None  # a new connection, authenticated afresh
        assert sm.pool.get(sm.endpoint) is not conn
