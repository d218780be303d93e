"""A classic group and its members, as Kafka's ClassicGroup and ClassicGroupMember: the state that
JoinGroup, SyncGroup, Heartbeat and LeaveGroup move (``membership``) and the committed offsets
(``group_offsets``) hang off.

A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable (and Dead when removed).
Every field is touched on the reactor thread only.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall

from millrace.gateway.kafka.consumer_groups.group import ConsumerGroup
from millrace.gateway.kafka.group_store import GroupRecord, MemberRecord, OffsetAndMetadata
from millrace.gateway.kafka_protocol.codec import KafkaDecodeError, decode_message
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)

CONSUMER_PROTOCOL_TYPE = "consumer"

TopicPartition = tuple[str, int]


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class JoinResult:
    member_id: str
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # (id, instance id, metadata)


@dataclass
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class MemberSummary:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberSummary]


@dataclass
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


class Member:
    """A group member; transient except for what the group record persists."""

    def __init__(self, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: list[tuple[str, bytes]]) -> None:
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = b""
        self.awaiting_join: Deferred | None = None
        self.awaiting_sync: Deferred | None = None
        self.is_new = False
        self.heartbeat_satisfied = False
        self.heartbeat_timer: IDelayedCall | None = None

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(protocol)

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        return next(name for name, _ in self.protocols if name in candidates)

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            # A new member can expire while it waits to join; the wait does not count.
            return self.heartbeat_satisfied
        # Members waiting on a rebalance phase cannot heartbeat on the muted connection.
        return self.awaiting_join is not None or self.awaiting_sync is not None or self.heartbeat_satisfied


class Group:
    """One group's state; every field is touched on the reactor thread only."""

    def __init__(self, group_id: str, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.state_timestamp: int | None = None
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.pending_members: dict[str, Any] = {}  # member id -> its expiry timer
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_sync: set[str] = set()
        self.num_awaiting_join = 0
        self.new_member_added = False
        self.supported_protocols: collections.Counter[str] = collections.Counter()
        self.subscribed_topics: set[str] | None = None
        self.offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        self.pending_commits: collections.Counter[TopicPartition] = collections.Counter()
        self.join_timer: IDelayedCall | None = None
        self.join_initial = False  # the join timer is the initial delay, which never completes early
        self.sync_timer: IDelayedCall | None = None
        # A consumer-protocol (KIP-848) group: its state; the offsets above stay here (consumer_groups/).
        self.consumer: ConsumerGroup | None = None

    # -- predicates --------------------------------------------------------------------------------
    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def is_subscribed_to(self, topic: str) -> bool:
        # Unknown subscriptions (undecodable metadata) count as subscribed to everything.
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and any(
            self.supported_protocols[n] == len(self.members) for n in names)

    def static_fenced(self, instance_id: str | None, member_id: str) -> bool:
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    # -- membership --------------------------------------------------------------------------------
    def add(self, member: Member, callback: Deferred | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names())
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        member.awaiting_join = callback
        if callback is not None:
            self.num_awaiting_join += 1
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(member.protocol_names())
            if member.awaiting_join is not None:
                self.num_awaiting_join -= 1
            if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
                del self.static_members[member.instance_id]
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        timer = self.pending_members.pop(member_id, None)
        cancel_timer(timer)
        self.pending_sync.discard(member_id)
        return member

    def update_member(self, member: Member, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, callback: Deferred | None) -> None:
        self.supported_protocols.subtract(member.protocol_names())
        member.protocols = protocols
        self.supported_protocols.update(member.protocol_names())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and member.awaiting_join is None:
            self.num_awaiting_join += 1
        elif callback is None and member.awaiting_join is not None:
            self.num_awaiting_join -= 1
        previous, member.awaiting_join = member.awaiting_join, callback
        if previous is not None and callback is not None and previous is not callback:
            # A duplicate JoinGroup replaces the earlier one, which must still be answered
            # (responses on a connection go out in order).
            previous.callback(JoinResult(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS))

    def invoke_join(self, member: Member, result: JoinResult) -> None:
        d, member.awaiting_join = member.awaiting_join, None
        if d is not None:
            self.num_awaiting_join -= 1
            d.callback(result)

    def invoke_sync(self, member: Member, result: SyncResult) -> bool:
        d, member.awaiting_sync = member.awaiting_sync, None
        if d is None:
            return False
        d.callback(result)
        return True

    def select_protocol(self) -> str:
        candidates = {n for n, c in self.supported_protocols.items() if c == len(self.members)}
        votes = collections.Counter(m.vote(candidates) for m in self.members.values())
        # Most votes wins; ties go to the protocol voted for first (member join order).
        best = max(votes.values())
        return next(n for n in votes if votes[n] == best)

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                data = member.metadata(self.protocol_name)
                # Version 0 is the prefix of every ConsumerProtocolSubscription version.
                sub = decode_message(ConsumerProtocolSubscription, 0, data[2:])
                topics.update(sub.topics)
        except (KafkaDecodeError, KeyError):
            return None
        return topics

    def member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        assert self.protocol_name is not None
        return [(m.member_id, m.instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def summary(self) -> GroupSummary:
        if self.is_(GroupState.STABLE) and self.protocol_name is not None:
            members = [MemberSummary(m.member_id, m.instance_id, m.client_id, m.client_host,
                                     m.metadata(self.protocol_name), m.assignment) for m in self.members.values()]
            return GroupSummary(self.group_id, self.state.value, self.protocol_type or "", self.protocol_name, members)
        members = [MemberSummary(m.member_id, m.instance_id, m.client_id, m.client_host, b"", b"")
                   for m in self.members.values()]
        return GroupSummary(self.group_id, self.state.value, self.protocol_type or "", "", members)

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateMember: a static member's instance id is current, the member known."""
        if self.static_fenced(instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def validate_offset_commit(self, member_id: str, instance_id: str | None, generation_id: int,
                               transactional: bool) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateOffsetCommit. Transactional commits need no member information
        (TxnOffsetCommit v0-v2 has none) and are not held back by a rebalance: the transaction, not the
        group's state, decides when they apply."""
        if self.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.is_(GroupState.EMPTY):
            # Admin clients and consumers using assign() commit with generation -1.
            return None
        if generation_id >= 0 or member_id != "" or instance_id is not None:
            error = self.validate_member(member_id, instance_id)
            if error is not None:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif not transactional and not self.is_(GroupState.EMPTY):
            # Without member id and generation only an empty group accepts commits.
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and self.is_(GroupState.COMPLETING_REBALANCE):
            # The member knows the new generation but has no assignment yet.
            return ErrorCode.REBALANCE_IN_PROGRESS
        return None

    def record(self) -> GroupRecord:
        proto = self.protocol_name
        return GroupRecord(self.group_id, self.protocol_type, self.generation_id, proto, self.leader_id,
                           self.state_timestamp, [
                               MemberRecord(m.member_id, m.instance_id, m.client_id, m.client_host,
                                            m.rebalance_timeout_ms, m.session_timeout_ms,
                                            m.metadata(proto) if proto is not None else b"", m.assignment)
                               for m in self.members.values()])


def cancel_timer(timer: IDelayedCall | None) -> None:
    if timer is not None and timer.active():
        timer.cancel()
