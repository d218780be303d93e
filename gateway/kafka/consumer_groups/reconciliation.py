"""How a member's current assignment moves toward the group's target assignment (Kafka's
CurrentAssignmentBuilder), as a pure function.

A member is in one of three states:
- ``stable``: its epoch is the target assignment epoch and it holds all of its target;
- ``unrevoked_partitions``: it still owns partitions its target no longer holds. It stays at its epoch
  and is told its assignment without them; it moves on only once a heartbeat's owned partitions no
  longer include any of them (the client committed and released them). Until then no other member
  may be given them;
- ``unreleased_partitions``: it is at the target epoch but some of its target partitions are still
  held (assigned or pending revocation) by other members; it gets each as soon as it is free.

Invariants (checked by tests/kafka/test_consumer_group_units.py):
- a partition is given to a member only when no other member holds it (``owner_epoch`` -1), so no two
  members ever own a partition at the same time;
- a member's epoch only moves to the target epoch once it holds none of the partitions it must give
  up, and never decreases;
- what a member is told it owns is always a subset of its target (while revoking: what it keeps).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from millrace.gateway.kafka.consumer_groups.assignors import Assignment


class MemberState(StrEnum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True)
class MemberAssignment:
    """A member's reconciliation state: what it owns now and what it must still release."""

    state: MemberState = MemberState.STABLE
    epoch: int = 0
    previous_epoch: int = -1
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)


#: (topic id, partition) -> the epoch of the member holding it besides the one reconciled, or -1 if free
OwnerEpoch = Callable[[uuid.UUID, int], int]


def _owns_any(owned: Mapping[uuid.UUID, frozenset[int]] | None, partitions: Assignment) -> bool:
    # No owned partitions reported (an incremental heartbeat): assume it still owns them.
    if owned is None:
        return bool(partitions)
    return any(owned.get(t, frozenset()) & ps for t, ps in partitions.items())


def reconcile(member: MemberAssignment, target_epoch: int, target: Assignment,
              owned: Mapping[uuid.UUID, frozenset[int]] | None, owner_epoch: OwnerEpoch) -> MemberAssignment:
    """The member's next state given the target (at ``target_epoch``), the partitions its heartbeat
    says it owns (None when not sent) and who holds each partition."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.revoking):
            return member  # still releasing: wait for the next heartbeat
        return _next(member, member.epoch, member.assigned, target_epoch, target, owned, owner_epoch)
    if member.state is MemberState.STABLE and member.epoch == target_epoch:
        return member
    # A stable member behind the target, or one waiting for partitions to be released: try again.
    return _next(member, member.epoch, member.assigned, target_epoch, target, owned, owner_epoch)


def _next(member: MemberAssignment, epoch: int, assigned: Assignment, target_epoch: int, target: Assignment,
          owned: Mapping[uuid.UUID, frozenset[int]] | None, owner_epoch: OwnerEpoch) -> MemberAssignment:
    keep: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    pending: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id in set(target) | set(assigned):
        want = target.get(topic_id, frozenset())
        have = assigned.get(topic_id, frozenset())
        if have & want:
            keep[topic_id] = have & want
        if have - want:
            revoke[topic_id] = have - want
        if want - have:
            pending[topic_id] = want - have
    if revoke and _owns_any(owned, revoke):
        # Release first, at the current epoch, keeping only what stays; new partitions come after.
        return MemberAssignment(MemberState.UNREVOKED_PARTITIONS, epoch, member.previous_epoch, keep, revoke)
    assignable: dict[uuid.UUID, frozenset[int]] = dict(keep)
    unreleased = False
    for topic_id, partitions in pending.items():
        free = frozenset(p for p in partitions if owner_epoch(topic_id, p) == -1)
        if free:
            assignable[topic_id] = assignable.get(topic_id, frozenset()) | free
        if free != partitions:
            unreleased = True
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    previous = member.epoch if target_epoch != member.epoch else member.previous_epoch
    return MemberAssignment(state, target_epoch, previous, assignable, {})
