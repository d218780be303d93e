"""Authorized operations (KIP-430): the bit field Metadata, DescribeCluster, DescribeGroups,
ConsumerGroupDescribe and DescribeTopicPartitions answer is the set of operations the resource type
supports (Kafka 4's AclEntry.supportedOperations) that the principal may perform, each decided as
``authorize`` decides it; without an authorizer, all of them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.security.acls import (
    SUPPORTED_OPERATIONS,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
    operations_bit_field,
)
from millrace.gateway.security.principal import KafkaPrincipal

Op = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALICE, ADMIN = KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "admin")
HOST = "198.51.100.1"


def acl(name: str, operation: AclOperation, permission: AclPermissionType = AclPermissionType.ALLOW,
        resource_type: ResourceType = TOPIC) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, PatternType.LITERAL),
                      AccessControlEntry("User:alice", "*", operation, permission))


def test_supported_operations_are_kafka_4s() -> None:
    assert set(SUPPORTED_OPERATIONS[TOPIC]) == {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                                Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert set(SUPPORTED_OPERATIONS[GROUP]) == {Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert set(SUPPORTED_OPERATIONS[CLUSTER]) == {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                                  Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE}
    assert set(SUPPORTED_OPERATIONS[ResourceType.TRANSACTIONAL_ID]) == {Op.DESCRIBE, Op.WRITE}


def test_bit_field_sets_one_bit_per_operation_code() -> None:  # Utils.to32BitField
    assert operations_bit_field([]) == 0
    assert operations_bit_field([Op.DESCRIBE]) == 1 << 8
    assert operations_bit_field([Op.READ, Op.DESCRIBE, Op.READ]) == (1 << 3) | (1 << 8)
    # What a Kafka broker without an authorizer answers for a topic and for the cluster.
    assert operations_bit_field(SUPPORTED_OPERATIONS[TOPIC]) == 3576
    assert operations_bit_field(SUPPORTED_OPERATIONS[CLUSTER]) == 8096


@pytest.mark.parametrize(("bindings", "expected"), [
    ([], set()),  # no ACL and allow.everyone.if.no.acl.found off: nothing
    ([acl("t", Op.READ)], {Op.READ, Op.DESCRIBE}),  # READ implies DESCRIBE
    ([acl("t", Op.ALTER_CONFIGS)], {Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}),
    ([acl("t", Op.ALL)], set(SUPPORTED_OPERATIONS[TOPIC])),
    ([acl("t", Op.ALL), acl("t", Op.DESCRIBE, AclPermissionType.DENY)], set(SUPPORTED_OPERATIONS[TOPIC]) - {Op.DESCRIBE}),
    ([acl("other", Op.ALL)], set()),  # another topic's ACL
], ids=["none", "read", "alter-configs", "all", "all-but-denied-describe", "other-topic"])
def test_authorized_operations_are_the_principals(bindings: list[AclBinding], expected: set[AclOperation]) -> None:
    authorizer = Authorizer(frozenset({ADMIN}), bindings=bindings)
    assert set(authorizer.authorized_operations(ALICE, HOST, TOPIC, "t")) == expected
    assert authorizer.authorized_operations(ADMIN, HOST, TOPIC, "t") == list(SUPPORTED_OPERATIONS[TOPIC])


def test_allow_everyone_if_no_acl_found_allows_every_supported_operation() -> None:
    authorizer = Authorizer(allow_everyone_if_no_acl_found=True)
    assert authorizer.authorized_operations(ALICE, HOST, GROUP, "g") == list(SUPPORTED_OPERATIONS[GROUP])


class CountingAuthorizer(Authorizer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.questions = 0

    def authorize(self, *args: Any) -> bool:
        self.questions += 1
        return super().authorize(*args)


def context(authorizer: Authorizer | None) -> RequestContext:
    broker: Any = SimpleNamespace(acls=None if authorizer is None else SimpleNamespace(authorizer=authorizer))
    session: Any = SimpleNamespace(principal=ALICE)
    return RequestContext(broker, 3, 12, 1, "client", f"{HOST}:40000", session=session)


def test_request_context_without_an_authorizer_answers_every_supported_operation() -> None:
    ctx = context(None)
    assert ctx.authorized_operations(TOPIC, "t") == 3576
    assert ctx.authorized_operations(CLUSTER) == 8096
    assert ctx.authorized_operations(GROUP, "g") == operations_bit_field(SUPPORTED_OPERATIONS[GROUP])


def test_request_context_answers_the_principals_operations_once_per_resource() -> None:
    authorizer = CountingAuthorizer(bindings=[acl("t", Op.WRITE), acl("kafka-cluster", Op.DESCRIBE,
                                                                     resource_type=CLUSTER)])
    ctx = context(authorizer)
    assert ctx.authorized_operations(TOPIC, "t") == operations_bit_field([Op.WRITE, Op.DESCRIBE])
    asked = authorizer.questions
    assert asked == len(SUPPORTED_OPERATIONS[TOPIC])
    assert ctx.authorized_operations(TOPIC, "t") == operations_bit_field([Op.WRITE, Op.DESCRIBE])
    assert authorizer.questions == asked  # cached for the rest of the request
    assert ctx.authorized_operations(TOPIC, "u") == 0
    assert ctx.authorized_operations(CLUSTER) == operations_bit_field([Op.DESCRIBE])
    # A new request asks again (the ACLs may have changed in between).
    assert context(authorizer).authorized_operations(TOPIC, "t") == operations_bit_field([Op.WRITE, Op.DESCRIBE])
    assert authorizer.questions > asked + len(SUPPORTED_OPERATIONS[TOPIC]) + len(SUPPORTED_OPERATIONS[CLUSTER])
