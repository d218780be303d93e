"""Classic-protocol members inside a consumer group: Kafka 4.0's online upgrade of a classic group.

When a consumer-protocol member joins a classic ``consumer`` group that still has members, the group is
converted (``upgrade``): every classic member becomes a member of the consumer group at the classic
generation as its epoch, keeping its subscription and its last assignment as both current and target,
and its waiting JoinGroup/SyncGroup are told REBALANCE_IN_PROGRESS. From then on the classic APIs of
those members are answered here, over the same epochs, targets and reconciliation as consumer-protocol
members:

- Heartbeat keeps the session (the member's own session timeout) and answers REBALANCE_IN_PROGRESS
  when the member has something to reconcile (a new target epoch, partitions to give up, or partitions
  it waits for that are now free), so the client rejoins;
- JoinGroup reconciles the member with the partitions its subscription says it still owns (an eager
  client has revoked everything, a cooperative one lists what it kept) and answers at once with the
  member epoch as generation, no leader (the coordinator assigns) and the member's first protocol;
- SyncGroup answers the member's current assignment as a ConsumerProtocolAssignment; a cooperative
  client that lost partitions revokes them and rejoins, and then gets the rest as they are released;
- LeaveGroup removes the member (or a static member by instance id); OffsetCommit checks the generation
  against the member epoch (ILLEGAL_GENERATION, as Kafka answers classic members).

New classic members may join a consumer group the same way (mixed groups). When the last
consumer-protocol member leaves and classic members remain (``downgrade``), the group becomes a classic
group again, as Kafka's default policy does: its members keep their current assignments, the generation is
their member epoch, and a classic rebalance starts (their heartbeats answer REBALANCE_IN_PROGRESS).

Threading: reactor thread only.
"""

from __future__ import annotations

import logging
import struct
import uuid
from typing import TYPE_CHECKING, Any

from millrace.gateway.kafka.classic_groups.group import (
    CONSUMER_PROTOCOL_TYPE,
    Group,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)
from millrace.gateway.kafka.consumer_groups.assignors import Assignment
from millrace.gateway.kafka.consumer_groups.group import ClassicInfo, ConsumerGroup, ConsumerMember
from millrace.gateway.kafka.consumer_groups.reconciliation import MemberAssignment, MemberState
from millrace.gateway.kafka.group_store import GROUPS_TABLE
from millrace.gateway.kafka_protocol.codec import KafkaDecodeError, decode_message, encode_message
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
from millrace.gateway.kafka_protocol.messages.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)

if TYPE_CHECKING:
    from millrace.gateway.kafka.group_views import ConsumerGroupsView

log = logging.getLogger(__name__)

_LATEST_SUBSCRIPTION = 3
_LATEST_ASSIGNMENT = 3


def decode_subscription(data: bytes) -> ConsumerProtocolSubscription | None:
    """A classic member's metadata (int16 version, then the struct; newer versions extend older ones)."""
    if len(data) < 2:
        return None
    (version,) = struct.unpack_from(">h", data)
    try:
        return decode_message(ConsumerProtocolSubscription, min(max(version, 0), _LATEST_SUBSCRIPTION), data[2:])
    except KafkaDecodeError:
        return None


def decode_assignment(data: bytes) -> ConsumerProtocolAssignment | None:
    if len(data) < 2:
        return None
    (version,) = struct.unpack_from(">h", data)
    try:
        return decode_message(ConsumerProtocolAssignment, min(max(version, 0), _LATEST_ASSIGNMENT), data[2:])
    except KafkaDecodeError:
        return None


class ClassicMembers:
    """The classic APIs for consumer groups; ``coordinator`` is the consumer group coordinator."""

    def __init__(self, coordinator: ConsumerGroupsView) -> None:
        self.c = coordinator

    # -- helpers -----------------------------------------------------------------------------------
    def _by_name(self, pairs: list[tuple[str, list[int]]]) -> Assignment:
        """(topic name, partitions) -> topic id keyed assignment; unknown topics are left out."""
        topics = self.c._topics()
        out: dict[uuid.UUID, frozenset[int]] = {}
        for name, partitions in pairs:
            info = topics.get(name)
            if info is not None:
                ps = frozenset(p for p in partitions if 0 <= p < info.partition_count)
                if ps:
                    out[info.topic_id] = out.get(info.topic_id, frozenset()) | ps
        return out

    def encode_assignment(self, assigned: Assignment) -> bytes:
        topics = self.c._topics()
        parts = []
        for topic_id, partitions in assigned.items():
            info = topics.by_id(topic_id)
            if info is not None:
                parts.append(ConsumerProtocolAssignment.TopicPartition(topic=info.name, partitions=sorted(partitions)))
        parts.sort(key=lambda tp: tp.topic)
        body = encode_message(ConsumerProtocolAssignment, 0,
                              ConsumerProtocolAssignment(assigned_partitions=parts, user_data=None))
        return struct.pack(">h", 0) + body

    def _classic_member(self, cg: ConsumerGroup, member_id: str, instance_id: str | None
                        ) -> tuple[ConsumerMember | None, ErrorCode | None]:
        if instance_id is not None:
            current = cg.static_members.get(instance_id)
            if current is not None and current != member_id:
                return None, ErrorCode.FENCED_INSTANCE_ID
        member = cg.members.get(member_id)
        if member is None or member.classic is None:
            return None, ErrorCode.UNKNOWN_MEMBER_ID
        return member, None

    def needs_rejoin(self, cg: ConsumerGroup, member: ConsumerMember) -> bool:
        """Whether a classic member must rejoin to reconcile (Kafka answers its heartbeat
        REBALANCE_IN_PROGRESS)."""
        a = member.assignment
        if a.epoch != cg.assignment_epoch or a.state is MemberState.UNREVOKED_PARTITIONS:
            return True
        if a.state is MemberState.UNRELEASED_PARTITIONS:
            owner = cg.owner_epoch(member.member_id)
            for topic_id, partitions in cg.target.get(member.member_id, {}).items():
                have = a.assigned.get(topic_id, frozenset())
                if any(p not in have and owner(topic_id, p) == -1 for p in partitions):
                    return True
        return False

    # -- the online upgrade ------------------------------------------------------------------------
    def upgrade(self, shell: Group) -> ConsumerGroup:
        """Convert a classic consumer group with members into a consumer group (Kafka's
        ConsumerGroup.fromClassicGroup); its offsets stay on ``shell``."""
        generation = shell.generation_id
        cg = ConsumerGroup(shell.group_id)
        cg.group_epoch = cg.assignment_epoch = generation
        for m in list(shell.members.values()):
            protocols = list(m.protocols)
            chosen = shell.protocol_name
            metadata = next((b for n, b in protocols if n == chosen), protocols[0][1] if protocols else b"")
            sub = decode_subscription(metadata)
            assignment = decode_assignment(m.assignment)
            assigned = self._by_name([(tp.topic, tp.partitions) for tp in assignment.assigned_partitions]
                                     if assignment is not None else [])
            # Never two holders: a partition already taken (a stale assignment) is left out.
            assigned = {t: frozenset(p for p in ps if (t, p) not in cg.partition_epochs) for t, ps in assigned.items()}
            assigned = {t: ps for t, ps in assigned.items() if ps}
            member = ConsumerMember(
                m.member_id, m.instance_id, sub.rack_id if sub is not None else None, m.client_id, m.client_host,
                m.rebalance_timeout_ms, tuple(sorted(set(sub.topics))) if sub is not None else (),
                assignment=MemberAssignment(MemberState.STABLE, generation, generation, assigned, {}),
                classic=ClassicInfo(m.session_timeout_ms, protocols))
            cg.add_member(member)
            cg.target[member.member_id] = assigned
            # Requests parked on the classic rebalance start over against the consumer group.
            shell.invoke_join(m, JoinResult(m.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
            shell.invoke_sync(m, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        self.c.classic.membership.cancel_group_timers(shell)
        shell.members.clear()
        shell.static_members.clear()
        shell.pending_members.clear()
        shell.pending_sync.clear()
        shell.supported_protocols.clear()
        shell.num_awaiting_join = 0
        shell.leader_id = None
        shell.protocol_type = None
        shell.protocol_name = None
        shell.subscribed_topics = None
        shell.state = GroupState.EMPTY
        cg.topics = self.c._subscribed_metadata(cg)
        cg.assignor = self.c._preferred_assignor(cg)
        shell.consumer = cg
        for member in cg.members.values():
            self.c._touch_session(cg, member)
        log.info("classic group %s with %d members is upgraded to the consumer protocol at epoch %d",
                 shell.group_id, len(cg.members), generation)
        self.c.classic.store.write(GROUPS_TABLE, removes=[shell.group_id.encode()]).addErrback(
            lambda f: log.warning("cannot remove the classic record of %s: %s", shell.group_id, f.getErrorMessage()))
        return cg

    def downgrade(self, cg: ConsumerGroup) -> bool:
        """Make a consumer group whose members all speak the classic protocol a classic group again (Kafka's
        ConsumerGroup -> ClassicGroup conversion); False (it stays) if they share no protocol."""
        members = list(cg.members.values())
        infos = [m.classic for m in members if m.classic is not None]
        if len(infos) != len(members):
            return False
        common = set.intersection(*({n for n, _ in info.protocols} for info in infos))
        if not common:
            return False
        shell = self.c.classic.groups[cg.group_id]
        for m in members:
            self.c._forget_member(cg, m)
        shell.consumer = None
        shell.protocol_type = CONSUMER_PROTOCOL_TYPE
        shell.generation_id = max(m.epoch for m in members)
        for m, info in zip(members, infos, strict=True):
            classic = Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                             info.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, list(info.protocols))
            classic.assignment = self.encode_assignment(m.assignment.assigned)
            shell.add(classic, None)
        shell.protocol_name = shell.select_protocol()
        shell.subscribed_topics = shell.compute_subscribed_topics()
        shell.state = GroupState.STABLE
        shell.state_timestamp = self.c.classic.now_ms()
        log.info("consumer group %s has only classic members left: it is a classic group again at generation %d",
                 cg.group_id, shell.generation_id)
        self.c.forget(cg.group_id).addErrback(
            lambda f: log.warning("cannot remove consumer group record %s: %s", cg.group_id, f.getErrorMessage()))
        self.c.classic.store.store_group(shell.record()).addErrback(
            lambda f: log.warning("cannot persist classic group %s: %s", cg.group_id, f.getErrorMessage()))
        for member in shell.members.values():
            self.c.classic.membership.schedule_heartbeat(shell, member)
        self.c.classic.membership.prepare_rebalance(shell, "the last consumer-protocol member left")
        return True

    # -- JoinGroup ---------------------------------------------------------------------------------
    def join(self, shell: Group, member_id: str, instance_id: str | None, require_known_member_id: bool,
             client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
             protocol_type: str, protocols: list[tuple[str, bytes]]) -> Any:
        """A classic JoinGroup for a consumer group; a JoinResult or a Deferred of one."""
        cg = shell.consumer
        assert cg is not None
        sub = decode_subscription(protocols[0][1]) if protocols else None
        if protocol_type != CONSUMER_PROTOCOL_TYPE or sub is None:
            return JoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        member = cg.members.get(member_id) if member_id else None
        if member is not None and member.classic is None:
            return JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID)  # a consumer-protocol member's id
        if not member_id and instance_id is None and require_known_member_id:
            # As for classic groups: the member comes back with the id it is given.
            return JoinResult(f"{client_id}-{uuid.uuid4()}", ErrorCode.MEMBER_ID_REQUIRED)
        new_id = member_id or f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"
        bump = False
        if instance_id is not None:
            current = cg.static_members.get(instance_id)
            if current is not None and current != member_id:
                # A new incarnation of a static member takes its place (and fences the old one).
                previous = cg.members[current]
                target = cg.target.get(current, {})
                self.c._forget_member(cg, previous)
                member = ConsumerMember(new_id, instance_id, previous.rack_id, client_id, client_host,
                                        rebalance_timeout_ms, previous.subscribed_names,
                                        assignment=previous.assignment, since=dict(previous.since),
                                        classic=ClassicInfo(session_timeout_ms, list(protocols)))
                cg.add_member(member)
                cg.target[new_id] = target
        if member is None:
            if len(cg.members) >= self.c.max_size:
                return JoinResult(member_id, ErrorCode.GROUP_MAX_SIZE_REACHED)
            member = ConsumerMember(new_id, instance_id, sub.rack_id, client_id, client_host, rebalance_timeout_ms,
                                    classic=ClassicInfo(session_timeout_ms, list(protocols)))
            cg.add_member(member)
            log.info("classic member %s joins consumer group %s", new_id, cg.group_id)
            bump = True
        assert member.classic is not None
        member.classic.session_timeout_ms = session_timeout_ms
        member.classic.protocols = list(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        names = tuple(sorted(set(sub.topics)))
        if names != member.subscribed_names:
            member.subscribed_names = names
            bump = True
        topics = self.c._subscribed_metadata(cg)
        if bump or topics != cg.topics:
            self.c._new_target(cg, topics)
        owned = self._by_name([(tp.topic, tp.partitions) for tp in sub.owned_partitions])
        self.c._reconcile(cg, member, owned)
        self.c._touch_session(cg, member)
        result = JoinResult(member.member_id, ErrorCode.NONE, member.epoch, CONSUMER_PROTOCOL_TYPE, protocols[0][0],
                            "", False, [])
        return self.c._persist(cg).addCallbacks(
            lambda _: result, lambda f: JoinResult(member_id, self.c._write_failed(f, cg).error))

    # -- SyncGroup, Heartbeat, LeaveGroup -----------------------------------------------------------
    def sync(self, shell: Group, generation_id: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        cg = shell.consumer
        assert cg is not None
        member, error = self._classic_member(cg, member_id, instance_id)
        if member is None or member.classic is None:
            return SyncResult(error or ErrorCode.UNKNOWN_MEMBER_ID)
        if generation_id != member.epoch:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        names = [n for n, _ in member.classic.protocols]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name not in names):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        self.c._touch_session(cg, member)
        return SyncResult(ErrorCode.NONE, CONSUMER_PROTOCOL_TYPE, protocol_name or names[0],
                          self.encode_assignment(member.assignment.assigned))

    def heartbeat(self, shell: Group, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        cg = shell.consumer
        assert cg is not None
        member, error = self._classic_member(cg, member_id, instance_id)
        if member is None:
            return error or ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != member.epoch:
            return ErrorCode.ILLEGAL_GENERATION
        self.c._touch_session(cg, member)
        return ErrorCode.REBALANCE_IN_PROGRESS if self.needs_rejoin(cg, member) else ErrorCode.NONE

    def leave(self, shell: Group, leaving: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        cg = shell.consumer
        assert cg is not None
        errors: list[ErrorCode] = []
        removed = False
        for member_id, instance_id in leaving:
            if member_id == "":
                current = cg.static_members.get(instance_id) if instance_id is not None else None
                member = cg.members.get(current) if current is not None else None
                error = None if member is not None else ErrorCode.UNKNOWN_MEMBER_ID
            else:
                member, error = self._classic_member(cg, member_id, instance_id)
            if member is None:
                errors.append(error or ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            log.info("member %s leaves consumer group %s (LeaveGroup)", member.member_id, cg.group_id)
            self.c._remove(cg, member)
            removed = True
            errors.append(ErrorCode.NONE)
        if removed:
            self.c._persist(cg).addErrback(
                lambda f: log.warning("cannot persist consumer group %s: %s", cg.group_id, f.getErrorMessage()))
        return ErrorCode.NONE, errors
