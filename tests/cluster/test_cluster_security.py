"""A secured cluster, made by ``millrace cluster up --config server.properties`` as an operator would:
every node binds the same two Kafka listeners on ports of its own, an internal SASL_SSL one the nodes
reach each other on (``inter.broker.listener.name``, SCRAM-SHA-512 as the super user ``broker``) and a
SASL_PLAINTEXT one for clients (PLAIN users admin, alice, bob), with the authorizer on.

- Metadata gives each client every node's listener of the name it came in on.
- An ACL created through one node is applied by every node within the one-second refresh, and so is a
  deletion made through another.
- A transaction over partitions led by both nodes commits: its markers travel node to node over the
  internal listener, authenticated, and nothing in the nodes' logs says a node's login was refused."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace.gateway.commands.local_cluster import zookeeper_missing
from tests.cluster.local_cluster import LocalClusterCli
from tests.server_process import add_scram_args
from tests.tls_files import make_certificates

pytestmark = [pytest.mark.skipif(zookeeper_missing() is not None, reason=str(zookeeper_missing())),
              pytest.mark.timeout(300)]

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"  # the nodes' own SCRAM login, a super user
PROPAGATION_BOUND_SECONDS = 10.0  # one refresh period is a second; generous for a loaded machine


def _properties(home: Path) -> Path:
    certificates = make_certificates(home)
    server_pem, ca_pem = certificates.server_pem, certificates.ca_pem
    users = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    lines = [
        "listeners=INTERNAL://127.0.0.1:0,CLIENT://127.0.0.1:0",
        "listener.security.protocol.map=INTERNAL:SASL_SSL,CLIENT:SASL_PLAINTEXT",
        "inter.broker.listener.name=INTERNAL",
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram."
        f'ScramLoginModule required username="{BROKER_USER}" password="{BROKER_PASSWORD}";',
        "listener.name.client.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.client.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        f"required {users};",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={server_pem}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={ca_pem}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        f"super.users=User:admin;User:{BROKER_USER}",
        "allow.everyone.if.no.acl.found=false",
    ]
    path = home / "server.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


class SecuredCluster:
    def __init__(self, cli: LocalClusterCli) -> None:
        self.cli = cli

    def ports(self, listener: str) -> dict[int, int]:
        """Node id -> its port for ``listener`` (INTERNAL is each node's first, its ``kafka`` port)."""
        key = "kafka" if listener == "INTERNAL" else f"kafka:{listener}"
        return {int(p["name"].split("-")[1]): p["ports"][key]
                for p in self.cli.summary["processes"] if p["role"] == "node"}

    def client(self, user: str, node: int = 1) -> dict[str, Any]:
        return {"bootstrap.servers": f"127.0.0.1:{self.ports('CLIENT')[node]}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user]}

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.cli.directory.glob("node-*/out.log")))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    home = tmp_path_factory.mktemp("secured-cluster")
    properties = _properties(home)
    broker_user = add_scram_args(home, f"SCRAM-SHA-512=[name={BROKER_USER},password={BROKER_PASSWORD}]")
    cli = LocalClusterCli(home / "cluster", "--nodes", "2", "--log-replicas", "2", "--write-quorum", "2",
                          "--ack-quorum", "2", "--containers", "4", "--config", str(properties),
                          *(f"--node-arg={arg}" for arg in broker_user))
    with cli:
        yield SecuredCluster(cli)


def _brokers(conf: dict[str, Any]) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(conf)
    metadata = admin.list_topics(timeout=20)
    return {b.id: b.port for b in metadata.brokers.values()}


def test_metadata_gives_each_node_on_the_clients_listener(secured: SecuredCluster) -> None:
    assert _brokers(secured.client("admin", node=2)) == secured.ports("CLIENT")


def _alice_may_describe(secured: SecuredCluster, node: int, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(secured.client("alice", node))
    metadata = admin.list_topics(topic, timeout=20)
    return metadata.topics[topic].error is None


def _applied_by_every_node(condition: Any, what: str, started: float) -> float:
    """Seconds from ``started`` until ``condition(node)`` holds on both nodes (each node asked until it does)."""
    for node in (1, 2):
        _wait_for(lambda n=node: condition(n), f"node {node} {what}", started)
    return time.monotonic() - started


def _wait_for(condition: Any, what: str, started: float) -> None:
    while not condition():
        assert time.monotonic() - started < PROPAGATION_BOUND_SECONDS, f"{what} not seen in {PROPAGATION_BOUND_SECONDS} s"
        time.sleep(0.1)


def test_acl_changes_through_one_node_apply_on_the_other(secured: SecuredCluster) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    topic = f"acl-{uuid.uuid4().hex[:8]}"
    admin1 = AdminClient(secured.client("admin", node=1))
    admin1.create_topics([NewTopic(topic, 2)])[topic].result(30)
    assert not _alice_may_describe(secured, 2, topic)
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    for future in admin1.create_acls([binding]).values():
        future.result(30)
    created = time.monotonic()
    # librdkafka sends CreateAcls to whichever node it likes: every node must come to apply it.
    applied = _applied_by_every_node(lambda node: _alice_may_describe(secured, node, topic), "applying the ACL",
                                     created)
    admin2 = AdminClient(secured.client("admin", node=2))
    deleted = admin2.delete_acls([AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                                                   "User:alice", "*", AclOperation.ANY, AclPermissionType.ANY)])
    for future in deleted.values():
        assert len(future.result(30)) == 1
    removed = _applied_by_every_node(lambda node: not _alice_may_describe(secured, node, topic),
                                     "applying the deletion", time.monotonic())
    print(f"ACL creation applied by both nodes in {applied:.2f} s, deletion in {removed:.2f} s")
    bob = AdminClient(secured.client("bob", node=2))  # held: a collected client may never resolve its futures
    with pytest.raises(KafkaException) as refused:  # bob has no ACL at all: refused on either node
        bob.create_topics([NewTopic(f"{topic}-bob", 1)])[f"{topic}-bob"].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_transaction_over_both_nodes_commits_through_the_internal_listener(secured: SecuredCluster) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(secured.client("admin"))
    admin.create_topics([NewTopic(topic, 8)])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:  # leaders on both nodes: the markers must cross between them
        leaders = {p.leader for p in admin.list_topics(topic, timeout=20).topics[topic].partitions.values()}
        if leaders >= {1, 2} or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert leaders >= {1, 2}, f"partition leaders {leaders}: the containers did not spread over both nodes"
    producer = Producer({**secured.client("admin"), "transactional.id": f"tx-{topic}", "message.timeout.ms": 30000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition in range(8):
        producer.produce(topic, f"v{partition}".encode(), partition=partition)
    producer.commit_transaction(60)
    consumer = Consumer({**secured.client("admin", node=2), "group.id": f"g-{topic}",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(8)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 8 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert sorted(values) == [f"v{p}".encode() for p in range(8)]
    assert "refused this node's" not in secured.logs()
