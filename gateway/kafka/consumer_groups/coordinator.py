"""The consumer group protocol's coordinator (KIP-848, Kafka 4.0): ConsumerGroupHeartbeat,
ConsumerGroupDescribe, and the member-epoch checks of OffsetCommit/OffsetFetch.

A heartbeat (``heartbeat``) validates the request as Kafka does, finds or creates the group (an empty
classic group is upgraded in place, keeping its offsets), joins/updates/leaves the member, bumps the
group epoch when what the assignor sees changed (members, subscriptions, preferred assignor, the
subscribed topics' ids and partition counts), recomputes the target assignment with the group's
assignor, reconciles the member toward its target (``reconciliation``) and answers with its epoch and,
when needed, its assignment. Every change is written to ``_system/_tables/kafka_consumer_groups`` (one
JSON record per group, through the classic coordinator's serial ``GroupStore`` writer, so it stays
ordered with offset commits) and answered only once durable. Heartbeats that change nothing answer at
once.

Groups share the classic coordinator's group map: a consumer-protocol group is a classic ``Group``
with no classic members whose ``consumer`` attribute holds the ``ConsumerGroup``; the committed offsets
stay there, so OffsetCommit/OffsetFetch/OffsetDelete/DeleteGroups work unchanged apart from the member
checks this module supplies.

Timers (``callLater`` on the reactor): a member's session (``session_timeout_ms``, Kafka's
group.consumer.session.timeout.ms) restarts at each heartbeat; a member told to revoke partitions must
do so within its rebalance timeout. Either expiry removes (fences) the member and bumps the group epoch.

Threading: reactor thread only, like the classic coordinator that owns it.
"""

from __future__ import annotations

import base64
import functools
import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure

from millrace.gateway.kafka.classic_groups.group import (
    CONSUMER_PROTOCOL_TYPE,
    Group,
    GroupState,
    cancel_timer,
)
from millrace.gateway.kafka.consumer_groups.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    Assignment,
    MemberSpec,
    TopicSpec,
)
from millrace.gateway.kafka.consumer_groups.classic_members import ClassicMembers
from millrace.gateway.kafka.consumer_groups.group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
)
from millrace.gateway.kafka.consumer_groups.reconciliation import MemberAssignment, MemberState, reconcile
from millrace.gateway.kafka.group_status import GroupApi
from millrace.gateway.kafka.group_store import CONSUMER_GROUPS_TABLE, GROUPS_TABLE
from millrace.gateway.kafka_protocol.errors import ErrorCode

if TYPE_CHECKING:
    from millrace.gateway.kafka.group_views import GroupHub

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS = 45_000  # group.consumer.session.timeout.ms
DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000  # group.consumer.heartbeat.interval.ms
DEFAULT_MAX_SIZE = 2**31 - 1  # group.consumer.max.size


@dataclass
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: dict[uuid.UUID, frozenset[int]] | None = None  # TopicPartitions; None: not sent


@dataclass
class HeartbeatResult:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


class _Refused(Exception):  # noqa: N818 - a Kafka error answer, not a failure of ours
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def new_member_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): 22 URL-safe base64 characters."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@functools.lru_cache(maxsize=256)
def compile_regex(regex: str) -> re.Pattern[str]:
    """A subscription regex. Kafka uses RE2/J; Python's ``re`` agrees on the common subset (classes,
    alternation, repetition, anchors) but also accepts backreferences and lookaround, which RE2/J refuses."""
    return re.compile(regex)


class ConsumerGroupCoordinator:
    """The consumer-protocol half of the group coordinator."""

    def __init__(self, classic: GroupHub, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
                 assignors: tuple[str, ...] = ("uniform", "range"), max_size: int = DEFAULT_MAX_SIZE) -> None:
        self.classic = classic
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.assignors = assignors
        self.max_size = max_size
        # The classic APIs of classic-protocol members in consumer groups (online upgrade).
        self.classic_members = ClassicMembers(self)

    # -- plumbing ----------------------------------------------------------------------------------
    def _topics(self) -> Any:
        return self.classic.topics

    def _later(self, seconds: float, fn: Any, *args: Any) -> Any:
        return self.classic.later(seconds, fn, *args)

    def _persist(self, group: ConsumerGroup) -> Deferred:
        if not self._is_current(group):
            return succeed(None)  # converted back to a classic group meanwhile (its record is written)
        return self.classic.store.write(CONSUMER_GROUPS_TABLE, puts=[(group.group_id.encode(), group.encode())])

    def install(self, records: list[tuple[str, bytes]]) -> None:
        """Attach the stored consumer groups (at load, after the classic groups and offsets)."""
        for group_id, raw in records:
            cg = ConsumerGroup.decode(group_id, raw)
            shell = self.classic.groups.get(group_id)
            if shell is None:
                shell = self.classic.groups[group_id] = Group(group_id)
            shell.consumer = cg
            for member in cg.members.values():
                self._touch_session(cg, member)
                if member.assignment.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_revocation(cg, member)

    def shutdown(self) -> None:
        for shell in self.classic.groups.values():
            cg = getattr(shell, "consumer", None)
            if cg is not None:
                for member in cg.members.values():
                    cancel_timer(member.session_timer)
                    cancel_timer(member.rebalance_timer)

    # -- ConsumerGroupHeartbeat ---------------------------------------------------------------------
    def heartbeat(self, req: HeartbeatRequest, api_version: int, client_id: str, client_host: str
                  ) -> HeartbeatResult | Deferred[HeartbeatResult]:
        try:
            self._validate(req, api_version)
            status = self.classic.validate_status(req.group_id, GroupApi.JOIN)
            if status is not None:
                raise _Refused(status, status.description)
            if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(req)
            return self._join_or_heartbeat(req, api_version, client_id, client_host)
        except _Refused as refused:
            return HeartbeatResult(refused.error, refused.message, member_epoch=req.member_epoch)

    def _validate(self, req: HeartbeatRequest, api_version: int) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        def invalid(message: str) -> _Refused:
            return _Refused(ErrorCode.INVALID_REQUEST, message)

        if not req.group_id:
            raise invalid("GroupId can't be empty.")
        if req.instance_id is not None and req.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if req.rack_id is not None and req.rack_id == "":
            raise invalid("RackId can't be empty.")
        if api_version >= 1 and not req.member_id:
            raise invalid("MemberId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or any(req.owned.values()):
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif req.member_epoch == STATIC_LEAVE_EPOCH:
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
            if not req.member_id:
                raise invalid("MemberId can't be empty.")
        elif req.member_epoch < STATIC_LEAVE_EPOCH:
            raise invalid(f"MemberEpoch {req.member_epoch} is invalid.")
        elif not req.member_id:
            raise invalid("MemberId can't be empty.")
        if req.server_assignor is not None and req.server_assignor not in self.assignors:
            raise _Refused(ErrorCode.UNSUPPORTED_ASSIGNOR,
                           f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                           f"{', '.join(self.assignors)}.")
        if req.subscribed_topic_regex:
            try:
                compile_regex(req.subscribed_topic_regex)
            except re.error as exc:
                # Kafka 4.0 answers INVALID_REGULAR_EXPRESSION, a code past this gateway's error table.
                raise invalid(f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid regular "
                              f"expression: {exc}.") from None

    def _group_for_join(self, group_id: str, member_epoch: int) -> ConsumerGroup:
        """The consumer group to join: created on a first join, converted from a classic group: an empty
        one simply, one with members of the classic consumer protocol online (``classic_members``); a
        classic group of another protocol type (Connect, ...) is not a consumer group."""
        shell = self.classic.groups.get(group_id)
        if shell is not None and shell.consumer is not None:
            return shell.consumer
        if member_epoch != 0:
            # Unknown here (deleted meanwhile): the member must rejoin with epoch 0.
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {group_id} has no member with this id.")
        if shell is None or shell.is_(GroupState.DEAD):
            shell = self.classic.groups[group_id] = Group(group_id)
        elif shell.members:
            if shell.protocol_type != CONSUMER_PROTOCOL_TYPE:
                raise _Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            return self.classic_members.upgrade(shell)
        else:
            self.classic.membership.cancel_group_timers(shell)  # members still to send their id (MEMBER_ID_REQUIRED)
            shell.pending_members.clear()
            shell.state = GroupState.EMPTY
            log.info("empty classic group %s is upgraded to the consumer protocol", group_id)
            # Its classic record goes (an empty group's is a generation marker only); offsets stay.
            self.classic.store.write(GROUPS_TABLE, removes=[group_id.encode()]).addErrback(
                lambda f: log.warning("cannot remove the classic record of %s: %s", group_id, f.getErrorMessage()))
            shell.protocol_type = None
            shell.protocol_name = None
        cg = ConsumerGroup(group_id)
        cg.empty_since = self.classic.now_ms()
        shell.consumer = cg
        return cg

    def _join_or_heartbeat(self, req: HeartbeatRequest, api_version: int, client_id: str, client_host: str
                           ) -> HeartbeatResult | Deferred[HeartbeatResult]:
        cg = self._group_for_join(req.group_id, req.member_epoch)
        bump = False
        changed = False
        member = cg.members.get(req.member_id) if req.member_id else None
        if req.member_epoch == 0:
            if req.instance_id is not None:
                member, replaced = self._static_join(cg, req, member)
                changed = changed or replaced
            if member is None:
                if len(cg.members) >= self.max_size:
                    raise _Refused(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                   f"The consumer group has reached its maximum capacity of {self.max_size} members.")
                member = ConsumerMember(req.member_id or new_member_id(), req.instance_id, req.rack_id, client_id,
                                        client_host, req.rebalance_timeout_ms)
                cg.add_member(member)
                log.info("member %s joins consumer group %s", member.member_id, cg.group_id)
                bump = changed = True
        else:
            if member is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID,
                               f"Member {req.member_id} is not a member of group {req.group_id}.")
            if member.instance_id is not None and req.instance_id is not None and \
                    cg.static_members.get(req.instance_id) != member.member_id:
                raise _Refused(ErrorCode.FENCED_INSTANCE_ID,
                               f"Static member {member.member_id} with instance id {req.instance_id} was fenced.")
            self._check_epoch(member, req.member_epoch, req.owned)
        # The subscription and the member's other fields (null: unchanged).
        if req.rebalance_timeout_ms != -1 and req.rebalance_timeout_ms != member.rebalance_timeout_ms:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
            changed = True
        if req.rack_id is not None and req.rack_id != member.rack_id:
            member.rack_id = req.rack_id
            changed = True
        if req.subscribed_topic_names is not None:
            names = tuple(sorted(set(req.subscribed_topic_names)))
            if names != member.subscribed_names:
                member.subscribed_names = names
                bump = changed = True
        if req.subscribed_topic_regex is not None:
            regex = req.subscribed_topic_regex or None  # "" clears it
            if regex != member.subscribed_regex:
                member.subscribed_regex = regex
                bump = changed = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor
            bump = changed = True
        member.client_id, member.client_host = client_id, client_host
        # What the assignor would see of the subscribed topics; any difference is a new group epoch.
        topics = self._subscribed_metadata(cg)
        if bump or topics != cg.topics:
            self._new_target(cg, topics)
            changed = True
        before = member.assignment
        self._reconcile(cg, member, req.owned)
        changed = changed or member.assignment != before
        self._touch_session(cg, member)
        full = req.member_epoch == 0 or (
            req.rebalance_timeout_ms != -1 and req.owned is not None
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        send_assignment = full or member.assignment.assigned != before.assigned
        result = HeartbeatResult(ErrorCode.NONE, None, member.member_id, member.epoch, self.heartbeat_interval_ms,
                                 member.assignment.assigned if send_assignment else None)
        if not changed:
            return result
        return self._persist(cg).addCallbacks(lambda _: result, self._write_failed, errbackArgs=(cg,))

    def _static_join(self, cg: ConsumerGroup, req: HeartbeatRequest, member: ConsumerMember | None
                     ) -> tuple[ConsumerMember | None, bool]:
        """A static member (re)joining: it takes over its instance's place (assignment, epoch) if the
        previous incarnation left with epoch -2; another live member with the instance id refuses it."""
        assert req.instance_id is not None
        current_id = cg.static_members.get(req.instance_id)
        if current_id is None:
            return member, False
        if current_id == req.member_id:
            if member is not None and member.epoch == STATIC_LEAVE_EPOCH:
                # The same incarnation back after a temporary leave: at the epoch it left with.
                a = member.assignment
                cg.set_assignment(member, MemberAssignment(a.state, max(a.previous_epoch, 0), a.previous_epoch,
                                                           a.assigned, a.revoking))
                return member, True
            return member, False
        previous = cg.members[current_id]
        if previous.epoch != STATIC_LEAVE_EPOCH:
            raise _Refused(ErrorCode.UNRELEASED_INSTANCE_ID,
                           f"Static member {current_id} with instance id {req.instance_id} is not released yet.")
        log.info("static member %s of consumer group %s rejoins as %s", req.instance_id, cg.group_id, req.member_id)
        target = cg.target.get(current_id, {})
        self._forget_member(cg, previous)
        # Back at the epoch it left with (the previous one), so it reconciles like any member.
        a = previous.assignment
        epoch = a.previous_epoch if a.epoch == STATIC_LEAVE_EPOCH else a.epoch
        replacement = ConsumerMember(req.member_id or new_member_id(), req.instance_id, req.rack_id,
                                     previous.client_id, previous.client_host, previous.rebalance_timeout_ms,
                                     previous.subscribed_names, previous.subscribed_regex, previous.server_assignor,
                                     MemberAssignment(a.state, max(epoch, 0), a.previous_epoch, a.assigned,
                                                      a.revoking))
        replacement.since = dict(previous.since)
        cg.add_member(replacement)
        cg.target[replacement.member_id] = target
        return replacement, True

    @staticmethod
    def _check_epoch(member: ConsumerMember, received: int, owned: Mapping[uuid.UUID, frozenset[int]] | None) -> None:
        """Kafka's throwIfMemberEpochIsInvalid: a lower epoch is accepted only if it is the previous one and
        the member owns no more than it is assigned (it missed the answer that moved it on)."""
        current = member.epoch
        if received > current:
            raise _Refused(ErrorCode.FENCED_MEMBER_EPOCH,
                           f"The consumer group member has a greater member epoch ({received}) than the one known "
                           f"by the group coordinator ({current}). The member must abandon all its partitions "
                           "and rejoin.")
        if received < current:
            subset = owned is not None and all(
                ps <= member.assignment.assigned.get(t, frozenset()) for t, ps in owned.items())
            if received != member.assignment.previous_epoch or not subset:
                raise _Refused(ErrorCode.FENCED_MEMBER_EPOCH,
                               f"The consumer group member has a smaller member epoch ({received}) than the one "
                               f"known by the group coordinator ({current}). The member must abandon all its "
                               "partitions and rejoin.")

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult | Deferred[HeartbeatResult]:
        shell = self.classic.groups.get(req.group_id)
        cg: ConsumerGroup | None = shell.consumer if shell is not None else None
        if cg is None:
            raise _Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
        if req.instance_id is not None:
            current_id = cg.static_members.get(req.instance_id)
            if current_id is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID,
                               f"Instance id {req.instance_id} is unknown in group {req.group_id}.")
            if current_id != req.member_id:
                raise _Refused(ErrorCode.FENCED_INSTANCE_ID,
                               f"Static member {req.member_id} with instance id {req.instance_id} was fenced.")
        member = cg.members.get(req.member_id)
        if member is None:
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID,
                           f"Member {req.member_id} is not a member of group {req.group_id}.")
        result = HeartbeatResult(ErrorCode.NONE, None, req.member_id, req.member_epoch, 0)
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # A static member leaving for a while keeps its partitions until its session ends or it returns.
            log.info("static member %s of consumer group %s leaves temporarily", req.instance_id, cg.group_id)
            a = member.assignment
            cg.set_assignment(member, MemberAssignment(a.state, STATIC_LEAVE_EPOCH, a.epoch, a.assigned, a.revoking))
            cancel_timer(member.rebalance_timer)
        else:
            log.info("member %s leaves consumer group %s", req.member_id, cg.group_id)
            self._remove(cg, member)
        return self._persist(cg).addCallbacks(lambda _: result, self._write_failed, errbackArgs=(cg,))

    def _write_failed(self, failure: Failure, cg: ConsumerGroup) -> HeartbeatResult:
        log.warning("cannot persist consumer group %s: %s", cg.group_id, failure.getErrorMessage())
        return HeartbeatResult(self.classic.failure_code(failure), "The coordinator could not store the group.")

    # -- epochs, targets, reconciliation -----------------------------------------------------------
    def _resolver(self) -> Callable[[str], list[str]]:
        """Regex -> matching topic names, over one listing of the topics, each regex matched once (a
        heartbeat looks at every member's subscription)."""
        names = self._topics().names()
        matched: dict[str, list[str]] = {}

        def resolve(regex: str) -> list[str]:
            if regex not in matched:
                pattern = compile_regex(regex)
                matched[regex] = [n for n in names if pattern.fullmatch(n)]
            return matched[regex]

        return resolve

    def _subscribed_metadata(self, cg: ConsumerGroup) -> dict[str, tuple[uuid.UUID, int]]:
        out: dict[str, tuple[uuid.UUID, int]] = {}
        topics = self._topics()
        for name in cg.subscribed_topic_names(self._resolver()):
            info = topics.get(name)
            if info is not None:
                out[name] = (info.topic_id, info.partition_count)
        return out

    def _preferred_assignor(self, cg: ConsumerGroup) -> str:
        """The assignor most members name (Kafka's computePreferredServerAssignor), else the first configured."""
        votes = Counter(m.server_assignor for m in cg.members.values() if m.server_assignor is not None)
        if not votes:
            return self.assignors[0] if self.assignors else DEFAULT_ASSIGNOR
        best = max(votes.values())
        return min(n for n, c in votes.items() if c == best)

    def _new_target(self, cg: ConsumerGroup, topics: dict[str, tuple[uuid.UUID, int]]) -> None:
        """Bump the group epoch and compute the target assignment at it."""
        cg.group_epoch += 1
        cg.topics = topics
        cg.assignor = self._preferred_assignor(cg)
        by_id = {t: TopicSpec(n, c) for n, (t, c) in topics.items()}
        members = {}
        for m in cg.members.values():
            names = set(m.subscribed_names)
            if m.subscribed_regex is not None:
                # ``topics`` already holds every existing topic some member's regex matches.
                pattern = compile_regex(m.subscribed_regex)
                names.update(n for n in topics if pattern.fullmatch(n))
            members[m.member_id] = MemberSpec(frozenset(topics[n][0] for n in names if n in topics),
                                              cg.target.get(m.member_id, {}))
        cg.target = ASSIGNORS[cg.assignor](members, by_id)
        cg.assignment_epoch = cg.group_epoch
        log.info("consumer group %s epoch %d: new target assignment by %s for %d members", cg.group_id,
                 cg.group_epoch, cg.assignor, len(members))

    def _reconcile(self, cg: ConsumerGroup, member: ConsumerMember,
                   owned: Mapping[uuid.UUID, frozenset[int]] | None) -> None:
        if member.epoch == STATIC_LEAVE_EPOCH:
            return
        before = member.assignment
        after = reconcile(before, cg.assignment_epoch, cg.target.get(member.member_id, {}), owned,
                          cg.owner_epoch(member.member_id))
        if after == before:
            return
        cg.set_assignment(member, after)
        if after.state is MemberState.UNREVOKED_PARTITIONS:
            if before.state is not MemberState.UNREVOKED_PARTITIONS or before.epoch != after.epoch \
                    or member.rebalance_timer is None:
                self._schedule_revocation(cg, member)
        else:
            cancel_timer(member.rebalance_timer)
            member.rebalance_timer = None

    @staticmethod
    def _forget_member(cg: ConsumerGroup, member: ConsumerMember) -> None:
        """Drop a member without a new group epoch (its instance id's next incarnation replaces it)."""
        cg.remove_member(member.member_id)
        cancel_timer(member.session_timer)
        cancel_timer(member.rebalance_timer)

    def _remove(self, cg: ConsumerGroup, member: ConsumerMember) -> None:
        """Remove a member and give its partitions to the others (a new group epoch)."""
        cancel_timer(member.session_timer)
        cancel_timer(member.rebalance_timer)
        cg.remove_member(member.member_id)
        if cg.members and member.classic is None and all(m.classic is not None for m in cg.members.values()) \
                and self.classic_members.downgrade(cg):
            return  # the last consumer-protocol member left: a classic group again (online downgrade)
        if cg.members:
            self._new_target(cg, self._subscribed_metadata(cg))
        else:
            cg.group_epoch += 1
            cg.assignment_epoch = cg.group_epoch
            cg.target = {}
            cg.topics = {}
            cg.empty_since = self.classic.now_ms()

    # -- timers ------------------------------------------------------------------------------------
    def _touch_session(self, cg: ConsumerGroup, member: ConsumerMember) -> None:
        cancel_timer(member.session_timer)
        timeout = member.classic.session_timeout_ms if member.classic is not None else self.session_timeout_ms
        member.session_timer = self._later(timeout / 1000, self._session_expired, cg, member.member_id)

    def _schedule_revocation(self, cg: ConsumerGroup, member: ConsumerMember) -> None:
        cancel_timer(member.rebalance_timer)
        member.rebalance_timer = self._later(member.rebalance_timeout_ms / 1000, self._revocation_expired, cg,
                                             member.member_id, member.epoch)

    def _session_expired(self, cg: ConsumerGroup, member_id: str) -> None:
        member = cg.members.get(member_id)
        if member is None or not self._is_current(cg):
            return
        member.session_timer = None
        log.info("member %s of consumer group %s is removed: its session expired", member_id, cg.group_id)
        self._remove_and_store(cg, member)

    def _revocation_expired(self, cg: ConsumerGroup, member_id: str, epoch: int) -> None:
        member = cg.members.get(member_id)
        if member is None or not self._is_current(cg):
            return
        member.rebalance_timer = None
        if member.assignment.state is MemberState.UNREVOKED_PARTITIONS and member.epoch == epoch:
            log.info("member %s of consumer group %s is fenced: it did not revoke its partitions within its "
                     "rebalance timeout", member_id, cg.group_id)
            self._remove_and_store(cg, member)

    def _remove_and_store(self, cg: ConsumerGroup, member: ConsumerMember) -> None:
        self._remove(cg, member)
        self._persist(cg).addErrback(
            lambda f: log.warning("cannot persist consumer group %s: %s", cg.group_id, f.getErrorMessage()))

    def _is_current(self, cg: ConsumerGroup) -> bool:
        shell = self.classic.groups.get(cg.group_id)
        return shell is not None and shell.consumer is cg

    # -- hooks for the classic coordinator ---------------------------------------------------------
    def validate_commit(self, cg: ConsumerGroup, member_id: str, member_epoch: int, api_version: int,
                        partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """OffsetCommit on a consumer group: the refused partitions with their error (Kafka's
        ConsumerGroup.validateOffsetCommit). A commit at an older member epoch is accepted for a partition
        the member has held since that epoch or before (KIP-1251's assignment epochs): the epoch moves
        on in a heartbeat answer that can cross a commit in flight, and Java clients 4.2+ do not retry
        a commit refused with STALE_MEMBER_EPOCH."""
        wanted = list(partitions)
        if member_epoch < 0 and not member_id:
            # Admin clients and assign() consumers: only while the group has no members.
            return {} if not cg.members else dict.fromkeys(wanted, ErrorCode.UNKNOWN_MEMBER_ID)
        member = cg.members.get(member_id)
        if member is None:
            return dict.fromkeys(wanted, ErrorCode.UNKNOWN_MEMBER_ID)
        if member.classic is not None:
            # A classic member's generation is its member epoch, which moves only when it rejoins.
            return {} if member_epoch == member.epoch else dict.fromkeys(wanted, ErrorCode.ILLEGAL_GENERATION)
        if api_version < 9:
            # Members of the consumer protocol must commit with OffsetCommit v9+.
            return dict.fromkeys(wanted, ErrorCode.UNSUPPORTED_VERSION)
        if member_epoch == member.epoch:
            return {}
        if member_epoch > member.epoch:
            return dict.fromkeys(wanted, ErrorCode.STALE_MEMBER_EPOCH)
        topics = self._topics()
        refused = {}
        for tp in wanted:
            info = topics.get(tp[0])
            since = member.since.get((info.topic_id, tp[1])) if info is not None else None
            if since is None or since > member_epoch:
                refused[tp] = ErrorCode.STALE_MEMBER_EPOCH
        return refused

    @staticmethod
    def validate_member_epoch(cg: ConsumerGroup, member_id: str, member_epoch: int) -> ErrorCode | None:
        """TxnOffsetCommit on a consumer group: member id and epoch, when given, must be the member's
        current epoch or the one before (the answer moving it on may cross the commit)."""
        if member_epoch < 0 and not member_id:
            return None
        member = cg.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch not in (member.epoch, member.assignment.previous_epoch):
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    @staticmethod
    def validate_fetch(cg: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """OffsetFetch v9 with a member id and epoch (Kafka's ConsumerGroup.validateOffsetFetch)."""
        if member_epoch < 0 and member_id is None:
            return None
        member = cg.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    def subscribed_topics(self, cg: ConsumerGroup) -> set[str]:
        return cg.subscribed_topic_names(self._resolver())

    def forget(self, group_id: str) -> Deferred:
        """Remove a consumer group's record (the group is deleted or converted to classic)."""
        return self.classic.store.write(CONSUMER_GROUPS_TABLE, removes=[group_id.encode()])

    def downgrade_if_empty(self, shell: Group) -> bool:
        """A classic JoinGroup for a consumer group: an empty one becomes classic again (as Kafka converts
        it); True if the group is (now) classic."""
        cg: ConsumerGroup | None = shell.consumer
        if cg is None:
            return True
        if cg.members:
            return False
        log.info("empty consumer group %s is converted to a classic group", cg.group_id)
        shell.consumer = None
        self.forget(cg.group_id).addErrback(
            lambda f: log.warning("cannot remove consumer group record %s: %s", cg.group_id, f.getErrorMessage()))
        return True

    # -- ConsumerGroupDescribe ---------------------------------------------------------------------
    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        status = self.classic.validate_status(group_id or None, GroupApi.DESCRIBE)
        if status is not None:
            return status, None, None
        shell = self.classic.groups.get(group_id)
        if shell is None or shell.is_(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        if shell.consumer is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.", None
        return ErrorCode.NONE, None, shell.consumer

    @staticmethod
    def state_of(cg: ConsumerGroup) -> ConsumerGroupState:
        return cg.state()

