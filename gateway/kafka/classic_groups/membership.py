"""Kafka's classic group coordinator: membership (join/sync/heartbeat/leave), rebalances and
committed offsets, following the Java broker's GroupCoordinator.

A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable (and Dead when removed).
A rebalance waits for every known member to rejoin, up to the largest rebalance timeout (a new group
first waits ``group_initial_rebalance_delay_ms``, extended while members keep arriving); members who
did not rejoin are dropped, a leader is chosen among those who did, and the generation advances.
The leader's SyncGroup carries the assignment, which is persisted before every member gets its share.
Heartbeats keep a member alive for its session timeout; an expired member is removed and triggers a
rebalance.

Threading: the coordinator lives on the reactor thread. Its timers are ``callLater`` calls and its
only blocking work, the table writes, goes through ``GroupStore`` on the broker's worker pool.
JoinGroup and SyncGroup answers are Deferreds completed when their rebalance phase completes.
"""

from __future__ import annotations

import collections
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, TypeVar, overload

from twisted.internet.defer import Deferred, gatherResults, maybeDeferred, succeed
from twisted.python.failure import Failure

from millrace.gateway.kafka.consumer_groups.group import ConsumerGroup
from millrace.gateway.kafka.group_store import (
    GroupRecord,
    GroupStore,
    LoadedState,
    MemberRecord,
    OffsetAndMetadata,
)
from millrace.gateway.kafka_protocol.codec import KafkaDecodeError, decode_message
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "GroupCoordinator",
    "GroupState",
    "JoinResult",
    "OffsetAndMetadata",
    "SyncResult",
    "GroupOverview",
    "GroupSummary",
    "MemberSummary",
    "get_coordinator",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
# JoinGroup of a member that never completes it is dropped after this (Kafka's NewMemberJoinTimeoutMs):
# its socket is muted while the request waits, so there is no other way to notice it is gone.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes default
DEFAULT_OFFSETS_RETENTION_MS = 7 * 24 * 3600 * 1000  # offsets.retention.minutes = 10080
DEFAULT_RETENTION_CHECK_INTERVAL_MS = 600_000  # offsets.retention.check.interval.ms
# Group operations a principal may be granted (AclOperation READ, DELETE, DESCRIBE); with no
# authorizer configured Kafka reports all of them as authorized.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)

TopicPartition = tuple[str, int]


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class _Api(Enum):
    """Which API asks; decides whether an empty group id is acceptable."""

    JOIN = "join"
    SYNC = "sync"
    HEARTBEAT = "heartbeat"
    LEAVE = "leave"
    OFFSET_COMMIT = "offset_commit"
    OFFSET_FETCH = "offset_fetch"
    OFFSET_DELETE = "offset_delete"
    DESCRIBE = "describe"
    DELETE = "delete"


# For backwards compatibility Kafka accepts the empty group id for these (offset storage of
# ungrouped consumers, and so that such a "group" can be described and deleted).
_EMPTY_ID_OK = {_Api.OFFSET_COMMIT, _Api.OFFSET_FETCH, _Api.DESCRIBE, _Api.DELETE}


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
        self.heartbeat_timer: Any = None

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
        self.join_timer: Any = None
        self.join_initial = False  # the join timer is the initial delay, which never completes early
        self.sync_timer: Any = None
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
        _cancel(timer)
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

    def record(self) -> GroupRecord:
        proto = self.protocol_name
        return GroupRecord(self.group_id, self.protocol_type, self.generation_id, proto, self.leader_id,
                           self.state_timestamp, [
                               MemberRecord(m.member_id, m.instance_id, m.client_id, m.client_host,
                                            m.rebalance_timeout_ms, m.session_timeout_ms,
                                            m.metadata(proto) if proto is not None else b"", m.assignment)
                               for m in self.members.values()])


def _cancel(timer: Any) -> None:
    if timer is not None and timer.active():
        timer.cancel()


def _error_of(failure: Failure) -> ErrorCode:
    """Kafka's mapping of a failed group-metadata append to the error clients see."""
    if failure.check(ValueError):  # a key or record beyond the table limits
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


def get_coordinator(broker: Any) -> GroupCoordinator:
    """``broker.groups``, created (and loaded in the background) on first use if setup did not."""
    if broker.groups is None:
        broker.groups = GroupCoordinator(broker)
        # A failed load is logged; the next request tries again.
        broker.groups.start_loading().addErrback(lambda _: None)
    return broker.groups


class GroupCoordinator:
    """The single node's group coordinator. Public methods run on the reactor thread."""

    def __init__(self, broker: Any, clock: Any = None, store: GroupStore | None = None,
                 offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS,
                 retention_check_interval_ms: int = DEFAULT_RETENTION_CHECK_INTERVAL_MS) -> None:
        if clock is None:
            from twisted.internet import reactor as clock
        self.broker = broker
        self.config = broker.config
        self.clock = clock
        self.store = store or GroupStore(broker.tables, broker.blocking)
        self.offsets_retention_ms = offsets_retention_ms
        self.retention_check_interval_ms = retention_check_interval_ms
        self.groups: dict[str, Group] = {}
        self.loaded = False
        self.loading = False
        self._waiting: list[Deferred] = []
        self._cleanup_timer: Any = None
        # On a cluster node: None when this node coordinates the groups now with current state, else
        # the error to answer (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS); None in one process.
        self.coordinator_check: Callable[[], ErrorCode | None] | None = None
        if broker.topics is not None:
            broker.topics.listeners.append(self._on_topic_event)
        from millrace.gateway.kafka.consumer_groups.coordinator import ConsumerGroupCoordinator

        self.consumer = ConsumerGroupCoordinator(self)

    # -- loading -----------------------------------------------------------------------------------
    def load(self) -> None:
        """Blocking: read the tables and rebuild every group. Call before the reactor runs."""
        self._install(self.store.load())

    def start_loading(self) -> Deferred:
        """Non-blocking load on the worker pool; fires when the coordinator is ready."""
        if self.loaded:
            return succeed(self)
        d = self.when_ready()
        if not self.loading:
            self.loading = True
            self.broker.blocking(self.store.load).addCallbacks(self._install, self._load_failed)
        return d

    def when_ready(self) -> Deferred:
        if self.loaded:
            return succeed(self)
        d: Deferred = Deferred()
        self._waiting.append(d)
        return d

    @overload
    def call(self, fn: Callable[[GroupCoordinator], Deferred[T]]) -> Deferred[T]: ...
    @overload
    def call(self, fn: Callable[[GroupCoordinator], T]) -> T | Deferred[T]: ...
    def call(self, fn: Callable[[GroupCoordinator], Any]) -> Any:
        """``fn(self)`` now if loaded, else once loading finishes (a Deferred)."""
        if self.loaded:
            return fn(self)
        waiter = self.when_ready()  # registered first: the load may finish before start_loading returns
        if not self.loading:
            self.start_loading().addErrback(lambda _: None)
        # After a failed load ``fn`` still runs: its checks answer COORDINATOR_NOT_AVAILABLE.
        return waiter.addBoth(lambda _: fn(self))

    def _load_failed(self, failure: Failure) -> None:
        # Requests fail while the store cannot be read; the next request tries loading again.
        self.loading = False
        log.error("cannot load consumer groups: %s", failure.getErrorMessage())
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.errback(failure)

    def _install(self, state: LoadedState) -> None:
        for rec in state.groups:
            group = Group(rec.group_id, GroupState.STABLE if rec.members else GroupState.EMPTY)
            group.protocol_type = rec.protocol_type
            group.protocol_name = rec.protocol_name
            group.generation_id = rec.generation_id
            group.leader_id = rec.leader_id
            group.state_timestamp = rec.state_timestamp
            for m in rec.members:
                protocols = [(rec.protocol_name, m.subscription)] if rec.protocol_name is not None else []
                member = Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                m.session_timeout_ms, rec.protocol_type or "", protocols)
                member.assignment = m.assignment
                group.add(member, None)
            if group.leader_id not in group.members:
                group.leader_id = next(iter(group.members), None)
            group.subscribed_topics = group.compute_subscribed_topics()
            self.groups[group.group_id] = group
        for group_id, offsets in state.offsets.items():
            known = self.groups.get(group_id)
            if known is None:
                # Offsets without a group record: a simple (standalone) consumer's group.
                known = self.groups[group_id] = Group(group_id)
            known.offsets.update(offsets)
        self.consumer.install(state.consumer_groups)
        # Restored members keep their session: they are expected to keep heartbeating.
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_heartbeat(group, member)
        self.loaded = True
        self.loading = False
        self._cleanup_timer = self._later(self.retention_check_interval_ms / 1000, self._periodic_cleanup)
        log.info("group coordinator loaded %d groups", len(self.groups))
        self._drop_offsets_of_missing_topics()
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.callback(self)

    def _drop_offsets_of_missing_topics(self) -> None:
        """Offsets of topics deleted while the coordinator was not listening (a crash between the
        topic's deletion and its offsets' removal, or before the coordinator was created)."""
        topics = self.broker.topics
        if topics is None:
            return
        for topic in {tp[0] for group in self.groups.values() for tp in group.offsets}:
            if topics.get(topic) is None:
                self._topic_deleted(topic)

    def shutdown(self) -> None:
        """Cancel timers (the state itself is already durable)."""
        _cancel(self._cleanup_timer)
        for group in self.groups.values():
            self._cancel_group_timers(group)
        self.consumer.shutdown()

    # -- shared validation -------------------------------------------------------------------------
    def _validate_status(self, group_id: str | None, api: _Api) -> ErrorCode | None:
        if group_id is None or (group_id == "" and api not in _EMPTY_ID_OK):
            return ErrorCode.INVALID_GROUP_ID
        if self.coordinator_check is not None:
            elsewhere = self.coordinator_check()
            if elsewhere is not None:
                return elsewhere
        if not self.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.loading else ErrorCode.COORDINATOR_NOT_AVAILABLE
        return None

    @staticmethod
    def _validate_member(group: Group, member_id: str, instance_id: str | None) -> ErrorCode | None:
        if group.static_fenced(instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def _later(self, seconds: float, fn: Callable[..., Any], *args: Any) -> Any:
        # Clients may send odd timeouts (a rebalance timeout of -1); a timer cannot run in the past.
        return self.clock.callLater(max(seconds, 0.0), fn, *args)

    def _now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    # -- JoinGroup ---------------------------------------------------------------------------------
    def join_group(self, group_id: str, member_id: str, instance_id: str | None, require_known_member_id: bool,
                   supports_skip_assignment: bool, client_id: str, client_host: str, rebalance_timeout_ms: int,
                   session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                   reason: str | None = None) -> Deferred:
        """Fires with a JoinResult, at once on errors, else when the rebalance completes."""
        error = self._validate_status(group_id, _Api.JOIN)
        if error is not None:
            return succeed(JoinResult(member_id, error))
        if not (self.config.group_min_session_timeout_ms <= session_timeout_ms
                <= self.config.group_max_session_timeout_ms):
            return succeed(JoinResult(member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
        unknown = member_id == ""
        group = self.groups.get(group_id)
        if group is not None and not self.consumer.downgrade_if_empty(group):
            # A consumer-protocol group with members: classic members join it as Kafka 4.0 lets them.
            return maybeDeferred(self.consumer.classic_members.join, group, member_id, instance_id,
                                 require_known_member_id, client_id, client_host, rebalance_timeout_ms,
                                 session_timeout_ms, protocol_type, protocols)
        if group is None:
            if not unknown:
                return succeed(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            group = self.groups[group_id] = Group(group_id)
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
            group.pending_members[new_id] = self._later(
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
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
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
        self._schedule_heartbeat(group, member)
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
                        group.invoke_join(member, JoinResult("", _error_of(failure)))
                        return
                    group.update_member(member, old_protocols, member.rebalance_timeout_ms,
                                        member.session_timeout_ms, None)
                    old = self._replace_static_member(group, instance_id, new_id, old_id)
                    self._schedule_heartbeat(group, old)
                    d.callback(JoinResult("", _error_of(failure), group.generation_id, group.protocol_type,
                                          group.protocol_name, current_leader or ""))

                self.store.store_group(group.record()).addCallbacks(stored, failed)
            else:
                self._maybe_prepare_rebalance(
                    group, f"static member {instance_id} rejoined with a change of protocol; reason: {reason}")
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            # The leader may already be assigning to the old member id: start over.
            self._prepare_rebalance(group, f"static member {instance_id} rejoined during CompletingRebalance")
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
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # Members waiting in SyncGroup must rejoin.
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        _cancel(group.sync_timer)
        group.sync_timer = None
        _cancel(group.join_timer)
        was_empty = group.is_(GroupState.EMPTY)
        group.state = GroupState.PREPARING_REBALANCE
        log.info("preparing to rebalance group %s in generation %d: %s", group.group_id, group.generation_id, reason)
        if was_empty:
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_timer = self._later(delay / 1000, self._initial_join_expired, group, delay, remaining)
            group.join_initial = True
        else:
            group.join_initial = False
            group.join_timer = self._later(group.rebalance_timeout_ms() / 1000, self._complete_join, group)
            self._try_complete_join(group)

    def _initial_join_expired(self, group: Group, configured: int, remaining: int) -> None:
        group.join_timer = None
        if group.new_member_added and remaining != 0:
            # Members are still arriving: wait another delay, within the rebalance timeout.
            group.new_member_added = False
            delay = min(configured, remaining)
            group.join_timer = self._later(delay / 1000, self._initial_join_expired, group, configured,
                                                    max(remaining - delay, 0))
            return
        self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        """Complete the join phase early once every member has rejoined (not during the initial delay)."""
        if (group.is_(GroupState.PREPARING_REBALANCE) and group.join_timer is not None and not group.join_initial
                and group.has_all_members_joined()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        _cancel(group.join_timer)
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
            group.join_timer = self._later(group.rebalance_timeout_ms() / 1000, self._complete_join, group)
            return
        self._init_next_generation(group)
        if group.is_(GroupState.EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            self.store.store_group(group.record()).addErrback(
                lambda f: log.warning("cannot persist empty group %s: %s", group.group_id, f.getErrorMessage()))
            return
        log.info("stabilized group %s generation %d with %d members", group.group_id, group.generation_id,
                 len(group.members))
        for member in list(group.members.values()):
            group.invoke_join(member, self._join_result(group, member, with_members=group.is_leader(member.member_id)))
            self._schedule_heartbeat(group, member)
            member.is_new = False
        # Members that never send SyncGroup are dropped after the rebalance timeout.
        group.pending_sync = set(group.members)
        group.sync_timer = self._later(group.rebalance_timeout_ms() / 1000, self._sync_expired, group,
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
        group.state_timestamp = self._now_ms()
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
        self._prepare_rebalance(group, "members did not sync in time")

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
                self._schedule_heartbeat(group, member)

    # -- SyncGroup ---------------------------------------------------------------------------------
    def sync_group(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> Deferred:
        """Fires with a SyncResult: for the leader's sync once the assignment is durable, for the
        others once the leader's arrives."""
        error = self._validate_status(group_id, _Api.SYNC)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance in progress was lost with the old state: rejoin without rediscovery.
            return succeed(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        if error is not None:
            return succeed(SyncResult(error))
        group = self.groups.get(group_id)
        if group is None:
            return succeed(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if group.is_(GroupState.DEAD):
            return succeed(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        if group.consumer is not None:  # a classic member of a consumer group (consumer_groups/classic_members.py)
            return succeed(self.consumer.classic_members.sync(group, generation_id, member_id, instance_id,
                                                              protocol_type, protocol_name))
        error = self._validate_member(group, member_id, instance_id)
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
            self._schedule_heartbeat(group, member)
            return succeed(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
        # CompletingRebalance: wait for the leader's assignment.
        d: Deferred = Deferred()
        if member.awaiting_sync is not None:
            member.awaiting_sync.callback(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = d
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            _cancel(group.sync_timer)
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
                    self._reset_and_propagate_assignment_error(group, _error_of(failure))
                    self._maybe_prepare_rebalance(group, "the assignment could not be persisted")

            self.store.store_group(record).addCallbacks(stored, failed)
        return d

    # -- Heartbeat ---------------------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        error = self._validate_status(group_id, _Api.HEARTBEAT)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # still loading: answer blindly, as Kafka does
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.consumer is not None:
            return self.consumer.classic_members.heartbeat(group, member_id, instance_id, generation_id)
        error = self._validate_member(group, member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat(group, group.members[member_id])
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        """The member's next heartbeat is due within ``timeout_ms`` (its session timeout by default)."""
        _cancel(member.heartbeat_timer)
        member.heartbeat_satisfied = False
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = self._later(timeout / 1000, self._heartbeat_expired, group,
                                                      member.member_id)

    def _heartbeat_expired(self, group: Group, member_id: str) -> None:
        if group.is_(GroupState.DEAD) or self.groups.get(group.group_id) is not group:
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
        error = self._validate_status(group_id, _Api.LEAVE)
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        if group.consumer is not None:
            return self.consumer.classic_members.leave(group, leaving)
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
                error = self._validate_member(group, member_id, instance_id)
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
        _cancel(member.heartbeat_timer)
        member.heartbeat_timer = None
        # Every request must be answered (responses go out in order on its connection).
        group.invoke_sync(member, SyncResult(error))

    def _cancel_group_timers(self, group: Group) -> None:
        _cancel(group.join_timer)
        _cancel(group.sync_timer)
        for member in group.members.values():
            _cancel(member.heartbeat_timer)
        for timer in group.pending_members.values():
            _cancel(timer)

    # -- offsets -----------------------------------------------------------------------------------
    def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                       offsets: dict[TopicPartition, OffsetAndMetadata], api_version: int) -> Deferred:
        """Fires with {(topic, partition): ErrorCode} once the accepted offsets are durable."""
        error = self._validate_status(group_id, _Api.OFFSET_COMMIT)
        if error is not None:
            return succeed(dict.fromkeys(offsets, error))
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # Only ungrouped (simple) consumers may create a group by committing; since v9
                # the answer says so plainly.
                error = ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION
                return succeed(dict.fromkeys(offsets, error))
            group = self.groups[group_id] = Group(group_id)
        if group.consumer is not None:
            # Checked per partition: a commit at an older member epoch is fine for partitions held since.
            refused = self.consumer.validate_commit(group.consumer, member_id, generation_id, api_version, offsets)
            accepted = {tp: om for tp, om in offsets.items() if tp not in refused}
            if not accepted:
                return succeed(refused)
            return self._store_offsets(group, accepted).addCallback(lambda result: {**result, **refused})
        error = self._validate_offset_commit(group, member_id, instance_id, generation_id, transactional=False)
        if error is not None:
            return succeed(dict.fromkeys(offsets, error))
        member = group.members.get(member_id)
        if member is not None and group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # A commit shows the member is alive (it keeps committing during a rebalance, and
            # learns of the rebalance from its heartbeats).
            self._schedule_heartbeat(group, member)
        return self._store_offsets(group, offsets)

    @staticmethod
    def _validate_offset_commit(group: Group, member_id: str, instance_id: str | None, generation_id: int,
                                transactional: bool) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateOffsetCommit. Transactional commits need no member information
        (TxnOffsetCommit v0-v2 has none) and are not held back by a rebalance: the transaction, not the
        group's state, decides when they apply."""
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            # Admin clients and consumers using assign() commit with generation -1.
            return None
        if generation_id >= 0 or member_id != "" or instance_id is not None:
            error = GroupCoordinator._validate_member(group, member_id, instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif not transactional and not group.is_(GroupState.EMPTY):
            # Without member id and generation only an empty group accepts commits.
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and group.is_(GroupState.COMPLETING_REBALANCE):
            # The member knows the new generation but has no assignment yet.
            return ErrorCode.REBALANCE_IN_PROGRESS
        return None

    def validate_transactional_commit(self, group_id: str, member_id: str, instance_id: str | None,
                                      generation_id: int) -> ErrorCode | None:
        """TxnOffsetCommit's group checks (KIP-447): a member id and generation, when given, must be the
        group's current ones, so a zombie of an older generation cannot commit in a transaction."""
        error = self._validate_status(group_id, _Api.OFFSET_COMMIT)
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.ILLEGAL_GENERATION if generation_id >= 0 else None
        if group.consumer is not None:
            return self.consumer.validate_member_epoch(group.consumer, member_id, generation_id)
        return self._validate_offset_commit(group, member_id, instance_id, generation_id, transactional=True)

    def commit_transactional_offsets(self, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]
                                     ) -> Deferred:
        """A committed transaction's offsets of ``group_id``: fires with {tp: ErrorCode} once durable."""
        error = self._validate_status(group_id, _Api.OFFSET_COMMIT)
        if error is not None:
            return succeed(dict.fromkeys(offsets, error))
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            group = self.groups[group_id] = Group(group_id)
        return self._store_offsets(group, offsets)

    def _store_offsets(self, group: Group, offsets: dict[TopicPartition, OffsetAndMetadata]) -> Deferred:
        result: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, om in offsets.items():
            if len(om.metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                result[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                accepted[tp] = om
        if not accepted:
            return succeed(result)
        group.pending_commits.update(list(accepted))

        def settle() -> None:
            group.pending_commits.subtract(list(accepted))
            group.pending_commits += collections.Counter()  # drop zero counts

        def stored(_: Any) -> dict[TopicPartition, ErrorCode]:
            # An offset deleted while its commit was in flight stays deleted (the removal was
            # written after the commit).
            live = {tp: om for tp, om in accepted.items() if group.pending_commits[tp] > 0}
            settle()
            if not group.is_(GroupState.DEAD):
                group.offsets.update(live)
            result.update(dict.fromkeys(accepted, ErrorCode.NONE))
            return result

        def failed(failure: Failure) -> dict[TopicPartition, ErrorCode]:
            settle()
            log.warning("cannot persist offsets of group %s: %s", group.group_id, failure.getErrorMessage())
            error = ErrorCode.INVALID_COMMIT_OFFSET_SIZE if failure.check(ValueError) else \
                ErrorCode.COORDINATOR_NOT_AVAILABLE
            result.update(dict.fromkeys(accepted, error))
            return result

        return self.store.store_offsets(group.group_id, accepted).addCallbacks(stored, failed)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, member_id: str | None = None,
                      member_epoch: int = -1) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata]]:
        """Committed offsets, whatever the group's state (simple consumers have no membership).
        ``partitions`` None: all of the group's. Unknown partitions answer offset -1. A member id and
        epoch (OffsetFetch v9) are checked against a consumer-protocol group's member."""
        error = self._validate_status(group_id, _Api.OFFSET_FETCH)
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        if group is not None and group.consumer is not None:
            error = self.consumer.validate_fetch(group.consumer, member_id, member_epoch)
            if error is not None:
                return error, {}
        known = group.offsets if group is not None and not group.is_(GroupState.DEAD) else {}
        if partitions is None:
            return ErrorCode.NONE, dict(known)
        return ErrorCode.NONE, {tp: known.get(tp) or OffsetAndMetadata(-1) for tp in partitions}

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> Deferred:
        """OffsetDelete: fires with (group error, {tp: error}) once the removal is durable."""
        error = self._validate_status(group_id, _Api.OFFSET_DELETE)
        if error is not None:
            return succeed((error, {}))
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return succeed((ErrorCode.GROUP_ID_NOT_FOUND, {}))
        errors: dict[TopicPartition, ErrorCode] = {}
        if group.consumer is not None and group.consumer.members:
            subscribed = self.consumer.subscribed_topics(group.consumer)
            eligible = [tp for tp in partitions if tp[0] not in subscribed]
            errors.update({tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if tp not in eligible})
        elif group.is_(GroupState.EMPTY):
            eligible = list(partitions)
        elif group.is_consumer_group():
            eligible = [tp for tp in partitions if not group.is_subscribed_to(tp[0])]
            errors.update({tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if tp not in eligible})
        else:
            return succeed((ErrorCode.NON_EMPTY_GROUP, {}))
        if not eligible:
            return succeed((ErrorCode.NONE, errors))
        d = self._remove_offsets(group, eligible)
        return d.addCallback(lambda _: (ErrorCode.NONE, {**errors, **dict.fromkeys(eligible, ErrorCode.NONE)}))

    def _remove_offsets(self, group: Group, partitions: Iterable[TopicPartition]) -> Deferred:
        """Drop offsets (and the group once it is empty with none left); fires when durable.
        Kafka's cleanupGroupMetadata."""
        removed = [tp for tp in partitions if group.offsets.pop(tp, None) is not None or tp in group.pending_commits]
        for tp in removed:
            group.pending_commits.pop(tp, None)
        if group.is_(GroupState.EMPTY) and not group.offsets and not group.pending_commits and (
                group.consumer is None or not group.consumer.members):
            log.info("group %s transitions to Dead in generation %d", group.group_id, group.generation_id)
            self._make_dead(group)
            return self.store.remove_group(group.group_id, removed)
        return self.store.remove_offsets(group.group_id, removed)

    def _make_dead(self, group: Group) -> None:
        group.state = GroupState.DEAD
        self._cancel_group_timers(group)
        if group.consumer is not None:
            # Queued before the caller's removals, so durable once they are.
            self.consumer.forget(group.group_id).addErrback(
                lambda f: log.warning("cannot remove consumer group %s: %s", group.group_id, f.getErrorMessage()))
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    def _on_topic_event(self, event: str, topic: Any) -> None:
        """TopicRegistry listener (called on a worker thread): hop to the reactor."""
        if event == "deleted":
            from twisted.internet import reactor
            from twisted.internet.interfaces import IReactorFromThreads

            IReactorFromThreads(reactor).callFromThread(self._topic_deleted, topic.name)

    def _topic_deleted(self, topic: str) -> None:
        if not self.loaded:
            # Loading reads what is durable; catch the deleted topic once it is done.
            self.when_ready().addCallback(lambda _: self._topic_deleted(topic))
            return
        for group in list(self.groups.values()):
            gone = [tp for tp in group.offsets if tp[0] == topic]
            if gone:
                self._remove_offsets(group, gone).addErrback(
                    lambda f, g: log.warning("cannot remove offsets of deleted topic %s in group %s: %s",
                                             topic, g, f.getErrorMessage()), group.group_id)

    def _periodic_cleanup(self) -> None:
        self._cleanup_timer = self._later(self.retention_check_interval_ms / 1000, self._periodic_cleanup)
        self.expire_offsets()

    def expire_offsets(self) -> int:
        """Drop offsets past retention (Kafka's rules: an empty group's once it has been empty for
        the retention period; a stable consumer group's for topics it no longer subscribes to; a
        simple group's by commit time; v2-v4 commits by their own expiry). Returns how many."""
        now = self._now_ms()
        count = 0
        for group in list(self.groups.values()):
            keep: set[str] = set()
            since_empty: int | None = None
            if group.consumer is not None:
                # Kafka's rule for consumer groups: by commit time for topics no member subscribes to,
                # all of them from when the group became empty.
                if group.consumer.members:
                    keep = self.consumer.subscribed_topics(group.consumer)
                else:
                    since_empty = group.consumer.empty_since
            elif group.is_(GroupState.EMPTY):
                # A group that had members counts from when it became empty.
                since_empty = group.state_timestamp if group.protocol_type is not None else None
            elif group.is_consumer_group() and group.subscribed_topics is not None and group.is_(GroupState.STABLE):
                keep = group.subscribed_topics
            else:
                continue
            expired = []
            for tp, om in group.offsets.items():
                if tp[0] in keep or tp in group.pending_commits:
                    continue
                if om.expire_timestamp is not None:
                    due = now >= om.expire_timestamp
                else:
                    base = since_empty if since_empty is not None else om.commit_timestamp
                    due = now - base >= self.offsets_retention_ms
                if due:
                    expired.append(tp)
            if expired or (group.is_(GroupState.EMPTY) and not group.offsets and not group.pending_commits):
                count += len(expired)
                self._remove_offsets(group, expired).addErrback(
                    lambda f, g: log.warning("cannot expire offsets of group %s: %s", g, f.getErrorMessage()),
                    group.group_id)
        return count

    # -- admin -------------------------------------------------------------------------------------
    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        error = self._validate_status(group_id, _Api.DESCRIBE)
        if error is not None:
            return error, GroupSummary(group_id, "", "", "", [])
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, GroupSummary(group_id, GroupState.DEAD.value, "", "", [])
        if group.consumer is not None:
            # Kafka 4.0: "Group <id> is not a classic group." (ConsumerGroupDescribe describes it).
            return ErrorCode.GROUP_ID_NOT_FOUND, GroupSummary(group_id, GroupState.DEAD.value, "", "", [])
        return ErrorCode.NONE, group.summary()

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> tuple[ErrorCode,
                                                                                          list[GroupOverview]]:
        """Groups filtered by state and type names (case-insensitive; empty: no filter)."""
        elsewhere = self.coordinator_check() if self.coordinator_check is not None else None
        if elsewhere is not None:
            return elsewhere, []
        if not self.loaded:
            return (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.loading
                    else ErrorCode.COORDINATOR_NOT_AVAILABLE), []
        states = {s.lower() for s in states}
        types = {t.lower() for t in types}
        out = []
        for group in self.groups.values():
            if group.consumer is not None:
                overview = GroupOverview(group.group_id, CONSUMER_PROTOCOL_TYPE, group.consumer.state().value,
                                         "consumer")
            else:
                overview = GroupOverview(group.group_id, group.protocol_type or "", group.state.value)
            if states and overview.state.lower() not in states:
                continue
            if types and overview.group_type not in types:
                continue
            out.append(overview)
        return ErrorCode.NONE, out

    def delete_groups(self, group_ids: list[str]) -> Deferred:
        """Fires with {group id: ErrorCode} once the deletions are durable."""
        result: dict[str, ErrorCode] = {}
        pending: list[Deferred] = []
        for group_id in group_ids:
            error = self._validate_status(group_id, _Api.DELETE)
            if error is not None:
                result[group_id] = error
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                result[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_(GroupState.EMPTY) or (group.consumer is not None and group.consumer.members):
                result[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                offsets = list(group.offsets) + [tp for tp in group.pending_commits if tp not in group.offsets]
                group.offsets.clear()
                self._make_dead(group)

                def done(outcome: Any, gid: str = group_id) -> None:
                    if isinstance(outcome, Failure):
                        log.warning("cannot delete group %s: %s", gid, outcome.getErrorMessage())
                        result[gid] = _error_of(outcome)
                    else:
                        result[gid] = ErrorCode.NONE

                pending.append(self.store.remove_group(group_id, offsets).addBoth(done))
        if not pending:
            return succeed(result)
        return gatherResults(pending).addCallback(lambda _: result)
