"""ACLs with Kafka's model, through the real clients: a server whose SASL listener authenticates admin
(a super user), alice and bob, with ``authorizer.class.name`` set and
``allow.everyone.if.no.acl.found=false``.

The admin grants alice prefixed ACLs (topics and groups starting ``alice-``) through CreateAcls; alice
then produces, consumes and commits there and is refused elsewhere with Kafka's codes
(TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED), sees only her topics in Metadata, needs CREATE to make a
topic, and a DENY wins over her ALLOW until DeleteAcls removes it. bob, with no ACL at all, is refused
everything. ACLs survive a restart. On an mTLS listener the client certificate's subject, through
``ssl.principal.mapping.rules``, is the principal the ACLs name."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.server_process import ServerProcess, config_args

pytestmark = pytest.mark.timeout(240)

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


def _server(home: Path) -> ServerProcess:
    users = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    jaas = f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
    return ServerProcess(str(home / "data"), "--override", "listeners=SASL_PLAINTEXT://127.0.0.1:0",
                         "--override", "sasl.enabled.mechanisms=PLAIN",
                         *config_args(home, f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}"), "--override",
                         "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                         "--override", "super.users=User:admin", "--override",
                         "allow.everyone.if.no.acl.found=false").start()


class Secured:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.server = _server(home)

    def conf(self, user: str) -> dict[str, Any]:
        return {"bootstrap.servers": f"127.0.0.1:{self.server.ports['kafka']}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user]}

    def restart(self) -> None:
        assert self.server.stop(timeout=30) == 0
        self.server = _server(self.home)


class Clients(Protocol):
    """Whatever gives a user's client settings."""

    def conf(self, user: str) -> dict[str, Any]: ...


class CertificateClients:
    """Clients of an mTLS listener, each user with its own certificate (``<user>.pem``/``.key``)."""

    def __init__(self, port: int, home: Path) -> None:
        self.port, self.home = port, home

    def conf(self, user: str) -> dict[str, Any]:
        return {"bootstrap.servers": f"127.0.0.1:{self.port}", "security.protocol": "SSL",
                "ssl.ca.location": str(self.home / "ca.pem"),
                "ssl.certificate.location": str(self.home / f"{user}.pem"),
                "ssl.key.location": str(self.home / f"{user}.key")}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    s = Secured(tmp_path_factory.mktemp("acls"))
    try:
        yield s
    finally:
        s.server.kill()


def _admin(secured: Clients, user: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(secured.conf(user))


def _binding(resource: str, name: str, pattern: str, user: str, operation: str, permission: str = "ALLOW") -> Any:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBinding(ResourceType[resource], name, ResourcePatternType[pattern], f"User:{user}", "*",
                      AclOperation[operation], AclPermissionType[permission])


def _grant(secured: Clients, *bindings: Any) -> None:
    admin = _admin(secured, "admin")  # held: a collected client ends its requests
    for future in admin.create_acls(list(bindings)).values():
        future.result(30)


def _produce(secured: Clients, user: str, topic: str) -> Any:
    """The delivery error of one idempotent record (None when written)."""
    from confluent_kafka import Producer

    outcome: list[Any] = []
    producer = Producer({**secured.conf(user), "enable.idempotence": True, "message.timeout.ms": 10000})
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(15)
    return outcome[0] if outcome else "not delivered"


def _consume(secured: Clients, user: str, topic: str, group: str) -> tuple[int, Any]:
    """(records read, the first error) of a group consumer reading ``topic`` from the start."""
    from confluent_kafka import Consumer

    consumer = Consumer({**secured.conf(user), "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read, error = 0, None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not (read and error is None and read >= 1):
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None:
            error = msg.error()
            break
        read += 1
    if error is None and read:
        consumer.commit(asynchronous=False)
    consumer.close()
    return read, error


def _create(secured: Clients, user: str, topic: str) -> Any:
    """CreateTopics' outcome for ``topic`` (None when created)."""
    from confluent_kafka.admin import NewTopic

    admin = _admin(secured, user)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    except Exception as e:  # noqa: BLE001 - the KafkaException carrying the error is the outcome
        return e.args[0]
    return None


def test_alices_prefixed_acls_and_everything_she_is_refused(secured: Secured) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    suffix = uuid.uuid4().hex[:6]
    mine, theirs = f"alice-orders-{suffix}", f"bob-payments-{suffix}"
    assert _create(secured, "admin", mine) is None and _create(secured, "admin", theirs) is None
    _grant(secured, *(_binding("TOPIC", "alice-", "PREFIXED", "alice", op) for op in ("WRITE", "READ")),
           _binding("GROUP", "alice-", "PREFIXED", "alice", "READ"))

    assert _produce(secured, "alice", mine) is None
    assert _produce(secured, "alice", theirs).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _consume(secured, "alice", mine, f"alice-group-{suffix}") == (1, None)
    read, error = _consume(secured, "alice", mine, f"other-group-{suffix}")
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    listed = _admin(secured, "alice").list_topics(timeout=20).topics
    assert mine in listed and theirs not in listed  # READ implies DESCRIBE; the rest is not shown
    assert _create(secured, "alice", f"alice-new-{suffix}").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _grant(secured, _binding("TOPIC", "alice-", "PREFIXED", "alice", "CREATE"))
    assert _create(secured, "alice", f"alice-new-{suffix}") is None
    alice = _admin(secured, "alice")
    deletion = alice.delete_topics([theirs])[theirs]
    with pytest.raises(KafkaException) as refused:
        deletion.result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    with pytest.raises(KafkaException) as refused:  # managing ACLs needs ALTER on the cluster
        next(iter(alice.create_acls([_binding("TOPIC", "x", "LITERAL", "alice", "ALL")]).values())).result(30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    # DENY wins over ALLOW, until it is deleted.
    _grant(secured, _binding("TOPIC", mine, "LITERAL", "alice", "READ", "DENY"))
    read, error = _consume(secured, "alice", mine, f"alice-again-{suffix}")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    deny = AclBindingFilter(ResourceType.TOPIC, mine, ResourcePatternType.LITERAL, "User:alice", "*",
                            AclOperation.READ, AclPermissionType.DENY)
    admin = _admin(secured, "admin")
    removed = next(iter(admin.delete_acls([deny]).values())).result(30)
    assert len(removed) == 1
    assert _consume(secured, "alice", mine, f"alice-last-{suffix}") == (1, None)

    # bob has no ACL at all: with allow.everyone.if.no.acl.found=false he may do nothing.
    assert _produce(secured, "bob", mine).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert mine not in _admin(secured, "bob").list_topics(timeout=20).topics


def test_acls_are_durable(secured: Secured) -> None:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    _grant(secured, _binding("TOPIC", "durable-", "PREFIXED", "bob", "DESCRIBE"))
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    admin = _admin(secured, "admin")
    before = sorted(map(str, admin.describe_acls(everything).result(30)))
    secured.restart()
    admin = _admin(secured, "admin")
    after = sorted(map(str, admin.describe_acls(everything).result(30)))
    assert after == before and any("durable-" in b for b in after)


def test_client_certificates_are_principals_for_acls(tmp_path: Path) -> None:
    """mTLS: the certificate's subject, through ssl.principal.mapping.rules, is the principal ACLs name
    (admin's certificate makes it a super user; alice's gets only her prefixed ACLs)."""
    from confluent_kafka import KafkaError
    from cryptography.hazmat.primitives import serialization

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    for user in ("admin", "alice"):
        issued = ca.issue_cert(f"{user}@example.com", common_name=user)
        issued.cert_chain_pems[0].write_to_path(str(tmp_path / f"{user}.pem"))
        key = serialization.load_pem_private_key(issued.private_key_pem.bytes(), None)
        (tmp_path / f"{user}.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    server = ServerProcess(str(tmp_path / "data"), "--override", "listeners=MTLS://127.0.0.1:0", "--override",
                           "listener.security.protocol.map=MTLS:SSL", "--override",
                           f"ssl.keystore.location={tmp_path / 'server.pem'}", "--override",
                           f"ssl.truststore.location={tmp_path / 'ca.pem'}", "--override", "ssl.client.auth=required",
                           "--override", "ssl.principal.mapping.rules=RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
                           "--override", "authorizer.class.name=StandardAuthorizer",
                           "--override", "super.users=User:admin").start()
    try:
        clients = CertificateClients(server.ports["kafka"], tmp_path)
        assert _create(clients, "admin", "alice-certs") is None and _create(clients, "admin", "other-certs") is None
        _grant(clients, _binding("TOPIC", "alice-", "PREFIXED", "alice", "WRITE"))
        assert _produce(clients, "alice", "alice-certs") is None
        assert _produce(clients, "alice", "other-certs").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert server.stop(timeout=30) == 0
    finally:
        server.kill()
