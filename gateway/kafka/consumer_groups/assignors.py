"""The server-side assignors of the consumer group protocol (KIP-848): ``uniform`` and ``range``.

Both are pure functions of the members' subscriptions and current target assignments and of the
subscribed topics' partition counts, so the coordinator can rerun them at any time (each new group
epoch) and tests can check their invariants directly.

Invariants every result keeps:
- every partition of a topic that at least one member subscribes to is assigned to exactly one member
  subscribed to that topic; no partition of an unsubscribed or unknown topic is assigned;
- ``uniform``: as in Kafka's UniformAssignor, members keep what they had wherever balance allows
  (sticky), and when all members subscribe to the same topics the counts differ by at most one; with
  different subscriptions no partition can move to an eligible member that has two or more fewer
  (the local optimum Kafka's heterogeneous builder also settles for);
- ``range``: as in Kafka's server-side RangeAssignor, per topic the subscribers (by member id) split
  the partitions into quotas of n or n+1 (the first ``P mod M`` members get n+1); a member keeps the
  partitions it had up to its quota, so a fresh assignment is contiguous ranges (co-partitioned topics
  line up) and later ones move as little as the quotas allow.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

#: topic id -> partitions, the shape of every assignment
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of a member: the topic ids it subscribes to (resolved from names and
    regex), and its current target assignment (for stickiness)."""

    subscribed: frozenset[uuid.UUID]
    current: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, TopicSpec]], dict[str, Assignment]]


def _pack(owned: dict[str, dict[uuid.UUID, set[int]]]) -> dict[str, Assignment]:
    return {m: {t: frozenset(ps) for t, ps in topics.items() if ps} for m, topics in owned.items()}


def uniform(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec]) -> dict[str, Assignment]:
    """Balanced and sticky (Kafka's ``uniform``, the default)."""
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    counts = dict.fromkeys(members, 0)
    taken: set[tuple[uuid.UUID, int]] = set()
    # 1. Everyone keeps what they had that still exists and that they still subscribe to.
    for member_id in sorted(members):
        spec = members[member_id]
        for topic_id, partitions in spec.current.items():
            topic = topics.get(topic_id)
            if topic is None or topic_id not in spec.subscribed:
                continue
            for p in partitions:
                if p < topic.partitions and (topic_id, p) not in taken:
                    taken.add((topic_id, p))
                    owned[member_id].setdefault(topic_id, set()).add(p)
                    counts[member_id] += 1
    # 2. Every free partition goes to its least loaded subscriber; the most constrained partitions first.
    subscribers: dict[uuid.UUID, list[str]] = {
        t: sorted(m for m, s in members.items() if t in s.subscribed) for t in topics}
    free = [(t, p) for t in sorted(topics, key=lambda t: topics[t].name) if subscribers[t]
            for p in range(topics[t].partitions) if (t, p) not in taken]
    free.sort(key=lambda tp: len(subscribers[tp[0]]))  # stable: topic name, partition order kept
    for topic_id, p in free:
        target = min(subscribers[topic_id], key=lambda m: (counts[m], m))
        owned[target].setdefault(topic_id, set()).add(p)
        counts[target] += 1
    # 3. Move partitions from a member to an eligible one with two or more fewer until none can move.
    # Each move lowers the sum of squared counts, so this ends.
    moved = True
    while moved:
        moved = False
        for src in sorted(members, key=lambda m: (-counts[m], m)):
            for topic_id in sorted(owned[src], key=lambda t: topics[t].name):
                for p in sorted(owned[src][topic_id], reverse=True):
                    dst = min((m for m in subscribers[topic_id] if counts[m] + 1 < counts[src]),
                              key=lambda m: (counts[m], m), default=None)
                    if dst is None:
                        break
                    owned[src][topic_id].discard(p)
                    owned[dst].setdefault(topic_id, set()).add(p)
                    counts[src] -= 1
                    counts[dst] += 1
                    moved = True
    return _pack(owned)


def range_(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec]) -> dict[str, Assignment]:
    """Per topic, contiguous quotas among its subscribers in member id order, sticky within quotas
    (Kafka's server-side ``range``)."""
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for topic_id in sorted(topics, key=lambda t: topics[t].name):
        count = topics[topic_id].partitions
        subs = sorted(m for m, s in members.items() if topic_id in s.subscribed)
        if not subs or count == 0:
            continue
        base, extra = divmod(count, len(subs))
        current = {m: sorted(p for p in members[m].current.get(topic_id, ()) if p < count) for m in subs}
        quota = dict.fromkeys(subs, base)
        # The n+1 quotas go first to members that already hold more than n (they keep it), then in order.
        for m in [m for m in subs if len(current[m]) > base] + [m for m in subs if len(current[m]) <= base]:
            if extra == 0:
                break
            quota[m] += 1
            extra -= 1
        taken: set[int] = set()
        for m in subs:
            for p in current[m]:
                if len(owned[m].get(topic_id, ())) >= quota[m]:
                    break
                if p not in taken:
                    taken.add(p)
                    owned[m].setdefault(topic_id, set()).add(p)
        free = iter(p for p in range(count) if p not in taken)
        for m in subs:
            mine = owned[m].setdefault(topic_id, set())
            while len(mine) < quota[m]:
                mine.add(next(free))
    return _pack(owned)


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
#: Kafka's group.consumer.assignors default: the first is used when a member names none.
DEFAULT_ASSIGNOR = "uniform"
