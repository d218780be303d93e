"""ACLs: Kafka's wire codes, filter matching, CreateAcls/DeleteAcls validation, StandardAuthorizer's
decisions on Kafka's documented examples, a model test against a plain scan of every ACL, and the table
that keeps them."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millrace.gateway.security.acl_table import ACL_TABLE, AclTable
from millrace.gateway.security.acls import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    acl_key,
    client_host,
    decode_binding,
    encode_binding,
    validate_filter,
    validate_new_binding,
)
from millrace.gateway.security.principal import KafkaPrincipal
from millrace.store.tables import TableStore
from tests.tables.harness import StoreHarness, make_harness

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE, BOB = KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "bob")
HOST = "198.51.100.1"


def acl(name: str, operation: AclOperation, permission: AclPermissionType = ALLOW, principal: str = "User:alice",
        host: str = "*", pattern_type: PatternType = LITERAL, resource_type: ResourceType = TOPIC) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern_type),
                      AccessControlEntry(principal, host, operation, permission))


def can(authorizer: Authorizer, principal: KafkaPrincipal, operation: AclOperation, name: str,
        host: str = HOST, resource_type: ResourceType = TOPIC) -> bool:
    return authorizer.authorize(principal, host, operation, resource_type, name)


# Wire codes.

def test_codes_are_kafkas() -> None:
    assert {t.name: t.value for t in ResourceType} == {
        "UNKNOWN": 0, "ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5,
        "DELEGATION_TOKEN": 6, "USER": 7}
    assert {t.name: t.value for t in PatternType} == {"UNKNOWN": 0, "ANY": 1, "MATCH": 2, "LITERAL": 3,
                                                      "PREFIXED": 4}
    assert {o.name: o.value for o in AclOperation} == {
        "UNKNOWN": 0, "ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7,
        "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12,
        "CREATE_TOKENS": 13, "DESCRIBE_TOKENS": 14, "TWO_PHASE_COMMIT": 15}
    assert {p.name: p.value for p in AclPermissionType} == {"UNKNOWN": 0, "ANY": 1, "DENY": 2, "ALLOW": 3}


def test_unknown_codes_read_as_unknown() -> None:  # Kafka's fromCode
    assert ResourceType(99) is ResourceType.UNKNOWN
    assert PatternType(-1) is PatternType.UNKNOWN
    assert AclOperation(16) is AclOperation.UNKNOWN
    assert AclPermissionType(4) is AclPermissionType.UNKNOWN


# Kafka's documented examples and StandardAuthorizer's rules.

def test_prefixed_acl_covers_names_starting_with_its_prefix() -> None:
    authorizer = Authorizer(bindings=[acl("payments-", AclOperation.READ, pattern_type=PREFIXED)])
    assert can(authorizer, ALICE, AclOperation.READ, "payments-eu")
    assert can(authorizer, ALICE, AclOperation.READ, "payments-")
    assert not can(authorizer, ALICE, AclOperation.READ, "payments")
    assert not can(authorizer, ALICE, AclOperation.READ, "paymentsx")
    assert not can(authorizer, ALICE, AclOperation.WRITE, "payments-eu")
    assert not can(authorizer, BOB, AclOperation.READ, "payments-eu")
    assert not can(authorizer, ALICE, AclOperation.READ, "payments-eu", resource_type=GROUP)


def test_deny_wins_over_allow() -> None:
    # kafka-acls.sh --add --allow-principal User:'*' --allow-host '*' --deny-principal User:BadBob
    #   --deny-host 198.51.100.3 --operation Read --topic Test-topic
    bad_bob = KafkaPrincipal("User", "BadBob")
    authorizer = Authorizer(bindings=[
        acl("Test-topic", AclOperation.READ, ALLOW, "User:*", "*"),
        acl("Test-topic", AclOperation.READ, DENY, "User:BadBob", "198.51.100.3"),
    ])
    assert not can(authorizer, bad_bob, AclOperation.READ, "Test-topic", host="198.51.100.3")
    assert can(authorizer, bad_bob, AclOperation.READ, "Test-topic", host="198.51.100.4")
    assert can(authorizer, ALICE, AclOperation.READ, "Test-topic", host="198.51.100.3")
    # A DENY through a wildcard pattern beats an ALLOW on the very name.
    authorizer.add([acl("Test-", AclOperation.READ, DENY, "User:alice", pattern_type=PREFIXED)])
    assert not can(authorizer, ALICE, AclOperation.READ, "Test-topic")


def test_operation_implications_widen_allows_only() -> None:
    authorizer = Authorizer(bindings=[acl("t", operation) for operation in
                                      (AclOperation.READ, AclOperation.ALTER_CONFIGS)])
    assert can(authorizer, ALICE, AclOperation.DESCRIBE, "t")
    assert can(authorizer, ALICE, AclOperation.DESCRIBE_CONFIGS, "t")
    assert not can(authorizer, ALICE, AclOperation.WRITE, "t")
    assert not can(authorizer, ALICE, AclOperation.ALTER, "t")  # ALTER_CONFIGS does not imply ALTER
    for implying in (AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER):
        assert can(Authorizer(bindings=[acl("t", implying)]), ALICE, AclOperation.DESCRIBE, "t")
    assert not can(Authorizer(bindings=[acl("t", AclOperation.CREATE)]), ALICE, AclOperation.DESCRIBE, "t")
    assert not can(Authorizer(bindings=[acl("t", AclOperation.DESCRIBE)]), ALICE, AclOperation.READ, "t")
    # A DENY of READ leaves DESCRIBE alone; a DENY of ALL denies everything.
    authorizer = Authorizer(bindings=[acl("t", AclOperation.ALL), acl("t", AclOperation.READ, DENY)])
    assert not can(authorizer, ALICE, AclOperation.READ, "t")
    assert can(authorizer, ALICE, AclOperation.DESCRIBE, "t")
    assert can(authorizer, ALICE, AclOperation.WRITE, "t")
    authorizer.add([acl("t", AclOperation.ALL, DENY)])
    for operation in (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE):
        assert not can(authorizer, ALICE, operation, "t")


def test_wildcard_principal_host_and_resource() -> None:
    authorizer = Authorizer(bindings=[acl("*", AclOperation.WRITE, principal="User:*", host="*")])
    assert can(authorizer, BOB, AclOperation.WRITE, "anything", host="203.0.113.9")
    assert can(authorizer, KafkaPrincipal("User", "ANONYMOUS"), AclOperation.WRITE, "x")
    # Kafka matches User:* for every principal, whatever its type (StandardAuthorizerData.matchingPrincipals).
    assert can(authorizer, KafkaPrincipal("Group", "ops"), AclOperation.WRITE, "x")
    assert not can(Authorizer(bindings=[acl("*", AclOperation.WRITE, principal="Group:*")]),
                   KafkaPrincipal("Group", "ops"), AclOperation.WRITE, "x")  # no other wildcard principal
    host_bound = Authorizer(bindings=[acl("t", AclOperation.READ, host="198.51.100.7")])
    assert can(host_bound, ALICE, AclOperation.READ, "t", host="198.51.100.7")
    assert not can(host_bound, ALICE, AclOperation.READ, "t", host="198.51.100.8")


def test_super_users_may_do_anything() -> None:
    authorizer = Authorizer(frozenset({ALICE}), bindings=[acl("*", AclOperation.ALL, DENY, "User:*")])
    assert can(authorizer, ALICE, AclOperation.DELETE, "t")
    assert can(authorizer, ALICE, AclOperation.CLUSTER_ACTION, "kafka-cluster", resource_type=CLUSTER)
    assert not can(authorizer, BOB, AclOperation.DESCRIBE, "t")
    assert authorizer.authorize_by_resource_type(ALICE, HOST, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID)


def test_allow_everyone_if_no_acl_found() -> None:
    assert can(Authorizer(allow_everyone_if_no_acl_found=True), ALICE, AclOperation.READ, "t")
    assert not can(Authorizer(), ALICE, AclOperation.READ, "t")
    authorizer = Authorizer(allow_everyone_if_no_acl_found=True, bindings=[
        acl("t", AclOperation.WRITE, principal="User:bob"),
        acl("logs-", AclOperation.READ, pattern_type=PREFIXED),
        acl("t", AclOperation.READ, resource_type=GROUP),
    ])
    # An ACL covering the resource, for anyone and any operation, ends the rule.
    assert not can(authorizer, ALICE, AclOperation.READ, "t")
    assert not can(authorizer, BOB, AclOperation.READ, "t")
    assert can(authorizer, BOB, AclOperation.WRITE, "t")
    assert not can(authorizer, BOB, AclOperation.READ, "logs-app")
    # ACLs on other names or other resource types do not.
    assert can(authorizer, ALICE, AclOperation.READ, "u")
    assert can(authorizer, ALICE, AclOperation.READ, "logs")
    assert can(authorizer, ALICE, AclOperation.READ, "t", resource_type=ResourceType.TRANSACTIONAL_ID)


def test_authorize_refuses_filter_values() -> None:
    with pytest.raises(ValueError):
        can(Authorizer(), ALICE, AclOperation.ANY, "t")
    with pytest.raises(ValueError):
        can(Authorizer(), ALICE, AclOperation.READ, "t", resource_type=ResourceType.ANY)
    with pytest.raises(ValueError):
        Authorizer().authorize_by_resource_type(ALICE, HOST, AclOperation.UNKNOWN, TOPIC)


def test_authorize_by_resource_type() -> None:
    write, txn = AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID

    def allowed(*bindings: AclBinding, allow_everyone: bool = False) -> bool:
        authorizer = Authorizer(allow_everyone_if_no_acl_found=allow_everyone, bindings=bindings)
        return authorizer.authorize_by_resource_type(ALICE, HOST, write, txn)

    assert not allowed()
    assert allowed(allow_everyone=True)
    assert allowed(acl("app-1", write, resource_type=txn))
    assert allowed(acl("app-", write, pattern_type=PREFIXED, resource_type=txn))
    assert allowed(acl("app-1", AclOperation.ALL, resource_type=txn))
    assert allowed(acl("app-1", write, principal="User:*", resource_type=txn))
    assert not allowed(acl("app-1", write, resource_type=TOPIC))
    assert not allowed(acl("app-1", write, principal="User:bob", resource_type=txn))
    assert not allowed(acl("app-1", write, host="203.0.113.1", resource_type=txn))
    assert not allowed(acl("app-1", AclOperation.DESCRIBE, resource_type=txn))
    assert not allowed(acl("app-1", AclOperation.READ, resource_type=txn))  # no implications here
    # A DENY shadows the ALLOWs it covers: the same literal, or a prefix of the name.
    assert not allowed(acl("app-1", write, resource_type=txn), acl("app-1", write, DENY, resource_type=txn))
    assert not allowed(acl("app-1", write, resource_type=txn),
                       acl("app", write, DENY, pattern_type=PREFIXED, resource_type=txn))
    assert not allowed(acl("app-1", write, pattern_type=PREFIXED, resource_type=txn),
                       acl("app-", write, DENY, pattern_type=PREFIXED, resource_type=txn))
    # ...and no other: a literal DENY does not shadow a prefixed ALLOW, nor a DENY on a longer name.
    assert allowed(acl("app-", write, pattern_type=PREFIXED, resource_type=txn),
                   acl("app-", write, DENY, resource_type=txn))
    assert allowed(acl("app-", write, pattern_type=PREFIXED, resource_type=txn),
                   acl("app-1", write, DENY, pattern_type=PREFIXED, resource_type=txn))
    assert allowed(acl("app-1", write, resource_type=txn), acl("app-2", write, resource_type=txn),
                   acl("app-1", write, DENY, resource_type=txn))
    # The wildcard: its ALLOW allows; its DENY denies, whatever else allows.
    assert allowed(acl("*", write, resource_type=txn), acl("app-1", write, DENY, resource_type=txn))
    assert not allowed(acl("*", write, resource_type=txn), acl("app-1", write, resource_type=txn),
                       acl("*", write, DENY, resource_type=txn))
    # Allow-everyone holds while no ACL covers the name Kafka probes with ("hardcode").
    assert allowed(acl("app-1", write, DENY, resource_type=txn), allow_everyone=True)
    assert not allowed(acl("hard", write, DENY, pattern_type=PREFIXED, resource_type=txn), allow_everyone=True)


def test_add_remove_describe() -> None:
    first, second, third = acl("a", AclOperation.READ), acl("b", AclOperation.WRITE), acl("a", AclOperation.READ, DENY)
    authorizer = Authorizer()
    authorizer.add([first, second, first])
    authorizer.add([third])
    assert len(authorizer) == 3 and authorizer.bindings() == [first, second, third]
    a_filter = AclBindingFilter(ResourcePatternFilter(TOPIC, "a", LITERAL))
    assert authorizer.describe(a_filter) == [first, third]
    assert authorizer.remove(a_filter) == [first, third]
    assert authorizer.bindings() == [second] and authorizer.remove(a_filter) == []
    assert not can(authorizer, ALICE, AclOperation.READ, "a") and can(authorizer, ALICE, AclOperation.WRITE, "b")
    assert authorizer.remove(AclBindingFilter.ANY) == [second] and len(authorizer) == 0
    assert can(Authorizer(allow_everyone_if_no_acl_found=True, bindings=authorizer.bindings()),
               ALICE, AclOperation.READ, "a")
    with pytest.raises(AclError, match="Invalid operation ANY"):  # nothing added when one is invalid
        authorizer.add([first, acl("c", AclOperation.ANY)])
    assert len(authorizer) == 0


# Filters: ResourcePatternFilter.matches and AccessControlEntryFilter.matches, as Kafka's.

FOO = ResourcePattern(TOPIC, "foo", LITERAL)
WILDCARD = ResourcePattern(TOPIC, "*", LITERAL)
FO_PREFIX = ResourcePattern(TOPIC, "fo", PREFIXED)
FOO_PREFIX = ResourcePattern(TOPIC, "foo", PREFIXED)
FOOB_PREFIX = ResourcePattern(TOPIC, "foob", PREFIXED)
BAR = ResourcePattern(TOPIC, "bar", LITERAL)
GROUP_FOO = ResourcePattern(GROUP, "foo", LITERAL)
PATTERNS = [FOO, WILDCARD, FO_PREFIX, FOO_PREFIX, FOOB_PREFIX, BAR, GROUP_FOO]


@pytest.mark.parametrize(("pattern_filter", "matched"), [
    (ResourcePatternFilter.ANY, PATTERNS),
    (ResourcePatternFilter(TOPIC, None, PatternType.ANY), [FOO, WILDCARD, FO_PREFIX, FOO_PREFIX, FOOB_PREFIX, BAR]),
    (ResourcePatternFilter(TOPIC, "foo", LITERAL), [FOO]),
    (ResourcePatternFilter(TOPIC, "foo", PREFIXED), [FOO_PREFIX]),
    (ResourcePatternFilter(TOPIC, "foo", PatternType.ANY), [FOO, FOO_PREFIX]),
    (ResourcePatternFilter(TOPIC, "foo", PatternType.MATCH), [FOO, WILDCARD, FO_PREFIX, FOO_PREFIX]),
    (ResourcePatternFilter(TOPIC, None, PatternType.MATCH), [FOO, WILDCARD, FO_PREFIX, FOO_PREFIX, FOOB_PREFIX, BAR]),
    (ResourcePatternFilter(TOPIC, None, LITERAL), [FOO, WILDCARD, BAR]),
    (ResourcePatternFilter(TOPIC, None, PREFIXED), [FO_PREFIX, FOO_PREFIX, FOOB_PREFIX]),
    (ResourcePatternFilter(TOPIC, "*", LITERAL), [WILDCARD]),
    (ResourcePatternFilter(TOPIC, "*", PatternType.MATCH), [WILDCARD]),
    (ResourcePatternFilter(TOPIC, "foobar", PatternType.MATCH), [WILDCARD, FO_PREFIX, FOO_PREFIX, FOOB_PREFIX]),
    (ResourcePatternFilter(ResourceType.ANY, "foo", PatternType.MATCH), [FOO, WILDCARD, FO_PREFIX, FOO_PREFIX,
                                                                        GROUP_FOO]),
    (ResourcePatternFilter(ResourceType.ANY, "foo", LITERAL), [FOO, GROUP_FOO]),
    (ResourcePatternFilter(ResourceType.UNKNOWN, None, PatternType.ANY), []),
    (ResourcePatternFilter(TOPIC, None, PatternType.UNKNOWN), []),
])
def test_pattern_filter_matches(pattern_filter: ResourcePatternFilter, matched: list[ResourcePattern]) -> None:
    assert [pattern for pattern in PATTERNS if pattern_filter.matches(pattern)] == matched


ENTRY = AccessControlEntry("User:alice", "*", AclOperation.READ, ALLOW)
ANY_PRINCIPAL_ENTRY = AccessControlEntry("User:*", "10.0.0.1", AclOperation.ALL, DENY)


@pytest.mark.parametrize(("entry_filter", "matches_entry", "matches_any_principal_entry"), [
    (AccessControlEntryFilter.ANY, True, True),
    (AccessControlEntryFilter(principal="User:alice"), True, False),  # a filter's User:* is no wildcard
    (AccessControlEntryFilter(principal="User:*"), False, True),
    (AccessControlEntryFilter(host="*"), True, False),
    (AccessControlEntryFilter(host="10.0.0.1"), False, True),
    (AccessControlEntryFilter(operation=AclOperation.READ), True, False),  # nor is an entry's ALL
    (AccessControlEntryFilter(operation=AclOperation.ALL), False, True),
    (AccessControlEntryFilter(permission_type=DENY), False, True),
    (AccessControlEntryFilter("User:alice", "*", AclOperation.READ, ALLOW), True, False),
])
def test_entry_filter_matches(entry_filter: AccessControlEntryFilter, matches_entry: bool,
                              matches_any_principal_entry: bool) -> None:
    assert entry_filter.matches(ENTRY) is matches_entry
    assert entry_filter.matches(ANY_PRINCIPAL_ENTRY) is matches_any_principal_entry
    binding_filter = AclBindingFilter(ResourcePatternFilter(TOPIC, "foo", PatternType.MATCH), entry_filter)
    assert binding_filter.matches(AclBinding(FO_PREFIX, ENTRY)) is matches_entry
    assert not binding_filter.matches(AclBinding(BAR, ENTRY))


# Validation: what CreateAcls and DeleteAcls refuse.

def binding(resource_type: ResourceType = TOPIC, name: str = "t", pattern_type: PatternType = LITERAL,
            principal: str = "User:alice", host: str = "*", operation: AclOperation = AclOperation.READ,
            permission: AclPermissionType = ALLOW) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern_type),
                      AccessControlEntry(principal, host, operation, permission))


@pytest.mark.parametrize(("refused", "message"), [
    (binding(CLUSTER, "my-cluster"), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (binding(name=""), "Invalid empty resource name"),
    (binding(name="", pattern_type=PREFIXED), "Invalid empty resource name"),
    (binding(ResourceType.ANY), "Invalid resourceType ANY"),
    (binding(ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (binding(pattern_type=PatternType.MATCH), "Invalid patternType MATCH"),
    (binding(pattern_type=PatternType.ANY), "Invalid patternType ANY"),
    (binding(pattern_type=PatternType.UNKNOWN), "Invalid patternType UNKNOWN"),
    (binding(operation=AclOperation.ANY), "Invalid operation ANY"),
    (binding(operation=AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
    (binding(permission=AclPermissionType.ANY), "Invalid permissionType ANY"),
    (binding(permission=AclPermissionType.UNKNOWN), "Invalid permissionType UNKNOWN"),
    (binding(principal="alice"), "Could not parse principal from `alice` (no colon is present separating the "
                                 "principal type from the principal name)"),
])
def test_create_refuses(refused: AclBinding, message: str) -> None:
    with pytest.raises(AclError) as raised:
        validate_new_binding(refused)
    assert (raised.value.code, raised.value.message) == ("INVALID_REQUEST", message)


@pytest.mark.parametrize("accepted", [
    binding(),
    binding(CLUSTER, "kafka-cluster", operation=AclOperation.IDEMPOTENT_WRITE),
    binding(name="payments-", pattern_type=PREFIXED),
    binding(name="*"),
    binding(principal="User:*"),
    binding(principal="User:CN=alice,O=Example:x"),  # the name keeps further colons
    binding(host="10.0.0.1"),
    binding(host="broker.example.com"),  # Kafka stores any host text (it never matches: a warning says so)
    binding(host="::1"),  # likewise: Kafka matches IPv6 clients as 0:0:0:0:0:0:0:1
    binding(host="::1"),
    binding(host="0:0:0:0:0:0:0:1"),  # as Java writes a client's IPv6 address
    binding(ResourceType.TRANSACTIONAL_ID, "app-1", operation=AclOperation.TWO_PHASE_COMMIT, permission=DENY),
])
def test_create_accepts(accepted: AclBinding) -> None:
    validate_new_binding(accepted)


def test_delete_refuses_unknown_filters() -> None:
    validate_filter(AclBindingFilter.ANY)
    for unknown, message in [
        (AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN)), "Unknown patternFilter."),
        (AclBindingFilter(ResourcePatternFilter(pattern_type=PatternType.UNKNOWN)), "Unknown patternFilter."),
        (AclBindingFilter(entry_filter=AccessControlEntryFilter(operation=AclOperation.UNKNOWN)),
         "Unknown entryFilter."),
        (AclBindingFilter(entry_filter=AccessControlEntryFilter(permission_type=AclPermissionType.UNKNOWN)),
         "Unknown entryFilter."),
    ]:
        with pytest.raises(AclError, match=message.replace(".", r"\.")):
            validate_filter(unknown)


# Storage encoding.

@given(st.builds(binding, st.sampled_from(ResourceType), st.text(), st.sampled_from(PatternType), st.text(),
                 st.text(), st.sampled_from(AclOperation), st.sampled_from(AclPermissionType)))
def test_encoding_round_trips(any_binding: AclBinding) -> None:
    assert decode_binding(encode_binding(any_binding)) == any_binding
    assert acl_key(any_binding) == acl_key(decode_binding(encode_binding(any_binding)))
    assert len(acl_key(any_binding)) == 64


def test_keys_differ_and_bad_encodings_are_refused() -> None:
    assert acl_key(binding(name="a")) != acl_key(binding(name="b"))
    assert acl_key(binding(permission=ALLOW)) != acl_key(binding(permission=DENY))
    for bad in (b"", b"{}", b"[1]", b'{"resource_type": "NOPE"}', b"\xff"):
        with pytest.raises(ValueError):
            decode_binding(bad)


# The model test: Authorizer against a plain scan of every binding.

IMPLIED_BY = {  # an ALLOW of the key also allows these (StandardAuthorizerData)
    AclOperation.READ: {AclOperation.DESCRIBE},
    AclOperation.WRITE: {AclOperation.DESCRIBE},
    AclOperation.DELETE: {AclOperation.DESCRIBE},
    AclOperation.ALTER: {AclOperation.DESCRIBE},
    AclOperation.ALTER_CONFIGS: {AclOperation.DESCRIBE_CONFIGS},
}


def covers(pattern: ResourcePattern, name: str) -> bool:
    if pattern.pattern_type == LITERAL:
        return pattern.name == name or pattern.name == "*"
    return name.startswith(pattern.name)


def applies_to(entry: AccessControlEntry, principal: KafkaPrincipal, host: str) -> bool:
    return entry.principal in (str(principal), "User:*") and entry.host in (host, "*")


def reference_authorize(bindings: Sequence[AclBinding], super_users: frozenset[KafkaPrincipal],
                        allow_everyone: bool, principal: KafkaPrincipal, host: str, operation: AclOperation,
                        resource_type: ResourceType, name: str) -> bool:
    if principal in super_users:
        return True
    covering = [b for b in bindings if b.pattern.resource_type == resource_type and covers(b.pattern, name)]
    applying = [b.entry for b in covering if applies_to(b.entry, principal, host)]
    for entry in applying:
        if entry.permission_type == DENY and entry.operation in (operation, AclOperation.ALL):
            return False
    for entry in applying:
        if entry.permission_type == ALLOW and (entry.operation in (operation, AclOperation.ALL)
                                               or operation in IMPLIED_BY.get(entry.operation, set())):
            return True
    return allow_everyone and not covering


def reference_authorize_by_resource_type(bindings: Sequence[AclBinding], super_users: frozenset[KafkaPrincipal],
                                         allow_everyone: bool, principal: KafkaPrincipal, host: str,
                                         operation: AclOperation, resource_type: ResourceType) -> bool:
    """Kafka's Authorizer.authorizeByResourceType, read plainly."""
    if reference_authorize(bindings, super_users, allow_everyone, principal, host, operation, resource_type,
                           "hardcode"):
        return True
    applying = [b for b in bindings if b.pattern.resource_type == resource_type
                and applies_to(b.entry, principal, host) and b.entry.operation in (operation, AclOperation.ALL)]
    denies = [b.pattern for b in applying if b.entry.permission_type == DENY]
    allows = [b.pattern for b in applying if b.entry.permission_type == ALLOW]
    if any(p.pattern_type == LITERAL and p.name == "*" for p in denies):
        return False
    if any(p.pattern_type == LITERAL and p.name == "*" for p in allows):
        return True

    def shadowed(allow: ResourcePattern) -> bool:
        return any(d.pattern_type == PREFIXED and allow.name.startswith(d.name) for d in denies) or (
            allow.pattern_type == LITERAL and any(d.pattern_type == LITERAL and d.name == allow.name for d in denies))

    return any(not shadowed(allow) for allow in allows)


# Small sets of values, so that ACLs meet on one resource, principal and host, and names, prefixes and the
# wildcard collide; "hardcode" is the name Kafka's authorizeByResourceType probes with.
ACL_NAMES = st.sampled_from(["a", "b", "ab", "abb", "*", "hard", "hardcode"])
ASKED_NAMES = st.one_of(ACL_NAMES, st.text(alphabet="ab", min_size=1, max_size=4), st.sampled_from(["hardcodes", "h"]))
# Mostly the operations that imply or are implied, so that ALLOWs and DENYs of them meet; now and then any.
RELATED_OPERATIONS = [AclOperation.ALL, AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE,
                      AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS]
OPERATIONS = st.one_of(st.sampled_from(RELATED_OPERATIONS), st.sampled_from(
    [op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)]))
ASKED_OPERATIONS = st.sampled_from([*RELATED_OPERATIONS[1:], AclOperation.DELETE])
PRINCIPALS = st.sampled_from(["User:alice", "User:*", "User:bob", "Group:alice"])
ASKED_PRINCIPALS = st.sampled_from([ALICE, BOB, KafkaPrincipal("User", "carol"), KafkaPrincipal("Group", "alice")])
HOSTS = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])
ASKED_HOSTS = st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.3"])
RESOURCE_TYPES = st.sampled_from([TOPIC, GROUP])
BINDINGS = st.lists(st.builds(binding, RESOURCE_TYPES, ACL_NAMES, st.sampled_from([LITERAL, PREFIXED]), PRINCIPALS,
                              HOSTS, OPERATIONS, st.sampled_from([ALLOW, DENY])), max_size=16)
Question = tuple[KafkaPrincipal, str, AclOperation, ResourceType, str]


@st.composite
def questions_for(draw: st.DrawFn, bindings: Sequence[AclBinding]) -> list[Question]:
    """Questions at random, and one aimed at each binding (its resource, principal and host where they are
    not wildcards), so that the other ACLs on that resource are weighed against it."""
    questions = draw(st.lists(st.tuples(ASKED_PRINCIPALS, ASKED_HOSTS, ASKED_OPERATIONS, RESOURCE_TYPES,
                                        ASKED_NAMES), min_size=1, max_size=10))
    for aimed in bindings:
        pattern, entry = aimed.pattern, aimed.entry
        principal = draw(ASKED_PRINCIPALS) if entry.principal == "User:*" else KafkaPrincipal.parse(entry.principal)
        host = draw(ASKED_HOSTS) if entry.host == "*" else entry.host
        name = draw(ASKED_NAMES) if pattern.name == "*" else pattern.name
        if pattern.pattern_type == PREFIXED:
            name += draw(st.sampled_from(["", "a", "b"]))
        questions.append((principal, host, draw(ASKED_OPERATIONS), pattern.resource_type, name))
    return questions


FILTERS = st.builds(AclBindingFilter,
                    st.builds(ResourcePatternFilter, st.sampled_from([ResourceType.ANY, TOPIC, GROUP]),
                              st.one_of(st.none(), ACL_NAMES), st.sampled_from(PatternType)),
                    st.builds(AccessControlEntryFilter, st.one_of(st.none(), PRINCIPALS),
                              st.one_of(st.none(), HOSTS), st.sampled_from(AclOperation),
                              st.sampled_from(AclPermissionType)))
SUPER_USERS = st.sampled_from([frozenset(), frozenset({BOB})])


def assert_same_answers(authorizer: Authorizer, bindings: Sequence[AclBinding],
                        questions: Sequence[Question]) -> None:
    super_users, allow_everyone = authorizer.super_users, authorizer.allow_everyone_if_no_acl_found
    for principal, host, operation, resource_type, name in questions:
        expected = reference_authorize(bindings, super_users, allow_everyone, principal, host, operation,
                                       resource_type, name)
        assert authorizer.authorize(principal, host, operation, resource_type, name) is expected, \
            (principal, host, operation, resource_type, name)
        expected = reference_authorize_by_resource_type(bindings, super_users, allow_everyone, principal, host,
                                                        operation, resource_type)
        assert authorizer.authorize_by_resource_type(principal, host, operation, resource_type) is expected, \
            (principal, host, operation, resource_type)


@settings(max_examples=300, deadline=None)
@given(BINDINGS, SUPER_USERS, st.booleans(), st.data())
def test_authorizer_answers_as_a_scan_of_every_acl(bindings: list[AclBinding], super_users: frozenset[KafkaPrincipal],
                                                   allow_everyone: bool, data: st.DataObject) -> None:
    authorizer = Authorizer(super_users, allow_everyone, bindings)
    unique = list(dict.fromkeys(bindings))
    assert authorizer.bindings() == unique and len(authorizer) == len(unique)
    assert_same_answers(authorizer, unique, data.draw(questions_for(unique)))


@settings(max_examples=200, deadline=None)
@given(BINDINGS, BINDINGS, FILTERS, st.booleans(), st.data())
def test_removal_leaves_the_index_as_if_built_anew(bindings: list[AclBinding], more: list[AclBinding],
                                                  acl_filter: AclBindingFilter, allow_everyone: bool,
                                                  data: st.DataObject) -> None:
    authorizer = Authorizer(frozenset(), allow_everyone, bindings)
    authorizer.add(more)
    everything = list(dict.fromkeys(bindings + more))
    questions = data.draw(questions_for(everything))
    matched = [b for b in everything if acl_filter.matches(b)]
    assert authorizer.describe(acl_filter) == matched
    assert authorizer.remove(acl_filter) == matched
    remaining = [b for b in everything if b not in matched]
    assert authorizer.bindings() == remaining
    assert_same_answers(authorizer, remaining, questions)
    assert authorizer.remove(AclBindingFilter.ANY) == remaining
    assert_same_answers(authorizer, [], questions)


# AclTable over a real TableStore.

@pytest.fixture
def harness(request: pytest.FixtureRequest, tmp_path) -> StoreHarness:
    return make_harness(request, tmp_path)


@pytest.fixture
def tables(harness: StoreHarness) -> TableStore:
    return TableStore(harness.store)


def stored(tables: TableStore) -> set[AclBinding]:
    return {decode_binding(entry.value) for entry in tables.entries(ACL_TABLE)}


def test_load_creates_the_table_once(tables: TableStore) -> None:
    acl_table = AclTable(tables)
    acl_table.load()
    assert tables.exists(ACL_TABLE) and len(acl_table.authorizer) == 0
    AclTable(tables).load()  # present already: loaded, not created again


def test_create_delete_describe_are_durable(harness: StoreHarness, tables: TableStore) -> None:
    acl_table = AclTable(tables, super_users=frozenset({BOB}))
    acl_table.load()
    read_a, write_b = acl("a", AclOperation.READ), acl("b-", AclOperation.WRITE, pattern_type=PREFIXED)
    results = acl_table.create([read_a, acl("a", AclOperation.ANY), write_b, read_a])
    assert results[0] is None and results[2] is None and results[3] is None
    assert isinstance(results[1], AclError) and results[1].message == "Invalid operation ANY"
    assert stored(tables) == {read_a, write_b}
    assert acl_table.describe(AclBindingFilter.ANY) == [read_a, write_b]
    authorizer = acl_table.authorizer
    assert can(authorizer, ALICE, AclOperation.WRITE, "b-1") and can(authorizer, BOB, AclOperation.DELETE, "z")
    assert acl_table.create([read_a]) == [None] and len(acl_table.authorizer) == 2  # a duplicate: no-op

    reopened_tables = TableStore(harness.restart())
    reopened = AclTable(reopened_tables)
    reopened.load()
    assert set(reopened.describe(AclBindingFilter.ANY)) == {read_a, write_b}

    a_filter = AclBindingFilter(ResourcePatternFilter(TOPIC, "a", PatternType.MATCH))
    unknown = AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN))
    deleted = reopened.delete([a_filter, unknown, AclBindingFilter.ANY])
    assert deleted[0] == [read_a] and set(deleted[2]) == {read_a, write_b}  # each against the ACLs before
    assert isinstance(deleted[1], AclError) and deleted[1].message == "Unknown patternFilter."
    assert len(reopened.authorizer) == 0 and stored(reopened_tables) == set()
    assert reopened.delete([AclBindingFilter.ANY]) == [[]]


def test_published_authorizer_never_changes(tables: TableStore) -> None:
    acl_table = AclTable(tables)
    acl_table.load()
    before = acl_table.authorizer
    acl_table.create([acl("a", AclOperation.READ)])
    assert len(before) == 0 and len(acl_table.authorizer) == 1
    during = acl_table.authorizer
    acl_table.delete([AclBindingFilter.ANY])
    assert len(during) == 1 and len(acl_table.authorizer) == 0


def test_a_failed_write_leaves_memory_as_it_was(tables: TableStore, monkeypatch: pytest.MonkeyPatch) -> None:
    acl_table = AclTable(tables)
    acl_table.load()
    kept = acl("a", AclOperation.READ)
    acl_table.create([kept])

    def broken(*_args: object) -> None:
        raise OSError("store unavailable")

    monkeypatch.setattr(tables, "put", broken)
    monkeypatch.setattr(tables, "remove", broken)
    with pytest.raises(OSError):
        acl_table.create([acl("b", AclOperation.READ)])
    with pytest.raises(OSError):
        acl_table.delete([AclBindingFilter.ANY])
    assert acl_table.authorizer.bindings() == [kept]


def test_concurrent_creates_lose_nothing(tables: TableStore) -> None:
    acl_table = AclTable(tables)
    acl_table.load()
    batches = [[acl(f"t{worker}-{i}", AclOperation.READ) for i in range(5)] for worker in range(4)]
    threads = [threading.Thread(target=acl_table.create, args=(batch,)) for batch in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = {b for batch in batches for b in batch}
    assert set(acl_table.authorizer.bindings()) == everything and stored(tables) == everything


@pytest.mark.parametrize(("address", "spelled"), [
    ("10.1.2.3", "10.1.2.3"), ("::1", "0:0:0:0:0:0:0:1"), ("fe80::0a0b:1", "fe80:0:0:0:0:0:a0b:1"),
    ("2001:db8::ff00:42:8329", "2001:db8:0:0:0:ff00:42:8329"), ("::ffff:10.0.0.1", "0:0:0:0:0:ffff:a00:1"),
])
def test_client_hosts_are_spelled_as_java_writes_them(address: str, spelled: str) -> None:
    """Kafka matches an ACL's host with InetAddress.getHostAddress(): an operator's IPv6 ACL for a Kafka
    cluster matches the same clients here."""
    assert client_host(address) == spelled


def test_an_ipv6_client_matches_its_java_spelling_only() -> None:
    allowed = Authorizer(frozenset(), False, [binding(name="payments", host="0:0:0:0:0:0:0:1")])
    assert allowed.authorize(KafkaPrincipal("User", "alice"), client_host("::1"), AclOperation.READ,
                             ResourceType.TOPIC, "payments")
    shortened = Authorizer(frozenset(), False, [binding(name="payments", host="::1")])
    assert not shortened.authorize(KafkaPrincipal("User", "alice"), client_host("::1"), AclOperation.READ,
                                   ResourceType.TOPIC, "payments")
