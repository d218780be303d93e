"""Where client quotas live: one table segment, ``QUOTA_TABLE``, one entry per entity and key (as
Kafka's ClientQuotaRecord), and a copy of them in memory that the reactor reads.

Invariants:
- A change reaches the table before memory shows it; a failed write leaves memory as it was.
- ``quotas`` is replaced whole, never changed in place, so the reactor reads a consistent set while a
  worker thread alters or reloads it.
- One entry per (entity, key): two nodes setting different keys of one entity never overwrite each other.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from millrace.gateway.kafka.quotas.entities import (
    CLIENT_ID,
    IP,
    USER,
    Entity,
    QuotaError,
    describe_entity,
    validate_entity,
    validate_value,
)
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.store.errors import SegmentExistsError
from millrace.store.tables import TableStore

QUOTA_TABLE = "_system/_tables/kafka_client_quotas"
Quotas = Mapping[Entity, Mapping[str, float]]

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


@dataclass
class Alteration:
    """One AlterClientQuotas entry: the entity as sent, and its ops as (key, value or None to remove)."""

    entity: list[tuple[str, str | None]]
    ops: list[tuple[str, float | None]] = field(default_factory=list)


def _key(entity: Entity, key: str) -> bytes:
    return json.dumps([[list(pair) for pair in entity], key], separators=(",", ":")).encode()


def _decode_key(raw: bytes) -> tuple[Entity, str]:
    pairs, key = json.loads(raw)
    return tuple((t, n) for t, n in pairs), key


def _frozen(quotas: dict[Entity, dict[str, float]]) -> Quotas:
    return MappingProxyType({e: MappingProxyType(dict(v)) for e, v in quotas.items() if v})


class QuotaTable:
    """Every client quota of the server, in the table ``QUOTA_TABLE``."""

    def __init__(self, tables: TableStore) -> None:
        self._tables = tables
        self._write_lock = threading.Lock()
        self._quotas: Quotas = MappingProxyType({})
        # Called with the new quotas each time they change (the enforcement drops what it derived).
        self.listeners: list[Callable[[Quotas], None]] = []

    @property
    def quotas(self) -> Quotas:
        """entity -> key -> value; never changed once published."""
        return self._quotas

    def load(self) -> None:
        """Blocking: read every quota (at start, and each second on a cluster node to see other nodes'
        changes), creating the table if it is missing."""
        with self._write_lock:
            if not self._tables.exists(QUOTA_TABLE):
                with contextlib.suppress(SegmentExistsError):  # another node created it meanwhile
                    self._tables.create_table(QUOTA_TABLE)
            loaded: dict[Entity, dict[str, float]] = {}
            for entry in self._tables.entries(QUOTA_TABLE):
                entity, key = _decode_key(entry.key)
                loaded.setdefault(entity, {})[key] = float(entry.value)
            if loaded != self._quotas:
                self._publish(_frozen(loaded))

    def alter(self, alterations: Sequence[Alteration], validate_only: bool = False
              ) -> list[tuple[ErrorCode, str | None]]:
        """Blocking: AlterClientQuotas. Per entry, its error (NONE, None when applied). Every valid entry's
        changes are written as one batch of puts and one of removals; a store error propagates."""
        results: list[tuple[ErrorCode, str | None]] = []
        checked: list[tuple[Entity, dict[str, float | None]] | None] = []
        seen: set[Entity] = set()
        for alteration in alterations:
            try:
                entity, ops = self._check(alteration, seen)
            except QuotaError as e:
                results.append((e.code, e.message))
                checked.append(None)
                continue
            results.append((ErrorCode.NONE, None))
            checked.append((entity, ops))
        if validate_only:
            return results
        with self._write_lock:
            current = self._quotas
            puts: list[tuple[bytes, bytes]] = []
            removals: list[bytes] = []
            updated = {e: dict(v) for e, v in current.items()}
            for item in checked:
                if item is None:
                    continue
                entity, ops = item
                values = updated.setdefault(entity, {})
                for key, value in ops.items():
                    if value is None:
                        if key in values:
                            removals.append(_key(entity, key))
                            del values[key]
                    elif values.get(key) != value:
                        puts.append((_key(entity, key), repr(float(value)).encode()))
                        values[key] = value
            if puts:
                self._tables.put(QUOTA_TABLE, puts)
            if removals:
                self._tables.remove(QUOTA_TABLE, removals)
            if puts or removals:
                self._publish(_frozen(updated))
        return results

    @staticmethod
    def _check(alteration: Alteration, seen: set[Entity]) -> tuple[Entity, dict[str, float | None]]:
        entity = validate_entity(alteration.entity)
        shown = describe_entity(entity)
        if entity in seen:
            raise QuotaError(ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {shown}")
        seen.add(entity)
        ops: dict[str, float | None] = {}
        for key, value in alteration.ops:
            if key in ops:
                raise QuotaError(ErrorCode.INVALID_REQUEST,
                                 f"Duplicate quota key {key} not updating quota for this entity {shown}")
            ops[key] = value
        for key, value in ops.items():
            if value is not None:
                validate_value(entity, key, value)
        return entity, ops

    def describe(self, components: Iterable[tuple[str, int, str | None]], strict: bool
                 ) -> list[tuple[Entity, Mapping[str, float]]]:
        """DescribeClientQuotas, from memory: the entities a filter of (entity type, match type, match)
        components selects, with their values; QuotaError for a filter Kafka refuses."""
        exact: dict[str, str | None] = {}
        specified: set[str] = set()
        for entity_type, match_type, match in components:
            if not entity_type:
                raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
            if entity_type in exact or entity_type in specified:
                raise QuotaError(ErrorCode.INVALID_REQUEST,
                                 f"Entity type {entity_type} cannot appear more than once in the filter.")
            if entity_type not in (IP, USER, CLIENT_ID):
                raise QuotaError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {entity_type}")
            if match_type == MATCH_EXACT:
                if match is None:
                    raise QuotaError(ErrorCode.INVALID_REQUEST,
                                     "Request specified MATCH_TYPE_EXACT, but set match string to null.")
                exact[entity_type] = match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    raise QuotaError(ErrorCode.INVALID_REQUEST,
                                     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
                exact[entity_type] = None
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    raise QuotaError(ErrorCode.INVALID_REQUEST,
                                     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
                specified.add(entity_type)
            else:
                raise QuotaError(ErrorCode.INVALID_REQUEST, f"Unknown match type {match_type}")
        if (IP in exact or IP in specified) and ({USER, CLIENT_ID} & (exact.keys() | specified)):
            raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter "
                                                        "component should not be used with user or clientId filter "
                                                        "component.")
        found = []
        for entity, values in self._quotas.items():
            names = dict(entity)
            if strict and len(names) != len(exact) + len(specified):
                continue
            if all(t in names and names[t] == n for t, n in exact.items()) and all(t in names for t in specified):
                found.append((entity, values))
        return found

    def _publish(self, quotas: Quotas) -> None:
        self._quotas = quotas  # one assignment: a reader sees the old set or the new, never half
        for listener in self.listeners:
            listener(quotas)

    def __repr__(self) -> str:
        return f"QuotaTable({dict(self._quotas)!r})"
