"""A property of the whole server: random sequences of Kafka and native commands, sent by principals
holding random ACLs, against one Kafka topic, never leave the topic unreadable by a Kafka consumer and
never lose (or rewrite) a record that was acknowledged, before or after a restart.

One secured server (SASL PLAIN on the Kafka and native listeners, the authorizer on) serves every
example; each example has a topic of its own and its own ACLs, and every command's outcome, allowed or
refused, is checked only through what a consumer reads afterwards."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from millrace import BytesSerializer, StreamManager
from millrace.client.security import ClientSecurity
from millrace.client.segments import SegmentClient
from millrace.protocol import messages as m
from millrace.protocol.contracts import AttributeUpdate
from millrace.protocol.errors import StoreError
from tests.server_process import ServerProcess

ADMIN = "admin"
USERS = ("ann", "bob", "cid")
OPERATIONS = ("READ", "WRITE", "DESCRIBE", "ALTER", "ALTER_CONFIGS")
GROUP_OPERATIONS = ("READ", "DESCRIBE")


def _password(user: str) -> str:
    return f"{user}-pw"


@dataclass
class Cluster:
    server: ServerProcess
    admin: AdminClient
    topics: dict[str, list[bytes]] = field(default_factory=dict)  # every example's acknowledged values
    names: Iterator[int] = field(default_factory=itertools.count)

    def kafka_conf(self, user: str) -> dict[str, Any]:
        return {"bootstrap.servers": self.server.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": _password(user)}

    def native(self, user: str) -> SegmentClient:
        return SegmentClient("127.0.0.1", self.server.native_port, timeout=10, security=ClientSecurity.of(
            username=user, password=_password(user), mechanism="PLAIN"))

    def manager(self, user: str) -> StreamManager:
        return StreamManager(f"tcp://127.0.0.1:{self.server.native_port}", timeout=10, reconnect_timeout=5,
                             username=user, password=_password(user), mechanism="PLAIN")

    def read(self, topic: str) -> list[bytes]:
        consumer = Consumer({**self.kafka_conf(ADMIN), "group.id": f"check-{topic}", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        try:
            while (message := consumer.poll(2.0)) is not None:
                assert message.error() is None, f"{topic} unreadable: {message.error()}"
                got.append(message.value())
        finally:
            consumer.close()
        return got


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home: Path = tmp_path_factory.mktemp("integrity-property")
    users = " ".join(f'user_{u}="{_password(u)}"' for u in (ADMIN, *USERS))
    jaas = f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
    (home / "server.properties").write_text("\n".join([
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,NATIVE:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
        f"listener.name.native.plain.sasl.jaas.config={jaas}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        f"super.users=User:{ADMIN}",
    ]) + "\n")
    (home / "server.properties").chmod(0o600)
    server = ServerProcess(str(home / "data"), "--config", str(home / "server.properties")).start()
    try:
        c = Cluster(server, AdminClient({
            "bootstrap.servers": server.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": ADMIN, "sasl.password": _password(ADMIN)}))
        yield c
        # Everything every example acknowledged, read back after a restart.
        server.stop()
        server.start()
        for topic, acknowledged in c.topics.items():
            assert c.read(topic) == acknowledged, topic
    finally:
        server.kill()


Command = tuple[str, str, int]  # (user, what, a number the command uses)
KINDS = ("produce", "native_events", "raw_append", "raw_truncate", "raw_seal", "raw_attributes", "raw_delete",
         "raw_merge", "seal_stream", "truncate_stream", "split", "reader_group")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, list[str]], dict[str, list[str]], list[Command]]:
    topic_acls = {u: draw(st.lists(st.sampled_from(OPERATIONS), unique=True)) for u in USERS}
    group_acls = {u: draw(st.lists(st.sampled_from(GROUP_OPERATIONS), unique=True)) for u in USERS}
    # The super user is drawn as often as the others together: the format rules must hold for it too.
    users = st.sampled_from((ADMIN, ADMIN, ADMIN, *USERS))
    commands = draw(st.lists(st.tuples(users, st.sampled_from(KINDS), st.integers(0, 400)), min_size=4,
                             max_size=12))
    return topic_acls, group_acls, commands


def _grant(cluster: Cluster, topic: str, topic_acls: dict[str, list[str]], group_acls: dict[str, list[str]]) -> None:
    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{u}", "*",
                           getattr(AclOperation, op), AclPermissionType.ALLOW)
                for u, ops in topic_acls.items() for op in ops]
    bindings += [AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, f"User:{u}", "*",
                            getattr(AclOperation, op), AclPermissionType.ALLOW)
                 for u, ops in group_acls.items() for op in ops]
    if bindings:
        for future in cluster.admin.create_acls(bindings).values():
            future.result(30)


def _run(cluster: Cluster, topic: str, command: Command, acknowledged: list[bytes]) -> None:
    """One command; what it had acknowledged is appended to ``acknowledged``. Refusals are expected
    (that is what the ACLs and the format rules are for) and checked only by the final read."""
    user, kind, n = command
    value = f"{kind}-{user}-{n}-{len(acknowledged)}".encode()
    if kind == "produce":
        producer = Producer({**cluster.kafka_conf(user), "enable.idempotence": True, "linger.ms": 0,
                             "message.timeout.ms": 5000})
        delivered: list[bool] = []
        producer.produce(topic, value, partition=0, on_delivery=lambda err, _m: delivered.append(err is None))
        producer.flush(10)
        if delivered == [True]:
            acknowledged.append(value)
        return
    if kind == "native_events":
        with contextlib.suppress(StoreError, ValueError), cluster.manager(user) as sm, \
                sm.create_writer("kafka", topic, BytesSerializer()) as writer:
            writer.write_event(value, routing_key="k").result(10)
            acknowledged.append(value)
        return
    if kind in ("seal_stream", "truncate_stream", "split", "reader_group"):
        with contextlib.suppress(StoreError, ValueError), cluster.manager(user) as sm:
            actions: dict[str, Callable[[], object]] = {
                "seal_stream": lambda: sm.seal_stream("kafka", topic),
                "truncate_stream": lambda: sm.truncate_stream(sm.tail_cut("kafka", topic)),
                "split": lambda: sm.split_segment("kafka", topic, sm.describe_stream("kafka", topic).segments[0].segment),
                "reader_group": lambda: sm.create_reader_group(f"g{n}", "kafka", topic),
            }
            actions[kind]()
        return
    with contextlib.suppress(StoreError, ValueError), cluster.native(user) as raw:
        segment = f"kafka/{topic}/0.#epoch.0"
        other = f"kafka/{topic}/{n % 3}.#epoch.{n % 2}"
        {
            "raw_append": lambda: raw.append(segment, value * (n % 7 + 1)),
            "raw_truncate": lambda: raw.truncate(segment, n),
            "raw_seal": lambda: raw.seal(segment),
            "raw_attributes": lambda: raw.call(m.UpdateSegmentAttributes(
                segment=segment, attributes=(AttributeUpdate(f"millrace.attr{n % 3}", n),))),
            "raw_delete": lambda: raw.delete(other),
            "raw_merge": lambda: raw.merge(segment, other),
        }[kind]()


# Fifteen examples take about a minute and a half alone; a hang (a writer waiting on a topic left
# unwritable) fails at the timeout instead of passing.
@pytest.mark.timeout(600)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(scenario=scenarios())
def test_no_command_sequence_corrupts_a_topic_or_loses_an_acknowledged_record(
        cluster: Cluster, scenario: tuple[dict[str, list[str]], dict[str, list[str]], list[Command]]) -> None:
    topic_acls, group_acls, commands = scenario
    topic = f"prop-{next(cluster.names)}"
    for future in cluster.admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    _grant(cluster, topic, topic_acls, group_acls)
    acknowledged: list[bytes] = []
    cluster.topics[topic] = acknowledged
    for command in commands:
        # A refused Kafka call is checked by the read below, like any other outcome.
        with contextlib.suppress(KafkaException):
            _run(cluster, topic, command, acknowledged)
    assert cluster.read(topic) == acknowledged
