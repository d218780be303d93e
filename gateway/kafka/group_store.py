"""Durable state of the consumer group coordinator, in two table segments.

``kafka_groups`` holds one record per group (Kafka's GroupMetadata record: protocol type, generation,
protocol, leader, state timestamp and the members with their subscription and assignment), written
after every completed SyncGroup and whenever a generation ends empty; a group's removal is a key
removal. ``kafka_offsets`` holds one record per (group, topic, partition) committed offset.

Every write goes through one serial writer, so writes reach the tables in the order the coordinator
issued them (a commit followed by a group deletion can never be reordered into a resurrected offset);
whatever queued while a write was in flight goes out together in the next round (group commit).
The writer runs table I/O on the broker's worker pool; everything else here runs on the reactor.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from millrace.store.errors import SegmentExistsError
from millrace.store.tables import TableStore

log = logging.getLogger(__name__)

GROUPS_TABLE = "_system/_tables/kafka_groups"
OFFSETS_TABLE = "_system/_tables/kafka_offsets"
# One record per consumer-protocol (KIP-848) group: gateway/kafka/consumer_groups/group.py
CONSUMER_GROUPS_TABLE = "_system/_tables/kafka_consumer_groups"
RECORD_VERSION = 1


@dataclass
class OffsetAndMetadata:
    """A committed offset as Kafka keeps it (leader_epoch -1: none; expire_timestamp from the
    RetentionTimeMs of OffsetCommit v2-v4, else None)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int | None = None

    def encode(self) -> bytes:
        return json.dumps({"v": RECORD_VERSION, "o": self.offset, "e": self.leader_epoch, "m": self.metadata,
                           "t": self.commit_timestamp, "x": self.expire_timestamp}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> OffsetAndMetadata:
        d = json.loads(raw)
        return cls(d["o"], d["e"], d["m"], d["t"], d["x"])


@dataclass
class MemberRecord:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's protocol
    assignment: bytes


@dataclass
class GroupRecord:
    group_id: str
    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp: int | None
    members: list[MemberRecord] = field(default_factory=list)

    def encode(self) -> bytes:
        b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731 - local shorthand
        return json.dumps({
            "v": RECORD_VERSION, "type": self.protocol_type, "gen": self.generation_id,
            "protocol": self.protocol_name, "leader": self.leader_id, "ts": self.state_timestamp,
            "members": [{"id": m.member_id, "instance": m.instance_id, "client": m.client_id,
                         "host": m.client_host, "rebalance": m.rebalance_timeout_ms,
                         "session": m.session_timeout_ms, "sub": b64(m.subscription),
                         "assign": b64(m.assignment)} for m in self.members],
        }).encode()

    @classmethod
    def decode(cls, group_id: str, raw: bytes) -> GroupRecord:
        d = json.loads(raw)
        members = [MemberRecord(m["id"], m["instance"], m["client"], m["host"], m["rebalance"], m["session"],
                                base64.b64decode(m["sub"]), base64.b64decode(m["assign"]))
                   for m in d["members"]]
        return cls(group_id, d["type"], d["gen"], d["protocol"], d["leader"], d["ts"], members)


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    # JSON keeps any group id (Kafka allows arbitrary strings) unambiguous and decodable.
    return json.dumps([group_id, topic, partition], separators=(",", ":")).encode()


def decode_offset_key(key: bytes) -> tuple[str, str, int]:
    group_id, topic, partition = json.loads(key)
    return group_id, topic, partition


@dataclass
class LoadedState:
    groups: list[GroupRecord]
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]]
    consumer_groups: list[tuple[str, bytes]] = field(default_factory=list)  # (group id, record)


@dataclass
class _Op:
    table: str
    puts: list[tuple[bytes, bytes]]
    removes: list[bytes]
    done: Deferred


class GroupStore:
    """The coordinator's tables; ``write`` is called on the reactor, ``load`` blocks."""

    def __init__(self, tables: TableStore, blocking: Callable[..., Deferred]) -> None:
        self.tables = tables
        self._blocking = blocking
        self._queue: list[_Op] = []
        self._busy = False

    # -- loading (blocking) ------------------------------------------------------------------------
    def load(self) -> LoadedState:
        """Create the tables if missing and read every record. Blocking: not on the reactor."""
        for name in (GROUPS_TABLE, OFFSETS_TABLE, CONSUMER_GROUPS_TABLE):
            if not self.tables.exists(name):
                with contextlib.suppress(SegmentExistsError):
                    self.tables.create_table(name)
        groups = [GroupRecord.decode(e.key.decode(), e.value) for e in self.tables.entries(GROUPS_TABLE)]
        offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        for e in self.tables.entries(OFFSETS_TABLE):
            group_id, topic, partition = decode_offset_key(e.key)
            offsets.setdefault(group_id, {})[(topic, partition)] = OffsetAndMetadata.decode(e.value)
        consumer_groups = [(e.key.decode(), e.value) for e in self.tables.entries(CONSUMER_GROUPS_TABLE)]
        return LoadedState(groups, offsets, consumer_groups)

    # -- writes (reactor thread) -------------------------------------------------------------------
    def store_group(self, record: GroupRecord) -> Deferred:
        return self.write(GROUPS_TABLE, puts=[(record.group_id.encode(), record.encode())])

    def remove_group(self, group_id: str, offsets: list[tuple[str, int]]) -> Deferred:
        """Remove a group's record and the given offsets; fires when both removals are durable."""
        d1 = self.write(OFFSETS_TABLE, removes=[offset_key(group_id, t, p) for t, p in offsets])
        d2 = self.write(GROUPS_TABLE, removes=[group_id.encode()])
        return d1.addCallback(lambda _: d2)

    def store_offsets(self, group_id: str, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> Deferred:
        return self.write(OFFSETS_TABLE, puts=[(offset_key(group_id, t, p), o.encode())
                                               for (t, p), o in offsets.items()])

    def remove_offsets(self, group_id: str, offsets: list[tuple[str, int]]) -> Deferred:
        return self.write(OFFSETS_TABLE, removes=[offset_key(group_id, t, p) for t, p in offsets])

    def write(self, table: str, puts: list[tuple[bytes, bytes]] | None = None,
              removes: list[bytes] | None = None) -> Deferred:
        """Queue a write; the Deferred fires (None or a Failure) once it is durable."""
        op = _Op(table, list(puts or ()), list(removes or ()), Deferred())
        if not op.puts and not op.removes:
            op.done.callback(None)
            return op.done
        self._queue.append(op)
        self._pump()
        return op.done

    def _pump(self) -> None:
        if self._busy or not self._queue:
            return
        batch, self._queue = self._queue, []
        self._busy = True
        d = self._blocking(_apply_batch, self.tables, _coalesce(batch))
        d.addBoth(self._written, batch)

    def _written(self, outcome: Any, batch: list[_Op]) -> None:
        self._busy = False
        results: dict[int, BaseException | None] = outcome if not isinstance(outcome, Failure) else {
            id(op): outcome.value for op in batch}
        for op in batch:
            error = results.get(id(op))
            if error is None:
                op.done.callback(None)
            else:
                op.done.errback(Failure(error))
        self._pump()


@dataclass
class _Call:
    table: str
    kind: str  # "put" or "remove"
    items: dict[bytes, bytes | None]
    ops: list[int]


def _coalesce(batch: list[_Op]) -> list[_Call]:
    """Merge adjacent operations of the same kind on the same table into one table call, keeping
    the order of everything else (a put, a removal and a put of one key stay three calls)."""
    calls: list[_Call] = []
    for op in batch:
        removes: dict[bytes, bytes | None] = dict.fromkeys(op.removes)
        puts: dict[bytes, bytes | None] = dict(op.puts)
        for kind, items in (("remove", removes), ("put", puts)):
            if not items:
                continue
            last = calls[-1] if calls else None
            if last is not None and last.table == op.table and last.kind == kind:
                # Same key twice in one call: the later write wins, as it would have in sequence.
                last.items.update(items)
                last.ops.append(id(op))
            else:
                calls.append(_Call(op.table, kind, items, [id(op)]))
    return calls


def _apply_batch(tables: TableStore, calls: list[_Call]) -> dict[int, BaseException | None]:
    """Worker thread: run the table calls in order; report each operation's first error."""
    errors: dict[int, BaseException | None] = {}
    for call in calls:
        try:
            if call.kind == "put":
                tables.put(call.table, [(k, v) for k, v in call.items.items() if v is not None])
            else:
                tables.remove(call.table, list(call.items))
        except Exception as exc:  # noqa: BLE001 - reported to the waiting coordinator operation
            log.warning("group coordinator write to %s failed: %s", call.table, exc)
            for op_id in call.ops:
                if errors.get(op_id) is None:
                    errors[op_id] = exc
        else:
            for op_id in call.ops:
                errors.setdefault(op_id, None)
    return errors
