"""A consumer-protocol group's state (KIP-848) and its durable record.

Epochs: the **group epoch** rises whenever what the assignor sees changes (a member joins or leaves,
a subscription or preferred assignor changes, a subscribed topic appears, disappears or gains
partitions); the **assignment epoch** is the group epoch the target assignment was computed at (here
always computed at once, so "Assigning" is never observed between requests); each member's **member
epoch** reaches the assignment epoch once it has reconciled (see ``reconciliation``).

``partition_epochs`` maps every partition some member holds (assigned or still being revoked) to
that member's epoch: a partition is free for another member only when it is absent. It is derived
from the members and rebuilt on load.

Threading: reactor thread only.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from twisted.internet.interfaces import IDelayedCall

from millrace.gateway.kafka.consumer_groups.assignors import Assignment
from millrace.gateway.kafka.consumer_groups.reconciliation import MemberAssignment, MemberState

RECORD_VERSION = 1
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class ConsumerGroupState(StrEnum):
    """Kafka's ConsumerGroup.ConsumerGroupState names, as ListGroups and ConsumerGroupDescribe show them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class ClassicInfo:
    """A member that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a consumer group."""

    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]  # (assignor name, ConsumerProtocolSubscription) as it joined


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_names: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    assignment: MemberAssignment = field(default_factory=MemberAssignment)
    # (topic id, partition) -> the member epoch since which it has held the partition (assigned or
    # revoking): a commit at an older epoch is accepted for partitions held since then
    since: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    classic: ClassicInfo | None = None  # set for members of the classic protocol
    # transient: timers (session expiry, revocation deadline)
    session_timer: IDelayedCall | None = None
    rebalance_timer: IDelayedCall | None = None

    @property
    def epoch(self) -> int:
        return self.assignment.epoch


def _held(a: MemberAssignment) -> list[tuple[uuid.UUID, int]]:
    return [(t, p) for part in (a.assigned, a.revoking) for t, ps in part.items() for p in ps]


def _encode_assignment(a: Assignment) -> dict[str, list[int]]:
    return {str(t): sorted(ps) for t, ps in a.items()}


def _decode_assignment(d: dict[str, list[int]]) -> Assignment:
    return {uuid.UUID(t): frozenset(ps) for t, ps in d.items()}


class ConsumerGroup:
    """One consumer-protocol group; its offsets stay with the coordinator's group of the same id."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> target assignment
        # name -> (topic id, partitions) of every existing subscribed topic, as the target was computed
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}
        self.assignor = ""  # the assignor the current target was computed with
        self.empty_since: int | None = None  # ms; when the last member left (offset retention counts from it)
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}

    # -- derived views -----------------------------------------------------------------------------
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.assignment_epoch != self.group_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.assignment.state is not MemberState.STABLE or m.epoch != self.assignment_epoch
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner_epoch(self, member_id: str) -> Any:
        """The ``OwnerEpoch`` for reconciling ``member_id``: who else holds a partition."""
        mine = self.members[member_id].assignment if member_id in self.members else None

        def lookup(topic_id: uuid.UUID, partition: int) -> int:
            epoch = self.partition_epochs.get((topic_id, partition), -1)
            if epoch != -1 and mine is not None and (
                    partition in mine.assigned.get(topic_id, ()) or partition in mine.revoking.get(topic_id, ())):
                return -1  # held by the member itself
            return epoch

        return lookup

    def set_assignment(self, member: ConsumerMember, new: MemberAssignment) -> None:
        """Replace a member's assignment, keeping ``partition_epochs`` and ``since`` in step."""
        self._release(member.assignment)
        member.assignment = new
        self._hold(new)
        held = _held(new)
        member.since = {tp: member.since.get(tp, new.epoch) for tp in held}

    def _release(self, a: MemberAssignment) -> None:
        for part in (a.assigned, a.revoking):
            for t, ps in part.items():
                for p in ps:
                    self.partition_epochs.pop((t, p), None)

    def _hold(self, a: MemberAssignment) -> None:
        for part in (a.assigned, a.revoking):
            for t, ps in part.items():
                for p in ps:
                    self.partition_epochs[(t, p)] = a.epoch

    def add_member(self, member: ConsumerMember) -> None:
        for tp in _held(member.assignment):
            member.since.setdefault(tp, member.assignment.epoch)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._hold(member.assignment)

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member.assignment)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def subscribed_topic_names(self, resolve_regex: Any) -> set[str]:
        """Every topic name some member subscribes to (regexes resolved by ``resolve_regex``)."""
        names: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_names)
            if m.subscribed_regex is not None:
                names.update(resolve_regex(m.subscribed_regex))
        return names

    # -- the durable record ------------------------------------------------------------------------
    def encode(self) -> bytes:
        return json.dumps({
            "v": RECORD_VERSION, "epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
            "assignor": self.assignor, "empty_since": self.empty_since,
            "topics": {n: [str(t), c] for n, (t, c) in self.topics.items()},
            "members": [{
                "id": m.member_id, "instance": m.instance_id, "rack": m.rack_id, "client": m.client_id,
                "host": m.client_host, "rebalance": m.rebalance_timeout_ms, "names": list(m.subscribed_names),
                "regex": m.subscribed_regex, "server_assignor": m.server_assignor,
                "state": m.assignment.state.value, "member_epoch": m.assignment.epoch,
                "previous_epoch": m.assignment.previous_epoch,
                "assigned": _encode_assignment(m.assignment.assigned),
                "revoking": _encode_assignment(m.assignment.revoking),
                "target": _encode_assignment(self.target.get(m.member_id, {})),
                "since": [[str(t), p, e] for (t, p), e in m.since.items()],
                "classic": None if m.classic is None else {
                    "session": m.classic.session_timeout_ms,
                    "protocols": [[n, base64.b64encode(b).decode()] for n, b in m.classic.protocols]},
            } for m in self.members.values()],
        }, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, group_id: str, raw: bytes) -> ConsumerGroup:
        d = json.loads(raw)
        group = cls(group_id)
        group.group_epoch = d["epoch"]
        group.assignment_epoch = d["assignment_epoch"]
        group.assignor = d["assignor"]
        group.empty_since = d["empty_since"]
        group.topics = {n: (uuid.UUID(t), c) for n, (t, c) in d["topics"].items()}
        for m in d["members"]:
            member = ConsumerMember(
                m["id"], m["instance"], m["rack"], m["client"], m["host"], m["rebalance"], tuple(m["names"]),
                m["regex"], m["server_assignor"],
                MemberAssignment(MemberState(m["state"]), m["member_epoch"], m["previous_epoch"],
                                 _decode_assignment(m["assigned"]), _decode_assignment(m["revoking"])))
            member.since = {(uuid.UUID(t), p): e for t, p, e in m["since"]}
            if m["classic"] is not None:
                member.classic = ClassicInfo(m["classic"]["session"], [
                    (n, base64.b64decode(b)) for n, b in m["classic"]["protocols"]])
            group.add_member(member)
            group.target[member.member_id] = _decode_assignment(m["target"])
        return group
