"""What the parts of the group coordinator see of the coordinator and of each other: ``GroupHub`` is
the coordinator (``group_coordinator.GroupCoordinator``) as its parts use it, and the other views are
the parts as the hub and their siblings use them (``classic_groups.membership``, ``group_offsets``,
``consumer_groups.coordinator`` and ``consumer_groups.classic_members``). The parts are built by the
hub and call back into it; through these views none of them imports another, so each can be read,
and tested, with only what it is handed."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.python.failure import Failure

from millrace.gateway.kafka.classic_groups.group import Group, Member, SyncResult
from millrace.gateway.kafka.consumer_groups.group import ConsumerGroup, ConsumerMember
from millrace.gateway.kafka.group_status import GroupApi
from millrace.gateway.kafka.group_store import GroupStore
from millrace.gateway.kafka_protocol.errors import ErrorCode

if TYPE_CHECKING:
    from millrace.gateway.kafka.config import KafkaConfig
    from millrace.streams.topics import TopicRegistry


class MembershipView(Protocol):
    """The classic protocol's membership, as the other parts ask it for timers and rebalances."""

    def schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int | None = None) -> None: ...

    def cancel_group_timers(self, group: Group) -> None: ...

    def prepare_rebalance(self, group: Group, reason: str) -> None: ...


class ClassicMembersView(Protocol):
    """The classic APIs served to classic-protocol members of consumer groups (online upgrade)."""

    def join(self, shell: Group, member_id: str, instance_id: str | None, require_known_member_id: bool,
             client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
             protocol_type: str, protocols: list[tuple[str, bytes]]) -> Any: ...

    def sync(self, shell: Group, generation_id: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None) -> SyncResult: ...

    def heartbeat(self, shell: Group, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode: ...

    def leave(self, shell: Group, leaving: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]: ...


class ConsumerView(Protocol):
    """The consumer group protocol, as the classic membership and the offsets ask it."""

    @property
    def classic_members(self) -> ClassicMembersView: ...

    def downgrade_if_empty(self, shell: Group) -> bool: ...

    def subscribed_topics(self, cg: ConsumerGroup) -> set[str]: ...

    def validate_commit(self, cg: ConsumerGroup, member_id: str, member_epoch: int, api_version: int,
                        partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]: ...

    def validate_member_epoch(self, cg: ConsumerGroup, member_id: str, member_epoch: int) -> ErrorCode | None: ...

    def validate_fetch(self, cg: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode | None: ...


class GroupHub(Protocol):
    """The group coordinator as its parts use it: the groups, their store and settings, the checks every
    group request starts with, the clock, and the other parts."""

    @property
    def config(self) -> KafkaConfig: ...

    @property
    def store(self) -> GroupStore: ...

    @property
    def topics(self) -> TopicRegistry | None: ...

    @property
    def groups(self) -> dict[str, Group]: ...

    @property
    def loaded(self) -> bool: ...

    @property
    def membership(self) -> MembershipView: ...

    @property
    def consumer(self) -> ConsumerView: ...

    def when_ready(self) -> Deferred: ...

    def validate_status(self, group_id: str | None, api: GroupApi) -> ErrorCode | None: ...

    def failure_code(self, failure: Failure) -> ErrorCode: ...

    def later(self, seconds: float, fn: Callable[..., Any], *args: Any) -> IDelayedCall: ...

    def now_ms(self) -> int: ...

    def make_dead(self, group: Group) -> None: ...


class Refusal(Protocol):
    @property
    def error(self) -> ErrorCode: ...


class ConsumerGroupsView(Protocol):
    """The consumer group coordinator as its classic members' half uses it: the hub, and its own
    membership bookkeeping."""

    @property
    def classic(self) -> GroupHub: ...

    @property
    def max_size(self) -> int: ...

    def forget(self, group_id: str) -> Deferred: ...

    def _topics(self) -> Any: ...

    def _persist(self, group: ConsumerGroup) -> Deferred: ...

    def _write_failed(self, failure: Failure, cg: ConsumerGroup) -> Refusal: ...

    def _subscribed_metadata(self, cg: ConsumerGroup) -> dict[str, tuple[uuid.UUID, int]]: ...

    def _preferred_assignor(self, cg: ConsumerGroup) -> str: ...

    def _new_target(self, cg: ConsumerGroup, topics: dict[str, tuple[uuid.UUID, int]]) -> None: ...

    def _reconcile(self, cg: ConsumerGroup, member: ConsumerMember,
                   owned: Mapping[uuid.UUID, frozenset[int]] | None) -> None: ...

    def _forget_member(self, cg: ConsumerGroup, member: ConsumerMember) -> None: ...

    def _remove(self, cg: ConsumerGroup, member: ConsumerMember) -> None: ...

    def _touch_session(self, cg: ConsumerGroup, member: ConsumerMember) -> None: ...
