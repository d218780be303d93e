"""Kafka's ACL model and the decisions of its ``StandardAuthorizer``, without I/O.

The enums carry Kafka's wire codes (``org.apache.kafka.common.acl`` and ``.resource``); a code Kafka does
not know reads as ``UNKNOWN``, as ``fromCode`` makes it. ``ResourcePattern``, ``AccessControlEntry`` and
``AclBinding`` are one ACL; ``AclBindingFilter.matches`` is Kafka's, ANY and MATCH included.
``validate_new_binding`` refuses what CreateAcls refuses, with Kafka's messages, and ``validate_filter``
what DeleteAcls refuses.

``Authorizer.authorize`` decides as StandardAuthorizer does:
- a super user may do anything;
- an ACL applies to a request when its pattern covers the resource name (a literal of that name, the
  literal ``*``, or a prefix of the name), its principal is the request's or ``User:*``, and its host is
  the client's address as text or ``*``;
- a DENY that applies and names the operation (or ALL) denies, whatever else applies;
- otherwise an ALLOW that applies and names the operation, ALL, or an operation implying it allows
  (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; implication
  widens ALLOWs only: a DENY of READ leaves DESCRIBE alone);
- otherwise, when no ACL at all covers the resource name, ``allow_everyone_if_no_acl_found`` decides,
  and when some do, the answer is no.

Invariants: the index holds exactly the bindings (no duplicates), each valid by ``validate_new_binding``;
``authorize`` reads only the index entries for the resource name (its literal, the wildcard, and the
prefixes of the name whose length some prefixed ACL has), never every ACL. An ``Authorizer`` is not
synchronized: change it on one thread and ask it on that thread, or publish a new one whole (``AclTable``
does that), so a reader never sees an index half changed.
"""

from __future__ import annotations

import enum
import hashlib
import ipaddress
import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from millrace.gateway.security.principal import USER_TYPE, KafkaPrincipal

WILDCARD_RESOURCE = "*"  # a literal ACL of this name covers every resource of its type
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = KafkaPrincipal(USER_TYPE, "*")
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource
INVALID_REQUEST = "INVALID_REQUEST"
# The resource name Kafka's authorizeByResourceType asks about first (so super users and the
# allow-everyone rule answer as they would for a real resource).
_PROBE_RESOURCE_NAME = "hardcode"

log = logging.getLogger(__name__)


class _KafkaCode(enum.IntEnum):
    """An enum whose values are Kafka's wire codes: an unknown code reads as UNKNOWN (Kafka's fromCode)."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        return cls.__members__["UNKNOWN"]


class ResourceType(_KafkaCode):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaCode):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_KafkaCode):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(_KafkaCode):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_FILTER_ONLY_RESOURCE_TYPES = frozenset({ResourceType.UNKNOWN, ResourceType.ANY})
_FILTER_ONLY_OPERATIONS = frozenset({AclOperation.UNKNOWN, AclOperation.ANY})


def _operations_allowing(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations of an ALLOW ACL that allow ``operation`` (StandardAuthorizerData's implications)."""
    if operation is AclOperation.DESCRIBE:
        implying = {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    elif operation is AclOperation.DESCRIBE_CONFIGS:
        implying = {AclOperation.ALTER_CONFIGS}
    else:
        implying = set()
    return frozenset({operation, AclOperation.ALL, *implying})


_ALLOWED_BY = {op: _operations_allowing(op) for op in AclOperation}
_DENIED_BY = {op: frozenset({op, AclOperation.ALL}) for op in AclOperation}

# The operations an ACL on each resource type can grant (Kafka 4's AclEntry.supportedOperations): what
# an authorized-operations answer may hold, and all of it when no authorizer is configured.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}
# The authorized-operations value of a response that was not asked for them (Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def operations_bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's authorized-operations value: bit ``code`` set for each operation (Utils.to32BitField)."""
    field = 0
    for operation in operations:
        field |= 1 << operation
    return field


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """Which resources an ACL covers: one name (LITERAL; ``*`` is every one) or every name starting with
    ``name`` (PREFIXED)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (``User:alice``, or ``User:*`` for everyone), from where (an IP address, or ``*``), may or may
    not do what."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: an entry bound to a resource pattern."""

    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Kafka's ResourcePatternFilter: ANY resource type matches every type; a None name every name;
    pattern type ANY matches every pattern with exactly this name, MATCH every pattern that covers it."""

    ANY: ClassVar[ResourcePatternFilter]

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def is_unknown(self) -> bool:
        return self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type is PatternType.ANY or self.pattern_type is pattern.pattern_type:
            return self.name == pattern.name
        # MATCH: the patterns that would apply to a resource of this name.
        if pattern.pattern_type is PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type is PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False  # Kafka throws here; a stored binding is never anything else


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Kafka's AccessControlEntryFilter: None principal or host, or an ANY operation or permission type,
    matches every value; anything else matches itself only (``User:*`` matches only ``User:*``)."""

    ANY: ClassVar[AccessControlEntryFilter]

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def is_unknown(self) -> bool:
        return self.operation is AclOperation.UNKNOWN or self.permission_type is AclPermissionType.UNKNOWN

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation is AclOperation.ANY or self.operation is entry.operation)
                and (self.permission_type is AclPermissionType.ANY or self.permission_type is entry.permission_type))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which ACLs DescribeAcls and DeleteAcls mean: those both filters match."""

    ANY: ClassVar[AclBindingFilter]

    pattern_filter: ResourcePatternFilter = field(default_factory=ResourcePatternFilter)
    entry_filter: AccessControlEntryFilter = field(default_factory=AccessControlEntryFilter)

    def is_unknown(self) -> bool:
        return self.pattern_filter.is_unknown() or self.entry_filter.is_unknown()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(binding.entry)


ResourcePatternFilter.ANY = ResourcePatternFilter()
AccessControlEntryFilter.ANY = AccessControlEntryFilter()
AclBindingFilter.ANY = AclBindingFilter()


class AclError(ValueError):
    """A binding or filter Kafka refuses: ``code`` is the Kafka error's name (``INVALID_REQUEST``), the
    message Kafka's where it has one."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"AclError({self.code}, {self.message!r})"


def validate_new_binding(binding: AclBinding) -> None:
    """AclError unless CreateAcls may create ``binding``: the broker's checks (AclApis) first, then the
    controller's (AclControlManager.validateNewAcl), in Kafka's order and words. The host is not checked,
    as Kafka does not check it (see ``_check_host``)."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise AclError(INVALID_REQUEST, f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not pattern.name:
        raise AclError(INVALID_REQUEST, "Invalid empty resource name")
    if pattern.resource_type in _FILTER_ONLY_RESOURCE_TYPES:
        raise AclError(INVALID_REQUEST, f"Invalid resourceType {pattern.resource_type.name}")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(INVALID_REQUEST, f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation in _FILTER_ONLY_OPERATIONS:
        raise AclError(INVALID_REQUEST, f"Invalid operation {entry.operation.name}")
    if entry.permission_type not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        raise AclError(INVALID_REQUEST, f"Invalid permissionType {entry.permission_type.name}")
    if ":" not in entry.principal:
        raise AclError(INVALID_REQUEST, f"Could not parse principal from `{entry.principal}` (no colon is present "
                                        "separating the principal type from the principal name)")
    _check_host(entry.host)


def _check_host(host: str) -> None:
    """Kafka stores any host text and compares it with the client's address as Java writes it
    (``client_host``), so an ACL naming a host name, or an IPv6 address in another spelling, is created
    and never matches: created here too, with a warning saying so."""
    if host == WILDCARD_HOST:
        return
    try:
        spelled = client_host(host)
    except ValueError:
        spelled = None
    if spelled != host:
        log.warning("ACL host %r will never match: hosts are matched as the client's IP address is written (%s)",
                    host, "a host name is not resolved" if spelled is None else f"this one as {spelled!r}")


def client_host(address: str) -> str:
    """A client's IP address as Kafka's ACLs match it (Java's ``InetAddress.getHostAddress``): IPv4 dotted,
    IPv6 as eight hexadecimal groups without leading zeros and without ``::`` shortening (``::1`` is
    ``0:0:0:0:0:0:0:1``). ValueError for anything that is not an IP address."""
    ip = ipaddress.ip_address(address)
    if ip.version == 4:
        return str(ip)
    assert isinstance(ip, ipaddress.IPv6Address)
    groups = ":".join(f"{int(group, 16):x}" for group in ip.exploded.split(":"))
    return groups if ip.scope_id is None else f"{groups}%{ip.scope_id}"


def validate_filter(acl_filter: AclBindingFilter) -> None:
    """AclError if DeleteAcls refuses the filter (AclControlManager.validateFilter)."""
    if acl_filter.pattern_filter.is_unknown():
        raise AclError(INVALID_REQUEST, "Unknown patternFilter.")
    if acl_filter.entry_filter.is_unknown():
        raise AclError(INVALID_REQUEST, "Unknown entryFilter.")


def principal_of(entry: AccessControlEntry) -> KafkaPrincipal:
    """The entry's principal, split at its first colon as Kafka splits it (either side may be empty)."""
    principal_type, _, name = entry.principal.partition(":")
    return KafkaPrincipal(principal_type, name)


def _check_action(operation: AclOperation, resource_type: ResourceType) -> None:
    # A filter value in a question is the caller's mistake (SecurityUtils.authorizeByResourceTypeCheckArgs).
    if resource_type in _FILTER_ONLY_RESOURCE_TYPES or operation in _FILTER_ONLY_OPERATIONS:
        raise ValueError(f"authorize a specific operation on a specific resource type, not "
                         f"{operation.name} on {resource_type.name}")


# One rule of an index bucket: (host, operation, permission type).
_Rule = tuple[str, AclOperation, AclPermissionType]
# The ACLs of one resource pattern, by principal (the request's and User:* are the only ones looked at).
_Bucket = dict[KafkaPrincipal, set[_Rule]]


class _TypeIndex:
    """The ACLs of one resource type, laid out for ``authorize`` and ``authorize_by_resource_type``."""

    def __init__(self) -> None:
        self.literal: dict[str, _Bucket] = {}  # the wildcard ``*`` is the literal name "*"
        self.prefixed: dict[str, _Bucket] = {}
        # How many prefixed patterns have each length: a name's candidate prefixes are its slices of
        # these lengths, typically a handful, whatever the number of ACLs.
        self.prefix_length_counts: Counter[int] = Counter()
        self.prefix_lengths: tuple[int, ...] = ()
        self.by_principal: dict[KafkaPrincipal, dict[AclBinding, None]] = {}

    def __bool__(self) -> bool:
        return bool(self.by_principal)

    def add(self, binding: AclBinding) -> None:
        pattern, entry = binding.pattern, binding.entry
        principal = principal_of(entry)
        patterns = self.literal if pattern.pattern_type is PatternType.LITERAL else self.prefixed
        bucket = patterns.get(pattern.name)
        if bucket is None:
            bucket = patterns[pattern.name] = {}
            if patterns is self.prefixed:
                self._count_prefix_length(len(pattern.name), 1)
        bucket.setdefault(principal, set()).add((entry.host, entry.operation, entry.permission_type))
        self.by_principal.setdefault(principal, {})[binding] = None

    def remove(self, binding: AclBinding) -> None:
        pattern, entry = binding.pattern, binding.entry
        principal = principal_of(entry)
        patterns = self.literal if pattern.pattern_type is PatternType.LITERAL else self.prefixed
        bucket = patterns[pattern.name]
        rules = bucket[principal]
        rules.discard((entry.host, entry.operation, entry.permission_type))
        if not rules:
            del bucket[principal]
        if not bucket:
            del patterns[pattern.name]
            if patterns is self.prefixed:
                self._count_prefix_length(len(pattern.name), -1)
        of_principal = self.by_principal[principal]
        del of_principal[binding]
        if not of_principal:
            del self.by_principal[principal]

    def _count_prefix_length(self, length: int, change: int) -> None:
        self.prefix_length_counts[length] += change
        if not self.prefix_length_counts[length]:
            del self.prefix_length_counts[length]
        self.prefix_lengths = tuple(sorted(self.prefix_length_counts))

    def buckets(self, name: str) -> Iterator[_Bucket]:
        """Every bucket whose pattern covers ``name``."""
        bucket = self.literal.get(name)
        if bucket is not None:
            yield bucket
        if name != WILDCARD_RESOURCE:
            bucket = self.literal.get(WILDCARD_RESOURCE)
            if bucket is not None:
                yield bucket
        for length in self.prefix_lengths:
            if length > len(name):
                break
            bucket = self.prefixed.get(name[:length])
            if bucket is not None:
                yield bucket


class Authorizer:
    """Every ACL, and StandardAuthorizer's answers from them (see the module docstring)."""

    def __init__(self, super_users: frozenset[KafkaPrincipal] = frozenset(),
                 allow_everyone_if_no_acl_found: bool = False, bindings: Iterable[AclBinding] = ()) -> None:
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._bindings: dict[AclBinding, None] = {}  # insertion order: describe lists oldest first
        self._index: dict[ResourceType, _TypeIndex] = {}
        self.add(bindings)

    def __len__(self) -> int:
        return len(self._bindings)

    def __contains__(self, binding: object) -> bool:
        return binding in self._bindings

    def bindings(self) -> list[AclBinding]:
        return list(self._bindings)

    def add(self, bindings: Iterable[AclBinding]) -> None:
        """Add the bindings (one already present stays once); AclError, and nothing added, if one is
        not valid."""
        bindings = list(bindings)
        for binding in bindings:
            validate_new_binding(binding)
        for binding in bindings:
            if binding not in self._bindings:
                self._bindings[binding] = None
                self._index.setdefault(binding.pattern.resource_type, _TypeIndex()).add(binding)

    def remove(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Remove the bindings the filter matches; those removed."""
        removed = self.describe(acl_filter)
        for binding in removed:
            del self._bindings[binding]
            resource_type = binding.pattern.resource_type
            index = self._index[resource_type]
            index.remove(binding)
            if not index:
                del self._index[resource_type]
        return removed

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings the filter matches (a scan: DescribeAcls and DeleteAcls are rare)."""
        return [binding for binding in self._bindings if acl_filter.matches(binding)]

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """Whether ``principal``, connected from ``host`` (its IP address as text), may perform
        ``operation`` on the resource ``name`` of ``resource_type`` (``kafka-cluster`` for CLUSTER)."""
        if principal in self.super_users:
            return True
        _check_action(operation, resource_type)
        index = self._index.get(resource_type)
        if index is None:
            return self.allow_everyone_if_no_acl_found
        allowed_by, denied_by = _ALLOWED_BY[operation], _DENIED_BY[operation]
        covered = allowed = False
        for bucket in index.buckets(name):
            covered = True  # an ACL covers the resource: the allow-everyone rule no longer applies
            for who in (principal, WILDCARD_PRINCIPAL):
                for rule_host, rule_operation, permission in bucket.get(who, ()):
                    if rule_host != host and rule_host != WILDCARD_HOST:
                        continue
                    if permission is AclPermissionType.DENY:
                        if rule_operation in denied_by:
                            return False
                    elif rule_operation in allowed_by:
                        allowed = True
        return allowed or (not covered and self.allow_everyone_if_no_acl_found)

    def authorized_operations(self, principal: KafkaPrincipal, host: str, resource_type: ResourceType,
                              name: str) -> list[AclOperation]:
        """The operations of ``SUPPORTED_OPERATIONS`` that ``principal`` may perform on the resource, each
        decided by ``authorize`` (so implications count: READ alone gives DESCRIBE too), as Kafka's
        AuthHelper.authorizedOperations asks them."""
        return [op for op in SUPPORTED_OPERATIONS[resource_type] if self.authorize(principal, host, op, resource_type,
                                                                                   name)]

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether ``principal`` may perform ``operation`` on at least one resource of ``resource_type``,
        as Kafka's ``Authorizer.authorizeByResourceType`` answers it (its default, which StandardAuthorizer
        keeps): yes if ``authorize`` allows a resource named ``hardcode`` (so super users, and the
        allow-everyone rule when no ACL covers that name); else yes if a wildcard ``*`` ALLOW applies and
        no wildcard DENY, or if some literal or prefixed ALLOW applies that no DENY shadows (a literal
        DENY of the same name, or a prefixed DENY whose prefix starts the name). Only ACLs naming the
        operation or ALL count here: no implications."""
        _check_action(operation, resource_type)
        if self.authorize(principal, host, operation, resource_type, _PROBE_RESOURCE_NAME):
            return True
        index = self._index.get(resource_type)
        if index is None:
            return False
        denied_literals: set[str] = set()
        denied_prefixes: set[str] = set()
        allowed_literals: set[str] = set()
        allowed_prefixes: set[str] = set()
        wildcard_allowed = False
        for who in {principal, WILDCARD_PRINCIPAL}:
            for binding in index.by_principal.get(who, ()):
                entry, pattern = binding.entry, binding.pattern
                if entry.host != host and entry.host != WILDCARD_HOST:
                    continue
                if entry.operation is not operation and entry.operation is not AclOperation.ALL:
                    continue
                literal = pattern.pattern_type is PatternType.LITERAL
                if entry.permission_type is AclPermissionType.DENY:
                    if literal and pattern.name == WILDCARD_RESOURCE:
                        return False
                    (denied_literals if literal else denied_prefixes).add(pattern.name)
                elif literal and pattern.name == WILDCARD_RESOURCE:
                    wildcard_allowed = True
                else:
                    (allowed_literals if literal else allowed_prefixes).add(pattern.name)
        if wildcard_allowed:
            return True

        def shadowed_by_prefix(name: str) -> bool:
            return any(name[:length] in denied_prefixes for length in range(1, len(name) + 1))

        return (any(name not in denied_literals and not shadowed_by_prefix(name) for name in allowed_literals)
                or any(not shadowed_by_prefix(name) for name in allowed_prefixes))

    def __repr__(self) -> str:
        return (f"Authorizer({len(self)} ACLs, super users {sorted(map(str, self.super_users))}, "
                f"allow everyone if no ACL found: {self.allow_everyone_if_no_acl_found})")


# Storage: a binding as JSON (enum names, which Kafka keeps stable), keyed by a digest of that JSON, so
# a binding has one key however long its names (table keys are bounded) and writing it twice is a no-op.

def encode_binding(binding: AclBinding) -> bytes:
    pattern, entry = binding.pattern, binding.entry
    return json.dumps({
        "resource_type": pattern.resource_type.name, "name": pattern.name, "pattern_type": pattern.pattern_type.name,
        "principal": entry.principal, "host": entry.host, "operation": entry.operation.name,
        "permission_type": entry.permission_type.name,
    }, sort_keys=True, separators=(",", ":")).encode()


def decode_binding(data: bytes) -> AclBinding:
    """The binding ``encode_binding`` wrote; ValueError when the bytes are not one."""
    try:
        fields = json.loads(data)
        return AclBinding(
            ResourcePattern(ResourceType[fields["resource_type"]], str(fields["name"]),
                            PatternType[fields["pattern_type"]]),
            AccessControlEntry(str(fields["principal"]), str(fields["host"]), AclOperation[fields["operation"]],
                               AclPermissionType[fields["permission_type"]]),
        )
    except (KeyError, TypeError) as e:  # a field missing, or not of its type: not an encoded binding
        raise ValueError(f"not an encoded ACL binding: {e!r}") from None


def acl_key(binding: AclBinding) -> bytes:
    """The binding's table key: the SHA-256 of its encoding, in hex."""
    return hashlib.sha256(encode_binding(binding)).hexdigest().encode()
