"""The native commands' mapping onto Kafka ACL resources (``gateway/native/authorization.py``), decided by
the one Authorizer: the table covers every command, and each resource kind maps as documented."""

from __future__ import annotations

import uuid

import pytest

from millrace.gateway.native.authorization import (
    RULES,
    NativeAuthorizer,
    segment_resource,
    stream_resource,
)
from millrace.gateway.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from millrace.gateway.security.principal import KafkaPrincipal, user_principal
from millrace.protocol import messages as m
from millrace.protocol.errors import AuthorizationError
from millrace.protocol.wire import Command

ALICE = user_principal("alice")


def _allow(resource_type: ResourceType, name: str, operation: AclOperation, prefixed: bool = False,
           who: KafkaPrincipal = ALICE) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL),
                      AccessControlEntry(str(who), "*", operation, AclPermissionType.ALLOW))


def _as_alice(*bindings: AclBinding) -> NativeAuthorizer:
    authorizer = Authorizer(super_users=frozenset({user_principal("admin")}), bindings=bindings)
    return NativeAuthorizer(authorizer, ALICE, "127.0.0.1", "kafka")


def test_every_command_has_a_rule() -> None:
    assert set(RULES) == set(Command)


@pytest.mark.parametrize(("scope", "stream", "expected"), [
    ("iot", "readings", (ResourceType.TOPIC, "iot/readings")),
    ("kafka", "orders", (ResourceType.TOPIC, "orders")),  # the Kafka scope's streams are its topics
    ("iot", "_RGdashboard", (ResourceType.GROUP, "iot/dashboard")),  # a reader group's state
    ("_system", "anything", None),  # super users only
])
def test_stream_resources(scope: str, stream: str, expected: object) -> None:
    assert stream_resource(scope, stream, "kafka") == expected


@pytest.mark.parametrize(("segment", "expected"), [
    ("iot/readings/0.#epoch.0", (ResourceType.TOPIC, "iot/readings")),
    ("iot/readings/3.#epoch.2#transaction.00ff", (ResourceType.TOPIC, "iot/readings")),
    ("kafka/orders/1.#epoch.0", (ResourceType.TOPIC, "orders")),
    ("kv/settings#kvtable/0", (ResourceType.TOPIC, "kv/settings")),
    ("iot/_RGg/0.#epoch.0", (ResourceType.GROUP, "iot/g")),
    ("_system/_tables/kafka_acls", None),
    ("_system/containers/0", None),
    ("loose-segment", None),
])
def test_segment_resources(segment: str, expected: object) -> None:
    assert segment_resource(segment, "kafka") == expected


def test_read_is_read_and_read_update_is_write() -> None:
    alice = _as_alice(_allow(ResourceType.TOPIC, "iot/readings", AclOperation.READ))
    assert alice.check(m.ReadEvents(scope="iot", stream="readings", segment_id=0, offset=0, max_bytes=1)) is None
    assert alice.check(m.DescribeStream(scope="iot", stream="readings")) is None  # READ implies DESCRIBE
    assert alice.check(m.ReadSegment(segment="iot/readings/0.#epoch.0", offset=0, max_length=1)) is None
    for refused in (m.AppendEvents(scope="iot", stream="readings", partition=0),
                    m.OpenWriter(scope="iot", stream="readings", writer_id="w"),
                    m.SealStream(scope="iot", stream="readings"),
                    m.TruncateStream(scope="iot", stream="readings", cut={}),
                    m.AppendToSegment(segment="iot/readings/0.#epoch.0"),
                    m.DeleteStream(scope="iot", stream="readings"),
                    m.ReadEvents(scope="iot", stream="other", segment_id=0, offset=0, max_bytes=1),
                    m.BeginTxn(scope="iot", stream="readings", txn_id=uuid.uuid4(), lease_ms=1000),
                    m.ReadSegment(segment="_system/_tables/kafka_acls", offset=0, max_length=1),
                    m.ListSegments(), m.CreateScope(scope="iot")):
        with pytest.raises(AuthorizationError):
            alice.check(refused)


def test_creation_by_the_resource_or_the_cluster() -> None:
    scoped = _as_alice(_allow(ResourceType.TOPIC, "team/", AclOperation.CREATE, prefixed=True))
    assert scoped.check(m.CreateScope(scope="team")) is None
    assert scoped.check(m.CreateStream(scope="team", stream="s")) is None
    assert scoped.check(m.CreateKvTable(scope="team", table="t")) is None
    with pytest.raises(AuthorizationError):
        scoped.check(m.CreateScope(scope="teams"))
    cluster = _as_alice(_allow(ResourceType.CLUSTER, "kafka-cluster", AclOperation.CREATE))
    assert cluster.check(m.CreateScope(scope="anything")) is None
    with pytest.raises(AuthorizationError):
        cluster.check(m.DeleteScope(scope="anything"))


def test_reader_groups_are_groups() -> None:
    alice = _as_alice(_allow(ResourceType.GROUP, "iot/", AclOperation.READ, prefixed=True))
    for request in (m.CreateStream(scope="iot", stream="_RGg"), m.AppendToSegment(segment="iot/_RGg/0.#epoch.0"),
                    m.ReadSegment(segment="iot/_RGg/0.#epoch.0", offset=0, max_length=1),
                    m.DescribeStream(scope="iot", stream="_RGg")):
        assert alice.check(request) is None
    with pytest.raises(AuthorizationError):
        alice.check(m.DeleteStream(scope="iot", stream="_RGg"))  # DELETE on the group


def test_kv_tables_read_versus_write() -> None:
    alice = _as_alice(_allow(ResourceType.TOPIC, "kv/settings", AclOperation.READ))
    assert alice.check(m.KvGet(scope="kv", table="settings", partition=0, keys=())) is None
    with pytest.raises(AuthorizationError):
        alice.check(m.KvPut(scope="kv", table="settings", partition=0, keys=(), values=(), expected=()))


def test_lists_keep_what_may_be_described() -> None:
    alice = _as_alice(_allow(ResourceType.TOPIC, "iot/readings", AclOperation.READ),
                      _allow(ResourceType.TOPIC, "iot/", AclOperation.DESCRIBE))
    streams = alice.check(m.ListStreams(scope="iot"))
    assert streams is not None
    assert streams(m.StreamsReply(streams=("readings", "other", "_RGg"))) == m.StreamsReply(streams=("readings",))
    scopes = alice.check(m.ListScopes())
    assert scopes is not None
    assert scopes({"scopes": ["iot", "secret"]}) == m.ScopesReply(scopes=("iot",))


def test_super_users_may_do_anything() -> None:
    authorizer = Authorizer(super_users=frozenset({user_principal("admin")}))
    admin = NativeAuthorizer(authorizer, user_principal("admin"), "127.0.0.1", "kafka")
    assert admin.check(m.ReadSegment(segment="_system/_tables/kafka_acls", offset=0, max_length=1)) is None
    assert admin.check(m.ForgetTxnWriter(scope="kafka", stream="t", writer_id="w")) is None
