"""What each native command needs of the one Authorizer (``Broker.acls``, Kafka's ACL model): Pravega's
resources and permissions mapped onto Kafka's resource types and operations, so that a principal's Kafka
rights and its native rights are the same ACLs.

Resources (``stream_resource``, ``segment_resource``):

====================================  ===========================================================
Pravega resource                      Kafka ACL resource
====================================  ===========================================================
stream ``S`` of the Kafka scope       TOPIC ``S`` (the same stream a Kafka client calls topic ``S``)
stream ``S`` of scope ``C``           TOPIC ``C/S`` (a PREFIXED ``C/`` ACL covers the whole scope)
scope ``C`` itself                    TOPIC ``C/`` (the literal name; a PREFIXED ``C/`` covers it)
key-value table ``T`` of ``C``        TOPIC ``C/T``
reader group ``G`` of ``C``           GROUP ``C/G`` (its state stream ``C/_RG<G>`` is authorized as
                                      the group: any use of it is READ, deleting it DELETE)
segment ``C/S/<n>.#epoch.<e>`` (and   its stream's (or table's) resource
its ``#transaction.``, ``#kvtable/``
forms)
``_system/...`` and names of no       super users only
stream
the server (listing every segment,    CLUSTER ``kafka-cluster``
node-to-node commands)
====================================  ===========================================================

Permissions: Pravega's READ is READ, READ_UPDATE is WRITE (appends, event writers, transactions,
truncation, sealing), creating is CREATE (allowed by CREATE on the resource or on the CLUSTER, as Kafka's
CreateTopics), deleting DELETE, describing and listing DESCRIBE (READ, WRITE, DELETE and ALTER imply it;
lists leave out what the principal may not describe, as Kafka's Metadata does), scaling ALTER and
changing a stream's policies ALTER_CONFIGS. ``RULES`` below is the table, one row per command; the
transaction commands also require the principal that began the transaction
(``txn_commands``: a transaction records its owner).

A scope is made and removed as TOPIC ``C/`` rather than on the CLUSTER alone: whoever is granted the
PREFIXED ``C/`` pattern owns the scope (its streams, tables and groups) and may create and delete it,
without rights over any other scope; CLUSTER CREATE, as in Kafka, still creates anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from millrace.gateway.security.acls import CLUSTER_NAME, AclOperation, Authorizer, ResourceType
from millrace.gateway.security.principal import KafkaPrincipal
from millrace.protocol import messages as m
from millrace.protocol.errors import AuthorizationError
from millrace.protocol.names import SYSTEM_SCOPE
from millrace.protocol.tables import KV_TABLE_MARK
from millrace.protocol.wire import Command

READ, WRITE, CREATE, DELETE = AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE
DESCRIBE, ALTER, ALTER_CONFIGS = AclOperation.DESCRIBE, AclOperation.ALTER, AclOperation.ALTER_CONFIGS
CLUSTER_ACTION = AclOperation.CLUSTER_ACTION

READER_GROUP_PREFIX = "_RG"  # a reader group's state stream: <scope>/_RG<name> (client/reader_group.py)
TRANSACTION_MARK = "#transaction."

#: A Kafka ACL resource, or None: super users only.
Resource = tuple[ResourceType, str] | None


@dataclass(frozen=True)
class Rule:
    """What a command needs: ``operation`` on the resource its request names (``on``: "stream", "scope",
    "table", "segment", "merge" (both segments), "cluster", or "none": anyone authenticated), also
    allowed by ``cluster_alternative`` on the CLUSTER; ``listing``: the answer is a list whose items are
    each kept only where DESCRIBE is allowed."""

    on: str
    operation: AclOperation = DESCRIBE
    cluster_alternative: AclOperation | None = None
    listing: bool = False


_STREAM_WRITE = Rule("stream", WRITE)

#: The table: every command's rule. A command not here is refused (super users excepted).
RULES: dict[Command, Rule] = {
    Command.HELLO: Rule("none"),
    Command.AUTH_HANDSHAKE: Rule("none"),
    Command.AUTHENTICATE: Rule("none"),
    # raw segments: their stream's (or table's) resource
    Command.CREATE_SEGMENT: Rule("segment", CREATE, CREATE),
    Command.APPEND: Rule("segment", WRITE),
    Command.READ: Rule("segment", READ),
    Command.GET_INFO: Rule("segment", DESCRIBE),
    Command.SEAL: Rule("segment", WRITE),
    Command.TRUNCATE: Rule("segment", WRITE),
    Command.DELETE: Rule("segment", DELETE),
    Command.MERGE: Rule("merge", WRITE),
    Command.UPDATE_ATTRIBUTES: Rule("segment", WRITE),
    Command.LIST_SEGMENTS: Rule("cluster", DESCRIBE),
    Command.GET_SEGMENT_OWNER: Rule("segment", DESCRIBE),
    Command.SEGMENT_RATES: Rule("segment", DESCRIBE),
    # scopes
    Command.CREATE_SCOPE: Rule("scope", CREATE, CREATE),
    Command.DELETE_SCOPE: Rule("scope", DELETE),
    Command.LIST_SCOPES: Rule("none", listing=True),
    # streams
    Command.CREATE_STREAM: Rule("stream", CREATE, CREATE),
    Command.DESCRIBE_STREAM: Rule("stream", DESCRIBE),
    Command.LIST_STREAMS: Rule("none", listing=True),
    Command.GET_SEGMENT_FOR_KEY: Rule("stream", DESCRIBE),
    Command.SEAL_STREAM: _STREAM_WRITE,
    Command.DELETE_STREAM: Rule("stream", DELETE),
    Command.TRUNCATE_STREAM: _STREAM_WRITE,
    Command.SPLIT_SEGMENT: Rule("stream", ALTER),
    Command.MERGE_SEGMENTS: Rule("stream", ALTER),
    Command.UPDATE_STREAM: Rule("stream", ALTER_CONFIGS),
    # a subscriber's retention cut lets data go, as a truncation does; reading them is describing
    Command.UPDATE_SUBSCRIBER_CUT: _STREAM_WRITE,
    Command.LIST_SUBSCRIBER_CUTS: Rule("stream", DESCRIBE),
    # key-value tables
    Command.CREATE_KV_TABLE: Rule("table", CREATE, CREATE),
    Command.DELETE_KV_TABLE: Rule("table", DELETE),
    Command.LIST_KV_TABLES: Rule("none", listing=True),
    Command.GET_KV_TABLE: Rule("table", DESCRIBE),
    Command.KV_PUT: Rule("table", WRITE),
    Command.KV_REMOVE: Rule("table", WRITE),
    Command.KV_GET: Rule("table", READ),
    Command.KV_ITERATE: Rule("table", READ),
    Command.KV_UPDATE: Rule("table", WRITE),
    # events and transactions (the transaction commands also check the transaction's owner)
    Command.OPEN_WRITER: _STREAM_WRITE,
    Command.APPEND_EVENTS: _STREAM_WRITE,
    Command.WRITER_ROUTING: _STREAM_WRITE,
    Command.READ_EVENTS: Rule("stream", READ),
    Command.BEGIN_TXN: _STREAM_WRITE,
    Command.APPEND_TXN_EVENTS: _STREAM_WRITE,
    Command.END_TXN: _STREAM_WRITE,
    Command.TXN_STATUS: Rule("stream", DESCRIBE),
    Command.PING_TXN: _STREAM_WRITE,
    Command.FORGET_TXN_WRITER: Rule("cluster", CLUSTER_ACTION),
}

# A reader group's state stream is the group: whatever a member does to it is READ (Kafka's group
# members need READ on the group), deleting it DELETE, describing it DESCRIBE.
_GROUP_OPERATION = {READ: READ, WRITE: READ, CREATE: READ, DESCRIBE: DESCRIBE, DELETE: DELETE,
                    ALTER: ALTER_CONFIGS, ALTER_CONFIGS: ALTER_CONFIGS}


def scope_resource(scope: str) -> Resource:
    return None if scope == SYSTEM_SCOPE else (ResourceType.TOPIC, f"{scope}/")


def stream_resource(scope: str, stream: str, kafka_scope: str) -> Resource:
    """The ACL resource of a stream (see the module's table)."""
    if scope == SYSTEM_SCOPE:
        return None
    if stream.startswith(READER_GROUP_PREFIX):
        return ResourceType.GROUP, f"{scope}/{stream[len(READER_GROUP_PREFIX):]}"
    if scope == kafka_scope:
        return ResourceType.TOPIC, stream
    return ResourceType.TOPIC, f"{scope}/{stream}"


def table_resource(scope: str, table: str) -> Resource:
    return None if scope == SYSTEM_SCOPE else (ResourceType.TOPIC, f"{scope}/{table}")


def segment_resource(segment: str, kafka_scope: str) -> Resource:
    """The ACL resource of a segment name: its stream's, its key-value table's; None (super users only)
    for system segments and names that belong to no stream."""
    name = segment.split(TRANSACTION_MARK, 1)[0]
    if KV_TABLE_MARK in name:
        scope, _, table = name.split(KV_TABLE_MARK, 1)[0].partition("/")
        return table_resource(scope, table) if scope and table and "/" not in table else None
    parts = name.split("/")
    if len(parts) != 3 or not all(parts):
        return None
    return stream_resource(parts[0], parts[1], kafka_scope)


def resources(request: m.Request, rule: Rule, kafka_scope: str) -> list[Resource]:
    """The resources ``request`` touches under ``rule``."""
    on = rule.on
    if on == "stream":
        assert isinstance(request, m.StreamRequest)
        return [stream_resource(request.scope, request.stream, kafka_scope)]
    if on == "segment":
        assert isinstance(request, m.SegmentRequest)
        return [segment_resource(request.segment, kafka_scope)]
    if on == "table":
        assert isinstance(request, m.TableRequest)
        return [table_resource(request.scope, request.table)]
    if on == "scope":
        assert isinstance(request, m.ScopeRequest)
        return [scope_resource(request.scope)]
    if on == "merge":
        assert isinstance(request, m.MergeIntoSegment)
        return [segment_resource(request.target, kafka_scope), segment_resource(request.source, kafka_scope)]
    if on == "cluster":
        return [(ResourceType.CLUSTER, CLUSTER_NAME)]
    return []


class NativeAuthorizer:
    """One request's principal and address against the ACLs of the moment (an ``Authorizer`` is
    replaced whole when ACLs change, never changed in place)."""

    def __init__(self, authorizer: Authorizer, principal: KafkaPrincipal, host: str, kafka_scope: str) -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.host = host
        self.kafka_scope = kafka_scope

    def allowed(self, resource: Resource, operation: AclOperation,
                cluster_alternative: AclOperation | None = None) -> bool:
        authorizer, principal, host = self.authorizer, self.principal, self.host
        if principal in authorizer.super_users:
            return True
        if resource is None:
            return False
        resource_type, name = resource
        if resource_type is ResourceType.GROUP:
            operation = _GROUP_OPERATION[operation]
            cluster_alternative = None
        if authorizer.authorize(principal, host, operation, resource_type, name):
            return True
        return cluster_alternative is not None and authorizer.authorize(
            principal, host, cluster_alternative, ResourceType.CLUSTER, CLUSTER_NAME)

    def check(self, request: m.Request) -> Callable[[object], object] | None:
        """AuthorizationError unless the principal may make ``request``; for a listing, what filters its
        answer (None otherwise)."""
        rule = RULES.get(request.command)
        if rule is None:
            if self.principal in self.authorizer.super_users:
                return None
            raise AuthorizationError(f"{self.principal} may not use {request.command.name}")
        for resource in resources(request, rule, self.kafka_scope):
            if not self.allowed(resource, rule.operation, rule.cluster_alternative):
                raise AuthorizationError(f"{self.principal} is not authorized to {rule.operation.name} "
                                         f"{_named(resource)} ({request.command.name})")
        if rule.listing:
            return self._filter(request)
        return None

    def _filter(self, request: m.Request) -> Callable[[object], object]:
        """What keeps, of a listing's answer, the items the principal may describe."""
        if isinstance(request, m.ListScopes):
            return _listing(m.ScopesReply, "scopes", lambda s: self.allowed(scope_resource(s), DESCRIBE))
        if isinstance(request, m.ListStreams):
            scope = request.scope
            return _listing(m.StreamsReply, "streams",
                            lambda s: self.allowed(stream_resource(scope, s, self.kafka_scope), DESCRIBE))
        assert isinstance(request, m.ListKvTables)
        scope = request.scope
        return _listing(m.KvTablesReply, "tables", lambda t: self.allowed(table_resource(scope, t), DESCRIBE))


def _listing(reply: type, field: str, keep: Callable[[str], bool]) -> Callable[[object], object]:
    def filtered(answer: object) -> object:
        decoded = m.decode_reply(reply, answer) if isinstance(answer, dict) else answer
        items = getattr(decoded, field)
        return reply(**{field: tuple(item for item in items if keep(item))})

    return filtered


def _named(resource: Resource) -> str:
    if resource is None:
        return "a system resource"
    resource_type, name = resource
    return f"{resource_type.name} {name!r}"
