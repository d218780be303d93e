"""Kafka's group coordinator on this node: the groups (``groups``), loaded from and written through
``GroupStore``, and the parts that serve them, split by job as Kafka splits its group coordinator:

* ``classic_groups.membership``: the classic protocol's JoinGroup, SyncGroup, Heartbeat, LeaveGroup
  and rebalances (Kafka's GroupMetadataManager for classic groups);
* ``group_offsets``: committed offsets, their deletion and expiry (Kafka's OffsetMetadataManager);
* ``consumer_groups``: the consumer group protocol (KIP-848);
* here: loading, the checks every group request starts with (``validate_status``), and the
  administrative DescribeGroups, ListGroups and DeleteGroups.

Threading: the coordinator lives on the reactor thread; its only blocking work, the table writes and
the load, runs on the broker's worker pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from twisted.internet.defer import Deferred, gatherResults, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from millrace.gateway.kafka.classic_groups.group import (
    CONSUMER_PROTOCOL_TYPE,
    Group,
    GroupOverview,
    GroupState,
    GroupSummary,
    Member,
)
from millrace.gateway.kafka.classic_groups.membership import ClassicMembership
from millrace.gateway.kafka.consumer_groups.coordinator import ConsumerGroupCoordinator
from millrace.gateway.kafka.group_offsets import (
    DEFAULT_OFFSETS_RETENTION_MS,
    DEFAULT_RETENTION_CHECK_INTERVAL_MS,
    OffsetManager,
)
from millrace.gateway.kafka.group_status import EMPTY_ID_OK, GroupApi, store_failure_code
from millrace.gateway.kafka.group_store import GroupStore, LoadedState
from millrace.gateway.kafka_protocol.errors import ErrorCode

if TYPE_CHECKING:
    from millrace.gateway.kafka.config import KafkaConfig
    from millrace.streams.topics import TopicRegistry

log = logging.getLogger(__name__)
T = TypeVar("T")


class GroupCoordinator:
    """The single node's group coordinator. Public methods run on the reactor thread."""

    def __init__(self, config: KafkaConfig, store: GroupStore, topics: TopicRegistry | None,
                 blocking: Callable[..., Deferred[Any]], clock: IReactorTime | None = None,
                 offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS,
                 retention_check_interval_ms: int = DEFAULT_RETENTION_CHECK_INTERVAL_MS) -> None:
        """``store``: the groups' tables; ``topics``: the Kafka topics, whose deletions remove offsets
        (None: none to watch); ``blocking``: runs a blocking call on the worker pool, firing on the reactor."""
        if clock is None:
            from twisted.internet import reactor

            clock = IReactorTime(reactor)
        self.config = config
        self.clock = clock
        self.store = store
        self.topics = topics
        self._blocking = blocking
        self.groups: dict[str, Group] = {}
        self.loaded = False
        self.loading = False
        self._waiting: list[Deferred] = []
        # On a cluster node: None when this node coordinates the groups now with current state, else
        # the error to answer (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS); None in one process.
        self.coordinator_check: Callable[[], ErrorCode | None] | None = None
        self.membership = ClassicMembership(self)
        self.offsets = OffsetManager(self, offsets_retention_ms, retention_check_interval_ms)
        self.consumer = ConsumerGroupCoordinator(self)
        if topics is not None:
            topics.listeners.append(self.offsets.on_topic_event)

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
            self._blocking(self.store.load).addCallbacks(self._install, self._load_failed)
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
                self.membership.schedule_heartbeat(group, member)
        self.loaded = True
        self.loading = False
        self.offsets.start_expiry()
        log.info("group coordinator loaded %d groups", len(self.groups))
        self.offsets.drop_offsets_of_missing_topics()
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.callback(self)

    def shutdown(self) -> None:
        """Cancel timers (the state itself is already durable)."""
        self.offsets.stop_expiry()
        for group in self.groups.values():
            self.membership.cancel_group_timers(group)
        self.consumer.shutdown()

    # -- shared validation -------------------------------------------------------------------------
    def validate_status(self, group_id: str | None, api: GroupApi) -> ErrorCode | None:
        if group_id is None or (group_id == "" and api not in EMPTY_ID_OK):
            return ErrorCode.INVALID_GROUP_ID
        if self.coordinator_check is not None:
            elsewhere = self.coordinator_check()
            if elsewhere is not None:
                return elsewhere
        if not self.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.loading else ErrorCode.COORDINATOR_NOT_AVAILABLE
        return None

    def failure_code(self, failure: Failure) -> ErrorCode:
        """What a request answers when its write of group state failed (``group_status``): the
        coordinator's own status first, when it moved or reloads meanwhile."""
        return store_failure_code(failure, self.coordinator_check() if self.coordinator_check is not None else None)

    def later(self, seconds: float, fn: Callable[..., Any], *args: Any) -> IDelayedCall:
        # Clients may send odd timeouts (a rebalance timeout of -1); a timer cannot run in the past.
        return self.clock.callLater(max(seconds, 0.0), fn, *args)

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def make_dead(self, group: Group) -> None:
        group.state = GroupState.DEAD
        self.membership.cancel_group_timers(group)
        if group.consumer is not None:
            # Queued before the caller's removals, so durable once they are.
            self.consumer.forget(group.group_id).addErrback(
                lambda f: log.warning("cannot remove consumer group %s: %s", group.group_id, f.getErrorMessage()))
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    # -- admin -------------------------------------------------------------------------------------
    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        error = self.validate_status(group_id, GroupApi.DESCRIBE)
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
            error = self.validate_status(group_id, GroupApi.DELETE)
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
                self.make_dead(group)

                def done(outcome: Any, gid: str = group_id) -> None:
                    if isinstance(outcome, Failure):
                        log.warning("cannot delete group %s: %s", gid, outcome.getErrorMessage())
                        result[gid] = self.failure_code(outcome)
                    else:
                        result[gid] = ErrorCode.NONE

                pending.append(self.store.remove_group(group_id, offsets).addBoth(done))
        if not pending:
            return succeed(result)
        return gatherResults(pending).addCallback(lambda _: result)
