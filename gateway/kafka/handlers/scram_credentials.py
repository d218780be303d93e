"""AlterUserScramCredentials (key 51) and DescribeUserScramCredentials (key 50): the SCRAM users of the
server (``security.credentials.ScramCredentialTable``), as ``kafka-configs.sh --alter --add-config
'SCRAM-SHA-256=[password=...]' --entity-type users`` and admin clients change and list them.

Kafka's rules, with its messages: one result per user named; a user named twice for one mechanism in a
request is DUPLICATE_RESOURCE; an unknown mechanism UNSUPPORTED_SASL_MECHANISM; an empty name or an
iteration count outside [4096, 16384] UNACCEPTABLE_CREDENTIAL; deleting or describing a credential that
does not exist RESOURCE_NOT_FOUND. Any salt is taken, however short (confluent-kafka's own test sends
``b"salt"``), but an empty salt or salted password is UNACCEPTABLE_CREDENTIAL: Kafka's controller does
not check them, and a credential made from them protects nothing. A user with any refused item has none
of its items applied. The client sends the salted password (RFC 5802's SaltedPassword), never the
password; the server keeps only the keys derived from it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from twisted.internet import defer

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from millrace.gateway.kafka_protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.gateway.security.credentials import ScramCredentialTable
from millrace.gateway.security.sasl import (
    SCRAM_MAX_ITERATIONS,
    SCRAM_MIN_ITERATIONS,
    credential_from_salted_password,
)

#: Kafka's ScramMechanism type codes on the wire.
MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
CODES = {name: code for code, name in MECHANISM_CODES.items()}
_AlterResult = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
_DescribeResult = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult


def _refusal(table: ScramCredentialTable, item: Any, upsert: bool, duplicates: set[tuple[str, int]]
             ) -> tuple[ErrorCode, str] | None:
    """Why one deletion or upsertion is refused, if it is."""
    mechanism = MECHANISM_CODES.get(item.mechanism)
    if (item.name, item.mechanism) in duplicates:
        return ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {item.mechanism}"
    if not item.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if upsert:
        if item.iterations < SCRAM_MIN_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        if item.iterations > SCRAM_MAX_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        if not item.salt or not item.salted_password:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    elif table.scram(item.name, mechanism) is None:
        return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return None


def _alter(table: ScramCredentialTable, request: AlterUserScramCredentialsRequest) -> list[_AlterResult]:
    """Blocking: check every item, then apply each user's items if none of them was refused."""
    items: list[tuple[Any, bool]] = [(d, False) for d in request.deletions] + [(u, True) for u in request.upsertions]
    counts = Counter((item.name, item.mechanism) for item, _ in items)
    duplicates = {key for key, n in counts.items() if n > 1}
    refused: dict[str, tuple[ErrorCode, str]] = {}
    for item, upsert in items:
        why = _refusal(table, item, upsert, duplicates)
        if why is not None:
            refused.setdefault(item.name, why)
    for item, upsert in items:
        if item.name in refused:
            continue
        mechanism = MECHANISM_CODES[item.mechanism]
        if upsert:
            credential = credential_from_salted_password(mechanism, bytes(item.salted_password), bytes(item.salt),
                                                         item.iterations)  # checked above: cannot refuse
            table.upsert(item.name, mechanism, credential)
        else:
            table.delete(item.name, mechanism)
    users = list(dict.fromkeys(item.name for item, _ in items))
    return [_AlterResult(user=user, error_code=refused.get(user, (ErrorCode.NONE, ""))[0],
                         error_message=refused[user][1] if user in refused else None) for user in users]


@api(AlterUserScramCredentialsRequest, 0, 0)
def handle_alter_user_scram_credentials(ctx: RequestContext, request: AlterUserScramCredentialsRequest
                                        ) -> defer.Deferred[AlterUserScramCredentialsResponse]:
    table = ctx.broker.scram
    denied = not ctx.authorized(AclOperation.ALTER, ResourceType.CLUSTER)
    if table is None or denied:
        users = dict.fromkeys([*(d.name for d in request.deletions), *(u.name for u in request.upsertions)])
        code, message = ((ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.") if denied else
                         (ErrorCode.UNSUPPORTED_VERSION, "SCRAM credentials are not served by this node"))
        return defer.succeed(AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            _AlterResult(user=u, error_code=code, error_message=message) for u in users]))
    return ctx.broker.blocking(_alter, table, request).addCallback(
        lambda results: AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results))


@api(DescribeUserScramCredentialsRequest, 0, 0)
def handle_describe_user_scram_credentials(ctx: RequestContext, request: DescribeUserScramCredentialsRequest
                                           ) -> DescribeUserScramCredentialsResponse:
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                    error_message="Cluster authorization failed.", results=[])
    table = ctx.broker.scram
    described = table.users() if table is not None else {}
    info = DescribeUserScramCredentialsResponse.CredentialInfo
    if not request.users:
        names = list(described)
        duplicates: set[str] = set()
    else:
        counts = Counter(u.name for u in request.users)
        names = list(counts)
        duplicates = {name for name, n in counts.items() if n > 1}
    results = []
    for name in names:
        if name in duplicates:
            results.append(_DescribeResult(user=name, error_code=ErrorCode.DUPLICATE_RESOURCE, credential_infos=[],
                                           error_message="Cannot describe SCRAM credentials for the same user "
                                                         "twice in a single request"))
        elif name not in described:
            results.append(_DescribeResult(user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND, credential_infos=[],
                                           error_message="Attempt to describe a user credential that does not "
                                                         "exist"))
        else:
            results.append(_DescribeResult(user=name, error_code=ErrorCode.NONE, error_message=None, credential_infos=[
                info(mechanism=CODES[m], iterations=n) for m, n in described[name].items()]))
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                                                results=results)
