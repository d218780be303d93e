"""Quota entities, keys and Kafka's precedence among them (pure functions, no state).

An entity is Kafka's ``ClientQuotaEntity``: a map of entity type (``user``, ``client-id``, ``ip``) to a
name, None naming the type's default (``<default>``). Here it is the sorted tuple of those pairs, so it
hashes and compares as the map does.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from millrace.gateway.kafka_protocol.errors import ErrorCode

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# Kafka's QuotaConfig: the keys an entity may carry and their types (an integral type refuses fractions).
CLIENT_KEYS: Mapping[str, str] = {PRODUCER_BYTE_RATE: "long", CONSUMER_BYTE_RATE: "long",
                                  REQUEST_PERCENTAGE: "double", CONTROLLER_MUTATION_RATE: "double"}
IP_KEYS: Mapping[str, str] = {CONNECTION_CREATION_RATE: "int"}
_LIMITS = {"int": 2**31 - 1, "long": 2**63 - 1}

Entity = tuple[tuple[str, "str | None"], ...]
# What a quota's rate is kept per (Kafka's metric tags): (user, client id), "" where the level ignores it.
Tags = tuple[str, str]


class QuotaError(Exception):
    """A refused entity, key or filter: Kafka's error code and message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def describe_entity(entity: Entity) -> str:
    """As Kafka prints a ClientQuotaEntity in its messages."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in entity) + "})"


def validate_entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity of a request's (type, name) pairs, checked as Kafka's ClientQuotaControlManager does."""
    seen: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in seen:
            raise QuotaError(ErrorCode.INVALID_REQUEST, f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaError(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise QuotaError(ErrorCode.INVALID_REQUEST, f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if not seen:
        raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    if IP in seen:
        if len(seen) > 1:
            raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid quota entity combination, IP entity should"
                                                        "not be combined with User or ClientId")
        ip = seen[IP]
        if ip is not None:
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                # Kafka resolves a host name here; a server that does no lookups on a request takes addresses only
                raise QuotaError(ErrorCode.INVALID_REQUEST, f"{ip} is not a valid IP or resolvable host.") from None
    return tuple(sorted(seen.items()))


def keys_for(entity: Entity) -> Mapping[str, str]:
    """The keys an entity may carry: the IP keys for an ``ip`` entity, else the user/client-id keys."""
    return IP_KEYS if entity[0][0] == IP else CLIENT_KEYS


def validate_value(entity: Entity, key: str, value: float) -> None:
    """Kafka's check of one key set on ``entity``."""
    kind = keys_for(entity).get(key)
    if kind is None:
        raise QuotaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if not value > 0.0:  # also refuses NaN
        raise QuotaError(ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if kind == "double":
        return
    if value > _LIMITS[kind]:
        article = "an" if kind == "int" else "a"
        raise QuotaError(ErrorCode.INVALID_REQUEST, f"Proposed value for {key} is too large for {article} {kind.upper()}.")
    if abs(math.fmod(value, 1.0)) > 1e-6:
        raise QuotaError(ErrorCode.INVALID_REQUEST, f"{key} cannot be a fractional value.")


def precedence(user: str, client_id: str) -> tuple[tuple[Entity, Tags], ...]:
    """The entities whose quota applies to a client, most specific first, each with the tags its rate is
    kept under (Kafka's DefaultQuotaCallback): a user's quota is shared by all its client ids, a client
    id's by all users, a user and client id pair's by that pair alone."""
    both: Tags = (user, client_id)
    levels: list[tuple[Entity, Tags]] = []
    if client_id:
        levels.append((((CLIENT_ID, client_id), (USER, user)), both))  # /config/users/<user>/clients/<client-id>
    levels += [
        (((CLIENT_ID, None), (USER, user)), both),  # /config/users/<user>/clients/<default>
        (((USER, user),), (user, "")),  # /config/users/<user>
    ]
    if client_id:
        levels.append((((CLIENT_ID, client_id), (USER, None)), both))  # /config/users/<default>/clients/<client-id>
    levels += [
        (((CLIENT_ID, None), (USER, None)), both),  # /config/users/<default>/clients/<default>
        (((USER, None),), (user, "")),  # /config/users/<default>
    ]
    if client_id:
        levels.append((((CLIENT_ID, client_id),), ("", client_id)))  # /config/clients/<client-id>
    levels.append((((CLIENT_ID, None),), ("", client_id)))  # /config/clients/<default>
    return tuple(levels)


@dataclass(frozen=True)
class Limit:
    """The quota that applies to a client for one key: its bound and the tags of the rate it shares."""

    bound: float
    tags: Tags


def resolve(quotas: Mapping[Entity, Mapping[str, float]], key: str, user: str, client_id: str) -> Limit | None:
    """The first of the client's ``precedence`` levels that sets ``key`` (None: the client is unlimited)."""
    for entity, tags in precedence(user, client_id):
        values = quotas.get(entity)
        if values is not None and key in values:
            return Limit(values[key], tags)
    return None
