"""The classic group protocol's membership, as Kafka's GroupMetadataManager runs it for classic groups:
JoinGroup, SyncGroup, Heartbeat and LeaveGroup, rebalances and the member and group timers.

A rebalance waits for every known member to rejoin, up to the largest rebalance timeout (a new group
first waits ``group_initial_rebalance_delay_ms``, extended while members keep arriving); members who
did not rejoin are dropped, a leader is chosen among those who did, and the generation advances.
The leader's SyncGroup carries the assignment, which is persisted before every member gets its share.
Heartbeats keep a member alive for its session timeout; an expired member is removed and triggers a
rebalance.

Threading: reactor thread only. The timers are ``callLater`` calls; the only blocking work, the table
writes, goes through the coordinator's ``GroupStore`` on the broker's worker pool. JoinGroup and
SyncGroup answers are Deferreds completed when their rebalance phase completes.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.python.failure import Failure

from millrace.gateway.kafka.classic_groups.group import (
    Group,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
    cancel_timer,
)
from millrace.gateway.kafka.group_status import GroupApi
from millrace.gateway.kafka_protocol.errors import ErrorCode

if TYPE_CHECKING:
    from millrace.gateway.kafka.group_views import GroupHub

log = logging.getLogger(__name__)

# JoinGroup of a member that never completes it is dropped after this (Kafka's NewMemberJoinTimeoutMs):
# its socket is muted while the request waits, so there is no other way to notice it is gone.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class ClassicMembership:
    """Members joining, syncing, heartbeating and leaving classic groups; the groups themselves are the
    coordinator's (``GroupCoordinator.groups``)."""

    def __init__(self, coordinator: GroupHub) -> None:
        self.coordinator = coordinator

    # -- JoinGroup ---------------------------------------------------------------------------------
    def join_group(self, group_id: str, member_id: str, instance_id: str | None, require_known_member_id: bool,
                   supports_skip_assignment: bool, client_id: str, client_host: str, rebalance_timeout_ms: int,
                   session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                   reason: str | None = None) -> Deferred:
        """Fires with a JoinResult, at once on errors, else when the rebalance completes."""
        error = self.coordinator.validate_status(group_id, GroupApi.JOIN)
        if error is not None:
            return succeed(JoinResult(member_id, error))
        if not (self.coordinator.config.group_min_session_timeout_ms <= session_timeout_ms
                <= self.coordinator.config.group_max_session_timeout_ms):
            return succeed(JoinResult(member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
        unknown = member_id == ""
        group = self.coordinator.groups.get(group_id)
        if group is not None and not self.coordinator.consumer.downgrade_if_empty(group):
            # A consumer-protocol group with members: classic members join it as Kafka 4.0 lets them.
            return maybeDeferred(self.coordinator.consumer.classic_members.join, group, member_id, instance_id,
                                 require_known_member_id, client_id, client_host, rebalance_timeout_ms,
                                 session_timeout_ms, protocol_type, protocols)
        if group is None:
            if not unknown:
                return succeed(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            group = self.coordinator.groups[group_id] = Group(group_id)
        d: Deferred = Deferred()
        args = (group, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                protocol_type, protocols, d, reason)
        if unknown:
            self._join_new_member(*args, require_known_member_id, supports_skip_assignment)
        else:
            self._join_current_member(member_id, *args)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)
        return d

    def _join_new_member(self, group: Group, instance_id: str | None, client_id: str, client_host: str,
                         rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]], d: Deferred, reason: str | None,
                         require_known_member_id: bool, supports_skip_assignment: bool) -> None:
        if group.is_(GroupState.DEAD):
            # Removed meanwhile: the client rediscovers the coordinator and retries.
            d.callback(JoinResult("", ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, {n for n, _ in protocols}):
            d.callback(JoinResult("", ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_id = group.static_members.get(instance_id)
            if old_id is not None:
                log.info("static member %s of group %s rejoins as %s (was %s)", instance_id, group.group_id,
                         new_id, old_id)
                self._update_static_member(group, old_id, new_id, instance_id, protocols, d,
                                           supports_skip_assignment, reason)
                return
            self._add_member_and_rebalance(group, new_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, d, reason)
        elif require_known_member_id:
            # The member must come back with this id; until then it is pending and holds up the
            # rebalance, but only for one session timeout.
            group.pending_members[new_id] = self.coordinator.later(
                session_timeout_ms / 1000, self._pending_member_expired, group, new_id)
            d.callback(JoinResult(new_id, ErrorCode.MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(group, new_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, d, reason)

    def _join_current_member(self, member_id: str, group: Group, instance_id: str | None, client_id: str,
                             client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                             protocol_type: str, protocols: list[tuple[str, bytes]], d: Deferred,
                             reason: str | None) -> None:
        if group.is_(GroupState.DEAD):
            d.callback(JoinResult(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, {n for n, _ in protocols}):
            d.callback(JoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if member_id in group.pending_members:
            # The second JoinGroup of a dynamic member, now with the id it was given.
            if instance_id is not None:
                d.callback(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            self._add_member_and_rebalance(group, member_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, d, reason)
            return
        if group.static_fenced(instance_id, member_id):
            d.callback(JoinResult(member_id, ErrorCode.FENCED_INSTANCE_ID))
            return
        if member_id not in group.members or (instance_id is not None and instance_id not in group.static_members):
            d.callback(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            return
        member = group.members[member_id]
        state = group.state
        why = f"member {member_id} rejoins group {group.group_id} in {state.value}; reason: {reason}"
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              d, why)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # It probably missed its JoinGroup answer: give it the current generation again.
                d.callback(self._join_result(group, member, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, d, why)
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # The leader rejoining forces a rebalance: that is how it reacts to changes (new
                # topic partitions) that do not change any member's metadata.
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, d, why)
            else:
                d.callback(self._join_result(group, member, with_members=False))
        else:
            d.callback(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    @staticmethod
    def _join_result(group: Group, member: Member, with_members: bool, skip_assignment: bool = False,
                     leader_id: str | None = None) -> JoinResult:
        return JoinResult(
            member.member_id, ErrorCode.NONE, group.generation_id, group.protocol_type, group.protocol_name,
            (leader_id if leader_id is not None else group.leader_id) or "", skip_assignment,
            group.member_metadata() if with_members else [])

    def _add_member_and_rebalance(self, group: Group, member_id: str, instance_id: str | None, client_id: str,
                                  client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                                  protocol_type: str, protocols: list[tuple[str, bytes]], d: Deferred,
                                  reason: str | None) -> None:
        member = Member(member_id, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                        protocol_type, protocols)
        member.is_new = True
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            # Lets the initial rebalance delay extend while members keep arriving.
            group.new_member_added = True
        group.add(member, d)
        self.schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding member {member_id}; reason: {reason}")

    def _update_member_and_rebalance(self, group: Group, member: Member, protocols: list[tuple[str, bytes]],
                                     rebalance_timeout_ms: int, session_timeout_ms: int, d: Deferred,
                                     why: str) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, d)
        self._maybe_prepare_rebalance(group, why)

    def _update_static_member(self, group: Group, old_id: str, new_id: str, instance_id: str,
                              protocols: list[tuple[str, bytes]], d: Deferred, supports_skip_assignment: bool,
                              reason: str | None) -> None:
        current_leader = group.leader_id
        member = self._replace_static_member(group, instance_id, old_id, new_id)
        self.schedule_heartbeat(group, member)
        old_protocols = member.protocols
        group.update_member(member, protocols, member.rebalance_timeout_ms, member.session_timeout_ms, d)
        if group.is_(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                # Same protocol: no rebalance, only the new member id to persist. The assignors are
                # neither idempotent nor free of side effects, so the leader must not rerun one.
                generation = group.generation_id

                def stored(_: Any) -> None:
                    if not group.is_(GroupState.STABLE) or group.generation_id != generation:
                        return  # a rebalance started meanwhile; it answers this JoinGroup
                    if supports_skip_assignment:
                        is_leader = group.is_leader(new_id)
                        group.invoke_join(member, self._join_result(group, member, with_members=is_leader,
                                                                    skip_assignment=is_leader))
                    else:
                        # Older clients: naming the old leader keeps this member from believing it
                        # leads and running a trivial assignment a stable group would ignore.
                        group.invoke_join(member, self._join_result(group, member, with_members=False,
                                                                    leader_id=current_leader or ""))

                def failed(failure: Failure) -> None:
                    log.warning("cannot persist static member %s of group %s: %s", instance_id, group.group_id,
                                failure.getErrorMessage())
                    if group.generation_id != generation or new_id not in group.members:
                        group.invoke_join(member, JoinResult("", self.coordinator.failure_code(failure)))
                        return
                    group.update_member(member, old_protocols, member.rebalance_timeout_ms,
                                        member.session_timeout_ms, None)
                    old = self._replace_static_member(group, instance_id, new_id, old_id)
                    self.schedule_heartbeat(group, old)
                    d.callback(JoinResult("", self.coordinator.failure_code(failure), group.generation_id, group.protocol_type,
                                          group.protocol_name, current_leader or ""))

                self.coordinator.store.store_group(group.record()).addCallbacks(stored, failed)
            else:
                self._maybe_prepare_rebalance(
                    group, f"static member {instance_id} rejoined with a change of protocol; reason: {reason}")
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            # The leader may already be assigning to the old member id: start over.
            self.prepare_rebalance(group, f"static member {instance_id} rejoined during CompletingRebalance")
        # PreparingRebalance: the member simply waits for the join to complete.

    def _replace_static_member(self, group: Group, instance_id: str, old_id: str, new_id: str) -> Member:
        member = group.members.pop(old_id)
        # Fence the old incarnation if it is waiting on a rebalance phase.
        group.invoke_join(member, JoinResult(old_id, ErrorCode.FENCED_INSTANCE_ID))
        group.invoke_sync(member, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_id
        group.members[new_id] = member
        if group.is_leader(old_id):
            group.leader_id = new_id
        group.static_members[instance_id] = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        return member

    # -- rebalance ---------------------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, reason)

    def prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # Members waiting in SyncGroup must rejoin.
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        cancel_timer(group.sync_timer)
        group.sync_timer = None
        cancel_timer(group.join_timer)
        was_empty = group.is_(GroupState.EMPTY)
        group.state = GroupState.PREPARING_REBALANCE
        log.info("preparing to rebalance group %s in generation %d: %s", group.group_id, group.generation_id, reason)
        if was_empty:
            delay = self.coordinator.config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_timer = self.coordinator.later(delay / 1000, self._initial_join_expired, group, delay, remaining)
            group.join_initial = True
        else:
            group.join_initial = False
            group.join_timer = self.coordinator.later(group.rebalance_timeout_ms() / 1000, self._complete_join, group)
            self._try_complete_join(group)

    def _initial_join_expired(self, group: Group, configured: int, remaining: int) -> None:
        group.join_timer = None
        if group.new_member_added and remaining != 0:
            # Members are still arriving: wait another delay, within the rebalance timeout.
            group.new_member_added = False
            delay = min(configured, remaining)
            group.join_timer = self.coordinator.later(delay / 1000, self._initial_join_expired, group, configured,
                                                    max(remaining - delay, 0))
            return
        self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        """Complete the join phase early once every member has rejoined (not during the initial delay)."""
        if (group.is_(GroupState.PREPARING_REBALANCE) and group.join_timer is not None and not group.join_initial
                and group.has_all_members_joined()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        cancel_timer(group.join_timer)
        group.join_timer = None
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        # Dynamic members that did not rejoin are gone; static ones keep their place.
        for member in [m for m in group.members.values() if m.awaiting_join is None and m.instance_id is None]:
            log.info("group %s removes member %s which did not rejoin", group.group_id, member.member_id)
            self._remove_member(group, member, None)
        if group.is_(GroupState.DEAD):
            return
        if not self._elect_joined_leader(group) and group.members:
            # Nobody rejoined: wait again until session expiry removes the silent members.
            log.error("group %s could not complete its rebalance: no member rejoined", group.group_id)
            group.join_initial = False
            group.join_timer = self.coordinator.later(group.rebalance_timeout_ms() / 1000, self._complete_join, group)
            return
        self._init_next_generation(group)
        if group.is_(GroupState.EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            self.coordinator.store.store_group(group.record()).addErrback(
                lambda f: log.warning("cannot persist empty group %s: %s", group.group_id, f.getErrorMessage()))
            return
        log.info("stabilized group %s generation %d with %d members", group.group_id, group.generation_id,
                 len(group.members))
        for member in list(group.members.values()):
            group.invoke_join(member, self._join_result(group, member, with_members=group.is_leader(member.member_id)))
            self.schedule_heartbeat(group, member)
            member.is_new = False
        # Members that never send SyncGroup are dropped after the rebalance timeout.
        group.pending_sync = set(group.members)
        group.sync_timer = self.coordinator.later(group.rebalance_timeout_ms() / 1000, self._sync_expired, group,
                                                group.generation_id)

    @staticmethod
    def _elect_joined_leader(group: Group) -> bool:
        if group.leader_id is None:
            return False
        if group.members[group.leader_id].awaiting_join is not None:
            return True
        joined = next((mid for mid, m in group.members.items() if m.awaiting_join is not None), None)
        if joined is None:
            return False
        group.leader_id = joined
        return True

    def _init_next_generation(self, group: Group) -> None:
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.state = GroupState.COMPLETING_REBALANCE
        else:
            group.protocol_name = None
            group.state = GroupState.EMPTY
        group.subscribed_topics = group.compute_subscribed_topics()
        group.state_timestamp = self.coordinator.now_ms()
        group.pending_sync.clear()

    def _sync_expired(self, group: Group, generation: int) -> None:
        group.sync_timer = None
        if generation != group.generation_id or group.state not in (GroupState.COMPLETING_REBALANCE,
                                                                    GroupState.STABLE):
            return
        if not group.pending_sync:
            return
        missing = sorted(group.pending_sync)
        for member_id in missing:
            member = group.members.get(member_id)
            group.remove(member_id)
            if member is not None:
                self._drop_member_timers(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
        log.info("group %s removed members who sent no SyncGroup: %s", group.group_id, missing)
        self.prepare_rebalance(group, "members did not sync in time")

    def _reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        ok = error is ErrorCode.NONE
        for member in list(group.members.values()):
            result = SyncResult(error, group.protocol_type if ok else None, group.protocol_name if ok else None,
                                member.assignment)
            if group.invoke_sync(member, result):
                # Sessions that ran out while waiting on the leader or the write start over now.
                self.schedule_heartbeat(group, member)

    # -- SyncGroup ---------------------------------------------------------------------------------
    def sync_group(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> Deferred:
        """Fires with a SyncResult: for the leader's sync once the assignment is durable, for the
        others once the leader's arrives."""
        error = self.coordinator.validate_status(group_id, GroupApi.SYNC)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance in progress was lost with the old state: rejoin without rediscovery.
            return succeed(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        if error is not None:
            return succeed(SyncResult(error))
        group = self.coordinator.groups.get(group_id)
        if group is None:
            return succeed(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if group.is_(GroupState.DEAD):
            return succeed(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        if group.consumer is not None:  # a classic member of a consumer group (consumer_groups/classic_members.py)
            return succeed(self.coordinator.consumer.classic_members.sync(group, generation_id, member_id, instance_id,
                                                              protocol_type, protocol_name))
        error = group.validate_member(member_id, instance_id)
        if error is None and generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if error is None and protocol_type is not None and protocol_type != group.protocol_type:
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is None and protocol_name is not None and protocol_name != group.protocol_name:
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            return succeed(SyncResult(error))
        if group.is_(GroupState.EMPTY):
            return succeed(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if group.is_(GroupState.PREPARING_REBALANCE):
            return succeed(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member = group.members[member_id]
        if group.is_(GroupState.STABLE):
            group.pending_sync.discard(member_id)
            self.schedule_heartbeat(group, member)
            return succeed(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
        # CompletingRebalance: wait for the leader's assignment.
        d: Deferred = Deferred()
        if member.awaiting_sync is not None:
            member.awaiting_sync.callback(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = d
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            cancel_timer(group.sync_timer)
            group.sync_timer = None
        if group.is_leader(member_id):
            log.info("assignment received from leader %s of group %s for generation %d", member_id, group_id,
                     group.generation_id)
            # Members the leader left out get an empty assignment.
            assignment = {mid: assignments.get(mid, b"") for mid in group.members}
            generation = group.generation_id
            record = group.record()
            for rm in record.members:
                rm.assignment = assignment[rm.member_id]

            def stored(_: Any) -> None:
                # Another member may have joined meanwhile: only complete the same generation.
                if group.is_(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation:
                    for mid, m in group.members.items():
                        m.assignment = assignment.get(mid, b"")
                    self._propagate_assignment(group, ErrorCode.NONE)
                    group.state = GroupState.STABLE

            def failed(failure: Failure) -> None:
                log.warning("cannot persist the assignment of group %s: %s", group_id, failure.getErrorMessage())
                if group.is_(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation:
                    self._reset_and_propagate_assignment_error(group, self.coordinator.failure_code(failure))
                    self._maybe_prepare_rebalance(group, "the assignment could not be persisted")

            self.coordinator.store.store_group(record).addCallbacks(stored, failed)
        return d

    # -- Heartbeat ---------------------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        error = self.coordinator.validate_status(group_id, GroupApi.HEARTBEAT)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # still loading: answer blindly, as Kafka does
        if error is not None:
            return error
        group = self.coordinator.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.consumer is not None:
            return self.coordinator.consumer.classic_members.heartbeat(group, member_id, instance_id, generation_id)
        error = group.validate_member(member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.schedule_heartbeat(group, group.members[member_id])
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        """The member's next heartbeat is due within ``timeout_ms`` (its session timeout by default)."""
        cancel_timer(member.heartbeat_timer)
        member.heartbeat_satisfied = False
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = self.coordinator.later(timeout / 1000, self._heartbeat_expired, group,
                                                      member.member_id)

    def _heartbeat_expired(self, group: Group, member_id: str) -> None:
        if group.is_(GroupState.DEAD) or self.coordinator.groups.get(group.group_id) is not group:
            return
        member = group.members.get(member_id)
        if member is None:
            return
        member.heartbeat_timer = None
        if not member.has_satisfied_heartbeat():
            log.info("member %s of group %s has failed (session expired); removing it", member_id, group.group_id)
            self._remove_member(group, member, f"member {member_id} session expired")

    def _pending_member_expired(self, group: Group, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.pop(member_id)
            log.info("pending member %s of group %s removed after its session timeout", member_id, group.group_id)
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._try_complete_join(group)

    # -- LeaveGroup --------------------------------------------------------------------------------
    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove members given as (member id, group instance id); "" as member id removes the static
        member of that instance id (administrative removal)."""
        error = self.coordinator.validate_status(group_id, GroupApi.LEAVE)
        if error is not None:
            return error, []
        group = self.coordinator.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        if group.consumer is not None:
            return self.coordinator.consumer.classic_members.leave(group, leaving)
        errors: list[ErrorCode] = []
        for member_id, instance_id in leaving:
            if member_id == "":
                current = group.static_members.get(instance_id) if instance_id is not None else None
                if current is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                else:
                    self._remove_member(group, group.members[current], f"static member {instance_id} removed")
                    errors.append(ErrorCode.NONE)
            elif member_id in group.pending_members:
                group.remove(member_id)
                if group.is_(GroupState.PREPARING_REBALANCE):
                    self._try_complete_join(group)
                errors.append(ErrorCode.NONE)
            else:
                error = group.validate_member(member_id, instance_id)
                if error is None:
                    log.info("member %s leaves group %s", member_id, group_id)
                    self._remove_member(group, group.members[member_id], f"member {member_id} left")
                    errors.append(ErrorCode.NONE)
                else:
                    errors.append(error)
        return ErrorCode.NONE, errors

    def _remove_member(self, group: Group, member: Member, reason: str | None) -> None:
        """Remove a member and move the group on (Kafka's removeMemberAndUpdateGroup)."""
        # A JoinGroup still waiting is told to start over; the member may still be alive.
        group.invoke_join(member, JoinResult("", ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self._drop_member_timers(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
        if reason is None:
            return
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    @staticmethod
    def _drop_member_timers(group: Group, member: Member, error: ErrorCode) -> None:
        cancel_timer(member.heartbeat_timer)
        member.heartbeat_timer = None
        # Every request must be answered (responses go out in order on its connection).
        group.invoke_sync(member, SyncResult(error))

    def cancel_group_timers(self, group: Group) -> None:
        cancel_timer(group.join_timer)
        cancel_timer(group.sync_timer)
        for member in group.members.values():
            cancel_timer(member.heartbeat_timer)
        for timer in group.pending_members.values():
            cancel_timer(timer)
