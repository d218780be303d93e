"""The consumer group protocol (KIP-848) below the wire: the assignors' invariants (Hypothesis), the
reconciliation's safety (no partition ever owned by two members) over random joins, leaves, heartbeats
and partition growth, and the coordinator's rules (epochs, fencing, static members, timeouts, regex,
metadata changes, upgrade from classic, offset checks, persistence) on a controlled clock with real
table segments."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.task import Clock

from millrace.gateway.kafka.broker import KafkaConfig
from millrace.gateway.kafka.classic_groups.group import JoinResult
from millrace.gateway.kafka.consumer_groups.assignors import MemberSpec, TopicSpec, range_, uniform
from millrace.gateway.kafka.consumer_groups.classic_members import decode_assignment
from millrace.gateway.kafka.consumer_groups.coordinator import HeartbeatRequest, HeartbeatResult
from millrace.gateway.kafka.consumer_groups.group import ConsumerGroup, ConsumerGroupState
from millrace.gateway.kafka.group_coordinator import GroupCoordinator
from millrace.gateway.kafka.group_store import GroupStore, OffsetAndMetadata
from millrace.gateway.kafka_protocol.codec import encode_message
from millrace.gateway.kafka_protocol.errors import ErrorCode as E
from millrace.gateway.kafka_protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
from millrace.gateway.kafka_protocol.messages.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from millrace.store.tables import TableStore
from tests.storehelpers import open_store

# -- assignors --------------------------------------------------------------------------------------

TOPIC_IDS = [uuid.UUID(int=i + 1) for i in range(4)]


@st.composite
def assignment_inputs(draw: Any, homogeneous: bool = False) -> tuple[dict[str, MemberSpec], dict[uuid.UUID, TopicSpec]]:
    topics = {t: TopicSpec(f"topic-{i}", draw(st.integers(0, 12))) for i, t in enumerate(TOPIC_IDS)}
    n = draw(st.integers(1, 7))
    common = frozenset(draw(st.sets(st.sampled_from(TOPIC_IDS), min_size=1)))
    members = {}
    for i in range(n):
        subscribed = common if homogeneous else frozenset(draw(st.sets(st.sampled_from(TOPIC_IDS))))
        # Current assignments may be stale: partitions of other topics, beyond the count, or shared.
        current = {t: frozenset(draw(st.sets(st.integers(0, 14), max_size=5)))
                   for t in draw(st.sets(st.sampled_from(TOPIC_IDS), max_size=2))}
        members[f"m{i}"] = MemberSpec(subscribed, current)
    return members, topics


def check_complete(members: dict[str, MemberSpec], topics: dict[uuid.UUID, TopicSpec],
                   result: dict[str, dict[uuid.UUID, frozenset[int]]]) -> None:
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for m, a in result.items():
        for t, ps in a.items():
            assert t in members[m].subscribed, "a member got a topic it does not subscribe to"
            for p in ps:
                assert 0 <= p < topics[t].partitions
                assert (t, p) not in owner, f"partition {t}-{p} assigned twice"
                owner[(t, p)] = m
    for t, spec in topics.items():
        if any(t in s.subscribed for s in members.values()):
            assert all((t, p) in owner for p in range(spec.partitions)), "a subscribed partition is unassigned"


def counts(result: dict[str, dict[uuid.UUID, frozenset[int]]]) -> list[int]:
    return [sum(len(ps) for ps in a.values()) for a in result.values()]


@settings(max_examples=300, deadline=None)
@given(assignment_inputs())
def test_uniform_assigns_every_subscribed_partition_once_and_is_stable(inputs: Any) -> None:
    members, topics = inputs
    result = uniform(members, topics)
    check_complete(members, topics, result)
    # Sticky: rerun on its own output with nothing changed, nothing moves.
    again = uniform({m: MemberSpec(s.subscribed, result[m]) for m, s in members.items()}, topics)
    assert again == result
    # No partition can move to an eligible member with two or more fewer.
    for src, a in result.items():
        for t in a:
            for dst, spec in members.items():
                if t in spec.subscribed:
                    assert counts({dst: result[dst]})[0] + 1 >= counts({src: a})[0]


@settings(max_examples=300, deadline=None)
@given(assignment_inputs(homogeneous=True))
def test_uniform_balances_identical_subscriptions_within_one(inputs: Any) -> None:
    members, topics = inputs
    result = uniform(members, topics)
    check_complete(members, topics, result)
    c = counts(result)
    assert max(c) - min(c) <= 1


@settings(max_examples=300, deadline=None)
@given(assignment_inputs())
def test_range_assigns_quotas_per_topic_and_is_stable(inputs: Any) -> None:
    members, topics = inputs
    result = range_(members, topics)
    check_complete(members, topics, result)
    for t in topics:
        subs = sorted(m for m, s in members.items() if t in s.subscribed)
        if subs:
            sizes = [len(result[m].get(t, ())) for m in subs]
            assert sorted(sizes, reverse=True)[0] - min(sizes) <= 1
    again = range_({m: MemberSpec(s.subscribed, result[m]) for m, s in members.items()}, topics)
    assert again == result


def test_range_gives_fresh_members_contiguous_co_partitioned_ranges() -> None:
    a, b = TOPIC_IDS[:2]
    topics = {a: TopicSpec("a", 7), b: TopicSpec("b", 7)}
    members = {m: MemberSpec(frozenset({a, b})) for m in ("m1", "m2", "m3")}
    result = range_(members, topics)
    assert result["m1"] == {a: frozenset({0, 1, 2}), b: frozenset({0, 1, 2})}
    assert result["m2"] == {a: frozenset({3, 4}), b: frozenset({3, 4})}
    assert result["m3"] == {a: frozenset({5, 6}), b: frozenset({5, 6})}


# -- the coordinator on a controlled clock ---------------------------------------------------------

@pytest.fixture
def tables(tmp_path: Any) -> Any:
    store = open_store(str(tmp_path))
    yield TableStore(store)
    store.close()


class Info:
    def __init__(self, name: str, topic_id: uuid.UUID, partitions: int) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partition_count = partitions


class Topics:
    def __init__(self, **partitions: int) -> None:
        self.infos = {n: Info(n, uuid.uuid5(uuid.NAMESPACE_DNS, n), c) for n, c in partitions.items()}
        self.listeners: list[Any] = []

    def get(self, name: str) -> Info | None:
        return self.infos.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Info | None:
        return next((i for i in self.infos.values() if i.topic_id == topic_id), None)

    def names(self) -> list[str]:
        return sorted(self.infos)

    def grow(self, name: str, partitions: int) -> None:
        self.infos[name] = Info(name, self.infos[name].topic_id, partitions)

    def id(self, name: str) -> uuid.UUID:
        return self.infos[name].topic_id


def blocking(fn: Any, *args: Any) -> Any:
    return maybeDeferred(fn, *args)


def make(tables: TableStore, topics: Topics | None = None, clock: Clock | None = None) -> tuple[GroupCoordinator, Clock]:
    clock = clock or Clock()
    # No initial rebalance delay, as in Kafka's own coordinator tests.
    config = KafkaConfig(group_initial_rebalance_delay_ms=0)
    coord = GroupCoordinator(config, GroupStore(tables, blocking), topics or Topics(t=6, u=3),
                             blocking, clock=clock)
    coord.load()
    return coord, clock


def group_of(coord: GroupCoordinator, group_id: str) -> ConsumerGroup:
    cg = coord.groups[group_id].consumer
    assert cg is not None
    return cg


def result_of(outcome: Any) -> Any:
    if isinstance(outcome, Deferred):
        box: list[Any] = []
        outcome.addBoth(box.append)
        assert box, "the answer did not come (a table write is synchronous here)"
        return box[0]
    return outcome


def beat(coord: GroupCoordinator, group: str, member_id: str, epoch: int, *, names: list[str] | None = None,
         regex: str | None = None, owned: dict[uuid.UUID, frozenset[int]] | None = None, instance: str | None = None,
         rebalance: int = -1, assignor: str | None = None, version: int = 1) -> HeartbeatResult:
    if epoch == 0:
        owned = owned if owned is not None else {}
        rebalance = rebalance if rebalance != -1 else 30_000
    req = HeartbeatRequest(group, member_id, epoch, instance, None, rebalance, names, regex, assignor, owned)
    out = result_of(coord.consumer.heartbeat(req, version, "client", "/127.0.0.1"))
    assert isinstance(out, HeartbeatResult)
    return out


class Client:
    """A consumer as the protocol sees it: it takes new partitions at once, but partitions taken away
    stay its own until its next heartbeat (a real consumer commits and runs its rebalance listener
    first); every heartbeat reports what it owns."""

    def __init__(self, coord: GroupCoordinator, group: str, member_id: str, names: list[str],
                 assignor: str | None = None, instance: str | None = None) -> None:
        self.coord, self.group, self.member_id, self.names = coord, group, member_id, names
        self.assignor, self.instance = assignor, instance
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.releasing: dict[uuid.UUID, frozenset[int]] = {}  # revoked, not yet released

    def heartbeat(self) -> HeartbeatResult:
        self.releasing = {}  # released now, and the heartbeat says so
        joining = self.epoch == 0
        r = beat(self.coord, self.group, self.member_id, self.epoch, names=self.names if joining else None,
                 owned=dict(self.owned), instance=self.instance, assignor=self.assignor if joining else None)
        assert r.error is E.NONE, r
        self.epoch = r.member_epoch
        if r.assignment is not None:
            new = {t: ps for t, ps in r.assignment.items() if ps}
            self.releasing = {t: ps - new.get(t, frozenset()) for t, ps in self.owned.items()}
            self.owned = new
        return r

    def leave(self) -> HeartbeatResult:
        r = beat(self.coord, self.group, self.member_id, -1, instance=self.instance)
        self.owned = {}
        self.releasing = {}
        return r


def owned_partitions(clients: list[Client]) -> list[tuple[uuid.UUID, int]]:
    return [(t, p) for c in clients for part in (c.owned, c.releasing) for t, ps in part.items() for p in ps]


def settle(clients: list[Client], rounds: int = 6) -> None:
    for _ in range(rounds):
        for c in clients:
            c.heartbeat()
            owned = owned_partitions(clients)
            assert len(owned) == len(set(owned)), "a partition is owned by two members"


ops = st.lists(st.one_of(
    st.tuples(st.just("join"), st.integers(0, 5)),
    st.tuples(st.just("leave"), st.integers(0, 5)),
    st.tuples(st.just("beat"), st.integers(0, 5)),
    st.tuples(st.just("grow"), st.integers(1, 4)),
), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops, st.sampled_from(["uniform", "range"]))
def test_no_partition_is_ever_owned_twice_and_the_group_converges(tables: TableStore, steps: list[Any],
                                                                   assignor: str) -> None:
    topics = Topics(t=4, u=2)
    coord, _ = make(tables, topics)
    group = f"g-{uuid.uuid4().hex[:8]}"
    clients: dict[int, Client] = {}
    for op, arg in steps:
        if op == "join" and arg not in clients:
            clients[arg] = Client(coord, group, f"member-{arg}", ["t", "u"], assignor)
            clients[arg].heartbeat()
        elif op == "leave" and arg in clients:
            clients.pop(arg).leave()
        elif op == "beat" and arg in clients:
            clients[arg].heartbeat()
        elif op == "grow":
            topics.grow("t", topics.infos["t"].partition_count + arg)
        owned = owned_partitions(list(clients.values()))
        assert len(owned) == len(set(owned)), "a partition is owned by two members"
    settle(list(clients.values()))
    if group not in coord.groups:
        assert not clients
        return
    cg = coord.groups[group].consumer
    assert cg is not None
    if clients:
        assert cg.state() is ConsumerGroupState.STABLE
        owned = owned_partitions(list(clients.values()))
        total = sum(i.partition_count for i in topics.infos.values())
        assert sorted(owned) == sorted({(i.topic_id, p) for i in topics.infos.values()
                                        for p in range(i.partition_count)}) and len(owned) == total
        assert all(c.epoch == cg.group_epoch for c in clients.values())
    else:
        assert cg.state() is ConsumerGroupState.EMPTY


def test_revocation_comes_before_assignment_to_the_new_owner(tables: TableStore) -> None:
    coord, _ = make(tables, Topics(t=2))
    a = Client(coord, "g", "a", ["t"])
    a.heartbeat()
    assert sum(len(p) for p in a.owned.values()) == 2 and a.epoch == 1
    b = Client(coord, "g", "b", ["t"])
    r = b.heartbeat()
    # The group moved to epoch 2, but b must wait: a still owns what b is to get.
    assert r.member_epoch == 2 and r.assignment == {}
    assert group_of(coord, "g").state() is ConsumerGroupState.RECONCILING
    r = a.heartbeat()  # a learns it must give one partition up, staying at epoch 1
    assert r.member_epoch == 1 and sum(len(p) for p in a.owned.values()) == 1
    r = b.heartbeat()  # a has not confirmed yet: b still gets nothing
    assert not b.owned
    a.heartbeat()  # a confirms (its owned no longer includes the partition) and moves to epoch 2
    assert a.epoch == 2
    b.heartbeat()
    assert sum(len(p) for p in b.owned.values()) == 1
    assert group_of(coord, "g").state() is ConsumerGroupState.STABLE


def test_request_validation_as_kafka_answers(tables: TableStore) -> None:
    coord, _ = make(tables)
    assert beat(coord, "", "m", 0, names=["t"]).error is E.INVALID_REQUEST
    assert beat(coord, "g", "", 0, names=["t"]).error is E.INVALID_REQUEST  # v1 needs a member id
    assert beat(coord, "g", "", 0, names=["t"], version=0).error is E.NONE  # v0: the coordinator makes one
    r = beat(coord, "g", "m", 0)
    assert r.error is E.INVALID_REQUEST and "SubscribedTopicNames" in (r.message or "")
    assert beat(coord, "g", "m", 0, names=["t"], assignor="sticky").error is E.UNSUPPORTED_ASSIGNOR
    assert beat(coord, "g", "m", 0, regex="(unclosed").error is E.INVALID_REQUEST
    assert beat(coord, "g", "nobody", 3).error is E.UNKNOWN_MEMBER_ID
    assert beat(coord, "g", "m", -2).error is E.INVALID_REQUEST  # a static leave needs the instance id


def test_epoch_fencing_accepts_only_the_previous_epoch_with_a_subset(tables: TableStore) -> None:
    coord, _ = make(tables)
    r = beat(coord, "g", "m", 0, names=["t"])
    assert r.member_epoch == 1
    assert beat(coord, "g", "m", 5).error is E.FENCED_MEMBER_EPOCH
    beat(coord, "g", "n", 0, names=["t"])  # epoch 2: m must release half
    r = beat(coord, "g", "m", 1, owned=r.assignment)
    kept = r.assignment
    assert r.member_epoch == 1
    r = beat(coord, "g", "m", 1, owned=kept)
    assert r.member_epoch == 2
    # It missed that answer: the previous epoch with owned within its assignment is accepted...
    assert beat(coord, "g", "m", 1, owned=kept).error is E.NONE
    # ...but not with partitions it no longer has, nor an older epoch.
    all_t = {Topics(t=6).id("t"): frozenset(range(6))}
    assert beat(coord, "g", "m", 1, owned=all_t).error is E.FENCED_MEMBER_EPOCH
    assert beat(coord, "g", "m", 0, names=["t"]).error is E.NONE  # a rejoin with epoch 0 is always fine


def test_a_member_that_does_not_revoke_in_time_is_fenced(tables: TableStore) -> None:
    coord, clock = make(tables, Topics(t=2))
    a = Client(coord, "g", "a", ["t"])
    a.heartbeat()
    b = Client(coord, "g", "b", ["t"])
    b.heartbeat()
    beat(coord, "g", "a", a.epoch, rebalance=5_000, owned=dict(a.owned))  # told to revoke, never confirms
    clock.advance(4.9)
    assert "a" in group_of(coord, "g").members
    clock.advance(0.2)
    assert "a" not in group_of(coord, "g").members
    assert beat(coord, "g", "a", a.epoch).error is E.UNKNOWN_MEMBER_ID
    b.heartbeat()
    assert sum(len(p) for p in b.owned.values()) == 2


def test_session_expiry_removes_a_silent_member(tables: TableStore) -> None:
    coord, clock = make(tables, Topics(t=2))
    a, b = Client(coord, "g", "a", ["t"]), Client(coord, "g", "b", ["t"])
    a.heartbeat()
    b.heartbeat()
    for _ in range(10):
        clock.advance(10)
        b.heartbeat()
    assert "a" not in group_of(coord, "g").members
    settle([b])
    assert sum(len(p) for p in b.owned.values()) == 2


def test_static_member_keeps_its_partitions_across_a_temporary_leave(tables: TableStore) -> None:
    coord, clock = make(tables, Topics(t=4))
    a = Client(coord, "g", "a1", ["t"], instance="inst-a")
    b = Client(coord, "g", "b", ["t"])
    a.heartbeat()
    b.heartbeat()
    settle([a, b])
    mine = a.owned
    epoch = group_of(coord, "g").group_epoch
    assert beat(coord, "g", "a1", -2, instance="inst-a").member_epoch == -2
    # Another incarnation while it is away takes its place without a new group epoch.
    a2 = Client(coord, "g", "a2", ["t"], instance="inst-a")
    a2.heartbeat()
    assert a2.owned == mine and group_of(coord, "g").group_epoch == epoch
    # The same incarnation may also come back after a temporary leave.
    assert beat(coord, "g", "a2", -2, instance="inst-a").member_epoch == -2
    a2.epoch, a2.owned = 0, {}  # a rejoining member owns nothing
    a2.heartbeat()
    assert a2.owned == mine and a2.epoch == epoch
    # A second live incarnation of the same instance is refused.
    assert beat(coord, "g", "a3", 0, names=["t"], instance="inst-a").error is E.UNRELEASED_INSTANCE_ID
    assert beat(coord, "g", "a1", 3, instance="inst-a").error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID)


def test_regex_subscription_and_new_partitions_bump_the_group_epoch(tables: TableStore) -> None:
    topics = Topics(**{"orders-eu": 2, "orders-us": 2, "audit": 1})
    coord, _ = make(tables, topics)
    a = Client(coord, "g", "a", [])
    r = beat(coord, "g", "a", 0, regex="orders-.*")
    assert r.assignment is not None
    a.epoch, a.owned = r.member_epoch, r.assignment
    assert {t for t in a.owned} == {topics.id("orders-eu"), topics.id("orders-us")}
    epoch = group_of(coord, "g").group_epoch
    topics.grow("orders-eu", 4)
    r = a.heartbeat()
    assert group_of(coord, "g").group_epoch == epoch + 1
    assert a.owned[topics.id("orders-eu")] == frozenset(range(4))
    topics.infos["orders-ap"] = Info("orders-ap", uuid.uuid4(), 1)
    a.heartbeat()
    assert topics.id("orders-ap") in a.owned


def test_offsets_of_consumer_groups_check_the_member_epoch(tables: TableStore) -> None:
    coord, _ = make(tables)
    r = beat(coord, "g", "m", 0, names=["t"])
    om = {("t", 0): OffsetAndMetadata(5)}
    assert result_of(coord.offsets.commit_offsets("g", "m", None, r.member_epoch, om, 9)) == {("t", 0): E.NONE}
    assert result_of(coord.offsets.commit_offsets("g", "m", None, r.member_epoch + 1, om, 9)) == {("t", 0): E.STALE_MEMBER_EPOCH}
    assert result_of(coord.offsets.commit_offsets("g", "x", None, r.member_epoch, om, 9)) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert result_of(coord.offsets.commit_offsets("g", "m", None, r.member_epoch, om, 8)) == {("t", 0): E.UNSUPPORTED_VERSION}
    assert result_of(coord.offsets.commit_offsets("g", "", None, -1, om, 9)) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert coord.offsets.fetch_offsets("g", None, "m", r.member_epoch) == (E.NONE, om)
    assert coord.offsets.fetch_offsets("g", None, "m", 7)[0] is E.STALE_MEMBER_EPOCH
    assert coord.offsets.fetch_offsets("g", None, "nobody", 1)[0] is E.UNKNOWN_MEMBER_ID
    assert coord.offsets.fetch_offsets("g", None)[0] is E.NONE
    # Classic APIs see it as a consumer group.
    assert coord.list_groups()[1][0].group_type == "consumer"
    assert coord.list_groups(types=["classic"])[1] == []
    assert coord.describe_group("g")[0] is E.GROUP_ID_NOT_FOUND
    joined: list[JoinResult] = []
    coord.membership.join_group("g", "", None, False, False, "c", "/h", 10_000, 10_000, "consumer",
                     [("range", b"")]).addCallback(joined.append)
    assert joined[0].error is E.INCONSISTENT_GROUP_PROTOCOL
    assert result_of(coord.delete_groups(["g"])) == {"g": E.NON_EMPTY_GROUP}
    beat(coord, "g", "m", -1)
    assert coord.list_groups()[1][0].state == "Empty"
    assert result_of(coord.offsets.commit_offsets("g", "", None, -1, om, 9)) == {("t", 0): E.NONE}
    assert result_of(coord.delete_groups(["g"])) == {"g": E.NONE}
    assert coord.consumer.describe("g")[0] is E.GROUP_ID_NOT_FOUND


def test_a_commit_at_an_older_epoch_is_accepted_for_partitions_held_since(tables: TableStore) -> None:
    topics = Topics(t=2)
    coord, _ = make(tables, topics)
    a, b = Client(coord, "g", "a", ["t"]), Client(coord, "g", "b", ["t"])
    a.heartbeat()
    b.heartbeat()
    a.heartbeat()  # told to give one up, still at epoch 1
    a.heartbeat()  # released it: epoch 2
    assert a.epoch == 2
    (kept,) = a.owned[topics.id("t")]
    lost = 1 - kept
    both = {("t", kept): OffsetAndMetadata(1), ("t", lost): OffsetAndMetadata(1)}
    # The answer that moved a to epoch 2 may cross a commit made at epoch 1.
    assert result_of(coord.offsets.commit_offsets("g", "a", None, 1, both, 9)) == {
        ("t", kept): E.NONE, ("t", lost): E.STALE_MEMBER_EPOCH}
    b.leave()
    a.heartbeat()  # gets the other partition back at epoch 3
    assert a.epoch == 3 and a.owned[topics.id("t")] == frozenset({0, 1})
    assert result_of(coord.offsets.commit_offsets("g", "a", None, 2, both, 9)) == {
        ("t", kept): E.NONE, ("t", lost): E.STALE_MEMBER_EPOCH}
    assert result_of(coord.offsets.commit_offsets("g", "a", None, 3, both, 9)) == dict.fromkeys(both, E.NONE)
    assert result_of(coord.offsets.commit_offsets("g", "a", None, 4, both, 9)) == dict.fromkeys(both, E.STALE_MEMBER_EPOCH)


def test_empty_classic_group_upgrades_and_empty_consumer_group_downgrades(tables: TableStore) -> None:
    coord, _ = make(tables)
    joined: list[JoinResult] = []
    coord.membership.join_group("g", "", None, False, False, "c", "/h", 10_000, 10_000, "consumer",
                     [("range", b"")]).addCallback(joined.append)
    coord.clock.advance(0.1)
    assert joined and joined[0].error is E.NONE
    member, generation = joined[0].member_id, joined[0].generation_id
    assert result_of(coord.membership.sync_group("g", generation, member, None, None, None, {member: b""})).error is E.NONE
    assert result_of(coord.offsets.commit_offsets("g", member, None, generation, {("t", 1): OffsetAndMetadata(42)}, 8)
                     ) == {("t", 1): E.NONE}
    assert coord.membership.leave_group("g", [(joined[0].member_id, None)])[1] == [E.NONE]
    r = beat(coord, "g", "m", 0, names=["t"])
    assert r.error is E.NONE and r.member_epoch == 1
    assert coord.offsets.fetch_offsets("g", [("t", 1)], "m", 1)[1][("t", 1)].offset == 42  # offsets kept
    beat(coord, "g", "m", -1)
    joined.clear()
    coord.membership.join_group("g", "", None, False, False, "c", "/h", 10_000, 10_000, "consumer",
                     [("range", b"")]).addCallback(joined.append)
    coord.clock.advance(0.1)
    assert joined[0].error is E.NONE and coord.groups["g"].consumer is None


def subscription(topics: list[str], owned: dict[str, list[int]] | None = None) -> bytes:
    sub = ConsumerProtocolSubscription(topics=topics, owned_partitions=[
        ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=ps) for t, ps in (owned or {}).items()])
    return struct.pack(">h", 1) + encode_message(ConsumerProtocolSubscription, 1, sub)


def assignment_bytes(partitions: dict[str, list[int]]) -> bytes:
    a = ConsumerProtocolAssignment(assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in partitions.items()])
    return struct.pack(">h", 0) + encode_message(ConsumerProtocolAssignment, 0, a)


def partitions_of(data: bytes) -> dict[str, set[int]]:
    a = decode_assignment(data)
    assert a is not None
    return {tp.topic: set(tp.partitions) for tp in a.assigned_partitions}


def classic_join(coord: GroupCoordinator, member_id: str, sub: bytes, protocol_type: str = "consumer") -> JoinResult:
    out: list[JoinResult] = []
    coord.membership.join_group("g", member_id, None, False, True, "classic", "/h", 10_000, 10_000, protocol_type,
                     [("range", sub)]).addCallback(out.append)
    coord.clock.advance(0.1)
    assert out
    return out[0]


def stable_classic_group(coord: GroupCoordinator, protocol_type: str = "consumer") -> tuple[str, int]:
    j = classic_join(coord, "", subscription(["t"]), protocol_type)
    assert j.error is E.NONE
    sync = result_of(coord.membership.sync_group("g", j.generation_id, j.member_id, None, None, None,
                                      {j.member_id: assignment_bytes({"t": list(range(6))})}))
    assert sync.error is E.NONE
    return j.member_id, j.generation_id


@pytest.mark.parametrize("cooperative", [False, True])
def test_online_upgrade_of_a_classic_group_with_members(tables: TableStore, cooperative: bool) -> None:
    coord, _ = make(tables)
    tid = Topics(t=6).id("t")
    classic, generation = stable_classic_group(coord)
    result_of(coord.offsets.commit_offsets("g", classic, None, generation, {("t", 0): OffsetAndMetadata(5)}, 8))
    m = Client(coord, "g", "m", ["t"])
    m.heartbeat()  # the group is upgraded; everything is still the classic member's
    cg = group_of(coord, "g")
    assert cg.members[classic].epoch == generation and cg.members[classic].classic is not None
    assert not m.owned and m.epoch == generation + 1
    assert coord.list_groups()[1][0].group_type == "consumer"
    assert coord.offsets.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 5  # offsets kept
    # The classic member learns of the new epoch from its heartbeat and rejoins.
    assert coord.membership.heartbeat("g", classic, None, generation) is E.REBALANCE_IN_PROGRESS
    owned = {"t": list(range(6))} if cooperative else {}  # eager clients revoke everything first
    j = classic_join(coord, classic, subscription(["t"], owned))
    assert (j.error, j.leader_id, j.members, j.protocol_name) == (E.NONE, "", [], "range")
    if cooperative:
        assert j.generation_id == generation  # still revoking at its epoch
        sync = result_of(coord.membership.sync_group("g", j.generation_id, classic, None, "consumer", "range", {}))
        kept = partitions_of(sync.assignment)["t"]
        assert len(kept) == 3
        m.heartbeat()
        assert not m.owned  # the cooperative member has not released them yet
        assert coord.membership.heartbeat("g", classic, None, generation) is E.REBALANCE_IN_PROGRESS
        j = classic_join(coord, classic, subscription(["t"], {"t": sorted(kept)}))
    assert j.generation_id == generation + 1
    sync = result_of(coord.membership.sync_group("g", j.generation_id, classic, None, "consumer", "range", {}))
    assert sync.error is E.NONE
    mine = partitions_of(sync.assignment)["t"]
    m.heartbeat()
    assert len(mine) == 3 and m.owned == {tid: frozenset(range(6)) - mine}
    assert coord.membership.heartbeat("g", classic, None, j.generation_id) is E.NONE
    assert coord.membership.heartbeat("g", classic, None, generation) is E.ILLEGAL_GENERATION
    om = {("t", min(mine)): OffsetAndMetadata(9)}
    assert result_of(coord.offsets.commit_offsets("g", classic, None, j.generation_id, om, 8)) == dict.fromkeys(om, E.NONE)
    assert result_of(coord.offsets.commit_offsets("g", classic, None, generation, om, 8)) == dict.fromkeys(
        om, E.ILLEGAL_GENERATION)
    assert coord.membership.leave_group("g", [(classic, None)]) == (E.NONE, [E.NONE])
    m.heartbeat()
    assert m.owned == {tid: frozenset(range(6))}


def test_online_downgrade_when_the_last_consumer_protocol_member_leaves(tables: TableStore) -> None:
    coord, _ = make(tables)
    classic, generation = stable_classic_group(coord)
    m = Client(coord, "g", "m", ["t"])
    m.heartbeat()
    assert coord.membership.heartbeat("g", classic, None, generation) is E.REBALANCE_IN_PROGRESS
    j = classic_join(coord, classic, subscription(["t"]))
    result_of(coord.membership.sync_group("g", j.generation_id, classic, None, "consumer", "range", {}))
    m.heartbeat()
    m.leave()
    # Only the classic member is left: a classic group again, which rebalances.
    shell = coord.groups["g"]
    assert shell.consumer is None and shell.state.value == "PreparingRebalance"
    assert coord.list_groups()[1][0].group_type == "classic"
    assert coord.membership.heartbeat("g", classic, None, j.generation_id) is E.REBALANCE_IN_PROGRESS
    j2 = classic_join(coord, classic, subscription(["t"]))
    assert (j2.error, j2.generation_id, j2.leader_id) == (E.NONE, j.generation_id + 1, classic)
    sync = result_of(coord.membership.sync_group("g", j2.generation_id, classic, None, "consumer", "range",
                                      {classic: assignment_bytes({"t": list(range(6))})}))
    assert sync.error is E.NONE and coord.describe_group("g")[1].state == "Stable"
    # Restarted, it is still the classic group.
    coord.shutdown()
    again, _ = make(tables)
    assert again.groups["g"].consumer is None and classic in again.groups["g"].members


def test_classic_groups_of_other_protocols_are_not_upgraded(tables: TableStore) -> None:
    coord, _ = make(tables)
    stable_classic_group(coord, protocol_type="connect")
    r = beat(coord, "g", "m", 0, names=["t"])
    assert r.error is E.GROUP_ID_NOT_FOUND and r.message == "Group g is not a consumer group."


def test_consumer_groups_survive_a_restart(tables: TableStore) -> None:
    topics = Topics(t=4)
    coord, _ = make(tables, topics)
    a, b = Client(coord, "g", "a", ["t"], "range"), Client(coord, "g", "b", ["t"], "range")
    a.heartbeat()
    b.heartbeat()
    a.heartbeat()  # a is told to revoke
    before = group_of(coord, "g")
    coord.shutdown()
    again, _ = make(tables, topics)
    after = again.groups["g"].consumer
    assert after is not None and after.encode() == before.encode()
    assert after.partition_epochs == before.partition_epochs and after.assignor == "range"
    a.coord = b.coord = again
    settle([a, b])
    assert after.state() is ConsumerGroupState.STABLE
